//! `soak`: runs one sim binary for a few minutes under many concurrent clients and prints what the clients
//! that behave saw. `cargo xtask soak` builds the sims and runs this once per sim.
//!
//! The clients: 80% behave (they watch the sim like telemon does), 10% send garbage (random bytes, then a frame
//! that looks valid but carries a hostile length), 5% stop reading (and keep asking), 5% hang up in the middle
//! of a frame. Half-way through, the sim is stopped (SIGTERM) and started again on the same address: every
//! client reconnects. A sim process that ends on its own is a crash, counted and restarted.
//!
//! What is measured, for the clients that behave:
//! * samples delivered per second;
//! * p99 latency: for streams (sys161, hmon, smon) how late a sample came after the previous one, beyond the
//!   nominal interval; for rvos, a request's round trip;
//! * samples lost outside the restart: sys161's simulated clock must advance by exactly one interval per DATA
//!   line; hmon's polled facts and smon's samples are counted against the time connected; an rvOS request that
//!   fails while the sim is up is lost;
//! * the sim's peak RSS (sampled every 100 ms from /proc).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;

/// The sims a soak can drive (mono-agent-sim is a client of the inspector, not a server: it has no clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    Sys161,
    Dyalog,
    Smon,
    Rvos,
}

#[derive(Debug, Parser)]
#[command(about = "Soak one sim under many clients, some hostile, with a restart in the middle")]
struct Args {
    /// Which sim.
    #[arg(value_enum)]
    sim: Kind,
    /// The sim's binary (built by `cargo xtask soak`).
    #[arg(long)]
    bin: PathBuf,
    /// How long to run.
    #[arg(long, default_value_t = 2.0)]
    minutes: f64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Where the sim's log goes.
    #[arg(long, default_value = "target/soak")]
    logs: PathBuf,
    /// Print the result as one JSON object too.
    #[arg(long)]
    json: bool,
}

/// The nominal sample interval of the clients that behave.
fn interval(kind: Kind) -> Duration {
    match kind {
        Kind::Sys161 => Duration::from_millis(100),
        Kind::Dyalog | Kind::Smon | Kind::Rvos => Duration::from_secs(1),
    }
}

/// Where the sim listens.
#[derive(Debug, Clone)]
enum Addr {
    Tcp(String),
    Dir(PathBuf),
}

/// What every client adds to.
#[derive(Debug, Default)]
struct Tally {
    delivered: AtomicU64,
    lost: AtomicU64,
    /// Latencies in microseconds, of the clients that behave.
    latencies: Mutex<Vec<u32>>,
    /// Whether the sim is up (cleared during the restart, so failures then are not losses).
    up: AtomicBool,
    /// Bumped at each restart: a client whose session spans one does not count its losses.
    epoch: AtomicU64,
}

impl Tally {
    fn latency(&self, d: Duration) {
        let mut l = self.latencies.lock().expect("tally lock");
        if l.len() < 4_000_000 {
            l.push(d.as_micros().min(u32::MAX as u128) as u32);
        }
    }

