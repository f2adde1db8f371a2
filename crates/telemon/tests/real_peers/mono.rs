//! The real Mono counters agent (mono/mono `mono/utils/mono-counters-agent.c` at `e9bcb2b9`, 2014,
//! built unchanged against a runtime shim), recorded with `telemon mono listen --list --add ... --record`:
//! its bytes replayed through the decoders (`telemon replay`), the Mono collector (`telemon export`) and
//! the live inspector (the sims' replay dialing `telemon mono listen`), and every value shown checked
//! against the values the agent itself read (`tests/peers/mono/README.md` says what produced the files).

use std::collections::BTreeMap;

use bytes::BytesMut;
use mono_counters::{
    AddResponse, AgentCodec, AgentMessage, Category, CounterName, CounterType, InspectorCodec,
    InspectorMessage, Limits, RequestOpcodes, Unit, Variance,
};
use telemon_capture::{link_type, Capture, Connection, Direction};

use crate::support;

const RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/mono/mono-agent-2014.pcapng");
const REFERENCE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/mono/mono-agent-2014.reference.jsonl");
/// `telemon mono listen 127.0.0.1:18888 --record ...` names the target after the address it listens on.
const TARGET: &str = "127.0.0.1:18888";

/// The counters the agent sampled, in index order, as the shim registered them: the 12 of `counters=`
/// (an unknown 13th was skipped by the agent), then the two that telemon's `--add` added (indexes 12
/// and 13).
const COUNTERS: [(&str, CounterType, Unit, Variance); 14] = [
    ("Mono JIT/Compiled methods", CounterType::Int, Unit::None, Variance::Variable),
    ("Mono JIT/JIT time", CounterType::Long, Unit::Time, Variance::Variable),
    ("Mono GC/Heap Size", CounterType::Word, Unit::Bytes, Variance::Variable),
    ("Mono GC/Pause Percentage", CounterType::Double, Unit::Percentage, Variance::Variable),
    ("Mono Metadata/Type Delta", CounterType::Int, Unit::None, Variance::Variable),
    ("Mono Security/Big Counter", CounterType::Long, Unit::None, Variance::Monotonic),
    ("Mono Thread/Max Threads", CounterType::Int, Unit::Config, Variance::Constant),
    ("Mono ThreadPool/Work Items", CounterType::Long, Unit::Events, Variance::Monotonic),
    ("Custom/Requests", CounterType::Int, Unit::Events, Variance::Monotonic),
    ("Mono System/Working Set", CounterType::Long, Unit::Bytes, Variance::Variable),
    ("Mono System/User Time", CounterType::Long, Unit::Time, Variance::Variable),
    ("Mono System/Virtual Bytes", CounterType::Long, Unit::Bytes, Variance::Variable),
    ("Mono System/Page Faults", CounterType::Long, Unit::Events, Variance::Variable),
    ("Mono GC/Collections", CounterType::Int, Unit::Events, Variance::Monotonic),
];

/// What `telemon mono listen` asked for when the recording was made.
const ADDS: [&str; 3] = ["Mono System/Page Faults", "Mono GC/Collections", "Mono JIT/No such counter"];

/// A value as the agent read it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(i64),
    Double(f64),
}

impl Value {
    /// Whether telemon's JSON number is exactly this value (an integer as an integer, a double bit for bit).
    fn is_json(self, v: &serde_json::Value) -> bool {
        match self {
            Value::Int(i) => !v.is_f64() && v.as_i64() == Some(i),
            Value::Double(d) => v.as_f64().map(f64::to_bits) == Some(d.to_bits()),
        }
    }
}

/// One sample as the agent took it: its timestamp (100 ns ticks since 0001-01-01) and every value it read.
#[derive(Debug)]
struct AgentSample {
    timestamp: i64,
    values: BTreeMap<String, Value>,
}

/// The agent's own values, sample by sample: each line of the reference is
/// `{"sample":k,"timestamp":..,"category":..,"name":..,"type":..,"value":..}`.
fn reference() -> Vec<AgentSample> {
    let text = std::fs::read_to_string(REFERENCE).unwrap();
    let mut samples: Vec<AgentSample> = Vec::new();
    for line in support::json_lines(&text) {
        let k = line["sample"].as_u64().unwrap() as usize;
        let timestamp = line["timestamp"].as_i64().unwrap();
        if k == samples.len() {
            samples.push(AgentSample { timestamp, values: BTreeMap::new() });
        }
        assert_eq!(k + 1, samples.len(), "samples in order: {line}");
        assert_eq!(samples[k].timestamp, timestamp, "one timestamp per sample: {line}");
        let name = format!("{}/{}", line["category"].as_str().unwrap(), line["name"].as_str().unwrap());
        let value = match line["type"].as_str().unwrap() {
            "DOUBLE" => Value::Double(line["value"].as_f64().unwrap()),
            _ => Value::Int(line["value"].as_i64().unwrap()),
        };
        assert!(samples[k].values.insert(name, value).is_none(), "one value per counter and sample: {line}");
    }
    samples
}

