//! The committed seed corpora of the `meter161_decode` and `meter161_session` fuzz targets replayed through
//! the same checks, and the decode checks under proptest (arbitrary bytes, and protocol-like noise).

use proptest::prelude::*;

#[test]
fn meter161_decode_corpus_replays() {
    bench_harness::corpus::replay("meter161_decode", 1, super::decode);
}

#[test]
fn meter161_session_corpus_replays() {
    bench_harness::corpus::replay("meter161_session", 1, super::session);
}

proptest! {
    /// Arbitrary bytes, whole, split anywhere and byte by byte: no panic, the same results, and every
    /// decoded message re-encodes to a line that decodes to itself (the fuzz target's checks).
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..600)) {
        super::decode(&data);
    }

    /// Protocol-like noise exercises the interesting paths more often than uniform bytes.
    #[test]
    fn protocol_like_noise_never_panics(parts in prop::collection::vec(prop_oneof![
        Just("DATA ".to_string()), Just("HEAD ".to_string()), Just("HELLO ".to_string()), Just("BAD ".to_string()),
        Just("INTERVAL ".to_string()), Just("\r\n".to_string()), Just("\n".to_string()), Just("\t".to_string()),
        "[0-9]{1,22}", "[ -~]{0,70}", Just("0x".to_string()), Just("-".to_string()),
    ], 0..60)) {
        super::decode(parts.concat().as_bytes());
    }
}
