//! `fleet-soak`: `telemon serve` (a release binary, run as a child process) watching a fleet of 200 sims of
//! the five protocols while a tenth of them is stopped and restarted every 10 s. `cargo xtask soak --fleet`
//! builds telemon and this binary and runs it; it prints one table and exits non-zero on a failure.
//!
//! The fleet runs in this process (tokio, multi-threaded), each sim under its own [`sim_common::Shutdown`]
//! so that it can be stopped and started again on the same address or directory: 40 sys161 (meter161, a
//! socket folder each), 40 Dyalog interpreters (HMON), 40 smon monitors (a cheap synthetic source), 40 rvOS
//! sysinfo services (small traces) and 40 Mono agents, which dial out to telemon's `[[mono_listen]]`.
//!
//! The rvOS sims take one step of their simulated kernel per 10 s: its channels and processes drift upwards as
//! it steps (at the default 100 ms, some 20 channels a minute per sim), and telemon's RSS would follow the series
//! they add instead of its own state. The names a stopped Mono agent leaves stay listed as down for 10 minutes
//! (telemon's linger for dial-in targets): they are part of telemon's RSS at the end.
//!
//! Once every target is up, every 10 s a random tenth of the fleet is stopped, and started again 3 s later, for
//! `--minutes`; the soak notes when it did each. `/metrics` is scraped once a second with a plain HTTP GET. The
//! table gives:
//! * telemon's VmRSS after a 150 s warm-up (`--warm-up`, from telemon's start, restarts included) and at the end, each the
//!   median of 5 samples a second apart (growth must stay within 10%), and its VmHWM. The baseline is taken with
//!   the restarts under way because what telemon settles at depends on them: taken before the first one, it
//!   would count the reconnections' first allocations as growth;
//! * the scrape latency, p50 and p99;
//! * every `telemon_target_up` transition seen against those the soak caused: each caused down (up) must be
//!   matched by a down (up) of that target within a 10 s grace (telemon backs off up to 5 s); the missed
//!   ones and the unexpected ones (transitions nobody caused) are listed.
//!
//! A Mono agent gets a new target name, `mono/127.0.0.1:PORT`, on each connection. To tell which agent a
//! name belongs to, agent N reports `1000 + N` in its `Mono JIT/Methods from AOT` counter: a stopped agent's
//! old name must go to 0, and a new name of that agent must appear up.
//!
//! The exit status is 1 when RSS grew by more than 10%, when a caused transition was missed, or when the soak
//! itself could not do its part (telemon ended, a sim could not be restarted).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use sim_common::Running;
use smon_codec::Sample;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How long the fleet may take to be all up, from telemon's start.
const UP_DEADLINE: Duration = Duration::from_secs(60);
/// Time between two rounds of restarts.
const ROUND: Duration = Duration::from_secs(10);
/// How long a stopped sim stays stopped.
const DOWN_FOR: Duration = Duration::from_secs(3);
/// How late a seen transition may come after its cause (telemon backs off up to 5 s between attempts).
const GRACE: Duration = Duration::from_secs(10);
/// Time between two scrapes.
const SCRAPE_EVERY: Duration = Duration::from_secs(1);
/// The longest a scrape may take before it counts as failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a restarted sim keeps trying to bind its old address.
const BIND_RETRY: Duration = Duration::from_secs(5);
/// The largest RSS growth after the warm-up that passes.
const MAX_GROWTH: f64 = 0.10;
/// VmRSS samples (a second apart) whose median is the RSS at the start and at the end.
const RSS_SAMPLES: usize = 5;
/// Simulated time per step of an rvOS sim.
const RVOS_STEP: Duration = Duration::from_secs(10);
/// The counter in which Mono agent N reports [`AGENT_ID_BASE`] + N.
const AGENT_ID_COUNTER: &str = "Mono JIT/Methods from AOT";
const AGENT_ID_COUNTER_LABEL: &str = "Methods from AOT";
const AGENT_ID_BASE: usize = 1000;

#[derive(Debug, Parser)]
#[command(about = "telemon serve over a fleet of 200 sims, a tenth of them restarted every 10 s")]
struct Args {
    /// The telemon binary (release build).
    #[arg(long)]
    telemon: PathBuf,
    /// Minutes of restarts, after the warm-up.
    #[arg(long, default_value_t = 2.0)]
    minutes: f64,
    /// Seconds from telemon's start to the RSS baseline (the restarts run meanwhile). telemon's RSS rises for
    /// about two minutes of restarts before it levels off; a baseline taken earlier measures that rise.
    #[arg(long, default_value_t = 150)]
    warm_up: u64,
    /// Sims of each kind (five kinds).
    #[arg(long, default_value_t = 40)]
    per_kind: usize,
    /// Seed of the choice of sims to restart (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sys161,
    Dyalog,
    Smon,
    Rvos,
    Mono,
}

