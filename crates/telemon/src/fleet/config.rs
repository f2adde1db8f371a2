//! The fleet configuration: a TOML file (see the README's `telemon serve` section) or shorthand
//! flags ([`TargetArgs`]) shared by `telemon serve` and `telemon top`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::store::DEFAULT_SERIES_LIMIT;

/// A configuration that cannot be used: names the file, the line and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {key}: {message}")]
pub struct ConfigError {
    /// The config file (or `<flags>` for shorthand flags).
    pub file: String,
    /// 1-based line of the offending key (0 when unknown).
    pub line: usize,
    /// The offending key.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!("bad duration {s:?} ({e}); write e.g. \"1s\" or \"250ms\""))
    })
}

pub(super) fn one_second() -> Duration {
    Duration::from_secs(1)
}

/// `[serve]`: the exporter's own settings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// HTTP listen address.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Per-target cap on series.
    #[serde(default = "default_series_limit")]
    pub series_limit: usize,
    /// This instance's share of the targets (`"2/4"`); `None` takes every target.
    #[serde(default, deserialize_with = "shard_option")]
    pub shard: Option<Shard>,
}

fn default_listen() -> String {
    "127.0.0.1:9464".into()
}
fn default_series_limit() -> usize {
    DEFAULT_SERIES_LIMIT
}

impl Default for ServeSection {
    fn default() -> Self {
        ServeSection { listen: default_listen(), series_limit: default_series_limit(), shard: None }
    }
}

