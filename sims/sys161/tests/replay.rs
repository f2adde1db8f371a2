//! `sys161-sim --replay FILE`: the binary serves a recording back, byte for byte, to a meter161 client.

use futures::StreamExt;
use sim_common::within;
use telemon_capture::{link_type, Direction, Record, RecordKind, Target, Writer};

const BIN: &str = env!("CARGO_BIN_EXE_sys161-sim");

#[tokio::test]
async fn a_recording_is_served_back_to_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = Writer::new(Vec::new(), "test").unwrap();
    let i = w.interface(&Target::new("os161", link_type::METER161, "/x/.sockets/meter")).unwrap();
    let mut t = 1_700_000_000_000_000_000u64;
    let mut data = |bytes: &[u8]| {
        t += 10_000_000;
        let kind = RecordKind::Data { direction: Direction::Inbound, bytes: bytes.to_vec() };
        w.record(&Record { interface: i, time_ns: t, dropped: 0, kind }).unwrap();
    };
    data(b"HELLO 2\r\nHEAD nsec irqs\r\nWIDTH 11 4\r\n");
    for n in 1..=5u64 {
        data(format!("DATA {} {}\r\n", n * 200_000_000, 7 * n).as_bytes());
    }
    let rec = dir.path().join("rec.pcapng");
    std::fs::write(&rec, w.into_inner()).unwrap();

    let served = dir.path().join("served");
    std::fs::create_dir(&served).unwrap();
    let _sim = tokio::process::Command::new(BIN)
        .arg("--dir")
        .arg(&served)
        .arg("--replay")
        .arg(&rec)
        .args(["--replay-speed", "max", "--speed", "2"])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut client = within("the replaying sim to accept", async {
        loop {
            match meter161::Client::connect(&served, &meter161::ClientConfig::default()).await {
                Ok(c) => return c,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert_eq!(client.header().names(), ["nsec", "irqs"]);
    let mut irqs = Vec::new();
    while let Some(sample) = within("a sample", client.next()).await {
        irqs.push(sample.unwrap().values()[1]);
    }
    assert_eq!(irqs, [7, 14, 21, 28, 35], "every recorded row, then the end of the recording");
}
