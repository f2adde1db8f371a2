//! The dial-in listeners (`[[mono_listen]]`, `[[hmon_listen]]`) under stress: bursts, names,
//! floods (issue 18). Loopback only, bounded in count and time.

use std::time::Duration;

use telemon::fleet::config::FleetConfig;
use telemon::fleet::{Fleet, FleetSnapshot, Value};

mod support;

fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

/// Waits (with a safety-net deadline) until `ok` holds for the fleet's snapshot.
async fn until(fleet: &Fleet, what: &str, mut ok: impl FnMut(&FleetSnapshot) -> bool) -> FleetSnapshot {
    let mut changed = fleet.changed();
    support::within(what, async {
        loop {
            let snap = fleet.snapshot();
            if ok(&snap) {
                return snap;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), changed.changed()).await;
        }
    })
    .await
}

fn working_set(snap: &FleetSnapshot) -> Option<f64> {
    let t = snap.targets.first()?;
    t.series.iter().find(|s| &*s.family == "mono_runtime_bytes").and_then(|s| match s.value {
        Value::Number(v) => Some(v),
        _ => None,
    })
}

/// Issue 18: the fleet's Mono collector keeps exact values through a burst of empty samples (on a
/// current-thread runtime the reader decodes a whole buffer before the collector runs).
#[tokio::test(flavor = "current_thread")]
async fn the_mono_collector_keeps_exact_values_through_a_burst() {
    use tokio::io::AsyncWriteExt;
    let addr = free_addr();
    let config =
        FleetConfig::parse("t.toml", &format!("[[mono_listen]]\nname = \"m\"\nlisten = \"{addr}\"\n"))
            .unwrap();
    let fleet = Fleet::start(&config).await.unwrap();
    let mut agent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    for write in support::mono_burst() {
        agent.write_all(&write).await.unwrap();
    }
    until(&fleet, "the last value", |s| working_set(s) == Some(104.0)).await;
    fleet.shutdown().await;
}

fn dyalog_host() -> String {
    std::env::var("HOSTNAME").unwrap_or_else(|_| "dyalog-sim".to_owned())
}

/// Issue 18: two interpreters with one Host fact dial in at once; they get two names, atomically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_interpreters_with_one_host_get_two_names() {
    let addr = free_addr();
    let config = FleetConfig::parse(
        "t.toml",
        &format!("[[hmon_listen]]\nname = \"d\"\nlisten = \"{addr}\"\npoll = \"200ms\"\n"),
    )
    .unwrap();
    let fleet = Fleet::start(&config).await.unwrap();
    let shutdown = sim_common::Shutdown::new();
    for _ in 0..2 {
        let sim = dyalog_sim::Sim::new(dyalog_sim::Config::default());
        tokio::spawn(sim.poll(addr.clone(), shutdown.clone()));
    }
    let snap =
        until(&fleet, "two interpreters up", |s| s.targets.iter().filter(|t| t.is_up()).count() == 2).await;
    let names: Vec<&str> = snap.targets.iter().map(|t| &*t.name).collect();
    let by_host = format!("d/{}", dyalog_host());
    assert!(names.contains(&by_host.as_str()), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("d/127.0.0.1:")),
        "the second is named by its address: {names:?}"
    );
    shutdown.cancel();
    fleet.shutdown().await;
}

/// What one flood connection does.
#[derive(Debug, Clone, Copy)]
enum Visit {
    /// A Mono Hello, then close.
    MonoHello,
    /// An HMON interpreter's handshake, then close.
    HmonHandshake,
    /// Random bytes to either listener, then close.
    Garbage,
    /// Connect to the Mono listener and say nothing until telemon closes (its `hello_timeout`).
    Silent,
}

fn mono_hello() -> Vec<u8> {
    support::mono_burst().remove(0)[..].split_at(mono_hello_len()).0.to_vec()
}

fn mono_hello_len() -> usize {
    let hello = mono_counters::AgentMessage::Hello(mono_counters::Hello {
        version: mono_counters::PROTOCOL_VERSION,
        headers: vec![mono_counters::Header {
            category: mono_counters::Category::System,
            name: "Working Set".into(),
            kind: mono_counters::CounterType::Long,
            unit: mono_counters::Unit::Bytes,
            variance: mono_counters::Variance::Variable,
            index: 0,
        }],
    });
    let mut out = bytes::BytesMut::new();
    mono_counters::encode_agent_message(&hello, &mut out).unwrap();
    out.len()
}

fn hmon_handshake() -> Vec<u8> {
    use hmon::proto::{Handshake, Role};
    let mut hs = Handshake::new(
        Role::Interpreter(hmon::HandshakeOrder::Pipelined),
        std::time::Instant::now(),
        Duration::from_secs(5),
    );
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = hs.poll_transmit() {
        hmon::encode_payload::<hmon::Response>(&hmon::Payload::Handshake(frame), &mut out).unwrap();
    }
    out.to_vec()
}

/// One flood connection from `source` (port 0).
async fn visit(
    kind: Visit,
    mono: std::net::SocketAddr,
    hmon: std::net::SocketAddr,
    source: std::net::IpAddr,
    n: u64,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let to = match kind {
        Visit::MonoHello | Visit::Silent => mono,
        Visit::HmonHandshake => hmon,
        Visit::Garbage if n % 2 == 0 => mono,
        Visit::Garbage => hmon,
    };
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if socket.bind(std::net::SocketAddr::new(source, 0)).is_err() {
        return;
    }
    let Ok(mut stream) = socket.connect(to).await else { return };
    let bytes = match kind {
        Visit::MonoHello => mono_hello(),
        Visit::HmonHandshake => hmon_handshake(),
        Visit::Garbage => {
            (0..64u64).map(|i| (n.wrapping_mul(0x9e37_79b9).wrapping_add(i * 31) >> 3) as u8).collect()
        }
        Visit::Silent => {
            let mut sink = [0u8; 256];
            // telemon closes it after hello_timeout (or refuses it at once).
            let _ = tokio::time::timeout(Duration::from_secs(10), async {
                while stream.read(&mut sink).await.is_ok_and(|k| k > 0) {}
            })
            .await;
            return;
        }
    };
    let _ = stream.write_all(&bytes).await;
}

