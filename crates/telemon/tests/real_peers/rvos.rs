//! rvOS sysinfo: recordings of telemon talking to a host program built from the real rvOS sysinfo service and
//! text producers (XMPPwocky/surely-this-cant-work at e479a353; see `tests/peers/rvos/README.md`). Each
//! recording has a reference file written by the peer itself: for every request it answered, the command, the
//! request bytes, the channel, the chunk lengths and the exact text. The tests check the capture's bytes against
//! it, then what `telemon replay` and `telemon export` (the fleet collector) make of the capture.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use bytes::BytesMut;
use serde_json::Value;
use sysinfo_wire::{decode_frame, ChannelId, Frame, Reassembler, Report, SysinfoCommand};
use telemon_capture::{link_type, Capture, Direction, Limits, RecordKind};

use crate::support::{code, json_lines, run, stderr, stdout};

/// The per-report recordings (`telemon sysinfo REPORT --watch 200ms --count 4 --record ...`).
const REPORTS: [&str; 8] = ["ps", "memstat", "kstat", "channels", "schedlat", "ipclat", "watchdog", "trace"];
/// The address the peer listened on (the fleet's target label).
const PEER: &str = "127.0.0.1:7499";

fn path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/rvos").join(file)
}

/// One request the peer answered, as it wrote it down.
#[derive(Debug, Clone)]
struct Answer {
    command: String,
    request: Vec<u8>,
    channel: u32,
    chunks: Vec<usize>,
    text: String,
}

