//! `cargo xtask fleet-bench`: what `telemon serve` costs while it watches N targets of one protocol.
//!
//! For each protocol and each N, the sims serve N instances (`--instances`, at most [`MAX_PER_SIM`] per
//! process) at their defaults (values changing as they would), telemon (release build) watches every
//! one of them with a one-second period, and once all are up and a warm-up has passed, the measured
//! window records telemon's CPU time, the sims' CPU time, and a scrape of `/metrics` every second
//! (and the down transitions of targets meanwhile, from `telemon_target_connects_total` and
//! `telemon_target_up`). A few
//! scrapes with `Accept-Encoding: gzip` follow the window, outside its CPU figure.
//!
//! Then telemon stops and **the floor** runs against the same sims: `fleet-floor` (sims/fleet-floor), a
//! collector built from the protocol crates alone that polls like telemon (with the same
//! `[serve] wakeup_slack`, telemon's default) and throws what it decodes away. Its CPU over a window
//! of the same length is what the protocol work costs; telemon's CPU divided by it is what the fleet
//! layer adds.
//!
//! Where `taskset` works and there are two cores or more, the sims run on core 1 and telemon (then
//! the floor) on core 0, so that neither's CPU time includes waiting for the other.
//!
//! Everything runs under `target/fleet-bench/PROTOCOL-N/` (config, logs, sys161 socket folders),
//! which is kept for a look after the run.
//!
//! With `--views K`, a second window of the same length follows the first with K web views open: each
//! asks `POST /api/v1/sparklines` for every target, then reads `/api/v1/stream` as a page does. The
//! table's notes give telemon's CPU over it beside the window with none (same run), its peak RSS
//! after it, and the bytes a stream carried per second.
//!
//! With `--push`, telemon also runs a `[[remote_write]]` sender pushing every series each second to a
//! sink in this process (a minimal HTTP server answering 204); run it beside a run without it to read
//! the sender's cost. `--push-disk` adds a run whose sender keeps its queue on disk (`queue_dir`), with
//! the bytes it writes to the disk per sample.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Every protocol, in table order: that of their sims in [`crate::sims::SIMS`].
fn known_protocols() -> Vec<&'static str> {
    crate::sims::SIMS.iter().map(|s| s.protocol).collect()
}

/// The most instances one sim process serves (the open-file hard limit here is 20,000, and a server sim
/// holds a listener and a connection per instance).
const MAX_PER_SIM: u32 = 9_900;

/// How long telemon gets to see every target up.
const UP_DEADLINE: Duration = Duration::from_secs(60);

/// How long telemon runs with every target up before the measured window.
const WARM_UP: Duration = Duration::from_secs(5);

/// telemon's open-file limit: a socket per target, and some.
const NOFILE: u32 = 20_000;

/// How many scrapes with `Accept-Encoding: gzip` follow the window (at most one per second of it).
const GZIP_SCRAPES: u64 = 10;

/// The core telemon and the floor run on, and the sims' core, when pinning works.
const COLLECTOR_CORE: &str = "0";
const SIM_CORE: &str = "1";

/// Whether and how telemon pushes during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// No sender.
    None,
    /// A remote write sender with its queue in memory.
    Memory,
    /// A remote write sender with its queue on disk (`queue_dir`).
    Disk,
}

impl Push {
    fn label(self) -> &'static str {
        match self {
            Push::None => "",
            Push::Memory => " + remote_write",
            Push::Disk => " + remote_write (disk queue)",
        }
    }
}

/// One row of the table.
struct Row {
    protocol: &'static str,
    n: u32,
    push: Push,
    /// `[serve] threads`, when the run set it.
    threads: Option<usize>,
    /// Run with the `--baseline` binary.
    baseline: bool,
    /// Bytes telemon read from its targets per second over the window (`telemon_target_received_bytes_total`).
    received_bytes_per_s: f64,
    /// Seconds from telemon's start to every target up (`None`: not within the deadline).
    all_up_s: Option<f64>,
    /// With `--storm`: every sim restarted at once.
    storm: Option<Storm>,
    /// With a disk queue: bytes written to it per sample sent.
    disk_bytes_per_sample: Option<f64>,
    cpu_percent: f64,
    /// `None` when the floor could not run.
    floor_cpu_percent: Option<f64>,
    sims_cpu_percent: f64,
    peak_rss_mib: f64,
    /// telemon's RSS with every target up, before the first scrape: the state it holds.
    state_rss_kib: u64,
    /// Sample lines in a scrape.
    series: usize,
    p50_ms: f64,
    p99_ms: f64,
    scrape_bytes: usize,
    /// p99 and compressed size of the gzip scrapes; `None` when the answer was not gzip.
    gzip: Option<(f64, usize)>,
    up: usize,
    /// Down transitions of targets during the window.
    flaps: u64,
    /// With `--views`: the second window's figures.
    views: Option<Views>,
}

/// Every sim killed and started again at once, after the window.
struct Storm {
    /// Seconds from the kill to every target up again (`None`: not within the deadline).
    all_up_s: Option<f64>,
    /// telemon's RSS (MiB) just before the kill.
    steady_rss_mib: f64,
    /// The most telemon's RSS reached from the kill until every target was up (sampled every 100 ms), MiB.
    peak_rss_mib: f64,
}

