//! `/probe`: one target collected on demand (the multi-target exporter pattern).
//!
//! The answer holds the probed target's series and its `telemon_target_*` families, and nothing
//! process-wide (as blackbox_exporter answers only its probe). A probe target keeps its collector
//! (and so its connection) between probes, and is dropped once nobody asked for it within
//! [`PROBE_IDLE`]; drops are counted in `telemon_probe_targets_dropped_total{reason}`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use telemon_fleet::collect::AbortOnDrop;
use telemon_fleet::config::check_host_port;
use telemon_fleet::protocol::{address_unit, Component, Start};
use telemon_fleet::{FleetSnapshot, Protocol, Protocols, Registry, TargetSnapshot};
// tokio's clock: the sweep's deadlines are timers, and a test runs them on a paused clock.
use tokio::time::Instant;

use super::probe_allow::ProbeAllow;

use super::AppState;
use crate::exposition::targets_exposition;

#[derive(Debug, Deserialize)]
pub(super) struct ProbeQuery {
    target: Option<String>,
    protocol: Option<String>,
}

/// A probe target not asked for this long is dropped, with its connection (and counted in
/// `telemon_probe_targets_dropped_total{reason="idle"}`): five scrapes at Prometheus's default
/// interval of a minute, and its staleness window. A mistyped target is retried this long at most; a
/// job that probes less often than this connects afresh each time.
pub const PROBE_IDLE: Duration = Duration::from_secs(300);
/// The most probe targets kept at once.
pub const MAX_PROBES: usize = 10_000;
/// The probe timeout when Prometheus does not send `X-Prometheus-Scrape-Timeout-Seconds`.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long resolving a probe target's name may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why `/probe` refused a target (`telemon_probe_refused_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeRefusal {
    /// Not `HOST:PORT`, or no or a bad protocol (400).
    Invalid,
    /// An address it resolves to is outside `[serve] probe_allow` (or not loopback without it) (403).
    NotAllowed,
    /// The name does not resolve (502).
    Unresolved,
    /// [`MAX_PROBES`] probe targets are kept already (503).
    Limit,
}

impl ProbeRefusal {
    const ALL: [ProbeRefusal; 4] =
        [ProbeRefusal::Invalid, ProbeRefusal::NotAllowed, ProbeRefusal::Unresolved, ProbeRefusal::Limit];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            ProbeRefusal::Invalid => "invalid",
            ProbeRefusal::NotAllowed => "not_allowed",
            ProbeRefusal::Unresolved => "unresolved",
            ProbeRefusal::Limit => "limit",
        }
    }
}

/// Why a probe target was dropped (`telemon_probe_targets_dropped_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeDrop {
    /// Not asked for within [`PROBE_IDLE`].
    Idle,
    /// A reload's `[serve] probe_allow` no longer allows its address.
    NotAllowed,
}

impl ProbeDrop {
    const ALL: [ProbeDrop; 2] = [ProbeDrop::Idle, ProbeDrop::NotAllowed];

    /// The `reason` label.
    fn label(self) -> &'static str {
        match self {
            ProbeDrop::Idle => "idle",
            ProbeDrop::NotAllowed => "not_allowed",
        }
    }
}

fn refuse(state: &AppState, why: ProbeRefusal, status: StatusCode, message: impl Into<String>) -> Response {
    state.probes.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    (status, message.into() + "\n").into_response()
}

pub(super) async fn probe(
    State(state): State<AppState>,
    Query(q): Query<ProbeQuery>,
    headers: HeaderMap,
) -> Response {
    let bad = |m: &str| refuse(&state, ProbeRefusal::Invalid, StatusCode::BAD_REQUEST, m);
    let Some(target) = q.target.filter(|t| !t.is_empty()) else {
        return bad("missing ?target=HOST:PORT");
    };
    if let Err(why) = check_host_port(&target) {
        return bad(&why);
    }
    let names = state.probes.names();
    let protocol = match q.protocol.as_deref().map(|p| state.probes.component(p)) {
        Some(Some(c)) => c,
        Some(None) => return bad(&format!("protocol must be {}", names.join(", "))),
        None => return bad(&format!("missing &protocol={}", names.join("|"))),
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
        Ok(t) => targets_exposition(FleetSnapshot::from(vec![t]), &headers),
        Err(Refused::Limit) => refuse(
            &state,
            ProbeRefusal::Limit,
            StatusCode::SERVICE_UNAVAILABLE,
            format!("more than {MAX_PROBES} probe targets"),
        ),
        Err(Refused::Unresolved(why)) => {
            refuse(&state, ProbeRefusal::Unresolved, StatusCode::BAD_GATEWAY, format!("{target}: {why}"))
        }
        Err(Refused::NotAllowed(addr, open)) => {
            let how = if open {
                "add its network to [serve] probe_allow".to_owned()
            } else {
                format!(
                    "without [serve] probe_allow, /probe reaches loopback targets only; to open it, list the networks it may reach, e.g. probe_allow = [\"{}/32\"] (or with a port, \"{addr}\")",
                    addr.ip()
                )
            };
            refuse(
                &state,
                ProbeRefusal::NotAllowed,
                StatusCode::FORBIDDEN,
                format!("{target} resolves to {addr}, which /probe may not connect to: {how}"),
            )
        }
    }
}