/// `[[meter161]]`: a System/161 meter socket directory, or a glob of them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Meter161Target {
    /// Unique target name.
    pub name: Spanned<String>,
    /// The directory holding `.sockets/meter`.
    pub dir: Option<PathBuf>,
    /// A glob of such directories, e.g. `/home/*/os161/root`.
    pub dir_glob: Option<String>,
    /// Sampling interval sent to sys161.
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub interval: Duration,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `[[hmon]]` (SERVE mode: telemon connects) and `[[hmon_listen]]` (POLL mode: interpreters dial in).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HmonTarget {
    /// Unique target name.
    pub name: Spanned<String>,
    /// SERVE mode: the interpreter's address.
    pub connect: Option<String>,
    /// POLL mode: where interpreters dial in.
    pub listen: Option<String>,
    /// Facts to poll (default all).
    pub facts: Option<Vec<String>>,
    /// Poll period.
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub poll: Duration,
    /// Notifications to subscribe to (default all).
    pub subscribe: Option<Vec<String>>,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `[[mono_listen]]`: Mono agents dial in; each agent is a target.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MonoTarget {
    /// Unique target name.
    pub name: Spanned<String>,
    /// Listen address.
    pub listen: String,
    /// Counters added to every agent, e.g. `Mono System/Working Set`.
    #[serde(default)]
    pub add: Vec<String>,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `[[smon]]`: a smon stream, by TCP or from a file followed as it grows.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SmonTarget {
    /// Unique target name.
    pub name: Spanned<String>,
    /// Stream address.
    pub connect: Option<String>,
    /// Stream file.
    pub file: Option<PathBuf>,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `[[sysinfo]]`: an rvOS sysinfo service.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SysinfoTarget {
    /// Unique target name.
    pub name: Spanned<String>,
    /// TCP address.
    pub connect: Option<String>,
    /// Unix socket path.
    pub socket: Option<PathBuf>,
    /// Reports to request (default all).
    pub reports: Option<Vec<String>>,
    /// Request period.
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub every: Duration,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The whole fleet configuration.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// `[serve]`.
    #[serde(default)]
    pub serve: ServeSection,
    /// `[[meter161]]` blocks.
    #[serde(default)]
    pub meter161: Vec<Meter161Target>,
    /// `[[hmon]]` blocks.
    #[serde(default)]
    pub hmon: Vec<HmonTarget>,
    /// `[[hmon_listen]]` blocks.
    #[serde(default)]
    pub hmon_listen: Vec<HmonTarget>,
    /// `[[mono_listen]]` blocks.
    #[serde(default)]
    pub mono_listen: Vec<MonoTarget>,
    /// `[[smon]]` blocks.
    #[serde(default)]
    pub smon: Vec<SmonTarget>,
    /// `[[sysinfo]]` blocks.
    #[serde(default)]
    pub sysinfo: Vec<SysinfoTarget>,
    /// `[[remote_write]]` blocks: Prometheus remote write 1.0 senders.
    #[serde(default)]
    pub remote_write: Vec<PushSection>,
    /// `[[otlp]]` blocks: OTLP/HTTP protobuf senders.
    #[serde(default)]
    pub otlp: Vec<PushSection>,
}

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

impl FleetConfig {
    /// The number of target blocks (a `dir_glob` or a listener counts once).
    pub fn blocks(&self) -> usize {
        self.meter161.len()
            + self.hmon.len()
            + self.hmon_listen.len()
            + self.mono_listen.len()
            + self.smon.len()
            + self.sysinfo.len()
    }

    /// `2 meter161, 1 hmon, ...`: the blocks per kind, for people.
    pub fn summary(&self) -> String {
        let mut s = self.target_summary();
        if !self.remote_write.is_empty() || !self.otlp.is_empty() {
            s += &format!("; pushing to {} remote_write, {} otlp", self.remote_write.len(), self.otlp.len());
        }
        s
    }

    fn target_summary(&self) -> String {
        format!(
            "{} meter161, {} hmon, {} hmon_listen, {} mono_listen, {} smon, {} sysinfo",
            self.meter161.len(),
            self.hmon.len(),
            self.hmon_listen.len(),
            self.mono_listen.len(),
            self.smon.len(),
            self.sysinfo.len()
        )
    }

    /// Reads and validates the config file at `path`.
    pub fn load(path: &Path) -> Result<FleetConfig, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: 0,
            key: "-".into(),
            message: format!("cannot read: {e}"),
        })?;
        FleetConfig::parse(&file, &text)
    }

    /// Parses and validates config `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<FleetConfig, ConfigError> {
        let cfg: FleetConfig = toml::from_str(text).map_err(|e| {
            let start = e.span().map_or(0, |s| s.start);
            let line = e.span().map_or(0, |_| line_of(text, start));
            let key = e
                .span()
                .and_then(|s| {
                    let line_start = text[..s.start.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
                    let line_text = &text[line_start..];
                    let line_text = line_text.split('\n').next().unwrap_or("");
                    match line_text.split_once('=') {
                        Some((k, _)) => Some(k.trim().to_owned()),
                        None => text.get(s.clone()).map(|k| k.trim().to_owned()),
                    }
                })
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "-".into());
            ConfigError { file: file.into(), line, key, message: e.message().trim().to_owned() }
        })?;
        cfg.validate(file, text)?;
        Ok(cfg)
    }

    fn validate(&self, file: &str, text: &str) -> Result<(), ConfigError> {
        let err = |name: &Spanned<String>, key: &str, message: String| ConfigError {
            file: file.into(),
            line: line_of(text, name.span().start),
            key: key.into(),
            message,
        };
        let mut seen: BTreeMap<&str, ()> = BTreeMap::new();
        let names = self
            .meter161
            .iter()
            .map(|t| &t.name)
            .chain(self.hmon.iter().map(|t| &t.name))
            .chain(self.hmon_listen.iter().map(|t| &t.name))
            .chain(self.mono_listen.iter().map(|t| &t.name))
            .chain(self.smon.iter().map(|t| &t.name))
            .chain(self.sysinfo.iter().map(|t| &t.name));
        for n in names {
            if n.get_ref().is_empty() || n.get_ref().contains('/') {
                return Err(err(
                    n,
                    "name",
                    format!("target name {:?} must be non-empty and without '/'", n.get_ref()),
                ));
            }
            if seen.insert(n.get_ref(), ()).is_some() {
                return Err(err(n, "name", format!("target name {:?} is used twice", n.get_ref())));
            }
        }
        for t in &self.meter161 {
            if t.dir.is_some() == t.dir_glob.is_some() {
                return Err(err(&t.name, "dir", "give exactly one of `dir` or `dir_glob`".into()));
            }
            if t.interval.is_zero() {
                return Err(err(&t.name, "interval", "must be above zero".into()));
            }
        }
        for t in &self.hmon {
            if t.connect.is_none() || t.listen.is_some() {
                return Err(err(
                    &t.name,
                    "connect",
                    "[[hmon]] takes `connect` (use [[hmon_listen]] for `listen`)".into(),
                ));
            }
        }
        for t in &self.hmon_listen {
            if t.listen.is_none() || t.connect.is_some() {
                return Err(err(
                    &t.name,
                    "listen",
                    "[[hmon_listen]] takes `listen` (use [[hmon]] for `connect`)".into(),
                ));
            }
        }
        for t in &self.hmon.iter().chain(&self.hmon_listen).collect::<Vec<_>>() {
            if t.poll.is_zero() {
                return Err(err(&t.name, "poll", "must be above zero".into()));
            }
        }
        for t in self.hmon.iter().chain(&self.hmon_listen) {
            for fact in t.facts.iter().flatten() {
                if hmon::FactKind::resolve(&hmon::IdOrName::parse_word(fact)).is_none() {
                    let known: Vec<&str> = hmon::FactKind::ALL.iter().map(|k| k.name()).collect();
                    return Err(err(
                        &t.name,
                        "facts",
                        format!("unknown fact {fact:?} (known: {})", known.join(", ")),
                    ));
                }
            }
            for event in t.subscribe.iter().flatten() {
                if hmon::EventKind::resolve(&hmon::IdOrName::parse_word(event)).is_none() {
                    let known: Vec<&str> = hmon::EventKind::ALL.iter().map(|k| k.name()).collect();
                    let message = format!("unknown event {event:?} (known: {})", known.join(", "));
                    return Err(err(&t.name, "subscribe", message));
                }
            }
        }
        for t in &self.meter161 {
            if let Some(Err(e)) = t.dir_glob.as_deref().map(glob::Pattern::new) {
                return Err(err(&t.name, "dir_glob", format!("not a glob: {e}")));
            }
            if let Err(e) = meter161::interval_ns(t.interval) {
                return Err(err(&t.name, "interval", e.to_string()));
            }
        }
        for t in &self.mono_listen {
            if let Some(bad) = t.add.iter().find(|c| mono_counters::CounterName::parse(c).is_none()) {
                return Err(err(&t.name, "add", format!("{bad:?} is not \"Category/Name\"")));
            }
        }
        for t in &self.sysinfo {
            if let Some(bad) =
                t.reports.iter().flatten().find(|r| super::collect::sysinfo::report_by_name(r).is_none())
            {
                let message = format!(
                    "unknown report {bad:?} (known: ps, memstat, kstat, channels, sched_latency, ipc_latency, watchdog)"
                );
                return Err(err(&t.name, "reports", message));
            }
        }
        for t in &self.smon {
            if t.connect.is_some() == t.file.is_some() {
                return Err(err(&t.name, "connect", "give exactly one of `connect` or `file`".into()));
            }
        }
        for t in &self.sysinfo {
            if t.connect.is_some() == t.socket.is_some() {
                return Err(err(&t.name, "connect", "give exactly one of `connect` or `socket`".into()));
            }
            if t.every.is_zero() {
                return Err(err(&t.name, "every", "must be above zero".into()));
            }
        }
        validate_push(self, file, text)?;
        if self.serve.listen.parse::<SocketAddr>().is_err() && !self.serve.listen.contains(':') {
            return Err(ConfigError {
                file: file.into(),
                line: text.lines().position(|l| l.trim_start().starts_with("listen")).map_or(0, |i| i + 1),
                key: "serve.listen".into(),
                message: format!("{:?} is not an address (HOST:PORT)", self.serve.listen),
            });
        }
        Ok(())
    }
}