const KINDS: [Kind; 5] = [Kind::Sys161, Kind::Dyalog, Kind::Smon, Kind::Rvos, Kind::Mono];

impl Kind {
    /// The `protocol` label of telemon's families.
    fn protocol(self) -> &'static str {
        match self {
            Kind::Sys161 => "meter161",
            Kind::Dyalog => "hmon",
            Kind::Smon => "smon",
            Kind::Rvos => "sysinfo",
            Kind::Mono => "mono",
        }
    }

    fn sim(self) -> &'static str {
        match self {
            Kind::Sys161 => "sys161",
            Kind::Dyalog => "dyalog",
            Kind::Smon => "smon",
            Kind::Rvos => "rvos",
            Kind::Mono => "mono-agent",
        }
    }
}

/// Where a sim lives.
#[derive(Debug, Clone)]
enum Place {
    /// sys161's folder (`DIR/.sockets/meter`).
    Dir(PathBuf),
    /// A TCP server's address (port 0 until first bound).
    Tcp(SocketAddr),
    /// A Mono agent dials telemon's `[[mono_listen]]` address.
    Dial(SocketAddr),
}

/// One sim of the fleet.
struct Slot {
    kind: Kind,
    /// Its number within its kind.
    n: usize,
    /// Its telemon target name (for a Mono agent, only the soak's name for it).
    name: String,
    place: Place,
    running: Option<Running>,
}

/// A cheap smon source: a few figures that change every sample.
struct Synthetic(u64);

impl smon_sim::Source for Synthetic {
    fn sample(&mut self) -> Vec<Sample> {
        self.0 += 1;
        vec![
            Sample::new("linux.cpu.idle", [0], 1000 + self.0),
            Sample::new("linux.cpu.idle", [1], 2000 + 2 * self.0),
            Sample::new("linux.mem.free", [], 1 << 20),
        ]
    }
}

/// Binds `addr` with SO_REUSEADDR (so that a restarted sim gets its port back despite the old connections in
/// TIME_WAIT), retrying for a while when the port is still taken.
async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let deadline = Instant::now() + BIND_RETRY;
    loop {
        let attempt = TcpSocket::new_v4().and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(addr)?;
            s.listen(1024)
        });
        match attempt {
            Ok(l) => return Ok(l),
            Err(e) if addr.port() != 0 && Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))),
        }
    }
}

/// Starts the sim of `slot` (again), on its address or folder.
async fn start(slot: &mut Slot) -> Result<()> {
    let running = match (&slot.place, slot.kind) {
        (Place::Dir(dir), _) => {
            let (listener, _) =
                sys161_sim::bind(dir).with_context(|| format!("binding {}/.sockets/meter", dir.display()))?;
            let config = sys161_sim::Config::default();
            Running::spawn(|shutdown| sys161_sim::run(listener, config, shutdown))
        }
        (Place::Tcp(addr), kind) => {
            let listener = bind(*addr).await?;
            slot.place = Place::Tcp(listener.local_addr()?);
            match kind {
                Kind::Dyalog => Running::spawn(|shutdown| {
                    dyalog_sim::Sim::new(dyalog_sim::Config::default()).serve(listener, shutdown)
                }),
                Kind::Smon => {
                    let config = smon_sim::Config { interval: Duration::from_secs(1), ..Default::default() };
                    let source = Synthetic(slot.n as u64 * 1000);
                    Running::spawn(|shutdown| smon_sim::serve(listener, source, config, shutdown))
                }
                Kind::Rvos => {
                    // One step of the simulated kernel per 10 s (not 100 ms): its channels and processes
                    // drift upwards as it steps, and telemon's memory would follow the series they add.
                    let system = rvos_sim::SystemConfig {
                        processes: 8,
                        trace_capacity: 64,
                        trace_prefill: 0,
                        tick: RVOS_STEP,
                        ..Default::default()
                    };
                    let config = rvos_sim::Config { system, ..Default::default() };
                    Running::spawn(|shutdown| rvos_sim::run(listener, config, shutdown))
                }
                Kind::Sys161 | Kind::Mono => unreachable!("not a TCP server"),
            }
        }
        (Place::Dial(addr), _) => {
            let options = format!(
                "address={addr},counters={AGENT_ID_COUNTER};Mono JIT/Compiled methods;Mono System/Working Set,\
                 interval=1000"
            );
            let config = mono_agent_sim::AgentConfig::from_options(&options)?;
            let overrides = mono_agent_sim::ValueOverrides::default();
            let id = i32::try_from(AGENT_ID_BASE + slot.n).expect("a small number");
            overrides.set(AGENT_ID_COUNTER, mono_counters::CounterValue::Int(id));
            Running::spawn(|shutdown| async move {
                mono_agent_sim::run_with_overrides(config, overrides, shutdown)
                    .await
                    .map_err(io::Error::other)
            })
        }
    };
    slot.running = Some(running);
    Ok(())
}

