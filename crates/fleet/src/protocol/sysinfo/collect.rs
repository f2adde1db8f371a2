//! The rvOS sysinfo service: each report at its own period, the reports due at one moment pipelined
//! on the target's one connection ([`Client::request_many`]), each mapped onto the `rvos_*` families.
//! A reply whose bytes did not change since the report's last one is not parsed again (its series
//! already hold its values), except for the reports with counters, whose rates must fall to 0. Trace is not a metric and TraceClear changes the kernel's state: neither
//! is asked for.

use std::fmt::Write as _;
use std::future::Future;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::time::Duration;

use sysinfo_wire::report::{Channels, Histogram, Kstat, Memstat, Ps, Watchdog};
use sysinfo_wire::{Client, ClientConfig, ClientError, Endpoint, Reply, Report, SysinfoCommand};
use tokio::time::Instant;

use super::{report_by_name, SysinfoBlock, DEFAULT_REPORTS, DEFAULT_TIMEOUT};
use crate::collect::{connecting, Retry, CONNECT_TIMEOUT};
use crate::model::{ErrorKind, MetricKind};
use crate::rows::RowCache;
use crate::target::{Failure, Publisher};

/// Where the service listens.
pub fn endpoint(connect: Option<&str>, socket: Option<&PathBuf>) -> Endpoint {
    match (connect, socket) {
        (Some(a), _) => Endpoint::Tcp(a.to_owned()),
        (None, Some(p)) => Endpoint::Unix(p.clone()),
        (None, None) => Endpoint::Tcp(sysinfo_wire::DEFAULT_ADDR.to_owned()),
    }
}

/// What to ask a service for, and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Each report with its period.
    pub reports: Vec<(SysinfoCommand, Duration)>,
    /// The longest one round of requests may take.
    pub timeout: Duration,
}

impl Plan {
    /// `reports`, each every `every`, with the default timeout.
    pub fn every(reports: &[SysinfoCommand], every: Duration) -> Plan {
        Plan { reports: reports.iter().map(|&c| (c, every)).collect(), timeout: DEFAULT_TIMEOUT }
    }

    /// The plan of a `[[sysinfo]]` block (names were checked with the config).
    pub fn new(t: &SysinfoBlock) -> Plan {
        let reports = match &t.reports {
            Some(r) => {
                r.periods(t.every).into_iter().filter_map(|(n, d)| Some((report_by_name(n)?, d))).collect()
            }
            None => DEFAULT_REPORTS.iter().map(|&c| (c, t.every)).collect(),
        };
        Plan { reports, timeout: t.timeout }
    }
}

fn kind(e: &ClientError) -> ErrorKind {
    match e {
        ClientError::Transport(sysinfo_wire::TransportError::Io(_)) => ErrorKind::Connect,
        ClientError::Transport(sysinfo_wire::TransportError::OtherProtocol { .. }) => ErrorKind::Protocol,
        ClientError::Transport(_) | ClientError::BootReply(_) => ErrorKind::Decode,
        ClientError::Timeout { .. } => ErrorKind::Timeout,
        ClientError::Connect { .. } | ClientError::ConnectionClosed => ErrorKind::Connect,
        _ => ErrorKind::Protocol,
    }
}

/// Collects `reports` from the service at `endpoint` every `every`, forever (see [`run_plan`]).
pub async fn run(p: Publisher, endpoint: Endpoint, reports: Vec<SysinfoCommand>, every: Duration) {
    run_plan(p, endpoint, Plan::every(&reports, every)).await
}

/// Collects the reports of `plan` from the service at `endpoint`, each at its period, forever.
pub async fn run_plan(mut p: Publisher, endpoint: Endpoint, plan: Plan) {
    let config = ClientConfig { request_timeout: plan.timeout, ..ClientConfig::default() };
    let mut retry = Retry::default();
    loop {
        let failure = session(&mut p, &endpoint, &config, &plan).await;
        retry.after(&mut p, failure).await;
    }
}

