//! Replays the committed seed corpora of the `hmon_frame`, `hmon_message` and `hmon_proto` fuzz targets.

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the {target} corpus is empty");
    for file in files {
        let data = std::fs::read(&file).unwrap();
        run(&data);
    }
}

#[test]
fn hmon_frame_corpus() {
    replay("hmon_frame", hmon::fuzz::frame);
}

#[test]
fn hmon_message_corpus() {
    replay("hmon_message", hmon::fuzz::message);
}

#[test]
fn hmon_proto_corpus() {
    replay("hmon_proto", hmon::fuzz::proto);
}
