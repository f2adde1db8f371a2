//! A simulated rvOS kernel: processes that run, block and die, heap tags, channels that open and close,
//! latency histograms, counters, the trace ring and the watchdog. It advances lazily, one step per
//! `tick` of elapsed time, whenever a report is rendered; every report is rendered by the same
//! formatters the client parses with.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

use sysinfo_wire::report::{
    Ack, BlockedOn, ChannelRow, Channels, CpuShare, CriticalProcess, HeapSummary, HeapTag, Heartbeat,
    Histogram, Kstat, Memstat, ProcState, ProcessMemory, Ps, PsRow, Trace, TraceEntry, Watchdog, HEAP_TAGS,
    HIST_BUCKETS, IPC_LATENCY_TITLE, SCHED_LATENCY_TITLE, TRACE_LABEL_MAX,
};
use sysinfo_wire::SysinfoCommand;

/// rvOS's timebase: `rdtime` ticks per second.
pub const TICKS_PER_SEC: u64 = 10_000_000;
/// The kernel heap's size (`HEAP_SIZE`, 4 MiB).
pub const HEAP_SIZE: u64 = 4 * 1024 * 1024;
/// The trace ring's size in the kernel.
pub const TRACE_CAPACITY: usize = 16384;
/// The kernel's channel table (`ipc::MAX_CHANNELS`): opening a channel fails when every slot is taken.
pub const MAX_CHANNELS: usize = 1024;
/// How many live channels the simulated system settles around by default.
pub const DEFAULT_LIVE_CHANNELS: usize = 16;
/// The most steps one render catches up on (a sim left idle for hours does not spin).
const MAX_CATCH_UP: u64 = 2_000;

/// What the simulated system looks like.
#[derive(Debug, Clone)]
pub struct SystemConfig {
    /// Processes at boot, idle and init included (at least 2).
    pub processes: usize,
    /// Trace ring capacity (16384 in rvOS).
    pub trace_capacity: usize,
    /// Trace entries recorded before the first client comes (capped by the capacity).
    pub trace_prefill: usize,
    /// Whether the watchdog is on.
    pub watchdog: bool,
    /// The watchdog timeout.
    pub watchdog_timeout: Duration,
    /// Simulated time per step.
    pub tick: Duration,
    /// The random seed (the same seed and request times give the same reports).
    pub seed: u64,
    /// How many live channels the system settles around: channels open at a steady rate (one step in
    /// five) and each live one closes with a chance that grows with their number, so their count holds
    /// still however long the system runs.
    pub live_channels: usize,
    /// Slots in the channel table, live and closed-but-referenced channels together ([`MAX_CHANNELS`]
    /// in rvOS); opening fails while it is full.
    pub channel_slots: usize,
    /// Kernel tasks hung from boot: they never pet the watchdog, so their heartbeat only grows older (none
    /// by default; [`crate::SimHandle::hang`] changes it while the sim runs).
    pub hung_tasks: Vec<KernelTask>,
}

/// A kernel task that pets the watchdog: a heartbeat slot of the Watchdog report, in
/// [`HEARTBEAT_SLOTS`](sysinfo_wire::report::HEARTBEAT_SLOTS) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum KernelTask {
    /// The init server.
    Init,
    /// The console driver.
    Console,
    /// The timer service.
    Timer,
    /// The sysinfo service.
    Sysinfo,
}

impl KernelTask {
    /// Its name in the Watchdog report (and in telemon's `task` label).
    pub fn name(self) -> &'static str {
        SLOTS[self as usize]
    }
}

impl Default for SystemConfig {
    fn default() -> Self {
        SystemConfig {
            processes: 12,
            trace_capacity: TRACE_CAPACITY,
            trace_prefill: TRACE_CAPACITY,
            watchdog: true,
            watchdog_timeout: Duration::from_secs(10),
            tick: Duration::from_millis(100),
            seed: 0x5157_1bf0,
            live_channels: DEFAULT_LIVE_CHANNELS,
            channel_slots: MAX_CHANNELS,
            hung_tasks: Vec::new(),
        }
    }
}

