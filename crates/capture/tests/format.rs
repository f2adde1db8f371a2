//! Round trips, damage and bounds of the pcapng reader and writer.

use proptest::prelude::*;
use telemon_capture::{
    link_type, prepare_append, Capture, Direction, Event, Limits, ReadError, Reader, Record, RecordKind,
    Target, Warning, Writer,
};

fn target_strategy() -> impl Strategy<Value = Target> {
    (
        "[a-z0-9/._-]{0,20}",
        prop_oneof![
            Just(link_type::METER161),
            Just(link_type::HMON),
            Just(link_type::MONO),
            Just(link_type::SMON),
            Just(link_type::SYSINFO),
        ],
        "\\PC{0,30}",
    )
        .prop_map(|(name, link_type, address)| Target { name, link_type, address })
}

fn kind_strategy() -> impl Strategy<Value = RecordKind> {
    prop_oneof![
        Just(RecordKind::Open),
        Just(RecordKind::Close),
        Just(RecordKind::PeerClosed),
        (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200)).prop_map(|(inbound, bytes)| {
            RecordKind::Data {
                direction: if inbound { Direction::Inbound } else { Direction::Outbound },
                bytes,
            }
        }),
    ]
}

/// A recording: sections, each with targets and records on them.
fn sections_strategy() -> impl Strategy<Value = Vec<(String, Vec<Target>, Vec<Record>)>> {
    proptest::collection::vec(
        ("[ -~]{0,20}", proptest::collection::vec(target_strategy(), 1..4)).prop_flat_map(
            |(app, targets)| {
                let n = targets.len() as u32;
                let records = proptest::collection::vec(
                    (0..n, any::<u64>(), prop_oneof![Just(0u64), any::<u64>()], kind_strategy()).prop_map(
                        |(interface, time_ns, dropped, kind)| Record { interface, time_ns, dropped, kind },
                    ),
                    0..20,
                );
                (Just(app), Just(targets), records)
            },
        ),
        1..3,
    )
}

fn write_file(sections: &[(String, Vec<Target>, Vec<Record>)]) -> (Vec<u8>, Vec<u64>) {
    let mut out = Vec::new();
    let mut ends = Vec::new();
    for (app, targets, records) in sections {
        let mut w = Writer::new(Vec::new(), app).unwrap();
        for t in targets {
            w.interface(t).unwrap();
        }
        let mut block_ends = vec![w.bytes_written()];
        for r in records {
            w.record(r).unwrap();
            block_ends.push(w.bytes_written());
        }
        let base = out.len() as u64;
        out.extend_from_slice(&w.into_inner());
        ends.extend(block_ends.iter().map(|e| base + e));
    }
    (out, ends)
}

