//! Prometheus remote write 1.0: the protobuf messages (derived by hand with prost, from the
//! spec's `prometheus/prompb` definitions), the snappy-block-compressed request, and the sampler
//! that turns the store into samples with stale markers.
//!
//! Every tick, each series of each up target becomes one sample at the tick's time (as a scrape
//! would). As remote write 1.0 requires, its labels are sorted by name in byte order, `__name__`
//! among them (so a name with an upper-case letter comes before it), no name is repeated and no
//! value is empty (an empty value is no label: the store leaves the series' ones out, and the
//! target's and the sender's empty labels are left out here). A series that vanishes (or whose
//! target goes down or away) gets one stale marker, so queries stop showing its last value.

use std::collections::HashMap;
use std::sync::Arc;

use crate::memory_queue::Queued;
use crate::sender::Wire;
use crate::view::{self, PushTarget, UP_FAMILY};
use telemon_fleet::{FleetSnapshot, LabelSet, Series, Value};

/// The NaN Prometheus writes as a staleness marker.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// `prometheus.WriteRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// The series with their samples.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    /// Metric metadata (unused by telemon).
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// `prometheus.TimeSeries`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Sorted by name in byte order (`__name__` included), none with an empty value.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// In timestamp order.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct Label {
    /// Label name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Label value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Unix milliseconds.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// `prometheus.MetricMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    /// The metric type (0 unknown, 1 counter, 2 gauge, 3 histogram, ...).
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// The family name.
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    /// HELP text.
    #[prost(string, tag = "4")]
    pub help: String,
    /// Unit.
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// The request headers of remote write 1.0 (besides `Content-Type` and `User-Agent`).
pub const HEADERS: [(&str, &str); 2] =
    [("Content-Encoding", "snappy"), ("X-Prometheus-Remote-Write-Version", "0.1.0")];

/// One wire series: its sorted labels, shared by every sample of it, and their protobuf encoding
/// (done once, when the series first appears).
#[derive(Debug, PartialEq)]
pub struct WireSeries {
    /// Sorted by name in byte order, `__name__` among them; each name once, no value empty.
    pub labels: Vec<Label>,
    /// The `labels` fields of a `TimeSeries`, encoded.
    encoded: Vec<u8>,
    bytes: usize,
}

impl WireSeries {
    /// The series with `name` and `labels` (any order; the first of a repeated name wins, and a
    /// label with an empty value is left out, as remote write 1.0 says it MUST be).
    pub fn new<'a>(name: &str, labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> WireSeries {
        let mut sorted = vec![Label { name: "__name__".into(), value: name.to_owned() }];
        for (k, v) in labels {
            if v.is_empty() || sorted.iter().any(|l| l.name == k) {
                continue;
            }
            sorted.push(Label { name: k.to_owned(), value: v.to_owned() });
        }
        // Byte order (`str`'s `Ord`), as the spec asks: `Zone` sorts before `__name__`, `job` after.
        sorted.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let mut encoded = Vec::new();
        for l in &sorted {
            prost::encoding::message::encode(1, l, &mut encoded);
        }
        let bytes = encoded.len();
        WireSeries { labels: sorted, encoded, bytes }
    }
}

/// One queued sample.
#[derive(Debug, Clone)]
pub struct RwSample {
    /// Its series.
    pub series: Arc<WireSeries>,
    /// Unix milliseconds.
    pub timestamp_ms: i64,
    /// The value ([`STALE_NAN_BITS`] for a stale marker).
    pub value: f64,
}

impl Queued for RwSample {
    fn weight(&self) -> usize {
        // The encoded sample plus its series' labels: what it costs in a request.
        self.series.bytes + 24
    }
    fn timestamp_ms(&self) -> i64 {
        self.timestamp_ms
    }
}

