//! What a fleet runs, unit by unit, so that a new config changes only what it changes.
//!
//! A config (with the targets its `[[file_sd]]` blocks find) is a set of units under keys: each target
//! block's [`Unit`] (a target, a `dir_glob`, a listener) under its name, and each file_sd watcher under a
//! `file_sd/…` key (names cannot contain `/`, so the two never meet). [`Units::apply`] compares the wanted
//! set with the running one: a unit whose block and [`Settings`] are equal keeps its task, so its
//! connection, series, counters and rates go on with no down transition; a changed one is stopped and
//! started again; a removed one is stopped (its publisher removes the target, so a push sender marks its
//! series stale).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use tokio::task::JoinHandle;

use crate::config::{FileSdSection, FleetConfig, Settings};
use crate::protocol::{BoxFuture, Protocols, Start, Unit};
use crate::recording::Recording;
use crate::registry::Registry;
use crate::runtimes::Runtimes;

/// One thing the fleet runs: a unit of a block, or a file_sd watcher.
#[derive(Debug, Clone)]
enum Runs {
    /// A target block's unit (of the config, or found by a watcher).
    Block(Arc<dyn Unit>),
    /// A `[[file_sd]]` block: the watcher of its files.
    FileSd(FileSdSection),
}

impl PartialEq for Runs {
    fn eq(&self, other: &Runs) -> bool {
        match (self, other) {
            (Runs::Block(a), Runs::Block(b)) => a.same(&**b),
            (Runs::FileSd(a), Runs::FileSd(b)) => a == b,
            _ => false,
        }
    }
}

impl Runs {
    /// The address it listens on: one a running unit holds is not bound again before that one stops.
    fn binds(&self) -> Option<&str> {
        match self {
            Runs::Block(u) => u.binds(),
            Runs::FileSd(_) => None,
        }
    }
}

/// What [`Units::apply`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Units started that did not run before.
    pub started: usize,
    /// Units whose block changed: stopped and started again.
    pub restarted: usize,
    /// Units stopped for good.
    pub stopped: usize,
    /// Units left running as they were.
    pub kept: usize,
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} started, {} restarted, {} stopped, {} unchanged",
            self.started, self.restarted, self.stopped, self.kept
        )
    }
}

struct Running {
    runs: Runs,
    settings: Settings,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Wanted {
    /// The config's units, in config order.
    config: Vec<(String, Runs)>,
    /// The targets each file_sd watcher found, by the watcher's key.
    discovered: BTreeMap<String, Vec<(String, Runs)>>,
    settings: Option<Settings>,
    protocols: Protocols,
}

/// The running units of a fleet and what is wanted of them.
pub struct Units {
    registry: Registry,
    recording: Option<Arc<Recording>>,
    /// Where units are spawned, each whole on one runtime.
    runtimes: Runtimes,
    wanted: std::sync::Mutex<Wanted>,
    /// The running units; held across a whole apply, so that applies happen one at a time.
    running: tokio::sync::Mutex<HashMap<String, Running>>,
    me: Weak<Units>,
}

impl std::fmt::Debug for Units {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Units").finish_non_exhaustive()
    }
}

/// The units a config asks for, keyed, with targets another shard owns left out (listeners, globs
/// and file_sd watchers are never sharded: they shard what they find).
fn config_units(config: &FleetConfig) -> Vec<(String, Runs)> {
    let shard = config.settings.shard;
    let mut out: Vec<(String, Runs)> = config
        .targets
        .iter()
        .filter(|t| !t.unit.sharded() || shard.is_none_or(|s| s.owns(t.unit.name())))
        .map(|t| (t.unit.name().to_owned(), Runs::Block(t.unit.clone())))
        .collect();
    for sd in &config.file_sd {
        out.push((file_sd_key(sd), Runs::FileSd(sd.clone())));
    }
    out
}

/// A file_sd watcher's key: its protocol and patterns (two blocks with both equal are one).
fn file_sd_key(sd: &FileSdSection) -> String {
    format!("file_sd/{}/{}", sd.protocol, sd.files.join("\u{1f}"))
}

impl Units {
    /// No units yet, publishing into `registry`, recording into `recording` when there is one, each
    /// unit spawned on the next of `runtimes` in turn.
    pub fn new(registry: Registry, recording: Option<Arc<Recording>>, runtimes: Runtimes) -> Arc<Units> {
        Arc::new_cyclic(|me| Units {
            registry,
            recording,
            runtimes,
            wanted: Default::default(),
            running: Default::default(),
            me: me.clone(),
        })
    }

