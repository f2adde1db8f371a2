//! The fleet core of telemon: many monitored targets of the five protocols, each collected in its own task
//! into a bounded store of its current series, which views read without doing any target I/O.
//!
//! It is the middle layer: the protocol crates (`meter161`, `hmon`, `mono-counters`, `smon-codec`,
//! `sysinfo-wire`) and `telemon-capture` are below it; the push senders (`telemon-push`) and the views of the
//! `telemon` binary (`/metrics`, the dashboard) are above. It has no HTTP server, terminal or push sender of
//! its own, so another program (an exporter of its own, another view) can take the fleet alone.
//!
//! In the words of the OpenTelemetry Collector and Vector, the collectors are the receivers and the registry
//! is the storage that exporters read:
//!
//! * [`protocol`]: one component per protocol (its config blocks, collector, replay, headline figures),
//!   and the registry of them, [`Protocols`];
//! * [`config`]: the fleet's sections of the TOML config, each block read by its protocol;
//! * [`collect`]: what every collector shares (a loop of sessions with backoff, the dial-in gate);
//! * [`discover`]: `[[file_sd]]` watchers and directory globs;
//! * [`target`]: the [`Publisher`] a collector writes through (store, state, errors, events);
//! * [`store`]: a target's series, bounded, with counter rates and 32-bit unwrapping;
//! * [`registry`]: the shared table of per-target snapshots, with a generation bumped on every change;
//! * [`model`]: the snapshot types every view codes against;
//! * [`series`]: a target's published series (a shared schema and a flat array of values);
//! * [`render`]: the Prometheus text 0.0.4 and OpenMetrics exposition of a snapshot;
//! * [`recording`] and [`rerun`]: recording the collectors' connections (pcapng), and running recordings through
//!   the collectors again (`telemon export`, `telemon top --replay`);
//! * [`pace`]: wake-up coalescing for the collectors' runtime;
//! * [`heap`]: giving the heap's free pages back once the fleet settles.
//!
//! [`Fleet::start`] starts every target of a config. A whole program that watches two targets (an smon
//! stream and an rvOS sysinfo service) and prints their series once both are up:
//!
//! ```
//! use telemon_fleet::{config::FleetConfig, Fleet, TargetState};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let (smon, sysinfo, _peers) = peers().await;
//!
//! // `smon` and `sysinfo` are the addresses of the two peers.
//! let text = format!("[[smon]]\nname = \"box\"\nconnect = \"{smon}\"\n[[sysinfo]]\nname = \"vm\"\nconnect = \"{sysinfo}\"\n");
//! let config = FleetConfig::parse("example.toml", &text)?;
//! let fleet = Fleet::start(&config).await?;
//! let mut changed = fleet.changed();
//! let snapshot = loop {
//!     changed.changed().await?; // a target published
//!     let snapshot = fleet.snapshot();
//!     if snapshot.targets.iter().all(|t| t.state == TargetState::Up && t.series.len() > 0) {
//!         break snapshot;
//!     }
//! };
//! for target in &snapshot.targets {
//!     println!("{} ({}): {} series", target.name, target.protocol, target.series.len());
//!     for series in target.series.iter().take(5) {
//!         println!("  {}{{{}}} {:?}", series.family(), series.label_text(), series.number());
//!     }
//! }
//! fleet.shutdown().await;
//! # Ok(())
//! # }
//! # /// An smon-sim and an rvos-sim on loopback ports (`Shutdown::cancel` stops them).
//! # async fn peers() -> (String, String, sim_common::Shutdown) {
//! #     let shutdown = sim_common::Shutdown::new();
//! #     let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! #     let smon = l.local_addr().unwrap().to_string();
//! #     let config = smon_sim::Config { interval: smon_sim::MIN_INTERVAL, ..Default::default() };
//! #     tokio::spawn(smon_sim::serve(l, smon_sim::ProcSource::new("/proc", "/sys"), config, shutdown.clone()));
//! #     let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! #     let sysinfo = l.local_addr().unwrap().to_string();
//! #     tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
//! #     (smon, sysinfo, shutdown)
//! # }
//! ```

#![warn(missing_docs)]

pub mod collect;
pub mod config;
pub mod discover;
/// Fuzz-target bodies, shared by `fuzz/` (cargo-fuzz and `cargo xtask fuzz --replay` build it with
/// `--cfg fuzzing`) and the corpus replays of this crate's unit tests. Not part of the API: it exists only
/// under `cfg(fuzzing)`.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzz;
pub mod heap;
pub mod model;
pub mod own;
pub mod pace;
pub mod protocol;
pub mod recording;
pub mod registry;
pub mod render;
pub mod rerun;
pub mod retry;
pub mod rows;
pub mod runtimes;
pub mod series;
pub mod store;
pub mod target;
pub mod units;

pub use model::{
    ErrorCounts, ErrorKind, EventRecord, FleetSnapshot, LabelPairs, LabelSet, MetricKind, Num, Protocol,
    Series, SeriesRef, SeriesSet, TargetSnapshot, TargetState, Value, ValueRef,
};
pub use protocol::{Component, Protocols};
pub use registry::Registry;
pub use target::{Failure, Publisher};

