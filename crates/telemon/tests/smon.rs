//! `telemon smon` end to end: the real binary against smon-sim (in-process) over TCP, files written
//! by two runs, stdin, --follow, encode, and the error paths.

use std::process::{Output, Stdio};

use sim_common::Shutdown;
use smon_codec::{Sample, RESYNC};
use smon_sim::{serve, write_stream, Config, Source, MIN_INTERVAL};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::Command;

mod support;
use support::within;

/// Two CPUs' idle counters and a timestamp, rising by small steps: 3 values per sample.
struct Cpus(u64);

impl Source for Cpus {
    fn sample(&mut self) -> Vec<Sample> {
        self.0 += 1;
        vec![
            Sample::new("smon.time", [], 1_100_000_000 + 5 * self.0),
            Sample::new("linux.cpu.idle", [0], 1000 + self.0),
            Sample::new("linux.cpu.idle", [1], 2000 + 2 * self.0),
        ]
    }
}

/// `telemon smon ARGS`, ready to run.
fn telemon(args: &[&str]) -> Command {
    let mut cmd = support::command(&["smon"]);
    cmd.args(args);
    cmd
}

async fn output(mut cmd: Command) -> Output {
    within("telemon to exit", cmd.output()).await.unwrap()
}

async fn with_stdin(mut cmd: Command, input: Vec<u8>) -> Output {
    let mut child = cmd.stdin(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&input).await.unwrap();
    drop(stdin);
    within("telemon to exit", child.wait_with_output()).await.unwrap()
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    support::json_lines(&String::from_utf8_lossy(&out.stdout))
}

async fn start_sim() -> (std::net::SocketAddr, Shutdown) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let config = Config { interval: MIN_INTERVAL, ..Config::default() };
    tokio::spawn(serve(listener, Cpus(0), config, shutdown.clone()));
    (addr, shutdown)
}

