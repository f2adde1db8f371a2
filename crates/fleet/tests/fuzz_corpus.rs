//! Replays the committed seed corpora of the fuzz targets `fleet_file_sd` and `fleet_probe_allow` through the
//! same functions on stable (`cargo xtask fuzz` grows them).

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "corpus {} has {} files", dir.display(), files.len());
    for file in files {
        run(&std::fs::read(&file).unwrap());
    }
}

#[test]
fn fleet_file_sd_corpus_replays() {
    replay("fleet_file_sd", telemon_fleet::fuzz::file_sd);
}

#[test]
fn fleet_probe_allow_corpus_replays() {
    replay("fleet_probe_allow", telemon_fleet::fuzz::probe_allow);
}