use super::push_config::shard_option;
pub use super::push_config::{validate_push, BasicAuth, PushSection, Shard, TlsSection};

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
[serve]
listen = "127.0.0.1:9464"
series_limit = 10000
[[meter161]]
name = "class"
dir_glob = "/home/*/os161/root"
interval = "1s"
labels = { course = "cs161" }
[[hmon]]
name = "dyalog-a"
connect = "127.0.0.1:4512"
poll = "250ms"
[[hmon_listen]]
name = "dialers"
listen = "127.0.0.1:7000"
[[mono_listen]]
name = "mono"
listen = "127.0.0.1:8888"
add = ["Mono System/Working Set"]
[[smon]]
name = "box1"
connect = "127.0.0.1:7399"
[[sysinfo]]
name = "vm1"
connect = "127.0.0.1:7461"
reports = ["ps"]
"#;

    #[test]
    fn the_full_example_parses() {
        let c = FleetConfig::parse("t.toml", FULL).unwrap();
        assert_eq!(c.serve.series_limit, 10_000);
        assert_eq!(c.meter161[0].dir_glob.as_deref(), Some("/home/*/os161/root"));
        assert_eq!(c.meter161[0].labels["course"], "cs161");
        assert_eq!(c.hmon[0].poll, Duration::from_millis(250));
        assert_eq!(c.sysinfo[0].every, Duration::from_secs(1));
        assert_eq!(c.mono_listen[0].add, ["Mono System/Working Set"]);
    }

    #[test]
    fn unknown_facts_events_reports_and_bad_globs_are_rejected() {
        let cases = [
            ("[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nfacts = [\"Workspace\", \"Weather\"]\n", "facts"),
            ("[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nsubscribe = [\"Lunch\"]\n", "subscribe"),
            ("[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\nreports = [\"trace_clear\"]\n", "reports"),
            ("[[meter161]]\nname = \"a\"\ndir_glob = \"/home/[x\"\n", "dir_glob"),
            ("[[meter161]]\nname = \"a\"\ndir = \"/x\"\ninterval = \"5s\"\n", "interval"),
            ("[[mono_listen]]\nname = \"a\"\nlisten = \"x:1\"\nadd = [\"NoSlash\"]\n", "add"),
        ];
        for (text, key) in cases {
            let e = FleetConfig::parse("f.toml", text).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (2, key), "{e}");
        }
        let ok =
            "[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nfacts = [\"3\", \"Host\"]\nsubscribe = [\"1\"]\n";
        FleetConfig::parse("f.toml", ok).unwrap();
    }

    #[test]
    fn the_readme_example_is_a_valid_config() {
        let readme = include_str!("../../../../README.md");
        let start = readme.find("<!-- telemon.toml").expect("the README marks its example config");
        let block = &readme[start..];
        let body = &block[block.find("```toml\n").expect("a toml block") + 8..];
        let body = &body[..body.find("```").expect("the block ends")];
        let c = FleetConfig::parse("README.md", body).unwrap();
        assert_eq!(c.meter161.len() + c.hmon.len() + c.hmon_listen.len(), 4);
        assert_eq!((c.mono_listen.len(), c.smon.len(), c.sysinfo.len()), (1, 2, 1));
    }

    #[test]
    fn an_unknown_key_names_file_line_and_key() {
        let text = "[[smon]]\nname = \"a\"\nconect = \"x:1\"\n";
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.file.as_str(), e.line, e.key.as_str()), ("f.toml", 3, "conect"), "{e}");
        assert!(e.to_string().starts_with("f.toml:3: conect: "), "{e}");
    }

    #[test]
    fn a_bad_duration_names_its_key() {
        let text = "[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\nevery = \"soon\"\n";
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (4, "every"), "{e}");
    }

    #[test]
    fn duplicate_names_and_missing_sources_are_rejected_at_their_line() {
        let text = "[[smon]]\nname = \"a\"\nfile = \"/x\"\n[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\n";
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (5, "name"), "{e}");
        let text = "[[meter161]]\nname = \"m\"\n";
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (2, "dir"), "{e}");
    }
}

