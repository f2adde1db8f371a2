//! OTLP/HTTP protobuf (`POST {endpoint}/v1/metrics`), with the messages of `opentelemetry-proto`.
//!
//! Counters become cumulative monotonic Sums whose start time is when telemon first saw the
//! series, reset when the target reconnects or the value goes down (the peer restarted its
//! counters); gauges and info series become Gauges; rvOS histograms become explicit-bucket
//! Histograms with the `le` bounds. The Resource carries `service.name = "telemon"`,
//! `service.instance.id` and the external labels; the target and its labels are data point
//! attributes. Units come from the family names (metrics.md's base units).
//!
//! A label with an empty value is no attribute, as it is no label on `/metrics` and in remote write
//! (the store leaves the series' ones out; the target's and the sender's are left out here). OTLP
//! attributes are a map: each key is sent once, and their order carries no meaning (a point's are
//! `target`, the series' labels, then the target's, always in that order).
//!
//! A series that vanishes (or whose target goes down or away) gets one last point without a value,
//! flagged `DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK`: OTLP's stale marker, as remote write sends
//! Prometheus's.

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, DataPointFlags, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::memory_queue::Queued;
use crate::sender::Wire;
use crate::view::{self, UP_FAMILY};
use telemon_fleet::{FleetSnapshot, LabelSet, MetricKind, Value};

/// `service.name` of the Resource.
pub const SERVICE_NAME: &str = "telemon";

/// One OTLP series: its family and attributes, shared by its points.
#[derive(Debug)]
pub struct OtlpSeries {
    /// Metric name (the Prometheus family name).
    pub family: Arc<str>,
    /// HELP text (the metric's description).
    pub help: &'static str,
    /// Counter, gauge, info or histogram.
    pub kind: MetricKind,
    /// The unit (`By`, `s`, `1`, `{count}`).
    pub unit: &'static str,
    /// `target`, the series' own labels, then the target's; each key once, no value empty.
    pub attributes: Vec<KeyValue>,
    bytes: usize,
}

/// A data point's value.
#[derive(Debug, Clone)]
pub enum PointValue {
    /// Sum or gauge.
    Number(f64),
    /// Explicit-bucket histogram: bounds, per-bucket (not cumulative) counts (one more than the
    /// bounds), sum and count.
    Histogram {
        /// Upper bounds, ascending.
        bounds: Vec<f64>,
        /// Count per bucket; the last is above the last bound.
        counts: Vec<u64>,
        /// Sum of the observations.
        sum: f64,
        /// Number of observations.
        count: u64,
    },
    /// No value: the series ended (it vanished, or its target went down or away). Sent once, as a
    /// point flagged [`NO_RECORDED_VALUE`] of the series' kind.
    Stale,
}

/// `DataPointFlags::NoRecordedValueMask`: the flag of a [`PointValue::Stale`] point.
pub const NO_RECORDED_VALUE: u32 = DataPointFlags::NoRecordedValueMask as u32;

/// One queued data point.
#[derive(Debug, Clone)]
pub struct OtlpPoint {
    /// Its series.
    pub series: Arc<OtlpSeries>,
    /// Start of the cumulative window (counters and histograms), Unix ns.
    pub start_ns: u64,
    /// When it was sampled, Unix ns.
    pub time_ns: u64,
    /// The value.
    pub value: PointValue,
}

impl Queued for OtlpPoint {
    fn weight(&self) -> usize {
        let v = match &self.value {
            PointValue::Number(_) => 8,
            PointValue::Stale => 0,
            PointValue::Histogram { bounds, counts, .. } => 16 + 8 * (bounds.len() + counts.len()),
        };
        self.series.bytes + 32 + v
    }
    fn timestamp_ms(&self) -> i64 {
        (self.time_ns / 1_000_000) as i64
    }
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.to_owned())) }),
    }
}

type SeriesKey = (Arc<str>, Arc<str>, LabelSet);

#[derive(Debug)]
struct Seen {
    series: Arc<OtlpSeries>,
    start_ns: u64,
    last: f64,
    connects: u64,
    tick: u64,
}

/// The OTLP sampler: keeps each series' start time.
#[derive(Debug)]
pub struct Otlp {
    resource: Vec<KeyValue>,
    up_family: Arc<str>,
    seen: HashMap<SeriesKey, Seen>,
    tick: u64,
}

