//! `telemon mono` end to end: the real binary against the fake agent, started in-process.

use std::time::Duration;

use mono_agent_sim::{AgentConfig, Backoff, DuplicateAdd, ValueMode, ValueOverrides};
use sim_common::Shutdown;

mod support;
use support::Telemon;

fn telemon(args: &[&str]) -> Telemon {
    Telemon::spawn(args)
}

/// `telemon mono listen 127.0.0.1:0 ...` prints where it listens.
async fn listening_on(t: &mut Telemon) -> std::net::SocketAddr {
    let line = t.stderr_line("listening for Mono agents on ").await;
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn agent(options: &str, tweak: impl FnOnce(&mut AgentConfig, &ValueOverrides)) -> Shutdown {
    let mut config = AgentConfig::from_options(options).unwrap();
    config.values = ValueMode::Fixed;
    config.backoff = Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
    let overrides = ValueOverrides::default();
    tweak(&mut config, &overrides);
    let shutdown = Shutdown::new();
    tokio::spawn(mono_agent_sim::run_with_overrides(config, overrides, shutdown.clone()));
    shutdown
}

const TWO: &str = "Mono JIT/Compiled methods;Mono System/Working Set";

#[tokio::test]
async fn listen_lists_adds_removes_and_prints_json_state() {
    let mut t = telemon(&[
        "mono",
        "listen",
        "127.0.0.1:0",
        "--list",
        "--add",
        "Mono System/User Time",
        "--add",
        "Mono JIT/Nope",
        "--remove",
        "1",
        "--count",
        "3",
        "--json",
    ]);
    let addr = listening_on(&mut t).await;
    // Live values: compiled methods grow every second, so samples keep changing something (a sample that
    // changes nothing is not shown and does not count).
    let _agent =
        agent(&format!("address={addr},counters={TWO},interval=5"), |c, _| c.values = ValueMode::Live);
    let (code, out, err) = t.finish().await;
    assert_eq!(code, 0, "stderr: {err:?}");
    let lines: Vec<serde_json::Value> = out.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4, "the list, then 3 samples: {out:?}");
    let counters = lines[0]["counters"].as_array().unwrap();
    assert!(counters.iter().any(|c| c == "Mono System/Page Faults"));
    assert!(err.iter().any(|l| l.contains("added Mono System/User Time as index 2")), "{err:?}");
    assert!(err.iter().any(|l| l.contains("Mono JIT/Nope: the agent has no such counter")), "{err:?}");
    assert!(err.iter().any(|l| l.contains("removed index 1")), "{err:?}");
    for sample in &lines[1..] {
        assert!(sample["timestamp"].as_i64().unwrap() > 0);
    }
    // The last sample holds the full current state: removed counter gone, added one present.
    let last = lines.last().unwrap()["values"].as_object().unwrap();
    let keys: Vec<_> = last.keys().map(String::as_str).collect();
    assert_eq!(keys, ["Mono JIT/Compiled methods", "Mono System/User Time"]);
    assert!(last["Mono JIT/Compiled methods"].is_i64(), "{last:?}");
}

#[tokio::test]
async fn listen_prints_a_table_with_units() {
    let mut t = telemon(&["mono", "listen", "127.0.0.1:0", "--count", "1"]);
    let addr = listening_on(&mut t).await;
    let _agent =
        agent(&format!("address={addr},counters={TWO};Mono System/User Time,interval=5"), |_, overrides| {
            overrides.set("Mono System/Working Set", mono_counters::CounterValue::Long(52_428_800));
            overrides.set("Mono System/User Time", mono_counters::CounterValue::Long(15_000_000));
        });
    let (code, out, err) = t.finish().await;
    assert_eq!(code, 0, "stderr: {err:?}");
    assert!(out[0].contains("Mono System/Working Set [bytes]"), "{out:?}");
    assert!(out[0].contains("Mono System/User Time [time]"), "{out:?}");
    assert!(out[1].contains("50.0 MiB") && out[1].contains("1.500 s"), "{out:?}");
    assert_eq!(out.len(), 2, "one header, one row (fixed values: later samples change nothing): {out:?}");
}

#[tokio::test]
async fn duplicate_add_answered_existing() {
    let mut t =
        telemon(&["mono", "listen", "127.0.0.1:0", "--add", "Mono JIT/Compiled methods", "--count", "1"]);
    let addr = listening_on(&mut t).await;
    let _agent = agent(&format!("address={addr},counters={TWO},interval=5"), |_, _| {});
    let (code, _out, err) = t.finish().await;
    assert_eq!(code, 0);
    assert!(err.iter().any(|l| l.contains("add Mono JIT/Compiled methods: already sampled")), "{err:?}");
}

