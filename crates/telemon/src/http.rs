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

use std::io::Write as _;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::Deserialize;

use telemon_fleet::collect::{self, AbortOnDrop};
use telemon_fleet::config::FleetConfig;
use telemon_fleet::config::Shard;
use telemon_fleet::render::{Chunks, Format, CHUNK};
use telemon_fleet::{Fleet, FleetSnapshot, Protocol, Publisher, Registry, TargetSnapshot};
use telemon_push::{Push, Stats as PushStats};

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
    let limits = HttpLimits::new(&config.serve, open_file_limit());
    tracing::info!(
        max_connections = limits.max_connections,
        idle_timeout = ?limits.idle_timeout,
        "HTTP connections are capped (the rest of the open-file limit is kept for targets)"
    );
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
                let listener = tokio::net::TcpListener::from_std(listener)?;
                serve_http(listener, app, limits, async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
            })
        });
        let _ = done_tx.send(served);
    })?;
    Ok(Server { addr, fleet, stop, http, thread: Some(thread), push: Some(push) })
}

/// Descriptors kept aside for the process itself (logs, the config, listeners) before the
/// open-file limit is shared out.
pub const OWN_FILES: u64 = 64;
/// The share of the open-file limit (after [`OWN_FILES`]) that HTTP connections may take: a
/// quarter, so that at least three quarters stay for the targets' connections.
pub const HTTP_SHARE_DIVISOR: u64 = 4;

/// The bounds of the HTTP side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// The most connections open at once: `[serve] max_connections`, but at most
    /// (open-file limit - [`OWN_FILES`]) / [`HTTP_SHARE_DIVISOR`] (and at least 1).
    pub max_connections: usize,
    /// The deadline for a request's headers, and for an idle keep-alive connection.
    pub idle_timeout: Duration,
}

impl HttpLimits {
    /// The limits from `[serve]` and the process's soft open-file limit.
    pub fn new(serve: &telemon_fleet::config::ServeSection, open_files: u64) -> HttpLimits {
        let share = open_files.saturating_sub(OWN_FILES) / HTTP_SHARE_DIVISOR;
        let share = usize::try_from(share).unwrap_or(usize::MAX).max(1);
        HttpLimits { max_connections: serve.max_connections.min(share), idle_timeout: serve.idle_timeout }
    }
}

/// The soft open-file limit (`Max open files` of `/proc/self/limits`); 1024 when unknown.
pub fn open_file_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .map_or(1024, |soft| soft.parse().unwrap_or(u64::MAX))
}

/// Serves `app` on `listener` until `stop`: at most `limits.max_connections` connections at once
/// (a connection beyond is closed at once and counted in
/// `telemon_http_refused_connections_total`), each closed when a request's headers take longer
/// than `limits.idle_timeout` or it stays idle that long between requests.
async fn serve_http(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: HttpLimits,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .keep_alive(true);
    let mut connections = tokio::task::JoinSet::new();
    let mut last_warning: Option<Instant> = None;
    tokio::pin!(stop);
    loop {
        let (stream, _peer) = tokio::select! {
            () = &mut stop => break,
            Some(_) = connections.join_next() => continue,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, most likely: let connections end before accepting again.
                    tracing::warn!(error = %e, "cannot accept an HTTP connection");
                    tokio::time::sleep(collect::ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            telemon_fleet::own::http_refused();
            if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "refusing HTTP connections: too many open (counted in telemon_http_refused_connections_total; logged once a minute)"
                );
                last_warning = Some(Instant::now());
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service.clone());
        connections.spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    Ok(())
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

    /// Stops serving, flushes the push senders (within [`telemon_push::SHUTDOWN_DEADLINE`]) and
    /// stops every target.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(push) = self.push.take() {
            push.shutdown(telemon_push::SHUTDOWN_DEADLINE).await;
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

/// Whether an `Accept-Encoding` header accepts gzip (`gzip` or `*`, with a q-value above 0).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|v| {
        v.split(',').any(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(0.0)))
                .unwrap_or(1.0);
            (name.eq_ignore_ascii_case("gzip") || name == "*") && q > 0.0
        })
    })
}

