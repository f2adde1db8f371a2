//! Recording one-target sessions with `--record FILE` and playing them back with `telemon replay`.

use std::path::Path;

use smon_sim::{Config as SmonConfig, Source, MIN_INTERVAL};
use telemon_capture::{link_type, Capture, Direction, Limits};

mod support;
use support::{code, run, stderr, stdout, Telemon};

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
