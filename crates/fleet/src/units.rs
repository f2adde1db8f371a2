//! What a fleet runs, unit by unit, so that a new config changes only what it changes.
//!
//! A config (with the targets its `[[file_sd]]` blocks find) is a set of [`Unit`]s: a target block, a
//! `dir_glob` block, a listener, or a file_sd watcher, each under a key (a target's name; names cannot
//! contain `/`, so `file_sd/…` keys never meet one). [`Units::apply`] compares the wanted set with the
//! running one: a unit whose block and [`Settings`] are equal keeps its task, so its connection, series,
//! counters and rates go on with no down transition; a changed one is stopped and started again; a
//! removed one is stopped (its publisher removes the target, so a push sender marks its series stale).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use tokio::task::JoinHandle;

use crate::config::{labels, Discovered, FileSdSection, FleetConfig, HmonTarget, MonoTarget, Shard};
use crate::config::{Meter161Target, SmonTarget, SysinfoTarget};
use crate::model::Protocol;
use crate::registry::Registry;
use crate::target::Publisher;
use crate::{collect, DIAL_IN_LINGER, GLOB_RESCAN};

/// One thing the fleet runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Unit {
    /// A `[[meter161]]` block (`dir` or `dir_glob`).
    Meter161(Meter161Target),
    /// A `[[hmon]]` block.
    Hmon(HmonTarget),
    /// A `[[hmon_listen]]` block.
    HmonListen(HmonTarget),
    /// A `[[mono_listen]]` block.
    MonoListen(MonoTarget),
    /// A `[[smon]]` block.
    Smon(SmonTarget),
    /// A `[[sysinfo]]` block.
    Sysinfo(SysinfoTarget),
    /// A `[[file_sd]]` block: the watcher of its files.
    FileSd(FileSdSection),
}

impl From<Discovered> for Unit {
    fn from(d: Discovered) -> Unit {
        match d {
            Discovered::Meter161(t) => Unit::Meter161(t),
            Discovered::Hmon(t) => Unit::Hmon(t),
            Discovered::Smon(t) => Unit::Smon(t),
            Discovered::Sysinfo(t) => Unit::Sysinfo(t),
        }
    }
}

/// The `[serve]` settings every unit is started with: a change restarts every unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// `[serve] series_limit`.
    pub series_limit: usize,
    /// `[serve] shard` (globs and file_sd targets apply it as they find targets).
    pub shard: Option<Shard>,
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
    unit: Unit,
    settings: Settings,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Wanted {
    /// The config's units, in config order.
    config: Vec<(String, Unit)>,
    /// The targets each file_sd watcher found, by the watcher's key.
    discovered: BTreeMap<String, Vec<(String, Unit)>>,
    settings: Option<Settings>,
}

/// The running units of a fleet and what is wanted of them.
pub struct Units {
    registry: Registry,
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
pub fn config_units(config: &FleetConfig) -> Vec<(String, Unit)> {
    let shard = config.serve.shard;
    let mine = |name: &str| shard.is_none_or(|s| s.owns(name));
    let mut out = Vec::new();
    for t in &config.meter161 {
        if t.dir_glob.is_some() || mine(t.name.get_ref()) {
            out.push((t.name.get_ref().clone(), Unit::Meter161(t.clone())));
        }
    }
    for t in config.hmon.iter().filter(|t| mine(t.name.get_ref())) {
        out.push((t.name.get_ref().clone(), Unit::Hmon(t.clone())));
    }
    for t in &config.hmon_listen {
        out.push((t.name.get_ref().clone(), Unit::HmonListen(t.clone())));
    }
    for t in &config.mono_listen {
        out.push((t.name.get_ref().clone(), Unit::MonoListen(t.clone())));
    }
    for t in config.smon.iter().filter(|t| mine(t.name.get_ref())) {
        out.push((t.name.get_ref().clone(), Unit::Smon(t.clone())));
    }
    for t in config.sysinfo.iter().filter(|t| mine(t.name.get_ref())) {
        out.push((t.name.get_ref().clone(), Unit::Sysinfo(t.clone())));
    }
    for sd in &config.file_sd {
        out.push((file_sd_key(sd), Unit::FileSd(sd.clone())));
    }
    out
}

/// A file_sd watcher's key: its protocol and patterns (two blocks with both equal are one).
fn file_sd_key(sd: &FileSdSection) -> String {
    format!("file_sd/{}/{}", sd.protocol, sd.files.join("\u{1f}"))
}

impl Units {
    /// No units yet, publishing into `registry`.
    pub fn new(registry: Registry) -> Arc<Units> {
        Arc::new_cyclic(|me| Units {
            registry,
            wanted: Default::default(),
            running: Default::default(),
            me: me.clone(),
        })
    }