use config::FleetConfig;
use runtimes::Runtimes;
use units::{Applied, Units};

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

/// The running fleet: the registry of target caches and the tasks that fill it.
///
/// Views call [`Fleet::snapshot`] (cheap) and wait on [`Fleet::changed`]. [`Fleet::apply`] changes
/// the running targets to those of another config, touching only what differs.
#[derive(Debug)]
pub struct Fleet {
    registry: Registry,
    units: Arc<Units>,
    /// Tasks started with [`Fleet::spawn`] (a replay's players).
    tasks: Mutex<JoinSet<()>>,
    /// Whether the config has `[[file_sd]]` blocks (their counter is rendered then).
    file_sd: AtomicBool,
    /// The protocols of the config in force.
    protocols: Mutex<Protocols>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::new()
    }
}

/// How long a dial-in target (an agent or interpreter that left) stays listed as down.
pub const DIAL_IN_LINGER: Duration = Duration::from_secs(600);
/// How often a `dir_glob` is evaluated again.
pub const GLOB_RESCAN: Duration = Duration::from_secs(2);

impl Fleet {
    /// Starts every target of `config`, each in its own task; fails only when a listener
    /// (`[[hmon_listen]]`, `[[mono_listen]]`) cannot bind, naming the block.
    pub async fn start(config: &FleetConfig) -> std::io::Result<Fleet> {
        let fleet = Fleet::new();
        fleet.apply(config).await?;
        Ok(fleet)
    }

    /// Makes the running targets those of `config`: a block that did not change keeps its task (its
    /// connection, series, counters and rates, with no down transition), a changed one restarts, a
    /// removed one stops (see [`units`]). Fails, with nothing changed, when a new listener cannot bind.
    pub async fn apply(&self, config: &FleetConfig) -> std::io::Result<Applied> {
        self.file_sd.store(!config.file_sd.is_empty(), Ordering::Relaxed);
        *self.protocols.lock().unwrap_or_else(|e| e.into_inner()) = config.protocols.clone();
        self.units.apply(config).await
    }

    /// A fleet with no targets yet.
    pub fn new() -> Fleet {
        Fleet::recording(None)
    }

    /// A fleet with no targets yet whose connections are recorded into `recording`, when there is one.
    pub fn recording(recording: Option<Arc<recording::Recording>>) -> Fleet {
        Fleet::on(recording, Runtimes::current())
    }

    /// A fleet with no targets yet, recorded into `recording` when there is one, whose units are spread
    /// over `runtimes` (`[serve] threads`), each whole on one of them.
    pub fn on(recording: Option<Arc<recording::Recording>>, runtimes: Runtimes) -> Fleet {
        let registry = Registry::new();
        Fleet {
            units: Units::new(registry.clone(), recording, runtimes),
            registry,
            tasks: Mutex::new(JoinSet::new()),
            file_sd: AtomicBool::new(false),
            protocols: Mutex::new(Protocols::built_in()),
        }
    }

    /// The protocols its targets speak (those of the config in force: a view asks them for a target's
    /// headline figures).
    pub fn protocols(&self) -> Protocols {
        self.protocols.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many runtimes its units are spread over (`[serve] threads` as it started).
    pub fn threads(&self) -> usize {
        self.units.threads()
    }

    /// The registry target tasks publish into.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Runs `task` in its own tokio task until it ends or the fleet shuts down.
    ///
    /// The task is spawned as it is, not inside a wrapper future that also waits for a stop signal:
    /// such a wrapper stores the task twice (once captured, once awaited), which doubled each target's
    /// memory. Shutting down aborts the tasks instead.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        // Forget the tasks that ended, so the set does not grow.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Every target, sorted by name (Arc clones of each target's cache).
    pub fn snapshot(&self) -> FleetSnapshot {
        self.registry.snapshot()
    }

    /// A generation number bumped whenever any target's cache changes.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.registry.changed()
    }

    /// The fleet's own process-wide families for `/metrics` (see [`own::render_tail`]).
    pub fn render_tail(&self, open_metrics: bool) -> String {
        own::render_tail(self.file_sd.load(Ordering::Relaxed), open_metrics)
    }

    /// Stops every target task (each is dropped where it waits: its publisher removes the target)
    /// and waits until they are gone.
    pub async fn shutdown(&self) {
        self.units.shutdown().await;
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_publish_and_shutdown_ends_even_a_task_that_never_returns() {
        let fleet = Fleet::new();
        let mut changed = fleet.changed();
        let reg = fleet.registry().clone();
        fleet.spawn(async move {
            reg.put(TargetSnapshot::new("a", Protocol::SMON, Vec::new()));
            std::future::pending::<()>().await;
        });
        changed.changed().await.unwrap();
        assert_eq!(fleet.snapshot().targets.len(), 1);
        fleet.shutdown().await;
        assert!(fleet.tasks.lock().unwrap().is_empty());
    }
}
