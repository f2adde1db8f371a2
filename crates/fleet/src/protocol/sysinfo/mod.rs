//! The rvOS sysinfo service: `[[sysinfo]]` blocks, each a service asked for its reports, each report at
//! its own period, over TCP or a Unix socket.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use sysinfo_wire::SysinfoCommand;
use telemon_capture::{Connection, ReplayStream};

use super::{Address, BoxFuture, Carry, Component, Headline, Start, Unit};
use crate::config::block::{check_connect, check_target, duration, labels, one_second};
use crate::config::document::{Block, ConfigError};
use crate::model::TargetSnapshot;
use crate::target::{Failure, Publisher};

mod collect;

pub use collect::{endpoint, over, recorded_commands, run, run_plan, Plan};

/// The protocol's name.
pub const NAME: &str = "sysinfo";

/// rvOS sysinfo, as a fleet component.
#[derive(Debug, Clone, Copy)]
pub struct Sysinfo;

fn sysinfo_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

/// The reports collected by default: every one that maps onto metrics.
/// (The sysinfo collector's defaults; a block's `reports` are checked against them here.)
pub const DEFAULT_REPORTS: [SysinfoCommand; 7] = [
    SysinfoCommand::Ps,
    SysinfoCommand::Memstat,
    SysinfoCommand::Kstat,
    SysinfoCommand::Channels,
    SysinfoCommand::SchedLatency,
    SysinfoCommand::IpcLatency,
    SysinfoCommand::Watchdog,
];

/// How long one round of requests may take by default, whatever the reports' periods: a reply that
/// is late for its period is still a reply (the service's own request deadline is 5 s too).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The report named `name` (`ps`, `memstat`, `kstat`, `channels`, `sched_latency`, `ipc_latency`,
/// `watchdog`; case, `_` and `-` do not matter).
pub fn report_by_name(name: &str) -> Option<SysinfoCommand> {
    let want: String = name.chars().filter(|c| *c != '_' && *c != '-').collect();
    DEFAULT_REPORTS.into_iter().find(|c| format!("{c:?}").eq_ignore_ascii_case(&want))
}

/// A `[[sysinfo]]` block's `reports`: a list, each report at the block's `every`, or a table giving
/// each report its own period (`reports = { ps = "1s", memstat = "10s" }`).
#[derive(Debug, Clone, PartialEq)]
pub enum Reports {
    /// `reports = ["ps", "kstat"]`: every one at `every`.
    List(Vec<String>),
    /// `reports = { ps = "1s", memstat = "10s" }`: each at its own period (in the order the TOML
    /// parser gives, which is by name).
    Each(Vec<(String, Duration)>),
}

impl Reports {
    /// The report names.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Reports::List(l) => l.iter().map(String::as_str).collect(),
            Reports::Each(e) => e.iter().map(|(n, _)| n.as_str()).collect(),
        }
    }

    /// Each report with its period, `every` where the block gives none.
    pub fn periods(&self, every: Duration) -> Vec<(&str, Duration)> {
        match self {
            Reports::List(l) => l.iter().map(|n| (n.as_str(), every)).collect(),
            Reports::Each(e) => e.iter().map(|(n, d)| (n.as_str(), *d)).collect(),
        }
    }
}

