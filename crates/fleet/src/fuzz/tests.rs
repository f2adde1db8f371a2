//! The committed seed corpus of the fuzz target `fleet_file_sd` replayed through the same function on stable
//! (`cargo xtask fuzz` grows it), and that function under proptest: arbitrary bytes, and and written files
//! (the groups `tests/file_sd_props.rs` generates), in JSON and YAML, for each protocol.

use proptest::prelude::*;

use crate::config::file_sd::Group;

#[test]
fn fleet_file_sd_corpus_replays() {
    bench_harness::corpus::replay("fleet_file_sd", 4000, super::file_sd);
}

fn group() -> impl Strategy<Value = Group> {
    let target = prop_oneof![
        ("[a-z][a-z0-9-]{0,12}(\\.[a-z][a-z0-9-]{0,8}){0,2}", 1u16..).prop_map(|(h, p)| format!("{h}:{p}")),
        (any::<[u8; 4]>(), 1u16..).prop_map(|(ip, p)| format!("{}:{p}", std::net::Ipv4Addr::from(ip))),
        (any::<[u16; 8]>(), 1u16..).prop_map(|(ip, p)| format!("[{}]:{p}", std::net::Ipv6Addr::from(ip))),
        // What a file may hold that is not HOST:PORT.
        "\\PC{0,20}",
    ];
    (
        prop::collection::vec(target, 0..6),
        // Label values with what YAML and JSON must quote: quotes, colons, #, leading spaces, unicode.
        prop::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,10}", "[ -~é日\\\\\"':#]{0,16}", 0..4),
    )
        .prop_map(|(targets, labels)| Group { targets, labels })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(mut data in prop::collection::vec(any::<u8>(), 0..512), first in any::<u8>()) {
        data.insert(0, first);
        super::file_sd(&data);
    }

    /// A valid file, JSON and YAML, for each protocol the first byte picks.
    #[test]
    fn a_written_file_passes_the_checks(groups in prop::collection::vec(group(), 1..4), pick in 0u8..4) {
        let json = serde_json::to_vec(&groups).unwrap();
        let yml = serde_yaml_ng::to_string(&groups).unwrap();
        for (first, bytes) in [(pick * 2, json), (pick * 2 + 1, yml.into_bytes())] {
            let mut data = vec![first];
            data.extend_from_slice(&bytes);
            super::file_sd(&data);
        }
    }
}
