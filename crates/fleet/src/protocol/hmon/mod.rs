//! Dyalog APL's Health Monitor: `[[hmon]]` blocks (SERVE mode: telemon connects to an interpreter) and
//! `[[hmon_listen]]` blocks (POLL mode: interpreters dial in, each a target).

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use telemon_capture::{Connection, ReplayStream};

use super::{Address, BoxFuture, Carry, Component, Headline, Start, Unit};
use crate::collect::dialin::ListenerLimits;
use crate::config::block::{
    check_connect, check_listener, check_target, duration, labels, one_second, opt_duration,
};
use crate::config::document::{Block, ConfigError};
use crate::model::TargetSnapshot;
use crate::target::{Failure, Publisher};
use crate::DIAL_IN_LINGER;

mod collect;

pub use collect::{Plan, DEFAULT_FACTS};

/// The protocol's name.
pub const NAME: &str = "hmon";

/// Dyalog's Health Monitor, as a fleet component.
#[derive(Debug, Clone, Copy)]
pub struct Hmon;

/// `[[hmon]]` (SERVE mode: telemon connects) and `[[hmon_listen]]` (POLL mode: interpreters dial in).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HmonBlock {
    /// Unique target name (a listener's: the first part of its interpreters' names).
    pub name: String,
    /// SERVE mode: the interpreter's address.
    pub connect: Option<String>,
    /// POLL mode: where interpreters dial in.
    pub listen: Option<String>,
    /// Facts to poll (default all).
    pub facts: Option<Vec<String>>,
    /// Poll period.
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub poll: Duration,
    /// Notifications to subscribe to (default all).
    pub subscribe: Option<Vec<String>>,
    /// Dial-in listeners only: the most targets kept (live and remembered).
    pub max_targets: Option<usize>,
    /// Dial-in listeners only: the source networks accepted (`"10.0.0.0/8"`, `"127.0.0.1"`; default: any).
    pub allow: Option<Vec<String>>,
    /// Dial-in listeners only: how long a new connection may take to complete its handshake.
    #[serde(default, deserialize_with = "opt_duration")]
    pub hello_timeout: Option<Duration>,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl HmonBlock {
    /// The listener bounds of a `[[hmon_listen]]` block (checked with the config).
    pub fn listener_limits(&self) -> ListenerLimits {
        ListenerLimits::new(self.max_targets, self.allow.as_deref(), self.hello_timeout).unwrap_or_default()
    }
}

/// A `[[hmon_listen]]` block: what it runs is a listener.
#[derive(Debug, Clone, PartialEq)]
pub struct HmonListen(pub HmonBlock);

impl Component for Hmon {
    fn sniff(&self, first: &[u8]) -> Option<bool> {
        hmon::sniff(first)
    }

    fn peer(&self) -> &'static str {
        "an HMON peer (a Dyalog APL interpreter)"
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn sections(&self) -> &'static [&'static str] {
        &["hmon", "hmon_listen"]
    }

    fn link_type(&self) -> u16 {
        telemon_capture::link_type::HMON
    }

    fn read(&self, section: &str, block: &Block<'_>) -> Result<Arc<dyn Unit>, ConfigError> {
        let mut b: HmonBlock = block.read()?;
        check_target(block, &b.name, &b.labels)?;
        let listening = section == "hmon_listen";
        if listening {
            if b.listen.is_none() || b.connect.is_some() {
                let key = if b.connect.is_some() { "connect" } else { "listen" };
                return Err(block.error(key, "[[hmon_listen]] takes `listen` (use [[hmon]] for `connect`)"));
            }
            check_listener(block, b.listen.as_deref(), b.max_targets, b.allow.as_deref(), b.hello_timeout)?;
        } else {
            if b.connect.is_none() || b.listen.is_some() {
                let key = if b.listen.is_some() { "listen" } else { "connect" };
                return Err(block.error(key, "[[hmon]] takes `connect` (use [[hmon_listen]] for `listen`)"));
            }
            let given = [("max_targets", b.max_targets.is_some()), ("allow", b.allow.is_some())];
            let given = given.into_iter().chain([("hello_timeout", b.hello_timeout.is_some())]);
            if let Some((key, _)) = given.into_iter().find(|(_, given)| *given) {
                return Err(block.error(key, "only for [[hmon_listen]] and [[mono_listen]]"));
            }
            b.connect = Some(check_connect(block, b.connect.as_deref(), hmon::DEFAULT_PORT)?);
        }
        if b.poll.is_zero() {
            return Err(block.error("poll", "must be above zero"));
        }
        for fact in b.facts.iter().flatten() {
            if hmon::FactKind::resolve(&hmon::IdOrName::parse_word(fact)).is_none() {
                let known: Vec<&str> = hmon::FactKind::ALL.iter().map(|k| k.name()).collect();
                return Err(
                    block.error("facts", format!("unknown fact {fact:?} (known: {})", known.join(", ")))
                );
            }
        }
        for event in b.subscribe.iter().flatten() {
            if hmon::EventKind::resolve(&hmon::IdOrName::parse_word(event)).is_none() {
                let known: Vec<&str> = hmon::EventKind::ALL.iter().map(|k| k.name()).collect();
                let message = format!("unknown event {event:?} (known: {})", known.join(", "));
                return Err(block.error("subscribe", message));
            }
        }
        Ok(if listening { Arc::new(HmonListen(b)) } else { Arc::new(b) })
    }

    fn address(&self) -> Option<Address> {
        Some(Address::connect(hmon::DEFAULT_PORT))
    }

    fn replay<'a>(
        &'a self,
        p: &'a mut Publisher,
        _connection: &'a Connection,
        stream: ReplayStream,
    ) -> BoxFuture<'a, Failure> {
        // The plan of a block without options: the requests go nowhere, the recorded answers come in
        // their recorded order.
        Box::pin(async move { collect::over(p, stream, &Plan::default()).await })
    }

    fn headlines<'a>(&self, t: &'a TargetSnapshot, _carry: &mut Carry) -> Vec<Headline<'a>> {
        vec![
            Headline::series("workspace used", t.series.family("dyalog_workspace_used_bytes").next()),
            Headline::series(
                "threads",
                t.series.family("dyalog_threads").find(|s| s.label("state") == "total"),
            ),
        ]
    }
}

impl Unit for HmonBlock {
    fn name(&self) -> &str {
        &self.name
    }

    fn same(&self, other: &dyn Unit) -> bool {
        super::same_as(self, other)
    }

    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>> {
        let p = ctx.publisher(&self.name, &Hmon, labels(&self.labels));
        let task = collect::run_connect(p, self.connect.clone().unwrap_or_default(), Plan::new(self));
        Box::pin(async move { Ok(Box::pin(task) as BoxFuture<'static, ()>) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Unit for HmonListen {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn sharded(&self) -> bool {
        false
    }

    fn binds(&self) -> Option<&str> {
        self.0.listen.as_deref()
    }

    fn same(&self, other: &dyn Unit) -> bool {
        super::same_as(self, other)
    }

    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>> {
        Box::pin(async move {
            let accept = collect::listen(ctx, &self.0, DIAL_IN_LINGER).await.map_err(|e| {
                std::io::Error::new(e.kind(), format!("[[hmon_listen]] {}: cannot listen: {e}", self.0.name))
            })?;
            Ok(Box::pin(accept) as BoxFuture<'static, ()>)
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
