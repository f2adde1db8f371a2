//! `fleet-floor`: the floor of `cargo xtask fleet-bench`.
//!
//! It reads the targets of one protocol from the same config telemon gets, and polls them as
//! telemon's collectors do (same period, same requests, same client settings, and the same
//! `[serve] wakeup_slack` on a current-thread runtime), with the protocol crates alone: each decoded
//! message is thrown away (no store, no publish, no render). Its CPU time
//! is what the protocol work costs; telemon's CPU divided by it is what the fleet layer adds.
//!
//! Every second it prints `up K decoded M` (targets connected now, messages decoded so far), so a
//! caller knows when every target is up.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use futures::StreamExt;
use serde::Deserialize;

/// How long a connection (and its handshake) may take: telemon's `CONNECT_TIMEOUT`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before connecting again after a session ended.
const RETRY: Duration = Duration::from_secs(1);
/// telemon's default `[serve] wakeup_slack`.
const WAKEUP_SLACK: Duration = Duration::from_millis(5);

/// Poll one protocol's targets like telemon, decode, and throw the result away.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// meter161, hmon, smon, sysinfo or mono.
    #[arg(long)]
    protocol: String,
    /// A telemon config (TOML): its `[[meter161]]`, `[[hmon]]`, `[[smon]]`, `[[sysinfo]]` or
    /// `[[mono_listen]]` blocks are the targets.
    #[arg(long)]
    config: PathBuf,
}

/// The part of telemon's config that names targets.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Config {
    serve: Serve,
    meter161: Vec<Target>,
    hmon: Vec<Target>,
    smon: Vec<Target>,
    sysinfo: Vec<Target>,
    mono_listen: Vec<Target>,
}

/// `[serve]`: the one setting of telemon's own that the floor follows.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Serve {
    wakeup_slack: Option<String>,
}

/// One block, with the fields of every protocol (each uses its own).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Target {
    dir: Option<PathBuf>,
    connect: Option<String>,
    listen: Option<String>,
    interval: Option<String>,
    poll: Option<String>,
    every: Option<String>,
}

/// What every target task reports.
#[derive(Debug, Default)]
struct Counts {
    up: AtomicUsize,
    decoded: AtomicU64,
}

impl Counts {
    fn decoded(&self, item: impl Sized) {
        black_box(item);
        self.decoded.fetch_add(1, Relaxed);
    }
}

/// Counts a connected session while it lives.
struct Up(Arc<Counts>);

impl Up {
    fn new(counts: &Arc<Counts>) -> Up {
        counts.up.fetch_add(1, Relaxed);
        Up(counts.clone())
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        self.0.up.fetch_sub(1, Relaxed);
    }
}

