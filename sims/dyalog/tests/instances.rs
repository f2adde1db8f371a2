//! `dyalog-sim --instances 3`: one process running three interpreters, serving on three consecutive
//! ports (or dialling one monitor three times), each answering an HMON monitor.

use hmon::{Client, ClientConfig, FactKind, FactValue};
use sim_common::{start_binary, within};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_dyalog-sim");

/// Starts the binary and waits for its start-up line `ready`; its stderr if it exits first.
async fn start(args: &[&str], ready: &str) -> Result<Child, String> {
    start_binary(BIN, args, ready).await
}

/// The workspace name the interpreter behind `client` reports.
async fn wsid(client: &Client) -> String {
    let facts = within("the facts", client.get_facts([FactKind::Workspace])).await.expect("facts");
    let list = facts.facts.expect("a fact list");
    let FactValue::Workspace(ws) = &list[0].value else { panic!("not a workspace fact: {list:?}") };
    ws.wsid.clone().expect("a wsid")
}

#[tokio::test]
async fn three_instances_serve_on_consecutive_ports() {
    let mut attempts = 0;
    let (mut sim, first) = loop {
        attempts += 1;
        let first = sim_common::free_consecutive_ports(3).unwrap();
        let serve = format!("127.0.0.1:{first}");
        match start(&["--serve", &serve, "--instances", "3", "--wsid", "FLEET"], "serving 3 instances on")
            .await
        {
            Ok(sim) => break (sim, first),
            // Another process took one of the ports in between: try another range.
            Err(stderr) if stderr.contains("cannot listen") && attempts < 5 => continue,
            Err(stderr) => panic!("dyalog-sim did not start:\n{stderr}"),
        }
    };
    for port in first..first + 3 {
        let addr = format!("127.0.0.1:{port}");
        let (client, _events) =
            within("a connection", Client::connect(addr.clone(), ClientConfig::default()))
                .await
                .unwrap_or_else(|e| panic!("instance at {addr}: {e}"));
        assert_eq!(wsid(&client).await, "FLEET", "instance at {addr}");
    }
    sim.kill().await.unwrap();
}

#[tokio::test]
async fn three_instances_poll_the_same_monitor() {
    let mut monitor = hmon::Listener::bind("127.0.0.1:0", ClientConfig::default()).await.unwrap();
    let poll = monitor.local_addr().unwrap().to_string();
    let mut sim = start(&["--poll", &poll, "--instances", "3"], "3 instances polling").await.unwrap();
    let mut peers = std::collections::HashSet::new();
    for _ in 0..3 {
        let (client, _events, peer) = within("an interpreter", monitor.accept()).await.expect("a handshake");
        assert_eq!(wsid(&client).await, "CLEAR WS");
        peers.insert(peer);
    }
    assert_eq!(peers.len(), 3, "three connections: {peers:?}");
    sim.kill().await.unwrap();
}

#[tokio::test]
async fn port_0_cannot_serve_several_instances() {
    let out = Command::new(BIN).args(["--serve", "127.0.0.1:0", "--instances", "2"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("port 0"), "{stderr}");
}