/// Why [`Probes::probe`] gave no target.
enum Refused {
    Limit,
    Unresolved(String),
    /// The first address refused, and whether an allow list is configured.
    NotAllowed(SocketAddr, bool),
}

/// Whether `rules` allow `addr`: with no rules, loopback addresses only.
pub fn probe_allowed(rules: &[ProbeAllow], addr: SocketAddr) -> bool {
    if rules.is_empty() {
        let ip = match addr.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        return ip.is_loopback();
    }
    rules.iter().any(|r| r.allows(addr))
}

/// Probe targets: one registry per protocol (so that a target is named by its address alone), and
/// the collector task of each with the address it was checked at.
pub(super) struct Probes {
    /// The protocols a probe can ask for: those whose targets are network addresses, in the registry's order.
    protocols: Vec<&'static dyn Component>,
    registries: HashMap<Protocol, Registry>,
    tasks: Mutex<HashMap<(Protocol, String), Probe>>,
    allow: Mutex<Arc<[ProbeAllow]>>,
    refused: [AtomicU64; 4],
    /// By [`ProbeDrop`].
    dropped: [AtomicU64; 2],
    series_limit: usize,
    /// Held while a probe target starts.
    starting: tokio::sync::Mutex<()>,
    /// The fleet's runtime, where probe collectors run (not the HTTP thread's).
    runtime: tokio::runtime::Handle,
}

struct Probe {
    used: Instant,
    addr: SocketAddr,
    _task: AbortOnDrop,
}

impl Probes {
    pub(super) fn new(
        protocols: &Protocols,
        series_limit: usize,
        allow: Vec<ProbeAllow>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        let protocols: Vec<&'static dyn Component> =
            protocols.iter().filter(|c| c.address().is_some_and(|a| a.default_port.is_some())).collect();
        let registries = protocols.iter().map(|c| (c.protocol(), Registry::new())).collect();
        Probes {
            protocols,
            registries,
            tasks: Mutex::new(HashMap::new()),
            allow: Mutex::new(allow.into()),
            refused: Default::default(),
            dropped: Default::default(),
            series_limit,
            starting: tokio::sync::Mutex::new(()),
            runtime,
        }
    }

    /// Replaces the allow list; probe targets it no longer allows are dropped.
    pub(super) fn set_allow(&self, allow: Vec<ProbeAllow>) {
        let allow: Arc<[ProbeAllow]> = allow.into();
        *self.allow.lock().unwrap_or_else(|e| e.into_inner()) = allow.clone();
        self.drop_where(ProbeDrop::NotAllowed, |_, p| !probe_allowed(&allow, p.addr));
    }

