//! `[[file_sd]]`: targets listed in files in Prometheus's file service discovery format.
//!
//! ```toml
//! [[file_sd]]
//! files = ["targets/*.json", "more/*.yml"]   # globs; relative to the config file's directory
//! protocol = "hmon"                          # hmon, smon, sysinfo (HOST:PORT targets) or meter161 (directories)
//! refresh_interval = "5m"                    # the periodic re-read behind file-system notifications
//! poll = "2s"                                # any other key is a default for every target: a key of the protocol's block
//! ```
//!
//! A target file is a list of groups, `[{"targets": ["10.0.0.1:4502", ...], "labels": {"room": "a"}}]`, in JSON
//! (`.json`) or YAML (`.yml`, `.yaml`). Each target becomes a block of `protocol` named after the target (a
//! meter161 directory: after its last path component), with the group's labels over the block defaults' labels.
//! Labels whose names begin with `__` are Prometheus's meta labels and are dropped; the others are checked as
//! config labels are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use super::addr::check_host_port;
use super::{FleetConfig, HmonTarget, Meter161Target, SmonTarget, SysinfoTarget};

/// The default `refresh_interval`, as Prometheus's.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);
/// The most targets one `[[file_sd]]` block takes (the rest are counted as errors).
pub const MAX_TARGETS_PER_BLOCK: usize = 10_000;
/// The largest target file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// One `[[file_sd]]` block.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FileSdSection {
    /// Glob patterns of target files (`*.json`, `*.yml`, `*.yaml`).
    pub files: Vec<String>,
    /// The protocol of every target found: `hmon`, `smon`, `sysinfo` or `meter161`.
    pub protocol: String,
    /// How often every file is read again, beside file-system notifications.
    #[serde(default = "default_refresh", deserialize_with = "super::parse::duration")]
    pub refresh_interval: Duration,
    /// Defaults for every target's block: any key of the protocol's block but its name and address.
    #[serde(flatten)]
    pub defaults: toml::Table,
}

fn default_refresh() -> Duration {
    DEFAULT_REFRESH
}

/// One group of a target file: its targets and the labels they share.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// `HOST:PORT` (or, for meter161, a directory) each.
    pub targets: Vec<String>,
    /// Labels of every target of the group.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A target found in a file, as a config block of its protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Discovered {
    /// A `[[meter161]]` block.
    Meter161(Meter161Target),
    /// A `[[hmon]]` block.
    Hmon(HmonTarget),
    /// A `[[smon]]` block.
    Smon(SmonTarget),
    /// A `[[sysinfo]]` block.
    Sysinfo(SysinfoTarget),
}

impl Discovered {
    /// The target's name.
    pub fn name(&self) -> &str {
        match self {
            Discovered::Meter161(t) => t.name.get_ref(),
            Discovered::Hmon(t) => t.name.get_ref(),
            Discovered::Smon(t) => t.name.get_ref(),
            Discovered::Sysinfo(t) => t.name.get_ref(),
        }
    }
}

