//! Push senders: the fleet's store sent to a distributed engine, as Prometheus remote write 1.0
//! (`[[remote_write]]`) or OTLP/HTTP protobuf (`[[otlp]]`).
//!
//! A sender is a view like a scrape: every `batch` its sampler takes a [`FleetSnapshot`] (through
//! the adapter in [`view`]) and queues one sample per series in its own bounded [`memory_queue::Queue`]
//! (the oldest dropped and counted when full); its HTTP loop sends the queue in order,
//! `max_samples_per_send` at a time, retrying what the protocol says to retry with exponential
//! backoff, jitter and `Retry-After`. Neither task ever holds up a collector or a scrape.
//!
//! [`FleetSnapshot`]: telemon_fleet::FleetSnapshot

#![warn(missing_docs)]

pub mod config;
#[cfg(test)]
mod config_tests;
pub mod disk;
mod durable;
/// Fuzz-target bodies, shared by `fuzz/` (cargo-fuzz and `cargo xtask fuzz --replay` build it with
/// `--cfg fuzzing`) and the corpus replays of this crate's unit tests. Not part of the API: it exists only
/// under `cfg(fuzzing)`.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzz;

pub mod memory_queue;
pub mod otlp;
pub mod remote_write;
mod sender;
pub mod stats;
pub mod view;

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{BasicAuth, PushConfig, PushSection, TlsSection, WhenFull};
use sender::{Plan, Wire};
pub use sender::{RETRY_AFTER_MAX, RETRY_FIRST, RETRY_MAX};
pub use stats::Stats;
use telemon_fleet::config::{ConfigError, Shard};
use telemon_fleet::Registry;

/// How long [`Push::shutdown`] waits for the queues to drain by default.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("telemon/", env!("CARGO_PKG_VERSION"));

/// A sender that cannot start: names the block.
#[derive(Debug, thiserror::Error)]
#[error("[[{section}]] {sender}: {message}")]
pub struct PushError {
    /// `remote_write` or `otlp`.
    pub section: &'static str,
    /// The sender's name.
    pub sender: String,
    /// What is wrong.
    pub message: String,
}

struct Running {
    /// `remote_write` or `otlp`, and the block it runs (a reload keeps a sender whose block is equal).
    section: &'static str,
    block: PushSection,
    shard: Option<Shard>,
    stats: Arc<Stats>,
    queue_len: Box<dyn Fn() -> usize + Send + Sync>,
    inflight: Arc<AtomicU64>,
    sampler: JoinHandle<()>,
    sender: JoinHandle<()>,
    stop: watch::Sender<bool>,
    /// Set before `stop` when a reload replaces the sender: the sender then ends after its request in
    /// flight instead of sending its queue, which the new sender takes over.
    handoff: Arc<AtomicBool>,
    /// With a memory queue: the queue (an `Arc<memory_queue::Queue<W::Item>>`), handed to a replacement.
    queue: Option<Box<dyn Any + Send + Sync>>,
    /// With `queue_dir`: the disk queue and its syncer.
    disk: Option<(durable::Disk, JoinHandle<()>)>,
}

/// The running senders of a config.
pub struct Push {
    senders: Vec<Running>,
    instance: String,
}

impl std::fmt::Debug for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push").field("senders", &self.senders.len()).finish()
    }
}

/// What a sender taken over by a reload leaves to its replacement.
struct Handover {
    stats: Arc<Stats>,
    queue: Option<Box<dyn Any + Send + Sync>>,
}

/// Checks that every push block of `config` can start: the files it names (token, password, CA) are read
/// and make a valid client, as [`Push::start`] and [`Push::reload`] will. An error is at the key that
/// names the file.
pub fn check(config: &PushConfig) -> Result<(), ConfigError> {
    let remote_write = config.remote_write.iter().enumerate().map(|(i, b)| ("remote_write", i, b));
    let otlp = config.otlp.iter().enumerate().map(|(i, b)| ("otlp", i, b));
    for (section, index, block) in remote_write.chain(otlp) {
        client(block).map_err(|(key, message)| match config.place(section, index) {
            Some(place) => place.error(key, message),
            None => ConfigError { file: "<push>".into(), line: 0, key: format!("{section}.{key}"), message },
        })?;
    }
    Ok(())
}