impl<'de> Deserialize<'de> for Reports {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Reports;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of reports, or a table of report = \"period\"")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Reports, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(Reports::List(names))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Reports, A::Error> {
                let mut each: Vec<(String, Duration)> = Vec::new();
                while let Some((name, period)) = map.next_entry::<String, String>()? {
                    let d = humantime::parse_duration(&period).map_err(|e| {
                        serde::de::Error::custom(format!(
                            "report {name:?}: bad duration {period:?} ({e}); write e.g. \"1s\" or \"250ms\""
                        ))
                    })?;
                    if d.is_zero() {
                        return Err(serde::de::Error::custom(format!(
                            "report {name:?}: the period must be above zero"
                        )));
                    }
                    each.push((name, d));
                }
                Ok(Reports::Each(each))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `[[sysinfo]]`: an rvOS sysinfo service.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SysinfoBlock {
    /// Unique target name.
    pub name: String,
    /// TCP address.
    pub connect: Option<String>,
    /// Unix socket path.
    pub socket: Option<PathBuf>,
    /// Reports to request (default all), at `every` or each at its own period.
    pub reports: Option<Reports>,
    /// Request period (of the reports that have none of their own).
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub every: Duration,
    /// The longest one round of requests may take before the connection counts as hung (default 5 s,
    /// whatever `every` is).
    #[serde(default = "sysinfo_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Component for Sysinfo {
    fn sniff(&self, first: &[u8]) -> Option<bool> {
        sysinfo_wire::sniff(first)
    }

    fn peer(&self) -> &'static str {
        "the rvOS sysinfo host transport"
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn sections(&self) -> &'static [&'static str] {
        &["sysinfo"]
    }

    fn link_type(&self) -> u16 {
        telemon_capture::link_type::SYSINFO
    }

    fn read(&self, _section: &str, block: &Block<'_>) -> Result<Arc<dyn Unit>, ConfigError> {
        let mut b: SysinfoBlock = block.read()?;
        check_target(block, &b.name, &b.labels)?;
        if b.connect.is_some() == b.socket.is_some() {
            return Err(block.error("connect", "give exactly one of `connect` or `socket`"));
        }
        let names = b.reports.as_ref().map(Reports::names).unwrap_or_default();
        if let Some(bad) = names.iter().find(|r| report_by_name(r).is_none()) {
            let message = format!(
                "unknown report {bad:?} (known: ps, memstat, kstat, channels, sched_latency, ipc_latency, watchdog)"
            );
            return Err(block.error("reports", message));
        }
        if b.every.is_zero() {
            return Err(block.error("every", "must be above zero"));
        }
        if b.timeout.is_zero() {
            return Err(block.error("timeout", "must be above zero"));
        }
        if b.connect.is_some() {
            b.connect = Some(check_connect(block, b.connect.as_deref(), sysinfo_wire::DEFAULT_PORT)?);
        }
        Ok(Arc::new(b))
    }

    fn address(&self) -> Option<Address> {
        Some(Address::connect(sysinfo_wire::DEFAULT_PORT))
    }

    /// Each reply is the report its channel's recorded command asked for: any reports, any periods.
    fn replay<'a>(
        &'a self,
        p: &'a mut Publisher,
        connection: &'a Connection,
        stream: ReplayStream,
    ) -> BoxFuture<'a, Failure> {
        Box::pin(async move {
            let commands = recorded_commands(&connection.bytes(telemon_capture::Direction::Outbound));
            over(p, stream, &commands).await
        })
    }

    fn headlines<'a>(&self, t: &'a TargetSnapshot, _carry: &mut Carry) -> Vec<Headline<'a>> {
        let procs = t.series.family("rvos_process_memory_bytes").count();
        let heap = t.series.family("rvos_kernel_heap_bytes").find(|s| s.label("state") == "used");
        vec![
            Headline::derived("processes", "", "=processes", (!t.series.is_empty()).then_some(procs as f64)),
            Headline::series("heap used", heap),
        ]
    }
}

impl Unit for SysinfoBlock {
    fn name(&self) -> &str {
        &self.name
    }

    fn same(&self, other: &dyn Unit) -> bool {
        super::same_as(self, other)
    }

    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>> {
        let p = ctx.publisher(&self.name, &Sysinfo, labels(&self.labels));
        let endpoint = endpoint(self.connect.as_deref(), self.socket.as_ref());
        let task = run_plan(p, endpoint, Plan::new(self));
        Box::pin(async move { Ok(Box::pin(task) as BoxFuture<'static, ()>) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