    /// How many runtimes units are spread over.
    pub fn threads(&self) -> usize {
        self.runtimes.threads()
    }

    fn context(&self, settings: Settings) -> Start {
        Start {
            registry: self.registry.clone(),
            series_limit: settings.series_limit,
            shard: settings.shard,
            recording: self.recording.clone(),
        }
    }

    /// Makes the running units those of `config` (and of the targets its file_sd watchers found):
    /// see the [module docs](self). New listeners bind before anything stops, so a port that
    /// cannot be bound fails the apply with nothing changed.
    pub async fn apply(&self, config: &FleetConfig) -> std::io::Result<Applied> {
        let settings = config.settings;
        let units = config_units(config);
        let mut running = self.running.lock().await;
        // Bind the listeners whose address no running unit holds first: nothing has changed yet if one fails.
        let held: Vec<&str> = running.values().filter_map(|r| r.runs.binds()).collect();
        let mut bound = HashMap::new();
        for (key, runs) in &units {
            let same = running.get(key).is_some_and(|r| r.runs == *runs && r.settings == settings);
            if let (Some(addr), Runs::Block(unit)) = (runs.binds(), runs) {
                if !same && !held.contains(&addr) {
                    let task = unit.start(&self.context(settings)).await?;
                    bound.insert(key.clone(), task);
                }
            }
        }
        {
            let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
            wanted.config = units;
            wanted.settings = Some(settings);
            wanted.protocols = config.protocols.clone();
            let watchers: Vec<String> = wanted.config.iter().map(|(k, _)| k.clone()).collect();
            wanted.discovered.retain(|k, _| watchers.contains(k));
        }
        self.reconcile(&mut running, bound).await
    }

