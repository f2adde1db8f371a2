//! Push senders: the fleet's store sent to a distributed engine, as Prometheus remote write 1.0
//! (`[[remote_write]]`) or OTLP/HTTP protobuf (`[[otlp]]`).
//!
//! A sender is a view like a scrape: every `batch` its sampler takes a [`FleetSnapshot`] (through
//! the adapter in [`view`]) and queues one sample per series in its own bounded [`queue::Queue`]
//! (the oldest dropped and counted when full); its HTTP loop sends the queue in order,
//! `max_samples_per_send` at a time, retrying what the protocol says to retry with exponential
//! backoff, jitter and `Retry-After`. Neither task ever holds up a collector or a scrape.
//!
//! [`FleetSnapshot`]: telemon_fleet::FleetSnapshot

#![warn(missing_docs)]

pub mod disk;
mod durable;
pub mod fuzz;

pub mod otlp;
pub mod queue;
pub mod remote_write;
mod sender;
pub mod stats;
pub mod view;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use sender::{Plan, Wire};
pub use sender::{RETRY_AFTER_MAX, RETRY_FIRST, RETRY_MAX};
pub use stats::Stats;
use telemon_fleet::config::{FleetConfig, PushSection, Shard};
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
    stats: Arc<Stats>,
    queue_len: Box<dyn Fn() -> usize + Send + Sync>,
    inflight: Arc<AtomicU64>,
    sampler: JoinHandle<()>,
    sender: JoinHandle<()>,
    /// With `queue_dir`: the disk queue and its syncer.
    disk: Option<(durable::Disk, JoinHandle<()>)>,
}

/// The running senders of a config.
pub struct Push {
    senders: Vec<Running>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push").field("senders", &self.senders.len()).finish()
    }
}

impl Push {
    /// Starts a sender per `[[remote_write]]` and `[[otlp]]` block of `config`, reading
    /// `registry`; `instance` is OTLP's `service.instance.id`. Fails when a file named by a block
    /// (token, password, CA) cannot be read.
    pub fn start(config: &FleetConfig, registry: &Registry, instance: &str) -> Result<Push, PushError> {
        let (stop, _) = watch::channel(false);
        let mut push = Push { senders: Vec::new(), stop };
        for block in &config.remote_write {
            let wire = remote_write::RemoteWrite::new(block.external_labels());
            push.spawn("remote_write", block, config.serve.shard, wire, registry)?;
        }
        for block in &config.otlp {
            let wire = otlp::OtlpWire::new(instance, &block.external_labels());
            push.spawn("otlp", block, config.serve.shard, wire, registry)?;
        }
        Ok(push)
    }

    fn spawn<W: Wire>(
        &mut self,
        section: &'static str,
        block: &PushSection,
        shard: Option<Shard>,
        wire: W,
        registry: &Registry,
    ) -> Result<(), PushError> {
        let name = block.sender_name();
        let fail = |message| PushError { section, sender: name.clone(), message };
        let client = client(block).map_err(fail)?;
        let inflight = Arc::new(AtomicU64::new(0));
        let plan = Plan {
            url: block.request_url(),
            batch: block.batch,
            max_per_send: *block.max_samples_per_send.get_ref(),
        };
        if block.queue_dir.is_some() {
            let stats = Arc::new(Stats::with_disk(name.clone(), block.queue_max_bytes));
            let disk = durable::Disk::open(block, shard, stats.clone()).map_err(fail)?;
            let context = Arc::new(wire.context());
            let (registry, stop) = (registry.clone(), self.stop.subscribe());
            let (sampler_disk, sampler_plan) = (disk.clone(), plan.clone());
            let sampler = tokio::spawn(async move {
                durable::sampler(wire, context, registry, sampler_disk, &sampler_plan, stop).await
            });
            let sender = tokio::spawn(durable::sender::<W>(
                client,
                plan,
                disk.clone(),
                self.stop.subscribe(),
                inflight.clone(),
            ));
            let syncer = tokio::spawn(durable::syncer(disk.clone(), block.queue_sync, self.stop.subscribe()));
            self.senders.push(Running {
                stats,
                queue_len: Box::new(|| 0),
                inflight,
                sampler,
                sender,
                disk: Some((disk, syncer)),
            });
            return Ok(());
        }
        let stats = Arc::new(Stats::new(name, block.queue_bytes));
        let queue =
            Arc::new(queue::Queue::<W::Item>::new(usize::try_from(block.queue_bytes).unwrap_or(usize::MAX)));
        let context = wire.context();
        let sampler = tokio::spawn(sender::sampler(
            wire,
            registry.clone(),
            queue.clone(),
            stats.clone(),
            plan.batch,
            self.stop.subscribe(),
        ));
        let sender = tokio::spawn(sender::sender::<W>(
            context,
            client,
            plan,
            queue.clone(),
            stats.clone(),
            self.stop.subscribe(),
            inflight.clone(),
        ));
        let q = queue.clone();
        self.senders.push(Running {
            stats,
            queue_len: Box::new(move || q.len()),
            inflight,
            sampler,
            sender,
            disk: None,
        });
        Ok(())
    }

