//! The HTTP server's own thread: a single-threaded runtime serving one listener, which a reload that
//! changes `[serve] listen`, `max_connections` or `idle_timeout` replaces.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::sync::watch;

use telemon_fleet::collect::AbortOnDrop;

use super::conn::{serve_http, HttpLimits, WebGate};
use super::probe::Probes;

/// How long a replaced server keeps serving after its replacement started: time for the reply of the
/// request that asked for the reload.
pub const REPLACED_LINGER: Duration = Duration::from_secs(1);

/// A running HTTP server thread.
#[derive(Debug)]
pub struct HttpThread {
    /// The address asked for (`[serve] listen` or `--listen`).
    pub listen: String,
    /// The address bound.
    pub addr: SocketAddr,
    /// The connection bounds it serves with.
    pub limits: HttpLimits,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Binds `listen` (non-blocking, for tokio).
pub fn bind(listen: &str) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// What every server thread shares.
#[derive(Clone)]
pub struct Serving {
    pub app: Router,
    pub gate: Arc<WebGate>,
    pub probes: Arc<Probes>,
    /// The web view served in `app` (a reload sets its `web_history`).
    pub view: crate::web::View,
    /// Set when a server thread fails (its error); `run_until` then returns it.
    pub failed: watch::Sender<Option<String>>,
}

impl HttpThread {
    /// Serves `app` on `listener` in a thread of its own.
    pub fn spawn(
        listen: String,
        listener: std::net::TcpListener,
        limits: HttpLimits,
        serving: &Serving,
    ) -> std::io::Result<HttpThread> {
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
        let Serving { app, gate, probes, failed, .. } = serving.clone();
        let thread = std::thread::Builder::new().name("telemon-http".into()).spawn(move || {
            let served = tokio::runtime::Builder::new_current_thread().enable_all().build().and_then(|rt| {
                rt.block_on(async move {
                    let sweeper = tokio::spawn(async move { probes.expire().await });
                    let _sweeper = AbortOnDrop(sweeper);
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    serve_http(listener, app, limits, gate, async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    })
                    .await
                })
            });
            if let Err(e) = served {
                failed.send_replace(Some(e.to_string()));
            }
        })?;
        Ok(HttpThread { listen, addr, limits, stop, thread: Some(thread) })
    }

    /// Stops serving and waits (up to 2 s) for the thread to end.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(thread) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || thread.join());
            let _ = tokio::time::timeout(Duration::from_secs(2), joined).await;
        }
    }
}
