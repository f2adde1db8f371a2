//! Replays the committed seed corpora of the fuzz targets through the same functions on stable.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    files
}

#[test]
fn smon_decode_corpus_replays() {
    for file in corpus("smon_decode") {
        smon_codec::fuzz::decode(&std::fs::read(&file).unwrap());
    }
}

#[test]
fn smon_roundtrip_corpus_replays() {
    for file in corpus("smon_roundtrip") {
        smon_codec::fuzz::roundtrip(&std::fs::read(&file).unwrap());
    }
}
