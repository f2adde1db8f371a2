//! The tap, the recorder thread (rotation, disk bound, losses) and replay streams.

use std::time::Duration;

use telemon_capture::{
    link_type, Capture, Destination, Direction, Limits, RecordKind, Recorder, RecorderConfig, ReplayStream,
    Speed, Tap, Target,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn recordings(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_tap_records_reads_and_writes_and_replays_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.pcapng");
    let recorder = Recorder::start(RecorderConfig::new(Destination::File(path.clone()), "test 1")).unwrap();
    let target = recorder.target(Target::new("peer", link_type::HMON, "127.0.0.1:4502"));
    let (ours, mut peer) = tokio::io::duplex(64);
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tap = Tap::new(ours, target).counting(received.clone());
    tap.write_all(b"request").await.unwrap();
    let mut got = [0u8; 7];
    peer.read_exact(&mut got).await.unwrap();
    peer.write_all(b"answer one").await.unwrap();
    let mut answer = [0u8; 10];
    tap.read_exact(&mut answer).await.unwrap();
    drop(peer);
    assert_eq!(tap.read(&mut answer).await.unwrap(), 0, "end of file");
    drop(tap);
    assert_eq!(received.load(std::sync::atomic::Ordering::Relaxed), 10, "the bytes read, not those written");
    let stats = recorder.finish();
    assert_eq!((stats.lost_records, stats.files), (0, 1));

    let capture = Capture::from_file(&path, Limits::default()).unwrap();
    assert_eq!(capture.warning, None);
    assert_eq!(capture.sections[0].application.as_deref(), Some("test 1"));
    let kinds: Vec<_> = capture.records().map(|(_, r)| r.kind.clone()).collect();
    assert_eq!(kinds.first(), Some(&RecordKind::Open));
    assert_eq!(
        kinds[kinds.len() - 2..],
        [RecordKind::PeerClosed, RecordKind::Close],
        "the peer's close, then ours"
    );
    let conns = capture.connections(Some("peer"));
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].bytes(Direction::Outbound), b"request");
    assert_eq!(conns[0].inbound(), b"answer one");
    assert!(conns[0].peer_closed);
    let times: Vec<u64> = capture.records().map(|(_, r)| r.time_ns).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "monotonic: {times:?}");

    let mut replay = ReplayStream::new(&conns[0], Speed::Max);
    let clock = replay.clock();
    replay.write_all(b"whatever").await.unwrap();
    let mut all = Vec::new();
    assert!(!clock.at_end());
    replay.read_to_end(&mut all).await.unwrap();
    assert_eq!(all, b"answer one");
    assert!(clock.at_end(), "the stream ran out of recorded bytes");

    // Reopening appends a second section to the same file.
    let recorder = Recorder::start(RecorderConfig::new(Destination::File(path.clone()), "test 2")).unwrap();
    let t = recorder.target(Target::new("peer", link_type::HMON, "127.0.0.1:4502"));
    t.data(Direction::Inbound, b"later");
    recorder.finish();
    let capture = Capture::from_file(&path, Limits::default()).unwrap();
    assert_eq!(capture.sections.len(), 2);
    assert_eq!(capture.connections(Some("peer")).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn replay_keeps_the_recorded_pacing_at_the_given_speed() {
    let conn = telemon_capture::Connection {
        target: Target::new("x", link_type::SMON, "-"),
        start_ns: 0,
        chunks: vec![
            (Duration::ZERO, Direction::Inbound, b"a".to_vec()),
            (Duration::from_secs(10), Direction::Inbound, b"b".to_vec()),
        ],
        peer_closed: false,
    };
    let start = tokio::time::Instant::now();
    let mut s = ReplayStream::new(&conn, Speed::Times(2.0));
    let mut buf = [0u8; 1];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!((&buf, start.elapsed()), (b"b", Duration::from_secs(5)));
    assert_eq!(s.read(&mut buf).await.unwrap(), 0, "EOF after the last chunk");
}

#[test]
fn files_rotate_by_size_and_the_oldest_are_deleted_to_bound_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let config = RecorderConfig {
        max_file_bytes: Some(2_000),
        max_total_bytes: Some(7_000),
        ..RecorderConfig::new(Destination::Dir(dir.path().to_path_buf()), "test")
    };
    let recorder = Recorder::start(config).unwrap();
    let t = recorder.target(Target::new("t", link_type::METER161, "/x"));
    for i in 0..200u32 {
        t.data(Direction::Inbound, format!("DATA {i} 1 2 3 4 5 6 7 8 9 10 11\r\n").as_bytes());
        if i % 10 == 0 {
            recorder.flush();
        }
    }
    let stats = recorder.finish();
    assert_eq!(stats.lost_records, 0);
    assert!(stats.files >= 4, "{stats:?}");
    assert!(stats.files_deleted >= 1, "{stats:?}");
    let files = recordings(dir.path());
    let total: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(total <= 7_000 + 2_100, "total {total}");
    assert_eq!(files.len() as u64, stats.files - stats.files_deleted);
    // Each file stands alone (its own section and interfaces), and the newest holds the last record.
    let last = Capture::from_file(files.last().unwrap(), Limits::default()).unwrap();
    assert_eq!(last.warning, None);
    let inbound = last.connections(None).last().unwrap().inbound();
    assert!(String::from_utf8(inbound).unwrap().ends_with("DATA 199 1 2 3 4 5 6 7 8 9 10 11\r\n"));
    // The oldest surviving file starts after the deleted ones: the first records are gone.
    let first = Capture::from_file(&files[0], Limits::default()).unwrap();
    let text = String::from_utf8(first.connections(None)[0].inbound()).unwrap();
    assert!(!text.starts_with("DATA 0 "), "{text}");
}