proptest! {
    #[test]
    fn round_trip(sections in sections_strategy()) {
        let (file, _) = write_file(&sections);
        let capture = Capture::from_bytes(&file, Limits::default());
        prop_assert_eq!(&capture.warning, &None);
        let back: Vec<_> = capture
            .sections
            .iter()
            .map(|s| (s.application.clone().unwrap_or_default(), s.targets.clone(), s.records.clone()))
            .collect();
        prop_assert_eq!(back, sections);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes_at_any_split(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        split in 1usize..40,
    ) {
        let mut reader = Reader::new(Limits { max_block: 256, max_interfaces: 4 });
        let mut buf = Vec::new();
        for chunk in data.chunks(split) {
            buf.extend_from_slice(chunk);
            loop {
                match reader.read(&buf) {
                    Ok(Some((used, _))) => { buf.drain(..used); }
                    Ok(None) => { prop_assert!(buf.len() < 256); break; }
                    Err(_) => break,
                }
            }
        }
    }

    /// A file cut at every byte offset of its last record reads every record before it, with a warning
    /// saying where the cut is (none when the cut falls exactly between blocks).
    #[test]
    fn a_file_cut_anywhere_in_its_last_record_reads_up_to_the_cut(sections in sections_strategy()) {
        let (file, ends) = write_file(&sections);
        let all = Capture::from_bytes(&file, Limits::default());
        let total: usize = all.sections.iter().map(|s| s.records.len()).sum();
        prop_assume!(total > 0 && !sections.last().unwrap().2.is_empty());
        let last_start = ends[ends.len() - 2];
        for cut in last_start..=file.len() as u64 {
            let capture = Capture::from_bytes(&file[..cut as usize], Limits::default());
            let read: usize = capture.sections.iter().map(|s| s.records.len()).sum();
            if cut == file.len() as u64 {
                prop_assert_eq!(read, total);
                prop_assert_eq!(&capture.warning, &None);
            } else {
                prop_assert_eq!(read, total - 1, "cut at {}", cut);
                let expected = if cut == last_start {
                    None
                } else {
                    Some(Warning::Truncated { offset: last_start, bytes: cut - last_start })
                };
                prop_assert_eq!(&capture.warning, &expected);
            }
            // Everything before the last record is still all there.
            let before: Vec<_> = capture.records().map(|(t, r)| (t.clone(), r.clone())).collect();
            let expect: Vec<_> = all.records().take(read).map(|(t, r)| (t.clone(), r.clone())).collect();
            prop_assert_eq!(before, expect);
        }
    }
}

#[test]
fn a_block_longer_than_the_limit_is_refused_on_its_length_field() {
    let mut file = Vec::new();
    telemon_capture::encode_section_header(&mut file, "t");
    let at = file.len() as u64;
    file.extend_from_slice(&6u32.to_le_bytes());
    file.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    file.extend_from_slice(&[0; 4]);
    let capture = Capture::from_bytes(&file, Limits::default());
    assert_eq!(
        capture.warning,
        Some(Warning::Damaged {
            offset: at,
            error: ReadError::BlockTooLarge { offset: at, len: 0xFFFF_FFF0, max: 1 << 20 }
        })
    );
}

#[test]
fn other_files_are_not_pcapng() {
    let file = b"\xd4\xc3\xb2\xa1 classic pcap file";
    let capture = Capture::from_bytes(file, Limits::default());
    let first = file[..telemon_capture::NOT_PCAPNG_SHOWN].to_vec();
    assert_eq!(capture.warning, Some(Warning::Damaged { offset: 0, error: ReadError::NotPcapng { first } }));
    assert!(capture.sections.is_empty());
}

/// Issue 45: a file shorter than a block header (`/etc/hostname`) is not a recording cut at byte 0.
#[test]
fn a_short_file_that_does_not_start_like_a_section_header_is_not_pcapng() {
    let capture = Capture::from_bytes(b"vm\n", Limits::default());
    let error = ReadError::NotPcapng { first: b"vm\n".to_vec() };
    assert_eq!(error.to_string(), r#"not a pcapng file: it starts with "vm\n", not a section header"#);
    assert_eq!(capture.warning, Some(Warning::Damaged { offset: 0, error }));
    // One byte tells: the reader does not wait for a block header it will not get.
    assert_eq!(Reader::new(Limits::default()).read(b"v"), Err(ReadError::NotPcapng { first: b"v".to_vec() }));
    // The first bytes of a section header, cut, are a cut recording; nothing at all is an empty one.
    let cut = Capture::from_bytes(&[0x0A, 0x0D, 0x0D], Limits::default());
    assert_eq!(cut.warning, Some(Warning::Truncated { offset: 0, bytes: 3 }));
    assert_eq!(Capture::from_bytes(b"", Limits::default()), Capture::default());
}

#[test]
fn big_endian_sections_read_too() {
    // A section header, an interface (if_name "be", if_tsresol 6) and a 4-byte inbound packet, big-endian.
    let mut f: Vec<u8> = Vec::new();
    let be32 = |v: u32| v.to_be_bytes();
    f.extend(be32(0x0A0D0D0A));
    f.extend(be32(28));
    f.extend(be32(0x1A2B3C4D));
    f.extend([0, 1, 0, 0]);
    f.extend((-1i64).to_be_bytes());
    f.extend(be32(28));
    f.extend(be32(1));
    f.extend(be32(36));
    f.extend(149u16.to_be_bytes());
    f.extend([0, 0, 0, 0, 0, 0]);
    f.extend([0, 2, 0, 2, b'b', b'e', 0, 0]);
    f.extend([0, 9, 0, 1, 6, 0, 0, 0]);
    f.extend(be32(36));
    f.extend(be32(6));
    f.extend(be32(44));
    f.extend(be32(0));
    f.extend(be32(0));
    f.extend(be32(1_000_000));
    f.extend(be32(4));
    f.extend(be32(4));
    f.extend(*b"ABCD");
    f.extend([0, 2, 0, 4]);
    f.extend(be32(1));
    f.extend(be32(44));
    let capture = Capture::from_bytes(&f, Limits::default());
    assert_eq!(capture.warning, None);
    let (t, r) = capture.records().next().unwrap();
    assert_eq!(t, &Target::new("be", link_type::MONO, ""));
    assert_eq!(r.time_ns, 1_000_000_000);
    assert_eq!(r.kind, RecordKind::Data { direction: Direction::Inbound, bytes: b"ABCD".to_vec() });
}

#[test]
fn long_writes_are_split_into_records_of_at_most_64k() {
    let mut w = Writer::new(Vec::new(), "t").unwrap();
    let i = w.interface(&Target::new("x", link_type::SMON, "-")).unwrap();
    let bytes: Vec<u8> = (0..200_000u32).map(|n| n as u8).collect();
    w.record(&Record {
        interface: i,
        time_ns: 5,
        dropped: 2,
        kind: RecordKind::Data { direction: Direction::Outbound, bytes: bytes.clone() },
    })
    .unwrap();
    let capture = Capture::from_bytes(&w.into_inner(), Limits::default());
    let records = &capture.sections[0].records;
    assert_eq!(records.len(), 4);
    assert_eq!(records.iter().map(|r| r.dropped).collect::<Vec<_>>(), [2, 0, 0, 0]);
    let conns = capture.connections(None);
    assert_eq!(conns[0].bytes(Direction::Outbound), bytes);
}

#[test]
fn appending_cuts_a_crashed_tail_and_starts_a_new_section() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.pcapng");
    let target = Target::new("t", link_type::METER161, "/x");
    let rec = |n: u8| Record {
        interface: 0,
        time_ns: u64::from(n),
        dropped: 0,
        kind: RecordKind::Data { direction: Direction::Inbound, bytes: vec![n; 10] },
    };
    let mut w = Writer::new(Vec::new(), "one").unwrap();
    w.interface(&target).unwrap();
    w.record(&rec(1)).unwrap();
    w.record(&rec(2)).unwrap();
    let mut bytes = w.into_inner();
    let whole = bytes.len() as u64;
    bytes.truncate(bytes.len() - 7); // a crash in the middle of the second record
    std::fs::write(&path, &bytes).unwrap();

    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let check = prepare_append(&mut file).unwrap();
    assert_eq!(check.cut, whole - 7 - check.kept);
    let mut w = Writer::new(file, "two").unwrap();
    w.interface(&target).unwrap();
    w.record(&rec(3)).unwrap();
    drop(w);

    let capture = Capture::from_file(&path, Limits::default()).unwrap();
    assert_eq!(capture.warning, None);
    let apps: Vec<_> = capture.sections.iter().map(|s| s.application.clone().unwrap()).collect();
    assert_eq!(apps, ["one", "two"]);
    let times: Vec<u64> = capture.records().map(|(_, r)| r.time_ns).collect();
    assert_eq!(times, [1, 3]);

    std::fs::write(&path, b"not a recording").unwrap();
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    assert!(prepare_append(&mut file).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), b"not a recording", "left alone");
}

#[test]
fn unknown_blocks_are_skipped() {
    let mut f = Vec::new();
    telemon_capture::encode_section_header(&mut f, "t");
    // An Interface Statistics Block (type 5) of 16 bytes.
    f.extend(5u32.to_le_bytes());
    f.extend(16u32.to_le_bytes());
    f.extend([0; 4]);
    f.extend(16u32.to_le_bytes());
    let mut reader = Reader::new(Limits::default());
    let (used, first) = reader.read(&f).unwrap().unwrap();
    assert!(matches!(first, Event::Section { .. }));
    assert_eq!(reader.read(&f[used..]).unwrap(), Some((16, Event::Skipped { block_type: 5 })));
}
