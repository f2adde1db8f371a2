//! The rvOS sysinfo service: every `every`, one request per report, each mapped onto the `rvos_*`
//! families. Trace is not a metric and TraceClear changes the kernel's state: neither is asked for.

use std::path::PathBuf;
use std::time::Duration;

use sysinfo_wire::report::{Channels, Histogram, Kstat, Memstat, Ps, Watchdog};
use sysinfo_wire::{Client, ClientConfig, ClientError, Endpoint, Report, SysinfoCommand};

use super::{within, Retry, CONNECT_TIMEOUT};
use crate::fleet::model::{ErrorKind, MetricKind, Value};
use crate::fleet::target::{label, Failure, Publisher};

/// The reports collected by default: every one that maps onto metrics.
pub const DEFAULT_REPORTS: [SysinfoCommand; 7] = [
    SysinfoCommand::Ps,
    SysinfoCommand::Memstat,
    SysinfoCommand::Kstat,
    SysinfoCommand::Channels,
    SysinfoCommand::SchedLatency,
    SysinfoCommand::IpcLatency,
    SysinfoCommand::Watchdog,
];

/// The report named `name` (`ps`, `memstat`, `kstat`, `channels`, `sched_latency`, `ipc_latency`,
/// `watchdog`; case, `_` and `-` do not matter).
pub fn report_by_name(name: &str) -> Option<SysinfoCommand> {
    let want: String = name.chars().filter(|c| *c != '_' && *c != '-').collect();
    DEFAULT_REPORTS.into_iter().find(|c| format!("{c:?}").eq_ignore_ascii_case(&want))
}

/// Where the service listens.
pub fn endpoint(connect: Option<&str>, socket: Option<&PathBuf>) -> Endpoint {
    match (connect, socket) {
        (Some(a), _) => Endpoint::Tcp(a.to_owned()),
        (None, Some(p)) => Endpoint::Unix(p.clone()),
        (None, None) => Endpoint::Tcp(sysinfo_wire::DEFAULT_ADDR.to_owned()),
    }
}

fn kind(e: &ClientError) -> ErrorKind {
    match e {
        ClientError::Transport(sysinfo_wire::TransportError::Io(_)) => ErrorKind::Connect,
        ClientError::Transport(_) | ClientError::BootReply(_) => ErrorKind::Decode,
        ClientError::Timeout { .. } => ErrorKind::Timeout,
        ClientError::Connect { .. } | ClientError::ConnectionClosed => ErrorKind::Connect,
        _ => ErrorKind::Protocol,
    }
}

/// Collects `reports` from the service at `endpoint` every `every`, forever.
pub async fn run(mut p: Publisher, endpoint: Endpoint, reports: Vec<SysinfoCommand>, every: Duration) {
    // A request may take at most the period (and never more than the library's default).
    let config = ClientConfig {
        request_timeout: every.clamp(Duration::from_secs(1), sysinfo_wire::DEFAULT_REQUEST_TIMEOUT),
        ..ClientConfig::default()
    };
    let mut retry = Retry::default();
    loop {
        let failure = session(&mut p, &endpoint, &config, &reports, every).await;
        retry.after(&mut p, failure).await;
    }
}

async fn session(
    p: &mut Publisher,
    endpoint: &Endpoint,
    config: &ClientConfig,
    reports: &[SysinfoCommand],
    every: Duration,
) -> Failure {
    let mut client = match within(CONNECT_TIMEOUT, "connect", Client::connect(endpoint, config.clone())).await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Failure::new(kind(&e), e),
        Err(f) => return f,
    };
    // Up once the service answers (a peer that accepts and then says nothing is not up).
    let mut answered = false;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for &command in reports {
            match client.request(command).await {
                Ok(response) => {
                    if !answered {
                        answered = true;
                        p.up();
                    }
                    record(p, &response.report)
                }
                // The connection is in an unknown state after these: start over.
                Err(e) if matches!(kind(&e), ErrorKind::Connect | ErrorKind::Decode | ErrorKind::Timeout) => {
                    return Failure::new(kind(&e), e);
                }
                Err(e) => p.error(&Failure::new(kind(&e), e)),
            }
        }
        p.flush_if_dirty();
    }
}