/// The simulation's random choices (reproducible from `SystemConfig::seed`).
use sim_common::SplitMix64 as Rng;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    None,
    Recv(u64),
    Send(u64),
    Timer(u64),
    Poll,
    Debug,
    SpawnSuspended,
}

#[derive(Debug, Clone)]
struct Proc {
    name: String,
    state: ProcState,
    block: Block,
    ewma_1s: u32,
    ewma_1m: u32,
    pages: u64,
    critical: bool,
    last_heartbeat: u64,
    died_at: u64,
}

#[derive(Debug, Clone, Default)]
struct Chan {
    active: bool,
    queue_a: u64,
    queue_b: u64,
    refs_a: u64,
    refs_b: u64,
    msgs_a: u64,
    bytes_a: u64,
    msgs_b: u64,
    bytes_b: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct TagStat {
    current: u64,
    peak: u64,
    /// Live allocations: up on each allocation, down on each free, as the kernel counts them.
    live: u64,
}

/// One trace ring entry, label inline (no allocation), so the ring is copied cheaply under the system lock.
#[derive(Debug, Clone, Copy)]
struct RawTrace {
    timestamp: u64,
    pid: u64,
    len: u8,
    label: [u8; TRACE_LABEL_MAX],
}

impl RawTrace {
    fn label(&self) -> &[u8] {
        &self.label[..usize::from(self.len)]
    }
}

/// A reply taken from the [`System`] under its lock and rendered to text after the lock is released: the
/// 16384-entry trace is copied in one go and formatted outside, so other clients are not held up.
#[derive(Debug)]
pub struct Reply(ReplyKind);

#[derive(Debug)]
enum ReplyKind {
    Text(String),
    Trace(Vec<RawTrace>),
}

impl Reply {
    /// The reply's text, exactly as the kernel formats it.
    pub fn into_text(self) -> String {
        match self.0 {
            ReplyKind::Text(text) => text,
            ReplyKind::Trace(entries) => trace_report(&entries).render(),
        }
    }
}

fn trace_report(raw: &[RawTrace]) -> Trace {
    let entries = raw
        .iter()
        .map(|e| TraceEntry {
            timestamp: e.timestamp,
            pid: e.pid,
            label: std::str::from_utf8(e.label()).unwrap_or("???").into(),
        })
        .collect();
    Trace { entries, unknown: Vec::new() }
}

const BOOT_NAMES: [&str; 12] = [
    "idle",
    "init",
    "serial-con",
    "sysinfo",
    "timer",
    "fs",
    "net-stack",
    "shell-serial",
    "gpu-server",
    "kbd-server",
    "window-server",
    "httpd",
];
const USER_NAMES: [&str; 10] =
    ["ls", "cat", "hello", "bench-ipc", "grep", "top", "compile-all-the-things", "ping", "echo", "fbdemo"];
const TRACE_LABELS: [&str; 10] = [
    "ipc_send",
    "ipc_recv",
    "sched-switch",
    "timer-irq",
    "page-alloc",
    "page-free",
    "chan-create",
    "chan-close",
    "virtio-blk-done",
    "fs:open:/usr/share/doc/ñandú-çédille.txt",
];
/// The sysinfo service's slot in the process table (its pid; `BOOT_NAMES[3]`).
const SYSINFO_SLOT: usize = crate::SYSINFO_PID as usize;
const SLOTS: [&str; 4] = sysinfo_wire::report::HEARTBEAT_SLOTS;

// Kstat indexes, in KSTAT_COUNTERS order.
const SCHED_SWITCHES: usize = 0;
const SCHED_PREEMPTS: usize = 1;
const SCHED_YIELDS: usize = 2;
const IPC_SENDS: usize = 3;
const IPC_RECVS: usize = 4;
const IPC_SEND_BLOCKS: usize = 5;
const IPC_RECV_BLOCKS: usize = 6;
const CHANNELS_CREATED: usize = 7;
const CHANNELS_CLOSED: usize = 8;
const PAGES_ALLOCATED: usize = 9;
const PAGES_FREED: usize = 10;
const IRQ_TIMER: usize = 11;
const IRQ_UART: usize = 12;
const IRQ_VIRTIO_KBD: usize = 13;
const IRQ_VIRTIO_NET: usize = 14;
const IRQ_VIRTIO_GPU: usize = 15;
const IRQ_VIRTIO_BLK: usize = 16;
const IRQ_PLIC_OTHER: usize = 17;

/// The whole simulated kernel state.
pub struct System {
    config: SystemConfig,
    rng: Rng,
    now: u64,
    steps: u64,
    procs: Vec<Option<Proc>>,
    chans: Vec<Option<Chan>>,
    tags: [TagStat; HEAP_TAGS.len()],
    counters: [u64; 18],
    sched_latency: [u64; HIST_BUCKETS],
    ipc_latency: [u64; HIST_BUCKETS],
    trace: VecDeque<RawTrace>,
    slot_beats: [u64; 4],
    /// The kernel tasks that do not pet the watchdog, by slot.
    hung: [bool; 4],
}

impl System {
    /// Boots the system at `now` ticks.
    pub fn new(config: SystemConfig, now: u64) -> Self {
        let mut rng = Rng(config.seed);
        let mut procs = Vec::new();
        for i in 0..config.processes.max(2) {
            let name = match BOOT_NAMES.get(i) {
                Some(n) => (*n).to_owned(),
                None => format!("worker-{i}"),
            };
            procs.push(Some(Proc {
                name,
                state: ProcState::Ready,
                block: Block::None,
                ewma_1s: 0,
                ewma_1m: 0,
                pages: if i == 0 { 0 } else { 4 + rng.below(60) },
                critical: matches!(i, 5 | 6),
                last_heartbeat: now,
                died_at: 0,
            }));
        }
        let mut sys = System {
            rng,
            now,
            steps: 0,
            procs,
            chans: Vec::new(),
            tags: [TagStat::default(); HEAP_TAGS.len()],
            counters: [0; 18],
            sched_latency: [0; HIST_BUCKETS],
            ipc_latency: [0; HIST_BUCKETS],
            trace: VecDeque::new(),
            slot_beats: [now; 4],
            hung: std::array::from_fn(|slot| config.hung_tasks.iter().any(|t| *t as usize == slot)),
            config,
        };
        for _ in 0..8 {
            sys.open_channel();
        }
        for (i, tag) in sys.tags.iter_mut().enumerate().take(4) {
            tag.current = (32 + 16 * i as u64) * 1024;
            tag.peak = tag.current;
            tag.live = 2 + i as u64 * 5;
        }
        let prefill = sys.config.trace_prefill.min(sys.config.trace_capacity) as u64;
        for k in 0..prefill {
            let label = sys.rng.below(TRACE_LABELS.len() as u64) as usize;
            let pid = sys.rng.below(sys.procs.len() as u64);
            let at = now.saturating_sub((prefill - k) * 1_000);
            sys.record_at(at, pid, TRACE_LABELS[label].as_bytes());
        }
        sys
    }

