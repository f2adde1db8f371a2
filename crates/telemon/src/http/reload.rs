//! Changing a running `telemon serve`: `SIGHUP` and `POST /-/reload` (with `--web.enable-lifecycle`).
//!
//! A reload reads the config again (the same file and flags as at start) and checks all of it (the
//! config, the web config, the push senders' files) before changing anything. A bad config changes
//! nothing: the error is logged with file:line:key and `telemon_config_last_reload_successful` turns 0.
//! A good one changes only what differs ([`Fleet::apply`], [`Push::reload`]): unchanged targets keep
//! their connections and series; the web config, the probe allow list and the wake-up slack apply to
//! what comes next. A change of `[serve] listen`, `max_connections` or `idle_timeout` replaces the HTTP
//! server alone: a new address is bound before anything changes (a port in use fails the reload), and the
//! old server keeps answering for [`REPLACED_LINGER`] so that the request that asked for the reload gets
//! its reply.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use telemon_fleet::pace::Pace;

use crate::config::{Config, Source};
use telemon_fleet::Fleet;
use telemon_push::{Push, Stats as PushStats};

use super::conn::{open_file_limit, HttpLimits, WebGate};
use super::probe::Probes;
use super::thread::{self, HttpThread, Serving, REPLACED_LINGER};

/// How long a reload lets a replaced push sender finish its request in flight.
pub const PUSH_HANDOVER: std::time::Duration = std::time::Duration::from_secs(5);