/// The body of `GET path` (HTTP/1.0: no chunking, the server closes).
async fn http_get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await.ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.ok()?.ok()?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then(|| body.to_owned())
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The flood of issue 18, bounded: `FLOOD` connections in turn a Mono Hello, an HMON handshake
/// and garbage (every 30th a silent one), 32 at a time, each from its own loopback address
/// (127.1.x.y, so that the per-source rate limit does not hide the target bound), while a genuine
/// agent and a genuine interpreter connect from 127.0.0.1.
///
/// Bounds checked: targets <= 2 x `max_targets` (100) + the two genuine ones' possible second
/// names; telemon's RSS <= 64 MiB; the `/metrics` page <= 512 KiB.
///
/// `EDGES_FLOOD_BIN=path EDGES_FLOOD_LEGACY=1` runs the same flood against another build (with a
/// config without the new keys) and only prints the figures: how the "before" figures were taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_dial_in_connections_stays_bounded() {
    const FLOOD: u64 = 3000;
    const MAX_TARGETS: usize = 100;
    let legacy = std::env::var_os("EDGES_FLOOD_LEGACY").is_some();
    let bin = std::env::var("EDGES_FLOOD_BIN").unwrap_or_else(|_| support::TELEMON.to_owned());
    let (mono, hmon, http) = (free_addr(), free_addr(), free_addr());
    let limits =
        if legacy { String::new() } else { format!("max_targets = {MAX_TARGETS}\nhello_timeout = \"1s\"\n") };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("t.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nlisten = \"{http}\"\n[[mono_listen]]\nname = \"m\"\nlisten = \"{mono}\"\n{limits}\
             [[hmon_listen]]\nname = \"h\"\nlisten = \"{hmon}\"\n{limits}"
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(&bin)
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    support::within("telemon to serve", async {
        while http_get(&http, "/healthz").await.is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await; // polling for readiness, with a deadline
        }
    })
    .await;
    let rss_before = rss_kib(pid);
    let (mono_sa, hmon_sa): (std::net::SocketAddr, std::net::SocketAddr) =
        (mono.parse().unwrap(), hmon.parse().unwrap());
    let shutdown = sim_common::Shutdown::new();
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..FLOOD {
        if n == FLOOD / 2 {
            // The genuine ones, from 127.0.0.1, in the middle of the flood.
            let mut agent =
                mono_agent_sim::AgentConfig::from_options(&format!("address={mono},interval=200")).unwrap();
            agent.backoff = mono_agent_sim::Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_millis(500),
            };
            tokio::spawn(mono_agent_sim::run(agent, shutdown.clone()));
            let sim = dyalog_sim::Sim::new(dyalog_sim::Config::default());
            tokio::spawn(sim.poll(hmon.clone(), shutdown.clone()));
        }
        let kind = match n % 3 {
            _ if n % 30 == 29 => Visit::Silent,
            0 => Visit::MonoHello,
            1 => Visit::HmonHandshake,
            _ => Visit::Garbage,
        };
        let source = std::net::IpAddr::from([127, 1, (n / 250) as u8, (n % 250 + 1) as u8]);
        while tasks.len() >= 32 {
            tasks.join_next().await;
        }
        tasks.spawn(visit(kind, mono_sa, hmon_sa, source, n));
    }
    support::within("the flood to end", async { while tasks.join_next().await.is_some() {} }).await;
    let flood_secs = started.elapsed().as_secs_f64();

    // The genuine agent and interpreter are targets, up and scraped.
    let host = dyalog_host();
    let genuine = |m: &str| {
        m.lines().any(|l| {
            l.starts_with("telemon_target_up{protocol=\"mono\",target=\"m/127.0.0.1:") && l.ends_with(" 1")
        }) && m.contains(&format!("telemon_target_up{{protocol=\"hmon\",target=\"h/{host}\"}} 1"))
            && m.contains("mono_agent_info{")
    };
    let page = support::within("the genuine agent and interpreter to be scraped", async {
        loop {
            if let Some(m) = http_get(&http, "/metrics").await {
                if legacy || genuine(&m) {
                    return m;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await; // polling for the event, with a deadline
        }
    })
    .await;
    let targets = page.lines().filter(|l| l.starts_with("telemon_target_up{")).count();
    let rss = rss_kib(pid);
    eprintln!(
        "flood: {FLOOD} connections in {flood_secs:.1} s; targets {targets}; RSS {rss_before} KiB -> {rss} KiB; \
         /metrics {} bytes",
        page.len()
    );
    shutdown.cancel();
    let _ = child.kill().await;
    if legacy {
        return;
    }
    assert!(targets <= 2 * MAX_TARGETS + 2, "targets {targets}");
    assert!(rss <= 64 * 1024, "RSS {rss} KiB");
    assert!(page.len() <= 512 * 1024, "/metrics {} bytes", page.len());
    let refused: f64 = page
        .lines()
        .filter(|l| l.starts_with("telemon_listener_refused_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(refused > 0.0, "refusals are counted:\n{page}");
}