    fn tick_ticks(&self) -> u64 {
        (self.config.tick.as_nanos() as u64 / 100).max(1)
    }

    /// Advances the simulation to `now` ticks, one step per tick of the configured length.
    pub fn advance_to(&mut self, now: u64) {
        let tick = self.tick_ticks();
        let due = now.saturating_sub(self.now) / tick;
        if due > MAX_CATCH_UP {
            self.now = now - MAX_CATCH_UP * tick;
        }
        while self.now + tick <= now {
            self.now += tick;
            self.step();
        }
    }

    /// Renders `command`'s text at `now` ticks, exactly as the kernel would (recording what the kernel records).
    pub fn render(&mut self, command: SysinfoCommand, now: u64) -> String {
        self.take_reply(command, now).into_text()
    }

    /// Takes what `command`'s reply needs at `now` ticks (recording what the kernel records); the large
    /// replies are rendered by [`Reply::into_text`], after the caller has released the system's lock.
    pub fn take_reply(&mut self, command: SysinfoCommand, now: u64) -> Reply {
        if command == SysinfoCommand::Trace {
            self.advance_to(now);
            self.now = self.now.max(now);
            self.counters[IPC_RECVS] += 1;
            return Reply(ReplyKind::Trace(self.trace.iter().copied().collect()));
        }
        Reply(ReplyKind::Text(self.render_small(command, now)))
    }

