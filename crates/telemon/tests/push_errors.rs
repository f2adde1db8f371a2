//! Issue 45: what `telemon serve` says when a push sender cannot send: the whole cause, not reqwest's
//! `error sending request for url (...)` alone.

use sim_common::Shutdown;
use smon_sim::{Config as SmonConfig, MIN_INTERVAL};

mod support;
use support::{free_addr, Cpus, Telemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_refuses_the_connection_is_said_to() {
    let shutdown = Shutdown::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let smon = listener.local_addr().unwrap();
    let config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(listener, Cpus(0), config, shutdown.clone()));
    // Nothing listens there.
    let url = format!("http://{}/api/v1/write", free_addr());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("telemon.toml");
    let toml = format!(
        "[[smon]]\nname = \"box\"\nconnect = \"{smon}\"\n[[remote_write]]\nurl = \"{url}\"\nbatch = \"100ms\"\n"
    );
    std::fs::write(&config, toml).unwrap();
    let listen = free_addr().to_string();
    let mut serve = Telemon::spawn(&["serve", "--config", config.to_str().unwrap(), "--listen", &listen]);
    let line = serve.stderr_line(&format!("telemon: push to {url}: ")).await;
    assert!(line.contains("Connection refused"), "{line}");
    assert!(line.ends_with("; retrying"), "{line}");
    serve.kill().await;
    shutdown.cancel();
}