/// A page's chunks gzipped on the fly (fast level: a scrape is CPU-bound, the network rarely is).
struct Gzip {
    chunks: Chunks,
    encoder: Option<GzEncoder<Vec<u8>>>,
}

impl Iterator for Gzip {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        loop {
            let encoder = self.encoder.as_mut()?;
            match self.chunks.next() {
                Some(chunk) => {
                    encoder.write_all(&chunk).expect("writing to a Vec cannot fail");
                    if encoder.get_ref().len() >= CHUNK / 4 {
                        return Some(Bytes::from(std::mem::take(encoder.get_mut())));
                    }
                }
                None => {
                    let rest = self.encoder.take()?.finish().expect("writing to a Vec cannot fail");
                    return (!rest.is_empty()).then(|| Bytes::from(rest));
                }
            }
        }
    }
}

/// The exposition of `snapshot` in the format `Accept` asks for, streamed in chunks, and gzipped
/// when `Accept-Encoding` allows it.
fn exposition(snapshot: FleetSnapshot, headers: &HeaderMap, tail: String) -> Response {
    let header_str = |name| headers.get(name).and_then(|v: &header::HeaderValue| v.to_str().ok());
    let format = Format::from_accept(header_str(header::ACCEPT));
    let chunks = Chunks::new(snapshot, format).with_tail(tail);
    let ok = Ok::<Bytes, std::convert::Infallible>;
    if accepts_gzip(header_str(header::ACCEPT_ENCODING)) {
        let gzip = Gzip {
            chunks,
            encoder: Some(GzEncoder::new(Vec::with_capacity(CHUNK / 2), Compression::fast())),
        };
        (
            [
                (header::CONTENT_TYPE, format.content_type()),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "accept-encoding"),
            ],
            Body::from_stream(futures::stream::iter(gzip.map(ok))),
        )
            .into_response()
    } else {
        (
            [(header::CONTENT_TYPE, format.content_type()), (header::VARY, "accept-encoding")],
            Body::from_stream(futures::stream::iter(chunks.map(ok))),
        )
            .into_response()
    }
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let open_metrics = Format::from_accept(accept) == Format::OpenMetrics;
    let mut own = telemon_push::stats::render(&state.push, open_metrics);
    if let Some(recording) = telemon_fleet::record::installed() {
        own.push_str(&recording.render(open_metrics));
    }
    exposition(state.fleet.snapshot(), &headers, own)
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
        "labels": t.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<HashMap<_, _>>(),
        "state": t.state.as_str(),
        "last_error": t.last_error.as_deref(),
        "last_update": t.last_update.map(unix),
        "connects": t.connects,
        "reconnects": t.connects.saturating_sub(1),
        "errors": errors,
        "series": t.series.len(),
        "dropped_series": t.dropped_series,
        "received_bytes": t.received_bytes,
    })
}

async fn targets(State(state): State<AppState>) -> Response {
    let snapshot = state.fleet.snapshot();
    let body = serde_json::json!({
        "uptime_seconds": state.started.elapsed().as_secs_f64(),
        "shard": state.shard.map(|s| s.to_string()),
        "targets": snapshot.targets.iter().map(|t| target_json(t)).collect::<Vec<_>>(),
        "probes": state.probes.snapshot().iter().map(|t| target_json(t)).collect::<Vec<_>>(),
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
        Some(t) => exposition(FleetSnapshot::from(vec![t]), &headers, String::new()),
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

    fn snapshot(&self) -> Vec<Arc<TargetSnapshot>> {
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

#[cfg(test)]
mod tests {
    use super::accepts_gzip;

    #[test]
    fn gzip_negotiation() {
        assert!(!accepts_gzip(None));
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("GZIP")));
        assert!(accepts_gzip(Some("deflate, gzip;q=0.5")));
        assert!(accepts_gzip(Some("*")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("gzip; q=0.0, br")));
        assert!(!accepts_gzip(Some("x-gzip-ish")));
    }
}
