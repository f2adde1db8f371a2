//! `/probe`: one target collected on demand (the multi-target exporter pattern).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use telemon_fleet::collect::{self, AbortOnDrop};
use telemon_fleet::{FleetSnapshot, Protocol, Publisher, Registry, TargetSnapshot};

use super::exposition::exposition;
use super::AppState;

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

fn bad_request(message: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, message.into() + "\n").into_response()
}

pub(super) async fn probe(
    State(state): State<AppState>,
    Query(q): Query<ProbeQuery>,
    headers: HeaderMap,
) -> Response {
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
pub(super) struct Probes {
    registries: HashMap<Protocol, Registry>,
    tasks: Mutex<HashMap<(Protocol, String), (Instant, AbortOnDrop)>>,
    series_limit: usize,
    /// The fleet's runtime, where probe collectors run (not the HTTP thread's).
    runtime: tokio::runtime::Handle,
}

impl Probes {
    pub(super) fn new(series_limit: usize, runtime: tokio::runtime::Handle) -> Self {
        let registries = Protocol::ALL.into_iter().map(|p| (p, Registry::new())).collect();
        Probes { registries, tasks: Mutex::new(HashMap::new()), series_limit, runtime }
    }

    pub(super) fn snapshot(&self) -> Vec<Arc<TargetSnapshot>> {
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
    pub(super) fn sweep(&self, idle: Duration) {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, (used, _)| used.elapsed() < idle);
    }
}
