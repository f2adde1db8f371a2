//! The push senders' per-tick work over a fleet of 1,000 meter161-like targets (11 counters each):
//! sampling the store into queued samples, and encoding requests of 2,000 samples.
//!
//! `cargo bench -p telemon --bench push -- --warm-up-time 1 --measurement-time 3`
//!
//! * `remote_write_sample`: one tick of the remote write sampler (labels built once, then shared);
//! * `remote_write_encode`: a 2,000-sample request, `direct` (pre-encoded labels written straight
//!   into the body) against `prost` (the reference: prost messages built, then encoded), snappy
//!   included in both;
//! * `otlp_sample_encode`: one OTLP tick and a 2,000-point request;
//! * `remote_write_decode`: `decode_request` of a body of 1,000 series x 1 sample (a receiver's
//!   work, and what the fuzz target and tests run), snappy included;
//! * `otlp_reply_decode`: `rejected_points` of an OTLP reply with a `partial_success`, and of an
//!   empty reply (the usual answer).
//!
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use std::sync::{Arc, LazyLock};

use bench_harness::{count_mode, run_criterion, Case, Group};
use criterion::{BatchSize, Throughput};
use telemon_fleet::{
    FleetSnapshot, LabelSet, MetricKind, Protocol, Series, TargetSnapshot, TargetState, Value,
};
use telemon_push::otlp::{rejected_points, Otlp, OtlpPoint};
use telemon_push::remote_write::{
    decode_request, encode_batch, encode_request, write_request, RemoteWrite, RwSample,
};

const TARGETS: usize = 1_000;
const FIELDS: [&str; 11] = [
    "sys161_simulated_seconds_total",
    "sys161_kernel_instructions_total",
    "sys161_user_instructions_total",
    "sys161_user_stall_cycles_total",
    "sys161_idle_cycles_total",
    "sys161_interrupts_total",
    "sys161_exceptions_total",
    "sys161_disk_blocks_total",
    "sys161_console_chars_total",
    "sys161_emufs_operations_total",
    "sys161_network_packets_total",
];
const BATCH: usize = 2_000;

fn fleet(tick: u64) -> FleetSnapshot {
    let families: Vec<Arc<str>> = FIELDS.iter().map(|f| Arc::from(*f)).collect();
    let no_labels = LabelSet::default();
    let targets = (0..TARGETS)
        .map(|i| {
            let mut t = TargetSnapshot::new(
                format!("class/home/student{i:04}/os161/root"),
                Protocol::METER161,
                vec![("course".into(), "cs161".into())],
            );
            t.state = TargetState::Up;
            t.connects = 1;
            t.series = families
                .iter()
                .enumerate()
                .map(|(k, f)| Series {
                    family: f.clone(),
                    help: "help",
                    labels: no_labels.clone(),
                    kind: MetricKind::Counter,
                    value: Value::Number((tick * 1_000_003 + (i * 11 + k) as u64) as f64),
                    rate: None,
                })
                .collect::<Vec<_>>()
                .into();
            t
        })
        .collect::<Vec<_>>();
    FleetSnapshot::from(targets)
}

static SNAPSHOT: LazyLock<FleetSnapshot> = LazyLock::new(|| fleet(2));

/// A warmed-up sampler (its series known) and the samples of one more tick.
fn warm_remote_write() -> (RemoteWrite, Vec<RwSample>) {
    let mut rw = RemoteWrite::new(vec![("cluster".into(), "lab".into())]);
    let mut out = Vec::new();
    rw.sample(&fleet(1), 1_700_000_000_000, &mut out);
    out.clear();
    rw.sample(&SNAPSHOT, 1_700_000_001_000, &mut out);
    (rw, out)
}

static SAMPLES: LazyLock<Vec<RwSample>> = LazyLock::new(|| warm_remote_write().1[..BATCH].to_vec());

fn warm_otlp() -> (Otlp, Vec<OtlpPoint>) {
    let mut o = Otlp::new("bench:9464", &[]);
    let mut out = Vec::new();
    o.sample(&fleet(1), 1_700_000_000_000, &mut out);
    out.clear();
    o.sample(&SNAPSHOT, 1_700_000_001_000, &mut out);
    (o, out)
}

static POINTS: LazyLock<Vec<OtlpPoint>> = LazyLock::new(|| warm_otlp().1[..BATCH].to_vec());

const DECODE_SERIES: usize = 1_000;

/// A remote write body of 1,000 distinct series (the up series and counters of 84 targets), one
/// sample each.
static BODY: LazyLock<Vec<u8>> = LazyLock::new(|| encode_batch(&SAMPLES[..DECODE_SERIES]));

/// An OTLP reply rejecting some points.
static REPLY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
    };
    prost::Message::encode_to_vec(&ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: 12,
            error_message: "12 data points had no value and were dropped".into(),
        }),
    })
});

fn groups() -> Vec<Group> {
    let per_tick = (TARGETS * (FIELDS.len() + 1)) as u64;
    vec![
        Group::new("remote_write_sample", Throughput::Elements(per_tick), 3).sample_size(20).case(
            Case::batched("tick", BatchSize::LargeInput, warm_remote_write, |(mut rw, mut out)| {
                out.clear();
                rw.sample(&SNAPSHOT, 1_700_000_002_000, &mut out);
                out.len()
            }),
        ),
        Group::new("remote_write_encode", Throughput::Elements(BATCH as u64), 20)
            .case(Case::iter("prost", || encode_request(&write_request(&SAMPLES)).len()))
            .case(Case::iter("direct", || encode_batch(&SAMPLES).len()).vs("prost")),
        Group::new("otlp_sample_encode", Throughput::Elements(BATCH as u64), 3).sample_size(20).case(
            Case::batched("tick_and_request", BatchSize::LargeInput, warm_otlp, |(mut o, mut out)| {
                out.clear();
                o.sample(&SNAPSHOT, 1_700_000_002_000, &mut out);
                let body = prost::Message::encode_to_vec(&Otlp::request(&[], &POINTS));
                (out.len(), body.len())
            }),
        ),
        Group::new("remote_write_decode", Throughput::Elements(DECODE_SERIES as u64), 20)
            .case(Case::iter("1000_series", || decode_request(&BODY).map_or(0, |r| r.timeseries.len()))),
        Group::new("otlp_reply_decode", Throughput::Elements(1), 10_000)
            .case(Case::iter("partial_success", || rejected_points(&REPLY)))
            .case(Case::iter("empty", || rejected_points(&[]))),
    ]
}

fn main() {
    if count_mode(env!("CARGO_PKG_NAME"), groups) {
        return;
    }
    let direct = telemon_push::remote_write::decode_request(&encode_batch(&SAMPLES)).unwrap();
    assert_eq!(
        direct,
        telemon_push::remote_write::decode_request(&encode_request(&write_request(&SAMPLES))).unwrap()
    );
    println!("request of {BATCH} samples: {} bytes compressed", encode_batch(&SAMPLES).len());
    let decoded = decode_request(&BODY).unwrap();
    assert_eq!(decoded.timeseries.len(), DECODE_SERIES);
    assert!(decoded.timeseries.iter().all(|t| t.samples.len() == 1));
    assert_eq!(rejected_points(&REPLY), 12);
    println!("request of {DECODE_SERIES} series x 1 sample: {} bytes compressed", BODY.len());
    run_criterion(groups);
}