    fn render_small(&mut self, command: SysinfoCommand, now: u64) -> String {
        self.advance_to(now);
        self.now = self.now.max(now);
        self.counters[IPC_RECVS] += 1;
        match command {
            SysinfoCommand::Ps => {
                self.record(0, b"process_list-enter");
                let text = self.ps().render();
                self.record(0, b"process_list-exit");
                text
            }
            SysinfoCommand::Memstat => self.memstat().render(),
            SysinfoCommand::Trace => trace_report(self.trace.make_contiguous()).render(),
            SysinfoCommand::TraceClear => {
                self.trace.clear();
                Ack { ok: true, unknown: Vec::new() }.render()
            }
            SysinfoCommand::Kstat => Kstat::from_values(&self.counters).render(),
            SysinfoCommand::Channels => self.channels().render(),
            SysinfoCommand::SchedLatency => {
                Histogram::from_buckets(SCHED_LATENCY_TITLE, &self.sched_latency).render()
            }
            SysinfoCommand::IpcLatency => {
                Histogram::from_buckets(IPC_LATENCY_TITLE, &self.ipc_latency).render()
            }
            SysinfoCommand::Watchdog => self.watchdog().render(),
        }
    }

    /// Records a trace entry now (labels are cut to 32 bytes, which may split a UTF-8 sequence).
    pub fn record(&mut self, pid: u64, label: &[u8]) {
        self.record_at(self.now, pid, label);
    }

    fn record_at(&mut self, timestamp: u64, pid: u64, label: &[u8]) {
        if self.config.trace_capacity == 0 {
            return;
        }
        if self.trace.len() == self.config.trace_capacity {
            self.trace.pop_front();
        }
        let len = label.len().min(TRACE_LABEL_MAX);
        let mut inline = [0; TRACE_LABEL_MAX];
        inline[..len].copy_from_slice(&label[..len]);
        self.trace.push_back(RawTrace { timestamp, pid, len: len as u8, label: inline });
    }

    /// Records a client's channel opening (init hands out a channel per request).
    pub fn note_channel_opened(&mut self) {
        self.counters[CHANNELS_CREATED] += 1;
        self.counters[IPC_SENDS] += 2;
        self.bump_tag(1, 1024);
    }

    /// Records a client's channel closing.
    pub fn note_channel_closed(&mut self) {
        self.counters[CHANNELS_CLOSED] += 1;
        self.bump_tag(1, 0);
    }

    fn bump_tag(&mut self, tag: usize, bytes: u64) {
        let t = &mut self.tags[tag];
        if bytes > 0 {
            t.current += bytes;
            t.live += 1;
        } else {
            t.current = t.current.saturating_sub(1024);
            t.live = t.live.saturating_sub(1);
        }
        t.peak = t.peak.max(t.current);
    }

    /// Opens a channel in the first free slot, unless the table is full (as `channel_create_pair`).
    fn open_channel(&mut self) {
        let chan = Chan { active: true, refs_a: 1, refs_b: 1, ..Chan::default() };
        match self.chans.iter().position(Option::is_none) {
            Some(i) => self.chans[i] = Some(chan),
            None if self.chans.len() < self.config.channel_slots => self.chans.push(Some(chan)),
            None => return,
        }
        self.counters[CHANNELS_CREATED] += 1;
        let bytes = 512 + self.rng.below(2048);
        self.bump_tag(1, bytes);
    }

