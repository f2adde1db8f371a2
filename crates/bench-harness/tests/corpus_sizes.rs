//! The rule that a fuzz target lands with a grown corpus: every target listed in `fuzz/Cargo.toml` holds at
//! least [`bench_harness::corpus::MIN_INPUTS`] seeds, so that the corpus replays of `cargo test` check more than
//! the few hand-written ones.

use std::path::Path;

use bench_harness::corpus::{self, MIN_INPUTS};

/// The `[[bin]]` names of `fuzz/Cargo.toml`: the fuzz targets.
fn targets() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let manifest: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let bins =
        manifest.get("bin").and_then(toml::Value::as_array).expect("[[bin]] tables in fuzz/Cargo.toml");
    bins.iter()
        .map(|b| b.get("name").and_then(toml::Value::as_str).expect("a [[bin]] with a name").to_owned())
        .collect()
}

/// What is wrong with the corpus of each target in `targets` whose corpus is smaller than `min`, if any.
fn too_small(targets: &[String], min: usize, count: impl Fn(&str) -> Option<usize>) -> Vec<String> {
    targets
        .iter()
        .filter_map(|t| {
            let why = match count(t) {
                None => "has no corpus directory".to_owned(),
                Some(n) if n < min => format!("holds {n} inputs"),
                Some(_) => return None,
            };
            Some(format!(
                "fuzz target {t}: fuzz/corpus/{t} {why}, fewer than {min}; grow it with \
                 `cargo xtask fuzz --seconds 600 --minimize {t}` and commit it"
            ))
        })
        .collect()
}

#[test]
fn every_fuzz_target_holds_a_grown_corpus() {
    let targets = targets();
    assert!(!targets.is_empty(), "fuzz/Cargo.toml lists no targets");
    let count = |t: &str| corpus::dir(t).is_dir().then(|| corpus::seeds(t).len());
    let small = too_small(&targets, MIN_INPUTS, count);
    assert!(small.is_empty(), "a new fuzz target lands with a grown corpus:\n{}", small.join("\n"));
}

/// A target with a fresh corpus of ten hand-written seeds is refused, one with none too, and the message says
/// how to grow it.
#[test]
fn a_fresh_ten_seed_corpus_is_refused() {
    let targets = ["fresh".to_owned(), "grown".to_owned(), "missing".to_owned()];
    let small = too_small(&targets, MIN_INPUTS, |t| match t {
        "fresh" => Some(10),
        "grown" => Some(MIN_INPUTS),
        _ => None,
    });
    assert_eq!(small.len(), 2, "{small:?}");
    assert!(small[0].contains("fresh: ") && small[0].contains("holds 10 inputs"), "{}", small[0]);
    assert!(small[0].contains("cargo xtask fuzz --seconds 600 --minimize fresh"), "{}", small[0]);
    assert!(small[1].contains("missing: ") && small[1].contains("no corpus directory"), "{}", small[1]);
}