impl Otlp {
    /// A sampler whose Resource has `service.instance.id = instance` and `external` attributes.
    pub fn new(instance: &str, external: &[(String, String)]) -> Self {
        let mut resource = vec![
            kv("service.name", SERVICE_NAME),
            kv("service.instance.id", instance),
            kv("service.version", env!("CARGO_PKG_VERSION")),
        ];
        resource.extend(external.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| kv(k, v)));
        Otlp { resource, up_family: Arc::from(UP_FAMILY), seen: HashMap::new(), tick: 0 }
    }

    /// The points of `snapshot` at `now_ms`, then a [`PointValue::Stale`] point for each series
    /// that vanished since the last call.
    pub fn sample(&mut self, snapshot: &FleetSnapshot, now_ms: i64, out: &mut Vec<OtlpPoint>) {
        self.tick += 1;
        let tick = self.tick;
        let now_ns = (now_ms.max(0) as u64) * 1_000_000;
        let up_labels = LabelSet::default();
        for t in view::targets(snapshot) {
            let target_labels = t.labels;
            let name = &t.name;
            let attrs = |extra: &mut dyn Iterator<Item = (&str, &str)>| -> Vec<KeyValue> {
                let mut a = vec![kv("target", name)];
                let mut add = |k: &str, v: &str| {
                    if !v.is_empty() && !a.iter().any(|x| x.key == k) {
                        a.push(kv(k, v));
                    }
                };
                for (k, v) in extra {
                    add(k, v);
                }
                for (k, v) in target_labels {
                    add(k, v);
                }
                a
            };
            // telemon_target_up, with the protocol.
            let key: SeriesKey = (t.name.clone(), self.up_family.clone(), up_labels.clone());
            let e = self.seen.entry(key).or_insert_with(|| {
                let attributes = attrs(&mut std::iter::once(("protocol", t.protocol.as_str())));
                Seen {
                    series: series(Arc::from(UP_FAMILY), UP_HELP, MetricKind::Gauge, attributes),
                    start_ns: now_ns,
                    last: 0.0,
                    connects: t.connects,
                    tick,
                }
            });
            e.tick = tick;
            let v = if t.up { 1.0 } else { 0.0 };
            out.push(OtlpPoint {
                series: e.series.clone(),
                start_ns: e.start_ns,
                time_ns: now_ns,
                value: PointValue::Number(v),
            });

            for s in t.series.iter() {
                let key: SeriesKey = (t.name.clone(), s.family.clone(), s.labels.clone());
                let e = match self.seen.get_mut(&key) {
                    Some(e) => e,
                    None => {
                        let labels: Vec<_> = s.labels.iter().collect();
                        let attributes = attrs(&mut labels.iter().map(|(k, v)| (*k, &**v)));
                        let seen = Seen {
                            series: series(s.family.clone(), s.help, s.kind, attributes),
                            start_ns: now_ns,
                            last: 0.0,
                            connects: t.connects,
                            tick,
                        };
                        // The map outlives this snapshot: its key owns only its own label text.
                        self.seen.insert((key.0.clone(), key.1.clone(), key.2.detached()), seen);
                        self.seen.get_mut(&key).expect("inserted above")
                    }
                };
                let (value, level) = match &s.value {
                    Value::Number(n) => (PointValue::Number(*n), *n),
                    Value::Histogram { buckets, sum, count } => {
                        (histogram(buckets, *sum, *count), *count as f64)
                    }
                };
                // A reconnect or a value going down is a counter reset: a new cumulative window.
                let cumulative = matches!(s.kind, MetricKind::Counter | MetricKind::Histogram);
                if cumulative && (e.connects != t.connects || level < e.last) {
                    e.start_ns = now_ns.saturating_sub(1).max(e.start_ns);
                }
                e.connects = t.connects;
                e.last = level;
                e.tick = tick;
                out.push(OtlpPoint {
                    series: e.series.clone(),
                    start_ns: e.start_ns,
                    time_ns: now_ns,
                    value,
                });
            }
        }
        // Vanished series (a target down has none; a target gone, not even its up series): one
        // last point, without a value.
        self.seen.retain(|_, e| {
            let keep = e.tick == tick;
            if !keep {
                out.push(OtlpPoint {
                    series: e.series.clone(),
                    start_ns: e.start_ns,
                    time_ns: now_ns,
                    value: PointValue::Stale,
                });
            }
            keep
        });
    }

    /// The export request of `batch`: one Resource, one scope, a Metric per family.
    pub fn request(resource: &[KeyValue], batch: &[OtlpPoint]) -> ExportMetricsServiceRequest {
        let mut metrics: Vec<Metric> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for p in batch {
            let s = &p.series;
            let i = *index.entry(&s.family).or_insert_with(|| {
                let data = match s.kind {
                    MetricKind::Counter => metric::Data::Sum(Sum {
                        data_points: Vec::new(),
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    }),
                    MetricKind::Gauge | MetricKind::Info => {
                        metric::Data::Gauge(Gauge { data_points: Vec::new() })
                    }
                    MetricKind::Histogram => metric::Data::Histogram(Histogram {
                        data_points: Vec::new(),
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    }),
                };
                metrics.push(Metric {
                    name: s.family.to_string(),
                    description: s.help.to_owned(),
                    unit: s.unit.to_owned(),
                    metadata: Vec::new(),
                    data: Some(data),
                });
                metrics.len() - 1
            });
            let start = if matches!(s.kind, MetricKind::Gauge | MetricKind::Info) { 0 } else { p.start_ns };
            match (&mut metrics[i].data, &p.value) {
                (
                    Some(
                        metric::Data::Sum(Sum { data_points, .. })
                        | metric::Data::Gauge(Gauge { data_points }),
                    ),
                    value @ (PointValue::Number(_) | PointValue::Stale),
                ) => {
                    let (flags, value) = match value {
                        PointValue::Number(v) => (0, Some(number_data_point::Value::AsDouble(*v))),
                        _ => (NO_RECORDED_VALUE, None),
                    };
                    data_points.push(NumberDataPoint {
                        attributes: s.attributes.clone(),
                        start_time_unix_nano: start,
                        time_unix_nano: p.time_ns,
                        exemplars: Vec::new(),
                        flags,
                        value,
                    });
                }
                (Some(metric::Data::Histogram(h)), PointValue::Histogram { bounds, counts, sum, count }) => {
                    h.data_points.push(HistogramDataPoint {
                        attributes: s.attributes.clone(),
                        start_time_unix_nano: start,
                        time_unix_nano: p.time_ns,
                        count: *count,
                        sum: Some(*sum),
                        bucket_counts: counts.clone(),
                        explicit_bounds: bounds.clone(),
                        exemplars: Vec::new(),
                        flags: 0,
                        min: None,
                        max: None,
                    });
                }
                (Some(metric::Data::Histogram(h)), PointValue::Stale) => {
                    h.data_points.push(HistogramDataPoint {
                        attributes: s.attributes.clone(),
                        start_time_unix_nano: start,
                        time_unix_nano: p.time_ns,
                        count: 0,
                        sum: None,
                        bucket_counts: Vec::new(),
                        explicit_bounds: Vec::new(),
                        exemplars: Vec::new(),
                        flags: NO_RECORDED_VALUE,
                        min: None,
                        max: None,
                    });
                }
                // A family whose kind disagrees with one of its points (cannot happen with the
                // store's families): the point is left out rather than sent mistyped.
                _ => {}
            }
        }
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: resource.to_vec(),
                    dropped_attributes_count: 0,
                    entity_refs: Vec::new(),
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SERVICE_NAME.into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        attributes: Vec::new(),
                        dropped_attributes_count: 0,
                    }),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }
}

