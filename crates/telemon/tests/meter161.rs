//! `telemon meter161` end to end: the real binary against sys161-sim, started in-process in a temp dir.

use std::path::Path;

use sys161_sim::Config;

mod support;
use support::Telemon;

/// The sim in the background; `Sim::start(dir, config)` and `.stop().await`.
struct Sim(sys161_sim::Running);

impl Sim {
    fn start(dir: &Path, config: Config) -> Sim {
        Sim(sys161_sim::Running::spawn(dir, config).unwrap())
    }

    async fn stop(self) {
        self.0.stop().await.unwrap();
    }
}

fn telemon(dir: &Path, args: &[&str]) -> Telemon {
    let dir = dir.to_str().expect("a UTF-8 temp dir");
    Telemon::spawn(&[&["meter161", "--dir", dir], args].concat())
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rows_have_every_field_and_deltas_after_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    let run = telemon(dir.path(), &["--json", "--count", "3", "--interval", "10ms"]);
    let (code, lines, _) = run.finish().await;
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let rows: Vec<_> = lines.iter().map(|l| json(l)).collect();
    let first = rows[0].as_object().unwrap();
    assert_eq!(first.len(), meter161::SYS161_FIELDS.len(), "no delta on the first row: {first:?}");
    // Every HEAD field, in HEAD order, in the text itself.
    let positions: Vec<usize> =
        meter161::SYS161_FIELDS.iter().map(|f| lines[0].find(&format!("\"{f}\":")).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{}", lines[0]);
    assert_eq!(rows[1]["delta"]["nsec"], 200_000_000, "the leftover default tick");
    assert_eq!(rows[2]["delta"]["nsec"], 10_000_000);
    let nsec = |i: usize| rows[i]["nsec"].as_u64().unwrap();
    assert_eq!(nsec(2) - nsec(1), 10_000_000, "delta matches the cumulative values");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_looks_like_stat161s() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    let run = telemon(dir.path(), &["--count", "24", "--interval", "10ms"]);
    let (code, lines, _) = run.finish().await;
    assert_eq!(code, 0);
    let header = "nsec        kinsns    uinsns    udud idle      irqs exns disk con   emu  net  ";
    assert_eq!(lines[0], "");
    assert_eq!(lines[1], header);
    let cells = |i: usize| lines[i].split_whitespace().map(|c| c.parse::<u64>().unwrap()).collect::<Vec<_>>();
    assert_eq!(cells(2).len(), 11, "the first row shows the cumulative values: {:?}", lines[2]);
    assert!(lines[3].starts_with("200000000 "), "then deltas: {:?}", lines[3]);
    assert!(lines[4].starts_with("10000000 "), "{:?}", lines[4]);
    // 22 rows, then the header again.
    // (with columns widened to fit the values seen so far, as stat161's).
    assert_eq!(lines[24], "");
    assert_eq!(lines[25].split_whitespace().collect::<Vec<_>>(), meter161::SYS161_FIELDS);
    assert_eq!(lines.len(), 2 + 22 + 2 + 2);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_without_a_simulator_fails_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = telemon(dir.path(), &["--once", "--count", "1"]);
    let line = run.stderr_line("cannot connect to").await;
    assert!(line.contains(".sockets/meter"), "{line}");
    let (code, lines, _) = run.finish().await;
    assert_eq!(code, 1);
    assert!(lines.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_interval_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    for interval in ["9us", "3s", "soon"] {
        let mut run = telemon(dir.path(), &["--interval", interval]);
        run.stderr_line("--interval").await;
        assert_eq!(run.finish().await.0, 2, "{interval}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_waits_for_the_socket_and_reconnects_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = telemon(dir.path(), &["--json", "--interval", "10ms"]);
    run.stderr_line("connecting to").await;
    let first = Sim::start(dir.path(), Config::default());
    run.stderr_line("connected").await;
    assert!(json(&run.stdout_line().await).get("delta").is_none());
    assert!(json(&run.stdout_line().await).get("delta").is_some());
    first.stop().await;
    run.stderr_line("disconnected").await;
    let second = Sim::start(dir.path(), Config { start_nsec: 1_000_000_000_000, ..Config::default() });
    run.stderr_line("connected").await;
    // Rows the first sim sent before it stopped may still be in the pipe; the second sim's clock
    // starts far beyond them.
    let after = loop {
        let row = json(&run.stdout_line().await);
        if row["nsec"].as_u64().unwrap() >= 1_000_000_000_000 {
            break row;
        }
        assert!(row.get("delta").is_some(), "a late row of the first sim: {row}");
    };
    assert!(after.get("delta").is_none(), "no delta across a reconnect: {after}");
    assert!(json(&run.stdout_line().await).get("delta").is_some(), "deltas again after the first row");
    run.kill().await;
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_version_exits_with_1() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config { version: 3, ..Config::default() });
    let mut run = telemon(dir.path(), &[]);
    let line = run.stderr_line("wrong protocol version").await;
    assert!(line.contains('3'), "{line}");
    assert_eq!(run.finish().await.0, 1);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_with_once_exits_with_1_after_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config { error_after: Some(2), ..Config::default() });
    let mut run = telemon(dir.path(), &["--once", "--json", "--interval", "10ms"]);
    run.stderr_line("sys161 error").await;
    let (code, lines, _) = run.finish().await;
    assert_eq!(code, 1);
    assert_eq!(lines.len(), 2, "{lines:?}");
    sim.stop().await;
}