/// Where the fleet's targets come from: `--config FILE` and/or shorthand flags (each repeatable;
/// a shorthand target is named by its argument). Shared by `telemon serve` and `telemon top`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TargetArgs {
    /// Fleet config file (TOML; see the README).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A System/161 directory holding `.sockets/meter`.
    #[arg(long = "meter161", value_name = "DIR")]
    pub meter161: Vec<PathBuf>,
    /// A Dyalog interpreter in SERVE mode.
    #[arg(long = "hmon", value_name = "HOST:PORT")]
    pub hmon: Vec<String>,
    /// Listen for Dyalog interpreters in POLL mode.
    #[arg(long = "hmon-listen", value_name = "ADDR")]
    pub hmon_listen: Vec<String>,
    /// Listen for Mono agents.
    #[arg(long = "mono-listen", value_name = "ADDR")]
    pub mono_listen: Vec<String>,
    /// A smon stream: an address to connect to, or a file to follow.
    #[arg(long = "smon", value_name = "ADDR|FILE")]
    pub smon: Vec<String>,
    /// An rvOS sysinfo service.
    #[arg(long = "sysinfo", value_name = "ADDR")]
    pub sysinfo: Vec<String>,
}

impl TargetArgs {
    /// The config file (if any) with the shorthand targets added; errors as for a file, with
    /// `<flags>` as the file for shorthand problems (e.g. a name used twice).
    pub fn to_config(&self) -> Result<FleetConfig, ConfigError> {
        let mut cfg = match &self.config {
            Some(path) => FleetConfig::load(path)?,
            None => FleetConfig::default(),
        };
        let name = |s: &str| Spanned::new(0..0, s.to_owned());
        for d in &self.meter161 {
            cfg.meter161.push(Meter161Target {
                name: name(&d.display().to_string().replace('/', "_")),
                dir: Some(d.clone()),
                dir_glob: None,
                interval: one_second(),
                labels: BTreeMap::new(),
            });
        }
        let hmon = |a: &String, connect: bool| HmonTarget {
            name: name(a),
            connect: connect.then(|| a.clone()),
            listen: (!connect).then(|| a.clone()),
            facts: None,
            poll: one_second(),
            subscribe: None,
            labels: BTreeMap::new(),
        };
        cfg.hmon.extend(self.hmon.iter().map(|a| hmon(a, true)));
        cfg.hmon_listen.extend(self.hmon_listen.iter().map(|a| hmon(a, false)));
        cfg.mono_listen.extend(self.mono_listen.iter().map(|a| MonoTarget {
            name: name(a),
            listen: a.clone(),
            add: Vec::new(),
            labels: BTreeMap::new(),
        }));
        for a in &self.smon {
            let is_file = Path::new(a).exists() || !a.contains(':');
            cfg.smon.push(SmonTarget {
                name: name(&a.replace('/', "_")),
                connect: (!is_file).then(|| a.clone()),
                file: is_file.then(|| PathBuf::from(a)),
                labels: BTreeMap::new(),
            });
        }
        cfg.sysinfo.extend(self.sysinfo.iter().map(|a| SysinfoTarget {
            name: name(a),
            connect: Some(a.clone()),
            socket: None,
            reports: None,
            every: one_second(),
            labels: BTreeMap::new(),
        }));
        let file = self.config.as_ref().map_or("<flags>".to_owned(), |p| p.display().to_string());
        let text = match &self.config {
            Some(p) => std::fs::read_to_string(p).unwrap_or_default(),
            None => String::new(),
        };
        cfg.validate(&file, &text)?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod flag_tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        targets: TargetArgs,
    }