#[test]
fn files_rotate_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let config = RecorderConfig {
        max_file_age: Some(Duration::from_millis(1)),
        ..RecorderConfig::new(Destination::Dir(dir.path().to_path_buf()), "test")
    };
    let recorder = Recorder::start(config).unwrap();
    let t = recorder.target(Target::new("t", link_type::METER161, "/x"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while recorder.stats().files < 3 {
        assert!(std::time::Instant::now() < deadline, "no rotation: {:?}", recorder.stats());
        t.data(Direction::Inbound, b"x");
        recorder.flush();
    }
    recorder.finish();
    assert!(recordings(dir.path()).len() >= 3);
}

/// The length of a file's section header block (what no target's records account for).
fn section_header_len(path: &std::path::Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    u64::from(u32::from_le_bytes(bytes[4..8].try_into().unwrap()))
}

#[test]
fn a_full_queue_drops_and_counts_instead_of_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let config = RecorderConfig {
        queue_bytes: 1_000,
        ..RecorderConfig::new(Destination::File(dir.path().join("q.pcapng")), "test")
    };
    let recorder = Recorder::start(config).unwrap();
    let t = recorder.target(Target::new("t", link_type::SMON, "-"));
    // 2,000 bytes of data at once cannot fit a 1,000-byte queue.
    t.data(Direction::Inbound, &[7u8; 2_000]);
    t.data(Direction::Inbound, b"small");
    let other = recorder.target(Target::new("u", link_type::SMON, "-"));
    other.data(Direction::Inbound, b"other");
    let stats = recorder.finish();
    assert_eq!((stats.lost_records, stats.lost_bytes), (1, 2_000));
    // Each target counts its own: what was lost, and what its records took in the file.
    assert_eq!((t.bytes_dropped(), other.bytes_dropped()), (2_000, 0));
    let file_len = dir.path().join("q.pcapng").metadata().unwrap().len();
    assert!(t.bytes_written() > 5 && other.bytes_written() > 5);
    assert_eq!(
        t.bytes_written() + other.bytes_written() + section_header_len(&dir.path().join("q.pcapng")),
        file_len
    );
    let capture = Capture::from_file(dir.path().join("q.pcapng"), Limits::default()).unwrap();
    let records: Vec<_> = capture.records().map(|(_, r)| (r.dropped, r.kind.clone())).collect();
    assert_eq!(
        records,
        [
            (1, RecordKind::Data { direction: Direction::Inbound, bytes: b"small".to_vec() }),
            (0, RecordKind::Data { direction: Direction::Inbound, bytes: b"other".to_vec() })
        ],
        "the next record says one was lost before it"
    );
}

#[tokio::test]
async fn a_tap_that_does_not_record_still_counts_what_it_reads() {
    let (ours, mut peer) = tokio::io::duplex(64);
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tap = Tap::off(ours).counting(received.clone());
    peer.write_all(b"twelve bytes").await.unwrap();
    let mut got = [0u8; 12];
    tap.read_exact(&mut got).await.unwrap();
    tap.write_all(b"out").await.unwrap();
    assert_eq!(received.load(std::sync::atomic::Ordering::Relaxed), 12);
}

/// Issue 45: `telemon serve --record DIR` that failed to start left a 0-byte `.pcapng`. A file is created with
/// its first record: a recorder that records nothing leaves no file, and a bad destination still fails at start.
#[test]
fn a_recorder_that_records_nothing_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let rotated = dir.path().join("rotated");
    let config = RecorderConfig::new(Destination::Dir(rotated.clone()), "test");
    let stats = Recorder::start(config).unwrap().finish();
    assert_eq!(stats.files, 0);
    assert_eq!(
        recordings(&rotated),
        Vec::<std::path::PathBuf>::new(),
        "the directory is made, no file in it"
    );
    let one = dir.path().join("one.pcapng");
    let recorder = Recorder::start(RecorderConfig::new(Destination::File(one.clone()), "test")).unwrap();
    let _target = recorder.target(Target::new("t", link_type::SMON, "-"));
    recorder.finish();
    assert!(!one.exists(), "a target registered but never recorded");
    // Dropped without finishing (a command that returns early): nothing either.
    drop(Recorder::start(RecorderConfig::new(Destination::File(one.clone()), "test")).unwrap());
    assert!(!one.exists());

    // The first record creates the file; an existing recording is appended to only when there is something new.
    let recorder = Recorder::start(RecorderConfig::new(Destination::File(one.clone()), "test")).unwrap();
    recorder.target(Target::new("t", link_type::SMON, "-")).data(Direction::Inbound, b"x");
    recorder.finish();
    let len = one.metadata().unwrap().len();
    Recorder::start(RecorderConfig::new(Destination::File(one.clone()), "test")).unwrap().finish();
    assert_eq!(one.metadata().unwrap().len(), len, "no empty section appended");

    // What cannot be recorded to is refused at start, and left as it was.
    let foreign = dir.path().join("hostname");
    std::fs::write(&foreign, b"vm\n").unwrap();
    let err = Recorder::start(RecorderConfig::new(Destination::File(foreign.clone()), "test")).unwrap_err();
    assert!(err.to_string().contains("not a pcapng file"), "{err}");
    assert_eq!(std::fs::read(&foreign).unwrap(), b"vm\n");
    let nowhere = dir.path().join("missing").join("f.pcapng");
    assert!(Recorder::start(RecorderConfig::new(Destination::File(nowhere), "test")).is_err());
    let under_a_file = Destination::Dir(foreign.join("sub"));
    assert!(Recorder::start(RecorderConfig::new(under_a_file, "test")).is_err());
}
