//! Issue 45: each one-target client pointed at a peer of another protocol (the other sims, and an HTTP server:
//! `telemon serve` itself) says that the peer is not what it expected, shows the bytes the peer began with, and
//! names the protocol those look like, instead of a framing error about them (`frame total length 4294967295
//! exceeds...`, `unknown frame kind 0`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use sim_common::Shutdown;

mod support;
use support::{code, free_addr, run, stderr, SimOptions, Sims, Telemon};

/// The binary pointed at a peer that is not what it speaks: exit 1, and the error says what the peer is not
/// and what it looks like.
async fn refused(args: &[&str], not: &str, looks_like: &str) {
    let out = run(args, None).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{args:?}: {err}");
    assert!(err.contains(not), "{args:?}: {err}");
    assert!(err.contains(&format!(", which looks like {looks_like}\n")), "{args:?}: {err}");
}

/// `telemon serve` with no target: an HTTP server on `addr`.
async fn http_server(dir: &Path) -> (Telemon, SocketAddr) {
    let config = dir.join("empty.toml");
    std::fs::write(&config, "").unwrap();
    let addr = free_addr();
    let server =
        Telemon::spawn(&["serve", "--config", config.to_str().unwrap(), "--listen", &addr.to_string()]);
    support::until("telemon serve to answer", Duration::from_millis(20), async || {
        support::http_get(addr, "/healthz", &[]).await.ok()
    })
    .await;
    (server, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_names_the_protocol_of_a_peer_it_does_not_speak() {
    let sims = Sims::start(SimOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, http) = http_server(dir.path()).await;
    let (smon, dyalog, http) = (sims.smon_addr.to_string(), sims.dyalog_addr.to_string(), http.to_string());
    let meter = sims.sys161_dir.path().join(".sockets/meter");

    let not_hmon = "not an HMON peer: it began with \"";
    refused(&["hmon", "connect", &smon, "--json"], not_hmon, "an smon stream").await;
    refused(&["hmon", "connect", &http, "--json"], not_hmon, "HTTP").await;

    let not_smon = "offset 0: not an smon stream: it begins with \"\\x00\\x00\\x00";
    let hmon = "an HMON peer (a Dyalog APL interpreter)";
    refused(&["smon", "connect", &dyalog, "--json", "--count", "1"], not_smon, hmon).await;

    let not_sysinfo = "not an rvOS sysinfo host transport: the peer began with \"";
    refused(&["sysinfo", "--connect", &dyalog, "ps"], not_sysinfo, hmon).await;
    refused(&["sysinfo", "--connect", &smon, "ps"], not_sysinfo, "an smon stream").await;
    refused(&["sysinfo", "--connect", &http, "ps"], not_sysinfo, "HTTP").await;
    let sys161 = "a System/161 meter socket";
    refused(&["sysinfo", "--socket", meter.to_str().unwrap(), "ps"], not_sysinfo, sys161).await;
    // With --watch too: reconnecting would meet the same peer.
    refused(&["sysinfo", "--connect", &dyalog, "ps", "--watch", "1s"], not_sysinfo, hmon).await;

    // meter161's socket with the smon sim behind it.
    let other = tempfile::tempdir().unwrap();
    let relay = relay_to(other.path(), sims.smon_addr, sims.shutdown.clone());
    let meter161_args = ["meter161", "--dir", other.path().to_str().unwrap(), "--json"];
    let not_meter161 = "not a System/161 meter socket: the peer began with \"\\xff\\xff";
    refused(&meter161_args, not_meter161, "an smon stream").await;
    relay.abort();
    server.kill().await;
    sims.stop().await;
}

/// Serves `dir/.sockets/meter`, each connection relayed to `to` (a sim of another protocol).
fn relay_to(dir: &Path, to: SocketAddr, shutdown: Shutdown) -> tokio::task::JoinHandle<()> {
    std::fs::create_dir_all(dir.join(".sockets")).unwrap();
    let listener = tokio::net::UnixListener::bind(dir.join(".sockets/meter")).unwrap();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = tokio::select! {
                accepted = listener.accept() => accepted.unwrap(),
                () = shutdown.cancelled() => return,
            };
            tokio::spawn(async move {
                let mut peer = tokio::net::TcpStream::connect(to).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut peer).await;
            });
        }
    })
}

