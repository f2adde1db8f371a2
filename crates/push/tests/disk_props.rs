//! The disk queue's record format and its behaviour in a real directory.
//!
//! * the record encoder and the sans-IO reader round-trip any record, and any stream of records;
//! * the reader never panics on any bytes cut anywhere, and never asks for (nor, reading a real
//!   file, allocates) more than its limit — a counting allocator checks the largest allocation;
//! * in a temporary directory: append, ack and reopen; segments removed oldest first, only by a
//!   sync; `max_bytes` with both `when_full` settings; `max_age`; a torn tail and a damaged
//!   record written by hand; stray files and a damaged cursor;
//! * the seed corpus of the fuzz target `push_disk_record` is what the encoder makes
//!   (`TELEMON_WRITE_SEEDS=1` writes it again); it replays through the fuzz target's checks, and
//!   those checks run on arbitrary and damaged streams, in the unit tests of `src/fuzz/tests.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use telemon_push::disk::frame::{decode, encode, Decoded, HEADER_LEN, MAX_RECORD};
use telemon_push::disk::{
    Config, CursorFound, DiskQueue, DropReason, Dropped, Meta, Next, RecordIn, StdFs, WhenFull, MAX_PAYLOAD,
};

// ---------------------------------------------------------------------------------------------
// The largest allocation made by this thread, for the "never allocates from an unchecked
// length" checks.

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only records sizes in a thread-local Cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The largest allocation `f` made on this thread.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

// ---------------------------------------------------------------------------------------------
// The record format

fn meta_strategy() -> impl Strategy<Value = Meta> {
    (any::<u32>(), any::<i64>(), any::<i64>()).prop_map(|(samples, oldest_ms, newest_ms)| Meta {
        samples,
        oldest_ms,
        newest_ms,
    })
}

fn encoded(meta: Meta, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&RecordIn { meta, payload }, &mut out).unwrap();
    out
}

proptest! {
    #[test]
    fn records_round_trip_one_by_one_and_as_a_stream(
        records in proptest::collection::vec((meta_strategy(), proptest::collection::vec(any::<u8>(), 0..600)), 1..20),
    ) {
        let mut stream = Vec::new();
        for (meta, payload) in &records {
            let one = encoded(*meta, payload);
            prop_assert_eq!(one.len(), HEADER_LEN + payload.len());
            stream.extend_from_slice(&one);
        }
        let mut at = 0;
        for (meta, payload) in &records {
            match decode(&stream[at..]) {
                Decoded::Record { header, payload: got } => {
                    prop_assert_eq!(&header.meta, meta);
                    prop_assert_eq!(got, &payload[..]);
                    at += header.record_len();
                }
                other => prop_assert!(false, "{:?} at {}", other, at),
            }
        }
        prop_assert_eq!(at, stream.len());
    }

    #[test]
    fn the_reader_never_panics_on_any_bytes_cut_anywhere(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(bytes.len() + 1);
        check_bounds(&bytes);
        check_bounds(&bytes[..cut]);
    }

    /// Valid records with damage (flipped bytes, cuts, garbage between): every record the reader
    /// still finds is one that was written, whole.
    #[test]
    fn damage_never_makes_a_record_up(
        records in proptest::collection::vec((meta_strategy(), proptest::collection::vec(any::<u8>(), 0..200)), 1..8),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
        garbage in proptest::collection::vec(any::<u8>(), 0..50),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut stream = Vec::new();
        let written: Vec<Vec<u8>> = records.iter().map(|(m, p)| encoded(*m, p)).collect();
        for (i, r) in written.iter().enumerate() {
            stream.extend_from_slice(r);
            if i == 0 {
                stream.extend_from_slice(&garbage);
            }
        }
        for (at, x) in &flips {
            let i = at.index(stream.len());
            stream[i] ^= x;
        }
        let stream = &stream[..cut.index(stream.len() + 1)];
        let mut at = 0;
        while at < stream.len() {
            match decode(&stream[at..]) {
                Decoded::Record { header, .. } => {
                    let bytes = &stream[at..at + header.record_len()];
                    prop_assert!(written.iter().any(|w| w == bytes), "a record that was never written at {}", at);
                    at += header.record_len();
                }
                Decoded::Damaged { skip, .. } => at += skip,
                Decoded::NeedMore { .. } => break,
            }
        }
    }
}

