//! A sender's self-metrics (the `telemon_sender_*` families of metrics.md), kept in atomics so the
//! sender never waits on a scrape and a scrape never waits on a sender.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use telemon_fleet::series::{escape_label_value, push_f64, push_num, Num};

/// The upper bounds of `telemon_sender_request_duration_seconds`.
pub const DURATION_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Why samples were dropped: the `result` label of `telemon_sender_samples_total` for them.
pub mod reason {
    /// The queue was full: the oldest samples made room for new ones.
    pub const QUEUE_FULL: &str = "dropped_queue_full";
    /// Still unsent when the shutdown deadline passed.
    pub const SHUTDOWN: &str = "dropped_shutdown";
    /// The receiver answered a 4xx status that is not retried (everything but 429).
    pub const HTTP_4XX: &str = "dropped_4xx";
    /// The receiver answered another status that is not retried (OTLP: a 5xx other than 502, 503, 504).
    pub const HTTP_OTHER: &str = "dropped_status";
    /// The receiver accepted the request but rejected these (OTLP `partial_success`).
    pub const PARTIAL_SUCCESS: &str = "dropped_partial_success";
    /// The request could not be built (e.g. a header the HTTP library refuses).
    pub const REQUEST: &str = "dropped_request";
    /// Disk queue: older than `queue_max_age`.
    pub const TOO_OLD: &str = "dropped_too_old";
    /// Disk queue: not written, the disk was full or failing.
    pub const DISK_ERROR: &str = "dropped_disk_error";
    /// Disk queue: in a damaged record found on the disk.
    pub const CORRUPT: &str = "dropped_corrupt";

    /// The reason for a status that is not retried.
    pub fn http(status: u16) -> &'static str {
        if (400..500).contains(&status) {
            HTTP_4XX
        } else {
            HTTP_OTHER
        }
    }
}

/// The counters and gauges of one sender.
#[derive(Debug)]
pub struct Stats {
    /// The `sender` label.
    pub sender: String,
    sent: AtomicU64,
    retried: AtomicU64,
    dropped: Mutex<BTreeMap<String, u64>>,
    queue_bytes: AtomicU64,
    queue_limit: u64,
    /// Unix ms of the oldest sample still queued (0: none).
    oldest_unsent_ms: AtomicI64,
    /// Unix ms of the oldest sample of the request being tried (0: none).
    inflight_oldest_ms: AtomicI64,
    /// Unix ms of the last 2xx (0: never).
    last_success_ms: AtomicI64,
    durations: [AtomicU64; DURATION_BUCKETS.len()],
    duration_count: AtomicU64,
    duration_sum_us: AtomicU64,
    requests_partial: AtomicU64,
    /// The disk queue's gauges, for a sender with `queue_dir`.
    disk: Option<DiskGauges>,
}

/// What a disk queue shows of itself.
#[derive(Debug, Default)]
struct DiskGauges {
    bytes: AtomicU64,
    written: AtomicU64,
    corrupt_records: AtomicU64,
    /// Unix ms of the oldest queued sample (0: none).
    oldest_ms: AtomicI64,
}

impl Stats {
    /// Zeroed stats of a sender.
    pub fn new(sender: String, queue_limit: u64) -> Self {
        Stats {
            sender,
            sent: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dropped: Mutex::new(BTreeMap::new()),
            queue_bytes: AtomicU64::new(0),
            queue_limit,
            oldest_unsent_ms: AtomicI64::new(0),
            inflight_oldest_ms: AtomicI64::new(0),
            last_success_ms: AtomicI64::new(0),
            durations: Default::default(),
            duration_count: AtomicU64::new(0),
            duration_sum_us: AtomicU64::new(0),
            requests_partial: AtomicU64::new(0),
            disk: None,
        }
    }

    /// Bytes waiting in the sender's memory queue.
    pub fn queue_bytes(&self) -> u64 {
        self.queue_bytes.load(Relaxed)
    }

    /// Whether the sender has a disk queue.
    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// The bound of the sender's queue in bytes (`queue_bytes`, or `queue_max_bytes` with a disk queue).
    pub fn queue_limit(&self) -> u64 {
        self.queue_limit
    }

    /// Zeroed stats of a sender with a disk queue bounded by `queue_limit` bytes.
    pub fn with_disk(sender: String, queue_limit: u64) -> Self {
        Stats { disk: Some(DiskGauges::default()), ..Stats::new(sender, queue_limit) }
    }