/// The `WriteRequest` of `batch`: samples of one series grouped in one `TimeSeries`, in the order
/// they came (so in timestamp order).
pub fn write_request(batch: &[RwSample]) -> WriteRequest {
    let mut index: HashMap<*const WireSeries, usize> = HashMap::new();
    let mut timeseries: Vec<TimeSeries> = Vec::new();
    for s in batch {
        let i = *index.entry(Arc::as_ptr(&s.series)).or_insert_with(|| {
            timeseries.push(TimeSeries { labels: s.series.labels.clone(), samples: Vec::new() });
            timeseries.len() - 1
        });
        timeseries[i].samples.push(Sample { value: s.value, timestamp: s.timestamp_ms });
    }
    WriteRequest { timeseries, metadata: Vec::new() }
}

/// Encodes and snappy-compresses (block format) a write request: the reference path (prost
/// messages built, then encoded), which [`encode_batch`] must equal once decoded.
pub fn encode_request(req: &WriteRequest) -> Vec<u8> {
    compress(&prost::Message::encode_to_vec(req))
}

fn compress(raw: &[u8]) -> Vec<u8> {
    // Compressing cannot fail below snap's 4 GiB limit, far above any max_samples_per_send; fall
    // back to an empty body (which a receiver rejects) rather than panicking.
    snap::raw::Encoder::new().compress_vec(raw).unwrap_or_default()
}