/// `NeedMore` never asks for more than a record, nor past the header before the header checked.
fn check_bounds(bytes: &[u8]) {
    let mut at = 0;
    while at < bytes.len() {
        match decode(&bytes[at..]) {
            Decoded::Record { header, .. } => at += header.record_len(),
            Decoded::Damaged { skip, .. } => at += skip,
            Decoded::NeedMore { needed } => {
                assert!(needed <= MAX_RECORD);
                if needed > HEADER_LEN {
                    let head: &[u8; HEADER_LEN] = bytes[at..at + HEADER_LEN].try_into().unwrap();
                    assert!(telemon_push::disk::frame::decode_header(head).is_some());
                }
                break;
            }
        }
    }
}

/// A header announcing the largest payload (its checksum valid) followed by a few bytes: the
/// reader asks for it all, and opening a segment holding it allocates nothing near that size.
#[test]
fn a_huge_announced_length_is_not_allocated() {
    let mut bytes = encoded(Meta { samples: 1, oldest_ms: 0, newest_ms: 0 }, b"");
    bytes[8..12].copy_from_slice(&MAX_PAYLOAD.to_le_bytes());
    let crc = crc32c_of(&bytes[8..HEADER_LEN]);
    bytes[4..8].copy_from_slice(&crc.to_le_bytes());
    bytes.extend_from_slice(b"only a few bytes of the payload");
    assert_eq!(decode(&bytes), Decoded::NeedMore { needed: MAX_RECORD });
    let mut over = bytes.clone();
    over[8..12].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
    let crc = crc32c_of(&over[8..HEADER_LEN]);
    over[4..8].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(decode(&over), Decoded::Damaged { header: None, .. }), "over the limit");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("segment-0000000000000000.log"), &bytes).unwrap();
    let ((q, rec), largest) = largest_allocation(|| DiskQueue::open(StdFs, Config::new(dir.path())).unwrap());
    assert!(largest < 4 << 20, "opening allocated {largest} bytes at once");
    assert_eq!((rec.records, rec.cut_bytes), (0, bytes.len() as u64), "{rec:?}");
    assert_eq!(q.records(), 0);
    let (decoded, largest) = largest_allocation(|| decode(&bytes));
    assert_eq!(decoded, Decoded::NeedMore { needed: MAX_RECORD });
    assert!(largest < 4 << 20, "the reader allocated {largest} bytes at once");
}

fn crc32c_of(bytes: &[u8]) -> u32 {
    // CRC-32C, bitwise: the test does not lean on the crate the code uses.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn the_checksum_is_crc32c() {
    // The check value of CRC-32C.
    assert_eq!(crc32c_of(b"123456789"), 0xE306_9283);
    let bytes = encoded(Meta { samples: 7, oldest_ms: 1, newest_ms: 2 }, b"payload");
    assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), crc32c_of(&bytes[8..HEADER_LEN]));
    assert_eq!(u32::from_le_bytes(bytes[12..16].try_into().unwrap()), crc32c_of(b"payload"));
}

// ---------------------------------------------------------------------------------------------
// A real directory

const T0: i64 = 1_700_000_000_000;

fn meta(id: u64) -> Meta {
    let t = T0 + id as i64 * 1000;
    Meta { samples: 10, oldest_ms: t - 500, newest_ms: t }
}

fn payload(id: u64) -> Vec<u8> {
    format!("request body {id:05} ").repeat(5).into_bytes()
}

/// The encoded size of every test record.
fn record_len() -> u64 {
    (HEADER_LEN + payload(0).len()) as u64
}

fn append(q: &mut DiskQueue<StdFs>, ids: std::ops::Range<u64>, now_ms: i64) -> Vec<Dropped> {
    let payloads: Vec<Vec<u8>> = ids.clone().map(payload).collect();
    let records: Vec<RecordIn<'_>> =
        ids.zip(&payloads).map(|(id, p)| RecordIn { meta: meta(id), payload: p }).collect();
    q.append(&records, now_ms).unwrap().dropped
}

