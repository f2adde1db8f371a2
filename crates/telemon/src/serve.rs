//! The fleet as a Prometheus exporter (`telemon serve`).
//!
//! | path | answer |
//! |---|---|
//! | `/metrics` | every target's cached series: text format 0.0.4, or OpenMetrics when `Accept` asks |
//! | `/targets` | JSON: every target's state, last error, last update, connects and errors |
//! | `/healthz` | `ok` |
//! | `/probe?target=ADDR&protocol=hmon\|sysinfo\|smon` | one target's series, collected on demand (the multi-target exporter pattern) |
//!
//! A scrape of `/metrics` only renders the cache: no target I/O happens at scrape time. A probe
//! starts a collector for its target the first time (and keeps it, so later probes reuse the
//! connection), waits within the scrape timeout for its first values, and answers with that target
//! alone. Probe targets nobody asked for in [`PROBE_IDLE`] are dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use crate::fleet::collect::{self, AbortOnDrop};
use crate::fleet::config::FleetConfig;
use crate::fleet::config::Shard;
use crate::fleet::render::{render, Format};
use crate::fleet::{Fleet, FleetSnapshot, Protocol, Publisher, Registry, TargetSnapshot};
use crate::push::{Push, Stats as PushStats};

/// A probe target not asked for this long is dropped, with its connection.
pub const PROBE_IDLE: Duration = Duration::from_secs(600);
/// The most probe targets kept at once.
pub const MAX_PROBES: usize = 10_000;
/// The probe timeout when Prometheus does not send `X-Prometheus-Scrape-Timeout-Seconds`.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A running exporter: the fleet and its HTTP server.
///
/// HTTP runs on a thread of its own (with its own single-threaded runtime), so that a scrape never
/// queues behind the collectors of a busy fleet, and rendering uses the second core.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    fleet: Arc<Fleet>,
    stop: tokio::sync::watch::Sender<bool>,
    http: tokio::sync::oneshot::Receiver<std::io::Result<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    push: Option<Push>,
}

/// Starts every target of `config` and serves HTTP on `listen` (`config.serve.listen` when `None`).
/// The targets run on the calling runtime.
pub async fn start(config: &FleetConfig, listen: Option<&str>) -> std::io::Result<Server> {
    let listen = listen.unwrap_or(&config.serve.listen);
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let fleet = Arc::new(Fleet::start(config).await?);
    let instance = format!("{}:{}", hostname(), addr.port());
    let push = Push::start(config, fleet.registry(), &instance)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let runtime = tokio::runtime::Handle::current();
    let state = AppState {
        fleet: fleet.clone(),
        probes: Arc::new(Probes::new(config.serve.series_limit, runtime.clone())),
        started: Instant::now(),
        push: push.stats().into(),
        shard: config.serve.shard,
    };
    let app = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/targets", get(targets))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/probe", get(probe))
        .with_state(state.clone());
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let (done_tx, http) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new().name("telemon-http".into()).spawn(move || {
        let served = tokio::runtime::Builder::new_current_thread().enable_all().build().and_then(|rt| {
            rt.block_on(async move {
                let sweeper = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        state.probes.sweep(PROBE_IDLE);
                    }
                });
                let _sweeper = AbortOnDrop(sweeper);
                axum::serve(tokio::net::TcpListener::from_std(listener)?, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    })
                    .await
            })
        });
        let _ = done_tx.send(served);
    })?;
    Ok(Server { addr, fleet, stop, http, thread: Some(thread), push: Some(push) })
}

impl Server {
    /// The address HTTP is served on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fleet behind the exporter.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Serves until `signal` completes or the server fails, then shuts down.
    pub async fn run_until(mut self, signal: impl std::future::Future<Output = ()>) -> std::io::Result<()> {
        let result = tokio::select! {
            () = signal => Ok(()),
            r = &mut self.http => r.unwrap_or_else(|_| Err(std::io::Error::other("the HTTP thread ended"))),
        };
        self.shutdown().await;
        result
    }

