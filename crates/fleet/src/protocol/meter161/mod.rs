//! System/161 metering: `[[meter161]]` blocks, each one simulator's directory (`dir`) or every simulator
//! under a glob of them (`dir_glob`), collected over the Unix socket `DIR/.sockets/meter`.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use telemon_capture::{Connection, ReplayStream};

use super::{Address, BoxFuture, Carry, Component, Headline, Start, Unit};
use crate::config::block::{check_target, duration, labels, one_second};
use crate::config::document::{Block, ConfigError};
use crate::model::{ErrorKind, TargetSnapshot};
use crate::target::{Failure, Publisher};
use crate::GLOB_RESCAN;

mod collect;

pub use collect::{collect, record, Fields};

/// The protocol's name.
pub const NAME: &str = "meter161";

/// System/161 metering, as a fleet component.
#[derive(Debug, Clone, Copy)]
pub struct Meter161;

/// `[[meter161]]`: a System/161 meter socket directory, or a glob of them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Meter161Block {
    /// Unique target name (a glob's: the first part of its matches' names).
    pub name: String,
    /// The directory holding `.sockets/meter`.
    pub dir: Option<PathBuf>,
    /// A glob of such directories, e.g. `/home/*/os161/root`.
    pub dir_glob: Option<String>,
    /// Sampling interval sent to sys161.
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub interval: Duration,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Component for Meter161 {
    fn sniff(&self, first: &[u8]) -> Option<bool> {
        meter161::sniff(first)
    }

    fn peer(&self) -> &'static str {
        "a System/161 meter socket"
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn sections(&self) -> &'static [&'static str] {
        &["meter161"]
    }

    fn link_type(&self) -> u16 {
        telemon_capture::link_type::METER161
    }

    fn read(&self, _section: &str, block: &Block<'_>) -> Result<Arc<dyn Unit>, ConfigError> {
        let b: Meter161Block = block.read()?;
        check_target(block, &b.name, &b.labels)?;
        if b.dir.is_some() == b.dir_glob.is_some() {
            return Err(block.error("dir", "give exactly one of `dir` or `dir_glob`"));
        }
        if let Some(Err(e)) = b.dir_glob.as_deref().map(glob::Pattern::new) {
            return Err(block.error("dir_glob", format!("not a glob: {e}")));
        }
        if meter161::interval_ns(b.interval).is_err() {
            let (min, max) = (meter161::MIN_INTERVAL_NS, meter161::MAX_INTERVAL_NS);
            let written = block
                .written("interval")
                .unwrap_or_else(|| humantime::format_duration(b.interval).to_string());
            let message = format!(
                "{written} is outside {}..{} (what sys161 takes)",
                humantime::format_duration(Duration::from_nanos(min)),
                humantime::format_duration(Duration::from_nanos(max))
            );
            return Err(block.error("interval", message));
        }
        Ok(Arc::new(b))
    }

    fn address(&self) -> Option<Address> {
        Some(Address { key: "dir", default_port: None })
    }

    fn replay<'a>(
        &'a self,
        p: &'a mut Publisher,
        _connection: &'a Connection,
        stream: ReplayStream,
    ) -> BoxFuture<'a, Failure> {
        Box::pin(async move {
            let config = meter161::ClientConfig::default().reconnect(false);
            match meter161::Client::over(stream, &config).await {
                Ok(client) => collect(p, client).await,
                Err(e) => Failure::new(ErrorKind::Protocol, e),
            }
        })
    }

    fn headlines<'a>(&self, t: &'a TargetSnapshot, _carry: &mut Carry) -> Vec<Headline<'a>> {
        vec![
            Headline::series("kernel instr/s", t.series.family("sys161_kernel_instructions_total").next()),
            Headline::series("user instr/s", t.series.family("sys161_user_instructions_total").next()),
        ]
    }
}

impl Unit for Meter161Block {
    fn name(&self) -> &str {
        &self.name
    }

    /// A glob shards the simulators it finds; a directory is a target.
    fn sharded(&self) -> bool {
        self.dir_glob.is_none()
    }

    fn same(&self, other: &dyn Unit) -> bool {
        super::same_as(self, other)
    }

    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>> {
        let task: BoxFuture<'static, ()> = match (&self.dir, &self.dir_glob) {
            (Some(dir), _) => {
                let p = ctx.publisher(&self.name, &Meter161, labels(&self.labels));
                Box::pin(collect::run(p, dir.clone(), self.interval))
            }
            (None, pattern) => {
                let glob = collect::Glob {
                    name: self.name.clone(),
                    pattern: pattern.clone().unwrap_or_default(),
                    labels: labels(&self.labels),
                    interval: self.interval,
                };
                Box::pin(collect::run_glob(ctx.clone(), glob, GLOB_RESCAN))
            }
        };
        Box::pin(async move { Ok(task) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