/// The recording's one connection.
fn connection() -> Connection {
    let capture = Capture::from_file(RECORDING, telemon_capture::Limits::default()).unwrap();
    let mut connections = capture.connections(None);
    assert_eq!(connections.len(), 1);
    connections.remove(0)
}

/// Every message of `direction`, with the time (ns since the epoch) of the read that completed it.
fn messages<M>(
    connection: &Connection,
    direction: Direction,
    mut decode: impl FnMut(&mut BytesMut) -> Option<M>,
) -> Vec<(u64, M)> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for (at, _, bytes) in connection.chunks.iter().filter(|c| c.1 == direction) {
        buf.extend_from_slice(bytes);
        while let Some(m) = decode(&mut buf) {
            out.push((connection.start_ns + at.as_nanos() as u64, m));
        }
    }
    assert!(buf.is_empty(), "{direction:?} ends with a whole message");
    out
}

fn agent_messages(connection: &Connection) -> Vec<(u64, AgentMessage)> {
    let mut codec = InspectorCodec::new(Limits::default());
    messages(connection, Direction::Inbound, |buf| codec.decode_message(buf).unwrap())
}

fn inspector_messages(connection: &Connection) -> Vec<InspectorMessage> {
    let mut codec = AgentCodec::new(Limits::default(), RequestOpcodes::Agent);
    messages(connection, Direction::Outbound, |buf| codec.decode_message(buf).unwrap())
        .into_iter()
        .map(|(_, m)| m)
        .collect()
}

/// The agent samples in which some value changed (the rows `telemon` shows), by timestamp.
fn changed_samples(reference: &[AgentSample]) -> Vec<&AgentSample> {
    let mut out = Vec::new();
    let mut last: BTreeMap<&str, Value> = BTreeMap::new();
    for s in reference {
        let mut changed = false;
        for (name, v) in &s.values {
            changed |= last.insert(name, *v) != Some(*v);
        }
        if changed {
            out.push(s);
        }
    }
    out
}

