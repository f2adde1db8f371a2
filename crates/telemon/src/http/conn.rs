//! The HTTP connections: the listener loop with its connection cap and idle deadline, and the web
//! configuration file (TLS, basic auth, headers) every connection passes.

use std::sync::{Arc, Mutex};
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

/// What a TLS port answers a plain HTTP request with, before closing: Go's `net/http` answer, word
/// for word (`curl http://` to an exporter-toolkit port prints the same).
pub const PLAIN_HTTP_ANSWER: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
/// A refused client certificate is logged (a warning) at most once per this interval, with the
/// count of those refused since the last line; each is logged at debug level.
pub const CLIENT_CERT_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// The most bytes read from a plain HTTP client after the answer, waiting for it to close.
const PLAIN_HTTP_DRAIN_BYTES: usize = 64 * 1024;

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
    pub fn new(serve: &crate::config::ServeSection, open_files: u64) -> HttpLimits {
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
/// of `app`. A plain HTTP request to a TLS port gets [`PLAIN_HTTP_ANSWER`]; a refused client
/// certificate is logged with why (see [`CLIENT_CERT_LOG_INTERVAL`]).
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
    let refusals = Arc::new(Mutex::new(RefusalLog::default()));
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
            HTTP_REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
        let refusals = refusals.clone();
        connections.spawn(async move {
            match acceptor {
                None => {
                    let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                }
                Some(acceptor) => match tokio::time::timeout(handshake_deadline, handshake(&acceptor, stream))
                    .await
                {
                    Ok(Ok(Some(tls))) => {
                        let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service).await;
                    }
                    Ok(Ok(None)) => tracing::debug!(peer = %peer, "not TLS: answered or closed"),
                    Ok(Err(e)) => {
                        let refused = e
                            .get_ref()
                            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                            .and_then(tls::client_certificate_refusal);
                        match refused {
                            Some(why) => {
                                tracing::debug!(peer = %peer, %why, "client certificate refused");
                                let unlogged = refusals
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .refused(Instant::now());
                                if let Some(refused) = unlogged {
                                    tracing::warn!(
                                        peer = %peer,
                                        refused,
                                        "TLS handshake refused: {why} (logged at most every {} s; `refused` counts the refusals since the last line)",
                                        CLIENT_CERT_LOG_INTERVAL.as_secs()
                                    );
                                }
                            }
                            None => tracing::debug!(peer = %peer, error = %e, "TLS handshake failed"),
                        }
                    }
                    Err(_) => tracing::debug!(peer = %peer, "TLS handshake timed out"),
                },
            }
            drop(permit);
        });
    }
    Ok(())
}

/// The TLS handshake of a new connection, or, when its first byte is not a TLS handshake record,
/// Go's answer to a plain HTTP request (`Ok(None)`: nothing to serve).
async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
) -> std::io::Result<Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>> {
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 1 && first[0] != TLS_HANDSHAKE_RECORD {
        answer_plain_http(stream).await?;
        return Ok(None);
    }
    acceptor.accept(stream).await.map(Some)
}

/// Answers [`PLAIN_HTTP_ANSWER`] when `stream` starts like an HTTP request (its first 5 bytes, as
/// Go looks at them), then closes it; anything else is closed at once.
async fn answer_plain_http(mut stream: tokio::net::TcpStream) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = [0u8; 5];
    let mut got = 0;
    while got < head.len() {
        match stream.read(&mut head[got..]).await? {
            0 => break,
            n => got += n,
        }
    }
    if !looks_like_http(&head[..got]) {
        return Ok(());
    }
    stream.write_all(PLAIN_HTTP_ANSWER).await?;
    stream.shutdown().await?;
    // Read what the client still sends until it closes (bounded): closing with unread bytes would
    // reset the connection, and the client could lose the answer.
    let mut sink = [0u8; 4096];
    let mut left = PLAIN_HTTP_DRAIN_BYTES;
    while left > 0 {
        match stream.read(&mut sink).await? {
            0 => break,
            n => left = left.saturating_sub(n),
        }
    }
    Ok(())
}

/// Whether `head` (up to 5 bytes) starts like an HTTP request line: a method (3 or more capital
/// letters) followed by a space, or filling it (`GET /`, `HEAD `, `OPTIO`, `PATCH`...).
fn looks_like_http(head: &[u8]) -> bool {
    let method = head.iter().take_while(|b| b.is_ascii_uppercase()).count();
    method >= 3 && (method == head.len() || head[method] == b' ')
}

/// When to log a refused client certificate: the first at once, then at most one line per
/// [`CLIENT_CERT_LOG_INTERVAL`].
#[derive(Debug, Default)]
struct RefusalLog {
    last_line: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    /// Counts a refusal at `now`; `Some(refusals since the last line, this one included)` when it
    /// is to be logged.
    fn refused(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        if self.last_line.is_some_and(|at| now.saturating_duration_since(at) < CLIENT_CERT_LOG_INTERVAL) {
            return None;
        }
        self.last_line = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
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

/// HTTP connections refused because `[serve] max_connections` were open, in this process.
static HTTP_REFUSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `telemon_http_refused_connections_total`, in the text format or OpenMetrics.
pub fn render_refused(open_metrics: bool) -> String {
    let mut out = String::new();
    let n = HTTP_REFUSED.load(std::sync::atomic::Ordering::Relaxed) as f64;
    telemon_fleet::own::write_family(
        &mut out,
        "telemon_http_refused_connections_total",
        "counter",
        "HTTP connections refused at once because [serve] max_connections were open.",
        open_metrics,
        &[("", n)],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_told_from_tls_as_go_does() {
        for head in
            [&b"GET /"[..], b"HEAD ", b"POST ", b"PUT /", b"OPTIO", b"PATCH", b"DELET", b"PRI *", b"GET"]
        {
            assert!(looks_like_http(head), "{:?}", String::from_utf8_lossy(head));
        }
        for head in [&b"\x16\x03\x01\x02\x00"[..], b"get /", b"GE /", b"", b"SSH-2", b"\x80\x2b\x01\x03\x01"]
        {
            assert!(!looks_like_http(head), "{head:?}");
        }
    }

    #[test]
    fn refusals_are_logged_at_most_once_per_interval_with_a_count() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.refused(t0), Some(1), "the first at once");
        assert_eq!(log.refused(t0 + Duration::from_secs(1)), None);
        assert_eq!(log.refused(t0 + CLIENT_CERT_LOG_INTERVAL / 2), None);
        assert_eq!(log.refused(t0 + CLIENT_CERT_LOG_INTERVAL), Some(3), "then one line for the three");
        assert_eq!(log.refused(t0 + CLIENT_CERT_LOG_INTERVAL * 3), Some(1));
    }
}
