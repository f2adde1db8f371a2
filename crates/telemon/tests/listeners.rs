//! telemon's listeners under stress (issue 18): the dial-in ones (`[[mono_listen]]`,
//! `[[hmon_listen]]`: bursts, names, floods) and the HTTP one (idle connections). Loopback only,
//! bounded in count and time.

use std::time::Duration;

use telemon::config::Config;
use telemon_fleet::{Fleet, FleetSnapshot};

mod support;
use support::free_addr;

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
    t.series.iter().find(|s| s.family() == "mono_runtime_bytes").and_then(|s| s.number())
}

/// Issue 18: the fleet's Mono collector keeps exact values through a burst of empty samples (on a
/// current-thread runtime the reader decodes a whole buffer before the collector runs).
#[tokio::test(flavor = "current_thread")]
async fn the_mono_collector_keeps_exact_values_through_a_burst() {
    use tokio::io::AsyncWriteExt;
    let addr = free_addr().to_string();
    let config =
        Config::parse("t.toml", &format!("[[mono_listen]]\nname = \"m\"\nlisten = \"{addr}\"\n")).unwrap();
    let fleet = Fleet::start(&config.fleet).await.unwrap();
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

/// A fleet with one `[[hmon_listen]]` ("d", polling every 200 ms), and `n` simulated interpreters
/// dialling in to it at once.
async fn interpreters_dialling_in(n: usize) -> (Fleet, sim_common::Shutdown) {
    let addr = free_addr().to_string();
    let config = Config::parse(
        "t.toml",
        &format!("[[hmon_listen]]\nname = \"d\"\nlisten = \"{addr}\"\npoll = \"200ms\"\n"),
    )
    .unwrap();
    let fleet = Fleet::start(&config.fleet).await.unwrap();
    let shutdown = sim_common::Shutdown::new();
    for _ in 0..n {
        let sim = dyalog_sim::Sim::new(dyalog_sim::Config::default());
        tokio::spawn(sim.poll(addr.clone(), shutdown.clone()));
    }
    (fleet, shutdown)
}

/// Issue 18: two interpreters with one Host fact dial in at once; they get two names, atomically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_interpreters_with_one_host_get_two_names() {
    let (fleet, shutdown) = interpreters_dialling_in(2).await;
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

/// A dialled-in interpreter (POLL mode) is collected like a served one: its polled facts, its last
/// known state, its notifications counted by event, and its Host fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_interpreter_gets_its_facts_state_and_events_collected() {
    let (fleet, shutdown) = interpreters_dialling_in(1).await;
    let has = |s: &FleetSnapshot, family: &str, counted: bool| {
        s.targets
            .iter()
            .flat_map(|t| t.series.iter())
            .any(|x| x.family() == family && (!counted || x.number().is_some_and(|v| v >= 1.0)))
    };
    until(&fleet, "facts, state and a counted event", |s| {
        has(s, "dyalog_workspace_used_bytes", false)
            && has(s, "dyalog_last_known_state_timestamp_seconds", false)
            && has(s, "dyalog_events_total", true)
            // From the Host fact asked when it was admitted.
            && has(s, "dyalog_interpreter_info", false)
    })
    .await;
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
    let addr = addr.parse().ok()?;
    let answer = tokio::time::timeout(Duration::from_secs(10), support::http_get(addr, path, &[])).await;
    answer.ok()?.ok().map(|(_, body)| body)
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
    let (mono, hmon, http) = (free_addr().to_string(), free_addr().to_string(), free_addr().to_string());
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
    // Each listener says how many targets it holds: the targets on the page are the listeners' (live and
    // remembered), and no listener holds more than its max_targets.
    let held: Vec<u64> = page
        .lines()
        .filter(|l| l.starts_with("telemon_listener_targets{listener="))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(held.len(), 2, "{page}");
    assert!(held.iter().all(|&n| n as usize <= MAX_TARGETS), "{held:?}");
    assert_eq!(held.iter().sum::<u64>() as usize, targets, "{page}");
    // The garbage never completes a handshake (the agents that left are forgotten to make room: no `limit`).
    assert!(
        page.lines().any(|l| l.starts_with("telemon_listener_refused_total{")
            && l.contains("reason=\"handshake_timeout\"}")
            && !l.ends_with(" 0")),
        "handshake refusals are counted:\n{page}"
    );
}

/// Starts a fake interpreter in SERVE mode on `addr`.
async fn interpreter_on(addr: &str) -> sim_common::Shutdown {
    let shutdown = sim_common::Shutdown::new();
    let listener = support::within("the port to be free again", async {
        loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => return l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await, // polling, with a deadline
            }
        }
    })
    .await;
    tokio::spawn(dyalog_sim::run(listener, dyalog_sim::Config::default(), shutdown.clone()));
    shutdown
}

