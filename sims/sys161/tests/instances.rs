//! `sys161-sim --instances 3`: one process serving three machines, at DIR/0, DIR/1 and DIR/2, each
//! answering meter161 clients on its own socket.

use futures::StreamExt;
use sim_common::{start_binary, within};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_sys161-sim");

/// Starts the binary and waits for its start-up line `ready`; its stderr if it exits first.
async fn start(args: &[&str], ready: &str) -> Result<Child, String> {
    start_binary(BIN, args, ready).await
}

#[tokio::test]
async fn three_instances_answer_each_on_its_own_socket() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let mut sim = start(&["--dir", root, "--instances", "3"], "serving 3 instances on").await.unwrap();
    for i in 0..3 {
        let at = dir.path().join(i.to_string());
        let mut client =
            within("a connection", meter161::Client::connect(&at, &meter161::ClientConfig::default()))
                .await
                .unwrap_or_else(|e| panic!("instance {i} at {}: {e}", at.display()));
        let sample = within("a sample", client.next()).await.expect("a sample").expect("a valid sample");
        assert_eq!(sample.header().names(), meter161::SYS161_FIELDS, "instance {i}");
    }
    assert!(!dir.path().join("3").exists(), "only DIR/0 to DIR/2 are served");
    assert!(!dir.path().join(".sockets").exists(), "nothing is served at DIR itself");
    sim.kill().await.unwrap();
}

#[tokio::test]
async fn zero_instances_is_a_usage_error() {
    let out = Command::new(BIN).args(["--instances", "0"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
