//! Tino's smon stream: `[[smon]]` blocks, each a stream read over TCP or from a file followed as it grows.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use telemon_capture::{Connection, ReplayStream};

use super::{Address, BoxFuture, Carry, Component, Headline, Start, Unit};
use crate::config::block::{check_connect, check_target, labels};
use crate::config::document::{Block, ConfigError};
use crate::model::TargetSnapshot;
use crate::target::{Failure, Publisher};

mod collect;

pub use collect::{collect, Source, FOLLOW_POLL};

/// The protocol's name.
pub const NAME: &str = "smon";

/// The smon stream, as a fleet component.
#[derive(Debug, Clone, Copy)]
pub struct Smon;

/// `[[smon]]`: a smon stream, by TCP or from a file followed as it grows.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SmonBlock {
    /// Unique target name.
    pub name: String,
    /// Stream address.
    pub connect: Option<String>,
    /// Stream file.
    pub file: Option<PathBuf>,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Component for Smon {
    fn sniff(&self, first: &[u8]) -> Option<bool> {
        smon_codec::sniff(first)
    }

    fn peer(&self) -> &'static str {
        "an smon stream"
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn sections(&self) -> &'static [&'static str] {
        &["smon"]
    }

    fn link_type(&self) -> u16 {
        telemon_capture::link_type::SMON
    }

    fn read(&self, _section: &str, block: &Block<'_>) -> Result<Arc<dyn Unit>, ConfigError> {
        let mut b: SmonBlock = block.read()?;
        check_target(block, &b.name, &b.labels)?;
        if b.connect.is_some() == b.file.is_some() {
            return Err(block.error("connect", "give exactly one of `connect` or `file`"));
        }
        if b.connect.is_some() {
            b.connect = Some(check_connect(block, b.connect.as_deref(), smon_codec::DEFAULT_PORT)?);
        }
        Ok(Arc::new(b))
    }

    fn address(&self) -> Option<Address> {
        Some(Address::connect(smon_codec::DEFAULT_PORT))
    }

    fn replay<'a>(
        &'a self,
        p: &'a mut Publisher,
        _connection: &'a Connection,
        stream: ReplayStream,
    ) -> BoxFuture<'a, Failure> {
        let reader = smon_codec::UpdateReader::new(stream, smon_codec::DecoderConfig::default());
        Box::pin(collect(p, reader))
    }

    /// CPU busy (from the CPU counters of two calls) and memory used.
    fn headlines<'a>(&self, t: &'a TargetSnapshot, carry: &mut Carry) -> Vec<Headline<'a>> {
        let ((idle, total), mem_total, avail) = figures(t);
        let busy = match carry.0.replace((idle, total)) {
            Some((i0, t0)) if total > t0 => Some(1.0 - (idle - i0) / (total - t0)),
            _ => None,
        };
        let used = mem_total.zip(avail).map(|(total, avail)| total - avail);
        vec![
            Headline::derived("CPU busy", "ratio", "=cpu_busy", busy),
            Headline::derived("memory used", "B", "=mem_used", used),
        ]
    }
}

/// smon's figures for the headlines, in one pass over its values: the CPU counters (idle and iowait,
/// all) and memory (total, available). Only the series whose label text names `linux.cpu.` or
/// `linux.mem.` have their labels read.
pub fn figures(t: &TargetSnapshot) -> ((f64, f64), Option<f64>, Option<f64>) {
    let (mut idle, mut total, mut mem_total, mut avail) = (0.0, 0.0, None, None);
    for s in t.series.family("smon_value") {
        let text = s.label_text();
        if !text.contains("linux.cpu.") && !text.contains("linux.mem.") {
            continue;
        }
        let name = s.label("name");
        let v = s.number().unwrap_or(0.0);
        if name.starts_with("linux.cpu.") {
            total += v;
            if name == "linux.cpu.idle" || name == "linux.cpu.iowait" {
                idle += v;
            }
        } else if name == "linux.mem.total" {
            mem_total = Some(v);
        } else if name == "linux.mem.available" {
            avail = Some(v);
        }
    }
    ((idle, total), mem_total, avail)
}

impl Unit for SmonBlock {
    fn name(&self) -> &str {
        &self.name
    }

    fn same(&self, other: &dyn Unit) -> bool {
        super::same_as(self, other)
    }

    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>> {
        let p = ctx.publisher(&self.name, &Smon, labels(&self.labels));
        let source = match (&self.connect, &self.file) {
            (Some(a), _) => Source::Connect(a.clone()),
            (None, f) => Source::File(f.clone().unwrap_or_default()),
        };
        Box::pin(async move { Ok(Box::pin(collect::run(p, source)) as BoxFuture<'static, ()>) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
