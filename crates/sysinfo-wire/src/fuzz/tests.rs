//! The committed seed corpora of the `sysinfo_wire`, `sysinfo_reports` and `sysinfo_reassembler` fuzz targets
//! replayed through the same functions the fuzz targets call, and those checks under proptest.

use proptest::prelude::*;

#[test]
fn sysinfo_wire_corpus() {
    bench_harness::corpus::replay("sysinfo_wire", 1, super::wire);
}

#[test]
fn sysinfo_reports_corpus() {
    bench_harness::corpus::replay("sysinfo_reports", 1, super::reports);
}

#[test]
fn sysinfo_reassembler_corpus() {
    bench_harness::corpus::replay("sysinfo_reassembler", 1, super::reassembler);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        super::wire(&data);
        super::reports(&data);
        // The reassembler against its model, with chunks copied, owned and shared.
        super::reassembler(&data);
    }
}
