//! Issue 40: the Wireshark Lua dissectors of `contrib/wireshark/telemon.lua`, run by the real tshark.
//!
//! Each test runs `tshark -2 -X lua_script:telemon.lua -r FILE -T json -e FIELD ...` and compares what it
//! decodes with what the project's decoders (or the real peers' own figures) say: the committed real-peer
//! recordings, recordings of every sim made by `telemon record`, live TCP sessions split into tiny
//! segments and captured on loopback by dumpcap, and the fuzz corpora written into recordings. Under
//! `CI=true` a missing tshark fails the tests; elsewhere they skip loudly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use telemon_capture::{link_type, Direction, Record, RecordKind, Target, Writer};

mod support;
use support::{code, need_on_path, run, stderr, stdout, within, SimOptions, Sims, Telemon};

const LUA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/wireshark/telemon.lua");
const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers");

/// The expert fields that say a dissector went wrong: Wireshark's own for a Lua error, and the one
/// `telemon.lua` adds when it catches an unexpected Lua error itself.
const BUG_FILTER: &str = "_ws.lua.error || telemon.bug.meter161 || telemon.bug.hmon || \
                          telemon.bug.mono_counters || telemon.bug.smon || telemon.bug.rvos_sysinfo";

fn tshark_or_skip(test: &str) -> Option<PathBuf> {
    need_on_path(test, "tshark", "apt-get install tshark (bash .ci/tshark.sh)")
}

/// `tshark ARGS` (with the plugin unless `plugin` is false), bounded in time; fails on a Lua error on
/// stderr. Returns stdout.
async fn tshark(args: &[&str], plugin: bool) -> String {
    let mut cmd = tokio::process::Command::new("tshark");
    if plugin {
        cmd.arg("-X").arg(format!("lua_script:{LUA}"));
    }
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let out = within(&format!("tshark {args:?}"), cmd.output()).await.expect("tshark runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark {args:?}: {err}");
    assert!(!err.contains("Lua Error") && !err.contains("lua_error"), "tshark {args:?}: {err}");
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}

/// Per packet (those `filter` keeps), each asked field's values in order.
type Packets = Vec<BTreeMap<String, Vec<String>>>;

async fn fields(file: &Path, filter: Option<&str>, names: &[&str]) -> Packets {
    let mut args = vec!["-2", "-r", file.to_str().unwrap(), "-T", "json"];
    if let Some(f) = filter {
        args.extend(["-Y", f]);
    }
    for n in names {
        args.extend(["-e", n]);
    }
    let text = tshark(&args, true).await;
    let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:.300}"));
    json.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let layers = p["_source"]["layers"].as_object().unwrap();
            layers
                .iter()
                .map(|(k, v)| {
                    let values = v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned());
                    (k.clone(), values.collect())
                })
                .collect()
        })
        .collect()
}

/// Every value of `name`, across packets, in order.
fn all(packets: &Packets, name: &str) -> Vec<String> {
    packets.iter().flat_map(|p| p.get(name).cloned().unwrap_or_default()).collect()
}

/// No frame of `file` carries a Lua error or the plugin's own bug note.
async fn assert_no_lua_error(file: &Path) {
    let out = tshark(
        &["-2", "-r", file.to_str().unwrap(), "-Y", BUG_FILTER, "-T", "fields", "-e", "frame.number"],
        true,
    )
    .await;
    assert!(out.trim().is_empty(), "{}: frames with a Lua error: {out}", file.display());
}