    fn lost_in(&self, epoch: u64, n: u64) {
        if n > 0 && self.up.load(Relaxed) && self.epoch.load(Relaxed) == epoch {
            self.lost.fetch_add(n, Relaxed);
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.logs)?;
    let dir = tempfile::tempdir()?;
    let addr = match args.sim {
        Kind::Sys161 => Addr::Dir(dir.path().to_path_buf()),
        _ => Addr::Tcp(free_port()?),
    };
    let log = args.logs.join(format!("{:?}.log", args.sim).to_lowercase());
    let mut sim = SimProcess::start(&args.bin, args.sim, &addr, &log).await?;
    let tally = Arc::new(Tally::default());
    tally.up.store(true, Relaxed);
    let (stop_tx, stop) = watch::channel(false);

    let mut clients = tokio::task::JoinSet::new();
    for i in 0..args.clients {
        let role = match i % 20 {
            0 | 1 => Role::Garbage,
            2 => Role::StopReading,
            3 => Role::MidFrame,
            _ => Role::Behave,
        };
        clients.spawn(client(role, args.sim, addr.clone(), tally.clone(), stop.clone(), i as u64));
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(5)).await; // spread the connection storm a little
        }
    }

    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let started = Instant::now();
    let mut restarted = false;
    let mut crashes = 0u64;
    let mut peak_rss = 0u64;
    let mut restart_took = Duration::ZERO;
    let mut sampler = tokio::time::interval(Duration::from_millis(100));
    while started.elapsed() < total {
        sampler.tick().await;
        peak_rss = peak_rss.max(sim.rss_bytes());
        if let Some(status) = sim.exited()? {
            crashes += 1;
            eprintln!("soak: the sim ended on its own ({status}); restarting it");
            tally.up.store(false, Relaxed);
            tally.epoch.fetch_add(1, Relaxed);
            sim = SimProcess::start(&args.bin, args.sim, &addr, &log).await?;
            tally.up.store(true, Relaxed);
        }
        if !restarted && started.elapsed() >= total / 2 {
            restarted = true;
            let t = Instant::now();
            tally.up.store(false, Relaxed);
            tally.epoch.fetch_add(1, Relaxed);
            sim.stop().await?;
            sim = SimProcess::start(&args.bin, args.sim, &addr, &log).await?;
            tally.up.store(true, Relaxed);
            restart_took = t.elapsed();
        }
    }
    let _ = stop_tx.send(true);
    tally.up.store(false, Relaxed);
    let elapsed = started.elapsed();
    peak_rss = peak_rss.max(sim.rss_bytes());
    // Clients end at the stop signal; give the stubborn ones (blocked in a write) a moment, then abort.
    let _ =
        tokio::time::timeout(Duration::from_secs(5), async { while clients.join_next().await.is_some() {} })
            .await;
    clients.abort_all();
    if let Some(status) = sim.exited()? {
        crashes += 1;
        eprintln!("soak: the sim had ended on its own at the end ({status})");
    }
    sim.stop().await?;

    let mut latencies = std::mem::take(&mut *tally.latencies.lock().expect("tally lock"));
    latencies.sort_unstable();
    let p99 = latencies.get(latencies.len().saturating_sub(1) * 99 / 100).copied().unwrap_or(0);
    let delivered = tally.delivered.load(Relaxed);
    let row = Row {
        sim: format!("{:?}", args.sim).to_lowercase(),
        clients: args.clients,
        seconds: elapsed.as_secs_f64(),
        per_second: delivered as f64 / elapsed.as_secs_f64(),
        p99_ms: f64::from(p99) / 1000.0,
        peak_rss_mib: peak_rss as f64 / (1024.0 * 1024.0),
        crashes,
        lost: tally.lost.load(Relaxed),
        restart_ms: restart_took.as_millis() as u64,
    };
    println!("{}", row.text());
    if args.json {
        println!("{}", row.json());
    }
    if crashes > 0 || row.lost > 0 {
        bail!("{} crashes, {} samples lost outside the restart", crashes, row.lost);
    }
    Ok(())
}

/// One line of the table.
struct Row {
    sim: String,
    clients: usize,
    seconds: f64,
    per_second: f64,
    p99_ms: f64,
    peak_rss_mib: f64,
    crashes: u64,
    lost: u64,
    restart_ms: u64,
}

impl Row {
    /// The table's header, matching [`Row::text`].
    const HEADER: &'static str =
        "sim      clients  seconds  delivered/s  p99 ms  peak RSS MiB  crashes  lost  restart ms";

    fn text(&self) -> String {
        format!(
            "{}\n{:<8} {:>7}  {:>7.0}  {:>11.0}  {:>6.1}  {:>12.1}  {:>7}  {:>4}  {:>10}",
            Self::HEADER,
            self.sim,
            self.clients,
            self.seconds,
            self.per_second,
            self.p99_ms,
            self.peak_rss_mib,
            self.crashes,
            self.lost,
            self.restart_ms
        )
    }

