//! The fleet's own counters that belong to no target: connections refused by the dial-in listeners, and
//! file_sd's read errors. They are process-wide (like `telemon_build_info`) and rendered with every scrape.

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

static FILE_SD_READ_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Counts `n` file_sd read errors: a target file that cannot be read or parsed, or a target in one
/// that is refused.
pub fn file_sd_read_errors(n: u64) {
    FILE_SD_READ_ERRORS.fetch_add(n, Ordering::Relaxed);
}

/// file_sd read errors so far (`telemon_file_sd_read_errors_total`).
pub fn file_sd_read_error_count() -> u64 {
    FILE_SD_READ_ERRORS.load(Ordering::Relaxed)
}

/// Writes one process-wide family (`# HELP`, `# TYPE` and its samples) in the text format or
/// OpenMetrics: `samples` are `(label text without braces, value)`.
pub fn write_family(
    out: &mut String,
    name: &str,
    ty: &str,
    help: &str,
    open_metrics: bool,
    samples: &[(&str, f64)],
) {
    use std::fmt::Write as _;
    let meta =
        if open_metrics && ty == "counter" { name.strip_suffix("_total").unwrap_or(name) } else { name };
    let _ = writeln!(out, "# HELP {meta} {help}\n# TYPE {meta} {ty}");
    for (labels, value) in samples {
        out.push_str(name);
        if !labels.is_empty() {
            out.push('{');
            out.push_str(labels);
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
    }
}

/// The fleet's process-wide families that are rendered after the targets' (today the file_sd
/// counter, when a `[[file_sd]]` block exists).
pub fn render_tail(file_sd: bool, open_metrics: bool) -> String {
    let mut out = String::new();
    if file_sd {
        let n = file_sd_read_error_count() as f64;
        write_family(
            &mut out,
            "telemon_file_sd_read_errors_total",
            "counter",
            "Target files of [[file_sd]] blocks that could not be read or parsed, and targets in them refused.",
            open_metrics,
            &[("", n)],
        );
    }
    out
}