    /// The push senders' stats (`[[remote_write]]` then `[[otlp]]`, in config order).
    pub fn push_stats(&self) -> Vec<Arc<PushStats>> {
        self.push.as_ref().map(Push::stats).unwrap_or_default()
    }

    /// Stops serving, flushes the push senders (within [`crate::push::SHUTDOWN_DEADLINE`]) and
    /// stops every target.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(push) = self.push.take() {
            push.shutdown(crate::push::SHUTDOWN_DEADLINE).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut self.http).await;
        if let Some(t) = self.thread.take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
        self.fleet.shutdown().await;
    }
}

#[derive(Clone)]
struct AppState {
    fleet: Arc<Fleet>,
    probes: Arc<Probes>,
    started: Instant,
    push: Arc<[Arc<PushStats>]>,
    shard: Option<Shard>,
}

/// This host's name (for OTLP's `service.instance.id`), `localhost` when unknown.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        "<html><head><title>telemon</title></head><body><h1>telemon serve</h1><ul>\
         <li><a href=\"/metrics\">/metrics</a></li><li><a href=\"/targets\">/targets</a></li>\
         <li><a href=\"/healthz\">/healthz</a></li>\
         <li>/probe?target=HOST:PORT&amp;protocol=hmon|sysinfo|smon</li></ul></body></html>\n",
    )
}

fn exposition(snapshot: &FleetSnapshot, headers: &HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    ([(header::CONTENT_TYPE, format.content_type())], render(snapshot, format)).into_response()
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if state.push.is_empty() {
        return exposition(&state.fleet.snapshot(), &headers);
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    let mut body = render(&state.fleet.snapshot(), format);
    let own = crate::push::stats::render(&state.push, format == Format::OpenMetrics);
    match body.strip_suffix("# EOF\n").map(str::len) {
        Some(end) if format == Format::OpenMetrics => body.insert_str(end, &own),
        _ => body.push_str(&own),
    }
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

/// One target as `/targets` shows it.
pub fn target_json(t: &TargetSnapshot) -> serde_json::Value {
    let unix =
        |at: std::time::SystemTime| at.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let errors: serde_json::Map<String, serde_json::Value> =
        t.errors.iter().map(|(k, n)| (k.as_str().to_owned(), n.into())).collect();
    serde_json::json!({
        "name": &*t.name,
        "protocol": t.protocol.as_str(),
        "labels": t.labels.iter().cloned().collect::<HashMap<_, _>>(),
        "state": t.state.as_str(),
        "last_error": t.last_error,
        "last_update": t.last_update.map(unix),
        "connects": t.connects,
        "reconnects": t.connects.saturating_sub(1),
        "errors": errors,
        "series": t.series.len(),
        "dropped_series": t.dropped_series,
    })
}

async fn targets(State(state): State<AppState>) -> Response {
    let snapshot = state.fleet.snapshot();
    let body = serde_json::json!({
        "uptime_seconds": state.started.elapsed().as_secs_f64(),
        "shard": state.shard.map(|s| s.to_string()),
        "targets": snapshot.targets.iter().map(target_json).collect::<Vec<_>>(),
        "probes": state.probes.snapshot().iter().map(target_json).collect::<Vec<_>>(),
    });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string() + "\n").into_response()
}

#[derive(Debug, Deserialize)]
struct ProbeQuery {
    target: Option<String>,
    protocol: Option<String>,
}

fn bad_request(message: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, message.into() + "\n").into_response()
}