const UP_HELP: &str = "1 while the target is connected and receiving, else 0.";

fn series(
    family: Arc<str>,
    help: &'static str,
    kind: MetricKind,
    attributes: Vec<KeyValue>,
) -> Arc<OtlpSeries> {
    let bytes = family.len()
        + attributes
            .iter()
            .map(|a| {
                let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => s.len(),
                    _ => 8,
                };
                a.key.len() + v + 8
            })
            .sum::<usize>();
    let unit = view::unit(&family, kind);
    Arc::new(OtlpSeries { family, help, kind, unit, attributes, bytes })
}

/// Cumulative `(le, count)` buckets to OTLP's bounds and per-bucket counts.
pub fn histogram(buckets: &[(f64, u64)], sum: f64, count: u64) -> PointValue {
    let bounds: Vec<f64> = buckets.iter().map(|(le, _)| *le).filter(|le| le.is_finite()).collect();
    let mut counts = Vec::with_capacity(bounds.len() + 1);
    let mut below = 0u64;
    for (le, cum) in buckets {
        if le.is_finite() {
            counts.push(cum.saturating_sub(below));
            below = below.max(*cum);
        }
    }
    counts.push(count.saturating_sub(below));
    PointValue::Histogram { bounds, counts, sum, count }
}

/// The OTLP sender's sampler and encoder.
#[derive(Debug)]
pub struct OtlpWire {
    sampler: Otlp,
}

