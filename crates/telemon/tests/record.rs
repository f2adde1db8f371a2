//! `telemon record --config FILE --out DIR`: every collector's connections recorded, files rotated by size,
//! the total bounded, a SIGKILL leaving readable files, and `telemon replay DIR` playing a target back.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sim_common::Shutdown;
use smon_sim::Source;
use telemon_capture::{link_type, Capture, Limits};

mod support;
use support::{code, free_addr, run, stderr, stdout, within, SimOptions, Sims, Telemon};

/// One CPU's idle counter, growing by 1 every sample: the smon sim's figures.
struct Cpus(u64);

impl Source for Cpus {
    fn sample(&mut self) -> Vec<smon_codec::Sample> {
        self.0 += 1;
        vec![smon_codec::Sample::new("linux.cpu.idle", [0], 1000 + self.0)]
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut f: Vec<_> =
        std::fs::read_dir(dir).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    f.sort();
    f
}

/// The five sims, an interpreter in POLL mode besides (dialling telemon's `[[hmon_listen]]`), and telemon's
/// config over them, written to `config` in `dir`.
struct Setup {
    sims: Sims,
    dir: tempfile::TempDir,
    config: PathBuf,
}

async fn setup() -> Setup {
    let sims = Sims::start(SimOptions {
        smon_source: || Box::new(Cpus(0)),
        mono_counters: "Mono JIT/Compiled methods",
        mono_backoff_max: Duration::from_millis(100),
        ..SimOptions::default()
    })
    .await;
    sims.start_mono_agent();
    // An interpreter in POLL mode dials telemon's [[hmon_listen]] (retrying until it listens).
    let poll_addr = free_addr();
    tokio::spawn(
        dyalog_sim::Sim::new(dyalog_sim::Config::default())
            .poll(poll_addr.to_string(), sims.shutdown.clone()),
    );
    let text = format!(
        "[[meter161]]\nname = \"os161\"\ndir = \"{}\"\ninterval = \"10ms\"\n\
         [[smon]]\nname = \"box\"\nconnect = \"{}\"\n\
         [[sysinfo]]\nname = \"vm\"\nconnect = \"{}\"\nevery = \"200ms\"\n\
         [[hmon]]\nname = \"dyalog\"\nconnect = \"{}\"\npoll = \"500ms\"\n\
         [[mono_listen]]\nname = \"mono\"\nlisten = \"{}\"\n\
         [[hmon_listen]]\nname = \"poll\"\nlisten = \"{poll_addr}\"\n",
        sims.sys161_dir.path().display(),
        sims.smon_addr,
        sims.rvos_addr,
        sims.dyalog_addr,
        sims.mono_listen,
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.toml");
    std::fs::write(&config, text).unwrap();
    Setup { sims, dir, config }
}

/// `telemon serve --config CONFIG --listen ADDR --record DIR/rec` on a free address: the running telemon,
/// the address it serves on, and the directory it records to.
fn serve_recording(config: &Path, dir: &Path) -> (Telemon, SocketAddr, PathBuf) {
    let out = dir.join("rec");
    let listen = free_addr();
    let telemon = Telemon::spawn(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--listen",
        &listen.to_string(),
        "--record",
        out.to_str().unwrap(),
    ]);
    (telemon, listen, out)
}

/// `telemon record --config CONFIG --out OUT`, then the `limits` flags.
fn record(config: &Path, out: &Path, limits: &[&str]) -> Telemon {
    let mut args = vec!["record", "--config", config.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(limits);
    Telemon::spawn(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_rotates_survives_a_kill_and_replays_each_target() {
    let Setup { sims, dir, config } = setup().await;
    let out = dir.path().join("rec");
    let telemon = record(&config, &out, &["--record-max-bytes", "4000"]);
    // Wait for three files and every target in them (a safety net, not a timing assertion).
    let capture = within("three rotated files with a target of each protocol", async {
        loop {
            if files(&out).len() >= 3 {
                let (capture, _) = Capture::from_dir(&out, Limits::default()).unwrap();
                let protocols: Vec<u16> = capture.targets().iter().map(|t| t.link_type).collect();
                if [link_type::METER161, link_type::SMON, link_type::SYSINFO]
                    .iter()
                    .all(|p| protocols.contains(p))
                {
                    return capture;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    telemon.kill().await;
    sims.stop().await;
    // Each file stands alone, and no file but (perhaps) the last is cut.
    let all = files(&out);
    for f in &all[..all.len() - 1] {
        let c = Capture::from_file(f, Limits::default()).unwrap();
        assert_eq!(c.warning, None, "{}", f.display());
        assert!(f.metadata().unwrap().len() < 4000 + 70_000, "rotated by size");
    }
    let os161 = capture.targets().into_iter().find(|t| t.link_type == link_type::METER161).unwrap().clone();
    assert_eq!(os161.name, "os161");

    // The replay of the directory shows one row per DATA line the recording holds, in order.
    let (capture, _) = Capture::from_dir(&out, Limits::default()).unwrap();
    let inbound = capture.connections(Some("os161"))[0].inbound();
    let data_lines = String::from_utf8_lossy(&inbound).matches("\r\nDATA ").count();
    let run_out = run(&["replay", out.to_str().unwrap(), "--target", "os161", "--json"], None).await;
    assert_eq!(code(&run_out), 0, "{}", stderr(&run_out));
    let rows = support::json_lines(&stdout(&run_out));
    assert!(
        rows.len() >= data_lines.saturating_sub(1) && rows.len() <= data_lines,
        "{} rows, {data_lines} DATA lines",
        rows.len()
    );
    let nsec: Vec<u64> = rows.iter().map(|r| r["nsec"].as_u64().unwrap()).collect();
    assert!(nsec.windows(2).all(|w| w[1] > w[0]), "{nsec:?}");

    let run_out = run(&["replay", out.to_str().unwrap(), "--target", "box", "--json"], None).await;
    assert_eq!(code(&run_out), 0, "{}", stderr(&run_out));
    let values = support::json_lines(&stdout(&run_out));
    assert!(!values.is_empty());
    let run_out = run(&["replay", out.to_str().unwrap()], None).await;
    assert_eq!(code(&run_out), 2, "several targets need --target: {}", stderr(&run_out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_on_disk_is_bounded_by_deleting_the_oldest_files() {
    let Setup { sims, dir, config } = setup().await;
    let out = dir.path().join("rec");
    let telemon = record(&config, &out, &["--record-max-bytes", "3000", "--record-max-total", "12000"]);
    within("the first file deleted", async {
        loop {
            let f = files(&out);
            if f.len() >= 2 && !f[0].to_string_lossy().ends_with("-000001.pcapng") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    telemon.kill().await;
    sims.stop().await;
    let total: u64 = files(&out).iter().map(|f| f.metadata().unwrap().len()).sum();
    // The bound is checked when a file starts: the current file may have grown to about one more file.
    assert!(total <= 12_000 + 3_000 + 70_000, "total {total}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_record_exports_what_each_target_recorded() {
    let Setup { sims, dir, config } = setup().await;
    let (telemon, listen, out) = serve_recording(&config, dir.path());
    let value = |metrics: &str, family: &str, target: &str| -> Option<u64> {
        let prefix = format!("{family}{{target=\"{target}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&prefix)).map(|v| v.parse().unwrap())
    };
    let targets = ["os161", "box", "vm", "dyalog"];
    let first = within("every target's recorded bytes on /metrics", async {
        loop {
            if let Ok((200, m)) = support::http_get(listen, "/metrics", &[]).await {
                if targets.iter().all(|t| value(&m, "telemon_recording_bytes_total", t).unwrap_or(0) > 0) {
                    return m;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(first.contains("# TYPE telemon_recording_bytes_total counter\n"), "{first}");
    for t in targets {
        assert_eq!(value(&first, "telemon_recording_dropped_bytes_total", t), Some(0), "{t}");
    }
    // The count grows with what the targets send, and OpenMetrics names the family without `_total`.
    let accept = [("Accept", "application/openmetrics-text;version=1.0.0")];
    let later = within("os161's recorded bytes to grow", async {
        loop {
            let (_, m) = support::http_get(listen, "/metrics", &accept).await.unwrap();
            let now = value(&m, "telemon_recording_bytes_total", "os161").unwrap();
            if now > value(&first, "telemon_recording_bytes_total", "os161").unwrap() {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(later.contains("# TYPE telemon_recording_bytes counter\n"), "{later}");
    telemon.kill().await;
    sims.stop().await;
    // Every byte it counted is in the files (telemon may have written more since that scrape).
    let on_disk: u64 = files(&out).iter().map(|f| f.metadata().unwrap().len()).sum();
    let counted: u64 =
        targets.iter().map(|t| value(&first, "telemon_recording_bytes_total", t).unwrap()).sum();
    assert!(counted <= on_disk, "{counted} counted, {on_disk} on disk");
}

/// The first recording's connection of `target`, as the sims' `--replay` serves it.
fn first_connection(dir: &Path, target: &str) -> telemon_capture::Connection {
    let (capture, _) = Capture::from_dir(dir, Limits::default()).unwrap();
    capture
        .connections(Some(target))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no connection of {target}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sims_serving_a_recording_give_telemon_the_same_bytes_and_series() {
    use sim_common::recorded_peer::{Mode, Replay, Speed};
    // 1. Record every protocol from the live sims.
    let Setup { sims, dir, config } = setup().await;
    let first = dir.path().join("first");
    let telemon = record(&config, &first, &[]);
    within("a second sysinfo round and a few hmon polls recorded", async {
        loop {
            if let Ok((capture, _)) = Capture::from_dir(&first, Limits::default()) {
                let bytes =
                    |name: &str| capture.connections(Some(name)).first().map_or(0, |c| c.inbound().len());
                if bytes("vm") > 4000 && bytes("dyalog") > 2000 && bytes("os161") > 2000 && bytes("box") > 100
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    telemon.kill().await;
    sims.stop().await;

    // 2. Serve those recordings from the sims' replay (what `--replay FILE` runs), at ten times the pace.
    let shutdown = Shutdown::new();
    let replay = |protocol, mode| {
        let target = (protocol == link_type::HMON).then_some("dyalog"); // not the POLL-mode one
        Replay::load(&first, protocol, target, mode, Speed::Times(10.0)).unwrap()
    };
    let sys161_dir = tempfile::tempdir().unwrap();
    let (l, _) = sys161_sim::bind(sys161_dir.path()).unwrap();
    let l = sim_common::NumberedUnixListener::new(l);
    tokio::spawn(sim_common::recorded_peer::serve(
        l,
        replay(link_type::METER161, Mode::Stream),
        shutdown.clone(),
    ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let smon_addr = l.local_addr().unwrap();
    tokio::spawn(sim_common::recorded_peer::serve(
        l,
        replay(link_type::SMON, Mode::Stream),
        shutdown.clone(),
    ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rvos_addr = l.local_addr().unwrap();
    tokio::spawn(sim_common::recorded_peer::serve(
        l,
        replay(link_type::SYSINFO, Mode::Conversation),
        shutdown.clone(),
    ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hmon_addr = l.local_addr().unwrap();
    tokio::spawn(sim_common::recorded_peer::serve(
        l,
        replay(link_type::HMON, Mode::Conversation),
        shutdown.clone(),
    ));

    // 3. A fresh telemon with the same blocks records what the replaying sims serve.
    let config2 = format!(
        "[[meter161]]\nname = \"os161\"\ndir = \"{}\"\ninterval = \"10ms\"\n\
         [[smon]]\nname = \"box\"\nconnect = \"{smon_addr}\"\n\
         [[sysinfo]]\nname = \"vm\"\nconnect = \"{rvos_addr}\"\nevery = \"200ms\"\n\
         [[hmon]]\nname = \"dyalog\"\nconnect = \"{hmon_addr}\"\npoll = \"500ms\"\n",
        sys161_dir.path().display()
    );
    let config2_file = dir.path().join("fleet2.toml");
    std::fs::write(&config2_file, config2).unwrap();
    let second = dir.path().join("second");
    let telemon = record(&config2_file, &second, &[]);
    let targets = ["os161", "box", "vm", "dyalog"];
    let expected: Vec<Vec<u8>> = targets.iter().map(|t| first_connection(&first, t).inbound()).collect();
    within("the second recording to hold every byte the first did", async {
        loop {
            if let Ok((capture, _)) = Capture::from_dir(&second, Limits::default()) {
                let done = targets.iter().zip(&expected).all(|(t, want)| {
                    capture.connections(Some(t)).first().is_some_and(|c| c.inbound().len() >= want.len())
                });
                if done {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    telemon.kill().await;
    shutdown.cancel();
    for (t, want) in targets.iter().zip(&expected) {
        let got = first_connection(&second, t).inbound();
        assert_eq!(&got[..want.len()], &want[..], "{t}: the replaying sim served the recorded bytes");
        // The requests telemon sent the second time are those of the first (the conversation matched).
        let asked = first_connection(&second, t).bytes(telemon_capture::Direction::Outbound);
        let recorded = first_connection(&first, t).bytes(telemon_capture::Direction::Outbound);
        let n = asked.len().min(recorded.len());
        assert_eq!(asked[..n], recorded[..n], "{t}");
    }

    // 4. Through the exporter's collectors, both connections end with the same series and values (telemon's
    // own bookkeeping, such as connect counts, aside). Not hmon: its collector's replies are matched to
    // requests by UID, and the order in which the live collector sent its requests is not always the order
    // the replaying one sends them (`telemon export` of hmon is best effort).
    let last_values = |conn: telemon_capture::Connection| {
        let scrapes =
            telemon_fleet::rerun::replay(&telemon_fleet::Protocols::built_in(), vec![conn]).unwrap();
        let text = &scrapes.last().expect("a publication").text;
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("telemon_"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    for t in ["os161", "box", "vm"] {
        let before = last_values(first_connection(&first, t));
        let again = last_values(first_connection(&second, t));
        assert!(before.len() > 1, "{t}: {before:?}");
        assert_eq!(before, again, "{t}");
    }
}

/// The complete messages of each kind a target's recorded connections hold, as the one-target views print
/// them: meter161's DATA rows, HMON's JSON messages, smon's values.
fn recorded_messages(capture: &Capture, target: &str, protocol: u16) -> usize {
    let mut count = 0;
    for connection in capture.connections(Some(target)) {
        let mut buf = bytes::BytesMut::from(&connection.inbound()[..]);
        match protocol {
            link_type::METER161 => {
                let text = String::from_utf8_lossy(&buf);
                count +=
                    text.split_inclusive('\n').filter(|l| l.starts_with("DATA ") && l.ends_with('\n')).count()
            }
            link_type::HMON => {
                let mut codec = hmon::ClientCodec::new(hmon::ClientConfig::default().max_frame_len);
                while let Ok(Some(item)) = codec.decode(&mut buf) {
                    count += usize::from(matches!(item, Ok(hmon::Payload::Message(_))));
                }
            }
            link_type::SMON => {
                let mut decoder = smon_codec::StreamDecoder::new(smon_codec::DecoderConfig::default());
                while let Ok(Some(update)) = decoder.decode(&mut buf) {
                    count += usize::from(matches!(update, smon_codec::Update::Value { .. }));
                }
            }
            other => panic!("no count of {other} messages"),
        }
    }
    count
}

/// Issue 35: a recording made by `serve --record` and stopped with Ctrl-C ends where telemon stopped, often
/// in the middle of a reply; its replay reaches that end, says so, and exits 0 for every protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_recording_stopped_with_ctrl_c_replays_to_its_end_for_every_protocol() {
    let Setup { sims, dir, config } = setup().await;
    let (telemon, _, out) = serve_recording(&config, dir.path());
    within("a few messages of every target recorded", async {
        loop {
            if let Ok((capture, _)) = Capture::from_dir(&out, Limits::default()) {
                let targets = capture.targets();
                let bytes = |p: u16| {
                    targets
                        .iter()
                        .filter(|t| t.link_type == p)
                        .map(|t| capture.connections(Some(&t.name)).iter().map(|c| c.inbound().len()).sum())
                        .min()
                        .unwrap_or(0usize)
                };
                let hmon_targets = targets.iter().filter(|t| t.link_type == link_type::HMON).count();
                if bytes(link_type::SYSINFO) > 6000
                    && bytes(link_type::METER161) > 2000
                    && bytes(link_type::SMON) > 100
                    && bytes(link_type::MONO) > 500
                    && hmon_targets == 2
                    && bytes(link_type::HMON) > 2000
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let (status, _, err) = telemon.interrupt().await;
    assert_eq!(status, 0, "{err:?}");
    sims.stop().await;

    let (capture, _) = Capture::from_dir(&out, Limits::default()).unwrap();
    let targets: Vec<telemon_capture::Target> = capture.targets().into_iter().cloned().collect();
    assert_eq!(targets.len(), 6, "{targets:?}");
    for target in &targets {
        let run_out = run(&["replay", out.to_str().unwrap(), "--target", &target.name, "--json"], None).await;
        let (printed, err) = (support::json_lines(&stdout(&run_out)), stderr(&run_out));
        assert_eq!(code(&run_out), 0, "{}: {err}", target.name);
        assert!(err.contains("telemon: replay: end of recording"), "{}: {err}", target.name);
        match target.link_type {
            // A reply cut by the stop is not a report: every complete one is printed.
            link_type::SYSINFO => {
                let connection = &capture.connections(Some(&target.name))[0];
                let asked = connection.bytes(telemon_capture::Direction::Outbound);
                let requests = sysinfo_requests(&asked);
                assert!(
                    printed.len() + 1 >= requests && printed.len() <= requests && printed.len() > 5,
                    "{}: {} reports for {requests} requests: {err}",
                    target.name,
                    printed.len()
                );
            }
            // Only the samples that change something are printed.
            link_type::MONO => assert!(!printed.is_empty(), "{}: {err}", target.name),
            protocol => {
                let recorded = recorded_messages(&capture, &target.name, protocol);
                assert!(recorded > 2, "{}: {recorded}", target.name);
                assert_eq!(printed.len(), recorded, "{}: {err}", target.name);
            }
        }
    }
}

/// How many sysinfo requests the client sent (each message on a channel other than the boot channel).
fn sysinfo_requests(outbound: &[u8]) -> usize {
    let mut buf = bytes::BytesMut::from(outbound);
    let mut n = 0;
    while let Ok(Some(frame)) = sysinfo_wire::decode_frame(&mut buf) {
        if let sysinfo_wire::Frame::Message { channel, .. } = frame {
            n += usize::from(channel != sysinfo_wire::ChannelId::BOOT);
        }
    }
    n
}

/// Issue 45: `telemon serve --record DIR` that fails to start (its port is taken) left a 0-byte `.pcapng`
/// behind. A recording's file is created with its first record.
#[tokio::test]
async fn a_serve_that_fails_to_start_leaves_no_recording_behind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rec");
    let listen = taken.local_addr().unwrap().to_string();
    let args = ["serve", "--hmon", "127.0.0.1:9", "--listen", &listen, "--record", out.to_str().unwrap()];
    let result = run(&args, None).await;
    assert_ne!(code(&result), 0, "{}", stderr(&result));
    assert!(stderr(&result).contains(&listen), "{}", stderr(&result));
    assert_eq!(files(&out), Vec::<PathBuf>::new(), "{}", stderr(&result));
}
