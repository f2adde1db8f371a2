//! The Mono counters agent: `[[mono_listen]]` blocks, where agents dial in, each agent a target named
//! `NAME/HOST:PORT`.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use telemon_capture::{Connection, ReplayStream};

use super::{BoxFuture, Carry, Component, Headline, Start, Unit};
use crate::collect::dialin::ListenerLimits;
use crate::config::block::{check_listener, check_target, opt_duration};
use crate::config::document::{Block, ConfigError};
use crate::model::{MetricKind, SeriesRef, TargetSnapshot};
use crate::target::{Failure, Publisher};
use crate::DIAL_IN_LINGER;

mod collect;

/// The protocol's name.
pub const NAME: &str = "mono";

/// The Mono counters agent, as a fleet component.
#[derive(Debug, Clone, Copy)]
pub struct Mono;

/// `[[mono_listen]]`: Mono agents dial in; each agent is a target.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MonoBlock {
    /// Unique block name: the first part of its agents' names.
    pub name: String,
    /// Listen address.
    pub listen: String,
    /// Counters added to every agent, e.g. `Mono System/Working Set`.
    #[serde(default)]
    pub add: Vec<String>,
    /// The most targets kept (live and remembered).
    pub max_targets: Option<usize>,
    /// The source networks accepted (`"10.0.0.0/8"`, `"127.0.0.1"`; default: any).
    pub allow: Option<Vec<String>>,
    /// How long a new connection may take to send its Hello.
    #[serde(default, deserialize_with = "opt_duration")]
    pub hello_timeout: Option<Duration>,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl MonoBlock {
    /// The listener bounds of the block (checked with the config).
    pub fn listener_limits(&self) -> ListenerLimits {
        ListenerLimits::new(self.max_targets, self.allow.as_deref(), self.hello_timeout).unwrap_or_default()
    }
}

impl Component for Mono {
    fn sniff(&self, first: &[u8]) -> Option<bool> {
        mono_counters::sniff(first)
    }

    fn peer(&self) -> &'static str {
        "a Mono counters agent"
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn sections(&self) -> &'static [&'static str] {
        &["mono_listen"]
    }

    fn link_type(&self) -> u16 {
        telemon_capture::link_type::MONO
    }

    fn read(&self, _section: &str, block: &Block<'_>) -> Result<Arc<dyn Unit>, ConfigError> {
        let b: MonoBlock = block.read()?;
        check_target(block, &b.name, &b.labels)?;
        check_listener(block, Some(&b.listen), b.max_targets, b.allow.as_deref(), b.hello_timeout)?;
        if let Some(bad) = b.add.iter().find(|c| mono_counters::CounterName::parse(c).is_none()) {
            return Err(block.error("add", format!("{bad:?} is not \"Category/Name\"")));
        }
        Ok(Arc::new(b))
    }

    fn replay<'a>(
        &'a self,
        p: &'a mut Publisher,
        _connection: &'a Connection,
        stream: ReplayStream,
    ) -> BoxFuture<'a, Failure> {
        // The recorded Hello, samples and responses; the requests the live inspector made are not repeated.
        Box::pin(collect::over(p, stream))
    }

    fn headlines<'a>(&self, t: &'a TargetSnapshot, _carry: &mut Carry) -> Vec<Headline<'a>> {
        t.series
            .iter()
            .filter(|s| s.family().starts_with("mono_runtime") && plotted(s))
            .take(2)
            .map(|s| Headline::series(s.label("counter"), Some(s)))
            .collect()
    }
}

/// Whether a view can plot `s` now: a counter with a rate, a gauge with a value.
fn plotted(s: &SeriesRef<'_>) -> bool {
    match s.kind() {
        MetricKind::Counter => s.rate().is_some(),
        MetricKind::Gauge => s.number().is_some(),
        MetricKind::Info | MetricKind::Histogram => false,
    }
}

impl Unit for MonoBlock {
    fn name(&self) -> &str {
        &self.name
    }

    fn sharded(&self) -> bool {
        false
    }

    fn binds(&self) -> Option<&str> {
        Some(&self.listen)
    }

    fn same(&self, other: &dyn Unit) -> bool {
        super::same_as(self, other)
    }

    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>> {
        Box::pin(async move {
            let accept = collect::listen(ctx, self, DIAL_IN_LINGER).await.map_err(|e| {
                std::io::Error::new(e.kind(), format!("[[mono_listen]] {}: cannot listen: {e}", self.name))
            })?;
            Ok(Box::pin(accept) as BoxFuture<'static, ()>)
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