impl OtlpWire {
    /// See [`Otlp::new`].
    pub fn new(instance: &str, external: &[(String, String)]) -> Self {
        OtlpWire { sampler: Otlp::new(instance, external) }
    }
}

impl Wire for OtlpWire {
    type Item = OtlpPoint;
    type Context = Vec<KeyValue>;
    const CONTENT_TYPE: &'static str = "application/x-protobuf";
    const HEADERS: &'static [(&'static str, &'static str)] = &[];

    fn context(&self) -> Vec<KeyValue> {
        self.sampler.resource.clone()
    }
    fn sample(&mut self, snapshot: &FleetSnapshot, now_ms: i64, out: &mut Vec<OtlpPoint>) {
        self.sampler.sample(snapshot, now_ms, out);
    }
    fn encode(resource: &Vec<KeyValue>, batch: &[OtlpPoint]) -> Vec<u8> {
        prost::Message::encode_to_vec(&Otlp::request(resource, batch))
    }
    fn retryable(status: u16) -> bool {
        matches!(status, 429 | 502 | 503 | 504)
    }
    fn rejected(body: &[u8]) -> u64 {
        rejected_points(body)
    }
}

/// `partial_success.rejected_data_points` of a reply body (0 when absent or undecodable).
pub fn rejected_points(body: &[u8]) -> u64 {
    <ExportMetricsServiceResponse as prost::Message>::decode(body)
        .ok()
        .and_then(|r| r.partial_success)
        .map_or(0, |p| p.rejected_data_points.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;
    use telemon_fleet::{Protocol, Series, TargetSnapshot, TargetState};

    fn snapshot(connects: u64, kinsns: f64) -> FleetSnapshot {
        let mut t = TargetSnapshot::new("vm", Protocol::SYSINFO, vec![("room".into(), "b12".into())]);
        t.state = TargetState::Up;
        t.connects = connects;
        let s = |family: &str, kind, value| Series {
            family: family.into(),
            help: "h",
            labels: LabelSet::new([("cpu", "0")]),
            kind,
            value,
            rate: None,
        };
        t.series = vec![
            s("a_total", MetricKind::Counter, Value::Number(kinsns)),
            s("b_bytes", MetricKind::Gauge, Value::Number(5.0)),
            s(
                "lat_seconds",
                MetricKind::Histogram,
                Value::Histogram { buckets: vec![(0.5, 1), (1.0, 3)], sum: 2.5, count: 4 },
            ),
        ]
        .into();
        FleetSnapshot::from(vec![t])
    }

    #[test]
    fn kinds_units_attributes_and_start_times() {
        let mut o = Otlp::new("host:9464", &[("site".into(), "lab".into())]);
        let mut out = Vec::new();
        o.sample(&snapshot(1, 10.0), 1_000, &mut out);
        o.sample(&snapshot(1, 20.0), 2_000, &mut out);
        let req = Otlp::request(&o.resource, &out);
        let rm = &req.resource_metrics[0];
        let res: Vec<(&str, &str)> = rm
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| match &kv.value.as_ref().unwrap().value {
                Some(any_value::Value::StringValue(v)) => (kv.key.as_str(), v.as_str()),
                _ => (kv.key.as_str(), ""),
            })
            .collect();
        assert!(
            res.contains(&("service.name", "telemon")) && res.contains(&("service.instance.id", "host:9464"))
        );
        assert!(res.contains(&("site", "lab")));
        let metrics = &rm.scope_metrics[0].metrics;
        let by_name = |n: &str| metrics.iter().find(|m| m.name == n).unwrap();
        let Some(metric::Data::Sum(sum)) = &by_name("a_total").data else { panic!("a sum") };
        assert!(sum.is_monotonic && sum.aggregation_temporality == AggregationTemporality::Cumulative as i32);
        assert_eq!(sum.data_points.len(), 2);
        assert_eq!(sum.data_points[0].start_time_unix_nano, 1_000_000_000);
        assert_eq!(sum.data_points[1].start_time_unix_nano, 1_000_000_000, "the same window");
        assert_eq!(by_name("a_total").unit, "{count}");
        let keys: Vec<&str> = sum.data_points[0].attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, ["target", "cpu", "room"]);
        let Some(metric::Data::Gauge(g)) = &by_name("b_bytes").data else { panic!("a gauge") };
        assert_eq!((g.data_points[0].start_time_unix_nano, by_name("b_bytes").unit.as_str()), (0, "By"));
        let Some(metric::Data::Histogram(h)) = &by_name("lat_seconds").data else { panic!("a histogram") };
        let p = &h.data_points[0];
        assert_eq!(
            (p.explicit_bounds.as_slice(), p.bucket_counts.as_slice()),
            (&[0.5, 1.0][..], &[1, 2, 1][..])
        );
        assert_eq!((p.count, p.sum), (4, Some(2.5)));
        let Some(metric::Data::Gauge(up)) = &by_name(UP_FAMILY).data else { panic!("up is a gauge") };
        assert_eq!(up.data_points.len(), 2);

        // The value goes down: a reset, a new window; a reconnect too.
        let mut out = Vec::new();
        o.sample(&snapshot(1, 3.0), 3_000, &mut out);
        let start = |out: &[OtlpPoint]| out.iter().find(|p| &*p.series.family == "a_total").unwrap().start_ns;
        assert_eq!(start(&out), 2_999_999_999);
        out.clear();
        o.sample(&snapshot(2, 4.0), 4_000, &mut out);
        assert_eq!(start(&out), 3_999_999_999);
    }

    /// Every point of `req` as (metric, target attribute, flags, has a value).
    fn points(req: &ExportMetricsServiceRequest) -> Vec<(String, String, u32, bool)> {
        let target = |a: &[KeyValue]| match &a[0].value.as_ref().unwrap().value {
            Some(any_value::Value::StringValue(v)) => v.clone(),
            _ => String::new(),
        };
        let mut out = Vec::new();
        for m in &req.resource_metrics[0].scope_metrics[0].metrics {
            match m.data.as_ref().unwrap() {
                metric::Data::Sum(Sum { data_points, .. }) | metric::Data::Gauge(Gauge { data_points }) => {
                    for p in data_points {
                        out.push((m.name.clone(), target(&p.attributes), p.flags, p.value.is_some()));
                    }
                }
                metric::Data::Histogram(h) => {
                    for p in &h.data_points {
                        let has = p.sum.is_some() || !p.bucket_counts.is_empty();
                        out.push((m.name.clone(), target(&p.attributes), p.flags, has));
                    }
                }
                _ => {}
            }
        }
        out.sort();
        out
    }

    #[test]
    fn vanished_series_and_targets_down_or_gone_get_one_point_flagged_no_recorded_value() {
        let mut o = Otlp::new("host:9464", &[]);
        let mut out = Vec::new();
        o.sample(&snapshot(1, 10.0), 1_000, &mut out);
        assert!(out.iter().all(|p| !matches!(p.value, PointValue::Stale)));
        let flagged = |out: &[OtlpPoint]| {
            let req = Otlp::request(&[], out);
            let all = points(&req);
            // A flagged point has no value, an unflagged one has one.
            assert!(all.iter().all(|(_, _, flags, has)| (*flags == NO_RECORDED_VALUE) != *has), "{all:?}");
            all.into_iter().filter(|p| p.2 == NO_RECORDED_VALUE).map(|p| p.0).collect::<Vec<_>>()
        };

        // The histogram and the gauge vanish: one flagged point each, kept in their kinds.
        let mut snap = snapshot(1, 11.0);
        Arc::make_mut(&mut snap.targets[0]).series = snap.targets[0].series.to_vec()[..1].to_vec().into();
        out.clear();
        o.sample(&snap, 2_000, &mut out);
        assert_eq!(flagged(&out), ["b_bytes", "lat_seconds"]);
        let stale_hist = out.iter().find(|p| &*p.series.family == "lat_seconds").unwrap();
        assert_eq!((stale_hist.start_ns, stale_hist.time_ns), (1_000_000_000, 2_000_000_000), "its window");
        let req = Otlp::request(&[], &out);
        let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
        let Some(metric::Data::Histogram(h)) =
            &metrics.iter().find(|m| m.name == "lat_seconds").unwrap().data
        else {
            panic!("the stale point of a histogram is a histogram point")
        };
        assert_eq!(h.data_points[0].flags, DataPointFlags::NoRecordedValueMask as u32);
        // Once only.
        out.clear();
        o.sample(&snap, 3_000, &mut out);
        assert!(flagged(&out).is_empty());

        // The target goes down: its counter ends, up is 0; then it goes away: up ends too.
        Arc::make_mut(&mut snap.targets[0]).state = TargetState::Down;
        out.clear();
        o.sample(&snap, 4_000, &mut out);
        assert_eq!(flagged(&out), ["a_total"]);
        let up = out.iter().find(|p| &*p.series.family == UP_FAMILY).unwrap();
        assert!(matches!(up.value, PointValue::Number(v) if v == 0.0));
        out.clear();
        o.sample(&FleetSnapshot::default(), 5_000, &mut out);
        assert_eq!(flagged(&out), [UP_FAMILY]);
        out.clear();
        o.sample(&FleetSnapshot::default(), 6_000, &mut out);
        assert!(out.is_empty());
    }

    /// An empty label value is no attribute, whether it is the series', the target's or the
    /// sender's; each key is sent once.
    #[test]
    fn empty_values_are_no_attributes_and_keys_are_unique() {
        let mut o = Otlp::new("host:9464", &[("site".into(), "lab".into()), ("empty".into(), String::new())]);
        let mut t = TargetSnapshot::new(
            "vm",
            Protocol::SMON,
            vec![("Zone".into(), "a".into()), ("_x".into(), String::new()), ("name".into(), "cfg".into())],
        );
        t.state = TargetState::Up;
        t.series = vec![Series {
            family: "smon_value".into(),
            help: "h",
            labels: LabelSet::new([("name", "up"), ("index", "")]),
            kind: MetricKind::Gauge,
            value: Value::Number(1.0),
            rate: None,
        }]
        .into();
        let mut out = Vec::new();
        o.sample(&FleetSnapshot::from(vec![t]), 1_000, &mut out);
        let req = Otlp::request(&o.resource, &out);
        let rm = &req.resource_metrics[0];
        let text = |a: &[KeyValue]| -> Vec<(String, String)> {
            a.iter()
                .map(|kv| match &kv.value.as_ref().unwrap().value {
                    Some(any_value::Value::StringValue(v)) => (kv.key.clone(), v.clone()),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let resource = text(&rm.resource.as_ref().unwrap().attributes);
        assert!(resource.iter().all(|(k, v)| !v.is_empty() && k != "empty"), "{resource:?}");
        let metrics = &rm.scope_metrics[0].metrics;
        let value = metrics.iter().find(|m| m.name == "smon_value").unwrap();
        let Some(metric::Data::Gauge(g)) = &value.data else { panic!("a gauge") };
        let attrs = text(&g.data_points[0].attributes);
        let want = [("target", "vm"), ("name", "up"), ("Zone", "a")];
        assert_eq!(attrs, want.map(|(k, v)| (k.to_owned(), v.to_owned())), "the series' name wins");
        let Some(metric::Data::Gauge(up)) = &metrics.iter().find(|m| m.name == UP_FAMILY).unwrap().data
        else {
            panic!("a gauge")
        };
        let attrs = text(&up.data_points[0].attributes);
        assert!(attrs.iter().all(|(_, v)| !v.is_empty()), "{attrs:?}");
    }

    #[test]
    fn partial_success_counts_rejected_points() {
        let reply = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: 7,
                error_message: "no".into(),
            }),
        };
        assert_eq!(rejected_points(&prost::Message::encode_to_vec(&reply)), 7);
        assert_eq!(rejected_points(&[]), 0);
        assert_eq!(rejected_points(b"\xff\xff"), 0);
        assert!(OtlpWire::retryable(503) && OtlpWire::retryable(429) && !OtlpWire::retryable(500));
    }
}
