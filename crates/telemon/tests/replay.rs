//! Recording one-target sessions with `--record FILE` and playing them back with `telemon replay`.

use std::path::Path;
use std::time::Duration;

use smon_sim::{Config as SmonConfig, Source, MIN_INTERVAL};
use telemon_capture::{link_type, Capture, Direction, Limits};

mod support;
use support::{code, run, stderr, stdout, Telemon};

/// Issue 45: a message a one-target command showed must be in its recording, however the command stops.
/// Stops `live` (running with `--json --record rec`) with `signal` once it has shown `rows` lines, and checks
/// that it exits 0 and that `telemon replay rec --json` shows every line it showed, in the same order.
///
/// The recorder writes in batches (20 ms apart) while records arrive every few milliseconds, so a command
/// killed by the signal, as they were, lost the last rows it showed.
///
/// A line starting with `reply` (a reply to the command's own request) is shown once the request's call
/// returns, so a notification that came before it on the wire is shown after it: such a line is checked
/// to be there once in both, and the others in order.
async fn stop_then_replay(mut live: Telemon, signal: &str, rows: usize, rec: &Path, reply: Option<&str>) {
    let mut shown = Vec::new();
    for _ in 0..rows {
        shown.push(live.stdout_line().await);
    }
    let kill = tokio::process::Command::new("kill").args([signal, &live.pid().to_string()]).status();
    assert!(kill.await.unwrap().success());
    let (status, rest, err) = live.finish().await;
    assert_eq!(status, 0, "stopped by {signal}: {err:?}");
    shown.extend(rest);
    let out = run(&["replay", path(rec), "--json"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let replayed: Vec<&str> = text.lines().collect();
    assert!(
        replayed.len() >= shown.len(),
        "{} lines shown, {} in the recording: {}",
        shown.len(),
        replayed.len(),
        stderr(&out)
    );
    let (mut replayed, mut shown) = (replayed[..shown.len()].to_vec(), shown);
    if let Some(reply) = reply {
        let replies = |lines: &[&str]| lines.iter().filter(|l| l.starts_with(reply)).count();
        assert_eq!(replies(&replayed), 1, "{reply} in {replayed:?}");
        assert_eq!(replies(&shown.iter().map(String::as_str).collect::<Vec<_>>()), 1, "{reply} in {shown:?}");
        replayed.retain(|l| !l.starts_with(reply));
        shown.retain(|l| !l.starts_with(reply));
    }
    assert_eq!(replayed, shown, "the lines shown are those recorded, in order");
}

struct Cpus(u64);

impl Source for Cpus {
    fn sample(&mut self) -> Vec<smon_codec::Sample> {
        self.0 += 1;
        (0..4u64).map(|cpu| smon_codec::Sample::new("linux.cpu.user", [cpu], 100 * self.0 + cpu)).collect()
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp dir")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_meter161_session_replays_to_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let sim = sys161_sim::Running::spawn(dir.path(), sys161_sim::Config::default()).unwrap();
    let rec = dir.path().join("s.pcapng");
    let live = Telemon::spawn(&[
        "meter161",
        "--dir",
        path(dir.path()),
        "--once",
        "--json",
        "--count",
        "5",
        "--interval",
        "10ms",
        "--record",
        path(&rec),
    ]);
    let (status, live_rows, _) = live.finish().await;
    assert_eq!(status, 0);
    sim.stop().await.unwrap();

    let capture = Capture::from_file(&rec, Limits::default()).unwrap();
    assert_eq!(capture.warning, None);
    let target = capture.targets()[0].clone();
    assert_eq!((target.link_type, target.name.as_str()), (link_type::METER161, path(dir.path())));
    let conn = &capture.connections(None)[0];
    assert_eq!(conn.bytes(Direction::Outbound), b"INTERVAL 10000000\r\n", "what telemon wrote");
    assert!(conn.inbound().starts_with(b"HELLO 2\r\nHEAD "), "what the sim sent");

    // The replay stops where the recording stops, so the rows it can show are those received: at least
    // the five the live view showed, in the same order, with the same values.
    let out = run(&["replay", path(&rec), "--json"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let replayed: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert!(replayed.len() >= 5, "{replayed:?}");
    assert_eq!(replayed[..5], live_rows[..5]);
    let out = run(&["replay", path(&rec), "--json", "--count", "2", "--speed", "10x"], None).await;
    assert_eq!(stdout(&out).lines().collect::<Vec<_>>(), live_rows[..2]);
    let out = run(&["replay", path(&rec), "--view", "nonsense"], None).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));

    // The dashboard shows the recording as a live target while it plays.
    let out = run(
        &["top", "--replay", path(&rec), "--speed", "0.02x", "--once", "--wait", "1s", "--width", "120"],
        None,
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let frame = stdout(&out);
    assert!(frame.contains("targets 1/1 up"), "{frame}");
    assert!(frame.contains("meter161"), "{frame}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_smon_stream_replays_to_the_same_values() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = sim_common::Shutdown::new();
    let config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(listener, Cpus(0), config, shutdown.clone()));
    let rec = dir.path().join("smon.pcapng");
    let out = run(&["smon", "connect", &addr, "--json", "--count", "12", "--record", path(&rec)], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    shutdown.cancel();
    let live_text = stdout(&out);
    let live: Vec<&str> = live_text.lines().collect();
    assert_eq!(live.len(), 12);

    let out = run(&["replay", path(&rec), "--json", "--count", "12"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().collect::<Vec<_>>(), live);
}

#[tokio::test]
async fn replay_of_a_missing_or_foreign_file_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["replay", path(&dir.path().join("none.pcapng"))], None).await;
    assert_eq!(code(&out), 1);
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"hello world, not a recording").unwrap();
    let out = run(&["replay", path(&junk)], None).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("not a pcapng file"), "{}", stderr(&out));
    // Issue 45: a file shorter than a block header (`telemon replay /etc/hostname`) is no recording cut at
    // byte 0, and says so once.
    let hostname = dir.path().join("hostname");
    std::fs::write(&hostname, b"vm\n").unwrap();
    let out = run(&["replay", path(&hostname)], None).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "telemon: {}: not a pcapng file: it starts with \"vm\\n\", not a section header\n",
            path(&hostname)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sysinfo_request_is_recorded_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = sim_common::Shutdown::new();
    tokio::spawn(rvos_sim::run(listener, rvos_sim::Config::default(), shutdown.clone()));
    let rec = dir.path().join("vm.pcapng");
    let out = run(&["sysinfo", "--connect", &addr, "ps", "--record", path(&rec)], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let capture = Capture::from_file(&rec, Limits::default()).unwrap();
    assert_eq!(capture.warning, None);
    let conn = &capture.connections(None)[0];
    assert_eq!(
        (conn.target.link_type, conn.target.name.as_str()),
        (link_type::SYSINFO, format!("tcp:{addr}").as_str())
    );
    assert!(!conn.bytes(Direction::Outbound).is_empty());
    // The report's text, as printed, is in what the service sent.
    let inbound = String::from_utf8_lossy(&conn.inbound()).into_owned();
    let first_line = stdout(&out).lines().next().unwrap().to_owned();
    assert!(inbound.contains(first_line.trim()), "{first_line:?} not in the recording");

    // The replay decodes the recorded reply as the live request did.
    let replayed = run(&["replay", path(&rec)], None).await;
    assert_eq!(code(&replayed), 0, "{}", stderr(&replayed));
    assert_eq!(stdout(&replayed), stdout(&out));
    let rec2 = dir.path().join("vm-json.pcapng");
    let live =
        run(&["sysinfo", "--connect", &addr, "memstat", "--json", "--record", path(&rec2)], None).await;
    assert_eq!(code(&live), 0, "{}", stderr(&live));
    let replayed = run(&["replay", path(&rec2), "--json"], None).await;
    assert_eq!(stdout(&replayed), stdout(&live), "{}", stderr(&replayed));
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_meter161_row_shown_before_ctrl_c_is_in_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let sim = sys161_sim::Running::spawn(dir.path(), sys161_sim::Config::default()).unwrap();
    let rec = dir.path().join("s.pcapng");
    let args = ["meter161", "--dir", path(dir.path()), "--json", "--interval", "1ms", "--record", path(&rec)];
    stop_then_replay(Telemon::spawn(&args), "-INT", 100, &rec, None).await;
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_smon_value_shown_before_ctrl_c_is_in_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = sim_common::Shutdown::new();
    let config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(listener, Cpus(0), config, shutdown.clone()));
    let rec = dir.path().join("smon.pcapng");
    let live = Telemon::spawn(&["smon", "connect", &addr, "--json", "--record", path(&rec)]);
    stop_then_replay(live, "-INT", 40, &rec, None).await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sysinfo_report_shown_before_ctrl_c_is_in_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = sim_common::Shutdown::new();
    tokio::spawn(rvos_sim::run(listener, rvos_sim::Config::default(), shutdown.clone()));
    let rec = dir.path().join("vm.pcapng");
    let args = ["sysinfo", "--connect", &addr, "memstat", "--watch", "5ms", "--json", "--record", path(&rec)];
    stop_then_replay(Telemon::spawn(&args), "-INT", 20, &rec, None).await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mono_sample_shown_before_ctrl_c_is_in_the_recording() {
    use mono_agent_sim::{AgentConfig, Backoff, ValueMode, ValueOverrides};
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("mono.pcapng");
    let mut live = Telemon::spawn(&["mono", "listen", "127.0.0.1:0", "--json", "--record", path(&rec)]);
    let line = live.stderr_line("listening for Mono agents on ").await;
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    let mut config =
        AgentConfig::from_options(&format!("address={addr},counters=Mono System/Working Set,interval=2"))
            .unwrap();
    config.values = ValueMode::Fixed;
    config.backoff = Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
    // A value that changes every few milliseconds: only a sample that changes something is shown.
    let overrides = ValueOverrides::default();
    let shutdown = sim_common::Shutdown::new();
    tokio::spawn(mono_agent_sim::run_with_overrides(config, overrides.clone(), shutdown.clone()));
    let source = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(2));
        for value in 1i64.. {
            every.tick().await;
            overrides.set("Mono System/Working Set", mono_counters::CounterValue::Long(value));
        }
    });
    stop_then_replay(live, "-INT", 20, &rec, None).await;
    source.abort();
    shutdown.cancel();
}

/// SIGTERM (what `systemctl stop` and `timeout` send) is a stop like Ctrl-C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hmon_message_shown_before_sigterm_is_in_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = dyalog_sim::Config {
        user_message_every: Some(Duration::from_millis(3)),
        ..dyalog_sim::Config::default()
    };
    let shutdown = sim_common::Shutdown::new();
    tokio::spawn(dyalog_sim::Sim::new(config).serve(listener, shutdown.clone()));
    let rec = dir.path().join("hmon.pcapng");
    let args = ["hmon", "connect", &addr, "--subscribe", "all", "--json", "--record", path(&rec)];
    stop_then_replay(Telemon::spawn(&args), "-TERM", 20, &rec, Some("[\"Subscribed\"")).await;
    shutdown.cancel();
}
