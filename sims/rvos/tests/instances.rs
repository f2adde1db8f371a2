//! `rvos-sim --instances 3`: one process serving three rvOS systems on three consecutive loopback
//! ports, each answering the sysinfo-wire client.

use sim_common::{start_binary, within};
use sysinfo_wire::{Client, ClientConfig, End, Endpoint, Report, SysinfoCommand};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_rvos-sim");

/// Starts the binary and waits for its start-up line `ready`; its stderr if it exits first.
async fn start(args: &[&str], ready: &str) -> Result<Child, String> {
    start_binary(BIN, args, ready).await
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
