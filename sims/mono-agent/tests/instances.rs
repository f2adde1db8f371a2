//! `mono-agent-sim --instances 3`: one process running three agents that all dial the same inspector,
//! each on its own connection with its own Hello and samples.

use mono_counters::{ClientConfig, Inspector};
use sim_common::{start_binary, within};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_mono-agent-sim");

/// Starts the binary and waits for its start-up line `ready`; its stderr if it exits first.
async fn start(args: &[&str], ready: &str) -> Result<Child, String> {
    start_binary(BIN, args, ready).await
}

#[tokio::test]
async fn three_agents_dial_the_same_inspector() {
    let inspector = Inspector::bind("127.0.0.1:0", ClientConfig::default()).await.unwrap();
    let address = inspector.local_addr().unwrap().to_string();
    let args = [
        "--address",
        &address,
        "--instances",
        "3",
        "--interval",
        "10",
        "--fixed-values",
        "--counters",
        "Mono JIT/Compiled methods",
    ];
    let mut agents = start(&args, "3 instances dialling").await.unwrap();
    let mut peers = std::collections::HashSet::new();
    for _ in 0..3 {
        let (mut session, peer) = within("an agent", inspector.accept()).await.expect("a Hello");
        assert_eq!(session.hello().headers.len(), 1, "{peer}");
        assert_eq!(session.hello().headers[0].full_name(), "Mono JIT/Compiled methods", "{peer}");
        let sample = within("a sample", session.next_sample()).await.expect("a sample").expect("one sample");
        assert_eq!(sample.changed, vec![0], "{peer}");
        peers.insert(peer);
    }
    assert_eq!(peers.len(), 3, "three connections: {peers:?}");
    agents.kill().await.unwrap();
}

#[tokio::test]
async fn several_agents_cannot_share_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let address = format!("file://{}", dir.path().join("counters.bin").display());
    let out = Command::new(BIN).args(["--address", &address, "--instances", "2"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--instances"), "{stderr}");
    assert!(!dir.path().join("counters.bin").exists());
}