#[test]
fn the_recording_is_one_mono_session_with_the_real_agent() {
    let capture = Capture::from_file(RECORDING, telemon_capture::Limits::default()).unwrap();
    assert_eq!(capture.warning, None, "the file is whole");
    let targets = capture.targets();
    assert_eq!(targets.len(), 1, "{targets:?}");
    assert_eq!(targets[0].name, TARGET);
    assert_eq!(targets[0].link_type, link_type::MONO);
    assert_eq!(targets[0].address, TARGET);

    let connection = connection();
    // What telemon asked (`--list --add ... --add ... --add ...`, then Good Bye after `--count 30`).
    let mut asked = vec![InspectorMessage::List];
    asked.extend(ADDS.iter().map(|a| InspectorMessage::Add(CounterName::parse(a).unwrap())));
    asked.push(InspectorMessage::GoodBye);
    assert_eq!(inspector_messages(&connection), asked);

    // What the agent sent: Hello, List, the Add responses, and one Sampling per sample it took.
    let reference = reference();
    let messages = agent_messages(&connection);
    let AgentMessage::Hello(hello) = &messages[0].1 else { panic!("{:?} first", messages[0]) };
    assert_eq!(hello.version, 1);
    let mut headers = hello.headers.clone();
    let mut list = None;
    let mut add_responses = Vec::new();
    let mut timestamps = Vec::new();
    for (_, m) in &messages[1..] {
        match m {
            AgentMessage::List(names) => list = Some(names.clone()),
            AgentMessage::Add(response) => {
                if let AddResponse::Ok(h) = response {
                    headers.push(h.clone());
                }
                add_responses.push(response.clone());
            }
            AgentMessage::Sampling(s) => timestamps.push(s.timestamp),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(hello.headers.len(), 12, "the unknown counter of counters= is skipped");
    let announced: Vec<_> =
        headers.iter().map(|h| (h.full_name(), h.kind, h.unit, h.variance, h.index)).collect();
    let declared: Vec<_> = COUNTERS
        .iter()
        .enumerate()
        .map(|(i, (name, kind, unit, variance))| (name.to_string(), *kind, *unit, *variance, i as i16))
        .collect();
    assert_eq!(announced, declared);
    assert_eq!(headers[8].category, Category::Custom);
    assert_eq!(headers[8].name, "Requests", "a CUSTOM counter's name as registered");
    assert!(matches!(add_responses[..], [AddResponse::Ok(_), AddResponse::Ok(_), AddResponse::NotFound]));
    // List: the registered counters, then the seven "Mono System" ones.
    let list: Vec<String> = list.expect("a List response").iter().map(|c| c.to_string()).collect();
    assert_eq!(list.len(), 17, "{list:?}");
    assert_eq!(list[0], "Mono JIT/Compiled methods");
    assert_eq!(list[9], "Custom/Requests");
    assert_eq!(
        list[10..],
        [
            "User Time",
            "System Time",
            "Total Time",
            "Working Set",
            "Private Bytes",
            "Virtual Bytes",
            "Page Faults"
        ]
        .map(|n| format!("Mono System/{n}"))
    );
    // Every sample the agent took reached telemon (the last one before Good Bye included).
    let taken: Vec<i64> = reference.iter().map(|s| s.timestamp).collect();
    assert_eq!(timestamps, taken);
}

/// Checks `telemon`'s JSON rows (`{"timestamp":..,"values":{..}}`) against the agent's samples: one row
/// per sample that changed a value, every value exactly the agent's.
fn check_rows(rows: &[serde_json::Value], reference: &[AgentSample]) {
    let want = changed_samples(reference);
    let shown: Vec<i64> = rows.iter().map(|r| r["timestamp"].as_i64().unwrap()).collect();
    assert_eq!(
        shown,
        want.iter().map(|s| s.timestamp).collect::<Vec<_>>(),
        "one row per sample with a change"
    );
    for (row, sample) in rows.iter().zip(&want) {
        let values = row["values"].as_object().unwrap();
        for (name, v) in values {
            match sample.values.get(name) {
                Some(expected) => assert!(
                    expected.is_json(v),
                    "{name} at {}: {v}, the agent read {expected:?}",
                    sample.timestamp
                ),
                None => assert!(v.is_null(), "{name} at {}: {v}, not sampled yet", sample.timestamp),
            }
        }
        for name in sample.values.keys() {
            assert!(values.contains_key(name), "{name} missing at {}: {row}", sample.timestamp);
        }
    }
}

#[tokio::test]
async fn replay_shows_the_agents_own_values() {
    let reference = reference();
    let out = support::run(&["replay", RECORDING, "--json"], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    let rows = support::json_lines(&support::stdout(&out));
    check_rows(&rows, &reference);
    assert_eq!(rows.len(), 30);
    // The six samples in which nothing changed are folded into the row after them.
    let coalesced: Vec<(usize, u64)> =
        rows.iter().enumerate().filter_map(|(i, r)| Some((i, r.get("coalesced")?.as_u64()?))).collect();
    assert_eq!(coalesced, [(12, 6)]);
}

/// The exported series of each counter: (family, counter's full name) -> [(time in ms, value text)].
fn exported_series(text: &str) -> BTreeMap<(String, String), Vec<(u64, String)>> {
    let mut series: BTreeMap<(String, String), Vec<(u64, String)>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("mono_runtime")) {
        let (family, rest) = line.split_once('{').unwrap();
        let (labels, point) = rest.split_once("} ").unwrap();
        let label = |key: &str| {
            let start = labels.find(&format!("{key}=\"")).unwrap() + key.len() + 2;
            labels[start..].split('"').next().unwrap().to_string()
        };
        assert_eq!(label("target"), TARGET);
        let (value, time) = point.split_once(' ').unwrap();
        let (secs, ms) = time.split_once('.').unwrap();
        let ms = secs.parse::<u64>().unwrap() * 1000 + ms.parse::<u64>().unwrap();
        let name = format!("{}/{}", label("category"), label("counter"));
        series.entry((family.to_string(), name)).or_default().push((ms, value.to_string()));
    }
    series
}

/// The family and the exported value of a counter's value, as `docs/metrics.md` maps units and variances.
fn exported(unit: Unit, variance: Variance, v: Value) -> (&'static str, Value) {
    let f = match v {
        Value::Int(i) => i as f64,
        Value::Double(d) => d,
    };
    let monotonic = variance == Variance::Monotonic;
    match (unit, monotonic) {
        (Unit::Bytes, true) => ("mono_runtime_bytes_total", v),
        (Unit::Bytes, false) => ("mono_runtime_bytes", v),
        (Unit::Time, true) => ("mono_runtime_seconds_total", Value::Double(f / 1e7)),
        (Unit::Time, false) => ("mono_runtime_seconds", Value::Double(f / 1e7)),
        (Unit::Percentage, _) => ("mono_runtime_ratio", Value::Double(f / 100.0)),
        (_, true) => ("mono_runtime_total", v),
        (_, false) => ("mono_runtime", v),
    }
}

fn parses_as(text: &str, v: Value) -> bool {
    match v {
        Value::Int(i) => text.parse::<i64>() == Ok(i),
        Value::Double(d) => text.parse::<f64>().map(f64::to_bits) == Ok(d.to_bits()),
    }
}

#[tokio::test]
async fn export_through_the_collector_gives_the_agents_values_at_their_times() {
    let reference = reference();
    let out = support::run(&["export", RECORDING, "--format", "openmetrics"], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    let text = support::stdout(&out);
    assert!(text.ends_with("# EOF\n"));
    let series = exported_series(&text);

    // When each sample had fully arrived (ns since the epoch): its values are telemon's from then on.
    let arrived: BTreeMap<i64, u64> = agent_messages(&connection())
        .into_iter()
        .filter_map(|(t, m)| match m {
            AgentMessage::Sampling(s) => Some((s.timestamp, t)),
            _ => None,
        })
        .collect();
    let arrival: Vec<u64> = reference.iter().map(|s| arrived[&s.timestamp]).collect();

    let mut families = Vec::new();
    for (name, _, unit, variance) in COUNTERS {
        let family = exported(unit, variance, Value::Int(0)).0;
        families.push((family.to_string(), name.to_string()));
        let points = series.get(&(family.to_string(), name.to_string()));
        let points = points.unwrap_or_else(|| panic!("no {family} series for {name}: {series:?}"));
        // 36 samples 100 ms apart, published at most every 200 ms of recorded time.
        assert!(points.len() >= 12, "{name}: {} points", points.len());
        assert!(points.windows(2).all(|w| w[0].0 < w[1].0), "{name}: one point per millisecond, in order");
        for (ms, text) in points {
            // A point stamped at millisecond `ms` holds the state of a sample that was the latest to have
            // arrived at some instant of that millisecond.
            let (start, end) = (ms * 1_000_000, (ms + 1) * 1_000_000);
            let current: Vec<usize> = (0..reference.len())
                .filter(|&k| arrival[k] < end && arrival.get(k + 1).is_none_or(|&next| next > start))
                .collect();
            let ok = current.iter().any(|&k| {
                reference[k].values.get(name).is_some_and(|&v| parses_as(text, exported(unit, variance, v).1))
            });
            let read: Vec<_> = current.iter().map(|&k| reference[k].values.get(name)).collect();
            assert!(ok, "{family} {name} at {ms} ms: {text}; the agent's values then: {read:?}");
        }
        // The agent's last values are exported.
        let last = reference.last().unwrap().values[name];
        assert!(parses_as(&points.last().unwrap().1, exported(unit, variance, last).1), "{name}: last value");
    }
    let mut exported_names: Vec<_> = series.keys().cloned().collect();
    exported_names.sort();
    families.sort();
    assert_eq!(exported_names, families, "one series per counter, in its unit's family");
    assert!(
        text.contains(&format!("mono_agent_info{{target=\"{TARGET}\",version=\"0.1\",counters=\"14\"}} 1 "))
    );
}

/// The recording served back by the sims' replay (`mono-agent-sim --replay FILE`, at ten times the
/// pace) to a fresh `telemon mono listen` making the same requests: the live inspector shows the
/// agent's values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replayed_agent_gives_a_live_inspector_the_same_values() {
    use sim_common::recorded_peer::{Mode, Replay, Speed};
    let reference = reference();
    let mut args = vec!["mono", "listen", "127.0.0.1:0", "--json", "--count", "30", "--list"];
    for add in ADDS {
        args.extend(["--add", add]);
    }
    let mut t = support::Telemon::spawn(&args);
    let line = t.stderr_line("listening for Mono agents on ").await;
    let addr = line.rsplit(' ').next().unwrap().to_string();
    let replay = Replay::load(
        std::path::Path::new(RECORDING),
        link_type::MONO,
        None,
        Mode::Conversation,
        Speed::Times(10.0),
    )
    .unwrap();
    let shutdown = sim_common::Shutdown::new();
    let stop = shutdown.clone();
    tokio::spawn(async move { sim_common::recorded_peer::dial(&addr, replay, stop).await });
    let (code, out, err) = t.finish().await;
    shutdown.cancel();
    assert_eq!(code, 0, "{err:?}");
    let lines = support::json_lines(&out.join("\n"));
    assert_eq!(lines[0]["counters"].as_array().map(Vec::len), Some(17), "{:?}", lines[0]);
    check_rows(&lines[1..], &reference);
}