fn reference(name: &str) -> Vec<Answer> {
    let text = std::fs::read_to_string(path(&format!("{name}.reference.jsonl"))).expect("reference file");
    text.lines()
        .enumerate()
        .map(|(k, line)| {
            let v: Value = serde_json::from_str(line).expect("reference line is JSON");
            assert_eq!(v["seq"], k, "{name}: seq");
            let hex = v["request_hex"].as_str().unwrap();
            Answer {
                command: v["command"].as_str().unwrap().to_owned(),
                request: (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect(),
                channel: v["channel"].as_u64().unwrap() as u32,
                chunks: v["chunks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_u64().unwrap() as usize)
                    .collect(),
                text: v["text"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

fn command(name: &str) -> SysinfoCommand {
    match name {
        "ps" => SysinfoCommand::Ps,
        "memstat" => SysinfoCommand::Memstat,
        "kstat" => SysinfoCommand::Kstat,
        "channels" => SysinfoCommand::Channels,
        "schedlat" => SysinfoCommand::SchedLatency,
        "ipclat" => SysinfoCommand::IpcLatency,
        "watchdog" => SysinfoCommand::Watchdog,
        "trace" => SysinfoCommand::Trace,
        other => panic!("no command {other}"),
    }
}

/// What crossed one sysinfo channel of a capture.
#[derive(Debug, Default)]
struct Exchange {
    /// The client's messages on it.
    requests: Vec<Vec<u8>>,
    /// The service's chunk lengths, the sentinel excluded.
    chunks: Vec<usize>,
    /// The reassembled reply, once its sentinel came.
    text: Option<String>,
    /// Whether the service closed the channel.
    closed: bool,
}

/// Decodes both directions of the capture's host-transport stream, per channel, with sysinfo-wire.
fn exchanges(file: &str) -> BTreeMap<u32, Exchange> {
    let capture = Capture::from_file(path(file), Limits::default()).expect("capture opens");
    assert!(capture.warning.is_none(), "{file}: {:?}", capture.warning);
    let targets = capture.targets();
    assert_eq!(targets.len(), 1, "{file}: one target");
    assert_eq!(targets[0].link_type, link_type::SYSINFO, "{file}: protocol");
    // `telemon sysinfo --connect` names the target by its endpoint; `telemon record --sysinfo` by the address.
    let name = if file.starts_with("fleet") { PEER.to_owned() } else { format!("tcp:{PEER}") };
    assert_eq!(targets[0].name, name, "{file}: target name");
    assert_eq!(targets[0].address, format!("tcp:{PEER}"), "{file}: target address");
    let mut out: BTreeMap<u32, Exchange> = BTreeMap::new();
    let mut reassemblers: HashMap<u32, Reassembler> = HashMap::new();
    let (mut inbound, mut outbound) = (BytesMut::new(), BytesMut::new());
    let mut opens = 0;
    for (_, record) in capture.records() {
        match &record.kind {
            RecordKind::Open => opens += 1,
            RecordKind::Data { direction: Direction::Inbound, bytes } => {
                inbound.extend_from_slice(bytes);
                while let Some(frame) = decode_frame(&mut inbound).expect("the peer's frames decode") {
                    match frame {
                        Frame::Message { channel: ChannelId::BOOT, message } => {
                            assert_eq!(message.data(), [0u8], "{file}: BootResponse::Ok");
                            assert_eq!(message.caps().len(), 1, "{file}: the new channel in caps[0]");
                        }
                        Frame::Message { channel, message } => {
                            let e = out.entry(channel.0).or_default();
                            let r = reassemblers.entry(channel.0).or_default();
                            if !message.data().is_empty() {
                                e.chunks.push(message.data().len());
                            }
                            if r.push(message.data()).expect("reassembles") {
                                let reply = reassemblers.remove(&channel.0).unwrap().finish();
                                e.text = Some(reply.text);
                            }
                        }
                        Frame::Close { channel } => out.entry(channel.0).or_default().closed = true,
                    }
                }
            }
            RecordKind::Data { direction: Direction::Outbound, bytes } => {
                outbound.extend_from_slice(bytes);
                while let Some(frame) = decode_frame(&mut outbound).expect("telemon's frames decode") {
                    if let Frame::Message { channel, message } = frame {
                        if channel != ChannelId::BOOT {
                            out.entry(channel.0).or_default().requests.push(message.data().to_vec());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    assert!(inbound.is_empty(), "{file}: the stream ends on a frame boundary");
    assert_eq!(opens, 1, "{file}: one connection");
    out
}

/// (a) The inbound bytes reassemble, channel by channel, to exactly the texts the peer says it sent, in the
/// chunks it says it sent them in; telemon's requests are the ones the peer answered.
#[test]
fn the_captured_bytes_reassemble_to_the_peers_texts() {
    for name in REPORTS.map(|r| format!("sysinfo-{r}")).iter().chain([&"fleet-default".to_owned()]) {
        let answers = reference(name);
        let seen = exchanges(&format!("{name}.pcapng"));
        assert_eq!(seen.len(), answers.len(), "{name}: one channel per answer");
        for a in &answers {
            let e = &seen[&a.channel];
            assert_eq!(
                e.requests,
                std::slice::from_ref(&a.request),
                "{name}: the request on channel {}",
                a.channel
            );
            assert_eq!(e.requests[0], [command(&a.command) as u8], "{name}: one command byte");
            assert_eq!(e.chunks, a.chunks, "{name}: chunks on channel {}", a.channel);
            assert_eq!(e.text.as_deref(), Some(a.text.as_str()), "{name}: text on channel {}", a.channel);
            assert!(e.closed, "{name}: the service closes channel {} after the sentinel", a.channel);
        }
    }
    // Literal figures, so that a reference and a capture that agree on nonsense still fail.
    let ps = reference("sysinfo-ps");
    assert!(ps[0].text.contains("\n    8  Ready     43.6%   4.4%   432K                 bench\n"));
    assert_eq!(reference("sysinfo-trace")[0].chunks, [1024, 1024, 1024, 69]);
    assert_eq!(reference("sysinfo-schedlat")[0].chunks, [1024, 328]);
}

async fn replay(file: &str) -> Vec<Value> {
    let f = path(file);
    let out = run(&["replay", f.to_str().unwrap(), "--json"], None).await;
    assert_eq!(code(&out), 0, "telemon replay {file}: {}", stderr(&out));
    json_lines(&stdout(&out))
}

/// (b) `telemon replay --json` shows, for every reply, what sysinfo-wire's parser makes of the peer's text, and
/// the figures the text holds.
#[tokio::test]
async fn replay_shows_the_peers_figures() {
    for r in REPORTS {
        let name = format!("sysinfo-{r}");
        let answers = reference(&name);
        let lines = replay(&format!("{name}.pcapng")).await;
        assert_eq!(lines.len(), answers.len(), "{name}: one line per reply");
        for (line, a) in lines.iter().zip(&answers) {
            assert_eq!(line["command"], r, "{name}");
            assert_eq!(line["end"], "sentinel", "{name}");
            assert_eq!(line["bytes"], a.text.len(), "{name}");
            assert_eq!(line["chunks"], a.chunks.len(), "{name}");
            let parsed = Report::parse(command(r), &a.text);
            assert_eq!(parsed.render(), a.text, "{name}: parse then render gives the peer's text back");
            assert_eq!(line["report"], serde_json::to_value(&parsed).unwrap(), "{name}");
            if let Some(unknown) = line["report"].get("unknown") {
                assert_eq!(
                    unknown,
                    &Value::Array(vec![]),
                    "{name}: every line of the real text is understood"
                );
            }
        }
    }

    // The figures, as literals from the reference texts.
    let ps = replay("sysinfo-ps.pcapng").await;
    let bench = &ps[0]["report"]["processes"][8];
    assert_eq!(bench["name"], "bench");
    assert_eq!(bench["state"], "ready");
    assert_eq!(bench["cpu_1s"], 0.436);
    assert_eq!(bench["cpu_1m"], 0.044);
    assert_eq!(bench["mem_kib"], 432);
    assert_eq!(ps[0]["report"]["processes"][7]["state"], "dead", "Ps lists Dead processes");
    assert_eq!(ps[0]["report"]["processes"][9]["blocked_on"]["kind"], "timer");
    let idle = &ps[0]["report"]["processes"][0];
    assert_eq!((idle["state"].as_str(), idle["cpu_1s"].as_f64()), (Some("running"), Some(0.26)));

    let mem = replay("sysinfo-memstat.pcapng").await;
    let heap = &mem[0]["report"]["heap"];
    assert_eq!((heap["total_kib"].as_u64(), heap["used_kib"].as_u64()), (Some(4096), Some(196)));
    assert_eq!((heap["used_percent"].as_u64(), heap["free_kib"].as_u64()), (Some(4), Some(3899)));
    let pgtb = &mem[0]["report"]["tags"][1];
    assert_eq!((pgtb["tag"].as_str(), pgtb["current_kib"].as_u64()), (Some("PGTB"), Some(56)));
    assert_eq!(pgtb["live_allocations"], 14);

    let kstat = replay("sysinfo-kstat.pcapng").await;
    let counters = &kstat[0]["report"]["counters"];
    assert_eq!(counters.as_array().unwrap().len(), 18);
    assert_eq!(
        (counters[0]["name"].as_str(), counters[0]["value"].as_u64()),
        (Some("SCHED_SWITCHES"), Some(89))
    );
    assert_eq!((counters[3]["name"].as_str(), counters[3]["value"].as_u64()), (Some("IPC_SENDS"), Some(363)));

    let channels = replay("sysinfo-channels.pcapng").await;
    let ch2 = &channels[0]["report"]["channels"][2];
    assert_eq!(
        (ch2["refs_a"].as_u64(), ch2["refs_b"].as_u64(), ch2["closed"].as_bool()),
        (Some(1), Some(0), Some(true))
    );
    let ch7 = &channels[0]["report"]["channels"][7];
    assert_eq!((ch7["msgs_a"].as_u64(), ch7["bytes_a"].as_u64()), (Some(26), Some(416)));

    let sched = replay("sysinfo-schedlat.pcapng").await;
    assert_eq!(sched[0]["report"]["total"], 89);
    assert_eq!(sched[0]["report"]["buckets"][0], serde_json::json!({"lo": 3, "hi": 6, "count": 2}));

    // The real format prints buckets 1 and 2 both as "0 -> 0" (ticks / 10, integer division).
    let ipc = replay("sysinfo-ipclat.pcapng").await;
    let buckets = &ipc[0]["report"]["buckets"];
    assert_eq!(buckets[0], serde_json::json!({"lo": 0, "hi": 0, "count": 37}));
    assert_eq!(buckets[1], serde_json::json!({"lo": 0, "hi": 0, "count": 40}));
    assert_eq!(buckets[2], serde_json::json!({"lo": 0, "hi": 1, "count": 98}));
    assert_eq!(ipc[0]["report"]["total"], 508);

    let wd = replay("sysinfo-watchdog.pcapng").await;
    let w = &wd[0]["report"];
    assert_eq!((w["enabled"].as_bool(), w["timeout_ticks"].as_u64()), (Some(true), Some(100_000_000)));
    assert_eq!(w["critical_processes"][0], serde_json::json!({"pid": 5, "name": "fs", "ago_ms": 838}));

    let trace = replay("sysinfo-trace.pcapng").await;
    let first = &trace[0]["report"]["entries"][0];
    assert_eq!(*first, serde_json::json!({"timestamp": 24006604u64, "pid": 8, "label": "bench-iter"}));
}

/// The exported samples of one series, in time order (the timestamp cut off).
fn series(om: &str, name_and_labels: &str) -> Vec<f64> {
    om.lines()
        .filter_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// The index of a histogram row's bucket, from its printed upper bound (`((2^(i+1)) - 1) / 10`).
fn bucket_of(hi: u64, from: usize) -> usize {
    (from..32).find(|&i| ((1u64 << (i + 1)) - 1) / 10 == hi).expect("a bucket")
}

/// `telemon export FILE --format openmetrics` of a recording in this folder.
async fn export(file: &str) -> String {
    let f = path(file);
    let out = run(&["export", f.to_str().unwrap(), "--format", "openmetrics"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let om = stdout(&out);
    assert!(om.ends_with("# EOF\n"));
    om
}

/// Every kstat counter's figure in each of `answers`' texts, by counter name.
fn kstat_counters<'a>(answers: impl IntoIterator<Item = &'a Answer>) -> BTreeMap<String, Vec<f64>> {
    let mut counters: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for a in answers {
        for row in a.text.lines() {
            let (name, value) = row.trim().split_once(' ').unwrap();
            counters.entry(name.to_owned()).or_default().push(value.trim().parse().unwrap());
        }
    }
    counters
}

/// The heap's (used, free) bytes in a memstat text's first line,
/// "Kernel heap: {total}K total, {used}K used ({pct}%), {free}K free".
fn heap_used_free(text: &str) -> (f64, f64) {
    let nums: Vec<f64> = text
        .lines()
        .next()
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (nums[1] * 1024.0, nums[3] * 1024.0)
}

/// (c) `telemon export --format openmetrics` of the fleet recording (the collector's default reports): every
/// published sample equals the figure in the text the peer sent for that round.
#[tokio::test]
async fn export_gives_the_peers_figures() {
    let om = export("fleet-default.pcapng").await;
    let t = format!("target=\"{PEER}\"");
    let answers = reference("fleet-default");
    let of = |c: &str| answers.iter().filter(|a| a.command == c).cloned().collect::<Vec<_>>();
    let rounds = of("ps").len();
    assert_eq!(rounds, 4);
    for c in ["memstat", "kstat", "channels", "schedlat", "ipclat", "watchdog"] {
        assert_eq!(of(c).len(), rounds, "{c}: one per round");
    }
    let close = |a: &[f64], b: &[f64], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}: {a:?} against {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{what}: {a:?} against {b:?}");
        }
    };

    // ps: per process memory and CPU, parsed from the text by column.
    let mut mem: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut cpu: BTreeMap<(String, String, &str), Vec<f64>> = BTreeMap::new();
    for a in of("ps") {
        for row in a.text.lines().skip(2) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            let (pid, name) = (cols[0].to_owned(), cols.last().unwrap().to_string());
            let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().unwrap() / 100.0;
            let kib: f64 = cols[4].trim_end_matches('K').parse().unwrap();
            mem.entry((pid.clone(), name.clone())).or_default().push(kib * 1024.0);
            cpu.entry((pid.clone(), name.clone(), "1s")).or_default().push(pct(cols[2]));
            cpu.entry((pid, name, "1m")).or_default().push(pct(cols[3]));
        }
    }
    assert_eq!(mem.len(), 10);
    for ((pid, name), want) in &mem {
        let got = series(&om, &format!("rvos_process_memory_bytes{{{t},pid=\"{pid}\",name=\"{name}\"}}"));
        close(&got, want, &format!("memory of {name}"));
    }
    for ((pid, name, window), want) in &cpu {
        let got = series(
            &om,
            &format!("rvos_process_cpu_ratio{{{t},pid=\"{pid}\",name=\"{name}\",window=\"{window}\"}}"),
        );
        close(&got, want, &format!("cpu {window} of {name}"));
    }
    // Literals: bench in the first round's text is "    8  Ready     38.0%   6.1%   420K                 bench".
    assert!(of("ps")[0].text.contains("\n    8  Ready     38.0%   6.1%   420K                 bench\n"));
    assert_eq!(
        series(&om, &format!("rvos_process_memory_bytes{{{t},pid=\"8\",name=\"bench\"}}"))[0],
        420.0 * 1024.0
    );
    let bench_cpu =
        series(&om, &format!("rvos_process_cpu_ratio{{{t},pid=\"8\",name=\"bench\",window=\"1s\"}}"));
    assert_eq!(bench_cpu[0], 0.38);

    // kstat: every counter.
    let counters = kstat_counters(&of("kstat"));
    assert_eq!(counters.len(), 18);
    for (name, want) in &counters {
        close(&series(&om, &format!("rvos_kstat_total{{{t},counter=\"{name}\"}}")), want, name);
    }

    // memstat: the heap line, in bytes.
    let mut heap: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for a in of("memstat") {
        let (used, free) = heap_used_free(&a.text);
        heap.entry("used").or_default().push(used);
        heap.entry("free").or_default().push(free);
    }
    for (state, want) in &heap {
        close(&series(&om, &format!("rvos_kernel_heap_bytes{{{t},state=\"{state}\"}}")), want, state);
    }

    // The latency histograms: count, and each printed bucket's cumulative count at its upper bound.
    for (c, family) in
        [("schedlat", "rvos_scheduler_latency_seconds"), ("ipclat", "rvos_ipc_latency_seconds")]
    {
        let mut totals = Vec::new();
        let mut cumulative: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for a in of(c) {
            let rows: Vec<(u64, f64)> = a
                .text
                .lines()
                .filter(|l| l.contains("->"))
                .map(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    (cols[2].parse().unwrap(), cols[3].parse().unwrap())
                })
                .collect();
            let last = bucket_of(rows.last().unwrap().0, 4);
            let first = last + 1 - rows.len();
            let mut sum = 0.0;
            for (i, (_, count)) in rows.iter().enumerate() {
                sum += count;
                cumulative.entry(first + i).or_default().push(sum);
            }
            let total: f64 =
                a.text.lines().last().unwrap().trim().strip_prefix("total: ").unwrap().parse().unwrap();
            assert_eq!(sum, total, "{c}: the rows add up to the total");
            totals.push(total);
        }
        close(&series(&om, &format!("{family}_count{{{t}}}")), &totals, c);
        let buckets: Vec<(f64, Vec<f64>)> = om
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{family}_bucket{{{t},le=\"")))
            .filter_map(|rest| {
                let (le, rest) = rest.split_once("\"} ")?;
                Some((le.parse::<f64>().ok()?, rest.split(' ').next()?.parse::<f64>().ok()?))
            })
            .fold(Vec::new(), |mut acc: Vec<(f64, Vec<f64>)>, (le, v)| {
                match acc.last_mut() {
                    Some((l, vs)) if *l == le => vs.push(v),
                    _ => acc.push((le, vec![v])),
                }
                acc
            });
        let mut checked = 0;
        for (i, want) in &cumulative {
            // Only the buckets every round prints (the first printed bucket can move between rounds).
            if want.len() != rounds {
                continue;
            }
            let le = (1u64 << (i + 1)) as f64 / 1e7;
            let got =
                &buckets.iter().find(|(l, _)| (l - le).abs() <= le * 1e-9).expect("the bucket is exported").1;
            close(got, want, &format!("{c} bucket {i}"));
            checked += 1;
        }
        assert!(checked >= 10, "{c}: {checked} buckets checked");
    }

    // watchdog: the heartbeat ages, in seconds.
    let mut ages: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for a in of("watchdog") {
        for row in a.text.lines().filter(|l| l.starts_with("    ") && !l.contains("PID")) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            let ms: f64 = cols[3].trim_end_matches("ms").parse().unwrap();
            ages.entry(cols[0].to_owned()).or_default().push(ms / 1000.0);
        }
    }
    assert_eq!(ages.len(), 4);
    for (task, want) in &ages {
        close(
            &series(&om, &format!("rvos_watchdog_heartbeat_age_seconds{{{t},task=\"{task}\"}}")),
            want,
            task,
        );
    }
}

/// `telemon export` of recordings that asked for one report only (`telemon sysinfo kstat --watch` and
/// `telemon sysinfo memstat --watch`, not the fleet collector's default reports): each reply is read as
/// the report its channel asked for, one publication per round that changed something.
#[tokio::test]
async fn export_of_a_one_report_recording_gives_the_peers_figures() {
    let t = format!("target=\"tcp:{PEER}\"");

    let om = export("sysinfo-kstat.pcapng").await;
    let counters = kstat_counters(&reference("sysinfo-kstat"));
    assert_eq!(counters.len(), 18);
    for (name, want) in &counters {
        let got = series(&om, &format!("rvos_kstat_total{{{t},counter=\"{name}\"}}"));
        assert_eq!(&got, want, "{name}: one point per round, the peer's figure");
    }
    assert!(!om.contains("rvos_process_"), "no report but kstat was asked for");

    let om = export("sysinfo-memstat.pcapng").await;
    let used: Vec<f64> = reference("sysinfo-memstat").iter().map(|a| heap_used_free(&a.text).0).collect();
    // A round whose figures did not change publishes nothing new (the second round here).
    let mut changes = used.clone();
    changes.dedup();
    assert!(changes.len() < used.len(), "the recording has a round without a change");
    assert_eq!(series(&om, &format!("rvos_kernel_heap_bytes{{{t},state=\"used\"}}")), changes);
}
