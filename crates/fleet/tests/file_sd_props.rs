//! The file_sd target-file reader under proptest: a written file reads back as written (JSON and YAML), and
//! every cut of a valid file gives groups or an error (never a panic). Arbitrary bytes and whole files
//! through the fuzz target's checks: the unit tests of `src/fuzz/tests.rs`.

use std::path::Path;

use proptest::prelude::*;
use telemon_fleet::config::file_sd::{parse_groups, Group};

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        ("[a-z][a-z0-9-]{0,12}(\\.[a-z][a-z0-9-]{0,8}){0,2}", 1u16..).prop_map(|(h, p)| format!("{h}:{p}")),
        (any::<[u8; 4]>(), 1u16..).prop_map(|(ip, p)| format!("{}:{p}", std::net::Ipv4Addr::from(ip))),
        (any::<[u16; 8]>(), 1u16..).prop_map(|(ip, p)| format!("[{}]:{p}", std::net::Ipv6Addr::from(ip))),
        // What a file may hold that is not HOST:PORT: still a string to read back.
        "\\PC{0,20}",
    ]
}

fn group() -> impl Strategy<Value = Group> {
    (
        prop::collection::vec(target(), 0..6),
        // Label values with what YAML and JSON must quote: quotes, colons, #, leading spaces, unicode.
        prop::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,10}", "[ -~é日\\\\\"':#]{0,16}", 0..4),
    )
        .prop_map(|(targets, labels)| Group { targets, labels })
}

fn yaml(groups: &[Group]) -> String {
    serde_yaml_ng::to_string(groups).expect("groups are YAML")
}

proptest! {
    #[test]
    fn a_written_file_reads_back(groups in prop::collection::vec(group(), 0..5)) {
        let json = serde_json::to_vec(&groups).unwrap();
        prop_assert_eq!(&parse_groups(Path::new("t.json"), &json).unwrap(), &groups);
        let yml = yaml(&groups);
        prop_assert_eq!(&parse_groups(Path::new("t.yml"), yml.as_bytes()).unwrap(), &groups);
    }
}

proptest! {
    // Every cut of every file: fewer cases, each is a few hundred parses.
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_cut_of_a_file_is_groups_or_an_error(groups in prop::collection::vec(group(), 1..4)) {
        for (ext, text) in [("t.json", serde_json::to_string(&groups).unwrap()), ("t.yml", yaml(&groups))] {
            let bytes = text.as_bytes();
            for cut in 0..=bytes.len() {
                // A half-written file: parsed or refused, never a panic.
                let _ = parse_groups(Path::new(ext), &bytes[..cut]);
            }
        }
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for ext in ["t.json", "t.yml"] {
        let deep = "[".repeat(100_000);
        assert!(parse_groups(Path::new(ext), deep.as_bytes()).is_err());
        let deep = "{\"a\":".repeat(50_000);
        assert!(parse_groups(Path::new(ext), deep.as_bytes()).is_err());
    }
}