/// The request body of `batch` (what [`encode_request`]`(&`[`write_request`]`(batch))` decodes
/// to), written straight from the series' pre-encoded labels: no label is copied per sample.
///
/// Unlike prost, a value of 0.0 and a timestamp of 0 are written out rather than left to their
/// proto3 defaults (both decode the same, except that -0.0 keeps its sign).
pub fn encode_batch(batch: &[RwSample]) -> Vec<u8> {
    use prost::encoding::{encode_varint, encoded_len_varint};
    // Per series, in order of first appearance: its samples, in the order they came.
    let mut index: HashMap<*const WireSeries, usize> = HashMap::new();
    let mut groups: Vec<(&WireSeries, Vec<&RwSample>)> = Vec::new();
    for s in batch {
        let i = *index.entry(Arc::as_ptr(&s.series)).or_insert_with(|| {
            groups.push((&s.series, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(s);
    }
    let sample_len = |s: &RwSample| 9 + 1 + encoded_len_varint(s.timestamp_ms as u64);
    let mut raw =
        Vec::with_capacity(batch.len() * 24 + groups.iter().map(|g| g.0.encoded.len() + 8).sum::<usize>());
    for (series, samples) in &groups {
        let len = series.encoded.len()
            + samples
                .iter()
                .map(|s| 1 + encoded_len_varint(sample_len(s) as u64) + sample_len(s))
                .sum::<usize>();
        raw.push(0x0a); // WriteRequest.timeseries = 1, length-delimited
        encode_varint(len as u64, &mut raw);
        raw.extend_from_slice(&series.encoded);
        for s in samples {
            raw.push(0x12); // TimeSeries.samples = 2, length-delimited
            encode_varint(sample_len(s) as u64, &mut raw);
            raw.push(0x09); // Sample.value = 1, fixed64
            raw.extend_from_slice(&s.value.to_bits().to_le_bytes());
            raw.push(0x10); // Sample.timestamp = 2, varint
            encode_varint(s.timestamp_ms as u64, &mut raw);
        }
    }
    compress(&raw)
}

/// Decodes a request body (snappy block + protobuf): what a receiver does; for tests and fuzzing.
pub fn decode_request(body: &[u8]) -> Result<WriteRequest, DecodeError> {
    let len = snap::raw::decompress_len(body).map_err(|e| DecodeError::Snappy(e.to_string()))?;
    if len > MAX_DECODED {
        return Err(DecodeError::TooLarge { len, max: MAX_DECODED });
    }
    // Snappy expands at most 64 bytes out of a 3-byte copy: a header announcing more than that
    // for the body's size is refused before the output buffer is allocated.
    if len / MAX_SNAPPY_RATIO > body.len() {
        return Err(DecodeError::Snappy(format!("{len} bytes announced in a body of {}", body.len())));
    }
    let raw =
        snap::raw::Decoder::new().decompress_vec(body).map_err(|e| DecodeError::Snappy(e.to_string()))?;
    prost::Message::decode(raw.as_slice())
        .map_err(|e: prost::DecodeError| DecodeError::Protobuf(e.to_string()))
}

/// The largest decompressed request [`decode_request`] accepts (32 MiB).
pub const MAX_DECODED: usize = 32 << 20;

/// Snappy's largest expansion: a 3-byte copy element writes at most 64 bytes (rounded up).
const MAX_SNAPPY_RATIO: usize = 22;

/// A request body that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not snappy block format.
    #[error("snappy: {0}")]
    Snappy(String),
    /// Decompresses to more than the limit.
    #[error("decompressed request of {len} bytes, over {max}")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not a WriteRequest.
    #[error("protobuf: {0}")]
    Protobuf(String),
}

/// Whether `v` is a stale marker.
pub fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

type SeriesKey = (Arc<str>, LabelSet);

#[derive(Debug, Default)]
struct TargetSeen {
    series: HashMap<SeriesKey, Seen>,
    up: Option<Arc<WireSeries>>,
    /// The last tick's series in the store's order, with their wire series. When the store hands
    /// out the same series (the same `Arc`s, in the same order) again, which is the common case,
    /// a tick is pointer compares and pushes, without hashing a label.
    aligned: Vec<(SeriesKey, Vec<Arc<WireSeries>>)>,
}

#[derive(Debug)]
struct Seen {
    wire: Vec<Arc<WireSeries>>,
    tick: u64,
}

/// The remote write sampler: remembers the series sent, to mark the vanished ones stale.
#[derive(Debug, Default)]
pub struct RemoteWrite {
    external: Vec<(String, String)>,
    targets: HashMap<Arc<str>, TargetSeen>,
    tick: u64,
}

impl RemoteWrite {
    /// A sampler adding `external` labels to every series.
    pub fn new(external: Vec<(String, String)>) -> Self {
        RemoteWrite { external, targets: HashMap::new(), tick: 0 }
    }

    /// The samples of `snapshot` at `now_ms`, then stale markers for what vanished since the last
    /// call.
    pub fn sample(&mut self, snapshot: &FleetSnapshot, now_ms: i64, out: &mut Vec<RwSample>) {
        self.tick += 1;
        let tick = self.tick;
        for t in view::targets(snapshot) {
            let mut seen = self.targets.remove(t.name).unwrap_or_default();
            let up = match seen.up.take() {
                Some(w) => w,
                None => {
                    let base = std::iter::once(("target", &**t.name))
                        .chain(std::iter::once(("protocol", t.protocol.as_str())))
                        .chain(t.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                        .chain(self.external.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                    Arc::new(WireSeries::new(UP_FAMILY, base))
                }
            };
            let v = if t.up { 1.0 } else { 0.0 };
            out.push(RwSample { series: up.clone(), timestamp_ms: now_ms, value: v });
            seen.up = Some(up);
            let same = seen.aligned.len() == t.series.len()
                && seen.aligned.iter().zip(&t.series).all(|((key, wire), s)| {
                    Arc::ptr_eq(&key.0, &s.family)
                        && LabelSet::ptr_eq(&key.1, &s.labels)
                        && wire.len() == wire_len(&s.value)
                });
            if same {
                for ((_, wire), s) in seen.aligned.iter().zip(&t.series) {
                    push_values(wire, &s.value, now_ms, out);
                }
            } else {
                seen.aligned.clear();
                for s in &t.series {
                    let key = (s.family.clone(), s.labels.clone());
                    let entry = match seen.series.get_mut(&key) {
                        Some(e) if e.wire.len() == wire_len(&s.value) => e,
                        other => {
                            // New, or a histogram whose buckets changed: the old wire series go stale.
                            if let Some(old) = other {
                                stale(&old.wire, now_ms, out);
                            }
                            let wire = wire_series(&self.external, &t, s);
                            // The map outlives this snapshot: its key owns only its own label text.
                            seen.series.insert((key.0.clone(), key.1.detached()), Seen { wire, tick });
                            seen.series.get_mut(&key).expect("inserted above")
                        }
                    };
                    entry.tick = tick;
                    push_values(&entry.wire, &s.value, now_ms, out);
                    seen.aligned.push((key, entry.wire.clone()));
                }
                seen.series.retain(|_, e| {
                    let keep = e.tick == tick;
                    if !keep {
                        stale(&e.wire, now_ms, out);
                    }
                    keep
                });
            }
            self.targets.insert(t.name.clone(), seen);
        }
        // Targets gone from the store: every series of theirs goes stale.
        let gone: Vec<Arc<str>> =
            self.targets.keys().filter(|n| snapshot.get(n).is_none()).cloned().collect();
        for name in gone {
            if let Some(seen) = self.targets.remove(&name) {
                for e in seen.series.values() {
                    stale(&e.wire, now_ms, out);
                }
                if let Some(up) = seen.up {
                    stale(std::slice::from_ref(&up), now_ms, out);
                }
            }
        }
    }
}

fn wire_series(external: &[(String, String)], t: &PushTarget<'_>, s: &Series) -> Vec<Arc<WireSeries>> {
    let labels: Vec<_> = s.labels.iter().collect();
    let base: Vec<(&str, &str)> = std::iter::once(("target", &**t.name))
        .chain(labels.iter().map(|(k, v)| (*k, &**v)))
        .chain(t.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .chain(external.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    let one = |suffix: &str, le: Option<&str>| {
        let name = format!("{}{suffix}", s.family);
        let le = le.map(|v| ("le", v));
        Arc::new(WireSeries::new(&name, le.into_iter().chain(base.iter().copied())))
    };
    match &s.value {
        Value::Number(_) => vec![one("", None)],
        Value::Histogram { buckets, .. } => {
            let mut v: Vec<_> = buckets.iter().map(|(le, _)| one("_bucket", Some(&fmt_le(*le)))).collect();
            v.push(one("_bucket", Some("+Inf")));
            v.push(one("_sum", None));
            v.push(one("_count", None));
            v
        }
    }
}

/// How many wire series a value has.
fn wire_len(v: &Value) -> usize {
    match v {
        Value::Number(_) => 1,
        Value::Histogram { buckets, .. } => buckets.len() + 3,
    }
}

/// The samples of `value` on its `wire` series (as [`wire_series`] orders them).
fn push_values(wire: &[Arc<WireSeries>], value: &Value, now_ms: i64, out: &mut Vec<RwSample>) {
    match value {
        Value::Number(v) => out.push(RwSample { series: wire[0].clone(), timestamp_ms: now_ms, value: *v }),
        Value::Histogram { buckets, sum, count } => {
            let values = buckets.iter().map(|(_, n)| *n as f64).chain([*count as f64, *sum, *count as f64]);
            for (w, v) in wire.iter().zip(values) {
                out.push(RwSample { series: w.clone(), timestamp_ms: now_ms, value: v });
            }
        }
    }
}

fn stale(wire: &[Arc<WireSeries>], now_ms: i64, out: &mut Vec<RwSample>) {
    for w in wire {
        out.push(RwSample { series: w.clone(), timestamp_ms: now_ms, value: f64::from_bits(STALE_NAN_BITS) });
    }
}

/// An `le` bound as the exposition writes it.
pub fn fmt_le(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else {
        format!("{v}")
    }
}

impl Wire for RemoteWrite {
    type Item = RwSample;
    type Context = ();
    const CONTENT_TYPE: &'static str = "application/x-protobuf";
    const HEADERS: &'static [(&'static str, &'static str)] = &HEADERS;

    fn context(&self) {}
    fn sample(&mut self, snapshot: &FleetSnapshot, now_ms: i64, out: &mut Vec<RwSample>) {
        RemoteWrite::sample(self, snapshot, now_ms, out);
    }
    fn encode(_: &(), batch: &[RwSample]) -> Vec<u8> {
        encode_batch(batch)
    }
    fn retryable(status: u16) -> bool {
        status == 429 || status >= 500
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use telemon_fleet::{MetricKind, Protocol, TargetSnapshot, TargetState};

    fn series(family: &str, labels: &[(&str, &str)], value: Value) -> Series {
        Series {
            family: family.into(),
            help: "h",
            labels: LabelSet::new(labels.iter().copied()),
            kind: MetricKind::Gauge,
            value,
            rate: None,
        }
    }

    fn target(name: &str, up: bool, series: Vec<Series>) -> TargetSnapshot {
        let mut t = TargetSnapshot::new(name, Protocol::SYSINFO, vec![("room".into(), "b12".into())]);
        t.state = if up { TargetState::Up } else { TargetState::Down };
        t.series = series.into();
        t
    }

    fn names(out: &[RwSample]) -> Vec<String> {
        out.iter()
            .map(|s| {
                let l: Vec<String> =
                    s.series.labels.iter().map(|l| format!("{}={}", l.name, l.value)).collect();
                let v = if is_stale(s.value) { "stale".to_owned() } else { s.value.to_string() };
                format!("{} {v}", l.join(","))
            })
            .collect()
    }

    #[test]
    fn labels_sorted_name_first_histograms_expanded_and_vanished_series_marked_stale() {
        let mut rw = RemoteWrite::new(vec![("cluster".into(), "lab".into()), ("room".into(), "ext".into())]);
        let hist = Value::Histogram { buckets: vec![(0.5, 1), (1.0, 3)], sum: 2.5, count: 4 };
        let snap = FleetSnapshot::from(vec![target(
            "vm",
            true,
            vec![
                series("a_bytes", &[("zone", "z"), ("kind", "k")], Value::Number(7.0)),
                series("lat_seconds", &[], hist),
            ],
        )]);
        let mut out = Vec::new();
        rw.sample(&snap, 1000, &mut out);
        assert_eq!(
            names(&out),
            [
                "__name__=telemon_target_up,cluster=lab,protocol=sysinfo,room=b12,target=vm 1",
                "__name__=a_bytes,cluster=lab,kind=k,room=b12,target=vm,zone=z 7",
                "__name__=lat_seconds_bucket,cluster=lab,le=0.5,room=b12,target=vm 1",
                "__name__=lat_seconds_bucket,cluster=lab,le=1,room=b12,target=vm 3",
                "__name__=lat_seconds_bucket,cluster=lab,le=+Inf,room=b12,target=vm 4",
                "__name__=lat_seconds_sum,cluster=lab,room=b12,target=vm 2.5",
                "__name__=lat_seconds_count,cluster=lab,room=b12,target=vm 4",
            ]
        );
        // The same series again share their label sets (no new allocation per tick).
        let mut again = Vec::new();
        rw.sample(&snap, 2000, &mut again);
        assert!(Arc::ptr_eq(&out[1].series, &again[1].series));

        // The histogram vanishes: its five wire series go stale once.
        let snap2 = FleetSnapshot::from(vec![target(
            "vm",
            true,
            vec![series("a_bytes", &[("zone", "z"), ("kind", "k")], Value::Number(8.0))],
        )]);
        let mut out = Vec::new();
        rw.sample(&snap2, 3000, &mut out);
        assert_eq!(out.iter().filter(|s| is_stale(s.value)).count(), 5);
        let mut out = Vec::new();
        rw.sample(&snap2, 4000, &mut out);
        assert_eq!(out.iter().filter(|s| is_stale(s.value)).count(), 0);

        // The target goes down: its series stale, up = 0; then it leaves: up stale too.
        let down = FleetSnapshot::from(vec![target(
            "vm",
            false,
            vec![series("a_bytes", &[("zone", "z"), ("kind", "k")], Value::Number(8.0))],
        )]);
        let mut out = Vec::new();
        rw.sample(&down, 5000, &mut out);
        let n = names(&out);
        assert!(n[0].ends_with("target=vm 0"), "{n:?}");
        assert!(n[1].starts_with("__name__=a_bytes") && n[1].ends_with("stale"), "{n:?}");
        let mut out = Vec::new();
        rw.sample(&FleetSnapshot::default(), 6000, &mut out);
        assert_eq!(
            names(&out),
            ["__name__=telemon_target_up,cluster=lab,protocol=sysinfo,room=b12,target=vm stale"]
        );
        assert_eq!(out[0].value.to_bits(), STALE_NAN_BITS);
    }

    /// The remote write 1.0 MUSTs the compliance suite checks on every sample (SortedLabels,
    /// EmptyLabels, RepeatedLabels, NameLabel), with names that start with an upper-case letter
    /// (which sort before `__name__` in byte order) and empty values from the series, the target and
    /// the sender.
    #[test]
    fn labels_are_in_byte_order_with_name_among_them_never_empty_never_repeated() {
        let mut rw = RemoteWrite::new(vec![("Region".into(), "eu".into()), ("empty".into(), String::new())]);
        let mut t = TargetSnapshot::new(
            "vm",
            Protocol::SMON,
            vec![("Zone".into(), "a".into()), ("_x".into(), String::new()), ("job".into(), "j".into())],
        );
        t.state = TargetState::Up;
        let hist = Value::Histogram { buckets: vec![(0.5, 1)], sum: 0.5, count: 1 };
        t.series = vec![
            series("smon_value", &[("name", "up"), ("index", ""), ("A", "1")], Value::Number(1.0)),
            series("lat_seconds", &[("B", "2")], hist),
        ]
        .into();
        let mut out = Vec::new();
        rw.sample(&FleetSnapshot::from(vec![t]), 1000, &mut out);
        assert_eq!(out.len(), 1 + 1 + 4);
        for s in &out {
            let names: Vec<&str> = s.series.labels.iter().map(|l| l.name.as_str()).collect();
            assert!(
                names.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
                "sorted, none repeated: {names:?}"
            );
            assert!(names.contains(&"__name__"), "{names:?}");
            assert!(s.series.labels.iter().all(|l| !l.value.is_empty()), "{:?}", s.series.labels);
        }
        // By family: the histogram's four, then smon_value.
        assert_eq!(
            names(&out[..2]),
            [
                "Region=eu,Zone=a,__name__=telemon_target_up,job=j,protocol=smon,target=vm 1",
                "B=2,Region=eu,Zone=a,__name__=lat_seconds_bucket,job=j,le=0.5,target=vm 1",
            ]
        );
        assert_eq!(names(&out[5..]), ["A=1,Region=eu,Zone=a,__name__=smon_value,job=j,name=up,target=vm 1"]);
        // What a receiver decodes is the same.
        let req = decode_request(&encode_batch(&out)).unwrap();
        for ts in &req.timeseries {
            assert!(
                ts.labels.windows(2).all(|w| w[0].name.as_bytes() < w[1].name.as_bytes()),
                "{:?}",
                ts.labels
            );
            assert!(ts.labels.iter().all(|l| !l.value.is_empty()), "{:?}", ts.labels);
        }
        // A wire series made from labels with an empty value or a repeated name directly.
        let w = WireSeries::new("m", [("b", ""), ("a", "1"), ("a", "2"), ("__name__", "other"), ("C", "3")]);
        let got: Vec<(&str, &str)> = w.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
        assert_eq!(got, [("C", "3"), ("__name__", "m"), ("a", "1")]);
    }

    #[test]
    fn a_request_groups_samples_per_series_in_order_and_round_trips() {
        let a = Arc::new(WireSeries::new("a", [("target", "x")]));
        let b = Arc::new(WireSeries::new("b", [("target", "x")]));
        let batch = vec![
            RwSample { series: a.clone(), timestamp_ms: 1, value: 1.0 },
            RwSample { series: b.clone(), timestamp_ms: 1, value: 2.0 },
            RwSample { series: a.clone(), timestamp_ms: 2, value: 3.0 },
            RwSample { series: a, timestamp_ms: 3, value: f64::from_bits(STALE_NAN_BITS) },
        ];
        let req = write_request(&batch);
        assert_eq!(req.timeseries.len(), 2);
        let ts: Vec<i64> = req.timeseries[0].samples.iter().map(|s| s.timestamp).collect();
        assert_eq!(ts, [1, 2, 3]);
        let back = decode_request(&RemoteWrite::encode(&(), &batch)).unwrap();
        assert_eq!(back.timeseries[0].labels, req.timeseries[0].labels);
        assert!(is_stale(back.timeseries[0].samples[2].value), "the marker's bits survive");
        assert!(decode_request(b"\xff\xff\xff\xff\x0fjunk").is_err());
    }

    #[test]
    fn a_header_announcing_a_huge_request_is_refused_before_allocating() {
        // A snappy header is the decompressed length as a varint: announce MAX_DECODED + 1 and
        // 2^32 - 1 bytes, followed by nothing (or a few bytes of junk).
        let header = |len: u64| {
            let mut b = Vec::new();
            prost::encoding::encode_varint(len, &mut b);
            b
        };
        for len in [MAX_DECODED as u64 + 1, u32::MAX as u64] {
            let mut body = header(len);
            assert_eq!(
                decode_request(&body),
                Err(DecodeError::TooLarge { len: len as usize, max: MAX_DECODED })
            );
            body.extend_from_slice(b"\x00junk");
            assert!(matches!(decode_request(&body), Err(DecodeError::TooLarge { .. })));
        }
        // Under the cap but more than the body could expand to: refused too, without the 32 MiB
        // buffer (this is what a fuzzer would otherwise allocate for every short input).
        let body = [header(MAX_DECODED as u64), b"\x00junk".to_vec()].concat();
        let err = decode_request(&body).unwrap_err();
        assert!(matches!(&err, DecodeError::Snappy(m) if m.contains("announced")), "{err}");
        // The largest request snappy can expand a body to still decodes: 22 x its size.
        let raw = prost::Message::encode_to_vec(&WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label { name: "a".repeat(100_000), value: String::new() }],
                samples: Vec::new(),
            }],
            metadata: Vec::new(),
        });
        let body = encode_request(&prost::Message::decode(raw.as_slice()).unwrap());
        assert!(
            raw.len() > 15 * body.len(),
            "a highly compressible request: {} -> {}",
            raw.len(),
            body.len()
        );
        assert_eq!(decode_request(&body).unwrap().timeseries[0].labels[0].name.len(), 100_000);
    }

    proptest::proptest! {
        #[test]
        fn requests_round_trip(
            series in proptest::collection::vec(("[a-z_]{1,8}", "[ -~]{0,12}"), 1..5),
            points in proptest::collection::vec((0usize..5, proptest::num::f64::ANY), 0..40),
        ) {
            let wires: Vec<Arc<WireSeries>> =
                series.iter().map(|(n, v)| Arc::new(WireSeries::new(n, [("target", v.as_str())]))).collect();
            let batch: Vec<RwSample> = points
                .iter()
                .enumerate()
                .map(|(i, (s, v))| RwSample { series: wires[s % wires.len()].clone(), timestamp_ms: i as i64, value: *v })
                .collect();
            let back = decode_request(&RemoteWrite::encode(&(), &batch)).unwrap();
            let want = write_request(&batch);
            let reference = decode_request(&encode_request(&want)).unwrap();
            proptest::prop_assert_eq!(reference.timeseries.len(), want.timeseries.len());
            proptest::prop_assert_eq!(back.timeseries.len(), want.timeseries.len());
            for (b, w) in back.timeseries.iter().zip(&want.timeseries) {
                proptest::prop_assert_eq!(&b.labels, &w.labels);
                // proto3 leaves out a 0.0, so -0.0 arrives as 0.0; every other value (NaN
                // payloads too, like the stale marker's) keeps its bits.
                let norm = |v: f64| if v == 0.0 { 0 } else { v.to_bits() };
                let bits = |ts: &TimeSeries| ts.samples.iter().map(|s| (s.timestamp, norm(s.value))).collect::<Vec<_>>();
                proptest::prop_assert_eq!(bits(b), bits(w));
            }
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512), cut in 0usize..512) {
            let _ = decode_request(&bytes);
            let _ = decode_request(&bytes[..cut.min(bytes.len())]);
            let _ = crate::otlp::rejected_points(&bytes);
        }
    }
}