/// The listening clients: a peer of another protocol that dials in is refused with what it looks like, and
/// the listener goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_names_the_protocol_of_a_peer_that_dials_in() {
    let shutdown = Shutdown::new();
    // A Mono agent dials `telemon hmon listen`.
    let mut hmon = Telemon::spawn(&["hmon", "listen", "127.0.0.1:0", "--json"]);
    let line = hmon.stderr_line("listening for interpreters on ").await;
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    let config = mono_agent_sim::AgentConfig::from_options(&format!(
        "address={addr},counters=Mono System/Working Set,interval=100"
    ))
    .unwrap();
    tokio::spawn(mono_agent_sim::run(config, shutdown.clone()));
    let refused = hmon.stderr_line("an interpreter failed to connect: ").await;
    assert!(refused.contains("not an HMON peer: it began with \"\\x00\\x01\\x00"), "{refused}");
    assert!(refused.ends_with(", which looks like a Mono counters agent"), "{refused}");
    let (status, _, err) = hmon.interrupt().await;
    assert_eq!(status, 0, "{err:?}");

    // An interpreter in POLL mode, and a web browser, dial `telemon mono listen`.
    let mut mono = Telemon::spawn(&["mono", "listen", "127.0.0.1:0", "--json"]);
    let line = mono.stderr_line("listening for Mono agents on ").await;
    let addr: SocketAddr = line.rsplit(' ').next().unwrap().parse().unwrap();
    let interpreter = dyalog_sim::Sim::new(dyalog_sim::Config::default());
    tokio::spawn(interpreter.poll(addr.to_string(), shutdown.clone()));
    let refused = mono.stderr_line("agent rejected: ").await;
    assert!(refused.contains("not a Mono counters agent: it began with \"\\x00\\x00\\x00"), "{refused}");
    assert!(refused.ends_with(", which looks like an HMON peer (a Dyalog APL interpreter)"), "{refused}");
    shutdown.cancel();
    // (the browser gets no answer: its request fails, which is not what is tested)
    let browser = tokio::spawn(support::http_get(addr, "/", &[]));
    let refused = mono.stderr_line("agent rejected: ").await;
    assert!(refused.contains("not a Mono counters agent: it began with \"GET / HTTP/1.1"), "{refused}");
    assert!(refused.ends_with(", which looks like HTTP"), "{refused}");
    browser.abort();
    let (status, _, err) = mono.interrupt().await;
    assert_eq!(status, 0, "{err:?}");
}

/// `telemon serve` with each connecting protocol's target pointed at a peer of another protocol: every one
/// counts the peer as a `protocol` error (the peer is not what the target speaks), none as `decode` (bytes of
/// the right protocol that did not decode), whichever protocol it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_counts_a_peer_of_another_protocol_as_a_protocol_error_for_every_protocol() {
    let sims = Sims::start(SimOptions::default()).await;
    let other = tempfile::tempdir().unwrap();
    let relay = relay_to(other.path(), sims.smon_addr, sims.shutdown.clone());
    let (smon, dyalog) = (sims.smon_addr, sims.dyalog_addr);
    let config = other.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[[meter161]]\nname = \"m\"\ndir = '{}'\n\n[[hmon]]\nname = \"h\"\nconnect = \"{smon}\"\n\n\
             [[smon]]\nname = \"s\"\nconnect = \"{dyalog}\"\n\n[[sysinfo]]\nname = \"r\"\nconnect = \"{dyalog}\"\n",
            other.path().display()
        ),
    )
    .unwrap();
    let addr = free_addr();
    let server =
        Telemon::spawn(&["serve", "--config", config.to_str().unwrap(), "--listen", &addr.to_string()]);
    let protocols = ["meter161", "hmon", "smon", "sysinfo"];
    // (protocol, kind) -> errors counted, once every protocol has counted one of some kind.
    let counted = support::until("each target to count its peer", Duration::from_millis(50), async || {
        let (_, body) = support::http_get(addr, "/metrics", &[]).await.ok()?;
        let mut counted = std::collections::BTreeMap::new();
        for line in body.lines().filter(|l| l.starts_with("telemon_target_errors_total{")) {
            let label = |name: &str| {
                let start = line.find(&format!("{name}=\""))? + name.len() + 2;
                Some(line[start..].split('"').next()?.to_owned())
            };
            let value: f64 = line.rsplit(' ').next()?.parse().ok()?;
            if value > 0.0 {
                counted.insert((label("protocol")?, label("kind")?), value);
            }
        }
        protocols.iter().all(|p| counted.keys().any(|(q, _)| q == p)).then_some(counted)
    })
    .await;
    for p in protocols {
        assert!(counted.contains_key(&(p.to_owned(), "protocol".to_owned())), "{p}: {counted:?}");
        assert!(!counted.contains_key(&(p.to_owned(), "decode".to_owned())), "{p}: {counted:?}");
    }
    server.kill().await;
    relay.abort();
    sims.stop().await;
}
