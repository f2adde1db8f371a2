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
//! (`.json`) or YAML (`.yml`, `.yaml`, in any case, as Prometheus reads them; a pattern must end in one of them).
//! Each target becomes a block of `protocol` named after the target (a meter161 directory: after its last path
//! component), with the group's labels over the block defaults' labels. A target without a port takes the
//! protocol's default port (as Prometheus applies the scheme's), and is named with it. Labels whose names begin
//! with `__` are Prometheus's meta labels and are dropped; the others are checked as config labels are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

pub use super::addr::check_host_port;
use super::check_label_name;
use crate::protocol::{address_unit, Protocols, Unit};

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

/// A target found in a file: what its block of the protocol runs. Two are equal when their blocks are.
#[derive(Debug, Clone)]
pub struct Discovered(pub Arc<dyn Unit>);

impl PartialEq for Discovered {
    fn eq(&self, other: &Discovered) -> bool {
        self.0.same(&*other.0)
    }
}

impl Discovered {
    /// The target's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }
}

impl FileSdSection {
    /// Checks the block: a protocol of `protocols` that takes addresses, and defaults that make a valid
    /// block of it. `Err((key, why))`, the key empty when the block as a whole is wrong.
    pub fn check(&self, protocols: &Protocols) -> Result<(), (String, String)> {
        if self.files.is_empty() {
            return Err(("files".into(), "give at least one file pattern".into()));
        }
        for f in &self.files {
            glob::Pattern::new(f).map_err(|e| ("files".to_owned(), format!("bad pattern {f:?}: {e}")))?;
            if !is_yaml(Path::new(f)) && !is_json(Path::new(f)) {
                let message = format!("{f:?} must end in .json, .yml or .yaml (as Prometheus's file_sd)");
                return Err(("files".into(), message));
            }
        }
        if self.refresh_interval < Duration::from_secs(1) {
            return Err(("refresh_interval".into(), "must be at least 1s".into()));
        }
        for key in ["name", "connect", "dir", "dir_glob", "listen", "socket", "file"] {
            if self.defaults.contains_key(key) {
                return Err((key.into(), "is set by each target of the files, not by [[file_sd]]".into()));
            }
        }
        let takes: Vec<&str> = protocols.iter().filter(|c| c.address().is_some()).map(|c| c.name()).collect();
        let Some(address) = protocols.get(&self.protocol).and_then(|c| c.address()) else {
            let message = format!("{:?}: file_sd takes {} targets", self.protocol, takes.join(", "));
            return Err(("protocol".into(), message));
        };
        let example = if address.default_port.is_some() { "127.0.0.1:1" } else { "/nonexistent" };
        self.block(protocols, example, &BTreeMap::new()).map(|_| ()).map_err(|m| (String::new(), m))
    }

    /// Makes the file patterns relative to `dir` (the config file's directory).
    pub fn resolve_paths(&mut self, dir: &Path) {
        for f in &mut self.files {
            if Path::new(f.as_str()).is_relative() {
                *f = dir.join(&*f).to_string_lossy().into_owned();
            }
        }
    }

