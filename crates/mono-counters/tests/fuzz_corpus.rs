//! Replays the committed fuzz seed corpora through the same functions the fuzz targets call.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        check(&std::fs::read(&path).unwrap());
        count += 1;
    }
    assert!(count > 0, "{} is empty", dir.display());
}

#[test]
fn mono_agent_stream_corpus() {
    replay("mono_agent_stream", mono_counters::fuzz::agent_stream);
}

#[test]
fn mono_inspector_stream_corpus() {
    replay("mono_inspector_stream", mono_counters::fuzz::inspector_stream);
}

#[test]
fn mono_counter_table_corpus() {
    replay("mono_counter_table", mono_counters::fuzz::counter_table);
}
