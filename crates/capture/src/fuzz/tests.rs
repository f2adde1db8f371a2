//! The committed seed corpus of the fuzz target `capture_read` replayed through the same function on stable,
//! and that function under proptest: arbitrary bytes, and valid recordings with a few bytes changed.

use proptest::prelude::*;

use crate::{link_type, Direction, Record, RecordKind, Target, Writer};

#[test]
fn capture_read_corpus_replays() {
    bench_harness::corpus::replay("capture_read", 1, super::read);
}

/// A valid recording: one section of `targets`, with `records` (interface index modulo the targets).
fn recording(app: &str, targets: &[Target], records: &[(u32, u64, bool, Vec<u8>)]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), app).unwrap();
    for t in targets {
        w.interface(t).unwrap();
    }
    for (interface, time_ns, inbound, bytes) in records {
        let kind = match bytes.first() {
            None => RecordKind::Open,
            Some(0) => RecordKind::Close,
            Some(_) => RecordKind::Data {
                direction: if *inbound { Direction::Inbound } else { Direction::Outbound },
                bytes: bytes.clone(),
            },
        };
        let interface = interface % targets.len() as u32;
        w.record(&Record { interface, time_ns: *time_ns, dropped: 0, kind }).unwrap();
    }
    w.into_inner()
}

fn target() -> impl Strategy<Value = Target> {
    let link = prop_oneof![
        Just(link_type::METER161),
        Just(link_type::HMON),
        Just(link_type::MONO),
        Just(link_type::SMON),
        Just(link_type::SYSINFO),
    ];
    ("[a-z0-9/._-]{0,20}", link, "\\PC{0,30}").prop_map(|(name, link_type, address)| Target {
        name,
        link_type,
        address,
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        super::read(&data);
    }

    #[test]
    fn mutated_recordings_never_panic(
        app in "[ -~]{0,20}",
        targets in proptest::collection::vec(target(), 1..4),
        records in proptest::collection::vec(
            (any::<u32>(), any::<u64>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200)),
            0..20,
        ),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut file = recording(&app, &targets, &records);
        super::read(&file);
        for (i, b) in flips {
            let at = i.index(file.len());
            file[at] = b;
        }
        super::read(&file);
    }
}
