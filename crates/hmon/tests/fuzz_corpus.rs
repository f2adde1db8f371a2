//! Replays the committed seed corpora of the `hmon_frame`, `hmon_message` and `hmon_proto` fuzz targets.

#[test]
fn hmon_frame_corpus() {
    bench_harness::corpus::replay("hmon_frame", 1, hmon::fuzz::frame);
}

#[test]
fn hmon_message_corpus() {
    bench_harness::corpus::replay("hmon_message", 1, hmon::fuzz::message);
}

#[test]
fn hmon_proto_corpus() {
    bench_harness::corpus::replay("hmon_proto", 1, hmon::fuzz::proto);
}
