//! smon-sim end to end: TCP clients over real sockets, the file written by two runs, the binary's
//! command line and error paths.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sim_common::{SendError, Shutdown};
use smon_codec::{DecoderConfig, Sample, StreamDecoder, Update, UpdateReader, Value};
use smon_sim::{serve, write_stream, Config, ProcSource, ServerEvent, Source};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const BIN: &str = env!("CARGO_BIN_EXE_smon-sim");

/// A small but complete fake /proc: two CPUs, memory, load, uptime, two interfaces, one disk.
fn fake_proc(dir: &Path) {
    std::fs::create_dir_all(dir.join("net")).unwrap();
    let files = [
        ("stat", "cpu  10 0 5 100 1 0 0 0 0 0\ncpu0 4 0 2 50 1 0 0 0 0 0\ncpu1 6 0 3 50 0 0 0 0 0 0\nctxt 999\nprocesses 42\nprocs_running 1\n"),
        ("meminfo", "MemTotal: 16384 kB\nMemFree: 1024 kB\nMemAvailable: 8192 kB\n"),
        ("loadavg", "0.52 0.58 0.59 2/1234 5678\n"),
        ("uptime", "12345.67 23456.78\n"),
        ("net/dev", "Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n    lo: 100 2 0 0 0 0 0 0 100 2 0 0 0 0 0 0\n  eth0: 5000 7 0 0 0 0 0 0 300 3 0 0 0 0 0 0\n"),
        ("diskstats", "   8       0 sda 1234 5 6789 10 55 1 80 20 0 30 40\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// A `ProcSource` on a fake /proc whose clock ticks 5 s per sample from 1_100_000_000.
fn source(dir: &Path) -> ProcSource {
    let t = AtomicU64::new(1_100_000_000);
    ProcSource::new(dir, dir).with_clock(Box::new(move || t.fetch_add(5, Ordering::Relaxed)))
}

fn fast() -> Config {
    Config { interval: smon_sim::MIN_INTERVAL, ..Config::default() }
}

async fn next(reader: &mut UpdateReader<TcpStream>) -> Update {
    tokio::time::timeout(Duration::from_secs(20), reader.next())
        .await
        .expect("an update in time")
        .expect("stream still open")
        .expect("no decode error")
}

/// Reads until `n` `smon.time` values have been seen; returns every update.
async fn until_samples(reader: &mut UpdateReader<TcpStream>, n: usize) -> Vec<Update> {
    let mut out = Vec::new();
    let mut seen = 0;
    while seen < n {
        let u = next(reader).await;
        if matches!(&u, Update::Value { name, .. } if &**name == "smon.time") {
            seen += 1;
        }
        out.push(u);
    }
    out
}

/// smon-sim serving a fake `/proc` (in its own temp dir) on 127.0.0.1, port 0.
struct Running {
    addr: std::net::SocketAddr,
    server: sim_common::Running,
    _proc: tempfile::TempDir,
}

async fn start(config: Config) -> Running {
    let proc = tempfile::tempdir().unwrap();
    fake_proc(proc.path());
    let source = source(proc.path());
    let (server, addr) =
        sim_common::Running::spawn_tcp(|listener, shutdown| serve(listener, source, config, shutdown))
            .await
            .unwrap();
    Running { addr, server, _proc: proc }
}

impl Running {
    async fn stop(self) {
        self.server.stop().await.unwrap();
    }
}

fn has_value(updates: &[Update], name: &str, index: &[u64]) -> bool {
    updates.iter().any(|u| matches!(u, Update::Value { name: n, index: i, .. } if &**n == name && i == index))
}

#[tokio::test]
async fn tcp_client_gets_resync_header_definitions_then_live_samples() {
    let sim = start(fast()).await;
    let addr = sim.addr;

    let mut reader = UpdateReader::new(TcpStream::connect(addr).await.unwrap(), DecoderConfig::default());
    assert_eq!(next(&mut reader).await, Update::Resync);
    let updates = until_samples(&mut reader, 3).await;
    assert!(matches!(&updates[0], Update::Define { token: 1, name, .. } if &**name == "mon.version"));
    assert_eq!(
        updates[1],
        Update::Value {
            token: 1,
            name: "mon.version".into(),
            index: vec![],
            value: Value::from(smon_sim::VERSION),
        }
    );
    for (name, index) in [
        ("linux.cpu.idle", &[0][..]),
        ("linux.cpu.idle", &[1]),
        ("linux.mem.total", &[]),
        ("linux.load.avg1_x100", &[]),
        ("linux.net.rx_bytes", &[2]),
        ("linux.disk.reads", &[8, 0]),
        ("linux.uptime", &[]),
    ] {
        assert!(has_value(&updates, name, index), "{name}{index:?}");
    }
    let times: Vec<&Value> = updates
        .iter()
        .filter_map(|u| match u {
            Update::Value { name, value, .. } if &**name == "smon.time" => Some(value),
            _ => None,
        })
        .collect();
    assert_eq!(times.len(), 3);
    sim.stop().await;
}

#[tokio::test]
async fn a_late_client_gets_full_definitions_and_the_latest_values() {
    let sim = start(fast()).await;
    let addr = sim.addr;

    let mut first = UpdateReader::new(TcpStream::connect(addr).await.unwrap(), DecoderConfig::default());
    until_samples(&mut first, 3).await;
    let mut late = UpdateReader::new(TcpStream::connect(addr).await.unwrap(), DecoderConfig::default());
    assert_eq!(next(&mut late).await, Update::Resync);
    // The latest sample comes at once, as definitions with values, before the next live one.
    let updates = until_samples(&mut late, 2).await;
    for name in ["mon.version", "mon.compiled", "linux.cpu.idle", "linux.disk.reads"] {
        assert!(
            updates.iter().any(|u| matches!(u, Update::Define { name: n, .. } if &**n == name)),
            "{name}"
        );
    }
    assert!(has_value(&updates, "linux.disk.reads", &[8, 0]));
    sim.stop().await;
}

/// Big samples (a 48 KiB string restarted every time), so a client that stops reading fills its
/// socket buffers and then its queue quickly.
struct Fat(u64);

impl Source for Fat {
    fn sample(&mut self) -> Vec<Sample> {
        self.0 += 1;
        let text: Vec<u8> = (0..48 * 1024).map(|i| (i as u64 ^ self.0) as u8 | 1).collect();
        vec![Sample::new("smon.time", [], self.0), Sample::new("fat.blob", [], &text[..])]
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_client_is_dropped_while_others_keep_streaming() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let config = Config { client_queue: 2, events: Some(events_tx), ..fast() };
    let server = tokio::spawn(serve(listener, Fat(0), config, shutdown.clone()));

    // The good client reads everything and reports each smon.time it sees.
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let good = TcpStream::connect(addr).await.unwrap();
    let good_addr = good.local_addr().unwrap();
    let reader = tokio::spawn(async move {
        let mut r = UpdateReader::new(good, DecoderConfig::default());
        while let Some(u) = r.next().await {
            if let Update::Value { name, value: Value::Unsigned(t), .. } = u.expect("good client decodes") {
                if &*name == "smon.time" && seen_tx.send(t).is_err() {
                    return;
                }
            }
        }
    });
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let slow_addr = slow.local_addr().unwrap();

    let dropped = loop {
        match events.recv().await.expect("server alive") {
            ServerEvent::Dropped(peer, e) => break (peer, e),
            ServerEvent::Finished(peer) => panic!("{peer} finished unexpectedly"),
            ServerEvent::Connected(_) => {}
        }
    };
    assert_eq!(dropped.0, slow_addr, "only the slow client is dropped, not {good_addr}");
    assert!(matches!(dropped.1, SendError::Lagged { capacity: 2, .. }), "{:?}", dropped.1);

    // The good client keeps getting new samples after the drop.
    let mut last = 0;
    while let Some(t) = seen.recv().await {
        if last == 0 {
            last = t;
        } else if t >= last + 3 {
            break;
        }
    }
    // The slow client, reading at last, gets what was already sent, then the end of the stream.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut rest)).await.unwrap().unwrap();
    assert!(rest.starts_with(&smon_codec::RESYNC));

    shutdown.cancel();
    server.await.unwrap().unwrap();
    reader.abort();
}

#[tokio::test]
async fn the_same_input_gives_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    fake_proc(dir.path());
    let config = Config { count: Some(3), ..fast() };
    let mut a = Vec::new();
    let mut b = Vec::new();
    write_stream(&mut a, source(dir.path()), &config, Shutdown::new()).await.unwrap();
    write_stream(&mut b, source(dir.path()), &config, Shutdown::new()).await.unwrap();
    assert_eq!(a, b);
    assert!(a.starts_with(&smon_codec::RESYNC));
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).env("RUST_LOG", "warn").output().unwrap()
}

#[test]
fn a_file_written_by_two_runs_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    fake_proc(dir.path());
    let proc = dir.path().to_str().unwrap();
    let out = dir.path().join("mon.out");
    for _ in 0..2 {
        let o = run(&[
            "--out",
            out.to_str().unwrap(),
            "--count",
            "3",
            "--interval",
            "10ms",
            "--proc",
            proc,
            "--sys",
            proc,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let updates = StreamDecoder::decode_all(&std::fs::read(&out).unwrap(), DecoderConfig::default()).unwrap();
    assert_eq!(updates.iter().filter(|u| **u == Update::Resync).count(), 2);
    assert_eq!(updates[0], Update::Resync);
    let samples: Vec<Sample> = updates.into_iter().filter_map(Update::into_sample).collect();
    assert_eq!(samples.iter().filter(|s| &*s.name == "smon.time").count(), 6);
    assert_eq!(samples.iter().filter(|s| &*s.name == "mon.version").count(), 2);
    assert_eq!(samples.iter().filter(|s| &*s.name == "linux.cpu.idle" && s.index == [1]).count(), 6);
}

#[test]
fn stdout_is_the_default_output() {
    let dir = tempfile::tempdir().unwrap();
    fake_proc(dir.path());
    let proc = dir.path().to_str().unwrap();
    let o = run(&["--count", "2", "--interval", "10ms", "--proc", proc, "--sys", proc]);
    assert!(o.status.success());
    let updates = StreamDecoder::decode_all(&o.stdout, DecoderConfig::default()).unwrap();
    assert_eq!(updates[0], Update::Resync);
    assert!(has_value(&updates, "linux.cpu.system", &[0]));
}

#[test]
fn bad_command_lines_fail_clearly() {
    let o = run(&["--interval", "1ms", "--count", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least"));
    let o = run(&["--out", "x", "--listen", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["--proc", "/nonexistent/proc", "--count", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/proc"));
    let o = run(&["--listen", "256.0.0.1:1", "--count", "1"]);
    assert_eq!(o.status.code(), Some(1));
}

#[tokio::test]
async fn a_client_that_leaves_is_reported_and_does_not_disturb_the_others() {
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let sim = start(Config { events: Some(events_tx), ..fast() }).await;
    let addr = sim.addr;

    let leaver = TcpStream::connect(addr).await.unwrap();
    let leaver_addr = leaver.local_addr().unwrap();
    drop(leaver);
    let mut stayer = UpdateReader::new(TcpStream::connect(addr).await.unwrap(), DecoderConfig::default());
    loop {
        match tokio::time::timeout(Duration::from_secs(20), events.recv()).await.unwrap().unwrap() {
            ServerEvent::Finished(p) | ServerEvent::Dropped(p, _) if p == leaver_addr => break,
            _ => {}
        }
    }
    assert_eq!(until_samples(&mut stayer, 2).await.first(), Some(&Update::Resync));
    sim.stop().await;
}
