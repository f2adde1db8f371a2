//! Replays the committed seed corpora of the `sysinfo_wire`, `sysinfo_reports` and `sysinfo_reassembler` fuzz
//! targets through the same functions the fuzz targets call.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        check(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n > 0, "the {target} corpus is empty");
}

#[test]
fn sysinfo_wire_corpus() {
    replay("sysinfo_wire", sysinfo_wire::fuzz::wire);
}

#[test]
fn sysinfo_reports_corpus() {
    replay("sysinfo_reports", sysinfo_wire::fuzz::reports);
}

#[test]
fn sysinfo_reassembler_corpus() {
    replay("sysinfo_reassembler", sysinfo_wire::fuzz::reassembler);
}