impl FileSdSection {
    /// Checks the block: a known protocol, and defaults that make a valid block of it.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.files.is_empty() {
            return Err(("files".into(), "give at least one file pattern".into()));
        }
        for f in &self.files {
            glob::Pattern::new(f).map_err(|e| ("files".to_owned(), format!("bad pattern {f:?}: {e}")))?;
        }
        if self.refresh_interval < Duration::from_secs(1) {
            return Err(("refresh_interval".into(), "must be at least 1s".into()));
        }
        for key in ["name", "connect", "dir", "dir_glob", "listen", "socket", "file"] {
            if self.defaults.contains_key(key) {
                return Err((key.into(), "is set by each target of the files, not by [[file_sd]]".into()));
            }
        }
        let example = match self.protocol.as_str() {
            "meter161" => "/nonexistent",
            "hmon" | "smon" | "sysinfo" => "127.0.0.1:1",
            other => {
                return Err((
                    "protocol".into(),
                    format!("{other:?}: file_sd takes hmon, smon, sysinfo or meter161 targets"),
                ))
            }
        };
        self.block(example, &BTreeMap::new()).map(|_| ()).map_err(|m| ("-".to_owned(), m))
    }

    /// Makes the file patterns relative to `dir` (the config file's directory).
    pub fn resolve_paths(&mut self, dir: &Path) {
        for f in &mut self.files {
            if Path::new(f.as_str()).is_relative() {
                *f = dir.join(&*f).to_string_lossy().into_owned();
            }
        }
    }

    /// The block of one target with its group's `labels` (over the defaults' labels), checked as a
    /// config block is; `Err` says why, for a person.
    pub fn block(&self, target: &str, labels: &BTreeMap<String, String>) -> Result<Discovered, String> {
        let mut table = self.defaults.clone();
        let mut merged: toml::Table = match table.remove("labels") {
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err("labels: must be a table".into()),
            None => toml::Table::new(),
        };
        for (k, v) in labels.iter().filter(|(k, _)| !k.starts_with("__")) {
            merged.insert(k.clone(), toml::Value::String(v.clone()));
        }
        table.insert("labels".into(), toml::Value::Table(merged));
        let name = match self.protocol.as_str() {
            "meter161" => {
                let dir = Path::new(target);
                table.insert("dir".into(), toml::Value::String(target.into()));
                dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            }
            _ => {
                check_host_port(target)?;
                table.insert("connect".into(), toml::Value::String(target.into()));
                target.to_owned()
            }
        };
        table.insert("name".into(), toml::Value::String(name));
        let mut config = FleetConfig::default();
        let fail = |e: toml::de::Error| e.message().trim().to_owned();
        let text = toml::to_string(&table).map_err(|e| e.to_string())?;
        let found = match self.protocol.as_str() {
            "meter161" => Discovered::Meter161(toml::from_str(&text).map_err(fail)?),
            "hmon" => Discovered::Hmon(toml::from_str(&text).map_err(fail)?),
            "smon" => Discovered::Smon(toml::from_str(&text).map_err(fail)?),
            _ => Discovered::Sysinfo(toml::from_str(&text).map_err(fail)?),
        };
        match &found {
            Discovered::Meter161(t) => config.meter161.push(t.clone()),
            Discovered::Hmon(t) => config.hmon.push(t.clone()),
            Discovered::Smon(t) => config.smon.push(t.clone()),
            Discovered::Sysinfo(t) => config.sysinfo.push(t.clone()),
        }
        config.validate().map_err(|e| format!("{}: {}", e.key, e.message))?;
        Ok(found)
    }

    /// The files the patterns match now, sorted.
    pub fn matching_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> =
            self.files.iter().filter_map(|p| glob::glob(p).ok()).flatten().filter_map(Result::ok).collect();
        files.sort();
        files.dedup();
        files
    }

    /// The directories to watch for changes: each pattern's longest leading part without glob
    /// characters (its parent directory when that part is a file).
    pub fn watch_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .files
            .iter()
            .map(|p| {
                let mut dir = PathBuf::new();
                for part in Path::new(p).components() {
                    let s = part.as_os_str().to_string_lossy();
                    if s.contains(['*', '?', '[']) {
                        return dir;
                    }
                    dir.push(part);
                }
                dir.parent().map(Path::to_path_buf).unwrap_or_default()
            })
            .map(|d| if d.as_os_str().is_empty() { PathBuf::from(".") } else { d })
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Reads one target file: its targets as blocks, and a message per target that was refused.
    /// `Err` when the file cannot be read or parsed at all.
    pub fn read_file(&self, path: &Path) -> Result<(Vec<Discovered>, Vec<String>), String> {
        self.read_bytes(path, &Self::bytes_of(path)?)
    }

    /// A target file's bytes, at most [`MAX_FILE_BYTES`].
    fn bytes_of(path: &Path) -> Result<Vec<u8>, String> {
        use std::io::Read as _;
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
        }
        Ok(bytes)
    }

    /// The targets of a target file's `bytes` (`path` tells JSON from YAML by its extension), and a
    /// message per target refused; `Err` when the bytes do not parse as a list of groups.
    pub fn read_bytes(&self, path: &Path, bytes: &[u8]) -> Result<(Vec<Discovered>, Vec<String>), String> {
        let groups = parse_groups(path, bytes)?;
        let mut found = Vec::new();
        let mut refused = Vec::new();
        for group in groups {
            for target in &group.targets {
                match self.block(target, &group.labels) {
                    Ok(block) => found.push(block),
                    Err(why) => refused.push(format!("target {target:?}: {why}")),
                }
            }
        }
        Ok((found, refused))
    }
}