    /// The block of one target with its group's `labels` (over the defaults' labels), read by its
    /// protocol as a config block is; `Err` says why, for a person.
    pub fn block(
        &self,
        protocols: &Protocols,
        target: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Discovered, String> {
        let component =
            protocols.get(&self.protocol).ok_or_else(|| format!("unknown protocol {:?}", self.protocol))?;
        let address =
            component.address().ok_or_else(|| format!("{} targets do not take an address", self.protocol))?;
        let name = address.target_name(target)?;
        address_unit(component, &name, target, labels, &self.defaults).map(Discovered)
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
    pub fn read_file(
        &self,
        protocols: &Protocols,
        path: &Path,
    ) -> Result<(Vec<Discovered>, Vec<String>), String> {
        self.read_bytes(protocols, path, &Self::bytes_of(path)?)
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
    /// message per target refused (`LINE: target "x": why`, every bad label of its group named at its
    /// line); `Err` when the bytes do not parse as a list of groups.
    pub fn read_bytes(
        &self,
        protocols: &Protocols,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Vec<Discovered>, Vec<String>), String> {
        let groups = parse_groups(path, bytes)?;
        let mut lines = Lines::new(bytes);
        let mut found = Vec::new();
        let mut refused = Vec::new();
        for group in groups {
            let at: Vec<usize> = group.targets.iter().map(|t| lines.find(t)).collect();
            let bad_labels: Vec<String> = group
                .labels
                .keys()
                .filter(|k| !k.starts_with("__"))
                .filter_map(|k| check_label_name(k).err().map(|why| format!("line {}: {why}", lines.find(k))))
                .collect();
            lines.next_group();
            for (target, line) in group.targets.iter().zip(at) {
                if !bad_labels.is_empty() {
                    refused.push(format!("{line}: target {target:?}: bad labels: {}", bad_labels.join("; ")));
                    continue;
                }
                match self.block(protocols, target, &group.labels) {
                    Ok(block) => found.push(block),
                    Err(why) => refused.push(format!("{line}: target {target:?}: {why}")),
                }
            }
        }
        Ok((found, refused))
    }
}

/// Finds the lines of a target file's strings, in the order they are asked for: each is looked for from
/// the start of its group (targets and labels come in either order), and a group starts after the last
/// string found in the one before. Text search, so a string that is not found is at the group's line.
struct Lines<'a> {
    text: std::borrow::Cow<'a, str>,
    group_start: usize,
    last_end: usize,
}

impl<'a> Lines<'a> {
    fn new(bytes: &'a [u8]) -> Lines<'a> {
        Lines { text: String::from_utf8_lossy(bytes), group_start: 0, last_end: 0 }
    }

    /// The 1-based line of `s`'s first whole occurrence in the current group.
    fn find(&mut self, s: &str) -> usize {
        let text = &self.text[self.group_start..];
        let whole = |i: usize| {
            let before = text[..i].chars().next_back();
            let after = text[i + s.len()..].chars().next();
            let edge = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || "_.:-/[]".contains(c)));
            edge(before) && edge(after)
        };
        let at = (!s.is_empty())
            .then(|| text.match_indices(s).map(|(i, _)| i).find(|&i| whole(i)))
            .flatten()
            .map_or(self.group_start, |i| {
                self.last_end = self.last_end.max(self.group_start + i + s.len());
                self.group_start + i
            });
        self.text[..at].matches('\n').count() + 1
    }

    fn next_group(&mut self) {
        self.group_start = self.last_end.max(self.group_start);
    }
}

fn is_yaml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("yml") || e.eq_ignore_ascii_case("yaml"))
}

fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// Parses a target file's groups: YAML for `.yml`/`.yaml` (in any case), JSON otherwise (as
/// Prometheus decides by the extension, lower-cased). Bad bytes are an error, never a panic; nesting is bounded by the parsers'
/// recursion limits.
pub fn parse_groups(path: &Path, bytes: &[u8]) -> Result<Vec<Group>, String> {
    if is_yaml(path) {
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
    use crate::protocol::{hmon::HmonBlock, smon::SmonBlock};

    #[allow(non_snake_case)]
    fn P() -> Protocols {
        Protocols::built_in()
    }

    fn section(text: &str) -> FileSdSection {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn groups_become_blocks_with_defaults_and_labels() {
        let s = section(
            "files = ['x/*.json']\nprotocol = 'hmon'\npoll = '2s'\nlabels = { site = 'a', room = 'b' }\n",
        );
        s.check(&P()).unwrap();
        let labels =
            BTreeMap::from([("room".to_owned(), "c".to_owned()), ("__meta_x".to_owned(), "y".to_owned())]);
        let d = s.block(&P(), "10.0.0.1:4502", &labels).unwrap();
        let t = d.0.as_any().downcast_ref::<HmonBlock>().unwrap();
        assert_eq!(t.name, "10.0.0.1:4502");
        assert_eq!(t.connect.as_deref(), Some("10.0.0.1:4502"));
        assert_eq!(t.poll, Duration::from_secs(2));
        assert_eq!(t.labels, BTreeMap::from([("room".into(), "c".into()), ("site".into(), "a".into())]));
        let bad = BTreeMap::from([("protocol".to_owned(), "x".to_owned())]);
        assert!(s.block(&P(), "10.0.0.1:4502", &bad).unwrap_err().contains("set by telemon"));
        assert!(s.block(&P(), "non sense", &BTreeMap::new()).unwrap_err().contains("HOST:PORT"));
    }

    #[test]
    fn a_target_without_a_port_takes_the_protocols_default() {
        // As Prometheus's own fixtures have it: `my.domain` beside `localhost:9090`.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("valid.yml");
        std::fs::write(&file, "- targets: ['localhost:9090', 'example.org:443']\n  labels:\n    foo: bar\n- targets: ['my.domain']\n")
            .unwrap();
        for (protocol, port) in [("hmon", 4512), ("smon", 7399), ("sysinfo", 7461)] {
            let s =
                section(&format!("files = ['{}/*.yml']\nprotocol = '{protocol}'\n", dir.path().display()));
            let (found, refused) = s.read_file(&P(), &file).unwrap();
            assert!(refused.is_empty(), "{refused:?}");
            let names: Vec<&str> = found.iter().map(Discovered::name).collect();
            assert_eq!(names, ["localhost:9090", "example.org:443", &format!("my.domain:{port}")]);
        }
        let s = section("files = ['x/*.json']\nprotocol = 'smon'\n");
        let d = s.block(&P(), "[::1]", &BTreeMap::new()).unwrap();
        let t = d.0.as_any().downcast_ref::<SmonBlock>().unwrap();
        assert_eq!(t.connect.as_deref(), Some("[::1]:7399"));
        assert!(s.block(&P(), "nohost:", &BTreeMap::new()).unwrap_err().contains("HOST:PORT"));
    }

    #[test]
    fn the_extension_decides_in_any_case_and_a_pattern_must_have_one() {
        let dir = tempfile::tempdir().unwrap();
        let s = section(&format!("files = ['{}/*.YML']\nprotocol = 'smon'\n", dir.path().display()));
        s.check(&P()).unwrap();
        let upper = dir.path().join("a.YML");
        std::fs::write(&upper, "- targets: ['127.0.0.1:1']\n").unwrap();
        assert_eq!(s.read_file(&P(), &upper).unwrap().0.len(), 1, "YAML, not JSON");
        for bad in ["targets/*.txt", "targets/*", "dir/x.json.bak"] {
            let e = section(&format!("files = ['{bad}']\nprotocol = 'smon'\n")).check(&P()).unwrap_err();
            assert_eq!(e.0, "files", "{bad}");
            assert!(e.1.contains(".json, .yml or .yaml"), "{bad}: {}", e.1);
        }
        let e = crate::config::FleetConfig::parse(
            "f.toml",
            "[[file_sd]]\nprotocol = 'smon'\nfiles = ['t/*.txt']\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (3, "file_sd.files"), "{e}");
    }

    #[test]
    fn every_bad_label_is_named_at_its_line() {
        let s = section("files = ['x/*.json']\nprotocol = 'smon'\n");
        let json = "[\n  {\"targets\": [\"127.0.0.1:1\"]},\n  {\n    \"targets\": [\"127.0.0.1:2\", \"127.0.0.1:3\"],\n    \"labels\": {\n      \"my-label\": \"x\",\n      \"ok\": \"y\",\n      \"target\": \"z\"\n    }\n  },\n  {\"targets\": [\"a b\"]}\n]\n";
        let (found, refused) = s.read_bytes(&P(), Path::new("t.json"), json.as_bytes()).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(refused[0].starts_with("4: target \"127.0.0.1:2\": bad labels: line 6: "), "{}", refused[0]);
        assert!(
            refused[0].contains("\"my-label\"") && refused[0].contains("line 8: label name \"target\""),
            "{}",
            refused[0]
        );
        assert!(refused[1].starts_with("4: target \"127.0.0.1:3\""), "{}", refused[1]);
        assert!(refused[2].starts_with("11: target \"a b\": "), "{}", refused[2]);
    }

    #[test]
    fn bad_blocks_are_refused() {
        assert_eq!(section("files = ['a.json']\nprotocol = 'mono'\n").check(&P()).unwrap_err().0, "protocol");
        assert_eq!(
            section("files = ['a.json']\nprotocol = 'hmon'\nconnect = 'x:1'\n").check(&P()).unwrap_err().0,
            "connect"
        );
        assert!(section("files = ['a.json']\nprotocol = 'hmon'\npol = '1s'\n")
            .check(&P())
            .unwrap_err()
            .1
            .contains("pol"));
        assert_eq!(section("files = []\nprotocol = 'hmon'\n").check(&P()).unwrap_err().0, "files");
        assert_eq!(
            section("files = ['a.json']\nprotocol = 'smon'\nrefresh_interval = '10ms'\n")
                .check(&P())
                .unwrap_err()
                .0,
            "refresh_interval"
        );
    }

    #[test]
    fn files_in_json_and_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let s = section(&format!("files = ['{}/*']\nprotocol = 'smon'\n", dir.path().display()));
        let json = dir.path().join("a.json");
        std::fs::write(&json, r#"[{"targets": ["127.0.0.1:7399", "a b"], "labels": {"rack": "1"}}]"#)
            .unwrap();
        let (found, refused) = s.read_file(&P(), &json).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(refused.len(), 1, "{refused:?}");
        let yml = dir.path().join("b.yml");
        std::fs::write(&yml, "- targets: ['127.0.0.1:1', '127.0.0.1:2']\n  labels: {rack: '2'}\n").unwrap();
        assert_eq!(s.read_file(&P(), &yml).unwrap().0.len(), 2);
        std::fs::write(&yml, "- targets: [unclosed\n").unwrap();
        assert!(s.read_file(&P(), &yml).is_err());
        std::fs::write(&json, r#"[{"targets": [], "extra": 1}]"#).unwrap();
        assert!(s.read_file(&P(), &json).unwrap_err().contains("extra"));
        assert_eq!(s.matching_files().len(), 2);
        assert_eq!(s.watch_dirs(), vec![dir.path().to_path_buf()]);
    }
}