/// A file holding two runs of the monitor, 2 samples each (2 header + 6 values per run).
async fn two_runs(path: &std::path::Path) {
    for _ in 0..2 {
        let file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await.unwrap();
        let config = Config { interval: MIN_INTERVAL, count: Some(2), ..Config::default() };
        write_stream(file, Cpus(0), &config, Shutdown::new()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_json_prints_one_object_per_value() {
    let (addr, shutdown) = start_sim().await;
    let out = output(telemon(&["connect", &addr.to_string(), "--json", "--count", "20"])).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 20);
    assert_eq!(lines[0], serde_json::json!({"name": "mon.version", "index": [], "value": smon_sim::VERSION}));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap(),
        format!(r#"{{"name":"mon.version","index":[],"value":"{}"}}"#, smon_sim::VERSION)
    );
    assert!(lines.iter().any(|l| l["name"] == "linux.cpu.idle"
        && l["index"] == serde_json::json!([1])
        && l["value"].is_u64()));
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_human_view_is_a_table_of_latest_values() {
    let (addr, shutdown) = start_sim().await;
    let out = output(telemon(&["connect", &addr.to_string(), "--count", "12"])).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let idle1 =
        text.lines().find(|l| l.starts_with("linux.cpu.idle") && l.split_whitespace().nth(1) == Some("1"));
    assert!(idle1.is_some(), "{text}");
    assert!(text.contains("mon.version"), "{text}");
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_retries_while_the_sim_starts() {
    // A port with nothing on it yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut child = telemon(&["connect", &addr.to_string(), "--json", "--count", "5", "--wait", "60s"])
        .env("RUST_LOG", "telemon=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until telemon has been refused at least once, then start the sim on that port.
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = within("telemon", stderr.next_line()).await.unwrap().expect("telemon retries");
        if line.contains("retrying") {
            break;
        }
    }
    let listener = TcpListener::bind(addr).await.unwrap();
    let shutdown = Shutdown::new();
    tokio::spawn(serve(
        listener,
        Cpus(0),
        Config { interval: MIN_INTERVAL, ..Config::default() },
        shutdown.clone(),
    ));
    let out = within("telemon", child.wait_with_output()).await.unwrap();
    assert!(out.status.success());
    assert_eq!(json_lines(&out).len(), 5);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_to_nothing_fails_with_exit_1() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = output(telemon(&["connect", &addr.to_string(), "--wait", "0"])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting to"));
    let out = output(telemon(&["connect", "no-port-here"])).await;
    assert_eq!(out.status.code(), Some(2));
    let out = output(telemon(&["connect"])).await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn read_a_file_written_by_two_runs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mon.out");
    two_runs(&path).await;
    let out = output(telemon(&["read", path.to_str().unwrap(), "--json"])).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 16);
    assert_eq!(lines.iter().filter(|l| l["name"] == "mon.version").count(), 2);
    assert_eq!(lines.iter().filter(|l| l["name"] == "smon.time").count(), 4);
    // The second run starts over (Cpus(0) again): its first idle value is the first run's first.
    let idle0: Vec<u64> = lines
        .iter()
        .filter(|l| l["name"] == "linux.cpu.idle" && l["index"][0] == 0)
        .map(|l| l["value"].as_u64().unwrap())
        .collect();
    assert_eq!(idle0, [1001, 1002, 1001, 1002]);
    // The human view shows the final table once: a header and one row per name and index.
    let out = output(telemon(&["read", path.to_str().unwrap()])).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert!(rows[0].starts_with("NAME"), "{text}");
    assert_eq!(rows.len(), 1 + 5, "{text}"); // mon.version, mon.compiled, smon.time, idle[0], idle[1]
    assert!(rows.iter().any(|l| l.starts_with("linux.cpu.idle") && l.ends_with(" 1002")), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn read_stdin_with_dash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mon.out");
    two_runs(&path).await;
    let out =
        with_stdin(telemon(&["read", "-", "--json", "--count", "3"]), std::fs::read(&path).unwrap()).await;
    assert!(out.status.success());
    assert_eq!(json_lines(&out).len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn read_follow_sees_a_run_appended_later() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mon.out");
    let config = Config { interval: MIN_INTERVAL, count: Some(2), ..Config::default() };
    let append = || async {
        let file = tokio::fs::OpenOptions::new().create(true).append(true).open(&path).await.unwrap();
        write_stream(file, Cpus(10), &config, Shutdown::new()).await.unwrap();
    };
    append().await;
    let mut child =
        telemon(&["read", path.to_str().unwrap(), "--json", "--follow", "--poll", "10ms", "--count", "16"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..8 {
        within("telemon", stdout.next_line()).await.unwrap().expect("first run");
    }
    append().await;
    let mut rest = 0;
    while let Some(line) = within("telemon", stdout.next_line()).await.unwrap() {
        serde_json::from_str::<serde_json::Value>(&line).unwrap();
        rest += 1;
    }
    assert_eq!(rest, 8);
    assert!(within("telemon", child.wait()).await.unwrap().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn encode_then_read_round_trips_the_json_lines() {
    let input = concat!(
        r#"{"name":"mon.version","index":[],"value":"0.0.0"}"#,
        "\n",
        r#"{"name":"linux.cpu.idle","index":[0],"value":123}"#,
        "\n\n",
        r#"{"name":"linux.cpu.idle","index":[1],"value":18446744073709551615}"#,
        "\n",
        r#"{"name":"linux.disk.reads","index":[8,0],"value":7}"#,
        "\n",
        r#"{"name":"linux.cpu.idle","index":[0],"value":0}"#,
        "\n",
    );
    let encoded = with_stdin(telemon(&["encode", "--resync"]), input.as_bytes().to_vec()).await;
    assert!(encoded.status.success(), "{}", String::from_utf8_lossy(&encoded.stderr));
    assert!(encoded.stdout.starts_with(&RESYNC));
    let decoded = with_stdin(telemon(&["read", "-", "--json"]), encoded.stdout.clone()).await;
    assert!(decoded.status.success());
    let expected: Vec<&str> = input.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(String::from_utf8_lossy(&decoded.stdout).lines().collect::<Vec<_>>(), expected);
    // Without --resync the stream starts with token 0 at once, as in the spec's example.
    let plain = with_stdin(telemon(&["encode"]), input.as_bytes().to_vec()).await;
    assert_eq!(&plain.stdout[..2], [0x00, 0x0C]);
}

#[tokio::test(flavor = "multi_thread")]
async fn encode_rejects_bad_lines_with_their_number() {
    let out = with_stdin(
        telemon(&["encode"]),
        b"{\"name\":\"a.b\",\"value\":1}\n{\"name\":\"a.b\",\"value\":-1}\n".to_vec(),
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = with_stdin(
        telemon(&["encode"]),
        b"{\"name\":\"a.b\",\"value\":1}\n{\"name\":\"a.b\",\"value\":\"s\"}\n".to_vec(),
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
}

#[tokio::test(flavor = "multi_thread")]
async fn decode_errors_are_reported_with_offsets_and_exit_1() {
    // The spec's literal example (0B instead of 0C) names the undefined token 158 at offset 16; the
    // decoder then skips to the next resync and reads the second run.
    let literal: &[u8] = b"\x00\x0Bsmon.version\x01\x050.0.0\xF0\x00\x0Dsmon.compiled\x02\x0BSep 12 2004";
    let good: &[u8] = b"\x00\x04ua.b\x01\x07";
    let input = [literal, &RESYNC, good].concat();
    let out = with_stdin(telemon(&["read", "-", "--json"]), input).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("offset 16: token 158 is not defined"), "{stderr}");
    let lines = json_lines(&out);
    assert_eq!(lines.last().unwrap(), &serde_json::json!({"name": "a.b", "index": [], "value": 7}));
    // A missing file is a clear error too.
    let out = output(telemon(&["read", "/nonexistent/mon.out"])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/mon.out"));
}