    #[test]
    fn shorthand_flags_make_targets_named_by_their_argument() {
        let cli = Cli::parse_from([
            "t",
            "--hmon",
            "127.0.0.1:4512",
            "--smon",
            "127.0.0.1:7399",
            "--smon",
            "/tmp/run.smon",
            "--sysinfo",
            "127.0.0.1:7461",
            "--mono-listen",
            "127.0.0.1:8888",
            "--meter161",
            "/x/root",
        ]);
        let c = cli.targets.to_config().unwrap();
        assert_eq!(c.hmon[0].name.get_ref(), "127.0.0.1:4512");
        assert_eq!(c.hmon[0].connect.as_deref(), Some("127.0.0.1:4512"));
        assert_eq!(c.smon[0].connect.as_deref(), Some("127.0.0.1:7399"));
        assert_eq!(c.smon[1].file.as_deref(), Some(Path::new("/tmp/run.smon")));
        assert_eq!(c.mono_listen[0].listen, "127.0.0.1:8888");
        assert_eq!(c.meter161[0].dir.as_deref(), Some(Path::new("/x/root")));
        let dup = Cli::parse_from(["t", "--hmon", "a:1", "--hmon", "a:1"]);
        assert_eq!(dup.targets.to_config().unwrap_err().file, "<flags>");
    }
}