/// Sets the series of one report.
pub fn record(p: &mut Publisher, report: &Report) {
    match report {
        Report::Ps(ps) => record_ps(p, ps),
        Report::Memstat(m) => record_memstat(p, m),
        Report::Kstat(k) => record_kstat(p, k),
        Report::Channels(c) => record_channels(p, c),
        Report::SchedLatency(h) => record_histogram(
            p,
            "rvos_scheduler_latency_seconds",
            "Scheduler run-queue latency (log2 buckets of 10 MHz ticks; _sum estimated from bucket midpoints).",
            h,
        ),
        Report::IpcLatency(h) => record_histogram(
            p,
            "rvos_ipc_latency_seconds",
            "IPC delivery latency (log2 buckets of 10 MHz ticks; _sum estimated from bucket midpoints).",
            h,
        ),
        Report::Watchdog(w) => record_watchdog(p, w),
        Report::UnknownCommand => {
            p.error(&Failure::new(ErrorKind::Protocol, "the service answered \"Unknown command\""))
        }
        Report::Trace(_) | Report::TraceClear(_) => {}
    }
}

/// `kib` in bytes. A count that does not fit in 64 bits (the peer's number is wrong) is a decode
/// error, counted; the series then holds the saturated value.
fn kib_to_bytes(p: &mut Publisher, what: &str, kib: u64) -> f64 {
    match kib.checked_mul(1024) {
        Some(bytes) => bytes as f64,
        None => {
            p.error(&Failure::new(ErrorKind::Decode, format!("{what}: {kib} KiB is more than 2^64 bytes")));
            u64::MAX as f64
        }
    }
}

fn record_ps(p: &mut Publisher, ps: &Ps) {
    // Processes come and go: what the report no longer lists is swept after it.
    let round = p.begin_round();
    for row in &ps.processes {
        let pid = row.pid.to_string();
        let who = || vec![label("pid", &pid), label("name", row.name.as_str())];
        for (window, share) in [("1s", row.cpu_1s), ("1m", row.cpu_1m)] {
            let mut l = who();
            l.push(label("window", window));
            p.set(
                "rvos_process_cpu_ratio",
                "CPU share of one CPU (kernel EWMA).",
                MetricKind::Gauge,
                l,
                share.fraction(),
            );
        }
        let mem = kib_to_bytes(p, "ps mem", row.mem_kib);
        p.set(
            "rvos_process_memory_bytes",
            "Physical memory owned by the process.",
            MetricKind::Gauge,
            who(),
            mem,
        );
        let mut l = who();
        l.push(label("state", row.state.padded().trim_end()));
        p.set(
            "rvos_process_state",
            "The process's scheduler state (1 for the current one).",
            MetricKind::Gauge,
            l,
            1.0,
        );
    }
    for fam in ["rvos_process_cpu_ratio", "rvos_process_memory_bytes", "rvos_process_state"] {
        p.sweep_family(fam, round);
    }
}

fn record_memstat(p: &mut Publisher, m: &Memstat) {
    if let Some(h) = &m.heap {
        for (state, kib) in [("total", h.total_kib), ("used", h.used_kib), ("free", h.free_kib)] {
            let l = vec![label("state", state)];
            let bytes = kib_to_bytes(p, "memstat heap", kib);
            p.set("rvos_kernel_heap_bytes", "Kernel heap bytes, by state.", MetricKind::Gauge, l, bytes);
        }
    }
    let round = p.begin_round();
    for t in &m.tags {
        for (kind, kib) in [("current", t.current_kib), ("peak", t.peak_kib)] {
            let l = vec![label("tag", &t.tag), label("kind", kind)];
            let help = "Kernel heap bytes per allocation tag, current and peak.";
            let bytes = kib_to_bytes(p, "memstat tag", kib);
            p.set("rvos_kernel_heap_tag_bytes", help, MetricKind::Gauge, l, bytes);
        }
        let help = "Live kernel heap allocations per tag.";
        let l = vec![label("tag", &t.tag)];
        p.set("rvos_kernel_heap_tag_live_allocations", help, MetricKind::Gauge, l, t.live_allocations as f64);
    }
    p.sweep_family("rvos_kernel_heap_tag_bytes", round);
    p.sweep_family("rvos_kernel_heap_tag_live_allocations", round);
}

