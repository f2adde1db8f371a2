//! `mono-agent-sim --instances 3`: one process running three agents that all dial the same inspector,
//! each on its own connection with its own Hello and samples.

use std::process::Stdio;
use std::time::Duration;

use mono_counters::{ClientConfig, Inspector};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_mono-agent-sim");

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