/// The parts of a running server that a reload changes, and the reload's status.
pub struct Control {
    pub(super) fleet: Arc<Fleet>,
    pub(super) web: Arc<WebGate>,
    pub(super) probes: Arc<Probes>,
    pub(super) push: tokio::sync::Mutex<Option<Push>>,
    /// The push senders' stats, for `/metrics` (replaced when a reload changes the senders).
    pub(super) push_stats: Mutex<Arc<[Arc<PushStats>]>>,
    current: Mutex<Config>,
    /// Where the config is read from again (the file and flags `telemon serve` started with).
    source: Mutex<Option<Source>>,
    /// The collectors' wake-up slack (`[serve] wakeup_slack`), when the runtime has one.
    pace: Mutex<Option<Pace>>,
    lifecycle: AtomicBool,
    last_ok: AtomicBool,
    /// Unix time of the last successful reload (or of the start), as f64 bits.
    last_success: AtomicU64,
    /// The fleet's runtime: a reload starts targets, which must run there, whoever asked.
    runtime: tokio::runtime::Handle,
    /// One reload at a time.
    lock: tokio::sync::Mutex<()>,
    /// `--listen`, which a reload does not override.
    listen_override: Option<String>,
    /// What the fleet's connections are recorded into (`serve --record`).
    recording: Option<Arc<telemon_fleet::recording::Recording>>,
    /// What every HTTP server thread serves, and the one running.
    serving: std::sync::OnceLock<Serving>,
    http: Mutex<Option<HttpThread>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("last_ok", &self.last_ok).finish_non_exhaustive()
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Control {
    pub(super) fn new(
        config: &Config,
        fleet: Arc<Fleet>,
        web: Arc<WebGate>,
        probes: Arc<Probes>,
        push: Push,
        listen_override: Option<String>,
        recording: Option<Arc<telemon_fleet::recording::Recording>>,
    ) -> Control {
        Control {
            fleet,
            web,
            probes,
            push_stats: Mutex::new(push.stats().into()),
            push: tokio::sync::Mutex::new(Some(push)),
            current: Mutex::new(config.clone()),
            source: Mutex::new(None),
            pace: Mutex::new(None),
            lifecycle: AtomicBool::new(false),
            last_ok: AtomicBool::new(true),
            last_success: AtomicU64::new(unix_now().to_bits()),
            runtime: tokio::runtime::Handle::current(),
            lock: tokio::sync::Mutex::new(()),
            listen_override,
            recording,
            serving: std::sync::OnceLock::new(),
            http: Mutex::new(None),
        }
    }

    /// Records the HTTP server started with the config, and what a replacement serves.
    pub(super) fn serve(&self, serving: Serving, http: HttpThread) {
        let _ = self.serving.set(serving);
        *self.http.lock().unwrap_or_else(|e| e.into_inner()) = Some(http);
    }

    /// The address HTTP is served on.
    pub(super) fn local_addr(&self) -> std::net::SocketAddr {
        let http = self.http.lock().unwrap_or_else(|e| e.into_inner());
        http.as_ref().map_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)), |h| h.addr)
    }

    /// Turns `Some(why)` when an HTTP server thread fails.
    pub(super) fn failed(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        match self.serving.get() {
            Some(s) => s.failed.subscribe(),
            None => tokio::sync::watch::channel(None).1,
        }
    }

    /// Sets where a reload reads the config from; without one, a reload fails.
    pub fn set_source(&self, source: Source) {
        *self.source.lock().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    /// Sets the pace whose slack a reload changes (`[serve] wakeup_slack`).
    pub fn set_pace(&self, pace: Pace) {
        *self.pace.lock().unwrap_or_else(|e| e.into_inner()) = Some(pace);
    }

    /// What the fleet's connections are recorded into, if they are.
    pub fn recording(&self) -> Option<&Arc<telemon_fleet::recording::Recording>> {
        self.recording.as_ref()
    }

    /// Allows `POST /-/reload` (`--web.enable-lifecycle`).
    pub fn enable_lifecycle(&self, on: bool) {
        self.lifecycle.store(on, Ordering::Relaxed);
    }

    /// Whether `POST /-/reload` is allowed.
    pub fn lifecycle(&self) -> bool {
        self.lifecycle.load(Ordering::Relaxed)
    }

    /// Whether the last reload succeeded (true before any).
    pub fn last_reload_successful(&self) -> bool {
        self.last_ok.load(Ordering::Relaxed)
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the config again and applies what changed; `Err` says why nothing changed. Runs on the
    /// fleet's runtime whichever runtime calls it.
    pub async fn reload(self: &Arc<Self>) -> Result<String, String> {
        let me = self.clone();
        match self.runtime.spawn(async move { me.reload_here().await }).await {
            Ok(result) => result,
            Err(e) => Err(format!("the reload task failed: {e}")),
        }
    }

    async fn reload_here(&self) -> Result<String, String> {
        let _one = self.lock.lock().await;
        let result = self.apply().await;
        match &result {
            Ok(what) => {
                self.last_ok.store(true, Ordering::Relaxed);
                self.last_success.store(unix_now().to_bits(), Ordering::Relaxed);
                eprintln!("telemon: reloaded the config: {what}");
            }
            Err(why) => {
                self.last_ok.store(false, Ordering::Relaxed);
                eprintln!("telemon: reload failed, nothing changed: {why}");
            }
        }
        result
    }

    async fn apply(&self) -> Result<String, String> {
        let source = self.source.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let source = source.ok_or("this server was started without a config to read again")?;
        // Everything that can be checked is checked before anything changes: the same check as at start.
        let new = source.read().map_err(|e| e.to_string())?;
        let super::check::Checked { config: new, web } =
            super::check::check(new).map_err(|e| e.to_string())?;
        // A new HTTP address is bound before anything changes.
        let listen = self.listen_override.clone().unwrap_or_else(|| new.serve.listen.clone());
        let limits = HttpLimits::new(&new.serve, open_file_limit());
        let (moved, relimited) = {
            let http = self.http.lock().unwrap_or_else(|e| e.into_inner());
            let current = http.as_ref();
            (current.is_some_and(|h| h.listen != listen), current.is_some_and(|h| h.limits != limits))
        };
        let listener = if moved { Some(thread::bind(&listen).map_err(|e| e.to_string())?) } else { None };
        let applied = self.fleet.apply(&new.fleet).await.map_err(|e| e.to_string())?;
        let mut push = self.push.lock().await;
        let mut senders = 0;
        if let Some(push) = push.as_mut() {
            match push.reload(&new.push, new.serve.shard, self.fleet.registry(), PUSH_HANDOVER).await {
                Ok(n) => senders = n,
                // The targets changed already: say what failed and keep going with the other senders.
                Err(e) => return Err(format!("targets reloaded ({applied}), but a push sender failed: {e}")),
            }
            *self.push_stats.lock().unwrap_or_else(|e| e.into_inner()) = push.stats().into();
        }
        self.web.set(web);
        self.probes.set_allow(new.serve.probe_allow.clone());
        if let Some(serving) = self.serving.get() {
            serving.view.set_history(new.serve.web_history);
        }
        if let Some(pace) = &*self.pace.lock().unwrap_or_else(|e| e.into_inner()) {
            pace.set(new.serve.wakeup_slack);
        }
        let mut http_note = String::new();
        let threads = self.fleet.threads();
        if new.serve.collector_threads() != threads {
            http_note += &format!("; [serve] threads stays {threads} until telemon restarts");
        }
        if moved || relimited {
            http_note += &self.replace_http(listen, listener, limits).await?;
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(format!("targets: {applied}; push senders started or replaced: {senders}{http_note}"))
    }

    /// Starts a new HTTP server (on `listener`, or on `listen` once the old one let it go) and stops the
    /// old one after [`REPLACED_LINGER`].
    async fn replace_http(
        &self,
        listen: String,
        listener: Option<std::net::TcpListener>,
        limits: HttpLimits,
    ) -> Result<String, String> {
        let serving = self.serving.get().ok_or("no HTTP server to replace")?;
        let old = self.http.lock().unwrap_or_else(|e| e.into_inner()).take();
        let listener = match listener {
            Some(l) => {
                if let Some(old) = old {
                    tokio::spawn(async move {
                        tokio::time::sleep(REPLACED_LINGER).await;
                        old.stop().await;
                    });
                }
                l
            }
            // The same address with other limits: the old server lets it go first.
            None => {
                if let Some(old) = old {
                    old.stop().await;
                }
                thread::bind(&listen).map_err(|e| format!("HTTP: {e}; restart telemon"))?
            }
        };
        let http = HttpThread::spawn(listen, listener, limits, serving).map_err(|e| e.to_string())?;
        let note = format!(
            "; HTTP on {} (max_connections {}, idle_timeout {:?})",
            http.addr, limits.max_connections, limits.idle_timeout
        );
        *self.http.lock().unwrap_or_else(|e| e.into_inner()) = Some(http);
        Ok(note)
    }

    /// Stops serving HTTP and the push senders (within [`telemon_push::SHUTDOWN_DEADLINE`]).
    pub(super) async fn shutdown(&self) {
        let http = self.http.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(http) = http {
            http.stop().await;
        }
        if let Some(push) = self.push.lock().await.take() {
            push.shutdown(telemon_push::SHUTDOWN_DEADLINE).await;
        }
    }

    /// `telemon_config_last_reload_successful` and `…_success_timestamp_seconds`.
    pub fn render(&self, open_metrics: bool) -> String {
        let mut out = String::new();
        let ok = if self.last_reload_successful() { 1.0 } else { 0.0 };
        let at = f64::from_bits(self.last_success.load(Ordering::Relaxed));
        telemon_fleet::own::write_family(
            &mut out,
            "telemon_config_last_reload_successful",
            "gauge",
            "Whether the last configuration reload attempt was successful.",
            open_metrics,
            &[("", ok)],
        );
        telemon_fleet::own::write_family(
            &mut out,
            "telemon_config_last_reload_success_timestamp_seconds",
            "gauge",
            "Timestamp of the last successful configuration reload (or of the start).",
            open_metrics,
            &[("", at)],
        );
        out
    }
}