    fn step(&mut self) {
        self.steps += 1;
        let now = self.now;
        let n = self.procs.len() as u64;
        // Scheduling: one process runs; others block and wake.
        let running = 1 + self.rng.below(n - 1) as usize;
        for (pid, slot) in self.procs.iter_mut().enumerate() {
            let Some(p) = slot else { continue };
            if p.state == ProcState::Dead {
                if now.saturating_sub(p.died_at) > 50 * TICKS_PER_SEC / 10 && self.rng.chance(8) {
                    *slot = None;
                }
                continue;
            }
            let target: u32 = if pid == running { 10_000 } else { 0 };
            p.ewma_1s = (p.ewma_1s as i64 + (target as i64 - p.ewma_1s as i64) / 4) as u32;
            p.ewma_1m = (p.ewma_1m as i64 + (target as i64 - p.ewma_1m as i64) / 64) as u32;
            if pid == running {
                p.state = ProcState::Running;
                p.block = Block::None;
            } else if pid == 0 {
                p.state = ProcState::Ready;
            } else if p.state == ProcState::Blocked && !self.rng.chance(3) {
                if let Block::Timer(deadline) = p.block {
                    if deadline <= now {
                        p.state = ProcState::Ready;
                        p.block = Block::None;
                    }
                }
            } else if self.rng.chance(2) {
                p.state = ProcState::Blocked;
                let ep = self.rng.below(2 * self.chans.len() as u64 + 2);
                p.block = match self.rng.below(12) {
                    0..=4 => Block::Recv(ep),
                    5 => Block::Send(ep),
                    6..=8 => Block::Timer(now + self.rng.below(30 * TICKS_PER_SEC)),
                    9 => Block::Poll,
                    10 => Block::Debug,
                    _ => Block::SpawnSuspended,
                };
            } else {
                p.state = ProcState::Ready;
                p.block = Block::None;
            }
            if pid > 0 {
                let delta = self.rng.below(5);
                if self.rng.chance(2) {
                    p.pages += delta;
                    self.counters[PAGES_ALLOCATED] += delta;
                } else {
                    let freed = delta.min(p.pages.saturating_sub(2));
                    p.pages -= freed;
                    self.counters[PAGES_FREED] += freed;
                }
            }
            if p.critical && self.rng.chance(2) {
                p.last_heartbeat = now;
            }
            // User processes (past the boot services) sometimes exit.
            if pid >= BOOT_NAMES.len().min(n as usize) && pid != running && self.rng.chance(40) {
                p.state = ProcState::Dead;
                p.block = Block::None;
                p.died_at = now;
            }
        }
        // New user processes take free slots (or extend a small table).
        if self.rng.chance(12) {
            let name = USER_NAMES[self.rng.below(USER_NAMES.len() as u64) as usize];
            let proc = Proc {
                name: name.chars().take(16).collect(),
                state: ProcState::Ready,
                block: Block::None,
                ewma_1s: 0,
                ewma_1m: 0,
                pages: 8 + self.rng.below(32),
                critical: false,
                last_heartbeat: 0,
                died_at: 0,
            };
            match self.procs.iter().position(Option::is_none) {
                Some(i) => self.procs[i] = Some(proc),
                None if self.procs.len() < 64 => self.procs.push(Some(proc)),
                None => {}
            }
        }
        // Channels: traffic, opening, closing, handles dropping after close.
        for c in self.chans.iter_mut().flatten() {
            if c.active {
                if self.rng.chance(2) {
                    let msgs = 1 + self.rng.below(4);
                    c.msgs_a += msgs;
                    c.bytes_a += msgs * (1 + self.rng.below(1024));
                    self.counters[IPC_SENDS] += msgs;
                }
                if self.rng.chance(3) {
                    let msgs = 1 + self.rng.below(3);
                    c.msgs_b += msgs;
                    c.bytes_b += msgs * (1 + self.rng.below(256));
                    self.counters[IPC_SENDS] += msgs;
                }
                c.queue_a = self.rng.below(3);
                c.queue_b = self.rng.below(2);
            } else {
                c.queue_a = 0;
                c.queue_b = 0;
                if self.rng.chance(3) {
                    c.refs_a = c.refs_a.saturating_sub(1);
                    c.refs_b = c.refs_b.saturating_sub(1);
                }
            }
        }
        for slot in self.chans.iter_mut() {
            if matches!(slot, Some(c) if !c.active && c.refs_a == 0 && c.refs_b == 0) && self.rng.chance(4) {
                *slot = None;
            }
        }
        if self.rng.chance(5) {
            self.open_channel();
        }
        // Each live channel closes with chance 1 / (5 * live_channels) per step: with one opening every
        // five steps, the number of live channels settles around `live_channels`.
        let live = self.chans.iter().filter(|c| matches!(c, Some(c) if c.active)).count() as u64;
        let settle = 5 * self.config.live_channels.max(1) as u64;
        if self.rng.below(settle) < live {
            let live: Vec<usize> = self
                .chans
                .iter()
                .enumerate()
                .filter(|(_, c)| matches!(c, Some(c) if c.active))
                .map(|(i, _)| i)
                .collect();
            if live.len() > 4 {
                let i = live[self.rng.below(live.len() as u64) as usize];
                if let Some(c) = &mut self.chans[i] {
                    c.active = false;
                }
                self.counters[CHANNELS_CLOSED] += 1;
                self.bump_tag(1, 0);
            }
        }
        // Heap tags.
        let tag = self.rng.below(HEAP_TAGS.len() as u64) as usize;
        if self.rng.chance(2) {
            let bytes = 256 + self.rng.below(8192);
            let t = &mut self.tags[tag];
            t.current = (t.current + bytes).min(HEAP_SIZE / 16);
            t.live += 1;
            t.peak = t.peak.max(t.current);
        } else {
            let t = &mut self.tags[tag];
            t.current = t.current.saturating_sub(self.rng.below(4096));
            t.live = t.live.saturating_sub(1);
        }
        // Counters and histograms.
        let switches = 3 + self.rng.below(20);
        self.counters[SCHED_SWITCHES] += switches;
        self.counters[SCHED_PREEMPTS] += self.rng.below(switches);
        self.counters[SCHED_YIELDS] += self.rng.below(switches);
        self.counters[IPC_RECVS] += self.rng.below(10);
        self.counters[IPC_SEND_BLOCKS] += self.rng.below(2);
        self.counters[IPC_RECV_BLOCKS] += self.rng.below(6);
        self.counters[IRQ_TIMER] += 10;
        self.counters[IRQ_UART] += self.rng.below(3);
        self.counters[IRQ_VIRTIO_KBD] += u64::from(self.rng.chance(5));
        self.counters[IRQ_VIRTIO_NET] += self.rng.below(4);
        self.counters[IRQ_VIRTIO_GPU] += u64::from(self.rng.chance(3));
        self.counters[IRQ_VIRTIO_BLK] += self.rng.below(3);
        self.counters[IRQ_PLIC_OTHER] += u64::from(self.rng.chance(20));
        for _ in 0..switches {
            let shift = 2 + self.rng.below(14);
            let ticks = self.rng.below(1 << shift);
            self.sched_latency[Histogram::bucket_of(ticks)] += 1;
        }
        for _ in 0..self.rng.below(8) {
            let shift = 4 + self.rng.below(12);
            let ticks = 20 + self.rng.below(1 << shift);
            self.ipc_latency[Histogram::bucket_of(ticks)] += 1;
        }
        // Watchdog heartbeats (a hung task draws its chance too, so the others' stay the same).
        for (beat, hung) in self.slot_beats.iter_mut().zip(self.hung) {
            if self.rng.chance(2) && !hung {
                *beat = now;
            }
        }
        // Trace entries.
        for _ in 0..1 + self.rng.below(4) {
            let label = TRACE_LABELS[self.rng.below(TRACE_LABELS.len() as u64) as usize];
            let pid = self.rng.below(n);
            self.record(pid, label.as_bytes());
        }
    }

