//! `rvos-sim --instances 3`: one process serving three rvOS systems on three consecutive loopback
//! ports, each answering the sysinfo-wire client.

use std::process::Stdio;
use std::time::Duration;

use sysinfo_wire::{Client, ClientConfig, End, Endpoint, Report, SysinfoCommand};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_rvos-sim");

/// A safety net so a broken test fails instead of hanging; never a timing assertion.
async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} took too long"))
}

/// Starts the binary and waits for its start-up line `ready`; its stderr if it exits first.
async fn start(args: &[&str], ready: &str) -> Result<Child, String> {
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut seen = String::new();
    let started = within("the start-up line", async {
        while let Some(line) = lines.next_line().await.expect("stderr is readable") {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(ready) {
                return true;
            }
        }
        false
    })
    .await;
    if !started {
        return Err(seen);
    }
    // Keep draining stderr, so that the sim never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(child)
}

#[tokio::test]
async fn three_instances_answer_on_consecutive_ports() {
    let mut attempts = 0;
    let (mut sim, first) = loop {
        attempts += 1;
        let first = sim_common::free_consecutive_ports(3).unwrap();
        let listen = format!("127.0.0.1:{first}");
        match start(
            &["--listen", &listen, "--instances", "3", "--trace-prefill", "10"],
            "serving 3 instances on",
        )
        .await
        {
            Ok(sim) => break (sim, first),
            // Another process took one of the ports in between: try another range.
            Err(stderr) if stderr.contains("cannot listen") && attempts < 5 => continue,
            Err(stderr) => panic!("rvos-sim did not start:\n{stderr}"),
        }
    };
    for port in first..first + 3 {
        let endpoint = Endpoint::Tcp(format!("127.0.0.1:{port}"));
        let mut client = within("a connection", Client::connect(&endpoint, ClientConfig::default()))
            .await
            .unwrap_or_else(|e| panic!("instance on port {port}: {e}"));
        let response = within("a reply", client.request(SysinfoCommand::Ps)).await.expect("a ps reply");
        assert_eq!(response.reply.end, End::Sentinel, "port {port}");
        let Report::Ps(ps) = response.report else { panic!("port {port}: not a ps report") };
        assert_eq!(ps.processes[1].name, "init", "port {port}");
    }
    sim.kill().await.unwrap();
}

#[tokio::test]
async fn several_instances_need_tcp_and_a_port() {
    let socket = tempfile::tempdir().unwrap();
    let socket = socket.path().join("rvos.sock");
    let socket = socket.to_str().unwrap();
    for args in
        [&["--socket", socket, "--instances", "2"][..], &["--listen", "127.0.0.1:0", "--instances", "2"]]
    {
        let out = Command::new(BIN).args(args).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("--instances"), "{args:?}: {stderr}");
    }
}
