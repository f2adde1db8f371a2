//! `telemon hmon` end to end: the real binary against dyalog-sim, started in-process.

use std::time::Duration;

use dyalog_sim::{Config, Sim};
use sim_common::Shutdown;
use tokio::net::TcpListener;

mod support;
use support::{json_lines, Telemon};

struct Running {
    addr: String,
    sim: Sim,
    shutdown: Shutdown,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(config: Config) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sim = Sim::new(config);
    let shutdown = Shutdown::new();
    tokio::spawn(sim.clone().serve(listener, shutdown.clone()));
    Running { addr, sim, shutdown }
}

/// Runs telemon to completion; returns (exit code, stdout, stderr).
async fn telemon(args: &[&str]) -> (i32, String, String) {
    let out = support::run(args, None).await;
    (support::code(&out), support::stdout(&out), support::stderr(&out))
}

#[tokio::test]
async fn connect_json_prints_each_message_as_its_array() {
    let running = start(Config { tick: None, ..Config::default() }).await;
    let (code, stdout, stderr) =
        telemon(&["hmon", "connect", &running.addr, "--facts", "all", "--last-known-state", "--json"]).await;
    assert_eq!(code, 0, "{stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0][0], "LastKnownState");
    assert!(lines[0][1]["TS"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lines[1][0], "Facts");
    let names: Vec<_> = lines[1][1]["Facts"].as_array().unwrap().iter().map(|f| f["Name"].clone()).collect();
    assert_eq!(
        names,
        ["Host", "AccountInformation", "Workspace", "Threads", "SuspendedThreads", "ThreadCount"]
    );
    assert_eq!(lines[1][1]["Facts"][3]["Values"][0]["Stack"][0]["Restricted"], 0, "booleans are 0/1");
}

#[tokio::test]
async fn connect_human_view_summarises_host_workspace_and_threads() {
    let running = start(Config { tick: None, ..Config::default() }).await;
    let (code, stdout, stderr) =
        telemon(&["hmon", "connect", &running.addr, "--facts", "Host,Workspace,Threads,ThreadCount"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("host") && stdout.contains("Dyalog 19.0"), "{stdout}");
    assert!(stdout.contains("workspace  CLEAR WS  used"), "{stdout}");
    assert!(stdout.contains("thread   0"), "{stdout}");
    assert!(stdout.contains("2 total, 0 suspended"), "{stdout}");
}

#[tokio::test]
async fn polling_with_count() {
    let running = start(Config { tick: None, ..Config::default() }).await;
    let (code, stdout, stderr) = telemon(&[
        "hmon",
        "connect",
        &running.addr,
        "--facts",
        "ThreadCount",
        "--poll",
        "100ms",
        "--count",
        "3",
        "--json",
    ])
    .await;
    assert_eq!(code, 0, "{stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 3);
    for line in lines {
        assert_eq!(line[0], "Facts");
        assert_eq!(line[1]["Interval"], 500, "the interpreter's floor");
        assert!(line[1]["UID"].as_str().unwrap().starts_with("telemon-"));
    }
}

#[tokio::test]
async fn subscriptions_print_notifications() {
    let running = start(Config { tick: Some(Duration::from_millis(20)), ..Config::default() }).await;
    let (code, stdout, stderr) =
        telemon(&["hmon", "connect", &running.addr, "--subscribe", "all", "--count", "4"]).await;
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<_> = stdout.lines().collect();
    assert_eq!(lines[0], "subscribed WorkspaceCompaction, WorkspaceResize, UntrappedSignal, TrappedSignal");
    assert!(lines[1..].iter().all(|l| l.starts_with("event      ")), "{stdout}");
}

#[tokio::test]
async fn user_messages_are_shown() {
    let running = start(Config { tick: None, ..Config::default() }).await;
    let mut run =
        Telemon::spawn(&["hmon", "connect", &running.addr, "--subscribe", "1", "--count", "2", "--json"]);
    let first = run.stdout_line().await;
    assert!(first.starts_with(r#"["Subscribed""#), "{first}");
    running.sim.world().user_message(Some("u1".into()), "Hello");
    let second = run.stdout_line().await;
    assert_eq!(second, r#"["UserMessage",{"UID":"u1","Message":"Hello"}]"#);
    assert_eq!(run.finish().await.0, 0);
}

#[tokio::test]
async fn listen_mode_accepts_a_polling_interpreter() {
    let mut run =
        Telemon::spawn(&["hmon", "listen", "127.0.0.1:0", "--facts", "Workspace", "--count", "1", "--json"]);
    let line = run.stderr_line("listening for interpreters on").await;
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    let sim = Sim::new(Config { tick: None, ..Config::default() });
    let shutdown = Shutdown::new();
    tokio::spawn(sim.poll(addr, shutdown.clone()));
    let (code, out, _) = run.finish().await;
    shutdown.cancel();
    assert_eq!(code, 0);
    let lines = json_lines(&out.join("\n"));
    assert_eq!(lines[0][1]["Facts"][0]["Name"], "Workspace");
}

#[tokio::test]
async fn reconnect_waits_for_the_interpreter_to_start() {
    let addr = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let addr = addr.to_string();
    let run = Telemon::spawn(&[
        "hmon",
        "connect",
        &addr,
        "--reconnect",
        "--last-known-state",
        "--count",
        "1",
        "--json",
    ]);
    let shutdown = Shutdown::new();
    let sim = Sim::new(Config { tick: None, ..Config::default() });
    tokio::spawn(sim.serve(TcpListener::bind(&addr).await.unwrap(), shutdown.clone()));
    let (code, out, err) = run.finish().await;
    shutdown.cancel();
    assert_eq!(code, 0, "{err:?}");
    assert!(out[0].starts_with(r#"["LastKnownState""#), "{out:?}");
}

#[tokio::test]
async fn errors_and_exit_codes() {
    // Nobody listening, no --reconnect: a peer error.
    let addr = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().to_string();
    let (code, _, stderr) = telemon(&["hmon", "connect", &addr]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("cannot connect"), "{stderr}");
    // Unknown fact or event names are usage errors, caught before connecting.
    let (code, _, stderr) = telemon(&["hmon", "connect", &addr, "--facts", "Nope"]).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown fact \"Nope\""), "{stderr}");
    let (code, _, _) = telemon(&["hmon", "connect", &addr, "--subscribe", "ThreadSwitch"]).await;
    assert_eq!(code, 2);
    // The interpreter is busy: facts time out, the last known state still comes.
    let running = start(Config { tick: None, unresponsive: true, ..Config::default() }).await;
    let (code, stdout, stderr) = telemon(&[
        "hmon",
        "connect",
        &running.addr,
        "--last-known-state",
        "--facts",
        "Host",
        "--timeout",
        "300ms",
        "--json",
    ])
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.starts_with(r#"["LastKnownState""#), "{stdout}");
    assert!(stderr.contains("no reply within"), "{stderr}");
}

#[tokio::test]
async fn a_recorded_session_replays_to_the_same_messages() {
    let sim = start(Config::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("dyalog.pcapng");
    let rec = rec.to_str().unwrap();
    let (code, live, err) = telemon(&[
        "hmon", "connect", &sim.addr, "--poll", "500ms", "--json", "--count", "4", "--record", rec,
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, replayed, err) = telemon(&["replay", rec, "--json", "--count", "4"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(replayed, live);
}