fn duration(text: &Option<String>, default: Duration) -> Result<Duration> {
    match text {
        Some(t) => humantime::parse_duration(t).with_context(|| format!("bad duration {t:?}")),
        None => Ok(default),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let config: Config =
        toml::from_str(&text).with_context(|| format!("parsing {}", args.config.display()))?;
    // Wakes at most once per slack, as telemon's runtime does (telemon_fleet::pace).
    let slack = duration(&config.serve.wakeup_slack, WAKEUP_SLACK)?;
    let mut runtime = tokio::runtime::Builder::new_current_thread();
    runtime.enable_all();
    if !slack.is_zero() {
        // The earliest time the thread may park again without sleeping first.
        let next_park = std::sync::Mutex::new(None::<std::time::Instant>);
        runtime.on_thread_park(move || {
            let mut next = next_park.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(pause) = next.and_then(|at| at.checked_duration_since(std::time::Instant::now())) {
                std::thread::sleep(pause);
            }
            *next = Some(std::time::Instant::now() + slack);
        });
    }
    runtime.build()?.block_on(poll_all(args, config))
}

async fn poll_all(args: Args, config: Config) -> Result<()> {
    let counts = Arc::new(Counts::default());
    let mut tasks = tokio::task::JoinSet::new();
    let second = Duration::from_secs(1);
    match args.protocol.as_str() {
        "meter161" => {
            for t in config.meter161 {
                let dir = t.dir.context("a [[meter161]] block without dir")?;
                tasks.spawn(meter161(
                    dir,
                    duration(&t.interval, Duration::from_millis(200))?,
                    counts.clone(),
                ));
            }
        }
        "hmon" => {
            for t in config.hmon {
                let addr = t.connect.context("a [[hmon]] block without connect")?;
                tasks.spawn(hmon(addr, duration(&t.poll, second)?, counts.clone()));
            }
        }
        "smon" => {
            for t in config.smon {
                tasks.spawn(smon(t.connect.context("a [[smon]] block without connect")?, counts.clone()));
            }
        }
        "sysinfo" => {
            for t in config.sysinfo {
                let addr = t.connect.context("a [[sysinfo]] block without connect")?;
                tasks.spawn(sysinfo(addr, duration(&t.every, second)?, counts.clone()));
            }
        }
        "mono" => {
            for t in config.mono_listen {
                let listen = t.listen.context("a [[mono_listen]] block without listen")?;
                let inspector = mono_counters::Inspector::bind(
                    &listen,
                    mono_counters::ClientConfig::default().request_timeout(CONNECT_TIMEOUT),
                )
                .await
                .with_context(|| format!("listening on {listen}"))?;
                tasks.spawn(mono(inspector, counts.clone()));
            }
        }
        other => bail!("no protocol {other:?}; known: meter161, hmon, smon, sysinfo, mono"),
    }
    if tasks.is_empty() {
        bail!("no {} targets in {}", args.protocol, args.config.display());
    }
    let mut tick = tokio::time::interval(second);
    loop {
        tick.tick().await;
        println!("up {} decoded {}", counts.up.load(Relaxed), counts.decoded.load(Relaxed));
    }
}

/// telemon's meter161 collector: one client per simulator, asking for the target's interval.
async fn meter161(dir: PathBuf, interval: Duration, counts: Arc<Counts>) {
    let path = meter161::socket_path(&dir);
    let config = meter161::ClientConfig::default().interval(interval).handshake_timeout(CONNECT_TIMEOUT);
    loop {
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, meter161::Client::connect_path(&path, &config));
        if let Ok(Ok(mut client)) = connect.await {
            let _up = Up::new(&counts);
            while let Some(item) = client.next().await {
                match item {
                    Ok(sample) => counts.decoded(sample),
                    Err(e) if e.is_fatal() => break,
                    Err(e) => drop(black_box(e)),
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// telemon's hmon collector: subscribe to every event, poll the default facts every `poll`, and
/// ask for the last known state with each polled facts (one at a time), all on one
/// [`hmon::Connection`] driven by the target's one task.
async fn hmon(addr: String, poll: Duration, counts: Arc<Counts>) {
    use hmon::{
        Event, EventKind, FactKind, GetFacts, GetLastKnownState, IdOrName, Incoming, Request, Response,
        Subscribe,
    };
    let lks = || Request::GetLastKnownState(GetLastKnownState::default());
    let config = hmon::ClientConfig {
        handshake_timeout: CONNECT_TIMEOUT,
        request_timeout: CONNECT_TIMEOUT.max(poll),
        reconnect: None,
        uid_prefix: "telemon-".to_owned(),
        ..hmon::ClientConfig::default()
    };
    // As telemon asks: the facts it exports polled, and Host (which does not change while an
    // interpreter runs) once per connection, after the poll starts.
    let facts: Vec<IdOrName> = [FactKind::AccountInformation, FactKind::Workspace, FactKind::ThreadCount]
        .iter()
        .map(|&k| k.into())
        .collect();
    let host = Request::GetFacts(GetFacts { facts: Some(vec![FactKind::Host.into()]), ..Default::default() });
    let events: Vec<IdOrName> = EventKind::ALL.iter().map(|&k| k.into()).collect();
    loop {
        let connect =
            tokio::time::timeout(CONNECT_TIMEOUT * 2, hmon::Connection::connect(&addr, config.clone()));
        if let Ok(Ok(mut conn)) = connect.await {
            let _up = Up::new(&counts);
            let subscribe =
                Request::Subscribe(Subscribe { events: Some(events.clone()), ..Default::default() });
            if conn.request(subscribe).await.is_ok()
                && conn.poll_facts(facts.clone(), Some(poll)).await.is_ok()
                && conn.request(host.clone()).await.is_ok()
            {
                // As telemon asks: GetLastKnownState with each polled Facts, or after a period and a
                // half without facts, then every period.
                let mut asking: Option<String> = None;
                let mut ask = std::pin::pin!(tokio::time::sleep(poll));
                loop {
                    tokio::select! {
                        incoming = conn.next() => match incoming {
                            Err(_) => break,
                            Ok(Incoming::Reply { uid, response }) => {
                                if asking.as_ref() == Some(&uid) {
                                    asking = None;
                                }
                                counts.decoded(response);
                            }
                            Ok(Incoming::Timeout { uid }) => {
                                if asking.as_ref() == Some(&uid) {
                                    asking = None;
                                }
                            }
                            Ok(Incoming::Event(Event::Message(Response::Facts(facts)))) => {
                                counts.decoded(facts);
                                if asking.is_none() {
                                    match conn.request(lks()).await {
                                        Ok(uid) => asking = Some(uid),
                                        Err(_) => break,
                                    }
                                    ask.as_mut().reset(tokio::time::Instant::now() + poll + poll / 2);
                                }
                            }
                            Ok(other) => counts.decoded(other),
                        },
                        () = &mut ask, if asking.is_none() => {
                            match conn.request(lks()).await {
                                Ok(uid) => asking = Some(uid),
                                Err(_) => break,
                            }
                            ask.as_mut().reset(tokio::time::Instant::now() + poll);
                        }
                    }
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// telemon's smon collector: read the stream's updates.
async fn smon(addr: String, counts: Arc<Counts>) {
    loop {
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&addr));
        if let Ok(Ok(stream)) = connect.await {
            let _up = Up::new(&counts);
            let mut reader = smon_codec::UpdateReader::new(stream, smon_codec::DecoderConfig::default());
            // As telemon's collector: updates borrowed from the decoder.
            loop {
                while let Some(update) = reader.next_buffered_ref() {
                    counts.decoded(update);
                }
                if !matches!(reader.fill().await, Some(Ok(()))) {
                    break;
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// telemon's sysinfo collector: every `every`, the seven reports in one pipelined batch.
async fn sysinfo(addr: String, every: Duration, counts: Arc<Counts>) {
    use sysinfo_wire::SysinfoCommand as C;
    const REPORTS: [C; 7] =
        [C::Ps, C::Memstat, C::Kstat, C::Channels, C::SchedLatency, C::IpcLatency, C::Watchdog];
    // As telemon's collector: a timeout of its own, and the seven reports in one pipelined batch a tick.
    let config = sysinfo_wire::ClientConfig {
        request_timeout: Duration::from_secs(5),
        ..sysinfo_wire::ClientConfig::default()
    };
    let endpoint = sysinfo_wire::Endpoint::Tcp(addr);
    loop {
        let connect =
            tokio::time::timeout(CONNECT_TIMEOUT, sysinfo_wire::Client::connect(&endpoint, config.clone()));
        if let Ok(Ok(mut client)) = connect.await {
            let _up = Up::new(&counts);
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // A failed batch leaves the connection in an unknown state: start over, as telemon does.
                let Ok(replies) = client.request_many(&REPORTS).await else { break };
                for reply in replies {
                    match reply {
                        Ok(response) => counts.decoded(response),
                        Err(e) => drop(black_box(e)),
                    }
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// telemon's mono listener: every agent that dials in is read until it leaves.
async fn mono(inspector: mono_counters::Inspector, counts: Arc<Counts>) {
    loop {
        let Ok((mut session, _peer)) = inspector.accept().await else { continue };
        let counts = counts.clone();
        tokio::spawn(async move {
            let _up = Up::new(&counts);
            while let Ok(Some(update)) = session.next_sample().await {
                counts.decoded(update);
            }
        });
    }
}
