//! telemon's own counters that belong to no target: connections refused by the dial-in listeners
//! and by the HTTP server. They are process-wide (like `telemon_build_info`) and rendered with
//! every scrape.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Why a dial-in listener closed a connection without making it a target
/// (`telemon_listener_refused_total{reason}`; [`Refusal::label`] is the label, which some reasons share).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// The source address is not in the listener's `allow` list.
    NotAllowed,
    /// The source failed too many handshakes lately.
    RateLimited,
    /// Too many handshakes are in progress on this listener.
    TooManyHandshakes,
    /// No complete Hello or handshake within `hello_timeout`, or a bad one.
    Handshake,
    /// Every one of the listener's `max_targets` targets is live.
    MaxTargets,
}

impl Refusal {
    /// Every reason, in label order.
    pub const ALL: [Refusal; 5] = [
        Refusal::NotAllowed,
        Refusal::RateLimited,
        Refusal::TooManyHandshakes,
        Refusal::Handshake,
        Refusal::MaxTargets,
    ];

    /// The `reason` label value (metrics.md): `not_allowed`, `rate`, `limit` (too many handshakes at
    /// once, or `max_targets` live targets) or `handshake_timeout` (no valid Hello or handshake within
    /// `hello_timeout`).
    pub fn label(self) -> &'static str {
        match self {
            Refusal::NotAllowed => "not_allowed",
            Refusal::RateLimited => "rate",
            Refusal::TooManyHandshakes | Refusal::MaxTargets => "limit",
            Refusal::Handshake => "handshake_timeout",
        }
    }

    /// What happened, for the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotAllowed => "not allowed",
            Refusal::RateLimited => "rate limited",
            Refusal::TooManyHandshakes => "too many handshakes",
            Refusal::Handshake => "no valid handshake in time",
            Refusal::MaxTargets => "max_targets live",
        }
    }
}

type RefusedTable = BTreeMap<(Arc<str>, &'static str), u64>;

static LISTENER_REFUSED: Mutex<RefusedTable> = Mutex::new(BTreeMap::new());
static LISTENER_TARGETS: Mutex<BTreeMap<Arc<str>, Arc<AtomicU64>>> = Mutex::new(BTreeMap::new());
static HTTP_REFUSED: AtomicU64 = AtomicU64::new(0);

fn refused_table() -> std::sync::MutexGuard<'static, RefusedTable> {
    LISTENER_REFUSED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes every reason of `listener` a series at 0, so that `rate()` sees the first refusal, and returns
/// the listener's `telemon_listener_targets` gauge.
pub fn listener_started(listener: &Arc<str>) -> Arc<AtomicU64> {
    let mut t = refused_table();
    for r in Refusal::ALL {
        t.entry((listener.clone(), r.label())).or_insert(0);
    }
    let mut gauges = LISTENER_TARGETS.lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(gauges.entry(listener.clone()).or_default())
}

/// Counts one connection refused by `listener`.
pub fn listener_refused(listener: &Arc<str>, reason: Refusal) {
    *refused_table().entry((listener.clone(), reason.label())).or_insert(0) += 1;
}

/// The refusal counts: `(listener, reason label, count)`, sorted.
pub fn listener_refusals() -> Vec<(Arc<str>, &'static str, u64)> {
    refused_table().iter().map(|((l, r), n)| (l.clone(), *r, *n)).collect()
}

/// The targets each listener holds, live and remembered: `(listener, count)`, sorted.
pub fn listener_targets() -> Vec<(Arc<str>, u64)> {
    let gauges = LISTENER_TARGETS.lock().unwrap_or_else(|e| e.into_inner());
    gauges.iter().map(|(l, n)| (l.clone(), n.load(Ordering::Relaxed))).collect()
}

/// Counts one HTTP connection refused because `[serve] max_connections` were open.
pub fn http_refused() {
    HTTP_REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// HTTP connections refused so far.
pub fn http_refusals() -> u64 {
    HTTP_REFUSED.load(Ordering::Relaxed)
}
