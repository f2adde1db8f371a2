//! Replays the committed seed corpus of the `meter161_decode` fuzz target through the same checks.

use std::path::Path;

#[test]
fn meter161_decode_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/meter161_decode");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        meter161::fuzz::decode(&data);
        replayed += 1;
    }
    assert!(replayed > 0, "the corpus at {} is empty", dir.display());
}
