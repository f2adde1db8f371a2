//! Replays the committed seed corpora of the `sysinfo_wire`, `sysinfo_reports` and `sysinfo_reassembler` fuzz
//! targets through the same functions the fuzz targets call.

#[test]
fn sysinfo_wire_corpus() {
    bench_harness::corpus::replay("sysinfo_wire", 1, sysinfo_wire::fuzz::wire);
}

#[test]
fn sysinfo_reports_corpus() {
    bench_harness::corpus::replay("sysinfo_reports", 1, sysinfo_wire::fuzz::reports);
}

#[test]
fn sysinfo_reassembler_corpus() {
    bench_harness::corpus::replay("sysinfo_reassembler", 1, sysinfo_wire::fuzz::reassembler);
}