/// One report's schedule and the fingerprint of its last reply.
#[derive(Debug)]
struct Due {
    command: SysinfoCommand,
    every: Duration,
    next: Instant,
    /// A hash of the last reply's text that was recorded, if any.
    last: Option<u64>,
    /// The slots of the report's rows.
    rows: RowCache,
}

/// The reports of a plan, each at its own period, all in phase from one start: reports whose
/// periods are multiples of one another fall due together and go in one pipelined batch.
#[derive(Debug)]
struct Schedule {
    due: Vec<Due>,
    hasher: foldhash::fast::RandomState,
}

impl Schedule {
    fn new(plan: &Plan, start: Instant) -> Schedule {
        let due = plan
            .reports
            .iter()
            .map(|&(command, every)| Due {
                command,
                every,
                next: start,
                last: None,
                rows: RowCache::default(),
            })
            .collect();
        Schedule { due, hasher: foldhash::fast::RandomState::default() }
    }

    /// When the next report falls due (`None`: no reports at all).
    fn next(&self) -> Option<Instant> {
        self.due.iter().map(|d| d.next).min()
    }

    /// The reports due at `now`, in plan order, into `taken`.
    fn take_due(&self, now: Instant, taken: &mut Vec<usize>) {
        taken.clear();
        taken.extend((0..self.due.len()).filter(|&i| self.due[i].next <= now));
    }

    /// Moves each of `taken` to its next period after `now` (periods missed while a round ran long
    /// are skipped, keeping the phase).
    fn advance(&mut self, taken: &[usize], now: Instant) {
        for &i in taken {
            let d = &mut self.due[i];
            while d.next <= now {
                d.next += d.every;
            }
        }
    }

    /// Whether `reply` is the same text as report `i`'s last recorded one; remembers it otherwise.
    ///
    /// Reports with counters (Kstat, Channels) are always recorded: setting a counter again to the
    /// same value is what brings its rate down to 0.
    fn unchanged(&mut self, i: usize, reply: &Reply) -> bool {
        let d = &mut self.due[i];
        if matches!(d.command, SysinfoCommand::Kstat | SysinfoCommand::Channels) {
            return false;
        }
        let hash = self.hasher.hash_one(reply.text.as_bytes());
        if d.last == Some(hash) {
            return true;
        }
        // "Unknown command" is an error each time it comes: never skipped.
        d.last = (reply.text != sysinfo_wire::UNKNOWN_COMMAND_TEXT).then_some(hash);
        false
    }
}

async fn session(p: &mut Publisher, endpoint: &Endpoint, config: &ClientConfig, plan: &Plan) -> Failure {
    let client = match connecting(
        CONNECT_TIMEOUT,
        "connect",
        Client::connect_with(endpoint, config.clone(), p.tapper(&endpoint.to_string())),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Failure::new(kind(&e), e),
        Err(f) => return f,
    };
    poll(p, client, plan).await
}

