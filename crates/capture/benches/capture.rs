//! Writing and reading a recording of 10,000 meter161-sized reads (about 120 bytes each) on 10 targets.
//!
//! `cargo bench -p telemon-capture -- --warm-up-time 1 --measurement-time 3`
//! Throughput is in records per second. Every case also runs in count mode, for `cargo xtask bench --table`.

use std::sync::LazyLock;

use bench_harness::{Case, Group};
use criterion::{black_box, Throughput};
use telemon_capture::{link_type, Capture, Direction, Limits, Reader, Record, RecordKind, Target, Writer};

const TARGETS: u32 = 10;
const RECORDS: u64 = 10_000;

fn records() -> Vec<Record> {
    let line = b"DATA 788289383 12345678 87654321 1234 5678 90 12 34 56 78 90 12345 6789 1 2 3 4 5 6 7 8 9 10 11\r\n";
    (0..RECORDS)
        .map(|i| Record {
            interface: (i % u64::from(TARGETS)) as u32,
            time_ns: 1_700_000_000_000_000_000 + i * 200_000_000,
            dropped: 0,
            kind: RecordKind::Data { direction: Direction::Inbound, bytes: line.to_vec() },
        })
        .collect()
}

static RECORDS_: LazyLock<Vec<Record>> = LazyLock::new(records);

fn write(records: &[Record]) -> Vec<u8> {
    let mut w = Writer::new(Vec::with_capacity(2 << 20), "bench").unwrap();
    for t in 0..TARGETS {
        w.interface(&Target::new(
            format!("sim{t}"),
            link_type::METER161,
            format!("/tmp/sim{t}/.sockets/meter"),
        ))
        .unwrap();
    }
    for r in records {
        w.record(r).unwrap();
    }
    w.into_inner()
}

static FILE: LazyLock<Vec<u8>> = LazyLock::new(|| write(&RECORDS_));

/// The sans-IO reader over the whole file, counting records.
fn read_events(file: &[u8]) -> usize {
    let mut reader = Reader::new(Limits::default());
    let mut rest = file;
    let mut n = 0;
    while let Ok(Some((used, _))) = reader.read(rest) {
        rest = &rest[used..];
        n += 1;
    }
    n
}

fn groups() -> Vec<Group> {
    let expected = RECORDS as usize + TARGETS as usize + 1;
    assert_eq!(read_events(&FILE), expected, "every block reads back");
    let capture = Capture::from_bytes(&FILE, Limits::default());
    assert_eq!(capture.sections[0].records, *RECORDS_, "round trip");
    vec![Group::new("10x1000_records", Throughput::Elements(RECORDS), 5)
        .sample_size(20)
        .case(Case::iter("write", || black_box(write(&RECORDS_)).len()))
        .case(Case::iter("read/reader", || black_box(read_events(&FILE))))
        .case(Case::iter("read/capture", || {
            black_box(Capture::from_bytes(&FILE, Limits::default())).sections.len()
        }))]
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