    fn ps(&self) -> Ps {
        let processes = self
            .procs
            .iter()
            .enumerate()
            .filter_map(|(pid, p)| p.as_ref().map(|p| (pid, p)))
            .map(|(pid, p)| PsRow {
                pid: pid as u64,
                // Whoever formats Ps is the process on the CPU: the sysinfo service itself.
                state: match p.state {
                    _ if pid == SYSINFO_SLOT => ProcState::Running,
                    ProcState::Running => ProcState::Ready,
                    state => state,
                },
                cpu_1s: CpuShare::from_ewma(p.ewma_1s),
                cpu_1m: CpuShare::from_ewma(p.ewma_1m),
                mem_kib: p.pages * 4,
                blocked_on: match p.block {
                    _ if pid == SYSINFO_SLOT => BlockedOn::Nothing,
                    Block::None => BlockedOn::Nothing,
                    Block::Recv(ep) => BlockedOn::Recv { ep },
                    Block::Send(ep) => BlockedOn::Send { ep },
                    Block::Timer(deadline) => {
                        BlockedOn::Timer { ms: deadline.saturating_sub(self.now) / 10_000 }
                    }
                    Block::Poll => BlockedOn::Poll,
                    Block::Debug => BlockedOn::Debug,
                    Block::SpawnSuspended => BlockedOn::SpawnSuspended,
                },
                name: p.name.as_str().into(),
            })
            .collect();
        Ps { processes, unknown: Vec::new() }
    }

