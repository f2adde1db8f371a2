//! The bodies of the fleet's fuzz targets (`fuzz/fuzz_targets/fleet_*.rs`), here so that the unit
//! tests (`fuzz/tests.rs`) replay their seed corpora on stable through the same code. Built only under
//! `cfg(fuzzing)` and in tests.

use std::path::Path;

use crate::config::file_sd::{parse_groups, FileSdSection};

/// `fleet_file_sd`: a target file. The first byte picks the format (even: JSON, odd: YAML) and the
/// protocol; the rest is the file. Parsing gives groups or an error, never a panic; every target found
/// is a block of the protocol whose name and address come from the file, and one refused says why.
pub fn file_sd(data: &[u8]) {
    let Some((&first, bytes)) = data.split_first() else { return };
    let path = Path::new(if first % 2 == 0 { "t.json" } else { "t.yml" });
    let protocol = ["hmon", "smon", "sysinfo", "meter161"][usize::from(first / 2 % 4)];
    let section: FileSdSection =
        toml::from_str(&format!("files = ['x/*']\nprotocol = '{protocol}'\n")).expect("a valid block");
    let Ok(groups) = parse_groups(path, bytes) else { return };
    let protocols = crate::protocol::Protocols::built_in();
    let (found, refused) = section.read_bytes(&protocols, path, bytes).expect("the same bytes parse again");
    let targets: usize = groups.iter().map(|g| g.targets.len()).sum();
    assert_eq!(found.len() + refused.len(), targets, "every target is found or refused");
    for target in &found {
        assert!(!target.name().is_empty() && !target.name().contains('/'), "{:?}", target.name());
    }
    for why in &refused {
        assert!(!why.is_empty());
    }
}

#[cfg(test)]
mod tests;
