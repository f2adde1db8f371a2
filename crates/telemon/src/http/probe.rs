//! `/probe`: one target collected on demand (the multi-target exporter pattern).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use telemon_fleet::collect::AbortOnDrop;
use telemon_fleet::config::check_host_port;
use telemon_fleet::protocol::{address_unit, Component, Start};
use telemon_fleet::{FleetSnapshot, Protocol, Protocols, Registry, TargetSnapshot};

use super::probe_allow::ProbeAllow;

use super::AppState;
use crate::exposition::exposition;

#[derive(Debug, Deserialize)]
pub(super) struct ProbeQuery {
    target: Option<String>,
    protocol: Option<String>,
}

/// A probe target not asked for this long is dropped, with its connection.
pub const PROBE_IDLE: Duration = Duration::from_secs(600);
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
        Ok(t) => exposition(FleetSnapshot::from(vec![t]), &headers, String::new()),
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
            series_limit,
            starting: tokio::sync::Mutex::new(()),
            runtime,
        }
    }

    /// Replaces the allow list; probe targets it no longer allows are dropped.
    pub(super) fn set_allow(&self, allow: Vec<ProbeAllow>) {
        let allow: Arc<[ProbeAllow]> = allow.into();
        *self.allow.lock().unwrap_or_else(|e| e.into_inner()) = allow.clone();
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, p| probe_allowed(&allow, p.addr));
    }

    /// `telemon_probe_refused_total{reason}`.
    pub(super) fn render(&self, open_metrics: bool) -> String {
        let labels: Vec<String> =
            ProbeRefusal::ALL.iter().map(|r| format!("reason=\"{}\"", r.label())).collect();
        let samples: Vec<(&str, f64)> = ProbeRefusal::ALL
            .iter()
            .zip(&labels)
            .map(|(r, l)| (l.as_str(), self.refused[*r as usize].load(Ordering::Relaxed) as f64))
            .collect();
        let mut out = String::new();
        telemon_fleet::own::write_family(
            &mut out,
            "telemon_probe_refused_total",
            "counter",
            "/probe requests refused, by reason: invalid (not HOST:PORT, bad protocol), not_allowed (outside probe_allow), unresolved, limit.",
            open_metrics,
            &samples,
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

    /// Drops the probe targets not asked for within `idle`.
    pub(super) fn sweep(&self, idle: Duration) {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, p| p.used.elapsed() < idle);
    }
}