    fn memstat(&self) -> Memstat {
        let used: u64 = self.tags.iter().map(|t| t.current).sum();
        let heap = HeapSummary {
            total_kib: HEAP_SIZE / 1024,
            used_kib: used / 1024,
            used_percent: used * 100 / HEAP_SIZE,
            free_kib: HEAP_SIZE.saturating_sub(used) / 1024,
        };
        let tags = HEAP_TAGS
            .iter()
            .zip(&self.tags)
            .filter(|(_, t)| t.current != 0 || t.peak != 0 || t.live != 0)
            .map(|(name, t)| HeapTag {
                tag: std::borrow::Cow::Borrowed(*name),
                current_kib: t.current / 1024,
                peak_kib: t.peak / 1024,
                live_allocations: t.live,
            })
            .collect();
        let processes = self
            .procs
            .iter()
            .enumerate()
            .filter_map(|(pid, p)| p.as_ref().map(|p| (pid, p)))
            .filter(|(_, p)| p.state != ProcState::Dead)
            .map(|(pid, p)| ProcessMemory {
                pid: pid as u64,
                name: p.name.as_str().into(),
                mem_kib: p.pages * 4,
            })
            .collect();
        Memstat { heap: Some(heap), tags, processes, unknown: Vec::new() }
    }

    fn channels(&self) -> Channels {
        let channels = self
            .chans
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i as u64, c)))
            .filter(|(_, c)| c.active || c.refs_a != 0 || c.refs_b != 0)
            .map(|(i, c)| ChannelRow {
                channel: i,
                ep_a: i * 2,
                ep_b: i * 2 + 1,
                queue_a: c.queue_a,
                queue_b: c.queue_b,
                refs_a: c.refs_a,
                refs_b: c.refs_b,
                msgs_a: c.msgs_a,
                bytes_a: c.bytes_a,
                msgs_b: c.msgs_b,
                bytes_b: c.bytes_b,
                closed: !c.active,
            })
            .collect();
        Channels { channels, unknown: Vec::new() }
    }

    fn watchdog(&self) -> Watchdog {
        if !self.config.watchdog {
            return Watchdog::default();
        }
        let ms = |last: u64| self.now.saturating_sub(last) / (TICKS_PER_SEC / 1000);
        let ticks = (self.config.watchdog_timeout.as_nanos() / 100) as u64;
        Watchdog {
            enabled: true,
            timeout_secs: Some(ticks / TICKS_PER_SEC),
            timeout_ticks: Some(ticks),
            kernel_tasks: SLOTS
                .iter()
                .zip(self.slot_beats)
                .map(|(name, last)| Heartbeat { name: Cow::Borrowed(*name), ago_ms: ms(last) })
                .collect(),
            critical_processes: self
                .procs
                .iter()
                .enumerate()
                .filter_map(|(pid, p)| p.as_ref().map(|p| (pid, p)))
                .filter(|(_, p)| p.critical && p.state != ProcState::Dead)
                .map(|(pid, p)| CriticalProcess {
                    pid: pid as u64,
                    name: p.name.as_str().into(),
                    ago_ms: if p.last_heartbeat > 0 { ms(p.last_heartbeat) } else { 0 },
                })
                .collect(),
            unknown: Vec::new(),
        }
    }

    /// Makes `task` stop petting the watchdog (`hung`), so that its heartbeat grows older from now on, or
    /// pet it again (its next heartbeat comes within a few steps).
    pub fn set_hung(&mut self, task: KernelTask, hung: bool) {
        self.hung[task as usize] = hung;
    }

    /// Whether `task` is hung.
    pub fn is_hung(&self, task: KernelTask) -> bool {
        self.hung[task as usize]
    }

    /// How many trace entries the ring holds.
    pub fn trace_len(&self) -> usize {
        self.trace.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sysinfo_wire::Report;

    #[test]
    fn every_report_parses_without_unknown_lines_as_the_system_changes() {
        let mut sys = System::new(SystemConfig { trace_prefill: 100, ..SystemConfig::default() }, 1_000_000);
        let mut now = 1_000_000;
        for round in 0..50 {
            now += 3 * TICKS_PER_SEC;
            for command in SysinfoCommand::ALL {
                let text = sys.render(command, now);
                let report = Report::parse(command, &text);
                assert!(
                    report.unknown_lines().is_empty(),
                    "round {round} {command:?}: {:?}",
                    report.unknown_lines()
                );
                assert_eq!(report.render(), text, "round {round} {command:?}");
            }
        }
        let Report::Ps(ps) = Report::parse(SysinfoCommand::Ps, &sys.render(SysinfoCommand::Ps, now)) else {
            unreachable!()
        };
        assert!(ps.processes.iter().any(|p| p.state == ProcState::Blocked));
    }

    #[test]
    fn the_ring_holds_at_most_its_capacity_and_cut_labels_print_as_question_marks() {
        let mut sys = System::new(SystemConfig::default(), 0);
        assert_eq!(sys.trace_len(), TRACE_CAPACITY);
        let text = sys.render(SysinfoCommand::Trace, 10 * TICKS_PER_SEC);
        let Report::Trace(t) = Report::parse(SysinfoCommand::Trace, &text) else { unreachable!() };
        assert_eq!(t.entries.len(), TRACE_CAPACITY);
        assert!(t.entries.iter().any(|e| e.label == "???"));
        assert!(t.entries.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
        assert_eq!(sys.render(SysinfoCommand::TraceClear, 10 * TICKS_PER_SEC), "ok\n");
        assert_eq!(sys.render(SysinfoCommand::Trace, 10 * TICKS_PER_SEC), "(no trace entries)\n");
    }

    /// Live channels and table slots after each of `hours` simulated hours (steps of 100 ms).
    fn channel_counts(config: SystemConfig, hours: u64) -> Vec<(usize, usize)> {
        let mut sys = System::new(SystemConfig { trace_capacity: 0, ..config }, 0);
        let mut counts = Vec::new();
        for _ in 0..hours {
            for _ in 0..3600 * 10 / MAX_CATCH_UP {
                let now = sys.now + MAX_CATCH_UP * sys.tick_ticks();
                sys.advance_to(now);
            }
            let live = sys.chans.iter().flatten().filter(|c| c.active).count();
            counts.push((live, sys.chans.len()));
        }
        counts
    }

    #[test]
    fn live_channels_hold_still_however_long_the_system_runs() {
        let counts = channel_counts(SystemConfig::default(), 6);
        for &(live, slots) in &counts {
            assert!((4..=3 * DEFAULT_LIVE_CHANNELS).contains(&live), "{counts:?}");
            assert!(slots <= 4 * DEFAULT_LIVE_CHANNELS, "{counts:?}");
        }
        let rows = |n: usize| {
            let mut sys = System::new(SystemConfig { live_channels: n, ..SystemConfig::default() }, 0);
            sys.advance_to(600 * TICKS_PER_SEC);
            let Report::Channels(c) = Report::parse(
                SysinfoCommand::Channels,
                &sys.render(SysinfoCommand::Channels, 600 * TICKS_PER_SEC),
            ) else {
                unreachable!()
            };
            c.channels.iter().filter(|r| !r.closed).count()
        };
        assert!(rows(64) > 2 * rows(8), "the knob sets the level: {} against {}", rows(64), rows(8));
    }

    #[test]
    fn the_channel_table_never_grows_past_its_slots() {
        let config = SystemConfig { live_channels: 1000, channel_slots: 12, ..SystemConfig::default() };
        for (live, slots) in channel_counts(config, 1) {
            assert!(slots <= 12 && live <= 12, "{live} live in {slots} slots");
        }
    }
}
