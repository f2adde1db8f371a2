//! Replays the committed seed corpora of the `meter161_decode` and `meter161_session` fuzz targets through the
//! same checks.

#[test]
fn meter161_decode_corpus_replays() {
    bench_harness::corpus::replay("meter161_decode", 1, meter161::fuzz::decode);
}

#[test]
fn meter161_session_corpus_replays() {
    bench_harness::corpus::replay("meter161_session", 1, meter161::fuzz::session);
}