/// Stops the sim of `slot`, if it runs.
async fn stop(slot: &mut Slot) {
    if let Some(running) = slot.running.take() {
        if let Err(e) = running.stop().await {
            eprintln!("[fleet-soak] {} ended with an error: {e}", slot.name);
        }
    }
}

/// A `telemon_target_up` transition seen in a scrape.
#[derive(Debug, Clone)]
struct Seen {
    /// When the scrape that showed it had been read.
    at: Instant,
    protocol: String,
    target: String,
    up: bool,
}

/// What the scrapes saw.
#[derive(Debug, Default)]
struct Observed {
    /// Each listed target: (protocol, up).
    state: HashMap<String, (String, bool)>,
    /// Mono target name -> the agents that held it, from when (from [`AGENT_ID_COUNTER`]): a name comes back
    /// when an agent reconnects from a port an earlier connection used (loopback reuses them quickly).
    agents: HashMap<String, Vec<(Instant, usize)>>,
    /// When each name last came up.
    up_since: HashMap<String, Instant>,
    seen: Vec<Seen>,
    /// (end of the scrape, its latency).
    scrapes: Vec<(Instant, Duration)>,
    /// (when, why).
    failures: Vec<(Instant, String)>,
}

impl Observed {
    /// The agent whose connection the transition `s` was: for a down, the last agent seen under that name
    /// before it; for an up, the first one seen with or after it (the counter comes with the first sample).
    fn agent(&self, s: &Seen) -> Option<usize> {
        let held = self.agents.get(&s.target)?;
        if s.up {
            held.iter().find(|(at, _)| *at >= s.at).map(|(_, n)| *n)
        } else {
            held.iter().rev().find(|(at, _)| *at < s.at).map(|(_, n)| *n)
        }
    }

    fn up_count(&self) -> usize {
        self.state.values().filter(|(_, up)| *up).count()
    }

    fn up_of(&self, protocol: &str) -> usize {
        self.state.values().filter(|(p, up)| *up && p == protocol).count()
    }
}

/// A sample line's labels: (name, unescaped value).
type Labels<'a> = Vec<(&'a str, String)>;

/// Splits `name{labels} value` into the name, the labels and the value.
fn parse_line(line: &str) -> Option<(&str, Labels<'_>, &str)> {
    let (name, rest) = line.split_once('{')?;
    let mut labels = Vec::new();
    let mut rest = rest;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Some((name, labels, after.trim()));
        }
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim_start_matches(','), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
}

fn label<'a>(labels: &'a [(&str, String)], key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
}

/// Applies one scrape's body.
fn observe(obs: &mut Observed, body: &str, at: Instant) {
    let mut now = HashMap::new();
    let mut ids = Vec::new();
    for line in body.lines() {
        if line.starts_with("telemon_target_up{") {
            let Some((_, labels, value)) = parse_line(line) else { continue };
            let (Some(protocol), Some(target)) = (label(&labels, "protocol"), label(&labels, "target"))
            else {
                continue;
            };
            now.insert(target.to_owned(), (protocol.to_owned(), value == "1"));
        } else if line.starts_with("mono_runtime") && line.contains(AGENT_ID_COUNTER_LABEL) {
            let Some((_, labels, value)) = parse_line(line) else { continue };
            if let (Some(target), Some(AGENT_ID_COUNTER_LABEL), Some(n)) = (
                label(&labels, "target"),
                label(&labels, "counter"),
                value.parse::<f64>().ok().and_then(|v| (v as usize).checked_sub(AGENT_ID_BASE)),
            ) {
                ids.push((target.to_owned(), n));
            }
        }
    }
    for (target, (protocol, up)) in &now {
        let changed = match obs.state.get(target) {
            Some((_, was)) => was != up,
            // A new name counts when it comes up (a Mono agent's new connection); listed down, it is not a change.
            None => *up,
        };
        if changed {
            obs.seen.push(Seen { at, protocol: protocol.clone(), target: target.clone(), up: *up });
            if *up {
                obs.up_since.insert(target.clone(), at);
            }
        }
    }
    // A name has a new holder when the number changes, or at the first number seen since it came up.
    for (target, n) in ids {
        let since = obs.up_since.get(&target).copied();
        let held = obs.agents.entry(target).or_default();
        if held.last().is_none_or(|(at, last)| *last != n || since.is_some_and(|u| u > *at)) {
            held.push((at, n));
        }
    }
    // Names that are no longer listed (a dial-in target's linger ended) leave without a transition.
    obs.state = now;
}