/// Kills every sim at once, starts each again, and measures how long telemon takes to have all `n` targets up
/// again, and its RSS meanwhile.
fn storm(
    children: &mut Children,
    sims: &mut [(String, Command)],
    work: &Path,
    listen: &str,
    pid: u32,
    n: usize,
) -> Result<Storm> {
    let steady_rss_mib = proc_status_kib(pid, "VmRSS")? as f64 / 1024.0;
    for (name, _) in sims.iter() {
        children.stop(name);
    }
    let killed = Instant::now();
    for (name, cmd) in sims.iter_mut() {
        children.spawn(name, cmd, &work.join(format!("{name}-storm.log")))?;
    }
    let mut peak_rss_mib = steady_rss_mib;
    let mut all_up_s = None;
    let mut last_poll = Instant::now() - Duration::from_secs(1);
    while killed.elapsed() < UP_DEADLINE {
        peak_rss_mib = peak_rss_mib.max(proc_status_kib(pid, "VmRSS")? as f64 / 1024.0);
        if last_poll.elapsed() >= Duration::from_millis(250) {
            last_poll = Instant::now();
            // Right after the kill every target is still up until telemon sees it go: wait a second first.
            if killed.elapsed() > Duration::from_secs(1) && targets_up(listen).unwrap_or(0) >= n {
                all_up_s = Some(killed.elapsed().as_secs_f64());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    children.check_alive(work)?;
    Ok(Storm { all_up_s, steady_rss_mib, peak_rss_mib })
}

/// The window with web views open.
struct Views {
    count: usize,
    cpu_percent: f64,
    peak_rss_mib: f64,
    /// Bytes one stream carried per second over the window.
    stream_bytes_per_s: f64,
}

/// What `cargo xtask fleet-bench` is asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Targets per run (default: 10 100 1000).
    pub sizes: Vec<u32>,
    /// Only these protocols (default all).
    pub protocols: Vec<String>,
    /// Seconds measured per run.
    pub seconds: u64,
    /// `telemon serve --record`.
    pub record: bool,
    /// Extra rows per size with a sender.
    pub push: Vec<Push>,
    /// Web views open over a second window (0: none).
    pub views: usize,
    /// Each row once per value, with `[serve] threads` set to it and telemon on that many cores (empty:
    /// the default threads, telemon on one core).
    pub threads: Vec<usize>,
    /// Each target's period (meter161's interval, hmon's poll, sysinfo's every, the smon and Mono sims'
    /// interval; default 1 s).
    pub period: Option<Duration>,
    /// After the window, every sim killed and started again at once: the time to every target up again,
    /// and telemon's RSS meanwhile beside its steady RSS.
    pub storm: bool,
    /// Instead of N simulated instances, one sim serving this recording (`telemon record`, one target of the
    /// protocol) to every target, as fast as asked (`--replay-speed max`): the peers then cost a copy.
    pub replay: Option<PathBuf>,
    /// Each row first with this telemon binary, then with the one built now.
    pub baseline: Option<PathBuf>,
}

/// Runs every (protocol, N) pair, prints the table and writes it to `target/fleet-bench.md`.
pub fn fleet_bench(root: &Path, options: &Options) -> Result<()> {
    let Options { sizes, protocols, seconds, record, push, views, threads, period, storm, replay, baseline } =
        options.clone();
    if let Some(b) = &baseline {
        if !b.is_file() {
            bail!("--baseline {}: no such file", b.display());
        }
    }
    let mut chosen = Vec::new();
    for p in protocols {
        let Some(known) = known_protocols().into_iter().find(|k| *k == p.as_str()) else {
            bail!("no protocol {p:?}; known: {}", known_protocols().join(", "));
        };
        chosen.push(known);
    }
    if chosen.is_empty() {
        chosen.extend(known_protocols());
    }
    let sizes = if sizes.is_empty() { &[10, 100, 1000][..] } else { &sizes[..] };
    if threads.contains(&0) {
        bail!("--threads must be at least 1");
    }
    if sizes.contains(&0) {
        bail!("N must be at least 1");
    }

    eprintln!("[xtask] building the release binaries");
    let mut build = Command::new(super::cargo());
    build.args(["build", "--release", "--quiet"]);
    for package in ["telemon", "fleet-floor"].into_iter().chain(crate::sims::SIMS.iter().map(|s| s.package)) {
        build.args(["-p", package]);
    }
    super::run(&mut build)?;

    let target = target_dir(root);
    let bench = Bench {
        release: target.join("release"),
        work: target.join("fleet-bench"),
        seconds: seconds.max(1),
        clk_tck: clock_ticks(),
        record,
        pinned: pinning_works(),
        views,
        period: period.unwrap_or(Duration::from_secs(1)),
        storm,
        replay,
        baseline: baseline.clone(),
    };
    if !bench.pinned {
        eprintln!("[xtask] no taskset or a single core: telemon and the sims share the cores");
    }
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for &protocol in &chosen {
        for &n in sizes {
            for &with_push in std::iter::once(&Push::None).chain(&push) {
                let each: Vec<Option<usize>> =
                    if threads.is_empty() { vec![None] } else { threads.iter().copied().map(Some).collect() };
                let binaries = if baseline.is_some() { &[true, false][..] } else { &[false][..] };
                for t in each {
                    for &base in binaries {
                        let what =
                            format!("{}{}{}", with_push.label(), threads_label(t), baseline_label(base));
                        eprintln!("[xtask] {protocol} x {n}{what}");
                        match bench.run(protocol, n, with_push, t, base) {
                            Ok(row) => rows.push(row),
                            Err(e) => {
                                eprintln!("[xtask] {protocol} x {n}{what} failed: {e:#}");
                                failed.push(format!("{protocol} x {n}{what}"));
                            }
                        }
                    }
                }
            }
        }
    }
    let table = table(&rows);
    println!("{table}");
    let out = target.join("fleet-bench.md");
    std::fs::write(&out, &table).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("[xtask] written to {}", out.display());
    if !failed.is_empty() {
        bail!("fleet-bench failed for {}", failed.join(", "));
    }
    Ok(())
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

/// Clock ticks per second, the unit of utime and stime in `/proc/PID/stat`.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| protocol | N | telemon CPU (% of a core) | floor CPU (%) | telemon ÷ floor | sims CPU (%) | peak RSS (MiB) \
         | series | bytes/series | bytes/target | scrape p50 (ms) | scrape p99 (ms) | scrape size (bytes) | gzip p99 (ms) \
         | gzip size (bytes) | up | all up after (s) | flaps |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (floor, ratio) = match r.floor_cpu_percent {
            Some(f) if f > 0.0 => (format!("{f:.2}"), format!("{:.2}", r.cpu_percent / f)),
            Some(f) => (format!("{f:.2}"), "n/a".to_owned()),
            None => ("n/a".to_owned(), "n/a".to_owned()),
        };
        let all_up = r.all_up_s.map_or("n/a".to_owned(), |s| format!("{s:.1}"));
        let (gzip_p99, gzip_size) = match r.gzip {
            Some((p99, size)) => (format!("{p99:.2}"), size.to_string()),
            None => ("n/a".to_owned(), "n/a".to_owned()),
        };
        let _ = writeln!(
            t,
            "| {}{}{} | {} | {:.2} | {floor} | {ratio} | {:.2} | {:.1} | {} | {} | {} | {:.2} | {:.2} | {} | {gzip_p99} | {gzip_size} | {} | {all_up} | {} |",
            r.protocol,
            r.push.label(),
            variant_label(r),
            r.n,
            r.cpu_percent,
            r.sims_cpu_percent,
            r.peak_rss_mib,
            r.series,
            bytes_per_series(r, rows),
            bytes_per_target(r, rows),
            r.p50_ms,
            r.p99_ms,
            r.scrape_bytes,
            r.up,
            r.flaps,
        );
    }
    t.push_str(
        "\nbytes/series: telemon's RSS growth from the next smaller N of the same protocol (before any scrape), \
         divided by the added series (marked Δ); without a smaller N, RSS ÷ series; bytes/target likewise per target. The floor is `fleet-floor` \
         against the same sims, alone, over a window of the same length. all up after: from telemon's start to every target up (polled each half second; \
         n/a: not within 60 s). flaps: down transitions of targets \
         during the window (from each target's `telemon_target_connects_total` and `telemon_target_up`). gzip: scrapes with `Accept-Encoding: gzip` after the window (n/a: not served gzip).\n",
    );
    for r in rows {
        if let Some(st) = &r.storm {
            let up = st.all_up_s.map_or("not within 60 s".to_owned(), |s| format!("after {s:.1} s"));
            let _ = writeln!(
                t,
                "\n{} x {}{}: every sim restarted at once: all up again {up}; RSS {:.1} MiB steady, at most {:.1} MiB \
                 meanwhile ({:.2}x).",
                r.protocol,
                r.n,
                variant_label(r),
                st.steady_rss_mib,
                st.peak_rss_mib,
                st.peak_rss_mib / st.steady_rss_mib.max(1e-3)
            );
        }
    }
    for r in rows.iter().filter(|r| r.threads.is_some()) {
        let _ = writeln!(
            t,
            "\n{} x {}{}: telemon read {:.0} bytes/s from its targets ({:.2}% of a core).",
            r.protocol,
            r.n,
            variant_label(r),
            r.received_bytes_per_s,
            r.cpu_percent
        );
    }
    for r in rows {
        if let Some(v) = &r.views {
            let _ = writeln!(
                t,
                "\n{} x {}{}: with {} web views open, telemon's CPU {:.2}% ({:.2}x the window with none), peak RSS \
                 {:.1} MiB; each stream carried {:.0} bytes/s.",
                r.protocol,
                r.n,
                r.push.label(),
                v.count,
                v.cpu_percent,
                v.cpu_percent / r.cpu_percent.max(1e-3),
                v.peak_rss_mib,
                v.stream_bytes_per_s
            );
        }
        if let Some(b) = r.disk_bytes_per_sample {
            let _ = writeln!(
                t,
                "\n{} x {}{}: {b:.1} bytes written to the disk queue per sample sent (records and their headers).",
                r.protocol,
                r.n,
                r.push.label()
            );
        }
    }
    t
}

/// The sum of every target's `telemon_target_received_bytes_total` in a scrape.
fn received_bytes(scrape: &[u8]) -> f64 {
    String::from_utf8_lossy(scrape)
        .lines()
        .filter(|l| l.starts_with("telemon_target_received_bytes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of the line of `text` that starts with `series ` (0 when there is none).
fn scrape_value(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
}

/// `r`'s state per series: RSS growth over the next smaller N of its protocol, else RSS ÷ series.
fn bytes_per_series(r: &Row, rows: &[Row]) -> String {
    bytes_per(r, rows, |r| r.series)
}

/// Bytes of telemon's state RSS per target: as [`bytes_per_series`], per target.
fn bytes_per_target(r: &Row, rows: &[Row]) -> String {
    bytes_per(r, rows, |r| r.n as usize)
}

/// telemon's state RSS growth from the next smaller row of the same kind, per unit of `count` added
/// (marked Δ); without a smaller row, RSS ÷ `count`.
fn bytes_per(r: &Row, rows: &[Row], count: impl Fn(&Row) -> usize) -> String {
    let smaller = rows
        .iter()
        .filter(|o| {
            o.protocol == r.protocol
                && o.push == r.push
                && o.threads == r.threads
                && o.baseline == r.baseline
                && o.n < r.n
                && count(o) < count(r)
        })
        .max_by_key(|o| o.n);
    match smaller {
        Some(o) => {
            let grown = r.state_rss_kib as f64 - o.state_rss_kib as f64;
            format!("{:.0} Δ", grown * 1024.0 / (count(r) - count(o)) as f64)
        }
        None if count(r) > 0 => format!("{:.0}", r.state_rss_kib as f64 * 1024.0 / count(r) as f64),
        None => "n/a".to_owned(),
    }
}

/// Children killed (and reaped) when dropped, so that no run leaves a process behind, even on an error.
#[derive(Default)]
struct Children(Vec<(String, Child)>);

impl Children {
    fn spawn(&mut self, name: &str, cmd: &mut Command, log: &Path) -> Result<u32> {
        let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let pid = child.id();
        self.0.push((name.to_owned(), child));
        Ok(pid)
    }

    /// Stops (and reaps) the child called `name`.
    fn stop(&mut self, name: &str) {
        if let Some(i) = self.0.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.0.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Fails if a child has ended (a sim that could not bind, telemon refusing its config...).
    fn check_alive(&mut self, work: &Path) -> Result<()> {
        for (name, child) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} ended ({status}); see {}/{name}.log", work.display());
            }
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // telemon first (it was started last), so that it does not count the sims going away.
        for (_, child) in self.0.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

struct Bench {
    release: PathBuf,
    work: PathBuf,
    seconds: u64,
    clk_tck: f64,
    /// `telemon serve --record WORK/recordings`.
    record: bool,
    /// Web views open over a second window (0: none).
    views: usize,
    /// Whether the sims and the collector run on cores of their own.
    pinned: bool,
    /// Each target's period.
    period: Duration,
    /// Restart every sim at once after the window.
    storm: bool,
    /// One sim serving this recording to every target (`--replay`).
    replay: Option<PathBuf>,
    /// The `--baseline` telemon binary.
    baseline: Option<PathBuf>,
}

/// A row's threads and baseline labels.
fn variant_label(r: &Row) -> String {
    format!("{}{}", threads_label(r.threads), baseline_label(r.baseline))
}

/// ` (baseline)` for a row of the `--baseline` binary, or nothing.
fn baseline_label(baseline: bool) -> &'static str {
    if baseline {
        " (baseline)"
    } else {
        ""
    }
}

/// ` (threads T)`, or nothing.
fn threads_label(threads: Option<usize>) -> String {
    threads.map(|t| format!(" (threads {t})")).unwrap_or_default()
}

/// A period as `--period` takes it: a whole number of `s`, `ms` or `us`, above zero.
pub fn parse_period(text: &str) -> std::result::Result<Duration, String> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a number with s, ms or us"))?;
    let d = match unit {
        "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "us" => Duration::from_micros(n),
        _ => return Err(format!("{text:?}: the unit is s, ms or us")),
    };
    if d.is_zero() {
        return Err("the period must be above zero".into());
    }
    Ok(d)
}

/// A period as the config writes it (`1s`, `250ms`, `500us`).
fn period_text(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_micros() % 1000 == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

impl Bench {
    /// `bin`, on `core` when pinning works.
    fn pinned(&self, bin: &Path, core: &str) -> Command {
        if self.pinned {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", core]).arg(bin);
            cmd
        } else {
            Command::new(bin)
        }
    }

    fn run(
        &self,
        protocol: &'static str,
        n: u32,
        push: Push,
        threads: Option<usize>,
        baseline: bool,
    ) -> Result<Row> {
        let suffix = match push {
            Push::None => "",
            Push::Memory => "-push",
            Push::Disk => "-push-disk",
        };
        let t = threads.map(|t| format!("-threads{t}")).unwrap_or_default();
        let b = if baseline { "-baseline" } else { "" };
        let work = self.work.join(format!("{protocol}-{n}{suffix}{t}{b}"));
        if work.exists() {
            std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
        }
        std::fs::create_dir_all(&work)?;
        // Sims log warnings only (their default, info, writes a line per connection), unless asked.
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());

        let listen = format!("127.0.0.1:{}", free_port()?);
        let mut config = format!("[serve]\nlisten = \"{listen}\"\n");
        if let Some(t) = threads {
            let _ = writeln!(config, "threads = {t}");
        }
        let period = period_text(self.period);
        // The key of a target block that sets its period (meter161's `interval` is written with the block;
        // smon's and Mono's period is the sim's).
        let period_key = match protocol {
            "hmon" => format!("poll = \"{period}\"\n"),
            "sysinfo" => format!("every = \"{period}\"\n"),
            _ => String::new(),
        };
        let millis = self.period.as_millis().max(1).to_string();
        let mut children = Children::default();
        let mut sims = Vec::new();
        // Each sim's command, to start it again for the storm.
        let mut sim_commands: Vec<(String, Command)> = Vec::new();
        // The server sims of several instances, which say when all are listening.
        let mut announcing = Vec::new();
        let mut next_port = 10_000;
        let chunks = (0..n).step_by(MAX_PER_SIM as usize).map(|start| (start, (n - start).min(MAX_PER_SIM)));
        if let Some(recording) = &self.replay {
            // One sim answers every target from the recording, as fast as asked: its cost is a copy, so that
            // telemon's work, not the sims', is what the machine's cores run out on.
            if !matches!(protocol, "hmon" | "smon" | "sysinfo") {
                bail!("--replay is for the TCP server sims (hmon, smon, sysinfo), not {protocol}");
            }
            let addr = format!("127.0.0.1:{}", free_port()?);
            let name = format!("{}-replay", sim_binary(protocol));
            let mut sim = self.pinned(&self.release.join(sim_binary(protocol)), SIM_CORE);
            let flag = if protocol == "hmon" { "--serve" } else { "--listen" };
            sim.arg("--replay").arg(recording).args(["--replay-speed", "max", flag, &addr]);
            sim.env("RUST_LOG", &log_level);
            for k in 0..n {
                let _ =
                    write!(config, "\n[[{protocol}]]\nname = \"t{k}\"\nconnect = \"{addr}\"\n{period_key}");
            }
            sims.push(children.spawn(&name, &mut sim, &work.join(format!("{name}.log")))?);
            sim_commands.push((name, sim));
            // A single listener: bound at once.
            std::thread::sleep(Duration::from_millis(500));
        } else if protocol == "mono" {
            // Agents dial telemon's listener: one block, each agent a target. They sample once a
            // second (the real agent's default is continuous sampling), with values that move.
            let inspector = format!("127.0.0.1:{}", free_port()?);
            // Every agent is a target: the listener's bound (default 1,000) is raised to N.
            let _ = write!(
                config,
                "\n[[mono_listen]]\nname = \"mono\"\nlisten = \"{inspector}\"\nmax_targets = {}\n",
                n.max(1)
            );
            for (i, (_, count)) in chunks.enumerate() {
                let mut sim = self.pinned(&self.release.join("mono-agent-sim"), SIM_CORE);
                sim.args(["--address", &inspector, "--interval", &millis])
                    .args(["--instances", &count.to_string()])
                    .env("RUST_LOG", &log_level);
                let name = format!("mono-agent-sim-{i}");
                sims.push(children.spawn(&name, &mut sim, &work.join(format!("{name}.log")))?);
                sim_commands.push((name, sim));
            }
        } else {
            for (i, (start, count)) in chunks.enumerate() {
                let name = format!("{}-{i}", sim_binary(protocol));
                let mut sim = self.pinned(&self.release.join(sim_binary(protocol)), SIM_CORE);
                sim.args(["--instances", &count.to_string()]).env("RUST_LOG", &log_level);
                if protocol == "meter161" {
                    let dir = work.join(format!("sys161-{i}"));
                    sim.arg("--dir").arg(&dir);
                    for k in 0..count {
                        // One instance serves DIR itself, N serve DIR/0..N-1.
                        let dir = if count == 1 { dir.clone() } else { dir.join(k.to_string()) };
                        let _ = write!(
                            config,
                            "\n[[meter161]]\nname = \"t{}\"\ndir = \"{}\"\ninterval = \"{period}\"\n",
                            start + k,
                            dir.display()
                        );
                    }
                } else {
                    let first = free_ports(next_port, count)?;
                    next_port = first + count as u16;
                    let addr = format!("127.0.0.1:{first}");
                    match protocol {
                        "hmon" => sim.args(["--serve", &addr]),
                        "smon" => sim.args(["--listen", &addr, "--interval", &period]),
                        _ => sim.args(["--listen", &addr]),
                    };
                    for k in 0..count {
                        let port = u32::from(first) + k;
                        let _ = write!(
                            config,
                            "\n[[{protocol}]]\nname = \"t{}\"\nconnect = \"127.0.0.1:{port}\"\n{period_key}",
                            start + k
                        );
                    }
                }
                if count > 1 {
                    announcing.push(name.clone());
                }
                sims.push(children.spawn(&name, &mut sim, &work.join(format!("{name}.log")))?);
                sim_commands.push((name, sim));
            }
        }
        // Every sim listening before telemon starts (a sim of several instances says so once all are bound), so
        // that the time to all up is telemon's, not the sims' start.
        for name in &announcing {
            let log = work.join(format!("{name}.log"));
            let ready = wait_until(&mut children, &work, || {
                std::fs::read_to_string(&log).is_ok_and(|t| t.contains(": serving "))
            })?;
            if !ready {
                bail!("{name} did not say it was serving within {}s", UP_DEADLINE.as_secs());
            }
        }
        let _sink = if push == Push::None {
            None
        } else {
            let sink = Sink::start()?;
            let _ = write!(
                config,
                "\n[[remote_write]]\nname = \"sink\"\nurl = \"http://{}/api/v1/write\"\nbatch = \"1s\"\n",
                sink.addr
            );
            if push == Push::Disk {
                let queue = work.join("queue");
                let _ = std::fs::remove_dir_all(&queue);
                let _ = writeln!(config, "queue_dir = \"{}\"", queue.display());
            }
            Some(sink)
        };
        let config_path = work.join("telemon.toml");
        std::fs::write(&config_path, config)?;

        // With threads set, telemon gets as many cores (the first ones; the sims keep theirs).
        let cores = match threads {
            Some(t) if t > 1 => format!("0-{}", t - 1),
            _ => COLLECTOR_CORE.to_owned(),
        };
        let bin = match (&self.baseline, baseline) {
            (Some(b), true) => b.clone(),
            _ => self.release.join("telemon"),
        };
        let mut telemon = with_nofile_limit(self.pinned(&bin, &cores));
        telemon.arg("serve").arg("--config").arg(&config_path);
        if self.record {
            telemon.arg("--record").arg(work.join("recordings"));
        }
        let pid = children.spawn("telemon", &mut telemon, &work.join("telemon.log"))?;
        let spawned = Instant::now();

        // Every target up, or the deadline.
        let mut up = 0;
        let all_up = wait_until(&mut children, &work, || {
            if let Ok(n_up) = targets_up(&listen) {
                up = n_up;
            }
            up >= n as usize
        })?;
        let all_up_s = all_up.then(|| spawned.elapsed().as_secs_f64());
        if !all_up {
            eprintln!(
                "[xtask] only {up} of {n} targets up after {}s; measuring anyway",
                UP_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(WARM_UP);
        children.check_alive(&work)?;
        let state_rss_kib = proc_status_kib(pid, "VmRSS")?;

        // The measured window: CPU time over it, a scrape each second.
        let ticks_before = cpu_ticks(pid)?;
        let sims_before = sum_cpu_ticks(&sims)?;
        let start = Instant::now();
        let mut latencies = Vec::new();
        let mut scrape = Vec::new();
        let mut first_states = None;
        let mut first_received = None;
        for i in 1..=self.seconds {
            let answer = http_get(&listen, "/metrics", false)?;
            latencies.push(answer.took.as_secs_f64() * 1e3);
            scrape = answer.body;
            first_states.get_or_insert_with(|| target_states(&scrape));
            first_received.get_or_insert_with(|| (Instant::now(), received_bytes(&scrape)));
            if let Some(wait) = (start + Duration::from_secs(i)).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        let ticks = cpu_ticks(pid)? - ticks_before;
        let sims_ticks = sum_cpu_ticks(&sims)? - sims_before;
        let received_bytes_per_s = first_received.map_or(0.0, |(at, bytes)| {
            (received_bytes(&scrape) - bytes) / at.elapsed().as_secs_f64().max(1e-3)
        });
        let peak_rss_mib = proc_status_kib(pid, "VmHWM")? as f64 / 1024.0;
        let up = targets_up(&listen)?;
        let flaps = down_transitions(&first_states.unwrap_or_default(), &target_states(&scrape));
        let series = scrape.split(|&b| b == b'\n').filter(|l| !l.is_empty() && l[0] != b'#').count();

        // Scrapes as Prometheus sends them, outside the window.
        let mut gzip_latencies = Vec::new();
        let mut gzip_size = None;
        for _ in 0..GZIP_SCRAPES.min(self.seconds) {
            let t = Instant::now();
            let answer = http_get(&listen, "/metrics", true)?;
            gzip_latencies.push(answer.took.as_secs_f64() * 1e3);
            gzip_size = answer.gzip.then_some(answer.body.len());
            std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
        }
        gzip_latencies.sort_by(f64::total_cmp);
        let views = match self.views {
            0 => None,
            k => Some(self.views_window(&listen, pid, k)?),
        };
        let storm = if self.storm {
            Some(storm(&mut children, &mut sim_commands, &work, &listen, pid, n as usize)?)
        } else {
            None
        };
        children.check_alive(&work)?;
        children.stop("telemon");

        let floor_cpu_percent = match self.floor(protocol, n, &config_path, &work, &mut children) {
            Ok(percent) => Some(percent),
            Err(e) => {
                eprintln!("[xtask] {protocol} x {n}: the floor failed: {e:#}");
                None
            }
        };
        drop(children);

        latencies.sort_by(f64::total_cmp);
        let disk_bytes_per_sample = (push == Push::Disk).then(|| {
            let text = String::from_utf8_lossy(&scrape);
            let written =
                scrape_value(&text, "telemon_sender_queue_disk_written_bytes_total{sender=\"sink\"}");
            let sent = scrape_value(&text, "telemon_sender_samples_total{sender=\"sink\",result=\"sent\"}");
            written / sent.max(1.0)
        });
        Ok(Row {
            protocol,
            n,
            baseline,
            push,
            threads,
            received_bytes_per_s,
            all_up_s,
            storm,
            disk_bytes_per_sample,
            cpu_percent: ticks as f64 / self.clk_tck / elapsed * 100.0,
            floor_cpu_percent,
            sims_cpu_percent: sims_ticks as f64 / self.clk_tck / elapsed * 100.0,
            peak_rss_mib,
            state_rss_kib,
            series,
            p50_ms: percentile(&latencies, 50.0),
            p99_ms: percentile(&latencies, 99.0),
            scrape_bytes: scrape.len(),
            gzip: gzip_size.map(|size| (percentile(&gzip_latencies, 99.0), size)),
            up,
            flaps,
            views,
        })
    }

    /// The second window: `k` web views open (sparklines of every target, then the stream), a
    /// scrape of `/metrics` each second as in the first.
    fn views_window(&self, listen: &str, pid: u32, k: usize) -> Result<Views> {
        let names: Vec<String> = {
            let answer = http_get(listen, "/api/v1/targets", false)?;
            let v: serde_json::Value = serde_json::from_slice(&answer.body).context("/api/v1/targets")?;
            v["rows"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(str::to_owned))
                .collect()
        };
        let body = serde_json::to_string(&names)?;
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicUsize::new(0));
        let mut streams = Vec::new();
        for _ in 0..k {
            let mut s = TcpStream::connect(listen)?;
            write!(
                s,
                "POST /api/v1/sparklines HTTP/1.1\r\nHost: {listen}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )?;
            std::io::copy(&mut s, &mut std::io::sink())?;
            let mut s = TcpStream::connect(listen)?;
            write!(s, "GET /api/v1/stream HTTP/1.1\r\nHost: {listen}\r\nAccept: text/event-stream\r\n\r\n")?;
            s.set_read_timeout(Some(Duration::from_millis(200)))?;
            let (stop, bytes) = (stop.clone(), bytes.clone());
            streams.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while !stop.load(Ordering::Relaxed) {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            bytes.fetch_add(n, Ordering::Relaxed);
                        }
                        // The read timeout, to look at `stop`.
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break,
                    }
                }
            }));
        }
        // The `full` events and the first seconds are not counted.
        std::thread::sleep(WARM_UP);
        let bytes_before = bytes.load(Ordering::Relaxed);
        let ticks_before = cpu_ticks(pid)?;
        let start = Instant::now();
        for i in 1..=self.seconds {
            http_get(listen, "/metrics", false)?;
            if let Some(wait) = (start + Duration::from_secs(i)).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        let ticks = cpu_ticks(pid)? - ticks_before;
        let carried = (bytes.load(Ordering::Relaxed) - bytes_before) as f64 / elapsed;
        stop.store(true, Ordering::Relaxed);
        for s in streams {
            let _ = s.join();
        }
        Ok(Views {
            count: k,
            cpu_percent: ticks as f64 / self.clk_tck / elapsed * 100.0,
            peak_rss_mib: proc_status_kib(pid, "VmHWM")? as f64 / 1024.0,
            stream_bytes_per_s: carried / k as f64,
        })
    }

    /// Runs `fleet-floor` over the same targets, once every one is up, and returns its CPU (% of a
    /// core) over a window as long as telemon's.
    fn floor(
        &self,
        protocol: &str,
        n: u32,
        config: &Path,
        work: &Path,
        children: &mut Children,
    ) -> Result<f64> {
        let mut floor = with_nofile_limit(self.pinned(&self.release.join("fleet-floor"), COLLECTOR_CORE));
        floor.arg("--protocol").arg(protocol).arg("--config").arg(config);
        let log = work.join("fleet-floor.log");
        let pid = children.spawn("fleet-floor", &mut floor, &log)?;
        // It prints `up K decoded M` every second.
        let floor_up = || -> usize {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let last = text.lines().rev().find(|l| l.starts_with("up "));
            last.and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
        };
        if !wait_until(children, work, || floor_up() >= n as usize)? {
            eprintln!("[xtask] the floor has only {} of {n} targets up; measuring anyway", floor_up());
        }
        std::thread::sleep(WARM_UP);
        children.check_alive(work)?;
        let before = cpu_ticks(pid)?;
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs(self.seconds));
        let ticks = cpu_ticks(pid)? - before;
        let elapsed = start.elapsed().as_secs_f64();
        children.check_alive(work)?;
        children.stop("fleet-floor");
        Ok(ticks as f64 / self.clk_tck / elapsed * 100.0)
    }
}

/// Polls `done` every half second until it holds (`true`) or [`UP_DEADLINE`] passes (`false`),
/// failing if a child ends meanwhile.
fn wait_until(children: &mut Children, work: &Path, mut done: impl FnMut() -> bool) -> Result<bool> {
    let deadline = Instant::now() + UP_DEADLINE;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        children.check_alive(work)?;
        if done() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Each target's `telemon_target_connects_total` and `telemon_target_up` in a scrape, keyed by the
/// text of its labels.
fn target_states(scrape: &[u8]) -> HashMap<String, (u64, bool)> {
    let mut states: HashMap<String, (u64, bool)> = HashMap::new();
    for line in String::from_utf8_lossy(scrape).lines() {
        let Some((name, rest)) = line.split_once('{') else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let Some(Ok(value)) = value.split_whitespace().next().map(str::parse::<f64>) else { continue };
        match name {
            "telemon_target_connects_total" => states.entry(labels.to_owned()).or_default().0 = value as u64,
            "telemon_target_up" => states.entry(labels.to_owned()).or_default().1 = value == 1.0,
            _ => {}
        }
    }
    states
}

/// Down transitions between two scrapes: every connect in between followed one (except a first
/// connect of a target down at the start), and a target down at the end went down once more.
fn down_transitions(start: &HashMap<String, (u64, bool)>, end: &HashMap<String, (u64, bool)>) -> u64 {
    end.iter()
        .map(|(target, &(connects, up))| {
            let (connects_before, up_before) = start.get(target).copied().unwrap_or((connects, up));
            let downs = connects.saturating_sub(connects_before) + u64::from(!up);
            downs.saturating_sub(u64::from(!up_before))
        })
        .sum()
}

/// Whether `taskset` can pin to the two cores used here.
fn pinning_works() -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores >= 2
        && Command::new("taskset")
            .args(["-c", SIM_CORE, "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// A remote write receiver that reads each request and answers 204: what a fast receiver costs
/// telemon, without a receiver's own CPU in the way (it runs in xtask, not in telemon).
struct Sink {
    addr: std::net::SocketAddr,
}

impl Sink {
    fn start() -> Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                std::thread::spawn(move || Sink::serve(conn));
            }
        });
        Ok(Sink { addr })
    }

    /// Keep-alive HTTP/1.1: headers, a `Content-Length` body, `204`; until the peer closes.
    fn serve(mut conn: TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..end + 4 + len);
            if conn.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").is_err() {
                return;
            }
        }
    }
}

