//! The disk queue: appending a tick of 1,000 records of 2 KiB (one write) to a fresh queue in a
//! temporary directory, and reading 1,000 such records back (checksums checked), with their
//! bytes per second.
//!
//! `cargo bench -p telemon-push --bench disk -- --warm-up-time 1 --measurement-time 3`
//!
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use bench_harness::{Case, Group};
use criterion::{BatchSize, Throughput};
use telemon_push::disk::{Config, DiskQueue, Meta, Next, RecordIn, StdFs};

const RECORDS: usize = 1_000;
const PAYLOAD: usize = 2 << 10;

fn payloads() -> Vec<Vec<u8>> {
    (0..RECORDS).map(|i| (0..PAYLOAD).map(|k| (i * 31 + k * 7) as u8).collect()).collect()
}

fn records(payloads: &[Vec<u8>]) -> Vec<RecordIn<'_>> {
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| RecordIn {
            meta: Meta {
                samples: 100,
                oldest_ms: 1_700_000_000_000 + i as i64,
                newest_ms: 1_700_000_000_000 + i as i64,
            },
            payload: p,
        })
        .collect()
}

/// A fresh queue in its own temporary directory (kept alive with it).
fn fresh() -> (tempfile::TempDir, DiskQueue<StdFs>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (q, _) = DiskQueue::open(StdFs, Config::new(dir.path())).expect("a queue");
    (dir, q)
}

/// A queue holding the 1,000 records, synced.
fn filled() -> (tempfile::TempDir, DiskQueue<StdFs>) {
    let (dir, mut q) = fresh();
    let p = payloads();
    q.append(&records(&p), 0).expect("append");
    q.sync().expect("sync");
    (dir, q)
}

fn read_all(q: &mut DiskQueue<StdFs>) -> usize {
    let mut n = 0;
    while let Ok(Next::Record(_, r)) = q.next_record() {
        n += r.payload.len();
    }
    q.rewind();
    n
}

fn groups() -> Vec<Group> {
    let bytes = (RECORDS * PAYLOAD) as u64;
    vec![
        Group::new("disk_append", Throughput::Bytes(bytes), 3).sample_size(20).case(Case::batched(
            "1000x2KiB",
            BatchSize::PerIteration,
            || (fresh(), payloads()),
            |((dir, mut q), p)| {
                let done = q.append(&records(&p), 0).expect("append");
                (dir, q, done.records)
            },
        )),
        Group::new("disk_read", Throughput::Bytes(bytes), 3).sample_size(20).case(Case::batched(
            "1000x2KiB",
            BatchSize::PerIteration,
            filled,
            |(dir, mut q)| {
                let n = read_all(&mut q);
                assert_eq!(n, RECORDS * PAYLOAD);
                (dir, q)
            },
        )),
    ]
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