/// Issue 18, part 2: idle HTTP connections up to the cap and past it, while the one target's
/// interpreter restarts, with telemon's open-file limit at 256. HTTP may hold at most
/// (256 - 64) / 4 = 48 connections; the rest are refused at once and counted, idle ones are
/// closed after `idle_timeout`, scrapes still answer and the target comes back up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http_connections_cannot_take_the_targets_descriptors() {
    const IDLE: usize = 300;
    let bin = std::env::var("EDGES_FLOOD_BIN").unwrap_or_else(|_| support::TELEMON.to_owned());
    let (http, dyalog) = (free_addr().to_string(), free_addr().to_string());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("t.toml");
    let idle_timeout =
        if std::env::var_os("EDGES_FLOOD_LEGACY").is_some() { "" } else { "idle_timeout = \"2s\"\n" };
    std::fs::write(
        &config,
        format!("[serve]\nlisten = \"{http}\"\n{idle_timeout}[[hmon]]\nname = \"apl\"\nconnect = \"{dyalog}\"\npoll = \"200ms\"\n"),
    )
    .unwrap();
    let mut first = interpreter_on(&dyalog).await;
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", "ulimit -n 256 && exec \"$0\" serve --config \"$1\"", &bin, config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let up = "telemon_target_up{protocol=\"hmon\",target=\"apl\"} 1";
    let scrape_until = |what: &'static str, ok: Box<dyn Fn(&str) -> bool + Send>| {
        let http = http.clone();
        support::within(what, async move {
            loop {
                if let Some(m) = http_get(&http, "/metrics").await {
                    if ok(&m) {
                        return m;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await; // polling for the event, with a deadline
            }
        })
    };
    scrape_until("the target up", Box::new(move |m| m.contains(up))).await;

    // Idle connections, up to the cap and far past it; none sends a request.
    let mut idle = Vec::new();
    for _ in 0..IDLE {
        if let Ok(s) = tokio::net::TcpStream::connect(&http).await {
            idle.push(s);
        }
    }
    // The interpreter restarts meanwhile.
    first.cancel();
    scrape_until("the target down", Box::new(move |m| !m.contains(up))).await;
    first = interpreter_on(&dyalog).await;
    let m = scrape_until(
        "the target up again",
        Box::new(move |m| {
            m.contains(up) && m.contains("telemon_target_connects_total{protocol=\"hmon\",target=\"apl\"} 2")
        }),
    )
    .await;
    let refused = m
        .lines()
        .find_map(|l| l.strip_prefix("telemon_http_refused_connections_total "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    eprintln!("idle: {} idle connections held; {refused} refused", idle.len());
    assert!(refused > 0.0, "connections past the cap are refused and counted");
    // Every idle connection is closed by telemon: refused at once, or after idle_timeout.
    support::within("the idle connections to be closed", async {
        use tokio::io::AsyncReadExt;
        for s in &mut idle {
            let mut buf = [0u8; 64];
            while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        }
    })
    .await;
    first.cancel();
    let _ = child.kill().await;
}

#[test]
fn the_http_cap_is_bounded_by_a_share_of_the_open_file_limit() {
    use telemon::http::HttpLimits;
    let config = Config::parse("t.toml", "[serve]\nmax_connections = 300\nidle_timeout = \"3s\"\n").unwrap();
    let at = |files| HttpLimits::new(&config.serve, files).max_connections;
    assert_eq!(at(20_000), 300, "the configured cap when descriptors are plenty");
    assert_eq!(at(1024), 240, "(1024 - 64) / 4");
    assert_eq!(at(256), 48);
    assert_eq!(at(10), 1, "never zero");
    assert_eq!(HttpLimits::new(&config.serve, 1024).idle_timeout, Duration::from_secs(3));
    let defaults = Config::parse("t.toml", "").unwrap();
    assert_eq!(HttpLimits::new(&defaults.serve, 20_000).max_connections, 256);
    let e = Config::parse("t.toml", "[serve]\nmax_connections = 0\n").unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (2, "serve.max_connections"), "{e}");
}

/// A keep-alive connection idle after its request is closed after `idle_timeout`, as is one that
/// never completes its headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_and_slow_header_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = Config::parse("t.toml", "[serve]\nidle_timeout = \"1s\"\n").unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    let mut kept = tokio::net::TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
    let mut answer = Vec::new();
    support::within("the answer, then the close of the idle connection", async {
        let mut buf = [0u8; 1024];
        loop {
            match kept.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"), "{answer:?}");
    support::within("the close of the slow connection", async {
        let mut buf = [0u8; 1024];
        while slow.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    server.shutdown().await;
}
