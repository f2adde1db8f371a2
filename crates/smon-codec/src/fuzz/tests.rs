//! The committed seed corpora of the fuzz targets `smon_decode` and `smon_roundtrip` replayed through the
//! same functions on stable.

#[test]
fn smon_decode_corpus_replays() {
    bench_harness::corpus::replay("smon_decode", 1, super::decode);
}

#[test]
fn smon_roundtrip_corpus_replays() {
    bench_harness::corpus::replay("smon_roundtrip", 1, super::roundtrip);
}
