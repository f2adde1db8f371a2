//! The dial-in listeners (`[[mono_listen]]`, `[[hmon_listen]]`) under stress: bursts, names,
//! floods (issue 18). Loopback only, bounded in count and time.

use std::time::Duration;

use telemon::fleet::config::FleetConfig;
use telemon::fleet::{Fleet, FleetSnapshot, Value};

mod support;

fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

/// Waits (with a safety-net deadline) until `ok` holds for the fleet's snapshot.
async fn until(fleet: &Fleet, what: &str, mut ok: impl FnMut(&FleetSnapshot) -> bool) -> FleetSnapshot {
    let mut changed = fleet.changed();
    support::within(what, async {
        loop {
            let snap = fleet.snapshot();
            if ok(&snap) {
                return snap;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), changed.changed()).await;
        }
    })
    .await
}

fn working_set(snap: &FleetSnapshot) -> Option<f64> {
    let t = snap.targets.first()?;
    t.series.iter().find(|s| &*s.family == "mono_runtime_bytes").and_then(|s| match s.value {
        Value::Number(v) => Some(v),
        _ => None,
    })
}

/// Issue 18: the fleet's Mono collector keeps exact values through a burst of empty samples (on a
/// current-thread runtime the reader decodes a whole buffer before the collector runs).
#[tokio::test(flavor = "current_thread")]
async fn the_mono_collector_keeps_exact_values_through_a_burst() {
    use tokio::io::AsyncWriteExt;
    let addr = free_addr();
    let config =
        FleetConfig::parse("t.toml", &format!("[[mono_listen]]\nname = \"m\"\nlisten = \"{addr}\"\n"))
            .unwrap();
    let fleet = Fleet::start(&config).await.unwrap();
    let mut agent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    for write in support::mono_burst() {
        agent.write_all(&write).await.unwrap();
    }
    until(&fleet, "the last value", |s| working_set(s) == Some(104.0)).await;
    fleet.shutdown().await;
}
