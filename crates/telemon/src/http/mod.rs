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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::config::{Config, Source};
use telemon_fleet::pace::Pace;
use telemon_fleet::render::Format;
use telemon_fleet::runtimes::Runtimes;
use telemon_fleet::Fleet;
use telemon_push::{Push, Stats as PushStats};

use axum::http::StatusCode;

pub mod check;
mod conn;
mod probe;
pub mod probe_allow;
mod reload;
mod thread;

pub use crate::exposition::accepts_gzip;
pub use crate::web::target_json;
use crate::web::TargetJson;
pub use conn::{
    open_file_limit, HttpLimits, WebConfig, WebConfigError, WebGate, HTTP_SHARE_DIVISOR, OWN_FILES,
};
pub use conn::{
    ClientAuth, Curve, PemSource, RateLimit, TlsSettings, TlsVersion, ALLOWED_HEADERS, AUTH_CACHE_ENTRIES,
    CERT_CHECK_INTERVAL, MAX_PEM_BYTES, MAX_WEB_CONFIG_BYTES, OPEN_PATH,
};
pub use probe::{
    probe_allowed, ProbeRefusal, DEFAULT_PROBE_TIMEOUT, MAX_PROBES, PROBE_IDLE, RESOLVE_TIMEOUT,
};
pub use reload::{Control, PUSH_HANDOVER};
pub use thread::REPLACED_LINGER;

use check::Checked;
use thread::{HttpThread, Serving};

use crate::exposition::exposition;
use probe::Probes;

/// A running exporter: the fleet and its HTTP server.
///
/// HTTP runs on a thread of its own (with its own single-threaded runtime), so that a scrape never
/// queues behind the collectors of a busy fleet, and rendering uses the second core.
#[derive(Debug)]
pub struct Server {
    fleet: Arc<Fleet>,
    web: Arc<WebGate>,
    control: Arc<Control>,
}

/// Checks `config` ([`check::check`]), then starts it as [`start_checked`] does; a config that fails
/// the check is an `InvalidInput` error.
pub async fn start(config: &Config, listen: Option<&str>) -> std::io::Result<Server> {
    let checked = check::check(config.clone()).map_err(invalid_input)?;
    start_checked(checked, Launch { listen: listen.map(str::to_owned), ..Launch::default() }).await
}

/// What `telemon serve` gives a checked config to run it, beside the config itself.
#[derive(Debug, Default)]
pub struct Launch {
    /// The HTTP address (`--listen`), over `[serve] listen`.
    pub listen: Option<String>,
    /// What the fleet's connections are recorded into (`--record`).
    pub recording: Option<Arc<telemon_fleet::recording::Recording>>,
    /// Where a reload reads the config again; without it a reload fails, saying so.
    pub source: Option<Source>,
    /// The collectors' pace, whose wake-up slack `[serve] wakeup_slack` sets (now, and at each reload).
    pub pace: Option<Pace>,
    /// Whether `POST /-/reload` is allowed (`--web.enable-lifecycle`).
    pub lifecycle: bool,
}

/// Starts a checked config, in one direction: binds the HTTP port (whose number names this instance), starts
/// the fleet with its section (recorded into `recording` when given), then the push senders with theirs,
/// then serves HTTP with `[serve]` on `listen` (`[serve] listen` when `None`), behind the web
/// configuration the check read, with what `launch` gives. The targets run on the calling runtime and, with `[serve] threads` above 1,
/// on as many single-threaded runtimes in all ([`Runtimes`]).
pub async fn start_checked(checked: Checked, launch: Launch) -> std::io::Result<Server> {
    let Checked { config, web } = checked;
    let Launch { listen: listen_override, recording, source, pace, lifecycle } = launch;
    let config = &config;
    if let Some(pace) = &pace {
        pace.set(config.serve.wakeup_slack);
    }
    let listen = listen_override.clone().unwrap_or_else(|| config.serve.listen.clone());
    let listener = thread::bind(&listen)?;
    let web = Arc::new(WebGate::new(web));
    let addr = listener.local_addr()?;
    let runtimes = Runtimes::start(config.serve.collector_threads(), pace.as_ref())?;
    let fleet = Arc::new(Fleet::on(recording.clone(), runtimes));
    fleet.apply(&config.fleet).await?;
    let instance = format!("{}:{}", hostname(), addr.port());
    let push =
        Push::start(&config.push, config.serve.shard, fleet.registry(), &instance).map_err(invalid_input)?;
    let runtime = tokio::runtime::Handle::current();
    let probes = Arc::new(Probes::new(
        &config.fleet.protocols,
        config.serve.series_limit,
        config.serve.probe_allow.clone(),
        runtime,
    ));
    let control = Arc::new(Control::new(
        config,
        fleet.clone(),
        web.clone(),
        probes.clone(),
        push,
        listen_override,
        recording,
    ));
    if let Some(source) = source {
        control.set_source(source);
    }
    if let Some(pace) = pace {
        control.set_pace(pace);
    }
    control.enable_lifecycle(lifecycle);
    let view = crate::web::View::start(fleet.clone(), config.serve.web_history);
    let state = AppState {
        fleet: fleet.clone(),
        probes: probes.clone(),
        control: control.clone(),
        started: Instant::now(),
    };
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/targets", get(targets))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/probe", get(probe::probe))
        .route("/-/reload", post(reload_endpoint).put(reload_endpoint))
        .with_state(state)
        .merge(view.routes());
    let limits = HttpLimits::new(&config.serve, open_file_limit());
    tracing::info!(
        max_connections = limits.max_connections,
        idle_timeout = ?limits.idle_timeout,
        "HTTP connections are capped (the rest of the open-file limit is kept for targets)"
    );
    let (failed, _) = tokio::sync::watch::channel(None);
    let serving = Serving { app, gate: web.clone(), probes, view, failed };
    let http = HttpThread::spawn(listen, listener, limits, &serving)?;
    control.serve(serving, http);
    Ok(Server { fleet, web, control })
}

