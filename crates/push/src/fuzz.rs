//! The bodies of the fuzz targets `telemon_remote_write`, `telemon_otlp_reply` and `push_disk_record`,
//! also replayed over their seed corpora by the unit tests (`fuzz/tests.rs`) on stable. Built only under
//! `cfg(fuzzing)` and in tests.

pub use crate::disk::fuzz::record_reader;
use crate::otlp::rejected_points;
use crate::remote_write::{decode_request, encode_request, MAX_DECODED};

/// `telemon_remote_write`: the bytes as a remote write body, and snappy-compressed (so that they
/// reach the protobuf decoder), decode to a request or a typed error, never a panic; a request
/// that decodes re-encodes to a body that decodes to the same request; a valid non-empty body cut
/// short is an error.
pub fn remote_write_request(data: &[u8]) {
    check_body(data);
    if data.len() <= MAX_DECODED {
        if let Ok(body) = snap::raw::Encoder::new().compress_vec(data) {
            check_body(&body);
        }
    }
}

fn check_body(body: &[u8]) {
    let Ok(req) = decode_request(body) else { return };
    let raw = prost::Message::encode_to_vec(&req);
    let again = encode_request(&req);
    let back = decode_request(&again).expect("a re-encoded request decodes");
    // Compared encoded: NaN values (the stale marker's among them) keep their bits.
    assert_eq!(prost::Message::encode_to_vec(&back), raw, "the request changed on a round trip");
    if !raw.is_empty() {
        // Any cut of a body that holds something: snappy's announced length is not reached.
        let cut = body.first().map_or(0, |&b| usize::from(b)) % again.len();
        assert!(decode_request(&again[..cut]).is_err(), "a body cut at {cut} of {} decoded", again.len());
    }
}

/// `telemon_otlp_reply`: the bytes as an OTLP `ExportMetricsServiceResponse` give a count of
/// rejected points (0 when absent or undecodable), never a panic, the same as a re-encoding of
/// what decoded.
pub fn otlp_reply(data: &[u8]) {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
    let n = rejected_points(data);
    match <ExportMetricsServiceResponse as prost::Message>::decode(data) {
        Ok(reply) => {
            let want = reply.partial_success.as_ref().map_or(0, |p| p.rejected_data_points.max(0) as u64);
            assert_eq!(n, want);
            assert_eq!(rejected_points(&prost::Message::encode_to_vec(&reply)), n);
        }
        Err(_) => assert_eq!(n, 0, "an undecodable reply counts no rejected point"),
    }
}

#[cfg(test)]
mod tests;
