//! The fleet's part of the config: every protocol's target blocks (`[[meter161]]`, `[[hmon]]`, ..., read by
//! each protocol's component, see [`crate::protocol`]) and `[[file_sd]]`. The other sections of the file
//! belong to the layers above (`[serve]` to the binary, `[[remote_write]]` and `[[otlp]]` to the push
//! senders); each layer reads its own sections of one [`Document`], and every error is `FILE:LINE: KEY: why`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::protocol::{Protocols, Unit};
use crate::store::DEFAULT_SERIES_LIMIT;

pub mod addr;
pub mod block;
pub mod document;
pub mod file_sd;
mod parse;
pub mod shard;
#[cfg(test)]
mod tests;

pub use addr::{check_host_port, check_listen, with_default_port};
pub use block::{
    check_connect, check_label_name, check_listener, check_target, duration, labels, one_second,
    opt_duration, RESERVED_LABELS,
};
pub use document::{Block, Document, Place};
pub use file_sd::{Discovered, FileSdSection};
pub use parse::{line_of, ConfigError};
pub use shard::{fnv1a64, shard_option, Shard};

/// The fleet-wide settings every unit starts with (the binary reads them from `[serve]`): a change
/// restarts every unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The most series one target keeps (`[serve] series_limit`).
    pub series_limit: usize,
    /// This instance's share of the targets (`[serve] shard`); `None` takes every target.
    pub shard: Option<Shard>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { series_limit: DEFAULT_SERIES_LIMIT, shard: None }
    }
}

/// A target block (or a glob or a listener) of the config: its section and what it runs.
#[derive(Debug, Clone)]
pub struct Target {
    /// The section it is written in (`hmon`, `hmon_listen`).
    pub section: &'static str,
    /// What it runs.
    pub unit: Arc<dyn Unit>,
}

/// The fleet's config: its target blocks and `[[file_sd]]` blocks, the protocols that read them, and the
/// settings from `[serve]`.
#[derive(Debug, Clone, Default)]
pub struct FleetConfig {
    /// Every target block (a `dir_glob` or a listener counts once), in the protocols' order, then the
    /// file's.
    pub targets: Vec<Target>,
    /// `[[file_sd]]` blocks: targets listed in files (Prometheus's file_sd format).
    pub file_sd: Vec<FileSdSection>,
    /// The protocols the targets speak (and file_sd and probes can ask for).
    pub protocols: Protocols,
    /// The fleet-wide settings.
    pub settings: Settings,
}

impl PartialEq for FleetConfig {
    fn eq(&self, other: &FleetConfig) -> bool {
        self.file_sd == other.file_sd
            && self.protocols == other.protocols
            && self.settings == other.settings
            && self.targets.len() == other.targets.len()
            && self
                .targets
                .iter()
                .zip(&other.targets)
                .all(|(a, b)| a.section == b.section && a.unit.same(&*b.unit))
    }
}

impl FleetConfig {
    /// The fleet's sections of `docs` (a config file, shorthand flags made into a document), read by
    /// `protocols`; other sections are left to the layers that own them. Target names are unique across
    /// all of them.
    pub fn read(docs: &[Document], protocols: &Protocols) -> Result<FleetConfig, ConfigError> {
        let mut config = FleetConfig { protocols: protocols.clone(), ..FleetConfig::default() };
        let mut names: BTreeMap<String, ()> = BTreeMap::new();
        for doc in docs {
            for component in protocols.iter() {
                for &section in component.sections() {
                    let read = doc.read_section(section, |block| {
                        let unit = component.read(section, &block)?;
                        if names.insert(unit.name().to_owned(), ()).is_some() {
                            let message = format!("target name {:?} is used twice", unit.name());
                            return Err(block.error("name", message));
                        }
                        Ok(Target { section, unit })
                    })?;
                    config.targets.extend(read);
                }
            }
            let file_sd = doc.read_section("file_sd", |block| {
                let mut sd: FileSdSection = block.read()?;
                sd.check(protocols).map_err(|(key, message)| block.section_error(&key, message))?;
                sd.resolve_paths(Path::new(doc.file()).parent().unwrap_or(Path::new(".")));
                Ok(sd)
            })?;
            config.file_sd.extend(file_sd);
        }
        Ok(config)
    }

    /// Parses config `text` (named `file` in errors) with the built-in protocols and default settings,
    /// reading the fleet's sections only.
    pub fn parse(file: &str, text: &str) -> Result<FleetConfig, ConfigError> {
        FleetConfig::read(&[Document::parse(file, text)?], &Protocols::built_in())
    }

    /// The sections the fleet reads: every protocol's, and `file_sd`.
    pub fn sections(protocols: &Protocols) -> Vec<&'static str> {
        protocols.sections().chain(["file_sd"]).collect()
    }

    /// The number of target blocks (a `dir_glob` or a listener counts once).
    pub fn blocks(&self) -> usize {
        self.targets.len()
    }

    /// `2 meter161, 1 hmon, ..., 1 file_sd`: the blocks per section, for people.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .protocols
            .sections()
            .map(|section| {
                let n = self.targets.iter().filter(|t| t.section == section).count();
                format!("{n} {section}")
            })
            .collect();
        if !self.file_sd.is_empty() {
            parts.push(format!("{} file_sd", self.file_sd.len()));
        }
        parts.join(", ")
    }
}