    fn json(&self) -> String {
        format!(
            r#"{{"sim":"{}","clients":{},"seconds":{:.1},"delivered_per_second":{:.1},"p99_ms":{:.2},"peak_rss_mib":{:.1},"crashes":{},"lost":{},"restart_ms":{}}}"#,
            self.sim,
            self.clients,
            self.seconds,
            self.per_second,
            self.p99_ms,
            self.peak_rss_mib,
            self.crashes,
            self.lost,
            self.restart_ms
        )
    }
}

fn free_port() -> Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.to_string())
}

/// The sim's process.
struct SimProcess {
    child: tokio::process::Child,
    pid: u32,
}

impl SimProcess {
    async fn start(bin: &Path, kind: Kind, addr: &Addr, log: &Path) -> Result<SimProcess> {
        let mut cmd = tokio::process::Command::new(bin);
        match (kind, addr) {
            (Kind::Sys161, Addr::Dir(dir)) => cmd.arg("--dir").arg(dir),
            (Kind::Dyalog, Addr::Tcp(a)) => cmd.args(["--serve", a]),
            (Kind::Smon, Addr::Tcp(a)) => cmd.args(["--listen", a, "--interval", "1s"]),
            (Kind::Rvos, Addr::Tcp(a)) => cmd.args(["--listen", a]),
            _ => bail!("{kind:?} does not listen on {addr:?}"),
        };
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("the sim has a pid")?;
        let sim = SimProcess { child, pid };
        // Wait until it serves.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = match addr {
                Addr::Tcp(a) => TcpStream::connect(a).await.is_ok(),
                Addr::Dir(d) => UnixStream::connect(d.join(".sockets/meter")).await.is_ok(),
            };
            if ready {
                return Ok(sim);
            }
            if Instant::now() > deadline {
                bail!("{} did not start serving within 30 s", bin.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The resident set size now (0 once the process is gone).
    fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// SIGTERM, as Ctrl-C or a service manager would; SIGKILL if it has not ended after 10 s.
    async fn stop(mut self) -> Result<()> {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.pid.to_string()]).status();
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            eprintln!("soak: the sim did not stop on SIGTERM; killing it");
            self.child.kill().await?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum Role {
    Behave,
    Garbage,
    StopReading,
    MidFrame,
}

/// One client: plays its role, reconnecting after each session, until the stop signal.
async fn client(
    role: Role,
    kind: Kind,
    addr: Addr,
    tally: Arc<Tally>,
    mut stop: watch::Receiver<bool>,
    seed: u64,
) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    while !*stop.borrow() {
        let session = async {
            match role {
                Role::Behave => behave(kind, &addr, &tally).await,
                Role::Garbage => garbage(kind, &addr, &mut rng).await,
                Role::StopReading => stop_reading(kind, &addr).await,
                Role::MidFrame => mid_frame(kind, &addr, &mut rng).await,
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = session => {}
        }
        // Between sessions (after a hang-up, a restart, or a hostile round): a short, jittered pause.
        let pause = Duration::from_millis(50 + rng.next() % 200);
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// A stream to the sim, TCP or Unix.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

async fn connect(addr: &Addr) -> std::io::Result<Box<dyn Stream>> {
    Ok(match addr {
        Addr::Tcp(a) => Box::new(TcpStream::connect(a).await?),
        Addr::Dir(d) => Box::new(UnixStream::connect(d.join(".sockets/meter")).await?),
    })
}

/// A client that behaves, for one session (until the connection ends or fails).
async fn behave(kind: Kind, addr: &Addr, tally: &Tally) {
    let epoch = tally.epoch.load(Relaxed);
    let nominal = interval(kind);
    match kind {
        Kind::Sys161 => {
            let Ok(mut stream) = connect(addr).await else { return };
            let nanos = nominal.as_nanos() as u64;
            if stream.write_all(format!("INTERVAL {nanos}\r\n").as_bytes()).await.is_err() {
                return;
            }
            let mut lines = BufReader::new(stream).lines();
            let (mut previous, mut settled, mut last_arrival) = (None::<u64>, false, Instant::now());
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(nsec) =
                    line.strip_prefix("DATA ").and_then(|r| r.split(' ').next()?.parse::<u64>().ok())
                else {
                    continue;
                };
                let now = Instant::now();
                tally.delivered.fetch_add(1, Relaxed);
                if let Some(prev) = previous {
                    let step = nsec.saturating_sub(prev);
                    // The new interval takes effect after the tick sys161 had already scheduled.
                    if settled {
                        tally.lost_in(epoch, (step / nanos).saturating_sub(1));
                        tally.latency(now.duration_since(last_arrival).saturating_sub(nominal));
                    }
                    settled |= step == nanos;
                }
                previous = Some(nsec);
                last_arrival = now;
            }
        }
        Kind::Dyalog => {
            let Addr::Tcp(a) = addr else { return };
            let Ok((client, events)) = hmon::Client::connect(a.clone(), hmon::ClientConfig::default()).await
            else {
                return;
            };
            if client.poll_facts([hmon::FactKind::ThreadCount], Some(nominal)).await.is_err() {
                return;
            }
            let samples = events.map(|e| matches!(e, hmon::Event::Message(hmon::Response::Facts(_))));
            counted_stream(tally, epoch, nominal, samples).await;
        }
        Kind::Smon => {
            let Addr::Tcp(a) = addr else { return };
            let Ok(stream) = TcpStream::connect(a).await else { return };
            let reader = smon_codec::UpdateReader::new(stream, Default::default());
            let samples = Box::pin(futures::stream::unfold(reader, |mut reader| async move {
                let is_sample = match reader.next().await? {
                    Ok(smon_codec::Update::Value { name, .. }) => &*name == "smon.time",
                    Ok(_) => false,
                    Err(_) => return None,
                };
                Some((is_sample, reader))
            }));
            counted_stream(tally, epoch, nominal, samples).await;
        }
        Kind::Rvos => {
            let Addr::Tcp(a) = addr else { return };
            let endpoint = sysinfo_wire::Endpoint::Tcp(a.clone());
            let Ok(mut client) = sysinfo_wire::Client::connect(&endpoint, Default::default()).await else {
                return;
            };
            let mut ticker = tokio::time::interval(nominal);
            loop {
                ticker.tick().await;
                let t = Instant::now();
                match client.request(sysinfo_wire::SysinfoCommand::Kstat).await {
                    Ok(_) => {
                        tally.delivered.fetch_add(1, Relaxed);
                        tally.latency(t.elapsed());
                    }
                    Err(_) => {
                        tally.lost_in(epoch, 1);
                        return;
                    }
                }
            }
        }
    }
}

/// Counts the samples of a stream against the time connected: one per `nominal` interval, give or take the
/// one at each end. `samples` yields `Some(true)` for a sample, `Some(false)` for anything else.
async fn counted_stream(
    tally: &Tally,
    epoch: u64,
    nominal: Duration,
    mut samples: impl futures::Stream<Item = bool> + Unpin,
) {
    let (mut first, mut last, mut count) = (None::<Instant>, Instant::now(), 0u64);
    while let Some(is_sample) = samples.next().await {
        if !is_sample {
            continue;
        }
        let now = Instant::now();
        tally.delivered.fetch_add(1, Relaxed);
        if first.is_some() {
            tally.latency(now.duration_since(last).saturating_sub(nominal));
        }
        first.get_or_insert(now);
        last = now;
        count += 1;
    }
    if let Some(first) = first {
        let expected = (last.duration_since(first).as_secs_f64() / nominal.as_secs_f64()).round() as u64 + 1;
        // A late tick can make two samples look like one interval apart: allow one either side.
        tally.lost_in(epoch, expected.saturating_sub(count + 1));
    }
}

/// Random bytes, then a frame that looks valid but announces a hostile length; then read a little and hang up.
async fn garbage(kind: Kind, addr: &Addr, rng: &mut Rng) {
    let Ok(mut stream) = connect(addr).await else { return };
    let mut junk = vec![0u8; 256 + (rng.next() % 3840) as usize];
    junk.iter_mut().for_each(|b| *b = rng.next() as u8);
    let hostile: Vec<u8> = match kind {
        // An INTERVAL line longer than sys161's 128-byte buffer, then one far over any line limit.
        Kind::Sys161 => [b"INTERVAL ".as_slice(), &[b'9'; 200], b"\r\n", &[b'x'; 8192], b"\r\n"].concat(),
        // A 4 GiB HMON frame.
        Kind::Dyalog => [0xff, 0xff, 0xff, 0xf0, b'H', b'M', b'O', b'N', b'['].to_vec(),
        // A host-transport message with 4 caps and a 65535-byte body (the limit is 1024).
        Kind::Rvos => {
            let mut f = vec![1, 0, 0, 0, 0];
            f.extend_from_slice(&[0; 8]);
            f.push(4);
            f.extend_from_slice(&[0; 16]);
            f.extend_from_slice(&[0xff, 0xff]);
            f
        }
        // smon-sim only writes; whatever a client sends is ignored.
        Kind::Smon => b"\xff\xff\xff\xfe".to_vec(),
    };
    let _ = stream.write_all(&junk).await;
    let _ = stream.write_all(&hostile).await;
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await;
}

/// Asks for as much as it can, then never reads again (until the sim cuts it).
async fn stop_reading(kind: Kind, addr: &Addr) {
    let Ok(mut stream) = connect(addr).await else { return };
    let asks: Vec<u8> = match kind {
        Kind::Sys161 => b"INTERVAL 10000\r\n".to_vec(),
        Kind::Dyalog => {
            let mut out = Vec::new();
            for payload in [
                &b"SupportedProtocols=2"[..],
                b"UsingProtocol=2",
                br#"["PollFacts",{"Facts":[1,2,3,4,5,6],"Interval":500}]"#,
                br#"["Subscribe",{"Events":[1,2,3,4]}]"#,
            ] {
                out.extend_from_slice(&(payload.len() as u32 + 8).to_be_bytes());
                out.extend_from_slice(b"HMON");
                out.extend_from_slice(payload);
            }
            out
        }
        Kind::Rvos => {
            // Eight sysinfo channels (1..=8 on a fresh connection), each asked for the whole trace.
            let connect = sysinfo_wire::BootRequest::ConnectService { name: "sysinfo".into() };
            let connect = sysinfo_wire::Message::encode(&connect).expect("a short request");
            let trace =
                sysinfo_wire::Message::encode(&sysinfo_wire::SysinfoCommand::Trace).expect("one byte");
            let mut out = Vec::new();
            for channel in [0; 8].into_iter().chain(1..=8) {
                let data = if channel == 0 { connect.data() } else { trace.data() };
                // The host transport's MESSAGE frame: kind, channel, sender pid, no caps, length, data.
                out.push(1);
                out.extend_from_slice(&u32::to_le_bytes(channel));
                out.extend_from_slice(&[0; 8]);
                out.push(0);
                out.extend_from_slice(&(data.len() as u16).to_le_bytes());
                out.extend_from_slice(data);
            }
            out
        }
        Kind::Smon => Vec::new(),
    };
    if stream.write_all(&asks).await.is_err() {
        return;
    }
    // Hold the connection for a while, reading nothing (the sim may cut it meanwhile), then start over.
    tokio::time::sleep(Duration::from_secs(20)).await;
}

/// Sends half a frame (or reads half a reply) and hangs up.
async fn mid_frame(kind: Kind, addr: &Addr, rng: &mut Rng) {
    let Ok(mut stream) = connect(addr).await else { return };
    let half: &[u8] = match kind {
        Kind::Sys161 => b"INTERVAL 5000",
        Kind::Dyalog => b"\x00\x00\x00\x1cHMONSupported",
        Kind::Rvos => b"\x01\x00\x00\x00\x00\x00\x00",
        Kind::Smon => b"",
    };
    let _ = stream.write_all(half).await;
    let mut buf = vec![0u8; 1 + (rng.next() % 100) as usize];
    let _ = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
}

/// xorshift64: plenty for junk bytes and pauses.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