async fn probe(State(state): State<AppState>, Query(q): Query<ProbeQuery>, headers: HeaderMap) -> Response {
    let Some(target) = q.target.filter(|t| !t.is_empty()) else {
        return bad_request("missing ?target=HOST:PORT");
    };
    let protocol = match q.protocol.as_deref().map(Protocol::from_name) {
        Some(Some(p @ (Protocol::Hmon | Protocol::Sysinfo | Protocol::Smon))) => p,
        Some(_) => return bad_request("protocol must be hmon, sysinfo or smon"),
        None => return bad_request("missing &protocol=hmon|sysinfo|smon"),
    };
    // Answer a little before Prometheus gives up on the scrape.
    let timeout = headers
        .get("x-prometheus-scrape-timeout-seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64((s * 0.9).min(60.0)))
        .unwrap_or(DEFAULT_PROBE_TIMEOUT);
    match state.probes.probe(protocol, &target, timeout).await {
        Some(t) => exposition(&FleetSnapshot { targets: vec![t] }, &headers),
        None => (StatusCode::SERVICE_UNAVAILABLE, format!("more than {MAX_PROBES} probe targets\n"))
            .into_response(),
    }
}

/// Probe targets: one registry per protocol (so that a target is named by its address alone), and
/// the collector task of each.
struct Probes {
    registries: HashMap<Protocol, Registry>,
    tasks: Mutex<HashMap<(Protocol, String), (Instant, AbortOnDrop)>>,
    series_limit: usize,
    /// The fleet's runtime, where probe collectors run (not the HTTP thread's).
    runtime: tokio::runtime::Handle,
}

impl Probes {
    fn new(series_limit: usize, runtime: tokio::runtime::Handle) -> Self {
        let registries = Protocol::ALL.into_iter().map(|p| (p, Registry::new())).collect();
        Probes { registries, tasks: Mutex::new(HashMap::new()), series_limit, runtime }
    }

    fn snapshot(&self) -> Vec<TargetSnapshot> {
        Protocol::ALL.iter().flat_map(|p| self.registries[p].snapshot().targets).collect()
    }

    /// Starts (or reuses) the collector of `addr` and waits up to `timeout` for its values; `None`
    /// when there are too many probe targets.
    async fn probe(&self, protocol: Protocol, addr: &str, timeout: Duration) -> Option<TargetSnapshot> {
        let registry = &self.registries[&protocol];
        let mut changed = registry.changed();
        {
            let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
            let key = (protocol, addr.to_owned());
            let full = tasks.len() >= MAX_PROBES;
            match tasks.get_mut(&key) {
                Some((used, _)) => *used = Instant::now(),
                None if full => return None,
                None => {
                    let p = Publisher::new(registry, addr, protocol, Vec::new(), self.series_limit)
                        .remove_on_drop();
                    let task = match protocol {
                        Protocol::Hmon => {
                            let plan = collect::hmon::Plan::default();
                            self.runtime.spawn(collect::hmon::run_connect(p, addr.to_owned(), plan))
                        }
                        Protocol::Smon => self
                            .runtime
                            .spawn(collect::smon::run(p, collect::smon::Source::Connect(addr.to_owned()))),
                        _ => {
                            let endpoint = collect::sysinfo::endpoint(Some(addr), None);
                            let reports = collect::sysinfo::DEFAULT_REPORTS.to_vec();
                            self.runtime.spawn(collect::sysinfo::run(
                                p,
                                endpoint,
                                reports,
                                Duration::from_secs(1),
                            ))
                        }
                    };
                    tasks.insert(key, (Instant::now(), AbortOnDrop(task)));
                }
            }
        }
        // Ready: up with values, or down after a failure.
        let ready = |t: &TargetSnapshot| {
            (t.is_up() && !t.series.is_empty()) || (!t.is_up() && t.last_error.is_some())
        };
        let current = || registry.snapshot().get(addr).cloned();
        let _ = tokio::time::timeout(timeout, async {
            loop {
                if current().is_some_and(|t| ready(&t)) {
                    return;
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        current()
    }

    /// Drops the probe targets not asked for within `idle`.
    fn sweep(&self, idle: Duration) {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, (used, _)| used.elapsed() < idle);
    }
}
