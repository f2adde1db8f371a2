//! Replays the committed seed corpus of the fuzz target `capture_read` through the same function on stable.

#[test]
fn capture_read_corpus_replays() {
    bench_harness::corpus::replay("capture_read", 1, telemon_capture::fuzz::read);
}
