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

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use fleet_soak::{
    config, match_causes, memory, mib, observe, percentile, pick, start, stop, Cause, Kind, Observed, Place,
    Rng, Seen, Slot, AGENT_ID_COUNTER, KINDS,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

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
/// The largest RSS growth after the warm-up that passes.
const MAX_GROWTH: f64 = 0.10;
/// VmRSS samples (a second apart) whose median is the RSS at the start and at the end.
const RSS_SAMPLES: usize = 5;

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
    std::fs::write(&config_path, config("fleet-soak", &slots, mono_listen))?;
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

    let seen: Vec<&Seen> = obs.seen.iter().filter(|s| s.at > churn_start).collect();
    let (missed, unexpected) = match_causes(&obs, slots, &causes, churn_start, GRACE);

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