fn sim_binary(protocol: &str) -> &'static str {
    crate::sims::of_protocol(protocol).map_or("mono-agent-sim", |s| s.bin)
}

/// `cmd` with its open-file limit raised to [`NOFILE`]: by `prlimit` when there is one, else by the
/// shell. Both exec the command, so the child's pid is the command's.
fn with_nofile_limit(cmd: Command) -> Command {
    let has_prlimit =
        Command::new("prlimit").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    let mut wrapped = if has_prlimit.is_ok_and(|s| s.success()) {
        let mut w = Command::new("prlimit");
        w.arg(format!("--nofile={NOFILE}:{NOFILE}"));
        w
    } else {
        let mut w = Command::new("sh");
        w.args(["-c", &format!("ulimit -n {NOFILE}; exec \"$@\""), "sh"]);
        w
    };
    wrapped.arg(cmd.get_program()).args(cmd.get_args());
    wrapped
}

/// A port on 127.0.0.1 that is free now.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The first of `n` consecutive ports, from `from` up, that are free now (each bound, then released). The
/// search stays below the ephemeral range, where telemon's own connections take their ports.
fn free_ports(from: u16, n: u32) -> Result<u16> {
    let end: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let mut first = u32::from(from);
    while first + n <= end {
        match (first..first + n).find(|&port| TcpListener::bind(("127.0.0.1", port as u16)).is_err()) {
            Some(taken) => first = taken + 1,
            None => return Ok(first as u16),
        }
    }
    bail!("no {n} consecutive free ports between {from} and {end}")
}