/// Hands out everything, without acknowledging: the ids.
fn peek(q: &mut DiskQueue<StdFs>) -> Vec<u64> {
    let mut ids = Vec::new();
    loop {
        match q.next_record().unwrap() {
            Next::Record(_, r) => {
                assert_eq!(r.payload, payload((r.meta.newest_ms - T0) as u64 / 1000));
                ids.push((r.meta.newest_ms - T0) as u64 / 1000);
            }
            Next::Dropped(d) => panic!("{d:?}"),
            Next::Empty => break,
        }
    }
    assert!(q.rewind().is_empty());
    ids
}

fn segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("segment-"))
        .collect();
    names.sort();
    names
}

fn config(dir: &Path) -> Config {
    let mut c = Config::new(dir);
    c.segment_bytes = 4 * record_len();
    c
}

#[test]
fn append_ack_reopen_and_segments_removed_oldest_first_by_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (mut q, rec) = DiskQueue::open(StdFs, config(dir.path())).unwrap();
    assert_eq!((rec.segments, rec.records, rec.cursor), (0, 0, None));
    for tick in 0..5 {
        append(&mut q, tick * 4..tick * 4 + 4, T0);
    }
    // A segment is full after one tick of four records: five segments.
    let all = segments(dir.path());
    assert_eq!(all.len(), 5, "{all:?}");
    assert_eq!(all[0], "segment-0000000000000000.log");
    assert_eq!(all[1], format!("segment-{:016x}.log", 4 * record_len()));
    q.sync().unwrap();
    // Acknowledge the first ten records: the first two segments are wholly below the cursor.
    let mut last = None;
    for _ in 0..10 {
        let Next::Record(pos, _) = q.next_record().unwrap() else { panic!() };
        last = Some(pos);
    }
    q.ack(last.unwrap()).unwrap();
    assert_eq!(q.records(), 10);
    assert_eq!(q.disk_bytes(), 10 * record_len());
    assert_eq!(segments(dir.path()).len(), 5, "nothing is removed before the cursor is durable");
    let synced = q.sync().unwrap();
    assert_eq!(synced.segments_removed, 2);
    assert_eq!(segments(dir.path()), all[2..], "the oldest two go, in order");
    drop(q);

    let (mut q, rec) = DiskQueue::open(StdFs, config(dir.path())).unwrap();
    assert_eq!((rec.records, rec.corrupt_records, rec.cut_bytes), (10, 0, 0), "{rec:?}");
    assert_eq!(rec.cursor, Some((10 * record_len(), CursorFound::Acked)));
    assert_eq!(peek(&mut q), (10..20).collect::<Vec<_>>());
    // Records appended after a reopen go on where the last segment ends.
    append(&mut q, 20..22, T0);
    assert_eq!(peek(&mut q), (10..22).collect::<Vec<_>>());
    assert_eq!(q.oldest_ms(), Some(meta(10).oldest_ms));
}

#[test]
fn a_kill_after_an_ack_does_not_send_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut q, _) = DiskQueue::open(StdFs, config(dir.path())).unwrap();
    append(&mut q, 0..3, T0);
    let Next::Record(pos, _) = q.next_record().unwrap() else { panic!() };
    q.ack(pos).unwrap();
    // No sync: the cursor file alone (renamed over the old one) says where to start.
    drop(q);
    let (mut q, rec) = DiskQueue::open(StdFs, config(dir.path())).unwrap();
    assert_eq!(rec.cursor, Some((record_len(), CursorFound::Acked)));
    assert_eq!(peek(&mut q), [1, 2]);
}

#[test]
fn drop_oldest_keeps_the_newest_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.max_bytes = 6 * record_len();
    let (mut q, _) = DiskQueue::open(StdFs, c.clone()).unwrap();
    assert!(append(&mut q, 0..6, T0).is_empty());
    let dropped = append(&mut q, 6..9, T0);
    assert_eq!(dropped.len(), 1);
    let d = dropped[0];
    assert_eq!((d.reason, d.records, d.samples, d.bytes), (DropReason::QueueFull, 3, 30, 3 * record_len()));
    assert_eq!((d.oldest_ms, d.newest_ms), (Some(meta(0).oldest_ms), Some(meta(2).newest_ms)));
    assert_eq!(q.disk_bytes(), 6 * record_len());
    assert_eq!(peek(&mut q), (3..9).collect::<Vec<_>>());
    // A batch larger than the bound keeps its newest records only.
    let dropped = append(&mut q, 9..17, T0);
    let total: u64 = dropped.iter().map(|d| d.records).sum();
    assert_eq!(total, 8, "{dropped:?}");
    assert_eq!(peek(&mut q), (11..17).collect::<Vec<_>>());
    q.sync().unwrap();
    drop(q);
    let (mut q, rec) = DiskQueue::open(StdFs, c).unwrap();
    assert_eq!(rec.bytes, 6 * record_len());
    assert_eq!(peek(&mut q), (11..17).collect::<Vec<_>>());
}