    /// The disk queue's bytes not yet accepted, and the Unix ms of its oldest sample.
    pub(crate) fn set_disk(&self, bytes: u64, oldest_ms: Option<i64>) {
        if let Some(d) = &self.disk {
            d.bytes.store(bytes, Relaxed);
            d.oldest_ms.store(oldest_ms.unwrap_or(0), Relaxed);
        }
    }

    /// Bytes appended to the disk queue's files.
    pub(crate) fn add_disk_written(&self, n: u64) {
        if let Some(d) = &self.disk {
            d.written.fetch_add(n, Relaxed);
        }
    }

    /// Damaged records found on the disk and skipped.
    pub(crate) fn add_corrupt_records(&self, n: u64) {
        if let Some(d) = &self.disk {
            d.corrupt_records.fetch_add(n, Relaxed);
        }
    }

    /// The disk queue's bytes not yet accepted (0 without a disk queue).
    pub fn disk_bytes(&self) -> u64 {
        self.disk.as_ref().map_or(0, |d| d.bytes.load(Relaxed))
    }

    /// Damaged records the disk queue skipped (0 without a disk queue).
    pub fn corrupt_records(&self) -> u64 {
        self.disk.as_ref().map_or(0, |d| d.corrupt_records.load(Relaxed))
    }

    /// Samples the receiver accepted.
    pub fn sent(&self) -> u64 {
        self.sent.load(Relaxed)
    }
    /// Samples sent again after a failed attempt (counted once per retry).
    pub fn retried(&self) -> u64 {
        self.retried.load(Relaxed)
    }
    /// Samples dropped for `reason`.
    pub fn dropped(&self, reason: &str) -> u64 {
        self.dropped.lock().unwrap_or_else(|e| e.into_inner()).get(reason).copied().unwrap_or(0)
    }
    /// Samples dropped, every reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.lock().unwrap_or_else(|e| e.into_inner()).values().sum()
    }
    /// Requests done (any outcome).
    pub fn requests(&self) -> u64 {
        self.duration_count.load(Relaxed)
    }
    /// Replies with a `partial_success` that rejected something (OTLP).
    pub fn partial_successes(&self) -> u64 {
        self.requests_partial.load(Relaxed)
    }
    /// Unix ms of the last successful send (0: never).
    pub fn last_success_ms(&self) -> i64 {
        self.last_success_ms.load(Relaxed)
    }

    pub(crate) fn add_sent(&self, n: usize) {
        self.sent.fetch_add(n as u64, Relaxed);
        self.last_success_ms.store(now_ms(), Relaxed);
    }
    pub(crate) fn add_retried(&self, n: usize) {
        self.retried.fetch_add(n as u64, Relaxed);
    }
    pub(crate) fn add_dropped(&self, reason: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut d = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        match d.get_mut(reason) {
            Some(c) => *c += n,
            None => {
                d.insert(reason.to_owned(), n);
            }
        }
    }
    pub(crate) fn add_partial(&self) {
        self.requests_partial.fetch_add(1, Relaxed);
    }
    pub(crate) fn set_queue(&self, bytes: usize, oldest_ms: Option<i64>) {
        self.queue_bytes.store(bytes as u64, Relaxed);
        self.oldest_unsent_ms.store(oldest_ms.unwrap_or(0), Relaxed);
    }
    pub(crate) fn set_inflight(&self, oldest_ms: Option<i64>) {
        self.inflight_oldest_ms.store(oldest_ms.unwrap_or(0), Relaxed);
    }
    /// Unix ms of the oldest sample not accepted yet, in flight or queued (`None`: none).
    pub fn oldest_unsent_ms(&self) -> Option<i64> {
        let (q, f) = (self.oldest_unsent_ms.load(Relaxed), self.inflight_oldest_ms.load(Relaxed));
        [q, f].into_iter().filter(|t| *t != 0).min()
    }
    pub(crate) fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in DURATION_BUCKETS.iter().enumerate() {
            if s <= *b {
                self.durations[i].fetch_add(1, Relaxed);
            }
        }
        self.duration_count.fetch_add(1, Relaxed);
        self.duration_sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    /// Writes this sender's series, each line under its family (`families` maps name -> lines).
    fn write(&self, f: &mut BTreeMap<&'static str, (&'static str, &'static str, String)>) {
        let mut labels = String::from("sender=\"");
        escape_label_value(&mut labels, &self.sender);
        labels.push('"');
        // Counts as exact integers, times as floats, like every other family on the page.
        let mut line = |name: &'static str, extra: &str, v: Num| {
            let (_, _, lines) = f.get_mut(strip(name)).expect("every family is declared");
            let _ = write!(lines, "{name}{{{labels}{extra}}} ");
            push_num(lines, v);
            lines.push('\n');
        };
        let mut results: BTreeMap<&str, u64> = BTreeMap::new();
        results.insert("sent", self.sent());
        results.insert("retried", self.retried());
        for r in [reason::HTTP_4XX, reason::QUEUE_FULL, reason::SHUTDOWN] {
            results.insert(r, 0);
        }
        if self.disk.is_some() {
            for r in [reason::TOO_OLD, reason::DISK_ERROR, reason::CORRUPT] {
                results.insert(r, 0);
            }
        }
        let dropped = self.dropped.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (r, n) in &dropped {
            results.insert(r, *n);
        }
        for (r, n) in results {
            let mut result = String::from(",result=\"");
            escape_label_value(&mut result, r);
            result.push('"');
            line("telemon_sender_samples_total", &result, Num::Uint(n));
        }
        line("telemon_sender_queue_bytes", "", Num::Uint(self.queue_bytes.load(Relaxed)));
        line("telemon_sender_queue_limit_bytes", "", Num::Uint(self.queue_limit));
        let age = self.oldest_unsent_ms().map_or(0.0, |t| (now_ms() - t).max(0) as f64 / 1000.0);
        line("telemon_sender_oldest_unsent_age_seconds", "", Num::Float(age));
        line(
            "telemon_sender_last_success_timestamp_seconds",
            "",
            Num::Float(self.last_success_ms() as f64 / 1000.0),
        );
        for (i, b) in DURATION_BUCKETS.iter().enumerate() {
            let mut le = String::from(",le=\"");
            push_f64(&mut le, *b);
            le.push('"');
            line(
                "telemon_sender_request_duration_seconds_bucket",
                &le,
                Num::Uint(self.durations[i].load(Relaxed)),
            );
        }
        let count = Num::Uint(self.duration_count.load(Relaxed));
        line("telemon_sender_request_duration_seconds_bucket", ",le=\"+Inf\"", count);
        let sum = self.duration_sum_us.load(Relaxed) as f64 / 1e6;
        line("telemon_sender_request_duration_seconds_sum", "", Num::Float(sum));
        line("telemon_sender_request_duration_seconds_count", "", count);
        if let Some(d) = &self.disk {
            line("telemon_sender_queue_disk_bytes", "", Num::Uint(d.bytes.load(Relaxed)));
            line("telemon_sender_queue_disk_written_bytes_total", "", Num::Uint(d.written.load(Relaxed)));
            line(
                "telemon_sender_queue_corrupt_records_total",
                "",
                Num::Uint(d.corrupt_records.load(Relaxed)),
            );
            let oldest = d.oldest_ms.load(Relaxed) as f64 / 1000.0;
            line("telemon_sender_queue_oldest_timestamp_seconds", "", Num::Float(oldest));
        }
    }
}