impl Server {
    /// The address HTTP is served on (a reload may move it).
    pub fn local_addr(&self) -> SocketAddr {
        self.control.local_addr()
    }

    /// The web configuration (TLS, users, headers) in force.
    pub fn web(&self) -> &WebGate {
        &self.web
    }

    /// The fleet behind the exporter.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Serves until `signal` completes or the server fails, then shuts down.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) -> std::io::Result<()> {
        let mut failed = self.control.failed();
        let result = tokio::select! {
            () = signal => Ok(()),
            f = failed.wait_for(Option::is_some) => match f {
                Ok(why) => Err(std::io::Error::other(why.clone().unwrap_or_default())),
                Err(_) => Err(std::io::Error::other("the HTTP server ended")),
            },
        };
        self.shutdown().await;
        result
    }

    /// The push senders' stats (`[[remote_write]]` then `[[otlp]]`, in config order).
    pub fn push_stats(&self) -> Vec<Arc<PushStats>> {
        self.control.push_stats.lock().unwrap_or_else(|e| e.into_inner()).to_vec()
    }

    /// What reloads the config (`SIGHUP`, `POST /-/reload`): set its source, then call
    /// [`Control::reload`].
    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// Stops serving, flushes the push senders (within [`telemon_push::SHUTDOWN_DEADLINE`]) and
    /// stops every target.
    pub async fn shutdown(self) {
        self.control.shutdown().await;
        self.fleet.shutdown().await;
    }
}

#[derive(Clone)]
pub(crate) struct AppState {
    fleet: Arc<Fleet>,
    probes: Arc<Probes>,
    control: Arc<Control>,
    started: Instant,
}

fn invalid_input(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
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

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let open_metrics = Format::from_accept(accept) == Format::OpenMetrics;
    let push = state.control.push_stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut own = telemon_push::stats::render(&push, open_metrics);
    own.push_str(&crate::build_info::render(open_metrics));
    own.push_str(&state.fleet.render_tail(open_metrics));
    own.push_str(&state.control.render(open_metrics));
    own.push_str(&state.probes.render(open_metrics));
    if let Some(recording) = state.control.recording() {
        own.push_str(&recording.render(open_metrics));
    }
    own.push_str(&conn::render_refused(open_metrics));
    // From the first scrape on, each publication renders its target's lines on its collector's thread.
    state.fleet.registry().want_pages();
    exposition(state.fleet.snapshot(), &headers, own)
}

async fn targets(State(state): State<AppState>) -> Response {
    /// The answer, written straight from the snapshots (keys in the order they always had).
    #[derive(serde::Serialize)]
    struct Targets<'a> {
        probes: Vec<TargetJson<'a>>,
        shard: Option<String>,
        targets: Vec<TargetJson<'a>>,
        uptime_seconds: f64,
    }
    let (snapshot, probes) = (state.fleet.snapshot(), state.probes.snapshot());
    let body = Targets {
        probes: probes.iter().map(|t| TargetJson::new(t)).collect(),
        shard: state.control.config().serve.shard.map(|s| s.to_string()),
        targets: snapshot.targets.iter().map(|t| TargetJson::new(t)).collect(),
        uptime_seconds: state.started.elapsed().as_secs_f64(),
    };
    let mut out = serde_json::to_vec(&body).unwrap_or_default();
    out.push(b'\n');
    ([(header::CONTENT_TYPE, "application/json")], out).into_response()
}

/// `POST /-/reload`: reloads the config when `--web.enable-lifecycle` is on (as Prometheus's).
async fn reload_endpoint(State(state): State<AppState>) -> Response {
    if !state.control.lifecycle() {
        return (
            StatusCode::FORBIDDEN,
            "Lifecycle API is not enabled (start with --web.enable-lifecycle).\n",
        )
            .into_response();
    }
    match state.control.reload().await {
        Ok(what) => (StatusCode::OK, format!("reloaded: {what}\n")).into_response(),
        Err(why) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("failed to reload config: {why}\n")).into_response()
        }
    }
}