/// A plain HTTP/1.1 GET of `/metrics`: the body.
async fn scrape(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect(addr).await.context("connect")?;
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.context("write")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.context("read")?;
    let text = String::from_utf8(raw).context("not UTF-8")?;
    let (head, body) = text.split_once("\r\n\r\n").context("no header block")?;
    let status = head.split(' ').nth(1).unwrap_or("?");
    if status != "200" {
        bail!("status {status}");
    }
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        Ok(body.to_owned())
    }
}

fn dechunk(mut s: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (len, rest) = s.split_once("\r\n").context("no chunk size")?;
        let len = usize::from_str_radix(len.trim(), 16).context("bad chunk size")?;
        if len == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..len).context("short chunk")?);
        s = rest.get(len + 2..).context("short chunk")?;
    }
}

/// Scrapes `addr` every [`SCRAPE_EVERY`] into `obs`, until aborted.
async fn scraper(addr: SocketAddr, obs: Arc<Mutex<Observed>>) {
    let mut tick = tokio::time::interval(SCRAPE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let t0 = Instant::now();
        let result = tokio::time::timeout(SCRAPE_TIMEOUT, scrape(addr)).await;
        let end = Instant::now();
        let mut obs = obs.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(Ok(body)) => {
                obs.scrapes.push((end, end - t0));
                observe(&mut obs, &body, end);
            }
            Ok(Err(e)) => obs.failures.push((end, format!("{e:#}"))),
            Err(_) => obs.failures.push((end, format!("no answer within {SCRAPE_TIMEOUT:?}"))),
        }
    }
}

/// VmRSS and VmHWM of `pid`, in KiB.
fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// The median VmRSS of [`RSS_SAMPLES`] samples a second apart (a scrape's buffers come and go), and the
/// VmHWM after them, in KiB.
async fn rss(pid: u32) -> Result<(u64, u64)> {
    let mut samples = Vec::new();
    for i in 0..RSS_SAMPLES {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        samples.push(memory(pid)?.0);
    }
    samples.sort_unstable();
    Ok((samples[samples.len() / 2], memory(pid)?.1))
}

/// The soak's random choices (reproducible from the printed seed).
use sim_common::SplitMix64 as Rng;

/// `k` distinct items of `from`, in random order.
fn pick(rng: &mut Rng, mut from: Vec<usize>, k: usize) -> Vec<usize> {
    let k = k.min(from.len());
    for i in 0..k {
        let j = i + rng.below((from.len() - i) as u64) as usize;
        from.swap(i, j);
    }
    from.truncate(k);
    from
}

/// A transition the soak caused: sim `slot` stopped (`up == false`) or started again at `at`.
#[derive(Debug, Clone, Copy)]
struct Cause {
    at: Instant,
    slot: usize,
    up: bool,
}

