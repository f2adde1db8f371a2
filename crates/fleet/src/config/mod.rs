//! The fleet's part of the config: every protocol's target blocks (`[[meter161]]`, `[[hmon]]`, ..., read by
//! each protocol's component, see [`crate::protocol`]) and `[[file_sd]]`. The other sections of the file
//! belong to the layers above (`[serve]` to the binary, `[[remote_write]]` and `[[otlp]]` to the push
//! senders); each layer reads its own sections of one [`Document`], and every error is `FILE:LINE: KEY: why`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserializer;

use crate::protocol::{Protocols, Unit};
use crate::store::DEFAULT_SERIES_LIMIT;

mod addr;
pub mod document;
pub mod file_sd;
mod parse;
mod shard;
#[cfg(test)]
mod tests;

pub use addr::{check_host_port, check_listen, with_default_port};
pub use document::{Block, Document, Place};
pub use file_sd::{Discovered, FileSdSection};
pub use parse::{line_of, ConfigError};
pub use shard::{fnv1a64, shard_option, Shard};

/// A block's configured labels, as a target carries them.
pub fn labels(l: &BTreeMap<String, String>) -> Vec<(String, String)> {
    l.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A humantime duration ("1s", "250ms").
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse::duration(d)
}

/// An optional humantime duration.
pub fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    parse::duration(d).map(Some)
}

/// One second: the default of several periods.
pub fn one_second() -> Duration {
    Duration::from_secs(1)
}

/// Label names that telemon sets itself (every label named in `docs/metrics.md`, plus `le` and
/// `quantile`): a configured or peer-supplied label may not take one of them, or a line would carry
/// the name twice and Prometheus would reject the whole scrape.
pub const RESERVED_LABELS: &[&str] = &[
    "bitwidth",
    "category",
    "channel",
    "counter",
    "counters",
    "dir",
    "event",
    "field",
    "index",
    "kind",
    "le",
    "listener",
    "name",
    "pid",
    "protocol",
    "quantile",
    "reason",
    "result",
    "runtime",
    "sender",
    "session_uuid",
    "side",
    "state",
    "tag",
    "target",
    "task",
    "unicode",
    "value",
    "version",
    "window",
    "wsid",
];

/// Checks a label name from the config or from a peer: it must match `[a-zA-Z_][a-zA-Z0-9_]*`, must
/// not begin with `__` (reserved by Prometheus) and must not be one of [`RESERVED_LABELS`]. The
/// error says why, for a person.
pub fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("label name {name:?} must match [a-zA-Z_][a-zA-Z0-9_]*"));
    }
    if name.starts_with("__") {
        return Err(format!("label name {name:?} must not begin with \"__\" (reserved by Prometheus)"));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!("label name {name:?} is set by telemon itself; choose another"));
    }
    Ok(())
}

/// Checks what every target block has: a name (non-empty, without `/`) and label names that Prometheus
/// and telemon take.
pub fn check_target(block: &Place, name: &str, labels: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    if name.is_empty() || name.contains('/') {
        return Err(block.error("name", format!("target name {name:?} must be non-empty and without '/'")));
    }
    for key in labels.keys() {
        if let Err(message) = check_label_name(key) {
            let at = format!("labels.{key}");
            return Err(ConfigError { line: block.line(&at), ..block.error(&at, message) });
        }
    }
    Ok(())
}

/// A block's `connect` address, checked: `HOST:PORT`, or `HOST` with the protocol's `default_port`.
pub fn check_connect(block: &Place, connect: Option<&str>, default_port: u16) -> Result<String, ConfigError> {
    let connect = connect.unwrap_or_default();
    with_default_port(connect, default_port).map(|a| a.into_owned()).map_err(|m| block.error("connect", m))
}

/// A dial-in listener's keys (`[[hmon_listen]]`, `[[mono_listen]]`), checked.
pub fn check_listener(
    block: &Place,
    listen: Option<&str>,
    max_targets: Option<usize>,
    allow: Option<&[String]>,
    hello_timeout: Option<Duration>,
) -> Result<(), ConfigError> {
    check_listen(listen.unwrap_or_default()).map_err(|m| block.error("listen", m))?;
    crate::collect::dialin::ListenerLimits::new(max_targets, allow, hello_timeout)
        .map(|_| ())
        .map_err(|(key, message)| block.error(key, message))
}

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