    /// Makes the running units those of `config` (and of the targets its file_sd watchers found):
    /// see the [module docs](self). New listeners bind before anything stops, so a port that
    /// cannot be bound fails the apply with nothing changed.
    pub async fn apply(&self, config: &FleetConfig) -> std::io::Result<Applied> {
        let settings = Settings { series_limit: config.serve.series_limit, shard: config.serve.shard };
        let units = config_units(config);
        let mut running = self.running.lock().await;
        // Bind the listeners whose address no running unit holds first: nothing has changed yet if one fails.
        let held: Vec<&str> = running
            .values()
            .filter_map(|r| match &r.unit {
                Unit::HmonListen(t) => t.listen.as_deref(),
                Unit::MonoListen(t) => Some(t.listen.as_str()),
                _ => None,
            })
            .collect();
        let mut bound = HashMap::new();
        for (key, unit) in &units {
            let same = running.get(key).is_some_and(|r| r.unit == *unit && r.settings == settings);
            let addr = match unit {
                Unit::HmonListen(t) => t.listen.as_deref(),
                Unit::MonoListen(t) => Some(t.listen.as_str()),
                _ => None,
            };
            if addr.is_some_and(|a| !same && !held.contains(&a)) {
                let task = self.listen(unit, settings).await?;
                bound.insert(key.clone(), task);
            }
        }
        {
            let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
            wanted.config = units;
            wanted.settings = Some(settings);
            let watchers: Vec<String> = wanted.config.iter().map(|(k, _)| k.clone()).collect();
            wanted.discovered.retain(|k, _| watchers.contains(k));
        }
        self.reconcile(&mut running, bound).await
    }

    /// Sets the targets the file_sd watcher `key` found, and applies them. (Boxed: applying may start a
    /// watcher, whose task calls this.)
    fn discovered(
        &self,
        key: String,
        found: Vec<(String, Unit)>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.discovered_inner(key, found))
    }