/// How many targets `/targets` shows up (the JSON has no spaces: `"state":"up"`).
fn targets_up(listen: &str) -> Result<usize> {
    let body = String::from_utf8(http_get(listen, "/targets", false)?.body)?;
    // Only the `targets` list, not the `probes` one (the keys may come in either order).
    let targets = &body[body.find("\"targets\":").context("no targets in /targets")?..];
    let targets = match targets.find("\"probes\":") {
        Some(end) => &targets[..end],
        None => targets,
    };
    Ok(targets.matches("\"state\":\"up\"").count())
}

/// An answer's body, and whether it is gzip.
struct Answer {
    body: Vec<u8>,
    gzip: bool,
    /// From connecting to the last byte of the answer (the scrape's latency; taking the answer apart
    /// afterwards, in this unoptimised binary, is not part of it).
    took: Duration,
}

/// `GET path`, by plain HTTP/1.1 with `Connection: close` (and `Accept-Encoding: gzip` if `gzip`).
fn http_get(addr: &str, path: &str, gzip: bool) -> Result<Answer> {
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let accept = if gzip { "Accept-Encoding: gzip\r\n" } else { "" };
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n")?;
    // Read into a buffer kept from the last answer, so that the time is the scrape's, not this
    // process's page faults and reallocations for a 20 MB page.
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let (took, answer) = BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        let read = stream.read_to_end(buffer).with_context(|| format!("reading GET {path}"));
        (start.elapsed(), read.map(|_| buffer.clone()))
    });
    let mut answer = answer?;
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n").context("no end of headers")?;
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    let body = answer.split_off(end + 4);
    let gzip = head.lines().any(|l| l.starts_with("content-encoding:") && l.contains("gzip"));
    let body = if head.contains("transfer-encoding: chunked") { dechunk(&body)? } else { body };
    Ok(Answer { body, gzip, took })
}

