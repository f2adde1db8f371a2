//! Replays the committed seed corpora of the fuzz targets through the same functions on stable.

#[test]
fn smon_decode_corpus_replays() {
    bench_harness::corpus::replay("smon_decode", 1, smon_codec::fuzz::decode);
}

#[test]
fn smon_roundtrip_corpus_replays() {
    bench_harness::corpus::replay("smon_roundtrip", 1, smon_codec::fuzz::roundtrip);
}
