//! The seed corpus of the fuzz target `telemon_web_config` holds both sides of the reader: the seeds
//! that are valid files are read as such when their certificates are where they say
//! (`tests/data/web-tls`). The replays of the corpora through the fuzz targets' checks are the unit
//! tests of `src/fuzz/tests.rs`.

use std::path::Path;

use telemon::http::WebConfig;

/// The seeds written as good files read as good files (beside the test certificates), and the
/// `bad_` ones are refused: the corpus holds both sides of the reader.
#[test]
fn the_good_seeds_read_and_the_bad_ones_are_refused() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/web-tls");
    let good = [
        "users_headers_rate.yml",
        "every_tls_key.yml",
        "anchors_and_aliases.yml",
        "crlf_and_bom.yml",
        "empty.yml",
    ];
    for file in bench_harness::corpus::seeds("telemon_web_config") {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        let read = WebConfig::parse(&dir.join(&name), &text);
        if good.contains(&name.as_str()) {
            read.unwrap_or_else(|e| panic!("{name}: {e}"));
        } else if name.starts_with("bad_") {
            assert!(read.is_err(), "{name} was accepted");
        }
    }
}