    /// Sets the targets the file_sd watcher `key` found, and applies them. (Boxed: applying may start a
    /// watcher, whose task calls this.)
    fn discovered(&self, key: String, found: Vec<(String, Runs)>) -> BoxFuture<'_, ()> {
        Box::pin(self.discovered_inner(key, found))
    }

    async fn discovered_inner(&self, key: String, found: Vec<(String, Runs)>) {
        let key = key.as_str();
        let mut running = self.running.lock().await;
        {
            let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
            // A watcher that is no longer wanted (a reload removed it) has nothing to say.
            if !wanted.config.iter().any(|(k, _)| k == key) {
                return;
            }
            wanted.discovered.insert(key.to_owned(), found);
        }
        if let Err(e) = self.reconcile(&mut running, HashMap::new()).await {
            tracing::warn!(watcher = key, error = %e, "cannot apply the targets of a file_sd block");
        }
    }

    /// The wanted units, with discovered targets after the config's, the first of a name winning.
    fn wanted(&self) -> (Vec<(String, Runs)>, Option<Settings>) {
        let wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(String, Runs)> = wanted.config.clone();
        let mut names: std::collections::HashSet<String> = out.iter().map(|(k, _)| k.clone()).collect();
        let shard = wanted.settings.and_then(|s| s.shard);
        for (watcher, found) in &wanted.discovered {
            for (name, runs) in found {
                if shard.is_some_and(|s| !s.owns(name)) {
                    continue;
                }
                if names.insert(name.clone()) {
                    out.push((name.clone(), runs.clone()));
                } else {
                    tracing::debug!(watcher = %watcher, target_name = %name, "a file_sd target's name is taken; skipped");
                }
            }
        }
        (out, wanted.settings)
    }

    async fn reconcile(
        &self,
        running: &mut HashMap<String, Running>,
        mut bound: HashMap<String, BoxFuture<'static, ()>>,
    ) -> std::io::Result<Applied> {
        let (wanted, settings) = self.wanted();
        let Some(settings) = settings else { return Ok(Applied::default()) };
        let mut applied = Applied::default();
        let wanted_keys: std::collections::HashSet<&str> = wanted.iter().map(|(k, _)| k.as_str()).collect();
        // Stop what goes away or changes, and wait until each is gone (its publisher has removed the
        // target, so the new one of the same name starts afresh).
        let same = |key: &str, r: &Running| {
            r.settings == settings && wanted.iter().any(|(k, u)| k == key && *u == r.runs)
        };
        let gone: Vec<String> = running.keys().filter(|k| !same(k, &running[k.as_str()])).cloned().collect();
        let mut restarting = std::collections::HashSet::new();
        for key in gone {
            let r = running.remove(&key).expect("listed above");
            r.task.abort();
            let _ = r.task.await;
            if wanted_keys.contains(key.as_str()) {
                restarting.insert(key);
            } else {
                applied.stopped += 1;
            }
        }
        for (key, runs) in wanted {
            if running.contains_key(&key) {
                applied.kept += 1;
                continue;
            }
            let task = match bound.remove(&key) {
                Some(task) => task,
                None => match self.start(&key, &runs, settings).await {
                    Ok(task) => task,
                    Err(e) => {
                        tracing::error!(unit = %key, error = %e, "cannot start");
                        continue;
                    }
                },
            };
            if restarting.contains(&key) {
                applied.restarted += 1;
            } else {
                applied.started += 1;
            }
            running.insert(key, Running { runs, settings, task: self.runtimes.spawn(task) });
        }
        Ok(applied)
    }

    /// The task of one unit, not yet spawned.
    async fn start(
        &self,
        key: &str,
        runs: &Runs,
        settings: Settings,
    ) -> std::io::Result<BoxFuture<'static, ()>> {
        match runs {
            Runs::Block(unit) => unit.start(&self.context(settings)).await,
            Runs::FileSd(sd) => {
                let protocols = self.wanted.lock().unwrap_or_else(|e| e.into_inner()).protocols.clone();
                let watcher = crate::discover::Watcher::new(key.to_owned(), sd.clone(), protocols);
                let me = self.me.clone();
                Ok(Box::pin(watcher.run(move |key, found| {
                    let me = me.clone();
                    async move {
                        if let Some(units) = me.upgrade() {
                            let found =
                                found.into_iter().map(|d| (d.name().to_owned(), Runs::Block(d.0))).collect();
                            units.discovered(key, found).await;
                        }
                    }
                })))
            }
        }
    }

    /// Stops every unit and waits until each is gone.
    pub async fn shutdown(&self) {
        let mut running = self.running.lock().await;
        {
            let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
            *wanted = Wanted::default();
        }
        for (_, r) in running.drain() {
            r.task.abort();
            let _ = r.task.await;
        }
    }

    /// The keys of the running units, sorted (for tests and logs).
    pub async fn running(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.running.lock().await.keys().cloned().collect();
        keys.sort();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TargetState;
    use std::time::Duration;

    fn config(targets: &[(&str, &str, &str)]) -> FleetConfig {
        let mut text = String::new();
        for (name, addr, room) in targets {
            text += &format!(
                "[[sysinfo]]\nname = \"{name}\"\nconnect = \"{addr}\"\nlabels = {{ room = \"{room}\" }}\n"
            );
        }
        FleetConfig::parse("t.toml", &text).unwrap()
    }

    async fn all_up(registry: &Registry, n: usize) -> crate::FleetSnapshot {
        let mut changed = registry.changed();
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let s = registry.snapshot();
                if s.targets.len() == n && s.targets.iter().all(|t| t.state == TargetState::Up) {
                    return s;
                }
                changed.changed().await.unwrap();
            }
        })
        .await
        .expect("every target up")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_config_restarts_only_what_changed() {
        let shutdown = sim_common::Shutdown::new();
        let mut addrs = Vec::new();
        for _ in 0..4 {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(l.local_addr().unwrap().to_string());
            tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
        }
        let registry = Registry::new();
        let units = Units::new(registry.clone(), None, Runtimes::current());
        let a = config(&[("a", &addrs[0], "1"), ("b", &addrs[1], "1"), ("c", &addrs[2], "1")]);
        assert_eq!(units.apply(&a).await.unwrap().started, 3);
        let before = all_up(&registry, 3).await;
        // b removed, c relabelled, d added, a unchanged.
        let b = config(&[("a", &addrs[0], "1"), ("c", &addrs[2], "2"), ("d", &addrs[3], "1")]);
        let applied = units.apply(&b).await.unwrap();
        assert_eq!(applied, Applied { started: 1, restarted: 1, stopped: 1, kept: 1 });
        let after = all_up(&registry, 3).await;
        let a_before = before.get("a").unwrap();
        let a_after = after.get("a").unwrap();
        assert!(Arc::ptr_eq(&a_before.name, &a_after.name), "a kept its publisher");
        assert_eq!(a_after.connects, 1);
        assert!(after.get("b").is_none());
        assert_eq!(after.get("c").unwrap().labels[0].1, "2");
        // The same config again changes nothing.
        assert_eq!(units.apply(&b).await.unwrap(), Applied { kept: 3, ..Applied::default() });
        units.shutdown().await;
        assert!(registry.snapshot().targets.is_empty());
        shutdown.cancel();
    }
}
