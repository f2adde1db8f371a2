//! The seeds of the fuzz targets `telemon_remote_write` and `telemon_otlp_reply` that telemon's own encoders
//! make (their replays, with that of `push_disk_record`, are the unit tests of `src/fuzz/tests.rs`).
//!
//! A test checks that the committed seeds are still what the encoders make: after a deliberate change of the
//! encoding, `TELEMON_WRITE_SEEDS=1 cargo test -p telemon-push --test fuzz_corpus` writes them again.

use std::path::Path;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use telemon_fleet::{FleetSnapshot, MetricKind, Protocol, Series, TargetSnapshot, TargetState, Value};
use telemon_push::remote_write::{
    encode_batch, encode_request, Label, MetricMetadata, RemoteWrite, Sample, TimeSeries, WriteRequest,
    STALE_NAN_BITS,
};

fn snapshot(up: bool, with_histogram: bool) -> FleetSnapshot {
    let mut t = TargetSnapshot::new("vm", Protocol::SYSINFO, vec![("room".into(), "b12".into())]);
    t.state = if up { TargetState::Up } else { TargetState::Down };
    t.connects = 1;
    let s = |family: &str, kind, value| Series {
        family: family.into(),
        help: "h",
        labels: telemon_fleet::LabelSet::new([("cpu", "0")]),
        kind,
        value,
        rate: None,
    };
    let mut series = vec![
        s("rvos_kstat_total", MetricKind::Counter, Value::Number(12345.0)),
        s("rvos_process_memory_bytes", MetricKind::Gauge, Value::Number(-0.0)),
    ];
    if with_histogram {
        series.push(s(
            "rvos_scheduler_latency_seconds",
            MetricKind::Histogram,
            Value::Histogram { buckets: vec![(0.001, 3), (0.01, 9)], sum: 0.042, count: 10 },
        ));
    }
    t.series = series.into();
    FleetSnapshot::from(vec![t])
}

/// The committed seeds are what the encoders make (or, with `TELEMON_WRITE_SEEDS=1`, are written again).
#[test]
fn the_seeds_are_what_the_encoders_make() {
    let rw = bench_harness::corpus::dir("telemon_remote_write");
    let rewrite = std::env::var_os("TELEMON_WRITE_SEEDS").is_some();
    let write = |dir: &Path, name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        if rewrite {
            std::fs::write(&path, bytes).unwrap();
        } else {
            let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(committed, bytes, "{} is not what the encoder makes now", path.display());
        }
    };
    let mut sampler = RemoteWrite::new(vec![("cluster".into(), "lab".into())]);
    let mut out = Vec::new();
    sampler.sample(&snapshot(true, true), 1_700_000_000_000, &mut out);
    write(&rw, "sampler_tick", &encode_batch(&out));
    out.clear();
    // The histogram vanishes, then the target goes down: stale markers.
    sampler.sample(&snapshot(true, false), 1_700_000_001_000, &mut out);
    sampler.sample(&snapshot(false, false), 1_700_000_002_000, &mut out);
    write(&rw, "stale_markers", &encode_batch(&out));
    let req = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![
                Label { name: "__name__".into(), value: "up".into() },
                Label { name: "job".into(), value: "ü\u{1F600}".into() },
            ],
            samples: vec![
                Sample { value: 1.0, timestamp: -1 },
                Sample { value: f64::from_bits(STALE_NAN_BITS), timestamp: i64::MAX },
            ],
        }],
        metadata: vec![MetricMetadata {
            r#type: 1,
            metric_family_name: "up".into(),
            help: "h".into(),
            unit: "s".into(),
        }],
    };
    write(&rw, "prost_with_metadata", &encode_request(&req));
    // Raw protobuf: the target also compresses its input, which reaches the protobuf decoder.
    write(&rw, "raw_protobuf", &prost::Message::encode_to_vec(&req));
    write(&rw, "empty_request", &encode_request(&WriteRequest::default()));
    let body = encode_batch(&out);
    write(&rw, "cut_in_half", &body[..body.len() / 2]);
    write(&rw, "announces_4gib", b"\xff\xff\xff\xff\x0f\x00junk");
    write(&rw, "empty", b"");
    write(&rw, "garbage", b"\x0a\x05hello\x12\xff\x01not a request");

    let otlp = bench_harness::corpus::dir("telemon_otlp_reply");
    let reply = |n: i64, msg: &str| ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: n,
            error_message: msg.into(),
        }),
    };
    write(&otlp, "rejected_7", &prost::Message::encode_to_vec(&reply(7, "bad points")));
    write(&otlp, "rejected_negative", &prost::Message::encode_to_vec(&reply(-3, "")));
    write(&otlp, "message_only", &prost::Message::encode_to_vec(&reply(0, "slow down")));
    let mut unknown = prost::Message::encode_to_vec(&reply(i64::MAX, "x"));
    unknown.extend_from_slice(b"\x12\x03abc\x18\x01");
    write(&otlp, "unknown_fields", &unknown);
    write(&otlp, "empty", b"");
    write(&otlp, "garbage", b"\x0a\xff\xff\xff\xff\x0fnot a reply");
}