#[tokio::test]
async fn duplicate_add_dropped_by_a_real_agent_then_it_reconnects() {
    let mut t =
        telemon(&["mono", "listen", "127.0.0.1:0", "--add", "Mono JIT/Compiled methods", "--count", "1"]);
    let addr = listening_on(&mut t).await;
    let agent = agent(&format!("address={addr},counters={TWO},interval=5"), |c, _| {
        c.duplicate_add = DuplicateAdd::DropConnection
    });
    t.stderr_line("closed the connection on add Mono JIT/Compiled methods").await;
    t.stderr_line("connected").await;
    agent.cancel();
    t.kill().await;
}

/// A counters file written by the agent in file mode: `samples` samples of fixed values (only the first one
/// changes anything).
async fn file_of(dir: &std::path::Path, samples: u64) -> std::path::PathBuf {
    let path = dir.join("counters.bin");
    let mut config =
        AgentConfig::from_options(&format!("address=file://{},counters={TWO},interval=1", path.display()))
            .unwrap();
    config.values = ValueMode::Fixed;
    config.max_samples = Some(samples);
    mono_agent_sim::run(config, Shutdown::new()).await.unwrap();
    path
}

#[tokio::test]
async fn read_a_file_written_in_file_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_of(dir.path(), 3).await;

    let (code, out, err) = telemon(&["mono", "read", path.to_str().unwrap(), "--json"]).finish().await;
    assert_eq!(code, 0, "{err:?}");
    // Fixed values never change: the first sample carries them, the next two change nothing and are
    // coalesced (the real agent without interval= sends ~100,000 such samples a second).
    assert_eq!(out.len(), 1, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
    assert_eq!(v["values"]["Mono JIT/Compiled methods"], 0, "fixed value: its position in the List");
    assert!(v["values"]["Mono System/Working Set"].is_i64(), "every sample holds the full state");
    assert!(err.iter().any(|l| l.contains("2 samples with no changed value")), "{err:?}");

    // A file cut inside its last record (the Mono process was killed while writing): the complete records
    // are shown, a warning says what happened, and the exit code is 0.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let (code, out, err) = telemon(&["mono", "read", path.to_str().unwrap()]).finish().await;
    assert_eq!(code, 0, "{err:?}");
    assert_eq!(out.len(), 2, "header and the first record: {out:?}");
    assert!(
        err.iter().any(|l| l.contains("warning") && l.contains("stream ended inside a message")),
        "{err:?}"
    );
    assert!(err.iter().any(|l| l.contains("1 samples with no changed value")), "{err:?}");
}

#[tokio::test]
async fn empty_samples_do_not_count_and_are_coalesced_into_the_next_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_of(dir.path(), 50).await;
    // 50 samples, one with values: --count 1 is met by it, and no empty sample is a row.
    let (code, out, _) = telemon(&["mono", "read", path.to_str().unwrap(), "--count", "1"]).finish().await;
    assert_eq!(code, 0);
    assert_eq!(out.len(), 2, "header and one row: {out:?}");
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let (code, _, _) = telemon(&["mono", "listen", "127.0.0.1:0", "--add", "no-slash"]).finish().await;
    assert_eq!(code, 2);
}

/// Issue 18: a burst of empty samples between samples with values used to fill the reader's queue,
/// so that `--count 5` printed one row and never finished.
#[tokio::test]
async fn listen_shows_every_sample_with_values_after_a_burst_of_empty_ones() {
    use tokio::io::AsyncWriteExt;
    let mut t = telemon(&["mono", "listen", "127.0.0.1:0", "--count", "5", "--json"]);
    let addr = listening_on(&mut t).await;
    let mut agent = tokio::net::TcpStream::connect(addr).await.unwrap();
    for write in support::mono_burst() {
        agent.write_all(&write).await.unwrap();
    }
    let (code, out, err) = t.finish().await;
    assert_eq!(code, 0, "stderr: {err:?}");
    let rows = support::json_lines(&out.join("\n"));
    let values: Vec<i64> =
        rows.iter().map(|r| r["values"]["Mono System/Working Set"].as_i64().unwrap()).collect();
    assert_eq!(values, [100, 101, 102, 103, 104], "{out:?}");
    let coalesced: Vec<u64> = rows.iter().map(|r| r["coalesced"].as_u64().unwrap_or(0)).collect();
    assert_eq!(coalesced, [0, 1250, 1250, 1250, 1250]);
}

#[tokio::test]
async fn a_recorded_agent_replays_to_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("mono.pcapng");
    let rec_path = rec.to_str().unwrap();
    let mut t = telemon(&[
        "mono",
        "listen",
        "127.0.0.1:0",
        "--add",
        "Mono System/User Time",
        "--count",
        "3",
        "--json",
        "--record",
        rec_path,
    ]);
    let addr = listening_on(&mut t).await;
    let _agent =
        agent(&format!("address={addr},counters={TWO},interval=5"), |c, _| c.values = ValueMode::Live);
    let (code, live, err) = t.finish().await;
    assert_eq!(code, 0, "stderr: {err:?}");
    assert_eq!(live.len(), 3);
    let out = support::run(&["replay", rec_path, "--json", "--count", "3"], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    let replayed: Vec<String> = support::stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(replayed, live);
}
