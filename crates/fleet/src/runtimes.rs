//! The runtimes the collectors run on: the calling one, and with `[serve] threads` above 1, more
//! single-threaded runtimes, each on a thread of its own.
//!
//! Each unit (a target, a listener with its dial-in targets, a directory glob, a file_sd watcher) is
//! spawned whole on one runtime, in turn, and stays there: its connection, timers and series store
//! are that thread's alone, and its publications go to its own entry of the registry (a lock of its
//! own), so that targets on different threads never wait for one another. There is no work stealing
//! (as in pingora): a runtime is a plain loop over its own tasks, with the wake-up slack of
//! [`Pace`] on each thread.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle as ThreadHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::pace::Pace;

/// The most threads `[serve] threads` may ask for.
pub const MAX_THREADS: usize = 256;

/// Where a fleet spawns its units: the calling runtime alone ([`Runtimes::current`]), or it and
/// more single-threaded runtimes on threads of their own ([`Runtimes::start`]). Dropping it stops
/// the extra threads (their tasks are dropped there).
#[derive(Debug, Default)]
pub struct Runtimes {
    /// The runtimes units go to in turn; empty: the calling one.
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// The extra threads, each with what stops its runtime.
    extra: Vec<(oneshot::Sender<()>, ThreadHandle<()>)>,
}

impl Runtimes {
    /// Units run on the runtime that spawns them.
    pub fn current() -> Runtimes {
        Runtimes::default()
    }

    /// `threads` runtimes in all: the calling one (from inside a runtime) and `threads - 1` more,
    /// each a single-threaded runtime on a thread named `collector-K`, with `pace`'s park hook
    /// when given. `threads` is at least 1 (0 counts as 1) and at most [`MAX_THREADS`].
    pub fn start(threads: usize, pace: Option<&Pace>) -> std::io::Result<Runtimes> {
        let threads = threads.clamp(1, MAX_THREADS);
        if threads == 1 {
            return Ok(Runtimes::current());
        }
        let mut handles = vec![Handle::current()];
        let mut running = Vec::with_capacity(threads - 1);
        for k in 1..threads {
            let mut builder = tokio::runtime::Builder::new_current_thread();
            builder.enable_all();
            if let Some(pace) = pace {
                builder.on_thread_park(pace.hook());
            }
            let runtime = builder.build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new().name(format!("collector-{k}")).spawn(move || {
                // Until the fleet stops (or drops its sender): the tasks left are dropped here.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
            running.push((stop, thread));
        }
        Ok(Runtimes { handles, next: AtomicUsize::new(0), extra: running })
    }

    /// How many runtimes (threads) units are spread over.
    pub fn threads(&self) -> usize {
        self.handles.len().max(1)
    }

    /// Spawns `task` on the next runtime in turn.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.handles.is_empty() {
            return tokio::spawn(task);
        }
        let k = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        self.handles[k].spawn(task)
    }
}

impl Drop for Runtimes {
    /// Stops the extra runtimes and waits for their threads, but for the calling thread's own (when
    /// the last owner is one of its tasks), which ends by itself once this returns.
    fn drop(&mut self) {
        let threads = std::mem::take(&mut self.extra);
        let me = std::thread::current().id();
        let mut waiting = Vec::new();
        for (stop, thread) in threads {
            let _ = stop.send(());
            if thread.thread().id() != me {
                waiting.push(thread);
            }
        }
        for thread in waiting {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn units_go_to_each_runtime_in_turn_and_the_threads_stop_on_drop() {
        let runtimes = Runtimes::start(3, None).unwrap();
        assert_eq!(runtimes.threads(), 3);
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let seen = seen.clone();
            tasks.push(runtimes.spawn(async move {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                seen.lock().unwrap().insert(name);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen.contains("collector-1") && seen.contains("collector-2"), "{seen:?}");

        // A task that never ends is dropped with its runtime.
        let (dropped_tx, dropped_rx) = std::sync::mpsc::channel::<()>();
        struct Tell(std::sync::mpsc::Sender<()>);
        impl Drop for Tell {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let tell = Tell(dropped_tx);
        // The next in turn is the calling runtime (6 spawns so far): this one goes to it, the next to thread 1.
        runtimes.spawn(async {}).await.unwrap();
        let _never = runtimes.spawn(async move {
            let _tell = tell;
            std::future::pending::<()>().await;
        });
        let names: Vec<String> =
            runtimes.extra.iter().map(|(_, t)| t.thread().name().unwrap().to_owned()).collect();
        assert_eq!(names, ["collector-1", "collector-2"]);
        drop(runtimes);
        dropped_rx.recv_timeout(std::time::Duration::from_secs(5)).expect("the pending task dropped");
    }

    #[tokio::test]
    async fn one_thread_is_the_calling_runtime() {
        let runtimes = Runtimes::start(1, None).unwrap();
        assert_eq!(runtimes.threads(), 1);
        assert!(runtimes.spawn(async {}).await.is_ok());
        assert!(runtimes.extra.is_empty());
        assert_eq!(Runtimes::start(0, None).unwrap().threads(), 1);
    }
}