/// telemon, as a child process whose stderr is kept (the last lines) for the report of a failure.
struct Telemon {
    child: tokio::process::Child,
    pid: u32,
    addr: SocketAddr,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl Telemon {
    async fn start(bin: &Path, config: &Path) -> Result<Telemon> {
        // As the other soaks do: telemon holds a socket per target, and some.
        let script = r#"ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@""#;
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", script, "telemon"])
            .arg(bin)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("telemon has no pid")?;
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let tail = tail.clone();
            tokio::spawn(async move {
                let mut tx = Some(tx);
                while let Ok(Some(line)) = lines.next_line().await {
                    // "telemon: serving ... on http://ADDR/metrics"
                    if let Some(addr) = line
                        .split_once("on http://")
                        .and_then(|(_, a)| a.strip_suffix("/metrics"))
                        .and_then(|a| a.parse::<SocketAddr>().ok())
                    {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(addr);
                        }
                    }
                    let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                    if tail.len() == 30 {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        let addr = match tokio::time::timeout(Duration::from_secs(20), rx).await {
            Ok(Ok(addr)) => addr,
            _ => {
                let _ = child.start_kill();
                tokio::time::sleep(Duration::from_millis(200)).await;
                let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                bail!(
                    "telemon did not start serving:\n{}",
                    tail.iter().cloned().collect::<Vec<_>>().join("\n")
                );
            }
        };
        Ok(Telemon { child, pid, addr, tail })
    }

    /// Fails when telemon has ended.
    fn check(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
            bail!(
                "telemon ended ({status}); its last lines:\n{}",
                tail.iter().cloned().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }
}

fn config(slots: &[Slot], mono_listen: SocketAddr) -> String {
    let mut toml = String::from("# written by fleet-soak\n");
    for s in slots {
        let _ = match &s.place {
            Place::Dir(dir) => write!(
                toml,
                "\n[[meter161]]\nname = \"{}\"\ndir = \"{}\"\ninterval = \"1s\"\n",
                s.name,
                dir.display()
            ),
            Place::Tcp(addr) => match s.kind {
                Kind::Dyalog => {
                    write!(toml, "\n[[hmon]]\nname = \"{}\"\nconnect = \"{addr}\"\npoll = \"1s\"\n", s.name)
                }
                Kind::Rvos => {
                    write!(
                        toml,
                        "\n[[sysinfo]]\nname = \"{}\"\nconnect = \"{addr}\"\nevery = \"2s\"\n",
                        s.name
                    )
                }
                _ => write!(toml, "\n[[smon]]\nname = \"{}\"\nconnect = \"{addr}\"\n", s.name),
            },
            Place::Dial(_) => Ok(()),
        };
    }
    let _ = write!(toml, "\n[[mono_listen]]\nname = \"mono\"\nlisten = \"{mono_listen}\"\n");
    toml
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.per_kind == 0 {
        bail!("--per-kind must be at least 1");
    }
    // A listener and a connection or two per sim, and the scrapes.
    let _ = sim_common::raise_open_file_limit(4096 + 8 * args.per_kind as u64);
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut rng = Rng(seed);
    let work = tempfile::Builder::new().prefix("fleet-soak-").tempdir()?;
    let mono_listen = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;

    let mut slots = Vec::new();
    for kind in KINDS {
        for n in 0..args.per_kind {
            let name = format!("{}-{n:02}", kind.sim());
            let place = match kind {
                Kind::Sys161 => {
                    let dir = work.path().join(&name);
                    std::fs::create_dir_all(&dir)?;
                    Place::Dir(dir)
                }
                Kind::Mono => Place::Dial(mono_listen),
                _ => Place::Tcp(SocketAddr::from(([127, 0, 0, 1], 0))),
            };
            slots.push(Slot { kind, n, name, place, running: None });
        }
    }
    for slot in slots.iter_mut().filter(|s| s.kind != Kind::Mono) {
        start(slot).await.with_context(|| format!("starting {}", slot.name))?;
    }
    let config_path = work.path().join("telemon.toml");
    std::fs::write(&config_path, config(&slots, mono_listen))?;
    let mut telemon = Telemon::start(&args.telemon, &config_path).await?;
    let started = Instant::now();
    for slot in slots.iter_mut().filter(|s| s.kind == Kind::Mono) {
        start(slot).await.with_context(|| format!("starting {}", slot.name))?;
    }
    eprintln!(
        "[fleet-soak] {} sims ({} of each kind) up; telemon (pid {}) on http://{}/metrics; seed {seed}",
        slots.len(),
        args.per_kind,
        telemon.pid,
        telemon.addr
    );

    let obs: Arc<Mutex<Observed>> = Arc::default();
    let scraping = tokio::spawn(scraper(telemon.addr, obs.clone()));
    let result = soak(&args, &mut slots, &mut telemon, &obs, &mut rng, started, seed).await;
    scraping.abort();
    // telemon first, so that it does not see the whole fleet go.
    let _ = telemon.child.kill().await;
    for slot in slots.iter_mut() {
        stop(slot).await;
    }
    let failed = result?;
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

/// The warm-up, the rounds of restarts and the report; returns whether the soak failed.
async fn soak(
    args: &Args,
    slots: &mut [Slot],
    telemon: &mut Telemon,
    obs: &Arc<Mutex<Observed>>,
    rng: &mut Rng,
    started: Instant,
    seed: u64,
) -> Result<bool> {
    let total = slots.len();
    let lock = || obs.lock().unwrap_or_else(|e| e.into_inner());

    // Every target up first: a sim stopped before telemon ever saw it up could not be seen going down.
    let deadline = started + UP_DEADLINE;
    let up_at_start = loop {
        telemon.check()?;
        let up = lock().up_count();
        if up >= total || Instant::now() >= deadline {
            break up;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let churn_start = Instant::now();
    let all_up_after = churn_start - started;
    if up_at_start < total {
        eprintln!("[fleet-soak] only {up_at_start} of {total} targets up after {all_up_after:.1?}; going on");
    }
    // The RSS baseline: after the warm-up, counted from telemon's start, with the restarts under way (what
    // telemon settles at depends on them: taken before any, it would count their first allocations as growth).
    let pid = telemon.pid;
    let warm_up = Duration::from_secs(args.warm_up);
    let baseline_at = (started + warm_up).max(churn_start);
    let baseline = tokio::spawn(async move {
        tokio::time::sleep_until(baseline_at.into()).await;
        rss(pid).await
    });
    eprintln!(
        "[fleet-soak] {up_at_start}/{total} up after {all_up_after:.1?}; restarting a tenth every {ROUND:?} for {} min",
        args.minutes
    );

    // Rounds: stop a random tenth, wait, start them again.
    // The restarts run through the warm-up and then for --minutes.
    let churn_for = warm_up + Duration::from_secs_f64(args.minutes.max(0.0) * 60.0);
    let per_round = (total / 10).max(1);
    let mut causes = Vec::new();
    let mut restart_failures = Vec::new();
    let mut rounds = 0;
    let mut last_restart = churn_start;
    while churn_start.elapsed() < churn_for {
        telemon.check()?;
        let round_start = churn_start + ROUND * rounds;
        rounds += 1;
        let running: Vec<usize> = (0..total).filter(|&i| slots[i].running.is_some()).collect();
        let picked = pick(rng, running, per_round);
        for &i in &picked {
            causes.push(Cause { at: Instant::now(), slot: i, up: false });
            stop(&mut slots[i]).await;
        }
        tokio::time::sleep(DOWN_FOR).await;
        for &i in &picked {
            causes.push(Cause { at: Instant::now(), slot: i, up: true });
            if let Err(e) = start(&mut slots[i]).await {
                causes.pop();
                eprintln!("[fleet-soak] could not restart {}: {e:#}", slots[i].name);
                restart_failures.push(format!("{}: {e:#}", slots[i].name));
            }
        }
        last_restart = Instant::now();
        tokio::time::sleep_until((round_start + ROUND).into()).await;
    }
    let (rss_start, _) = baseline.await??;
    // Time for the last restarts to be seen.
    tokio::time::sleep_until((last_restart + GRACE).max(churn_start + churn_for).into()).await;
    telemon.check()?;
    let (rss_end, hwm) = rss(telemon.pid).await?;
    let obs = lock();

    // Match every cause with the earliest unused seen transition of its target within the grace.
    let seen: Vec<&Seen> = obs.seen.iter().filter(|s| s.at > churn_start).collect();
    let mut used = vec![false; seen.len()];
    let mut missed = Vec::new();
    let same_target = |c: &Cause, s: &Seen| {
        let slot = &slots[c.slot];
        s.protocol == slot.kind.protocol()
            && match slot.kind {
                Kind::Mono => obs.agent(s) == Some(slot.n),
                _ => s.target == slot.name,
            }
    };
    for c in &causes {
        let found = seen.iter().enumerate().position(|(j, s)| {
            !used[j] && s.up == c.up && s.at >= c.at && s.at <= c.at + GRACE && same_target(c, s)
        });
        match found {
            Some(j) => used[j] = true,
            None => missed.push(*c),
        }
    }
    let unexpected: Vec<&Seen> = seen.iter().zip(&used).filter(|(_, u)| !**u).map(|(s, _)| *s).collect();

    // The report.
    let mut latencies: Vec<Duration> =
        obs.scrapes.iter().filter(|(at, _)| *at > churn_start).map(|(_, d)| *d).collect();
    latencies.sort();
    let scrape_failures = obs.failures.iter().filter(|(at, _)| *at > churn_start).count();
    let growth = (rss_end as f64 - rss_start as f64) / rss_start.max(1) as f64;
    let rss_ok = growth <= MAX_GROWTH;
    let count = |up: bool| causes.iter().filter(|c| c.up == up).count();
    let seen_count = |up: bool| seen.iter().filter(|s| s.up == up).count();
    let pass = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fleet soak: {total} targets ({} each of meter161/sys161, hmon/dyalog, smon, sysinfo/rvos, mono agents), \
         {} min, {rounds} rounds of {per_round} stopped for {DOWN_FOR:?} every {ROUND:?}, seed {seed}\n",
        args.per_kind, args.minutes
    );
    let _ = writeln!(out, "| measure | value |\n|---|---|");
    let _ = writeln!(
        out,
        "| telemon VmRSS after the warm-up ({warm_up:?} from its start, restarts included; median of \
         {RSS_SAMPLES} samples, 1 s apart) | {:.1} MiB |",
        mib(rss_start)
    );
    let _ = writeln!(
        out,
        "| telemon VmRSS at the end (the same) | {:.1} MiB ({:+.1}%, at most +{:.0}%: {}) |",
        mib(rss_end),
        growth * 100.0,
        MAX_GROWTH * 100.0,
        pass(rss_ok)
    );
    let _ = writeln!(out, "| telemon VmHWM | {:.1} MiB |", mib(hwm));
    let _ = writeln!(
        out,
        "| scrapes of /metrics | {} ({scrape_failures} failed), p50 {:.2} ms, p99 {:.2} ms |",
        latencies.len(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3
    );
    let _ = writeln!(
        out,
        "| targets up before the first restart | {up_at_start}/{total} after {all_up_after:.1?} |"
    );
    let _ = writeln!(
        out,
        "| targets up at the end | {}/{total} ({} listed: down Mono names linger 10 min) |",
        obs.up_count(),
        obs.state.len()
    );
    let _ = writeln!(
        out,
        "| transitions | caused {} downs / {} ups, seen {} downs / {} ups, missed {} ({}) |",
        count(false),
        count(true),
        seen_count(false),
        seen_count(true),
        missed.len(),
        pass(missed.is_empty())
    );
    let _ = writeln!(out, "| unexpected transitions | {} |", unexpected.len());
    if !restart_failures.is_empty() {
        let _ = writeln!(out, "| sims that could not restart | {} |", restart_failures.len());
    }

    let _ = writeln!(
        out,
        "\n| protocol | sims | up at the end | caused downs | caused ups | seen downs | seen ups | missed | unexpected |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for kind in KINDS {
        let p = kind.protocol();
        let of = |c: &&Cause| slots[c.slot].kind == kind;
        let _ = writeln!(
            out,
            "| {p} ({}) | {} | {} | {} | {} | {} | {} | {} | {} |",
            kind.sim(),
            slots.iter().filter(|s| s.kind == kind).count(),
            obs.up_of(p),
            causes.iter().filter(of).filter(|c| !c.up).count(),
            causes.iter().filter(of).filter(|c| c.up).count(),
            seen.iter().filter(|s| s.protocol == p && !s.up).count(),
            seen.iter().filter(|s| s.protocol == p && s.up).count(),
            missed.iter().filter(of).count(),
            unexpected.iter().filter(|s| s.protocol == p).count()
        );
    }
    let _ = writeln!(
        out,
        "\nA cause is matched by a transition of its target within {GRACE:?}; a Mono agent's target is told by its \
         `{AGENT_ID_COUNTER}` counter (1000 + its number), since each connection is a new name."
    );
    let at = |t: Instant| t.saturating_duration_since(churn_start).as_secs_f64();
    let _ = writeln!(out, "\nmissed ({}):", missed.len());
    for c in &missed {
        let _ = writeln!(
            out,
            "  {} {} caused at +{:.1}s, not seen within {GRACE:?}",
            slots[c.slot].name,
            if c.up { "up" } else { "down" },
            at(c.at)
        );
    }
    let _ = writeln!(out, "unexpected ({}):", unexpected.len());
    for s in &unexpected {
        let agent = obs.agent(s).map(|n| format!(" (mono-agent-{n:02})")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} {}{agent} {} at +{:.1}s",
            s.protocol,
            s.target,
            if s.up { "up" } else { "down" },
            at(s.at)
        );
    }
    for f in &restart_failures {
        let _ = writeln!(out, "could not restart: {f}");
    }
    let failed = !rss_ok || !missed.is_empty() || !restart_failures.is_empty();
    let _ = writeln!(out, "\nresult: {}", pass(!failed));
    print!("{out}");
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_line_is_split_into_name_labels_and_value() {
        let (name, labels, value) =
            parse_line(r#"telemon_target_up{protocol="mono",target="a\"b\\c",x="1"} 0"#).unwrap();
        assert_eq!((name, value), ("telemon_target_up", "0"));
        assert_eq!(label(&labels, "protocol"), Some("mono"));
        assert_eq!(label(&labels, "target"), Some(r#"a"b\c"#));
        assert_eq!(label(&labels, "x"), Some("1"));
        assert!(parse_line("no_labels 1").is_none());
    }

    #[test]
    fn transitions_and_mono_agents_are_seen() {
        let mut obs = Observed::default();
        let t0 = Instant::now();
        let t = |s: u64| t0 + Duration::from_secs(s);
        let up =
            |p: &str, t: &str, v: u8| format!("telemon_target_up{{protocol=\"{p}\",target=\"{t}\"}} {v}\n");
        let id = |t: &str, n: usize| {
            format!(
                "mono_runtime{{target=\"{t}\",category=\"Mono JIT\",counter=\"Methods from AOT\"}} {}\n",
                AGENT_ID_BASE + n
            )
        };
        observe(&mut obs, &(up("hmon", "a", 0) + &up("mono", "mono/x:1", 1) + &id("mono/x:1", 7)), t(1));
        assert_eq!(obs.seen.len(), 1, "a new name that is up counts, a new one that is down does not");
        assert_eq!(obs.agent(&obs.seen[0]), Some(7));
        observe(
            &mut obs,
            &(up("hmon", "a", 1) + &up("mono", "mono/x:1", 0) + &up("mono", "mono/x:2", 0)),
            t(2),
        );
        let s = &obs.seen[1..];
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s.iter().any(|s| s.target == "a" && s.up && s.protocol == "hmon"));
        assert!(s.iter().any(|s| s.target == "mono/x:1" && !s.up && obs.agent(s) == Some(7)));
        observe(&mut obs, &up("mono", "mono/x:2", 1), t(3));
        assert!(obs.seen.last().is_some_and(|s| s.target == "mono/x:2" && s.up));
        assert_eq!(obs.state.len(), 1, "names no longer listed are forgotten");

        // Agent 9 reconnects from the port agent 7 had: the name's transitions from then on are agent 9's.
        observe(&mut obs, &(up("mono", "mono/x:1", 1)), t(4));
        observe(&mut obs, &(up("mono", "mono/x:1", 1) + &id("mono/x:1", 9)), t(5));
        observe(&mut obs, &(up("mono", "mono/x:1", 0)), t(6));
        let again: Vec<_> = obs.seen.iter().filter(|s| s.target == "mono/x:1" && s.at >= t(4)).collect();
        assert_eq!(again.len(), 2, "{again:?}");
        assert!(again.iter().all(|s| obs.agent(s) == Some(9)), "{again:?}");
        assert_eq!(obs.agent(&obs.seen[0]), Some(7), "the first connection stays agent 7's");
        // Agent 9 again, from the same port, its number a scrape after the up.
        observe(&mut obs, &(up("mono", "mono/x:1", 1)), t(7));
        observe(&mut obs, &(up("mono", "mono/x:1", 1) + &id("mono/x:1", 9)), t(8));
        observe(&mut obs, &(up("mono", "mono/x:1", 0)), t(9));
        let third: Vec<_> = obs.seen.iter().filter(|s| s.target == "mono/x:1" && s.at >= t(7)).collect();
        assert_eq!(third.len(), 2, "{third:?}");
        assert!(third.iter().all(|s| obs.agent(s) == Some(9)), "{third:?}");
        assert_eq!(obs.agents["mono/x:1"].len(), 3, "three connections");
    }

    #[test]
    fn a_pick_is_distinct_and_bounded() {
        let mut rng = Rng(3);
        let mut p = pick(&mut rng, (0..200).collect(), 20);
        assert_eq!(p.len(), 20);
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), 20);
        assert_eq!(pick(&mut rng, vec![1, 2], 5).len(), 2);
    }

    #[test]
    fn percentiles_of_a_few_values() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&d, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