#[test]
fn drop_newest_keeps_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.max_bytes = 6 * record_len();
    c.when_full = WhenFull::DropNewest;
    let (mut q, _) = DiskQueue::open(StdFs, c).unwrap();
    assert!(append(&mut q, 0..4, T0).is_empty());
    let dropped = append(&mut q, 4..8, T0);
    assert_eq!(dropped.len(), 1);
    let d = dropped[0];
    assert_eq!((d.reason, d.records, d.oldest_ms), (DropReason::QueueFull, 2, Some(meta(6).oldest_ms)));
    assert_eq!(peek(&mut q), (0..6).collect::<Vec<_>>());
    // Once the sender caught up, there is room again.
    let mut last = None;
    while let Next::Record(pos, _) = q.next_record().unwrap() {
        last = Some(pos);
    }
    q.ack(last.unwrap()).unwrap();
    assert!(append(&mut q, 8..14, T0).is_empty());
    assert_eq!(peek(&mut q), (8..14).collect::<Vec<_>>());
}

#[test]
fn max_age_drops_from_the_front_and_on_arrival() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.max_age = Some(std::time::Duration::from_secs(10));
    let (mut q, _) = DiskQueue::open(StdFs, c).unwrap();
    assert!(append(&mut q, 0..5, T0 + 5_000).is_empty());
    // At T0 + 13 s, records whose newest sample is before T0 + 3 s (ids 0, 1, 2) are too old;
    // record 1 of the batch is too.
    let payloads = [payload(1), payload(20)];
    let batch = [
        RecordIn { meta: meta(1), payload: &payloads[0] },
        RecordIn { meta: meta(20), payload: &payloads[1] },
    ];
    let done = q.append(&batch, T0 + 13_000).unwrap();
    assert_eq!(done.records, 1);
    let too_old: Vec<(u64, Option<i64>)> = done.dropped.iter().map(|d| (d.records, d.newest_ms)).collect();
    assert!(done.dropped.iter().all(|d| d.reason == DropReason::TooOld));
    assert_eq!(too_old, [(3, Some(meta(2).newest_ms)), (1, Some(meta(1).newest_ms))]);
    assert_eq!(peek(&mut q), [3, 4, 20]);
}

/// Records 0, 1 and 2 appended and synced in a fresh queue in `dir`, closed: the path of its one segment.
fn three_synced_records(dir: &Path) -> PathBuf {
    let (mut q, _) = DiskQueue::open(StdFs, Config::new(dir)).unwrap();
    append(&mut q, 0..3, T0);
    q.sync().unwrap();
    dir.join("segment-0000000000000000.log")
}

#[test]
fn a_torn_tail_written_by_hand_is_cut_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = three_synced_records(dir.path());
    let good = std::fs::metadata(&path).unwrap().len();
    // Half of a fourth record, as a crash in the middle of a write leaves it.
    let mut tail = encoded(meta(3), &payload(3));
    tail.truncate(tail.len() / 2);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&tail);
    std::fs::write(&path, &bytes).unwrap();

    let (mut q, rec) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!((rec.records, rec.cut_bytes, rec.corrupt_records), (3, tail.len() as u64, 0), "{rec:?}");
    assert_eq!(rec.dropped.len(), 1, "the torn record's header was whole: its samples are counted");
    assert_eq!(rec.dropped[0].samples, 10);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good, "cut back to the last good record");
    append(&mut q, 4..5, T0);
    assert_eq!(peek(&mut q), [0, 1, 2, 4]);
    q.sync().unwrap();
    drop(q);
    // Garbage with no record in it: cut too.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0u8; 100]);
    std::fs::write(&path, &bytes).unwrap();
    let (mut q, rec) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!((rec.cut_bytes, rec.dropped.len()), (100, 0), "{rec:?}");
    assert_eq!(peek(&mut q), [0, 1, 2, 4]);
}

