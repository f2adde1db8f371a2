//! Replays the committed seed corpora of the `meter161_decode` and `meter161_session` fuzz targets through the
//! same checks.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        check(&data);
        replayed += 1;
    }
    assert!(replayed > 0, "the corpus at {} is empty", dir.display());
}

#[test]
fn meter161_decode_corpus_replays() {
    replay("meter161_decode", meter161::fuzz::decode);
}

#[test]
fn meter161_session_corpus_replays() {
    replay("meter161_session", meter161::fuzz::session);
}