    /// Every sender's stats, in config order (remote write first).
    pub fn stats(&self) -> Vec<Arc<Stats>> {
        self.senders.iter().map(|s| s.stats.clone()).collect()
    }

    /// Stops sampling, then: a memory queue sends what is queued within `deadline` and drops the rest
    /// (counted with `reason="dropped_shutdown"`); a disk queue finishes its request in flight within
    /// `deadline`, syncs, and keeps its backlog for the next start.
    pub async fn shutdown(self, deadline: Duration) {
        self.stop.send_replace(true);
        let end = tokio::time::Instant::now() + deadline;
        for s in self.senders {
            let _ = s.sampler.await;
            let mut task = s.sender;
            let finished = tokio::time::timeout_at(end, &mut task).await.is_ok();
            if !finished {
                task.abort();
                let _ = task.await;
            }
            match s.disk {
                Some((disk, syncer)) => {
                    let _ = syncer.await;
                    if let Err(e) = disk.sync().await {
                        eprintln!(
                            "telemon: push {}: {e}; the last acknowledgements may be sent again",
                            s.stats.sender
                        );
                    }
                }
                None if !finished => {
                    let left = s.inflight.load(std::sync::atomic::Ordering::Relaxed);
                    s.stats.add_dropped(stats::reason::SHUTDOWN, left + (s.queue_len)() as u64);
                }
                None => {}
            }
        }
    }
}

/// The HTTP client of a block: timeout, User-Agent, headers, auth and TLS roots.
fn client(block: &PushSection) -> Result<reqwest::Client, String> {
    use base64::Engine as _;
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
    let mut headers = HeaderMap::new();
    for (k, v) in block.headers() {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k:?}: {e}"))?;
        let value = HeaderValue::from_str(&v).map_err(|e| format!("header {k:?}: {e}"))?;
        headers.insert(name, value);
    }
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
    };
    if let Some(file) = &block.bearer_token_file {
        let token = read(file.get_ref(), "bearer_token_file")?;
        let mut v = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
            .map_err(|_| "the bearer token is not a valid header value".to_owned())?;
        v.set_sensitive(true);
        headers.insert(AUTHORIZATION, v);
    }
    if let Some(auth) = &block.basic_auth {
        let a = auth.get_ref();
        let password = match (&a.password, &a.password_file) {
            (Some(p), _) => p.clone(),
            (None, Some(f)) => read(f, "password_file")?.trim_end_matches(['\r', '\n']).to_owned(),
            (None, None) => String::new(),
        };
        let mut v = HeaderValue::from_str(&format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{password}", a.username))
        ))
        .map_err(|_| "basic_auth is not a valid header value".to_owned())?;
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
        let pem = std::fs::read(ca).map_err(|e| format!("cannot read tls.ca_file {}: {e}", ca.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("tls.ca_file {}: {e}", ca.display()))?;
        if certs.is_empty() {
            return Err(format!("tls.ca_file {}: no PEM certificate in it", ca.display()));
        }
        for c in certs {
            builder = builder.add_root_certificate(c);
        }
    }
    builder.build().map_err(|e| format!("cannot build the HTTP client: {e}"))
}