#[test]
fn a_damaged_record_in_the_middle_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = three_synced_records(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    // A payload byte of the second record: its header still says what it held.
    bytes[(record_len() + HEADER_LEN as u64 + 3) as usize] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let (mut q, rec) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!((rec.records, rec.corrupt_records, rec.cut_bytes), (2, 1, 0), "{rec:?}");
    let d = rec.dropped[0];
    assert_eq!((d.reason, d.samples, d.newest_ms), (DropReason::Corrupt, 10, Some(meta(1).newest_ms)));
    assert_eq!(q.corrupt_records(), 1);
    assert_eq!(peek(&mut q), [0, 2]);
    // The header of the first one: a region without a header, skipped to the next magic.
    drop(q);
    bytes[6] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let (mut q, rec) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!((rec.records, rec.corrupt_records), (1, 2), "{rec:?}");
    assert_eq!(rec.dropped[0].oldest_ms, None);
    assert_eq!(peek(&mut q), [2]);
}

#[test]
fn stray_files_and_a_damaged_cursor_are_survived() {
    let dir = tempfile::tempdir().unwrap();
    let (mut q, _) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    append(&mut q, 0..4, T0);
    let Next::Record(pos, _) = q.next_record().unwrap() else { panic!() };
    q.ack(pos).unwrap();
    drop(q);
    std::fs::write(dir.path().join("notes.txt"), b"left by someone").unwrap();
    std::fs::write(dir.path().join("segment-zz.log"), b"not a segment name").unwrap();
    std::fs::write(dir.path().join("cursor"), b"\xF3TQC garbage....").unwrap();
    let (mut q, rec) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!(rec.stray_files, 2);
    assert_eq!(rec.cursor, None, "a damaged cursor: from the oldest segment (a duplicate, no loss)");
    assert_eq!(peek(&mut q), [0, 1, 2, 3]);
    // A cursor past the end is clamped, and new records go after it.
    drop(q);
    std::fs::write(dir.path().join("cursor"), telemon_push::disk::cursor::encode(1 << 40)).unwrap();
    let (mut q, rec) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert!(rec.cursor_clamped);
    assert_eq!(peek(&mut q), Vec::<u64>::new());
    append(&mut q, 10..11, T0);
    q.sync().unwrap();
    assert!(segments(dir.path()).contains(&format!("segment-{:016x}.log", 1u64 << 40)));
    drop(q);
    let (mut q, _) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!(peek(&mut q), [10]);
}

// ---------------------------------------------------------------------------------------------
// The fuzz target's seed corpus

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/push_disk_record")
}

/// The committed seeds are what the encoder makes (or, with `TELEMON_WRITE_SEEDS=1`, are
/// written again).
#[test]
fn the_disk_seeds_are_what_the_encoder_makes() {
    let dir = corpus();
    let rewrite = std::env::var_os("TELEMON_WRITE_SEEDS").is_some();
    if rewrite {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        if rewrite {
            std::fs::write(&path, bytes).unwrap();
        } else {
            let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(committed, bytes, "{} is not what the encoder makes now", path.display());
        }
    };
    let three: Vec<u8> = (0..3).flat_map(|id| encoded(meta(id), &payload(id))).collect();
    write("three_records", &three);
    write("empty_payload", &encoded(Meta { samples: 0, oldest_ms: i64::MIN, newest_ms: i64::MAX }, b""));
    let one = encoded(meta(7), &payload(7));
    write("torn", &one[..one.len() - 9]);
    let mut damaged = three.clone();
    damaged[HEADER_LEN + 1] ^= 0xff;
    write("damaged_payload", &damaged);
    let mut garbage_first = b"\xF3TQ garbage \xF3T".to_vec();
    garbage_first.extend_from_slice(&one);
    write("garbage_then_record", &garbage_first);
    let mut huge = encoded(meta(1), b"");
    huge[8..12].copy_from_slice(&MAX_PAYLOAD.to_le_bytes());
    let crc = crc32c_of(&huge[8..HEADER_LEN]);
    huge[4..8].copy_from_slice(&crc.to_le_bytes());
    write("announces_64mib", &huge);
    write("garbage", b"\x00\x01not a record at all\xff\xfe");
}
