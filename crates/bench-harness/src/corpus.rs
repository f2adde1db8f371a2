//! The committed seed corpora of the fuzz targets (`fuzz/corpus/TARGET/`), for the tests that replay
//! them on stable through the same functions the fuzz targets call (`cargo xtask fuzz` grows them;
//! CI does not need cargo-fuzz).
//!
//! Every target lands with a grown corpus: `tests/corpus_sizes.rs` fails while any target listed in
//! `fuzz/Cargo.toml` holds fewer than [`MIN_INPUTS`] seeds.

use std::path::{Path, PathBuf};

/// The fewest inputs a fuzz target's committed corpus may hold: a handful of hand-written seeds is below it, and
/// ten minutes of `cargo xtask fuzz --seconds 600 --minimize TARGET` took every target so far above it (the
/// smallest, push_disk_record and sysinfo_wire, to 129 and 109).
pub const MIN_INPUTS: usize = 100;

/// The directory of `target`'s seeds.
pub fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

/// The seed files of `target`, sorted by name. Panics if the directory cannot be read.
pub fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display())).path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `run` over every seed of `target`; panics if there are fewer than `at_least`.
pub fn replay(target: &str, at_least: usize, run: impl Fn(&[u8])) {
    let files = seeds(target);
    assert!(
        files.len() >= at_least,
        "fuzz/corpus/{target} has {} files, fewer than the {at_least} its replay expects; grow it with \
         `cargo xtask fuzz --seconds 600 --minimize {target}`",
        files.len()
    );
    for file in files {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        run(&data);
    }
}