impl Push {
    /// Starts a sender per `[[remote_write]]` and `[[otlp]]` block of `config`, reading `registry` (the
    /// targets of `shard`, whose disk queues are its own); `instance` is OTLP's `service.instance.id`. Fails when a file named by a block
    /// (token, password, CA) cannot be read.
    pub fn start(
        config: &PushConfig,
        shard: Option<Shard>,
        registry: &Registry,
        instance: &str,
    ) -> Result<Push, PushError> {
        let mut push = Push { senders: Vec::new(), instance: instance.to_owned() };
        for (section, block) in config.blocks() {
            let sender = push.spawn(section, block, shard, registry, None)?;
            push.senders.push(sender);
        }
        Ok(push)
    }

    /// Makes the senders those of `config`: a sender whose block (and `[serve] shard`) did not change
    /// keeps running untouched; a changed one is replaced, the new one taking over its queue (a memory
    /// queue's items, or the same `queue_dir`) and its counters, after the old one's request in flight
    /// ends (within `deadline`); a removed one shuts down as at exit. Every new block's files (token,
    /// password, CA) are read first: if one fails, nothing changes. Returns how many senders were
    /// started or replaced.
    pub async fn reload(
        &mut self,
        config: &PushConfig,
        shard: Option<Shard>,
        registry: &Registry,
        deadline: Duration,
    ) -> Result<usize, PushError> {
        let wanted: Vec<(&'static str, &PushSection)> = config.blocks().collect();
        let same = |r: &Running, section: &str, block: &PushSection| {
            r.section == section && r.block == *block && r.shard == shard
        };
        for (section, block) in &wanted {
            if !self.senders.iter().any(|r| same(r, section, block)) {
                client(block).map_err(|(key, message)| PushError {
                    section,
                    sender: block.sender_name(),
                    message: format!("{key}: {message}"),
                })?;
            }
        }
        let mut kept: Vec<Option<Running>> = Vec::new();
        let mut handovers: std::collections::HashMap<(&'static str, String), Handover> = Default::default();
        for r in std::mem::take(&mut self.senders) {
            if let Some(i) = wanted.iter().position(|(s, b)| same(&r, s, b)) {
                kept.resize_with(kept.len().max(i + 1), || None);
                kept[i] = Some(r);
                continue;
            }
            let name = r.stats.sender.clone();
            let replaced = wanted.iter().any(|(s, b)| *s == r.section && b.sender_name() == name);
            if replaced {
                r.handoff.store(true, Ordering::Relaxed);
            }
            let section = r.section;
            let handover = r.finish(deadline).await;
            if replaced {
                handovers.insert((section, name), handover);
            }
        }
        let mut started = 0;
        for (i, (section, block)) in wanted.iter().enumerate() {
            match kept.get_mut(i).and_then(Option::take) {
                Some(r) => self.senders.push(r),
                None => {
                    let handover = handovers.remove(&(*section, block.sender_name()));
                    let r = self.spawn(section, block, shard, registry, handover)?;
                    self.senders.push(r);
                    started += 1;
                }
            }
        }
        Ok(started)
    }

    fn spawn(
        &self,
        section: &'static str,
        block: &PushSection,
        shard: Option<Shard>,
        registry: &Registry,
        handover: Option<Handover>,
    ) -> Result<Running, PushError> {
        if section == "remote_write" {
            let wire = remote_write::RemoteWrite::new(block.external_labels());
            self.spawn_wire(section, block, shard, wire, registry, handover)
        } else {
            let wire = otlp::OtlpWire::new(&self.instance, &block.external_labels());
            self.spawn_wire(section, block, shard, wire, registry, handover)
        }
    }

    fn spawn_wire<W: Wire>(
        &self,
        section: &'static str,
        block: &PushSection,
        shard: Option<Shard>,
        wire: W,
        registry: &Registry,
        handover: Option<Handover>,
    ) -> Result<Running, PushError> {
        let name = block.sender_name();
        let fail = |message| PushError { section, sender: name.clone(), message };
        let client = client(block).map_err(|(key, message)| fail(format!("{key}: {message}")))?;
        let inflight = Arc::new(AtomicU64::new(0));
        let (stop, _) = watch::channel(false);
        let handoff = Arc::new(AtomicBool::new(false));
        let plan = Plan {
            url: block.request_url(),
            batch: block.batch,
            max_per_send: *block.max_samples_per_send.get_ref(),
        };
        let (old_stats, old_queue) = match handover {
            Some(h) => (Some(h.stats), h.queue),
            None => (None, None),
        };
        let running = |stats, queue_len, sampler, sender, queue, disk| Running {
            section,
            block: block.clone(),
            shard,
            stats,
            queue_len,
            inflight: inflight.clone(),
            sampler,
            sender,
            stop: stop.clone(),
            handoff: handoff.clone(),
            queue,
            disk,
        };
        if let Some(dir) = block.queue_path(shard) {
            let stats = old_stats
                .filter(|s| s.has_disk() && s.queue_limit() == block.queue_max_bytes)
                .unwrap_or_else(|| Arc::new(Stats::with_disk(name.clone(), block.queue_max_bytes)));
            let disk = durable::Disk::open(block, dir, stats.clone()).map_err(|e| fail(e.to_string()))?;
            let context = Arc::new(wire.context());
            let (registry, sampler_stop) = (registry.clone(), stop.subscribe());
            let (sampler_disk, sampler_plan) = (disk.clone(), plan.clone());
            let sampler = tokio::spawn(async move {
                durable::sampler(wire, context, registry, sampler_disk, &sampler_plan, sampler_stop).await
            });
            let sender = tokio::spawn(durable::sender::<W>(
                client,
                plan,
                disk.clone(),
                stop.subscribe(),
                inflight.clone(),
            ));
            let syncer = tokio::spawn(durable::syncer(disk.clone(), block.queue_sync, stop.subscribe()));
            return Ok(running(stats, Box::new(|| 0), sampler, sender, None, Some((disk, syncer))));
        }
        let stats = old_stats
            .filter(|s| !s.has_disk() && s.queue_limit() == block.queue_bytes)
            .unwrap_or_else(|| Arc::new(Stats::new(name, block.queue_bytes)));
        let limit = usize::try_from(block.queue_bytes).unwrap_or(usize::MAX);
        let queue = Arc::new(memory_queue::Queue::<W::Item>::new(limit));
        // A replaced sender's queue: its items, oldest first, into the new bound.
        if let Some(old) = old_queue.and_then(|q| q.downcast::<Arc<memory_queue::Queue<W::Item>>>().ok()) {
            let dropped = queue.push(old.take(usize::MAX));
            stats.add_dropped(stats::reason::QUEUE_FULL, dropped);
            stats.set_queue(queue.bytes(), queue.oldest_ms());
        }
        let context = wire.context();
        let sampler = tokio::spawn(sender::sampler(
            wire,
            registry.clone(),
            queue.clone(),
            stats.clone(),
            plan.batch,
            stop.subscribe(),
        ));
        let sender = tokio::spawn(sender::sender::<W>(
            context,
            client,
            plan,
            queue.clone(),
            stats.clone(),
            (stop.subscribe(), handoff.clone()),
            inflight.clone(),
        ));
        let q = queue.clone();
        let held: Box<dyn Any + Send + Sync> = Box::new(queue);
        Ok(running(stats, Box::new(move || q.len()), sampler, sender, Some(held), None))
    }

    /// Every sender's stats, in config order (remote write first).
    pub fn stats(&self) -> Vec<Arc<Stats>> {
        self.senders.iter().map(|s| s.stats.clone()).collect()
    }

    /// Stops sampling, then: a memory queue sends what is queued within `deadline` and drops the rest
    /// (counted with `reason="dropped_shutdown"`); a disk queue finishes its request in flight within
    /// `deadline`, syncs, and keeps its backlog for the next start.
    pub async fn shutdown(self, deadline: Duration) {
        for s in &self.senders {
            s.stop.send_replace(true);
        }
        let end = tokio::time::Instant::now() + deadline;
        for s in self.senders {
            s.finish_by(end).await;
        }
    }
}

impl Running {
    /// Stops this sender (see [`Push::shutdown`]) within `deadline`, and returns what a replacement
    /// takes over.
    async fn finish(self, deadline: Duration) -> Handover {
        self.stop.send_replace(true);
        self.finish_by(tokio::time::Instant::now() + deadline).await
    }

    async fn finish_by(self, end: tokio::time::Instant) -> Handover {
        let _ = self.sampler.await;
        let mut task = self.sender;
        let finished = tokio::time::timeout_at(end, &mut task).await.is_ok();
        if !finished {
            task.abort();
            let _ = task.await;
        }
        let handoff = self.handoff.load(Ordering::Relaxed);
        match self.disk {
            Some((disk, syncer)) => {
                let _ = syncer.await;
                if let Err(e) = disk.sync().await {
                    eprintln!(
                        "telemon: push {}: {e}; the last acknowledgements may be sent again",
                        self.stats.sender
                    );
                }
            }
            None if !finished => {
                let left = self.inflight.load(Ordering::Relaxed);
                let queued = if handoff { 0 } else { (self.queue_len)() as u64 };
                self.stats.add_dropped(stats::reason::SHUTDOWN, left + queued);
            }
            None => {}
        }
        Handover { stats: self.stats, queue: self.queue }
    }
}

/// The HTTP client of a block: timeout, User-Agent, headers, auth and TLS roots; `Err((key, why))`.
fn client(block: &PushSection) -> Result<reqwest::Client, (&'static str, String)> {
    use base64::Engine as _;
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
    let mut headers = HeaderMap::new();
    for (k, v) in block.headers() {
        let name =
            HeaderName::from_bytes(k.as_bytes()).map_err(|e| ("headers", format!("header {k:?}: {e}")))?;
        let value = HeaderValue::from_str(&v).map_err(|e| ("headers", format!("header {k:?}: {e}")))?;
        headers.insert(name, value);
    }
    let read = |path: &std::path::Path, key: &'static str| {
        std::fs::read_to_string(path).map_err(|e| (key, format!("cannot read {}: {e}", path.display())))
    };
    if let Some(file) = &block.bearer_token_file {
        let token = read(file.get_ref(), "bearer_token_file")?;
        let mut v = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
            .map_err(|_| ("bearer_token_file", "the bearer token is not a valid header value".to_owned()))?;
        v.set_sensitive(true);
        headers.insert(AUTHORIZATION, v);
    }
    if let Some(auth) = &block.basic_auth {
        let a = auth.get_ref();
        let password = match (&a.password, &a.password_file) {
            (Some(p), _) => p.clone(),
            (None, Some(f)) => read(f, "basic_auth.password_file")?.trim_end_matches(['\r', '\n']).to_owned(),
            (None, None) => String::new(),
        };
        let mut v = HeaderValue::from_str(&format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{password}", a.username))
        ))
        .map_err(|_| ("basic_auth", "basic_auth is not a valid header value".to_owned()))?;
        v.set_sensitive(true);
        headers.insert(AUTHORIZATION, v);
    }
    let mut builder = reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .default_headers(headers)
        .timeout(block.timeout)
        .connect_timeout(block.timeout.min(Duration::from_secs(10)))
        .pool_max_idle_per_host(2);
    if let Some(ca) = block.tls.as_ref().and_then(|t| t.ca_file.as_ref()) {
        let key = "tls.ca_file";
        let pem = std::fs::read(ca).map_err(|e| (key, format!("cannot read {}: {e}", ca.display())))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| (key, format!("{}: {e}", ca.display())))?;
        if certs.is_empty() {
            return Err((key, format!("{}: no PEM certificate in it", ca.display())));
        }
        for c in certs {
            builder = builder.add_root_certificate(c);
        }
    }
    builder.build().map_err(|e| ("tls", format!("cannot build the HTTP client: {e}")))
}