/// A chunked body's content.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").context("truncated chunk")?;
        let size = std::str::from_utf8(&body[..line])?.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).context("bad chunk size")?;
        if size == 0 {
            return Ok(out);
        }
        let data = body.get(line + 2..line + 2 + size).context("truncated chunk")?;
        out.extend_from_slice(data);
        body = body.get(line + 4 + size..).context("truncated chunk")?;
    }
}

/// utime + stime of `pid`, in clock ticks (fields 14 and 15 of `/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count from the parenthesis that closes it.
    let fields: Vec<&str> = stat[stat.rfind(')').context("bad stat")? + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64> { Ok(fields.get(n - 3).context("short stat")?.parse()?) };
    Ok(field(14)? + field(15)?)
}

/// The sum of [`cpu_ticks`] over `pids`.
fn sum_cpu_ticks(pids: &[u32]) -> Result<u64> {
    pids.iter().map(|&pid| cpu_ticks(pid)).sum()
}

/// A KiB figure of `pid`'s `/proc/PID/status`: `VmHWM` (peak resident set size), `VmRSS`...
fn proc_status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))
        .with_context(|| format!("no {field}"))?;
    Ok(line.split_whitespace().nth(1).with_context(|| format!("bad {field}"))?.parse()?)
}

/// The nearest-rank percentile of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_transitions_count_reconnects_and_targets_left_down() {
        let start = b"# TYPE telemon_target_up gauge\n\
            telemon_target_up{target=\"a\",protocol=\"x\"} 1\n\
            telemon_target_connects_total{target=\"a\",protocol=\"x\"} 1\n\
            telemon_target_up{target=\"b\",protocol=\"x\"} 1\n\
            telemon_target_connects_total{target=\"b\",protocol=\"x\"} 1\n\
            telemon_target_up{target=\"c\",protocol=\"x\"} 0\n\
            telemon_target_connects_total{target=\"c\",protocol=\"x\"} 0\n\
            telemon_target_up{target=\"d\",protocol=\"x\"} 1\n\
            telemon_target_connects_total{target=\"d\",protocol=\"x\"} 1\n";
        // a: went down and came back twice; b: went down and stayed down; c: came up (no down);
        // d: steady.
        let end = b"telemon_target_up{target=\"a\",protocol=\"x\"} 1\n\
            telemon_target_connects_total{target=\"a\",protocol=\"x\"} 3\n\
            telemon_target_up{target=\"b\",protocol=\"x\"} 0\n\
            telemon_target_connects_total{target=\"b\",protocol=\"x\"} 1\n\
            telemon_target_up{target=\"c\",protocol=\"x\"} 1\n\
            telemon_target_connects_total{target=\"c\",protocol=\"x\"} 1\n\
            telemon_target_up{target=\"d\",protocol=\"x\"} 1\n\
            telemon_target_connects_total{target=\"d\",protocol=\"x\"} 1\n";
        assert_eq!(down_transitions(&target_states(start), &target_states(end)), 3);
        assert_eq!(down_transitions(&target_states(end), &target_states(end)), 0);
    }

    #[test]
    fn periods_and_received_bytes_read_as_written() {
        assert_eq!(parse_period("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_period("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_period("500us"), Ok(Duration::from_micros(500)));
        for bad in ["", "ms", "10", "10m", "0s", "1.5s"] {
            assert!(parse_period(bad).is_err(), "{bad}");
        }
        for d in [Duration::from_secs(1), Duration::from_millis(250), Duration::from_micros(500)] {
            assert_eq!(parse_period(&period_text(d)), Ok(d));
        }
        let scrape = b"telemon_target_received_bytes_total{protocol=\"smon\",target=\"a\"} 100\n\
            telemon_target_received_bytes_total{protocol=\"smon\",target=\"b\"} 23\n\
            telemon_target_up{protocol=\"smon\",target=\"a\"} 1\n";
        assert_eq!(received_bytes(scrape), 123.0);
    }

    #[test]
    fn bytes_per_series_uses_the_growth_over_a_smaller_n() {
        let row = |n, state_rss_kib, series| Row {
            protocol: "meter161",
            n,
            push: Push::None,
            threads: None,
            baseline: false,
            received_bytes_per_s: 0.0,
            all_up_s: None,
            storm: None,
            disk_bytes_per_sample: None,
            cpu_percent: 0.0,
            floor_cpu_percent: None,
            sims_cpu_percent: 0.0,
            peak_rss_mib: 0.0,
            state_rss_kib,
            series,
            p50_ms: 0.0,
            p99_ms: 0.0,
            scrape_bytes: 0,
            gzip: None,
            up: 0,
            flaps: 0,
            views: None,
        };
        let rows = [row(100, 10_000, 1_000), row(1000, 19_000, 10_000)];
        assert_eq!(bytes_per_series(&rows[0], &rows), "10240");
        assert_eq!(bytes_per_series(&rows[1], &rows), "1024 Δ");
        assert_eq!(bytes_per_target(&rows[0], &rows), "102400");
        assert_eq!(bytes_per_target(&rows[1], &rows), "10240 Δ");
        // A baseline binary's row is compared with its own rows only.
        let mut base = row(10_000, 100_000, 100_000);
        base.baseline = true;
        let rows = [row(100, 10_000, 1_000), row(1000, 19_000, 10_000), base];
        assert_eq!(bytes_per_target(&rows[2], &rows), "10240");
    }
}
