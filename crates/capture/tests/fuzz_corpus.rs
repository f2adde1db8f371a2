//! Replays the committed seed corpus of the fuzz target `capture_read` through the same function on stable.

use std::path::Path;

#[test]
fn capture_read_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/capture_read");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    for file in files {
        telemon_capture::fuzz::read(&std::fs::read(&file).unwrap());
    }
}