/// Asks for the reports of `plan` on a connected client until the connection fails (also used to
/// replay a recording through this collector).
#[allow(clippy::manual_async_fn)] // see the comment in the body
pub fn poll<'a>(
    p: &'a mut Publisher,
    mut client: Client,
    plan: &'a Plan,
) -> impl Future<Output = Failure> + 'a {
    // Not an `async fn`: that would keep `client` twice in its future (the argument as passed, and
    // moved into the body), and it is the largest part of a target's task, alive as long as it.
    async move {
        // Up once the service answers (a peer that accepts and then says nothing is not up).
        let mut answered = false;
        let mut schedule = Schedule::new(plan, Instant::now());
        let (mut taken, mut requests) = (Vec::new(), Vec::new());
        let mut sweep = Sweep { round: 0, families: Vec::new() };
        loop {
            let Some(next) = schedule.next() else { return std::future::pending().await };
            tokio::time::sleep_until(next).await;
            schedule.take_due(Instant::now(), &mut taken);
            requests.clear();
            requests.extend(taken.iter().map(|&i| schedule.due[i].command.request()));
            // Boxed: the batch's state is held while it is in flight, not in the target's task between ticks.
            let replies = Box::pin(client.request_many_raw(&requests)).await;
            schedule.advance(&taken, Instant::now());
            // The connection is in an unknown state after a failure of the batch: start over.
            let replies = match replies {
                Ok(r) => r,
                Err(e) => return Failure::new(kind(&e), e),
            };
            // One round for the tick's reports, and one sweep after them all.
            sweep.round = p.begin_round();
            sweep.families.clear();
            for (&i, reply) in taken.iter().zip(replies) {
                match reply {
                    Ok(reply) => {
                        if !answered {
                            answered = true;
                            p.up();
                        }
                        if !schedule.unchanged(i, &reply) {
                            let due = &mut schedule.due[i];
                            record_in(p, &mut due.rows, &Report::parse(due.command, &reply.text), &mut sweep);
                        }
                    }
                    Err(e) => p.error(&Failure::new(kind(&e), e)),
                }
            }
            p.sweep_families(&sweep.families, sweep.round);
            p.flush_if_dirty();
        }
    }
}

/// The command a recorded connection sent on each channel (from the bytes it wrote): what each
/// channel's reply answers. Boot requests and anything that is not a command are skipped, and so is
/// the rest after a frame that does not decode.
pub fn recorded_commands(
    outbound: &[u8],
) -> std::collections::HashMap<sysinfo_wire::ChannelId, SysinfoCommand> {
    let mut buf = bytes::BytesMut::from(outbound);
    let mut commands = std::collections::HashMap::new();
    while let Ok(Some(frame)) = sysinfo_wire::decode_frame(&mut buf) {
        if let sysinfo_wire::Frame::Message { channel, message } = frame {
            if channel != sysinfo_wire::ChannelId::BOOT {
                if let Ok(command) = message.decode::<SysinfoCommand>() {
                    commands.entry(channel).or_insert(command);
                }
            }
        }
    }
    commands
}

/// Replays a recorded connection through this collector: each reply on a channel whose command is in
/// `commands` (see [`recorded_commands`]) is parsed as that report and recorded, whatever reports or
/// periods the recording was made with. As live, the target is published once per round: when every
/// channel that init granted has its reply. Returns when the stream ends.
pub async fn over<S>(
    p: &mut Publisher,
    stream: S,
    commands: &std::collections::HashMap<sysinfo_wire::ChannelId, SysinfoCommand>,
) -> Failure
where
    S: tokio::io::AsyncRead + Unpin,
{
    use futures::StreamExt as _;
    let mut frames = tokio_util::codec::FramedRead::new(stream, sysinfo_wire::HostCodec);
    // Replies being reassembled: at most one per channel of a recorded command.
    let mut open: std::collections::HashMap<sysinfo_wire::ChannelId, sysinfo_wire::Reassembler> =
        Default::default();
    let mut answered = false;
    let mut rows: std::collections::HashMap<SysinfoCommand, RowCache> = Default::default();
    loop {
        let (channel, message) = match frames.next().await {
            None => return Failure::new(ErrorKind::Connect, "the recording ends"),
            Some(Err(e)) => return Failure::new(ErrorKind::Decode, e),
            Some(Ok(sysinfo_wire::Frame::Message { channel, message })) => (channel, Some(message)),
            Some(Ok(sysinfo_wire::Frame::Close { channel })) => (channel, None),
        };
        if channel == sysinfo_wire::ChannelId::BOOT {
            // Init granting the round's channels: their replies make the round.
            for cap in message.iter().flat_map(|m| m.caps()) {
                if commands.contains_key(cap) {
                    open.entry(*cap).or_default();
                }
            }
            continue;
        }
        let Some(&command) = commands.get(&channel) else { continue };
        let done = match message {
            // The service closes a channel after its reply's sentinel: that reply was recorded already.
            // A close before the sentinel ends the reply (the live client does the same).
            None => match open.get_mut(&channel) {
                Some(reply) => {
                    reply.close();
                    true
                }
                None => continue,
            },
            Some(m) => match open.entry(channel).or_default().push_bytes(m.into_bytes()) {
                Ok(done) => done,
                Err(e) => {
                    open.remove(&channel);
                    p.error(&Failure::new(ErrorKind::Decode, e));
                    false
                }
            },
        };
        if done {
            let reply = open.remove(&channel).unwrap_or_default().finish();
            if !answered {
                answered = true;
                p.up();
            }
            record(p, rows.entry(command).or_default(), &Report::parse(command, &reply.text));
        }
        if open.is_empty() {
            p.flush_if_dirty();
        }
    }
}