    async fn discovered_inner(&self, key: String, found: Vec<(String, Unit)>) {
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
    fn wanted(&self) -> (Vec<(String, Unit)>, Option<Settings>) {
        let wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(String, Unit)> = wanted.config.clone();
        let mut names: std::collections::HashSet<String> = out.iter().map(|(k, _)| k.clone()).collect();
        let shard = wanted.settings.and_then(|s| s.shard);
        for (watcher, found) in &wanted.discovered {
            for (name, unit) in found {
                if shard.is_some_and(|s| !s.owns(name)) {
                    continue;
                }
                if names.insert(name.clone()) {
                    out.push((name.clone(), unit.clone()));
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
        mut bound: HashMap<String, JoinHandle<()>>,
    ) -> std::io::Result<Applied> {
        let (wanted, settings) = self.wanted();
        let Some(settings) = settings else { return Ok(Applied::default()) };
        let mut applied = Applied::default();
        let wanted_keys: std::collections::HashSet<&str> = wanted.iter().map(|(k, _)| k.as_str()).collect();
        // Stop what goes away or changes, and wait until each is gone (its publisher has removed the
        // target, so the new one of the same name starts afresh).
        let same = |key: &str, r: &Running| {
            r.settings == settings && wanted.iter().any(|(k, u)| k == key && *u == r.unit)
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
        for (key, unit) in wanted {
            if running.contains_key(&key) {
                applied.kept += 1;
                continue;
            }
            let task = match bound.remove(&key) {
                Some(task) => task,
                None => match self.start(&key, &unit, settings).await {
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
            running.insert(key, Running { unit, settings, task });
        }
        Ok(applied)
    }

    /// Binds a listener unit and returns its accept task.
    async fn listen(&self, unit: &Unit, settings: Settings) -> std::io::Result<JoinHandle<()>> {
        let reg = self.registry.clone();
        let limit = settings.series_limit;
        fn named(block: &'static str, name: String) -> impl FnOnce(std::io::Error) -> std::io::Error {
            move |e| std::io::Error::new(e.kind(), format!("[[{block}]] {name}: cannot listen: {e}"))
        }
        match unit {
            Unit::HmonListen(t) => {
                let accept = collect::hmon::listen(reg, t, limit, DIAL_IN_LINGER)
                    .await
                    .map_err(named("hmon_listen", t.name.get_ref().clone()))?;
                Ok(tokio::spawn(accept))
            }
            Unit::MonoListen(t) => {
                let accept = collect::mono::listen(reg, t, limit, DIAL_IN_LINGER)
                    .await
                    .map_err(named("mono_listen", t.name.get_ref().clone()))?;
                Ok(tokio::spawn(accept))
            }
            _ => Err(std::io::Error::other("not a listener")),
        }
    }

    /// Starts one unit's task.
    async fn start(&self, key: &str, unit: &Unit, settings: Settings) -> std::io::Result<JoinHandle<()>> {
        let reg = &self.registry;
        let limit = settings.series_limit;
        let publisher =
            |name: &str, protocol, l| Publisher::new(reg, name, protocol, labels(l), limit).remove_on_drop();
        Ok(match unit {
            Unit::Meter161(t) => {
                let name = t.name.get_ref();
                match (&t.dir, &t.dir_glob) {
                    (Some(dir), _) => {
                        let p = publisher(name, Protocol::Meter161, &t.labels);
                        tokio::spawn(collect::meter161::run(p, dir.clone(), t.interval))
                    }
                    (None, pattern) => {
                        let block = collect::meter161::GlobBlock {
                            name: name.clone(),
                            pattern: pattern.clone().unwrap_or_default(),
                            labels: labels(&t.labels),
                            series_limit: limit,
                            interval: t.interval,
                            shard: settings.shard,
                        };
                        tokio::spawn(collect::meter161::run_glob(reg.clone(), block, GLOB_RESCAN))
                    }
                }
            }
            Unit::Hmon(t) => {
                let p = publisher(t.name.get_ref(), Protocol::Hmon, &t.labels);
                let addr = t.connect.clone().unwrap_or_default();
                tokio::spawn(collect::hmon::run_connect(p, addr, collect::hmon::Plan::new(t)))
            }
            Unit::HmonListen(_) | Unit::MonoListen(_) => self.listen(unit, settings).await?,
            Unit::Smon(t) => {
                let p = publisher(t.name.get_ref(), Protocol::Smon, &t.labels);
                let source = match (&t.connect, &t.file) {
                    (Some(a), _) => collect::smon::Source::Connect(a.clone()),
                    (None, f) => collect::smon::Source::File(f.clone().unwrap_or_default()),
                };
                tokio::spawn(collect::smon::run(p, source))
            }
            Unit::Sysinfo(t) => {
                let p = publisher(t.name.get_ref(), Protocol::Sysinfo, &t.labels);
                let endpoint = collect::sysinfo::endpoint(t.connect.as_deref(), t.socket.as_ref());
                tokio::spawn(collect::sysinfo::run_plan(p, endpoint, collect::sysinfo::Plan::new(t)))
            }
            Unit::FileSd(sd) => {
                let watcher = crate::discover::Watcher::new(key.to_owned(), sd.clone());
                let me = self.me.clone();
                tokio::spawn(watcher.run(move |key, found| {
                    let me = me.clone();
                    async move {
                        if let Some(units) = me.upgrade() {
                            let found =
                                found.into_iter().map(|d| (d.name().to_owned(), Unit::from(d))).collect();
                            units.discovered(key, found).await;
                        }
                    }
                }))
            }
        })
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
        let units = Units::new(registry.clone());
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
