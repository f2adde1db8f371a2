//! The committed seed corpora of the fuzz targets `telemon_web_config` and `telemon_probe_allow` replayed
//! through the same functions on stable, so that `cargo test` covers what the fuzzer starts from; and the
//! `probe_allow` check under proptest.

use proptest::prelude::*;

#[test]
fn telemon_web_config_corpus_replays() {
    bench_harness::corpus::replay("telemon_web_config", 3000, super::web_config);
}

#[test]
fn telemon_probe_allow_corpus_replays() {
    bench_harness::corpus::replay("telemon_probe_allow", 400, super::probe_allow);
}

proptest! {
    /// Any string, a `probe_allow` entry or a `/probe` target, is taken or refused with a reason, never a
    /// panic.
    #[test]
    fn probe_strings_never_panic(s in "\\PC{0,40}", bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        super::probe_allow(s.as_bytes());
        super::probe_allow(&bytes);
    }
}
