//! What a client that asks and does not read can pin in the sim. A client asking for the 16384-entry trace on
//! many channels at once used to make the sim render and hold every reply together (about 446 KB each, 14 MB
//! for one client); now a connection has one reply in flight, and its text is rendered outside the system lock.

use rvos_sim::{Config, SystemConfig};
use sim_common::Running;
use sysinfo_wire::{Client, ClientConfig, End, Endpoint, Message, SysinfoCommand};

#[tokio::test]
async fn unread_trace_requests_on_many_channels_hold_one_rendered_reply_at_a_time() {
    let config = Config { system: SystemConfig::default(), ..Config::default() }; // a full trace ring
    let (sim, handle) = rvos_sim::start(config);
    let (running, addr) =
        Running::spawn_tcp(|listener, shutdown| rvos_sim::serve(listener, sim, shutdown)).await.unwrap();
    let mut client =
        Client::connect(&Endpoint::Tcp(addr.to_string()), ClientConfig::default()).await.unwrap();
    let mut channels = Vec::new();
    for _ in 0..8 {
        channels.push(client.connect_service("sysinfo").await.unwrap());
    }
    // Every request goes out before the client reads a byte of any reply.
    for &channel in &channels {
        client.send(channel, Message::encode(&SysinfoCommand::Trace).unwrap()).await.unwrap();
    }
    let mut largest = 0;
    for channel in channels {
        let reply = client.read_reply(channel).await.unwrap();
        assert_eq!(reply.end, End::Sentinel);
        largest = largest.max(reply.text.len() as u64);
    }
    let stats = handle.stats();
    eprintln!(
        "figure: 8 unread Trace requests of up to {largest} bytes each: at most {} bytes of reply text held at once",
        stats.peak_reply_bytes_held
    );
    assert!(largest > 400_000, "a full ring renders to {largest} bytes");
    assert!(stats.peak_reply_bytes_held <= largest, "{} bytes held at once", stats.peak_reply_bytes_held);
    assert_eq!(stats.reply_bytes_held, 0);
    assert_eq!(stats.replies, 8);
    running.stop().await.unwrap();
}
