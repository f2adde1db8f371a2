//! The HTTP connections: the listener loop with its connection cap and idle deadline, and the web
//! configuration file (TLS, basic auth, headers) every connection passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use telemon_fleet::collect;

mod auth;
mod gate;
mod settings;
mod tls;
mod web_config;

pub use auth::{AUTH_CACHE_ENTRIES, OPEN_PATH};
pub use settings::{ClientAuth, Curve, PemSource, RateLimit, TlsSettings, TlsVersion, MAX_PEM_BYTES};
pub use tls::CERT_CHECK_INTERVAL;
pub use web_config::{WebConfig, WebConfigError, ALLOWED_HEADERS, MAX_WEB_CONFIG_BYTES};

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
///
/// Each connection takes the web config in force when it is accepted (`gate`): its TLS handshake
/// (on the connection's own task, within `limits.idle_timeout`, so that a slow client never holds
/// up the accept loop), then basic auth, the rate limit and the response headers around the whole
/// of `app`.
pub(super) async fn serve_http(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: HttpLimits,
    gate: Arc<WebGate>,
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
        let (stream, peer) = tokio::select! {
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
        let web = gate.current();
        let acceptor = web.as_ref().and_then(|w| w.acceptor.clone());
        let service = gate::Gatekeeper::new(service.clone(), web);
        let builder = builder.clone();
        let handshake_deadline = limits.idle_timeout;
        connections.spawn(async move {
            match acceptor {
                None => {
                    let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                }
                Some(acceptor) => match tokio::time::timeout(handshake_deadline, acceptor.accept(stream))
                    .await
                {
                    Ok(Ok(tls)) => {
                        let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service).await;
                    }
                    Ok(Err(e)) => tracing::debug!(peer = %peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(peer = %peer, "TLS handshake timed out"),
                },
            }
            drop(permit);
        });
    }
    Ok(())
}

/// The web configuration in force, shared by every connection and replaced on reload.
#[derive(Debug, Default)]
pub struct WebGate {
    config: std::sync::RwLock<Option<Arc<WebConfig>>>,
}

impl WebGate {
    /// A gate applying `config` (plain HTTP with no users when `None`).
    pub fn new(config: Option<WebConfig>) -> WebGate {
        WebGate { config: std::sync::RwLock::new(config.map(Arc::new)) }
    }

    /// Applies `config` to the connections accepted from now on.
    pub fn set(&self, config: Option<WebConfig>) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config.map(Arc::new);
    }

    /// The configuration in force (`None`: plain HTTP, no users).
    pub fn current(&self) -> Option<Arc<WebConfig>> {
        self.config.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