/// Sets the series of one report; `rows` is the report's own cache of its rows' slots, kept from one
/// report to the next. Series of the report's rows that it no longer lists (processes, channels) are
/// removed.
pub fn record(p: &mut Publisher, rows: &mut RowCache, report: &Report) {
    let mut sweep = Sweep { round: p.begin_round(), families: Vec::new() };
    record_in(p, rows, report, &mut sweep);
    p.sweep_families(&sweep.families, sweep.round);
}

/// The families whose series the reports of a round list in full (what a report no longer lists is
/// gone): they are swept once, after every report of the round, in one pass over the target's series.
struct Sweep {
    round: u64,
    families: Vec<&'static str>,
}

/// [`record`] within `sweep`'s round: the report's families to sweep are added to it.
fn record_in(p: &mut Publisher, rows: &mut RowCache, report: &Report, sweep: &mut Sweep) {
    rows.begin();
    match report {
        Report::Ps(ps) => record_ps(p, rows, ps, sweep),
        Report::Memstat(m) => record_memstat(p, rows, m, sweep),
        Report::Kstat(k) => record_kstat(p, rows, k),
        Report::Channels(c) => record_channels(p, rows, c, sweep),
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
        Report::Watchdog(w) => record_watchdog(p, rows, w, sweep),
        Report::UnknownCommand => {
            p.error(&Failure::new(ErrorKind::Protocol, "the service answered \"Unknown command\""))
        }
        Report::Trace(_) | Report::TraceClear(_) => {}
    }
    rows.end();
}

/// `kib` in bytes. A count that does not fit in 64 bits (the peer's number is wrong) is a decode
/// error, counted; the series then holds the saturated value.
fn kib_to_bytes(p: &mut Publisher, what: &str, kib: u64) -> u64 {
    kib.checked_mul(1024).unwrap_or_else(|| {
        p.error(&Failure::new(ErrorKind::Decode, format!("{what}: {kib} KiB is more than 2^64 bytes")));
        u64::MAX
    })
}

fn record_ps(p: &mut Publisher, rows: &mut RowCache, ps: &Ps, sweep: &mut Sweep) {
    // Processes come and go: what the report no longer lists is swept after it.
    for row in &ps.processes {
        let mut pid_text = itoa::Buffer::new();
        let pid = pid_text.format(row.pid);
        let name = row.name.as_str();
        let state = row.state.padded().trim_end();
        let mut cached = rows.row(&[pid, name]);
        for (window, share) in [("1s", row.cpu_1s), ("1m", row.cpu_1m)] {
            cached.put(
                p,
                "rvos_process_cpu_ratio",
                "CPU share of one CPU (kernel EWMA).",
                MetricKind::Gauge,
                &[("pid", pid), ("name", name), ("window", window)],
                share.fraction(),
            );
        }
        let mem = kib_to_bytes(p, "ps mem", row.mem_kib);
        cached.put(
            p,
            "rvos_process_memory_bytes",
            "Physical memory owned by the process.",
            MetricKind::Gauge,
            &[("pid", pid), ("name", name)],
            mem,
        );
        // The state is a row of its own: a process changing state leaves its other series where
        // they were.
        rows.row(&[pid, name, state]).put(
            p,
            "rvos_process_state",
            "The scheduler state ps shows for the process (the series of that state is 1).",
            MetricKind::Gauge,
            &[("pid", pid), ("name", name), ("state", state)],
            1u64,
        );
    }
    sweep.families.extend(["rvos_process_cpu_ratio", "rvos_process_memory_bytes", "rvos_process_state"]);
}

