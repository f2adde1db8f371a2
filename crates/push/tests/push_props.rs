//! Properties of the push decoders: `remote_write::decode_request` (a remote write body) and
//! `otlp::rejected_points` (an OTLP/HTTP reply): round trips of arbitrary messages, and no panic
//! on arbitrary bytes, cut anywhere. The fuzz targets' checks on arbitrary bytes (`telemon_remote_write`,
//! `telemon_otlp_reply`) run as the unit tests of `src/fuzz/tests.rs`.

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use proptest::prelude::*;
use telemon_push::otlp::rejected_points;
use telemon_push::remote_write::{
    decode_request, encode_request, Label, MetricMetadata, Sample, TimeSeries, WriteRequest, STALE_NAN_BITS,
};

/// Any f64, with the special values weighted in: the stale marker, other NaN payloads, ±0, ±inf.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => any::<u64>().prop_map(f64::from_bits),
        1 => Just(f64::from_bits(STALE_NAN_BITS)),
        1 => Just(f64::NAN),
        1 => Just(-0.0),
        1 => Just(0.0),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => (0u64..1 << 51).prop_map(|p| f64::from_bits(0x7ff8_0000_0000_0000 | p)),
    ]
}

fn label() -> impl Strategy<Value = Label> {
    ("\\PC{0,12}", "\\PC{0,24}").prop_map(|(name, value)| Label { name, value })
}

fn sample() -> impl Strategy<Value = Sample> {
    (value(), any::<i64>()).prop_map(|(value, timestamp)| Sample { value, timestamp })
}

fn request() -> impl Strategy<Value = WriteRequest> {
    let series = (prop::collection::vec(label(), 0..6), prop::collection::vec(sample(), 0..6))
        .prop_map(|(labels, samples)| TimeSeries { labels, samples });
    let metadata = (any::<i32>(), "\\PC{0,12}", "\\PC{0,12}", "\\PC{0,4}").prop_map(
        |(r#type, metric_family_name, help, unit)| MetricMetadata { r#type, metric_family_name, help, unit },
    );
    (prop::collection::vec(series, 0..12), prop::collection::vec(metadata, 0..3))
        .prop_map(|(timeseries, metadata)| WriteRequest { timeseries, metadata })
}

/// Sample values by their bits, except that proto3 leaves a 0.0 out, so -0.0 arrives as 0.0.
fn bits(req: &WriteRequest) -> Vec<Vec<(i64, u64)>> {
    let norm = |v: f64| if v == 0.0 { 0 } else { v.to_bits() };
    req.timeseries
        .iter()
        .map(|ts| ts.samples.iter().map(|s| (s.timestamp, norm(s.value))).collect())
        .collect()
}

fn snappy(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(raw).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// An arbitrary request (any labels, samples with any bits: NaN payloads such as the stale
    /// marker, infinities, negative timestamps; metadata) decodes to itself.
    #[test]
    fn a_write_request_round_trips(req in request()) {
        let back = decode_request(&encode_request(&req)).unwrap();
        prop_assert_eq!(bits(&back), bits(&req));
        let labels = |r: &WriteRequest| r.timeseries.iter().map(|t| t.labels.clone()).collect::<Vec<_>>();
        prop_assert_eq!(labels(&back), labels(&req));
        prop_assert_eq!(&back.metadata, &req.metadata);
        for (b, r) in back.timeseries.iter().flat_map(|t| &t.samples).zip(req.timeseries.iter().flat_map(|t| &t.samples)) {
            prop_assert_eq!(b.value.to_bits() == STALE_NAN_BITS, r.value.to_bits() == STALE_NAN_BITS);
        }
    }

    /// A valid body that holds anything, cut at any point short of its end, is an error.
    #[test]
    fn a_write_request_cut_anywhere_is_an_error(req in request()) {
        let body = encode_request(&req);
        let holds_something = !prost::Message::encode_to_vec(&req).is_empty();
        for cut in 0..body.len() {
            let r = decode_request(&body[..cut]);
            prop_assert!(r.is_err() || !holds_something, "cut at {} of {}: {:?}", cut, body.len(), r);
        }
    }

    /// Arbitrary bytes as a body, any prefix of them, and the same snappy-compressed (so that they
    /// reach the protobuf decoder), and any prefix of the protobuf, compressed: a request or an
    /// error, never a panic; what decodes re-encodes to itself.
    #[test]
    fn decoding_arbitrary_bodies_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
        for cut in 0..=bytes.len() {
            let _ = decode_request(&bytes[..cut]);
        }
        for raw in [&bytes[..], &bytes[..bytes.len() / 2]] {
            if let Ok(req) = decode_request(&snappy(raw)) {
                let again = decode_request(&encode_request(&req)).unwrap();
                prop_assert_eq!(prost::Message::encode_to_vec(&again), prost::Message::encode_to_vec(&req));
            }
        }
    }

    /// A valid request's protobuf cut anywhere, then compressed: a request (a cut between fields
    /// is a shorter message) or an error, never a panic.
    #[test]
    fn a_cut_protobuf_never_panics(req in request()) {
        let raw = prost::Message::encode_to_vec(&req);
        for cut in 0..raw.len() {
            let _ = decode_request(&snappy(&raw[..cut]));
        }
    }

    /// An OTLP reply with any partial_success (rejected count, message) gives the count back,
    /// 0 for a negative count or none.
    #[test]
    fn an_otlp_reply_round_trips(partial in proptest::option::of((any::<i64>(), "\\PC{0,40}"))) {
        let want = partial.as_ref().map_or(0, |(n, _)| (*n).max(0) as u64);
        let reply = ExportMetricsServiceResponse {
            partial_success: partial.map(|(rejected_data_points, error_message)| ExportMetricsPartialSuccess {
                rejected_data_points,
                error_message,
            }),
        };
        let body = prost::Message::encode_to_vec(&reply);
        prop_assert_eq!(rejected_points(&body), want);
        let decoded: ExportMetricsServiceResponse = prost::Message::decode(body.as_slice()).unwrap();
        prop_assert_eq!(decoded, reply);
    }

    /// Arbitrary bytes as an OTLP reply, cut at any point: a count, never a panic; and whatever a
    /// reply's body cut short gives, it is its own count or 0.
    #[test]
    fn decoding_arbitrary_otlp_replies_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        n in any::<i64>(),
    ) {
        for cut in 0..=bytes.len() {
            let _ = rejected_points(&bytes[..cut]);
        }
        let body = prost::Message::encode_to_vec(&ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess { rejected_data_points: n, error_message: "e".into() }),
        });
        for cut in 0..=body.len() {
            let got = rejected_points(&body[..cut]);
            prop_assert!(got == 0 || got == n.max(0) as u64, "cut at {}: {}", cut, got);
        }
    }
}
