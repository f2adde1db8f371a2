//! Replays the committed fuzz seed corpora through the same functions the fuzz targets call.

#[test]
fn mono_agent_stream_corpus() {
    bench_harness::corpus::replay("mono_agent_stream", 1, mono_counters::fuzz::agent_stream);
}

#[test]
fn mono_inspector_stream_corpus() {
    bench_harness::corpus::replay("mono_inspector_stream", 1, mono_counters::fuzz::inspector_stream);
}

#[test]
fn mono_counter_table_corpus() {
    bench_harness::corpus::replay("mono_counter_table", 1, mono_counters::fuzz::counter_table);
}
