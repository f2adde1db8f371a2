//! `smon-sim --listen ADDR --instances 3`: one process serving three smon streams on three consecutive
//! ports, each a complete stream (resync, header, live samples) for its own clients.

use std::path::Path;

use sim_common::{start_binary, within};
use smon_codec::{DecoderConfig, Update, UpdateReader, Value};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_smon-sim");

/// Starts the binary and waits for its start-up line `ready`; its stderr if it exits first.
async fn start(args: &[&str], ready: &str) -> Result<Child, String> {
    start_binary(BIN, args, ready).await
}

/// A small fake /proc: one CPU, memory, load and uptime.
fn fake_proc(dir: &Path) {
    let files = [
        ("stat", "cpu  10 0 5 100 1 0 0 0 0 0\ncpu0 10 0 5 100 1 0 0 0 0 0\nctxt 999\n"),
        ("meminfo", "MemTotal: 16384 kB\nMemFree: 1024 kB\n"),
        ("loadavg", "0.52 0.58 0.59 2/1234 5678\n"),
        ("uptime", "12345.67 23456.78\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

async fn next(reader: &mut UpdateReader<TcpStream>) -> Update {
    within("an update", reader.next()).await.expect("stream still open").expect("no decode error")
}

#[tokio::test]
async fn three_instances_stream_on_consecutive_ports() {
    let proc = tempfile::tempdir().unwrap();
    fake_proc(proc.path());
    let root = proc.path().to_str().unwrap();
    let mut attempts = 0;
    let (mut sim, first) = loop {
        attempts += 1;
        let first = sim_common::free_consecutive_ports(3).unwrap();
        let listen = format!("127.0.0.1:{first}");
        let args =
            ["--listen", &listen, "--instances", "3", "--interval", "10ms", "--proc", root, "--sys", root];
        match start(&args, "serving 3 instances on").await {
            Ok(sim) => break (sim, first),
            // Another process took one of the ports in between: try another range.
            Err(stderr) if stderr.contains("cannot listen") && attempts < 5 => continue,
            Err(stderr) => panic!("smon-sim did not start:\n{stderr}"),
        }
    };
    for port in first..first + 3 {
        let stream = within("a connection", TcpStream::connect(("127.0.0.1", port)))
            .await
            .unwrap_or_else(|e| panic!("instance on port {port}: {e}"));
        let mut reader = UpdateReader::new(stream, DecoderConfig::default());
        assert_eq!(next(&mut reader).await, Update::Resync, "port {port}");
        let mut version = false;
        let mut times = 0;
        while times < 2 {
            match next(&mut reader).await {
                Update::Value { name, value, .. } if &*name == "mon.version" => {
                    assert_eq!(value, Value::from(smon_sim::VERSION));
                    version = true;
                }
                Update::Value { name, .. } if &*name == "smon.time" => times += 1,
                _ => {}
            }
        }
        assert!(version, "port {port}: the header comes first");
    }
    sim.kill().await.unwrap();
}

#[tokio::test]
async fn several_instances_need_a_listener_and_a_port() {
    for args in [&["--instances", "2"][..], &["--listen", "127.0.0.1:0", "--instances", "2"]] {
        let out = Command::new(BIN).args(args).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("--instances"), "{args:?}: {stderr}");
    }
}
