//! The fleet core: many monitored targets, each in its own task, each with a cache of its current
//! series that views (`serve`, `top`) read without doing any target I/O.
//!
//! [`model`] holds the snapshot types every view codes against; [`registry`] the shared table
//! of per-target caches, with a generation number bumped on every change.

pub mod config;
pub mod model;
pub mod registry;
pub mod render;
pub mod store;

pub use model::{
    ErrorCounts, ErrorKind, EventRecord, FleetSnapshot, MetricKind, Protocol, Series, TargetSnapshot,
    TargetState, Value,
};
pub use registry::Registry;

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The running fleet: the registry of target caches and the tasks that fill it.
///
/// Views call [`Fleet::snapshot`] (cheap) and wait on [`Fleet::changed`].
#[derive(Debug)]
pub struct Fleet {
    registry: Registry,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::new()
    }
}

impl Fleet {
    /// A fleet with no targets yet.
    pub fn new() -> Fleet {
        Fleet { registry: Registry::new(), stop: watch::Sender::new(false), tasks: Mutex::new(Vec::new()) }
    }

    /// The registry target tasks publish into.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Runs `task` in its own tokio task until it ends or the fleet shuts down.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut stop = self.stop.subscribe();
        let handle = tokio::spawn(async move {
            tokio::select! {
                () = task => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    /// Every target, sorted by name (Arc clones of each target's cache).
    pub fn snapshot(&self) -> FleetSnapshot {
        self.registry.snapshot()
    }

    /// A generation number bumped whenever any target's cache changes.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.registry.changed()
    }

    /// Stops every target task: each gets a second to end, then is aborted.
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for mut t in tasks {
            if tokio::time::timeout(Duration::from_secs(1), &mut t).await.is_err() {
                t.abort();
            }
        }
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
            reg.put(TargetSnapshot::new("a", Protocol::Smon, Vec::new()));
            std::future::pending::<()>().await;
        });
        changed.changed().await.unwrap();
        assert_eq!(fleet.snapshot().targets.len(), 1);
        fleet.shutdown().await;
        assert!(fleet.tasks.lock().unwrap().is_empty());
    }
}