fn record_kstat(p: &mut Publisher, k: &Kstat) {
    for c in &k.counters {
        let help = "The kernel's counters (monotonic).";
        p.set("rvos_kstat_total", help, MetricKind::Counter, vec![label("counter", &c.name)], c.value as f64);
    }
}

fn record_channels(p: &mut Publisher, c: &Channels) {
    let families = ["rvos_channel_messages_total", "rvos_channel_bytes_total", "rvos_channel_queue_length"];
    // Closed channels are swept after the report (counters keep their rates across reports).
    let round = p.begin_round();
    for row in c.channels.iter().filter(|r| !r.closed) {
        let ch = row.channel.to_string();
        for (side, msgs, bytes, queue) in
            [("a", row.msgs_a, row.bytes_a, row.queue_a), ("b", row.msgs_b, row.bytes_b, row.queue_b)]
        {
            let l = || vec![label("channel", &ch), label("side", side)];
            p.set(families[0], "Messages sent on a channel end.", MetricKind::Counter, l(), msgs as f64);
            p.set(families[1], "Bytes sent on a channel end.", MetricKind::Counter, l(), bytes as f64);
            p.set(families[2], "Messages queued at a channel end.", MetricKind::Gauge, l(), queue as f64);
        }
    }
    for fam in families {
        p.sweep_family(fam, round);
    }
}

/// Bucket `i` of the kernel's histogram holds latencies in `[2^i, 2^(i+1))` ticks of 10 MHz.
const TICK_SECONDS: f64 = 1e-7;

/// The kernel's bucket index of each printed bucket: the printed bounds are µs rounded down, which
/// tell the first three buckets apart only by their position, so the index is fixed by the first
/// bucket whose bounds are unique.
fn bucket_indexes(h: &Histogram) -> Option<usize> {
    let bounds = |i: usize| ((1u64 << i) / 10, ((1u64 << (i + 1)) - 1) / 10);
    let n = sysinfo_wire::report::HIST_BUCKETS;
    for (pos, b) in h.buckets.iter().enumerate() {
        if let Some(i) = (3..n).find(|&i| bounds(i) == (b.lo, b.hi)) {
            return i.checked_sub(pos);
        }
    }
    // Every printed bucket is one of the first three (all "0 -> 0"): start at 0.
    (h.buckets.len() <= 3).then_some(0)
}

fn record_histogram(p: &mut Publisher, family: &'static str, help: &'static str, h: &Histogram) {
    let n = sysinfo_wire::report::HIST_BUCKETS;
    let mut counts = vec![0u64; n];
    if let Some(first) = bucket_indexes(h) {
        for (k, b) in h.buckets.iter().enumerate() {
            if let Some(c) = counts.get_mut(first + k) {
                *c = b.count;
            }
        }
    } else if !h.buckets.is_empty() {
        p.error(&Failure::new(
            ErrorKind::Protocol,
            format!("{}: bucket bounds do not match the kernel's", h.title),
        ));
        return;
    }
    let mut cumulative = 0u64;
    let mut sum = 0.0;
    let buckets = counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            cumulative = cumulative.saturating_add(c);
            sum += c as f64 * 1.5 * (1u64 << i) as f64 * TICK_SECONDS;
            ((1u64 << (i + 1)) as f64 * TICK_SECONDS, cumulative)
        })
        .collect();
    p.set_value(
        family,
        help,
        MetricKind::Histogram,
        vec![],
        Value::Histogram { buckets, sum, count: cumulative },
    );
}