/// Parses a target file's groups: YAML for `.yml`/`.yaml`, JSON otherwise (as Prometheus decides by
/// the extension). Bad bytes are an error, never a panic; nesting is bounded by the parsers'
/// recursion limits.
pub fn parse_groups(path: &Path, bytes: &[u8]) -> Result<Vec<Group>, String> {
    let yaml = path.extension().is_some_and(|e| e == "yml" || e == "yaml");
    if yaml {
        // An empty YAML document is an empty list.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        serde_yaml_ng::from_slice(bytes).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> FileSdSection {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn groups_become_blocks_with_defaults_and_labels() {
        let s = section(
            "files = ['x/*.json']\nprotocol = 'hmon'\npoll = '2s'\nlabels = { site = 'a', room = 'b' }\n",
        );
        s.check().unwrap();
        let labels =
            BTreeMap::from([("room".to_owned(), "c".to_owned()), ("__meta_x".to_owned(), "y".to_owned())]);
        let Discovered::Hmon(t) = s.block("10.0.0.1:4502", &labels).unwrap() else { panic!() };
        assert_eq!(t.name.get_ref(), "10.0.0.1:4502");
        assert_eq!(t.connect.as_deref(), Some("10.0.0.1:4502"));
        assert_eq!(t.poll, Duration::from_secs(2));
        assert_eq!(t.labels, BTreeMap::from([("room".into(), "c".into()), ("site".into(), "a".into())]));
        let bad = BTreeMap::from([("protocol".to_owned(), "x".to_owned())]);
        assert!(s.block("10.0.0.1:4502", &bad).unwrap_err().contains("set by telemon"));
        assert!(s.block("nonsense", &BTreeMap::new()).unwrap_err().contains("HOST:PORT"));
    }

    #[test]
    fn bad_blocks_are_refused() {
        assert_eq!(section("files = ['a']\nprotocol = 'mono'\n").check().unwrap_err().0, "protocol");
        assert_eq!(
            section("files = ['a']\nprotocol = 'hmon'\nconnect = 'x:1'\n").check().unwrap_err().0,
            "connect"
        );
        assert!(section("files = ['a']\nprotocol = 'hmon'\npol = '1s'\n")
            .check()
            .unwrap_err()
            .1
            .contains("pol"));
        assert_eq!(section("files = []\nprotocol = 'hmon'\n").check().unwrap_err().0, "files");
        assert_eq!(
            section("files = ['a']\nprotocol = 'smon'\nrefresh_interval = '10ms'\n").check().unwrap_err().0,
            "refresh_interval"
        );
    }

    #[test]
    fn files_in_json_and_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let s = section(&format!("files = ['{}/*']\nprotocol = 'smon'\n", dir.path().display()));
        let json = dir.path().join("a.json");
        std::fs::write(&json, r#"[{"targets": ["127.0.0.1:7399", "bad"], "labels": {"rack": "1"}}]"#)
            .unwrap();
        let (found, refused) = s.read_file(&json).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(refused.len(), 1, "{refused:?}");
        let yml = dir.path().join("b.yml");
        std::fs::write(&yml, "- targets: ['127.0.0.1:1', '127.0.0.1:2']\n  labels: {rack: '2'}\n").unwrap();
        assert_eq!(s.read_file(&yml).unwrap().0.len(), 2);
        std::fs::write(&yml, "- targets: [unclosed\n").unwrap();
        assert!(s.read_file(&yml).is_err());
        std::fs::write(&json, r#"[{"targets": [], "extra": 1}]"#).unwrap();
        assert!(s.read_file(&json).unwrap_err().contains("extra"));
        assert_eq!(s.matching_files().len(), 2);
        assert_eq!(s.watch_dirs(), vec![dir.path().to_path_buf()]);
    }
}