    /// Drops the probe targets that are `gone`, counting them as `why`.
    fn drop_where(&self, why: ProbeDrop, mut gone: impl FnMut(&(Protocol, String), &Probe) -> bool) {
        let mut dropped = 0;
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).retain(|key, p| {
            let drop = gone(key, p);
            if drop {
                let (protocol, reason) = (key.0.as_str(), why.label());
                tracing::info!(target_name = %key.1, protocol, reason, "probe target dropped");
                dropped += 1;
            }
            !drop
        });
        self.dropped[why as usize].fetch_add(dropped, Ordering::Relaxed);
    }

    /// `telemon_probe_refused_total{reason}` and `telemon_probe_targets_dropped_total{reason}`.
    pub(super) fn render(&self, open_metrics: bool) -> String {
        fn family(
            out: &mut String,
            name: &str,
            help: &str,
            open_metrics: bool,
            counts: &[(&str, &AtomicU64)],
        ) {
            let labels: Vec<String> = counts.iter().map(|(r, _)| format!("reason=\"{r}\"")).collect();
            let samples: Vec<(&str, f64)> = labels
                .iter()
                .zip(counts)
                .map(|(l, (_, n))| (l.as_str(), n.load(Ordering::Relaxed) as f64))
                .collect();
            telemon_fleet::own::write_family(out, name, "counter", help, open_metrics, &samples);
        }
        let mut out = String::new();
        let refused: Vec<_> =
            ProbeRefusal::ALL.iter().map(|r| (r.label(), &self.refused[*r as usize])).collect();
        family(
            &mut out,
            "telemon_probe_refused_total",
            "/probe requests refused, by reason: invalid (not HOST:PORT, bad protocol), not_allowed (outside probe_allow), unresolved, limit.",
            open_metrics,
            &refused,
        );
        let dropped: Vec<_> =
            ProbeDrop::ALL.iter().map(|r| (r.label(), &self.dropped[*r as usize])).collect();
        family(
            &mut out,
            "telemon_probe_targets_dropped_total",
            "Probe targets dropped with their connection, by reason: idle (not asked for within 5 minutes), not_allowed (a reload's probe_allow no longer allows them).",
            open_metrics,
            &dropped,
        );
        out
    }

    pub(super) fn snapshot(&self) -> Vec<Arc<TargetSnapshot>> {
        self.protocols.iter().flat_map(|c| self.registries[&c.protocol()].snapshot().targets).collect()
    }

    /// The names of the protocols a probe can ask for.
    fn names(&self) -> Vec<&'static str> {
        self.protocols.iter().map(|c| c.name()).collect()
    }

    /// The protocol named `name`, if a probe can ask for it.
    fn component(&self, name: &str) -> Option<&'static dyn Component> {
        self.protocols.iter().copied().find(|c| c.name() == name)
    }

    /// Resolves `target` once and checks every address it gives against the allow list.
    async fn resolve(&self, target: &str) -> Result<SocketAddr, Refused> {
        let addrs: Vec<SocketAddr> =
            match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(target)).await {
                Ok(Ok(addrs)) => addrs.collect(),
                Ok(Err(e)) => return Err(Refused::Unresolved(format!("cannot resolve: {e}"))),
                Err(_) => {
                    return Err(Refused::Unresolved(format!(
                        "no answer from the resolver within {RESOLVE_TIMEOUT:?}"
                    )))
                }
            };
        let allow = self.allow.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(bad) = addrs.iter().find(|a| !probe_allowed(&allow, **a)) {
            return Err(Refused::NotAllowed(*bad, !allow.is_empty()));
        }
        addrs.first().copied().ok_or_else(|| Refused::Unresolved("the name has no address".into()))
    }

    /// Starts (or reuses) the collector of `target` and waits up to `timeout` for its values.
    async fn probe(
        &self,
        component: &'static dyn Component,
        target: &str,
        timeout: Duration,
    ) -> Result<TargetSnapshot, Refused> {
        let protocol = component.protocol();
        let registry = &self.registries[&protocol];
        let changed = registry.changed();
        let key = (protocol, target.to_owned());
        let known = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
            let full = tasks.len() >= MAX_PROBES;
            match tasks.get_mut(&key) {
                Some(p) => {
                    p.used = Instant::now();
                    true
                }
                None if full => return Err(Refused::Limit),
                None => false,
            }
        };
        if !known {
            // Resolved once per probe target: the collector connects to the address checked here.
            let addr = self.resolve(target).await?;
            // One start at a time, so that two first probes of a target start it once.
            let _starting = self.starting.lock().await;
            if self.tasks.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key) {
                return self.wait(registry, changed, target, timeout).await;
            }
            // The block of the target with no options but its address, checked as a config's is.
            let no_options = (Default::default(), Default::default());
            let unit = address_unit(component, target, &addr.to_string(), &no_options.0, &no_options.1)
                .map_err(Refused::Unresolved)?;
            let start = Start {
                registry: registry.clone(),
                series_limit: self.series_limit,
                shard: None,
                recording: None,
            };
            let task = unit.start(&start).await.map_err(|e| Refused::Unresolved(e.to_string()))?;
            let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
            if tasks.len() >= MAX_PROBES {
                return Err(Refused::Limit);
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = tasks.entry(key) {
                slot.insert(Probe {
                    used: Instant::now(),
                    addr,
                    _task: AbortOnDrop(self.runtime.spawn(task)),
                });
            }
        }
        self.wait(registry, changed, target, timeout).await
    }

    /// Waits up to `timeout` for the probe target's values.
    async fn wait(
        &self,
        registry: &Registry,
        mut changed: tokio::sync::watch::Receiver<u64>,
        target: &str,
        timeout: Duration,
    ) -> Result<TargetSnapshot, Refused> {
        // Ready: up with values, or down after a failure.
        let ready = |t: &TargetSnapshot| {
            (t.is_up() && !t.series.is_empty()) || (!t.is_up() && t.last_error.is_some())
        };
        let current = || registry.snapshot().get(target).cloned();
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
        current().ok_or_else(|| Refused::Unresolved("the probe target was dropped meanwhile".into()))
    }

    /// Drops the probe targets not asked for within [`PROBE_IDLE`] before `now`; returns when the
    /// next one is due (`None`: none is kept).
    fn sweep(&self, now: Instant) -> Option<Instant> {
        self.drop_where(ProbeDrop::Idle, |_, p| now.saturating_duration_since(p.used) >= PROBE_IDLE);
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.values().map(|p| p.used + PROBE_IDLE).min()
    }

    /// Drops each probe target once it has not been asked for within [`PROBE_IDLE`], at that time;
    /// runs until dropped (the HTTP thread runs it).
    pub(super) async fn expire(&self) {
        loop {
            // A target added meanwhile is due after every target kept now: the wait never needs
            // to be cut short.
            let next = self.sweep(Instant::now()).unwrap_or_else(|| Instant::now() + PROBE_IDLE);
            tokio::time::sleep_until(next).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback address nothing listens on: a probe target that is down, and retried.
    fn closed_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    /// Waits (on the test's clock) until `target` is out of the smon registry: its collector ended.
    async fn gone(probes: &Probes, target: &str) {
        let registry = &probes.registries[&Protocol::SMON];
        let mut changed = registry.changed();
        let wait = async {
            while registry.snapshot().get(target).is_some() {
                changed.changed().await.expect("the registry lives");
            }
        };
        tokio::time::timeout(PROBE_IDLE * 2, wait).await.expect("the probe target is dropped");
    }

    /// A probe target nobody asks for again (a mistyped address, down and retried) is dropped
    /// [`PROBE_IDLE`] after it was last asked for, with its collector, and counted; one asked for
    /// within that time is kept. On a paused clock: the minutes pass at once.
    #[tokio::test(start_paused = true)]
    async fn a_probe_target_not_asked_for_within_probe_idle_is_dropped_and_counted() {
        let probes =
            Arc::new(Probes::new(&Protocols::built_in(), 100, Vec::new(), tokio::runtime::Handle::current()));
        let sweeper = probes.clone();
        let _sweeper = AbortOnDrop(tokio::spawn(async move { sweeper.expire().await }));
        let probe = {
            let probes = probes.clone();
            move |target: String| {
                let probes = probes.clone();
                async move {
                    let t = probes
                        .probe(&telemon_fleet::protocol::smon::Smon, &target, Duration::from_secs(1))
                        .await;
                    t.ok().expect("a probe answer")
                }
            }
        };
        let (mistyped, kept, other) = (closed_port(), closed_port(), closed_port());
        // Asked for a while after the sweeper started: at a time of its own, not a sweep's.
        tokio::time::sleep(Duration::from_secs(37)).await;
        let t = probe(mistyped.clone()).await;
        assert!(!t.is_up() && t.last_error.is_some(), "down: {t:?}");
        let asked = Instant::now();
        // Another one is asked for every minute.
        let keep_asking = tokio::spawn({
            let (probe, kept) = (probe.clone(), kept.clone());
            async move {
                loop {
                    probe(kept.clone()).await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            }
        });
        gone(&probes, &mistyped).await;
        // As documented: 5 minutes after it was last asked for, not later.
        let after = asked.elapsed();
        assert_eq!(PROBE_IDLE, Duration::from_secs(300), "the README and metrics.md say 5 minutes");
        assert!(
            after >= PROBE_IDLE && after < PROBE_IDLE + Duration::from_secs(2),
            "dropped after {after:?}"
        );
        let names: Vec<String> = probes.snapshot().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, std::slice::from_ref(&kept), "the one asked for is kept");
        let page = probes.render(false);
        assert!(page.contains("telemon_probe_targets_dropped_total{reason=\"idle\"} 1\n"), "{page}");
        assert!(page.contains("telemon_probe_targets_dropped_total{reason=\"not_allowed\"} 0\n"), "{page}");

        // A reload whose allow list no longer allows loopback drops the others at once, counted
        // apart.
        keep_asking.abort();
        probe(other.clone()).await;
        probes.set_allow(vec![ProbeAllow::parse("192.0.2.0/24").unwrap()]);
        gone(&probes, &other).await;
        gone(&probes, &kept).await;
        assert!(probes.tasks.lock().unwrap().is_empty());
        let page = probes.render(true);
        assert!(page.contains("# TYPE telemon_probe_targets_dropped counter\n"), "{page}");
        assert!(page.contains("telemon_probe_targets_dropped_total{reason=\"idle\"} 1\n"), "{page}");
        assert!(page.contains("telemon_probe_targets_dropped_total{reason=\"not_allowed\"} 2\n"), "{page}");
    }
}