fn record_watchdog(p: &mut Publisher, w: &Watchdog) {
    let enabled = if w.enabled { 1.0 } else { 0.0 };
    p.set(
        "rvos_watchdog_enabled",
        "1 when the kernel watchdog is enabled.",
        MetricKind::Gauge,
        vec![],
        enabled,
    );
    let round = p.begin_round();
    let help = "Seconds since the task's last watchdog heartbeat.";
    for t in &w.kernel_tasks {
        let l = vec![label("task", &t.name)];
        p.set("rvos_watchdog_heartbeat_age_seconds", help, MetricKind::Gauge, l, t.ago_ms as f64 / 1000.0);
    }
    for c in &w.critical_processes {
        let l = vec![label("task", &format!("{}[{}]", c.name, c.pid))];
        p.set("rvos_watchdog_heartbeat_age_seconds", help, MetricKind::Gauge, l, c.ago_ms as f64 / 1000.0);
    }
    p.sweep_family("rvos_watchdog_heartbeat_age_seconds", round);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_bucket_indexes_from_printed_bounds() {
        let mut counts = [0u64; 32];
        counts[5] = 3;
        counts[7] = 1;
        let h = Histogram::from_buckets("t", &counts);
        assert_eq!(bucket_indexes(&h), Some(5));
        let mut counts = [0u64; 32];
        counts[1] = 2;
        counts[4] = 1;
        assert_eq!(bucket_indexes(&Histogram::from_buckets("t", &counts)), Some(1));
        assert_eq!(report_by_name("sched_latency"), Some(SysinfoCommand::SchedLatency));
        assert_eq!(report_by_name("PS"), Some(SysinfoCommand::Ps));
        assert_eq!(report_by_name("trace_clear"), None);
    }

    #[test]
    fn kib_beyond_64_bits_of_bytes_is_a_decode_error_not_a_panic() {
        use super::super::testing::{check_rendered, publisher, with_numbers};
        let (reg, mut p) = publisher(crate::fleet::Protocol::Sysinfo);
        let mut sys = rvos_sim::system::System::new(rvos_sim::system::SystemConfig::default(), 0);
        for command in [SysinfoCommand::Ps, SysinfoCommand::Memstat] {
            let text = with_numbers(&sys.render(command, 0), &[u64::MAX.to_string()]);
            record(&mut p, &Report::parse(command, &text));
        }
        check_rendered(&reg, &mut p, &[]).unwrap();
        let snap = reg.snapshot();
        let t = snap.get("t").unwrap();
        assert!(t.errors.get(ErrorKind::Decode) > 0, "the overflow is counted");
        assert!(
            t.series
                .iter()
                .any(|s| &*s.family == "rvos_kernel_heap_bytes" && s.value == Value::Number(u64::MAX as f64)),
            "saturated"
        );
    }

    proptest::proptest! {
        /// Every report, with its numbers replaced by arbitrary ones (as a peer could send), maps
        /// to series without a panic, and every rendered value is finite.
        #[test]
        fn any_numbers_in_any_report_map_to_finite_values(
            numbers in proptest::collection::vec(super::super::testing::any_number(), 1..40),
            command in proptest::sample::select(DEFAULT_REPORTS.to_vec()),
        ) {
            use super::super::testing::{check_rendered, publisher, with_numbers};
            let (reg, mut p) = publisher(crate::fleet::Protocol::Sysinfo);
            let mut sys = rvos_sim::system::System::new(rvos_sim::system::SystemConfig::default(), 5_000_000);
            let text = with_numbers(&sys.render(command, 5_000_000), &numbers);
            record(&mut p, &Report::parse(command, &text));
            proptest::prop_assert_eq!(check_rendered(&reg, &mut p, &[]), Ok(()));
        }
    }
}