/// The families only a disk queue has.
const DISK_FAMILIES: [&str; 4] = [
    "telemon_sender_queue_disk_bytes",
    "telemon_sender_queue_disk_written_bytes_total",
    "telemon_sender_queue_corrupt_records_total",
    "telemon_sender_queue_oldest_timestamp_seconds",
];

fn strip(name: &'static str) -> &'static str {
    for s in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(s) {
            if base.ends_with("duration_seconds") {
                return base;
            }
        }
    }
    name
}

/// Now in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Renders every sender's self-metrics in text format 0.0.4 (`open_metrics`: OpenMetrics family
/// names, without the closing `# EOF`). Nothing when there are no senders.
pub fn render(stats: &[std::sync::Arc<Stats>], open_metrics: bool) -> String {
    if stats.is_empty() {
        return String::new();
    }
    let families: [(&'static str, &'static str, &'static str); 10] = [
        (
            "telemon_sender_samples_total",
            "counter",
            "Samples (OTLP: data points) by result: sent, retried or dropped.",
        ),
        ("telemon_sender_queue_bytes", "gauge", "Bytes waiting in the sender's queue."),
        ("telemon_sender_queue_limit_bytes", "gauge", "The bound of the sender's queue (queue_bytes)."),
        (
            "telemon_sender_oldest_unsent_age_seconds",
            "gauge",
            "Age of the oldest sample not sent yet (0 when none).",
        ),
        (
            "telemon_sender_last_success_timestamp_seconds",
            "gauge",
            "Unix time of the last accepted request (0: never).",
        ),
        ("telemon_sender_request_duration_seconds", "histogram", "Duration of the sender's HTTP requests."),
        (
            "telemon_sender_queue_disk_bytes",
            "gauge",
            "Bytes of the disk queue not yet accepted by the receiver.",
        ),
        (
            "telemon_sender_queue_disk_written_bytes_total",
            "counter",
            "Bytes appended to the disk queue's files (records and their headers).",
        ),
        (
            "telemon_sender_queue_corrupt_records_total",
            "counter",
            "Damaged records found in the disk queue and skipped.",
        ),
        (
            "telemon_sender_queue_oldest_timestamp_seconds",
            "gauge",
            "Unix time of the oldest sample in the disk queue (0 when empty).",
        ),
    ];
    // The disk queue's families only where a sender has one.
    let disk = stats.iter().any(|s| s.disk.is_some());
    let mut f: BTreeMap<&'static str, (&'static str, &'static str, String)> = families
        .iter()
        .filter(|(n, ..)| disk || !DISK_FAMILIES.contains(n))
        .map(|(n, t, h)| (*n, (*t, *h, String::new())))
        .collect();
    for s in stats {
        s.write(&mut f);
    }
    let mut out = String::new();
    for (name, (ty, help, lines)) in &f {
        let meta =
            if open_metrics && *ty == "counter" { name.strip_suffix("_total").unwrap_or(name) } else { name };
        let _ = writeln!(out, "# HELP {meta} {help}\n# TYPE {meta} {ty}");
        out.push_str(lines);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_by_sender_and_result() {
        let s = std::sync::Arc::new(Stats::new("vm".into(), 1024));
        s.add_sent(10);
        s.add_retried(4);
        s.add_dropped(reason::http(400), 3);
        s.add_dropped(reason::QUEUE_FULL, 2);
        s.observe(Duration::from_millis(20));
        s.set_queue(77, None);
        let text = render(std::slice::from_ref(&s), false);
        for want in [
            "telemon_sender_samples_total{sender=\"vm\",result=\"sent\"} 10\n",
            "telemon_sender_samples_total{sender=\"vm\",result=\"retried\"} 4\n",
            "telemon_sender_samples_total{sender=\"vm\",result=\"dropped_4xx\"} 3\n",
            "telemon_sender_samples_total{sender=\"vm\",result=\"dropped_queue_full\"} 2\n",
            "telemon_sender_samples_total{sender=\"vm\",result=\"dropped_shutdown\"} 0\n",
            "telemon_sender_queue_bytes{sender=\"vm\"} 77\n",
            "telemon_sender_request_duration_seconds_bucket{sender=\"vm\",le=\"0.025\"} 1\n",
            "telemon_sender_request_duration_seconds_bucket{sender=\"vm\",le=\"0.01\"} 0\n",
            "telemon_sender_request_duration_seconds_count{sender=\"vm\"} 1\n",
            "# TYPE telemon_sender_request_duration_seconds histogram\n",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
        assert_eq!(s.dropped_total(), 5);
        assert_eq!(reason::http(503), reason::HTTP_OTHER);
        assert!(render(&[s], true).contains("# TYPE telemon_sender_samples counter\n"));
        assert!(render(&[], false).is_empty());
    }

    #[test]
    fn a_disk_queue_adds_its_families_and_reasons() {
        let s = std::sync::Arc::new(Stats::with_disk("vm".into(), 1 << 30));
        s.set_disk(4096, Some(1_700_000_000_500));
        s.add_corrupt_records(2);
        s.add_disk_written(36 + 1000);
        s.add_dropped(reason::CORRUPT, 7);
        let text = render(std::slice::from_ref(&s), false);
        for want in [
            "telemon_sender_queue_disk_bytes{sender=\"vm\"} 4096\n",
            "telemon_sender_queue_corrupt_records_total{sender=\"vm\"} 2\n",
            "telemon_sender_queue_disk_written_bytes_total{sender=\"vm\"} 1036\n",
            "telemon_sender_queue_oldest_timestamp_seconds{sender=\"vm\"} 1700000000.5\n",
            "telemon_sender_samples_total{sender=\"vm\",result=\"dropped_corrupt\"} 7\n",
            "telemon_sender_samples_total{sender=\"vm\",result=\"dropped_disk_error\"} 0\n",
            "telemon_sender_samples_total{sender=\"vm\",result=\"dropped_too_old\"} 0\n",
            "# TYPE telemon_sender_queue_corrupt_records_total counter\n",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
        let memory = render(&[std::sync::Arc::new(Stats::new("m".into(), 1024))], false);
        assert!(!memory.contains("disk") && !memory.contains("dropped_corrupt"), "{memory}");
    }
}