fn hex_bytes(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

// ---------------------------------------------------------------------------------------------------
// The real peers' recordings (tests/peers/*/README.md)
// ---------------------------------------------------------------------------------------------------

const METER_FIELDS: [&str; 11] =
    ["nsec", "kinsns", "uinsns", "udud", "idle", "irqs", "exns", "disk", "con", "emu", "net"];

/// The counters at each DATA line, as tshark decodes them (`meter161.<name>`, one value per line).
async fn meter161_rows(file: &Path, filter: Option<&str>) -> Vec<Vec<u64>> {
    let names: Vec<String> = METER_FIELDS.iter().map(|f| format!("meter161.{f}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let packets = fields(file, filter, &refs).await;
    let columns: Vec<Vec<u64>> =
        refs.iter().map(|n| all(&packets, n).iter().map(|v| v.parse().unwrap()).collect()).collect();
    let n = columns[0].len();
    assert!(columns.iter().all(|c| c.len() == n), "one value of every counter per DATA line");
    (0..n).map(|i| columns.iter().map(|c| c[i]).collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sys161s_data_lines_equal_the_tables_of_the_real_stat161() {
    if tshark_or_skip("sys161s_data_lines_equal_the_tables_of_the_real_stat161").is_none() {
        return;
    }
    for (recording, table) in
        [("spin-200ms.pcapng", "spin-200ms.stat161.txt"), ("spin-1s.pcapng", "spin-1s.stat161.txt")]
    {
        let file = Path::new(PEERS).join("sys161").join(recording);
        assert_no_lua_error(&file).await;
        // stat161's first row is the cumulative values, the others the deltas: add them up.
        let text = std::fs::read_to_string(Path::new(PEERS).join("sys161").join(table)).unwrap();
        let mut sum = vec![0u64; 11];
        let want: Vec<Vec<u64>> = text
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .map(|l| {
                for (s, d) in sum.iter_mut().zip(l.split_whitespace()) {
                    *s += d.parse::<u64>().unwrap();
                }
                sum.clone()
            })
            .collect();
        let got = meter161_rows(&file, None).await;
        // stat161 printed up to its first disconnect; the recording may hold lines after what it printed.
        assert!(
            got.len() >= want.len() && want.len() >= 10,
            "{recording}: {} rows, stat161 {}",
            got.len(),
            want.len()
        );
        assert_eq!(got[..want.len()], want[..], "{recording}");
        eprintln!("figure: {recording}: {} DATA lines decoded", got.len());
        let packets = fields(&file, None, &["meter161.kind", "meter161.interval"]).await;
        let kinds = all(&packets, "meter161.kind");
        for k in ["HELLO", "HEAD", "WIDTH"] {
            assert_eq!(kinds.iter().filter(|x| *x == k).count(), 1, "{recording}: {kinds:?}");
        }
        let intervals = all(&packets, "meter161.interval");
        if recording == "spin-1s.pcapng" {
            assert_eq!(intervals, ["1000000000"]);
        } else {
            assert!(intervals.is_empty());
        }
    }
}

/// The Mono agent's reference: per sample timestamp, every counter's value as the agent read it (as the
/// little-endian bytes it sends: INT 4 bytes, LONG and WORD 8, DOUBLE the IEEE bits).
fn mono_reference() -> BTreeMap<i64, BTreeMap<String, Vec<u8>>> {
    let text =
        std::fs::read_to_string(Path::new(PEERS).join("mono/mono-agent-2014.reference.jsonl")).unwrap();
    let mut out: BTreeMap<i64, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    for line in support::json_lines(&text) {
        let name = format!("{}/{}", line["category"].as_str().unwrap(), line["name"].as_str().unwrap());
        let bytes = match line["type"].as_str().unwrap() {
            "INT" => (line["value"].as_i64().unwrap() as i32).to_le_bytes().to_vec(),
            "DOUBLE" => line["value"].as_f64().unwrap().to_le_bytes().to_vec(),
            _ => line["value"].as_i64().unwrap().to_le_bytes().to_vec(),
        };
        out.entry(line["timestamp"].as_i64().unwrap()).or_default().insert(name, bytes);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_mono_agents_sampled_values_equal_its_reference() {
    if tshark_or_skip("the_real_mono_agents_sampled_values_equal_its_reference").is_none() {
        return;
    }
    let file = Path::new(PEERS).join("mono/mono-agent-2014.pcapng");
    assert_no_lua_error(&file).await;
    let reference = mono_reference();
    let packets = fields(
        &file,
        None,
        &[
            "mono_counters.command",
            "mono_counters.timestamp",
            "mono_counters.value.sample",
            "mono_counters.value.counter",
            "mono_counters.value.raw",
            "mono_counters.segment",
        ],
    )
    .await;
    let commands = all(&packets, "mono_counters.command");
    let count = |c: &str| commands.iter().filter(|x| *x == c).count();
    assert_eq!(count("Hello"), 1, "{commands:?}");
    assert_eq!(count("List"), 1);
    assert_eq!(count("List response"), 1);
    assert_eq!((count("Add"), count("Add response")), (3, 3));
    assert_eq!(count("Good Bye"), 1);
    // The agent writes each field with its own write(): its messages span several records, and say so.
    assert!(!all(&packets, "mono_counters.segment").is_empty(), "reassembled messages list their frames");
    let timestamps: Vec<i64> =
        all(&packets, "mono_counters.timestamp").iter().map(|t| t.parse().unwrap()).collect();
    assert_eq!(count("Sampling"), timestamps.len());
    assert!(timestamps.len() >= 30, "{} samples", timestamps.len());
    let (samples, names, raws) = (
        all(&packets, "mono_counters.value.sample"),
        all(&packets, "mono_counters.value.counter"),
        all(&packets, "mono_counters.value.raw"),
    );
    assert_eq!((samples.len(), names.len()), (raws.len(), raws.len()));
    // Each value sent is the agent's own; the values known after each sample (the agent sends only what
    // changed) are every value the agent read for that sample.
    let mut state: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut values = samples.iter().zip(&names).zip(&raws).peekable();
    for ts in &timestamps {
        let want = reference.get(ts).unwrap_or_else(|| panic!("sample {ts} is not in the reference"));
        while let Some(((sample, name), raw)) = values.next_if(|((s, _), _)| s.parse::<i64>().unwrap() == *ts)
        {
            let _ = sample;
            let bytes = hex_bytes(raw);
            assert_eq!(Some(&bytes), want.get(name), "sample {ts}, {name}");
            state.insert(name.clone(), bytes);
        }
        for (name, bytes) in &state {
            assert_eq!(Some(bytes), want.get(name), "sample {ts}: {name} as last sent");
        }
    }
    assert!(values.next().is_none(), "every value belongs to a sample, in order");
    assert_eq!(state.len(), 14, "all 14 counters sampled: {:?}", state.keys());
    eprintln!(
        "figure: mono-agent-2014.pcapng: {} messages, {} samples, {} values",
        commands.len(),
        timestamps.len(),
        raws.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rvos_reassembled_reports_equal_the_texts_the_real_service_sent() {
    if tshark_or_skip("rvos_reassembled_reports_equal_the_texts_the_real_service_sent").is_none() {
        return;
    }
    let dir = Path::new(PEERS).join("rvos");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 9);
    for file in names {
        assert_no_lua_error(&file).await;
        let reference =
            dir.join(file.file_name().unwrap().to_str().unwrap().replace(".pcapng", ".reference.jsonl"));
        let want = support::json_lines(&std::fs::read_to_string(reference).unwrap());
        let packets = fields(
            &file,
            None,
            &[
                "rvos_sysinfo.reply.report",
                "rvos_sysinfo.report.bytes",
                "rvos_sysinfo.reply.chunk_len",
                "rvos_sysinfo.reply.end",
            ],
        )
        .await;
        let reports = all(&packets, "rvos_sysinfo.reply.report");
        let texts: Vec<Vec<u8>> =
            all(&packets, "rvos_sysinfo.report.bytes").iter().map(|h| hex_bytes(h)).collect();
        let chunks: Vec<u64> =
            all(&packets, "rvos_sysinfo.reply.chunk_len").iter().map(|c| c.parse().unwrap()).collect();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(all(&packets, "rvos_sysinfo.reply.end").iter().all(|e| e == "sentinel"), "{name}");
        assert_eq!(reports.len(), want.len(), "{name}: one reply per reference line");
        assert_eq!(texts.len(), want.len(), "{name}");
        let mut want_chunks = Vec::new();
        for (i, w) in want.iter().enumerate() {
            assert_eq!(reports[i], w["command"].as_str().unwrap(), "{name}: reply {i}");
            assert_eq!(texts[i], w["text"].as_str().unwrap().as_bytes(), "{name}: reply {i}, byte for byte");
            want_chunks.extend(w["chunks"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()));
        }
        assert_eq!(chunks, want_chunks, "{name}: chunk lengths");
        eprintln!("figure: {name}: {} reports reassembled from {} chunks", reports.len(), chunks.len());
    }
}

// ---------------------------------------------------------------------------------------------------
// Recordings of the sims, against `telemon replay --json`
// ---------------------------------------------------------------------------------------------------

/// Records every sim for a while with `telemon record`: the recording's file.
async fn record_the_sims(dir: &Path) -> PathBuf {
    let sims = Sims::start(SimOptions::default()).await;
    sims.start_mono_agent();
    let config = dir.join("fleet.toml");
    std::fs::write(&config, sims.toml(Some("100ms"))).unwrap();
    let out = dir.join("rec");
    let telemon =
        Telemon::spawn(&["record", "--config", config.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    within("every target recorded with a few messages", async {
        loop {
            if let Ok((capture, _)) =
                telemon_capture::Capture::from_dir(&out, telemon_capture::Limits::default())
            {
                let bytes = |p: u16| {
                    let t: Vec<_> =
                        capture.targets().into_iter().filter(|t| t.link_type == p).cloned().collect();
                    t.iter()
                        .map(|t| {
                            capture
                                .connections(Some(&t.name))
                                .iter()
                                .map(|c| c.inbound().len())
                                .sum::<usize>()
                        })
                        .sum::<usize>()
                };
                if bytes(link_type::SYSINFO) > 8000
                    && bytes(link_type::METER161) > 2000
                    && bytes(link_type::SMON) > 300
                    && bytes(link_type::MONO) > 600
                    && bytes(link_type::HMON) > 4000
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
    let mut files: Vec<PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.remove(0)
}

async fn replay_json(file: &Path, target: &str) -> Vec<Value> {
    let out =
        run(&["replay", file.to_str().unwrap(), "--target", target, "--json", "--speed", "max"], None).await;
    assert_eq!(code(&out), 0, "{target}: {}", stderr(&out));
    support::json_lines(&stdout(&out))
}

fn on(target: &str) -> String {
    format!("frame.interface_name == \"{target}\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sims_recording_decodes_to_what_telemon_replay_prints() {
    if tshark_or_skip("every_sims_recording_decodes_to_what_telemon_replay_prints").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = record_the_sims(dir.path()).await;
    assert_no_lua_error(&file).await;
    let capture = telemon_capture::Capture::from_file(&file, telemon_capture::Limits::default()).unwrap();
    let mono_target = capture.targets().iter().find(|t| t.link_type == link_type::MONO).unwrap().name.clone();

    // meter161: one row per DATA line, every counter.
    let rows = meter161_rows(&file, Some(&on("sys161"))).await;
    let replay = replay_json(&file, "sys161").await;
    assert_eq!(rows.len(), replay.len(), "meter161: DATA lines");
    for (row, json) in rows.iter().zip(&replay) {
        for (v, name) in row.iter().zip(METER_FIELDS) {
            assert_eq!(json[name].as_u64(), Some(*v), "{name}: {json}");
        }
    }
    eprintln!("figure: sim recording, meter161: {} DATA lines", rows.len());

    // hmon: the interpreter's JSON messages, as JSON values.
    let filter = format!("{} && frame.p2p_dir == 1", on("dyalog"));
    let packets = fields(&file, Some(&filter), &["hmon.command", "hmon.payload"]).await;
    let payloads: Vec<Value> =
        all(&packets, "hmon.payload").iter().map(|p| serde_json::from_str(p).unwrap()).collect();
    let replay = replay_json(&file, "dyalog").await;
    assert!(replay.len() > 3);
    assert_eq!(payloads, replay, "hmon: message for message");
    let commands = all(&packets, "hmon.command");
    assert_eq!(commands.len(), payloads.len());
    for (c, p) in commands.iter().zip(&payloads) {
        assert_eq!(p[0].as_str(), Some(c.as_str()));
    }
    eprintln!("figure: sim recording, hmon: {} JSON messages from the interpreter", payloads.len());

    // smon: every value, with its name and index.
    let packets = fields(&file, Some(&on("smon")), &["smon.update"]).await;
    let updates = all(&packets, "smon.update");
    let replay = replay_json(&file, "smon").await;
    let want: Vec<String> = replay
        .iter()
        .map(|r| {
            let index: Vec<String> = r["index"].as_array().unwrap().iter().map(|i| i.to_string()).collect();
            let value = match &r["value"] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            format!("{}[{}]={value}", r["name"].as_str().unwrap(), index.join(","))
        })
        .collect();
    assert!(want.len() > 10);
    assert_eq!(updates, want, "smon: value for value");
    eprintln!("figure: sim recording, smon: {} values", updates.len());

    // sysinfo: one report per reply, its command, chunk count and length.
    let packets = fields(
        &file,
        Some(&on("rvos")),
        &["rvos_sysinfo.reply.report", "rvos_sysinfo.reply.chunks", "rvos_sysinfo.report.bytes"],
    )
    .await;
    let (reports, chunks, texts) = (
        all(&packets, "rvos_sysinfo.reply.report"),
        all(&packets, "rvos_sysinfo.reply.chunks"),
        all(&packets, "rvos_sysinfo.report.bytes"),
    );
    let replay = replay_json(&file, "rvos").await;
    assert!(replay.len() > 5);
    assert_eq!(reports.len(), replay.len(), "sysinfo: reports");
    for (i, r) in replay.iter().enumerate() {
        assert_eq!(r["command"].as_str(), Some(reports[i].as_str()), "report {i}");
        assert_eq!(r["chunks"].as_u64(), Some(chunks[i].parse().unwrap()), "report {i}");
        assert_eq!(r["bytes"].as_u64(), Some(hex_bytes(&texts[i]).len() as u64), "report {i}");
    }
    eprintln!("figure: sim recording, sysinfo: {} reports", reports.len());

    // Mono: the counters known at each sample the view prints equal the view's values.
    let packets = fields(
        &file,
        Some(&on(&mono_target)),
        &[
            "mono_counters.value.sample",
            "mono_counters.value.counter",
            "mono_counters.value.int",
            "mono_counters.value.double",
        ],
    )
    .await;
    let samples = all(&packets, "mono_counters.value.sample");
    let names = all(&packets, "mono_counters.value.counter");
    let ints = all(&packets, "mono_counters.value.int");
    assert!(all(&packets, "mono_counters.value.double").is_empty(), "the sim's two counters are integers");
    assert_eq!((samples.len(), names.len()), (ints.len(), ints.len()));
    let mut state: BTreeMap<String, i64> = BTreeMap::new();
    let mut at: BTreeMap<i64, BTreeMap<String, i64>> = BTreeMap::new();
    for ((s, n), v) in samples.iter().zip(&names).zip(&ints) {
        state.insert(n.clone(), v.parse().unwrap());
        at.insert(s.parse().unwrap(), state.clone());
    }
    let replay = replay_json(&file, &mono_target).await;
    assert!(replay.len() > 2);
    for row in &replay {
        let ts = row["timestamp"].as_i64().unwrap();
        let want: BTreeMap<String, i64> = row["values"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
            .collect();
        let got = at.range(..=ts).next_back().map(|(_, s)| s.clone()).unwrap_or_default();
        assert_eq!(got, want, "mono: sample {ts}");
    }
    eprintln!("figure: sim recording, mono: {} values, {} rows of the view", ints.len(), replay.len());
}

// ---------------------------------------------------------------------------------------------------
// Malformed input: the fuzz seed corpora, written into recordings
// ---------------------------------------------------------------------------------------------------

/// Writes every input of the corpora into one recording of `protocol`: each input is one connection (its
/// bytes in `direction`, cut into three records, so that messages also span records).
fn corpus_recording(path: &Path, protocol: u16, corpora: &[(&str, Direction)]) -> usize {
    let file = std::fs::File::create(path).unwrap();
    let mut w = Writer::new(std::io::BufWriter::new(file), "telemon wireshark test").unwrap();
    let iface = w.interface(&Target::new("corpus", protocol, "fuzz/corpus")).unwrap();
    let mut t = 1_700_000_000_000_000_000u64;
    let mut n = 0;
    let mut record = |w: &mut Writer<_>, kind: RecordKind| {
        t += 1000;
        w.record(&Record { interface: iface, time_ns: t, dropped: 0, kind }).unwrap();
    };
    for (corpus, direction) in corpora {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(corpus);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        inputs.sort();
        for input in inputs {
            let bytes = std::fs::read(&input).unwrap();
            record(&mut w, RecordKind::Open);
            let third = bytes.len().div_ceil(3).max(1);
            for piece in bytes.chunks(third) {
                record(&mut w, RecordKind::Data { direction: *direction, bytes: piece.to_vec() });
            }
            record(&mut w, RecordKind::Close);
            n += 1;
        }
    }
    w.flush().unwrap();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fuzz_corpora_never_raise_a_lua_error_and_malformed_frames_are_marked() {
    if tshark_or_skip("the_fuzz_corpora_never_raise_a_lua_error_and_malformed_frames_are_marked").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    use Direction::{Inbound, Outbound};
    type Set<'a> = (&'a str, u16, &'a [(&'a str, Direction)]);
    let sets: [Set; 5] = [
        (
            "meter161",
            link_type::METER161,
            &[("meter161_decode", Inbound), ("meter161_session", Inbound), ("meter161_session", Outbound)],
        ),
        (
            "hmon",
            link_type::HMON,
            &[
                ("hmon_frame", Inbound),
                ("hmon_message", Inbound),
                ("hmon_proto", Inbound),
                ("hmon_proto", Outbound),
            ],
        ),
        (
            "mono_counters",
            link_type::MONO,
            &[
                ("mono_agent_stream", Inbound),
                ("mono_counter_table", Inbound),
                ("mono_inspector_stream", Outbound),
            ],
        ),
        ("smon", link_type::SMON, &[("smon_decode", Inbound), ("smon_roundtrip", Inbound)]),
        (
            "rvos_sysinfo",
            link_type::SYSINFO,
            &[
                ("sysinfo_wire", Inbound),
                ("sysinfo_wire", Outbound),
                ("sysinfo_reassembler", Inbound),
                ("sysinfo_reports", Inbound),
            ],
        ),
    ];
    for (abbr, protocol, corpora) in sets {
        let file = dir.path().join(format!("{abbr}.pcapng"));
        let inputs = corpus_recording(&file, protocol, corpora);
        let started = Instant::now();
        assert_no_lua_error(&file).await;
        let malformed = tshark(
            &[
                "-2",
                "-r",
                file.to_str().unwrap(),
                "-Y",
                &format!("{abbr}.malformed"),
                "-T",
                "fields",
                "-e",
                "frame.number",
            ],
            true,
        )
        .await
        .lines()
        .count();
        let decoded = tshark(
            &[
                "-2",
                "-r",
                file.to_str().unwrap(),
                "-Y",
                &format!("{abbr} && !{abbr}.malformed"),
                "-T",
                "fields",
                "-e",
                "frame.number",
            ],
            true,
        )
        .await
        .lines()
        .count();
        assert!(malformed > 0 && decoded > 0, "{abbr}: {malformed} malformed frames, {decoded} decoded");
        eprintln!(
            "figure: {abbr}: {inputs} corpus inputs, {malformed} frames marked malformed, {decoded} decoded cleanly ({:.1?})",
            started.elapsed()
        );
    }
}

/// A hand-made bad frame of each protocol is marked malformed, with the expert note, and the frames
/// after a fatal error say they are not decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_frame_shows_as_malformed_with_an_expert_note() {
    if tshark_or_skip("an_invalid_frame_shows_as_malformed_with_an_expert_note").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, u16, &[u8]); 5] = [
        ("meter161", link_type::METER161, b"HELLO 2\r\nHEAD a b\r\nDATA 1 2 3\r\n"),
        ("hmon", link_type::HMON, b"\x00\x00\x00\x0cRIDEabcd"),
        ("mono_counters", link_type::MONO, b"\x09\x00"),
        ("smon", link_type::SMON, b"\x00\x02uab"),
        ("rvos_sysinfo", link_type::SYSINFO, b"\x07\x00\x00\x00\x00"),
    ];
    for (abbr, protocol, bytes) in cases {
        let file = dir.path().join(format!("{abbr}.pcapng"));
        let mut w = Writer::new(std::fs::File::create(&file).unwrap(), "test").unwrap();
        let iface = w.interface(&Target::new("bad", protocol, "nowhere")).unwrap();
        for (i, kind) in [
            RecordKind::Open,
            RecordKind::Data { direction: Direction::Inbound, bytes: bytes.to_vec() },
            RecordKind::Close,
        ]
        .into_iter()
        .enumerate()
        {
            w.record(&Record { interface: iface, time_ns: 1_000 + i as u64, dropped: 0, kind }).unwrap();
        }
        w.flush().unwrap();
        drop(w);
        assert_no_lua_error(&file).await;
        let out = tshark(
            &[
                "-2",
                "-r",
                file.to_str().unwrap(),
                "-Y",
                &format!("{abbr}.malformed"),
                "-T",
                "fields",
                "-e",
                "frame.number",
                "-e",
                "_ws.expert.severity",
            ],
            true,
        )
        .await;
        assert!(out.starts_with("2\t"), "{abbr}: {out:?}");
        let text = tshark(&["-2", "-r", file.to_str().unwrap(), "-V"], true).await;
        assert!(text.contains("Malformed"), "{abbr}: {text}");
    }
}

// ---------------------------------------------------------------------------------------------------
// Cost
// ---------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_fixture_takes_less_than_twice_the_time_without_the_plugin() {
    if tshark_or_skip("the_largest_fixture_takes_less_than_twice_the_time_without_the_plugin").is_none() {
        return;
    }
    let mut fixtures: Vec<PathBuf> = ["sys161", "mono", "rvos"]
        .iter()
        .flat_map(|d| std::fs::read_dir(Path::new(PEERS).join(d)).unwrap().map(|e| e.unwrap().path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng"))
        .collect();
    fixtures.sort_by_key(|p| std::cmp::Reverse(p.metadata().unwrap().len()));
    let mut largest = 0.0f64;
    for (i, file) in fixtures.iter().enumerate() {
        let f = file.to_str().unwrap();
        let args = ["-2", "-r", f, "-V"];
        let mut best = [f64::MAX; 2];
        for _ in 0..3 {
            for (k, plugin) in [false, true].into_iter().enumerate() {
                let t = Instant::now();
                tshark(&args, plugin).await;
                best[k] = best[k].min(t.elapsed().as_secs_f64());
            }
        }
        let name = file.file_name().unwrap().to_string_lossy();
        eprintln!(
            "figure: {name} ({} bytes): tshark -2 -V best of 3: {:.3} s without the plugin, {:.3} s with it ({:.2}x)",
            file.metadata().unwrap().len(),
            best[0],
            best[1],
            best[1] / best[0]
        );
        if i == 0 {
            largest = best[1] / best[0];
        }
    }
    assert!(largest < 2.0, "the largest fixture: {largest:.2}x");
}

// ---------------------------------------------------------------------------------------------------
// Live TCP: telemon and the sims through splitting proxies, captured on loopback by dumpcap
// ---------------------------------------------------------------------------------------------------

/// What one proxy wrote in one direction of a connection: the bytes, and the length of each write.
#[derive(Default)]
struct Flow {
    bytes: Vec<u8>,
    writes: Vec<usize>,
    done: bool,
}

/// One connection through a proxy: `up` is what it wrote towards the server, `down` towards the client;
/// `mid_port` is the client port of the proxied connection that [`Splitter`]s share (the one captured).
#[derive(Default)]
struct Leg {
    mid_port: u16,
    up: Flow,
    down: Flow,
}

type Shared<T> = std::sync::Arc<std::sync::Mutex<T>>;

/// A TCP proxy that forwards the directions it splits in writes of 1 to 7 bytes, Nagle off and 1 ms apart,
/// so that each write is a segment of its own. Stops (with every connection) when dropped.
struct Splitter {
    addr: std::net::SocketAddr,
    legs: Shared<Vec<Shared<Leg>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Splitter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Which side of a chain of two splitters a proxy is.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    /// Dials the other splitter, and splits what goes up to it.
    Client,
    /// Is dialled by the other splitter, and splits what goes down to it.
    Server,
}

impl Splitter {
    /// Proxies `listener`'s connections to `upstream`. A `Side::Client` proxy dials from a port Wireshark
    /// has no dissector for (`avoid`), so that only the heuristics can claim the captured connection.
    fn start(
        listener: tokio::net::TcpListener,
        upstream: std::net::SocketAddr,
        side: Side,
        avoid: std::sync::Arc<std::collections::HashSet<u16>>,
    ) -> Splitter {
        let addr = listener.local_addr().unwrap();
        let legs: Shared<Vec<Shared<Leg>>> = Default::default();
        let all = legs.clone();
        let task = tokio::spawn(async move {
            let mut pumps = tokio::task::JoinSet::new();
            loop {
                while pumps.try_join_next().is_some() {}
                let Ok((client, peer)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Some(server) = dial(upstream, side, &avoid).await else { continue };
                let mid_port =
                    if side == Side::Client { server.local_addr().unwrap().port() } else { peer.port() };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let leg = std::sync::Arc::new(std::sync::Mutex::new(Leg { mid_port, ..Leg::default() }));
                all.lock().unwrap().push(leg.clone());
                let ((cr, cw), (sr, sw)) = (client.into_split(), server.into_split());
                pumps.spawn(pump(cr, sw, side == Side::Client, leg.clone(), true));
                pumps.spawn(pump(sr, cw, side == Side::Server, leg, false));
            }
        });
        Splitter { addr, legs, task }
    }

    /// Whether every connection is over in both directions.
    fn idle(&self) -> bool {
        self.legs.lock().unwrap().iter().all(|l| {
            let l = l.lock().unwrap();
            l.up.done && l.down.done
        })
    }
}

/// Connects to `upstream` (from a port not in `avoid` for a `Side::Client`); `None` when it refuses (the
/// client is then dropped, and retries).
async fn dial(
    upstream: std::net::SocketAddr,
    side: Side,
    avoid: &std::collections::HashSet<u16>,
) -> Option<tokio::net::TcpStream> {
    for _ in 0..100 {
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket.bind("127.0.0.1:0".parse().unwrap()).ok()?;
        if side == Side::Client && avoid.contains(&socket.local_addr().ok()?.port()) {
            continue;
        }
        return tokio::time::timeout(Duration::from_secs(5), socket.connect(upstream)).await.ok()?.ok();
    }
    None
}

/// Forwards `from` to `to` (in writes of 1 to 7 bytes, 1 ms apart, when `split`), logging each write in the
/// leg's `up` or `down` flow; shuts `to` down at the end of `from`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    split: bool,
    leg: Shared<Leg>,
    up: bool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let log = |piece: Option<&[u8]>| {
        let mut leg = leg.lock().unwrap();
        let flow = if up { &mut leg.up } else { &mut leg.down };
        match piece {
            Some(p) => {
                flow.bytes.extend_from_slice(p);
                flow.writes.push(p.len());
            }
            None => flow.done = true,
        }
    };
    let mut buf = vec![0u8; 4096];
    let mut n = 0usize;
    'read: loop {
        let got = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        let mut rest = &buf[..got];
        while !rest.is_empty() {
            n += 1;
            let size = if split { (1 + n * 5 % 7).min(rest.len()) } else { rest.len() };
            let (piece, tail) = rest.split_at(size);
            if to.write_all(piece).await.is_err() {
                break 'read;
            }
            log(Some(piece));
            rest = tail;
            if split {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let _ = to.shutdown().await;
    log(None);
}

/// A listener on a free loopback port Wireshark has no dissector for.
async fn unregistered_listener(avoid: &std::collections::HashSet<u16>) -> tokio::net::TcpListener {
    loop {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        if !avoid.contains(&l.local_addr().unwrap().port()) {
            return l;
        }
    }
}

/// The TCP ports tshark hands to a dissector by port (`tshark -G decodes`): the captured connections use
/// none of them, so that the telemon dissectors' heuristics are what claims them, as on a real network.
async fn registered_tcp_ports() -> std::collections::HashSet<u16> {
    let text = tshark(&["-G", "decodes"], false).await;
    let ports: std::collections::HashSet<u16> = text
        .lines()
        .filter_map(|l| l.strip_prefix("tcp.port\t"))
        .filter_map(|l| l.split('\t').next()?.parse().ok())
        .collect();
    assert!(ports.len() > 100, "tshark -G decodes: {} TCP ports", ports.len());
    ports
}

/// dumpcap capturing on `lo` into a file, killed if the test drops it.
struct Dumpcap {
    child: tokio::process::Child,
    stderr: tokio::task::JoinHandle<String>,
}

impl Dumpcap {
    /// Starts `dumpcap -i lo -f FILTER -w FILE` and waits until it says it is capturing, and then until it
    /// counts a packet: it says so before its filter is in place, so the test knocks on `probe` (a closed
    /// port the filter lets through) until it does.
    async fn start(file: &Path, filter: &str, probe: std::net::SocketAddr) -> Dumpcap {
        use tokio::io::AsyncReadExt;
        let mut child = tokio::process::Command::new("dumpcap")
            .args(["-i", "lo", "-f", filter, "-w", file.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("dumpcap starts");
        // What it says so far (its packet counts end in a carriage return, not a newline).
        let (tx, mut said) = tokio::sync::watch::channel(String::new());
        let mut pipe = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                tx.send_modify(|s| s.push_str(&String::from_utf8_lossy(&buf[..n])));
            }
            let text = tx.borrow().replace('\r', "\n");
            text
        });
        let capturing =
            within("dumpcap to say it is capturing", said.wait_for(|s| s.contains("Capturing on")))
                .await
                .is_ok();
        assert!(capturing, "dumpcap: {}", said.borrow().clone());
        within("dumpcap to count a packet", async {
            loop {
                let _ = tokio::net::TcpStream::connect(probe).await;
                let counted = said.wait_for(|s| s.contains("Packets: "));
                match tokio::time::timeout(Duration::from_millis(100), counted).await.map(|r| r.is_ok()) {
                    Ok(true) => return,
                    Ok(false) => panic!("dumpcap exited: {}", said.borrow().clone()),
                    Err(_) => {}
                }
            }
        })
        .await;
        Dumpcap { child, stderr }
    }

    /// Stops it with SIGINT (it then writes out what it holds); returns what it said on stderr.
    async fn stop(mut self) -> String {
        let pid = self.child.id().expect("dumpcap runs").to_string();
        let status = tokio::process::Command::new("kill").args(["-INT", &pid]).status().await.unwrap();
        assert!(status.success());
        let status = within("dumpcap to exit", self.child.wait()).await.unwrap();
        let said = within("dumpcap's stderr", &mut self.stderr).await.unwrap();
        assert!(status.success(), "dumpcap: {status}: {said}");
        said
    }
}

/// How many messages (given by where each ends in a byte stream) span several of the proxy's writes.
fn spanning(ends: &[usize], writes: &[usize]) -> usize {
    let mut bounds = std::collections::BTreeSet::new();
    let mut at = 0;
    for w in writes {
        at += w;
        bounds.insert(at);
    }
    let mut start = 0;
    let mut n = 0;
    for &end in ends {
        // (An item that yields two updates, an smon definition and its value, ends the second where the
        // first ends.)
        if end > start + 1 && bounds.range(start + 1..end).next().is_some() {
            n += 1;
        }
        start = end;
    }
    n
}

/// Decodes a byte stream message by message with `next` (which takes one message off the front of the
/// buffer, `None` when none is whole): the messages and where each ends.
fn messages<T>(
    bytes: &[u8],
    mut next: impl FnMut(&mut bytes::BytesMut) -> Option<T>,
) -> (Vec<T>, Vec<usize>) {
    let mut buf = bytes::BytesMut::from(bytes);
    let (mut out, mut ends) = (Vec::new(), Vec::new());
    while let Some(m) = next(&mut buf) {
        out.push(m);
        ends.push(bytes.len() - buf.len());
    }
    (out, ends)
}

/// What the test expects tshark to find on one captured connection, per direction (0 up, 1 down).
#[derive(Default, Debug)]
struct Expected {
    /// Field name -> values in order, per direction.
    fields: [BTreeMap<&'static str, Vec<String>>; 2],
    /// Messages per direction.
    messages: [usize; 2],
    /// Messages whose bytes span several segments.
    spanning: usize,
    /// Segments (the proxies' writes) per direction.
    segments: [usize; 2],
}

fn hmon_expected(up: &Flow, down: &Flow) -> Expected {
    let mut e = Expected::default();
    for (dir, flow) in [up, down].into_iter().enumerate() {
        let (frames, ends) =
            messages(&flow.bytes, |b| hmon::decode_frame(b, hmon::DEFAULT_MAX_FRAME_LEN).unwrap());
        let f = &mut e.fields[dir];
        for payload in &frames {
            let text = String::from_utf8(payload.to_vec()).unwrap();
            f.entry("hmon.length").or_default().push((payload.len() + 8).to_string());
            if text.starts_with("SupportedProtocols=") || text.starts_with("UsingProtocol=") {
                f.entry("hmon.handshake").or_default().push(text);
            } else {
                let json: Value = serde_json::from_str(&text).unwrap();
                f.entry("hmon.command").or_default().push(json[0].as_str().unwrap().to_owned());
            }
        }
        e.messages[dir] = frames.len();
        e.spanning += spanning(&ends, &flow.writes);
        e.segments[dir] = flow.writes.len();
    }
    e
}

fn mono_expected(up: &Flow, down: &Flow) -> Expected {
    use mono_counters::{AddResponse, AgentMessage, CounterValue, InspectorMessage};
    let mut e = Expected::default();
    // Up: the agent's messages.
    let mut codec = mono_counters::InspectorCodec::default();
    let (msgs, ends) = messages(&up.bytes, |b| codec.decode_message(b).unwrap());
    let mut names: BTreeMap<i16, String> = BTreeMap::new();
    let f = &mut e.fields[0];
    for m in &msgs {
        let command = match m {
            AgentMessage::Hello(h) => {
                names.extend(h.headers.iter().map(|h| (h.index, h.full_name())));
                "Hello"
            }
            AgentMessage::List(_) => "List response",
            AgentMessage::Add(a) => {
                if let AddResponse::Ok(h) = a {
                    names.insert(h.index, h.full_name());
                }
                "Add response"
            }
            AgentMessage::Remove(_) => "Remove response",
            AgentMessage::Sampling(s) => {
                for v in &s.values {
                    f.entry("mono_counters.value.sample").or_default().push(s.timestamp.to_string());
                    f.entry("mono_counters.value.counter").or_default().push(names[&v.index].clone());
                    let int = match v.data.typed().expect("the sim's counters are typed") {
                        CounterValue::Int(i) | CounterValue::Word32(i) => i64::from(i),
                        CounterValue::Long(i) | CounterValue::Word64(i) => i,
                        CounterValue::Double(d) => panic!("the sim's counters are integers: {d}"),
                    };
                    f.entry("mono_counters.value.int").or_default().push(int.to_string());
                }
                "Sampling"
            }
        };
        f.entry("mono_counters.command").or_default().push(command.to_owned());
    }
    e.messages[0] = msgs.len();
    e.spanning += spanning(&ends, &up.writes);
    // Down: telemon's requests.
    let mut codec = mono_counters::AgentCodec::new(Default::default(), Default::default());
    let (msgs, ends) = messages(&down.bytes, |b| codec.decode_message(b).unwrap());
    for m in &msgs {
        let command = match m {
            InspectorMessage::List => "List",
            InspectorMessage::Add(_) => "Add",
            InspectorMessage::Remove(_) => "Remove",
            InspectorMessage::GoodBye => "Good Bye",
            InspectorMessage::Unknown(op) => panic!("telemon sent an unknown command {op}"),
        };
        e.fields[1].entry("mono_counters.command").or_default().push(command.to_owned());
    }
    e.messages[1] = msgs.len();
    e.spanning += spanning(&ends, &down.writes);
    e.segments = [up.writes.len(), down.writes.len()];
    e
}

fn smon_expected(up: &Flow, down: &Flow) -> Expected {
    use smon_codec::{Update, Value as V};
    let mut e = Expected::default();
    assert!(up.bytes.is_empty(), "the smon reader sends nothing");
    let mut decoder = smon_codec::StreamDecoder::new(smon_codec::DecoderConfig::default());
    let (updates, ends) = messages(&down.bytes, |b| decoder.decode(b).unwrap());
    let f = &mut e.fields[1];
    for u in &updates {
        match u {
            Update::Define { .. } => f.entry("smon.item").or_default().push("define".into()),
            Update::Value { name, index, value, .. } => {
                let index: Vec<String> = index.iter().map(u64::to_string).collect();
                let value = match value {
                    V::Unsigned(v) => v.to_string(),
                    V::Text(t) => String::from_utf8(t.to_vec()).unwrap(),
                };
                f.entry("smon.update").or_default().push(format!("{name}[{}]={value}", index.join(",")));
            }
            Update::Resync => f.entry("smon.item").or_default().push("resync".into()),
        }
    }
    // A definition item carries its token's first value: the decoder gives it as a second update.
    let defines = updates.iter().filter(|u| matches!(u, Update::Define { .. })).count();
    e.messages[1] = updates.len() - defines;
    e.spanning = spanning(&ends, &down.writes);
    e.segments = [up.writes.len(), down.writes.len()];
    e
}

fn sysinfo_expected(up: &Flow, down: &Flow) -> Expected {
    use sysinfo_wire::{ChannelId, Frame, Reassembler, SysinfoCommand};
    let mut e = Expected::default();
    let (sent, ends) = messages(&up.bytes, |b| sysinfo_wire::decode_frame(b).unwrap());
    e.messages[0] = sent.len();
    e.spanning += spanning(&ends, &up.writes);
    // The commands asked on each channel, in order (a channel may be used again once its reply is over).
    let mut queued: BTreeMap<u32, std::collections::VecDeque<SysinfoCommand>> = BTreeMap::new();
    for frame in &sent {
        if let Frame::Message { channel, message } = frame {
            if *channel != ChannelId::BOOT {
                let command = message.decode::<SysinfoCommand>().unwrap();
                queued.entry(channel.0).or_default().push_back(command);
            }
        }
    }
    let mut asked: BTreeMap<u32, (SysinfoCommand, Reassembler)> = BTreeMap::new();
    let (received, ends) = messages(&down.bytes, |b| sysinfo_wire::decode_frame(b).unwrap());
    e.messages[1] = received.len();
    e.spanning += spanning(&ends, &down.writes);
    let f = &mut e.fields[1];
    let max = sysinfo_wire::ClientConfig::default().max_response;
    for frame in received {
        let (channel, message) = match frame {
            Frame::Message { channel, message } => (channel.0, Some(message)),
            Frame::Close { channel } => (channel.0, None),
        };
        if channel == 0 {
            continue;
        }
        let reply = match asked.entry(channel) {
            std::collections::btree_map::Entry::Occupied(e) => &mut e.into_mut().1,
            // The close of a channel whose reply ended with its sentinel.
            std::collections::btree_map::Entry::Vacant(_) if message.is_none() => continue,
            std::collections::btree_map::Entry::Vacant(e) => {
                let command =
                    queued.get_mut(&channel).and_then(|q| q.pop_front()).expect("a reply to a request");
                &mut e.insert((command, Reassembler::new(max))).1
            }
        };
        let done = match message {
            Some(m) => reply.push_bytes(m.into_bytes()).unwrap(),
            None => {
                reply.close();
                true
            }
        };
        if done {
            let (command, reply) = asked.remove(&channel).unwrap();
            let reply = reply.finish();
            f.entry("rvos_sysinfo.reply.report").or_default().push(command.name().to_owned());
            f.entry("rvos_sysinfo.report.bytes").or_default().push(hex(reply.text.as_bytes()));
        }
    }
    e.segments = [up.writes.len(), down.writes.len()];
    e
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A proxied connection as captured: its client port on the captured leg, and what crossed it each way.
struct Captured {
    port: u16,
    up: Flow,
    down: Flow,
}

/// The connections between a chain's two splitters: `outer` (dialled by the client, splitting what goes up)
/// and `inner` (dialling the server, splitting what comes down).
fn captured(outer: &Splitter, inner: &Splitter) -> Vec<Captured> {
    let copy = |f: &Flow| Flow { bytes: f.bytes.clone(), writes: f.writes.clone(), done: f.done };
    let inner_legs = inner.legs.lock().unwrap();
    outer
        .legs
        .lock()
        .unwrap()
        .iter()
        .filter_map(|o| {
            let o = o.lock().unwrap();
            let i = inner_legs.iter().find(|i| i.lock().unwrap().mid_port == o.mid_port)?;
            Some(Captured { port: o.mid_port, up: copy(&o.up), down: copy(&i.lock().unwrap().down) })
        })
        .collect()
}

/// One protocol's chain of splitters in the live test.
struct Chain {
    abbr: &'static str,
    outer: Splitter,
    inner: Splitter,
    /// The field tshark puts once per message.
    per_message: &'static str,
    expected: fn(&Flow, &Flow) -> Expected,
}

impl Chain {
    /// Splitters from a listener of `outer`'s to `server`: (the chain, where the client should connect).
    async fn start(
        abbr: &'static str,
        server: std::net::SocketAddr,
        avoid: &std::sync::Arc<std::collections::HashSet<u16>>,
        per_message: &'static str,
        expected: fn(&Flow, &Flow) -> Expected,
    ) -> Chain {
        let inner = Splitter::start(unregistered_listener(avoid).await, server, Side::Server, avoid.clone());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let outer = Splitter::start(l, inner.addr, Side::Client, avoid.clone());
        Chain { abbr, outer, inner, per_message, expected }
    }

    /// Messages decoded so far by the project's decoders, per direction, over every connection.
    fn messages(&self) -> [usize; 2] {
        captured(&self.outer, &self.inner).iter().fold([0, 0], |[a, b], c| {
            let e = (self.expected)(&c.up, &c.down);
            [a + e.messages[0], b + e.messages[1]]
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_tcp_sessions_split_into_tiny_segments_are_decoded_whole() {
    const TEST: &str = "live_tcp_sessions_split_into_tiny_segments_are_decoded_whole";
    if tshark_or_skip(TEST).is_none()
        || need_on_path(TEST, "dumpcap", "apt-get install tshark (bash .ci/tshark.sh)").is_none()
    {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let avoid = std::sync::Arc::new(registered_tcp_ports().await);
    let sims = Sims::start(SimOptions::steady()).await;
    let chains = [
        Chain::start("hmon", sims.dyalog_addr, &avoid, "hmon.length", hmon_expected).await,
        Chain::start("mono_counters", sims.mono_listen, &avoid, "mono_counters.command", mono_expected).await,
        Chain::start("smon", sims.smon_addr, &avoid, "smon.item", smon_expected).await,
        Chain::start("rvos_sysinfo", sims.rvos_addr, &avoid, "rvos_sysinfo.kind", sysinfo_expected).await,
    ];
    let [hmon, mono, smon, rvos] = &chains;

    // Capture the legs between the splitters: both directions arrive there in writes of 1 to 7 bytes.
    let file = dir.path().join("live.pcapng");
    // A port held (bound, not listening) for the whole test: dialling it is refused, and no one else's
    // traffic can use it.
    let probe_socket = tokio::net::TcpSocket::new_v4().unwrap();
    probe_socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let probe = probe_socket.local_addr().unwrap();
    let ports: Vec<String> = chains
        .iter()
        .map(|c| c.inner.addr.port())
        .chain([probe.port()])
        .map(|p| format!("tcp port {p}"))
        .collect();
    // 127.0.0.1 on both sides: other tests on this machine use other loopback addresses, and the listeners
    // hold their ports on 127.0.0.1.
    let filter = format!("src host 127.0.0.1 and dst host 127.0.0.1 and ({})", ports.join(" or "));
    let dumpcap = Dumpcap::start(&file, &filter, probe).await;

    let config = dir.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[[hmon]]\nname = \"dyalog\"\nconnect = \"{}\"\npoll = \"250ms\"\n\n\
             [[mono_listen]]\nname = \"mono\"\nlisten = \"{}\"\n\n\
             [[smon]]\nname = \"smon\"\nconnect = \"{}\"\n\n\
             [[sysinfo]]\nname = \"rvos\"\nconnect = \"{}\"\nevery = \"500ms\"\n",
            hmon.outer.addr, sims.mono_listen, smon.outer.addr, rvos.outer.addr
        ),
    )
    .unwrap();
    let rec = dir.path().join("rec");
    let telemon =
        Telemon::spawn(&["record", "--config", config.to_str().unwrap(), "--out", rec.to_str().unwrap()]);
    // The Mono agent dials telemon's [[mono_listen]] through the chain, once it listens.
    support::until("telemon's [[mono_listen]]", Duration::from_millis(20), async || {
        tokio::net::TcpStream::connect(sims.mono_listen).await.ok()
    })
    .await;
    let agent = sim_common::Shutdown::new();
    let options = format!(
        "address={},counters=Mono JIT/Compiled methods;Mono System/Working Set,interval=100",
        mono.outer.addr
    );
    let mut agent_config = mono_agent_sim::AgentConfig::from_options(&options).unwrap();
    agent_config.backoff =
        mono_agent_sim::Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(200) };
    tokio::spawn(mono_agent_sim::run(agent_config, agent.clone()));

    // A few messages of each kind, then everything stops: telemon, the sims, the connections, dumpcap.
    support::until("a few messages of every protocol", Duration::from_millis(200), async || {
        let enough = hmon.messages()[1] >= 8
            && mono.messages()[0] >= 6
            && smon.messages()[1] >= 30
            && rvos.messages()[1] >= 40;
        enough.then_some(())
    })
    .await;
    let session = started.elapsed();
    // The agent first (it would dial again as soon as telemon had gone).
    agent.cancel();
    let (status, _, err) = telemon.interrupt().await;
    assert_eq!(status, 0, "{err:?}");
    sims.stop().await;
    support::until("every proxied connection to end", Duration::from_millis(50), async || {
        chains.iter().all(|c| c.outer.idle() && c.inner.idle()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let said = dumpcap.stop().await;
    let counts: Vec<&str> = said.lines().filter(|l| l.starts_with("Packets ")).collect();
    eprintln!("figure: dumpcap: {}", counts.join("; "));

    // Nothing wrong anywhere, and nothing left undissected.
    assert_no_lua_error(&file).await;
    let bad = tshark(
        &[
            "-2",
            "-r",
            file.to_str().unwrap(),
            "-Y",
            &format!(
                "_ws.malformed || data || {}",
                chains
                    .iter()
                    .map(|c| format!("{0}.malformed || {0}.truncated", c.abbr))
                    .collect::<Vec<_>>()
                    .join(" || ")
            ),
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "_ws.col.Info",
        ],
        true,
    )
    .await;
    assert!(bad.trim().is_empty(), "malformed, warned or undissected frames: {bad}");
    let segments =
        tshark(&["-r", file.to_str().unwrap(), "-Y", "tcp.len > 0", "-T", "fields", "-e", "tcp.len"], false)
            .await;
    let lens: Vec<usize> = segments.lines().map(|l| l.parse().unwrap()).collect();

    let mut total = [0usize; 4];
    for chain in &chains {
        let server = chain.inner.addr.port();
        let mut names: Vec<&str> = vec!["tcp.srcport", "tcp.dstport", chain.per_message];
        let conns = captured(&chain.outer, &chain.inner);
        let expected: Vec<Expected> = conns.iter().map(|c| (chain.expected)(&c.up, &c.down)).collect();
        for e in &expected {
            for f in e.fields.iter().flat_map(|f| f.keys()) {
                if !names.contains(f) {
                    names.push(f);
                }
            }
        }
        let packets = fields(&file, Some(chain.abbr), &names).await;
        let (mut messages, mut decoded, mut spanning, mut segs) = (0, 0, 0, 0);
        for (c, e) in conns.iter().zip(&expected) {
            for dir in 0..2 {
                let (src, dst) = if dir == 0 { (c.port, server) } else { (server, c.port) };
                let mine: Packets = packets
                    .iter()
                    .filter(|p| {
                        all_of(p, "tcp.srcport") == [src.to_string()]
                            && all_of(p, "tcp.dstport") == [dst.to_string()]
                    })
                    .cloned()
                    .collect();
                let got = all(&mine, chain.per_message).len();
                let what = format!("{} connection {} {}", chain.abbr, c.port, ["up", "down"][dir]);
                assert_eq!(got, e.messages[dir], "{what}: messages");
                for (name, want) in &e.fields[dir] {
                    let mut got = all(&mine, name);
                    if *name == "smon.item" {
                        got.retain(|i| i == "define" || i == "resync");
                    }
                    if *name == "rvos_sysinfo.report.bytes" {
                        got = got.iter().map(|h| hex(&hex_bytes(h))).collect();
                    }
                    assert_eq!(&got, want, "{what}: {name}");
                }
                messages += e.messages[dir];
                decoded += got;
            }
            spanning += e.spanning;
            segs += e.segments[0] + e.segments[1];
        }
        assert!(
            messages > 0 && spanning > 0,
            "{}: {messages} messages, {spanning} spanning segments",
            chain.abbr
        );
        eprintln!(
            "figure: live {}: {} connections, {segs} segments, {messages} messages sent ({decoded} decoded by tshark), {spanning} of them over several segments",
            chain.abbr,
            conns.len()
        );
        total[0] += segs;
        total[1] += messages;
        total[2] += spanning;
        total[3] += conns.len();
    }
    let max = lens.iter().max().copied().unwrap_or(0);
    eprintln!(
        "figure: live capture: {} data segments (the splitters wrote {}, largest {max} bytes), {} messages over {} connections, {} spanning several segments; session {:.1?}, whole test {:.1?}",
        lens.len(),
        total[0],
        total[1],
        total[3],
        total[2],
        session,
        started.elapsed()
    );
    // Each write is a segment of its own (as measured: always); the kernel may merge a few under load.
    assert!(lens.len() * 10 >= total[0] * 9, "{} segments for {} writes", lens.len(), total[0]);
}

fn all_of(p: &BTreeMap<String, Vec<String>>, name: &str) -> Vec<String> {
    p.get(name).cloned().unwrap_or_default()
}
