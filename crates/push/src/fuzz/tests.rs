//! The committed seed corpora of the fuzz targets `telemon_remote_write`, `telemon_otlp_reply` and
//! `push_disk_record` replayed through the same functions on stable, and the first two under proptest.
//! (`tests/fuzz_corpus.rs` checks that the seeds telemon's encoders make are still what they make.)

use proptest::prelude::*;

use crate::disk::frame::{encode, Meta, RecordIn};

#[test]
fn push_disk_record_corpus_replays() {
    bench_harness::corpus::replay("push_disk_record", 120, super::record_reader);
}

#[test]
fn telemon_remote_write_corpus_replays() {
    bench_harness::corpus::replay("telemon_remote_write", 3, super::remote_write_request);
}

#[test]
fn telemon_otlp_reply_corpus_replays() {
    bench_harness::corpus::replay("telemon_otlp_reply", 3, super::otlp_reply);
}

/// A record of `meta` and `payload`, encoded.
fn encoded(meta: Meta, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&RecordIn { meta, payload }, &mut out).unwrap();
    out
}

proptest! {
    /// Any bytes, cut anywhere: the reader's checks (no panic, no read or skip past the bytes, round trips,
    /// the segment scan agreeing with the decoder).
    #[test]
    fn the_record_reader_checks_hold_on_any_bytes_cut_anywhere(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        cut in any::<prop::sample::Index>(),
    ) {
        super::record_reader(&bytes);
        super::record_reader(&bytes[..cut.index(bytes.len() + 1)]);
    }

    /// Valid records with damage (flipped bytes, cuts, garbage between): the same checks.
    #[test]
    fn the_record_reader_checks_hold_on_damaged_records(
        records in prop::collection::vec(
            (any::<u32>(), any::<i64>(), any::<i64>(), prop::collection::vec(any::<u8>(), 0..200)),
            1..8,
        ),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
        garbage in prop::collection::vec(any::<u8>(), 0..50),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut stream = Vec::new();
        for (i, (samples, oldest_ms, newest_ms, payload)) in records.iter().enumerate() {
            stream.extend(encoded(Meta { samples: *samples, oldest_ms: *oldest_ms, newest_ms: *newest_ms }, payload));
            if i == 0 {
                stream.extend_from_slice(&garbage);
            }
        }
        for (at, x) in &flips {
            let i = at.index(stream.len());
            stream[i] ^= x;
        }
        super::record_reader(&stream[..cut.index(stream.len() + 1)]);
    }

    /// Arbitrary bytes as a body, and the structured way in: a protobuf whose fields are arbitrary bytes.
    #[test]
    fn arbitrary_remote_write_bodies_pass_the_checks(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
        super::remote_write_request(&bytes);
    }

    /// Arbitrary bytes as an OTLP reply, cut at any point: the count of what decodes, 0 otherwise.
    #[test]
    fn arbitrary_otlp_replies_pass_the_checks(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for cut in 0..=bytes.len() {
            super::otlp_reply(&bytes[..cut]);
        }
    }
}