fn record_memstat(p: &mut Publisher, rows: &mut RowCache, m: &Memstat, sweep: &mut Sweep) {
    if let Some(h) = &m.heap {
        let mut row = rows.row(&[]);
        for (state, kib) in [("total", h.total_kib), ("used", h.used_kib), ("free", h.free_kib)] {
            let bytes = kib_to_bytes(p, "memstat heap", kib);
            row.put(
                p,
                "rvos_kernel_heap_bytes",
                "Kernel heap bytes, by state.",
                MetricKind::Gauge,
                &[("state", state)],
                bytes,
            );
        }
    }
    for t in &m.tags {
        let mut row = rows.row(&[&t.tag]);
        for (kind, kib) in [("current", t.current_kib), ("peak", t.peak_kib)] {
            let l = [("tag", &*t.tag), ("kind", kind)];
            let help = "Kernel heap bytes per allocation tag, current and peak.";
            let bytes = kib_to_bytes(p, "memstat tag", kib);
            row.put(p, "rvos_kernel_heap_tag_bytes", help, MetricKind::Gauge, &l, bytes);
        }
        let help = "Live kernel heap allocations per tag.";
        let l = [("tag", &*t.tag)];
        row.put(p, "rvos_kernel_heap_tag_live_allocations", help, MetricKind::Gauge, &l, t.live_allocations);
    }
    sweep.families.extend(["rvos_kernel_heap_tag_bytes", "rvos_kernel_heap_tag_live_allocations"]);
}

fn record_kstat(p: &mut Publisher, rows: &mut RowCache, k: &Kstat) {
    for c in &k.counters {
        let help = "The kernel's counters (monotonic).";
        let l = [("counter", &*c.name)];
        rows.row(&[&c.name]).put(p, "rvos_kstat_total", help, MetricKind::Counter, &l, c.value);
    }
}

fn record_channels(p: &mut Publisher, rows: &mut RowCache, c: &Channels, sweep: &mut Sweep) {
    let families = ["rvos_channel_messages_total", "rvos_channel_bytes_total", "rvos_channel_queue_length"];
    // Closed channels are swept after the report (counters keep their rates across reports).
    for row in c.channels.iter().filter(|r| !r.closed) {
        let mut ch_text = itoa::Buffer::new();
        let ch = ch_text.format(row.channel);
        let mut cached = rows.row(&[ch]);
        for (side, msgs, bytes, queue) in
            [("a", row.msgs_a, row.bytes_a, row.queue_a), ("b", row.msgs_b, row.bytes_b, row.queue_b)]
        {
            let l = [("channel", ch), ("side", side)];
            cached.put(p, families[0], "Messages sent on a channel end.", MetricKind::Counter, &l, msgs);
            cached.put(p, families[1], "Bytes sent on a channel end.", MetricKind::Counter, &l, bytes);
            cached.put(p, families[2], "Messages queued at a channel end.", MetricKind::Gauge, &l, queue);
        }
    }
    sweep.families.extend(families);
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
    const N: usize = sysinfo_wire::report::HIST_BUCKETS;
    let mut counts = [0u64; N];
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
    let mut bounds = [0.0; N];
    for (i, c) in counts.iter_mut().enumerate() {
        cumulative = cumulative.saturating_add(*c);
        sum += *c as f64 * 1.5 * (1u64 << i) as f64 * TICK_SECONDS;
        bounds[i] = (1u64 << (i + 1)) as f64 * TICK_SECONDS;
        *c = cumulative;
    }
    p.put_histogram(family, help, &[], &bounds, &counts, sum, cumulative);
}

fn record_watchdog(p: &mut Publisher, rows: &mut RowCache, w: &Watchdog, sweep: &mut Sweep) {
    rows.row(&[]).put(
        p,
        "rvos_watchdog_enabled",
        "1 when the kernel watchdog is enabled.",
        MetricKind::Gauge,
        &[],
        u64::from(w.enabled),
    );
    let help = "Seconds since the task's last watchdog heartbeat.";
    let family = "rvos_watchdog_heartbeat_age_seconds";
    for t in &w.kernel_tasks {
        let l = [("task", &*t.name)];
        rows.row(&[&t.name]).put(p, family, help, MetricKind::Gauge, &l, t.ago_ms as f64 / 1000.0);
    }
    let mut task = String::new();
    for c in &w.critical_processes {
        task.clear();
        let _ = write!(task, "{}[{}]", c.name, c.pid);
        let l = [("task", task.as_str())];
        rows.row(&[&task]).put(p, family, help, MetricKind::Gauge, &l, c.ago_ms as f64 / 1000.0);
    }
    sweep.families.push(family);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TargetSnapshot;
    use crate::registry::Registry;

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
        use crate::collect::testing::{check_rendered, publisher, with_numbers};
        let (reg, mut p) = publisher(crate::model::Protocol::SYSINFO);
        let mut sys = rvos_sim::system::System::new(rvos_sim::system::SystemConfig::default(), 0);
        for command in [SysinfoCommand::Ps, SysinfoCommand::Memstat] {
            let text = with_numbers(&sys.render(command, 0), &[u64::MAX.to_string()]);
            record(&mut p, &mut RowCache::default(), &Report::parse(command, &text));
        }
        check_rendered(&reg, &mut p, &[]).unwrap();
        let snap = reg.snapshot();
        let t = snap.get("t").unwrap();
        assert!(t.errors.get(ErrorKind::Decode) > 0, "the overflow is counted");
        assert!(
            t.series
                .iter()
                .any(|s| s.family() == "rvos_kernel_heap_bytes" && s.number() == Some(u64::MAX as f64)),
            "saturated"
        );
    }

    #[test]
    fn one_sweep_after_a_round_removes_what_its_reports_no_longer_list_and_nothing_of_a_skipped_one() {
        use crate::collect::testing::publisher;
        let (reg, mut p) = publisher(crate::model::Protocol::SYSINFO);
        let mut sys = rvos_sim::system::System::new(rvos_sim::system::SystemConfig::default(), 0);
        let ps = sys.render(SysinfoCommand::Ps, 0);
        let memstat = sys.render(SysinfoCommand::Memstat, 0);
        let (mut ps_rows, mut mem_rows) = (RowCache::default(), RowCache::default());
        let count = |reg: &Registry, family: &str| {
            reg.snapshot().get("t").unwrap().series.iter().filter(|s| s.family() == family).count()
        };
        // A round with both reports.
        let mut sweep = Sweep { round: p.begin_round(), families: Vec::new() };
        record_in(&mut p, &mut ps_rows, &Report::parse(SysinfoCommand::Ps, &ps), &mut sweep);
        record_in(&mut p, &mut mem_rows, &Report::parse(SysinfoCommand::Memstat, &memstat), &mut sweep);
        p.sweep_families(&sweep.families, sweep.round);
        p.flush();
        let processes = count(&reg, "rvos_process_memory_bytes");
        let tags = count(&reg, "rvos_kernel_heap_tag_live_allocations");
        assert!(processes > 1 && tags > 0);
        // The next round: ps without its last process, memstat skipped (its reply did not change).
        let fewer = ps.trim_end_matches('\n').rsplit_once('\n').unwrap().0.to_owned() + "\n";
        let mut sweep = Sweep { round: p.begin_round(), families: Vec::new() };
        record_in(&mut p, &mut ps_rows, &Report::parse(SysinfoCommand::Ps, &fewer), &mut sweep);
        p.sweep_families(&sweep.families, sweep.round);
        p.flush();
        assert_eq!(count(&reg, "rvos_process_memory_bytes"), processes - 1, "the process that left is swept");
        assert_eq!(
            count(&reg, "rvos_kernel_heap_tag_live_allocations"),
            tags,
            "a skipped report keeps its series"
        );
    }

    proptest::proptest! {
        /// Every report, with its numbers replaced by arbitrary ones (as a peer could send), maps
        /// to series without a panic, and every rendered value is finite.
        #[test]
        fn any_numbers_in_any_report_map_to_finite_values(
            numbers in proptest::collection::vec(crate::collect::testing::any_number(), 1..40),
            command in proptest::sample::select(DEFAULT_REPORTS.to_vec()),
        ) {
            use crate::collect::testing::{check_rendered, publisher, with_numbers};
            let (reg, mut p) = publisher(crate::model::Protocol::SYSINFO);
            let mut sys = rvos_sim::system::System::new(rvos_sim::system::SystemConfig::default(), 5_000_000);
            let text = with_numbers(&sys.render(command, 5_000_000), &numbers);
            record(&mut p, &mut RowCache::default(), &Report::parse(command, &text));
            proptest::prop_assert_eq!(check_rendered(&reg, &mut p, &[]), Ok(()));
        }
    }

    #[test]
    fn reports_fall_due_together_at_common_multiples_of_their_periods() {
        let plan = Plan {
            reports: vec![
                (SysinfoCommand::Ps, Duration::from_secs(1)),
                (SysinfoCommand::Memstat, Duration::from_secs(10)),
                (SysinfoCommand::Kstat, Duration::from_secs(2)),
            ],
            timeout: DEFAULT_TIMEOUT,
        };
        let t0 = Instant::now();
        let mut s = Schedule::new(&plan, t0);
        let (mut rounds, mut taken) = (Vec::new(), Vec::new());
        while let Some(next) = s.next().filter(|&n| n <= t0 + Duration::from_secs(10)) {
            s.take_due(next, &mut taken);
            rounds.push(((next - t0).as_secs(), taken.len()));
            s.advance(&taken, next);
        }
        let sizes: Vec<(u64, usize)> = rounds;
        assert_eq!(
            sizes,
            [(0, 3), (1, 1), (2, 2), (3, 1), (4, 2), (5, 1), (6, 2), (7, 1), (8, 2), (9, 1), (10, 3)]
        );
        // A round that ran long skips the periods it missed and keeps the phase.
        s.take_due(t0 + Duration::from_secs(11), &mut taken);
        s.advance(&taken, t0 + Duration::from_millis(13_500));
        assert_eq!(s.due[0].next - t0, Duration::from_secs(14));
    }

    #[test]
    fn an_unchanged_reply_is_skipped_except_for_reports_with_counters_and_unknown_command() {
        let plan = Plan::every(
            &[SysinfoCommand::Ps, SysinfoCommand::Kstat, SysinfoCommand::Watchdog],
            Duration::from_secs(1),
        );
        let mut s = Schedule::new(&plan, Instant::now());
        let reply = |text: &str| Reply {
            text: text.to_owned(),
            end: sysinfo_wire::End::Sentinel,
            chunks: 1,
            lossy: false,
        };
        assert!(!s.unchanged(0, &reply("a\n")));
        assert!(s.unchanged(0, &reply("a\n")));
        assert!(!s.unchanged(0, &reply("b\n")));
        assert!(!s.unchanged(1, &reply("  IRQ_TIMER 1\n")));
        assert!(!s.unchanged(1, &reply("  IRQ_TIMER 1\n")), "counters are set again");
        for _ in 0..2 {
            assert!(!s.unchanged(2, &reply(sysinfo_wire::UNKNOWN_COMMAND_TEXT)));
        }
    }

    /// rvos-sim on loopback with `reply_delay`, and a sysinfo target "vm" on it (its collector aborted
    /// and the sim stopped when dropped).
    struct Setup {
        registry: Registry,
        sim: rvos_sim::SimHandle,
        _collector: crate::collect::AbortOnDrop,
        shutdown: sim_common::Shutdown,
    }

    impl Drop for Setup {
        fn drop(&mut self) {
            self.shutdown.cancel();
        }
    }

    impl Setup {
        async fn new(reply_delay: Duration, every: Duration, timeout: Duration) -> Setup {
            let system = rvos_sim::SystemConfig { trace_prefill: 0, ..rvos_sim::SystemConfig::default() };
            let config = rvos_sim::Config { reply_delay, system, ..Default::default() };
            let (sim, handle) = rvos_sim::start(config);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let shutdown = sim_common::Shutdown::new();
            tokio::spawn(rvos_sim::serve(listener, sim, shutdown.clone()));
            let registry = Registry::new();
            let p = Publisher::new(&registry, "vm", crate::model::Protocol::SYSINFO, Vec::new(), 10_000);
            let reports = [SysinfoCommand::Kstat, SysinfoCommand::Watchdog];
            let plan = Plan { timeout, ..Plan::every(&reports, every) };
            let collector = crate::collect::AbortOnDrop(tokio::spawn(run_plan(p, Endpoint::Tcp(addr), plan)));
            Setup { registry, sim: handle, _collector: collector, shutdown }
        }

        /// The target once `pred` holds for it (within 30 s).
        async fn target_when(&self, mut pred: impl FnMut(&TargetSnapshot) -> bool) -> TargetSnapshot {
            let mut changed = self.registry.changed();
            let wait = async {
                loop {
                    if let Some(t) = self.registry.snapshot().get("vm").filter(|t| pred(t)) {
                        return t.clone();
                    }
                    changed.changed().await.expect("the registry outlives the test");
                }
            };
            tokio::time::timeout(Duration::from_secs(30), wait).await.expect("within 30 s")
        }
    }

    #[tokio::test]
    async fn a_reply_slower_than_every_but_within_the_timeout_keeps_the_target_up() {
        // Each round takes 300 ms against a period of 100 ms: late, never down.
        let every = Duration::from_millis(100);
        let mut setup = Setup::new(Duration::from_millis(300), every, DEFAULT_TIMEOUT).await;
        setup.target_when(|t| t.is_up()).await;
        let waited = tokio::time::timeout(Duration::from_secs(30), setup.sim.wait_for(|s| s.replies >= 12));
        waited.await.expect("the sim answers");
        let t = setup.target_when(|_| true).await;
        assert!(t.is_up(), "{t:?}");
        assert_eq!((t.connects, t.errors.total()), (1, 0), "no down transition, no error: {t:?}");
        assert!(t.series.iter().any(|s| s.family() == "rvos_kstat_total"), "{t:?}");
    }

    #[tokio::test]
    async fn a_reply_slower_than_the_timeout_takes_the_target_down() {
        // The control: the same sim, with a timeout shorter than its replies take.
        let every = Duration::from_millis(100);
        let setup = Setup::new(Duration::from_millis(300), every, Duration::from_millis(150)).await;
        let t = setup.target_when(|t| t.errors.get(ErrorKind::Timeout) > 0).await;
        assert!(!t.is_up() && t.connects == 0, "{t:?}");
        assert_eq!(setup.sim.stats().replies, 0);
    }
}
