//! The fleet configuration: a TOML file (see the README's `telemon serve` section) or shorthand
//! flags ([`TargetArgs`]) shared by `telemon serve` and `telemon top`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use sysinfo_wire::SysinfoCommand;
use toml::Spanned;

use crate::pace;
use crate::store::DEFAULT_SERIES_LIMIT;

mod addr;
pub mod file_sd;
mod parse;
pub mod probe;
pub mod push;
#[cfg(test)]
mod push_tests;

pub use addr::{check_host_port, check_listen, with_default_port};
pub use file_sd::{Discovered, FileSdSection};
pub use parse::ConfigError;
use parse::{duration, line_of, one_second};
use probe::probe_allow;
pub use probe::ProbeAllow;
use push::shard_option;
pub use push::{validate_push, BasicAuth, PushSection, Shard, TlsSection, WhenFull};

/// A block's configured labels, as a target carries them.
pub(crate) fn labels(l: &BTreeMap<String, String>) -> Vec<(String, String)> {
    l.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

fn sysinfo_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

/// The reports collected by default: every one that maps onto metrics.
/// (The sysinfo collector's defaults; a block's `reports` are checked against them here.)
pub const DEFAULT_REPORTS: [SysinfoCommand; 7] = [
    SysinfoCommand::Ps,
    SysinfoCommand::Memstat,
    SysinfoCommand::Kstat,
    SysinfoCommand::Channels,
    SysinfoCommand::SchedLatency,
    SysinfoCommand::IpcLatency,
    SysinfoCommand::Watchdog,
];

/// How long one round of requests may take by default, whatever the reports' periods: a reply that
/// is late for its period is still a reply (the service's own request deadline is 5 s too).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The report named `name` (`ps`, `memstat`, `kstat`, `channels`, `sched_latency`, `ipc_latency`,
/// `watchdog`; case, `_` and `-` do not matter).
pub fn report_by_name(name: &str) -> Option<SysinfoCommand> {
    let want: String = name.chars().filter(|c| *c != '_' && *c != '-').collect();
    DEFAULT_REPORTS.into_iter().find(|c| format!("{c:?}").eq_ignore_ascii_case(&want))
}

/// A `[[sysinfo]]` block's `reports`: a list, each report at the block's `every`, or a table giving
/// each report its own period (`reports = { ps = "1s", memstat = "10s" }`).
#[derive(Debug, Clone, PartialEq)]
pub enum Reports {
    /// `reports = ["ps", "kstat"]`: every one at `every`.
    List(Vec<String>),
    /// `reports = { ps = "1s", memstat = "10s" }`: each at its own period (in the order the TOML
    /// parser gives, which is by name).
    Each(Vec<(String, Duration)>),
}

impl Reports {
    /// The report names.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Reports::List(l) => l.iter().map(String::as_str).collect(),
            Reports::Each(e) => e.iter().map(|(n, _)| n.as_str()).collect(),
        }
    }

    /// Each report with its period, `every` where the block gives none.
    pub fn periods(&self, every: Duration) -> Vec<(&str, Duration)> {
        match self {
            Reports::List(l) => l.iter().map(|n| (n.as_str(), every)).collect(),
            Reports::Each(e) => e.iter().map(|(n, d)| (n.as_str(), *d)).collect(),
        }
    }
}

impl<'de> Deserialize<'de> for Reports {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Reports;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of reports, or a table of report = \"period\"")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Reports, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(Reports::List(names))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Reports, A::Error> {
                let mut each: Vec<(String, Duration)> = Vec::new();
                while let Some((name, period)) = map.next_entry::<String, String>()? {
                    let d = humantime::parse_duration(&period).map_err(|e| {
                        serde::de::Error::custom(format!(
                            "report {name:?}: bad duration {period:?} ({e}); write e.g. \"1s\" or \"250ms\""
                        ))
                    })?;
                    if d.is_zero() {
                        return Err(serde::de::Error::custom(format!(
                            "report {name:?}: the period must be above zero"
                        )));
                    }
                    each.push((name, d));
                }
                Ok(Reports::Each(each))
            }
        }
        d.deserialize_any(Visitor)
    }
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
    /// The most HTTP connections open at once; more are refused at once (and counted). The cap
    /// in force is also bounded by a share of the open-file limit, see `telemon::http`.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// How long an HTTP connection may take to send a request's headers, and may stay idle
    /// between requests (keep-alive).
    #[serde(default = "default_idle_timeout", deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// How long the collectors' thread may let events wait so that one wake-up handles many
    /// (`serve`, `top` and `record`; see [`crate::pace`]). `"0s"` wakes for each event; at
    /// most [`pace::MAX_WAKEUP_SLACK`].
    #[serde(default = "default_wakeup_slack", deserialize_with = "duration")]
    pub wakeup_slack: Duration,
    /// The web configuration file (exporter-toolkit's format: TLS, basic auth, headers) that
    /// `telemon serve` applies to its HTTP port; a relative path is taken from the config file's
    /// directory. `--web.config.file` overrides it.
    #[serde(default)]
    pub web_config: Option<PathBuf>,
    /// The networks (and optional ports) `/probe` may connect to; when empty, loopback only.
    #[serde(default, deserialize_with = "probe_allow")]
    pub probe_allow: Vec<ProbeAllow>,
    /// When the web view keeps its history (charts, sparklines): only while a view is open
    /// (the default), or always, so that a view opened later shows the minutes before it.
    #[serde(default)]
    pub web_history: WebHistory,
}

/// `[serve] web_history`: when the web view records the fleet's recent past.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WebHistory {
    /// While a page or a client of the view's API is watching, and a minute after: `/`'s headline
    /// figures while `/` is open, every series of a target while its page is. Nothing else is
    /// recorded or kept, so an unwatched exporter pays nothing for the view.
    #[default]
    WhileViewed,
    /// Every series of every target, always (about 4,100 bytes a series, at most 16 MiB in all).
    Always,
}

fn default_wakeup_slack() -> Duration {
    pace::DEFAULT_WAKEUP_SLACK
}

/// The default `[serve] max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// The default `[serve] idle_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}
fn default_idle_timeout() -> Duration {
    DEFAULT_IDLE_TIMEOUT
}

fn default_listen() -> String {
    "127.0.0.1:9464".into()
}
fn default_series_limit() -> usize {
    DEFAULT_SERIES_LIMIT
}

impl Default for ServeSection {
    fn default() -> Self {
        ServeSection {
            listen: default_listen(),
            series_limit: default_series_limit(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            wakeup_slack: pace::DEFAULT_WAKEUP_SLACK,
            shard: None,
            web_config: None,
            probe_allow: Vec::new(),
            web_history: WebHistory::WhileViewed,
        }
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
    /// Dial-in listeners only: the most targets kept (live and remembered; default
    /// [`DEFAULT_MAX_TARGETS`]).
    pub max_targets: Option<usize>,
    /// Dial-in listeners only: the source networks accepted (`"10.0.0.0/8"`, `"127.0.0.1"`;
    /// default: any).
    pub allow: Option<Vec<String>>,
    /// Dial-in listeners only: how long a new connection may take to complete its Hello or
    /// handshake (default [`DEFAULT_HELLO_TIMEOUT`]).
    #[serde(default, deserialize_with = "opt_duration")]
    pub hello_timeout: Option<Duration>,
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
    /// Dial-in listeners only: the most targets kept (live and remembered; default
    /// [`DEFAULT_MAX_TARGETS`]).
    pub max_targets: Option<usize>,
    /// Dial-in listeners only: the source networks accepted (`"10.0.0.0/8"`, `"127.0.0.1"`;
    /// default: any).
    pub allow: Option<Vec<String>>,
    /// Dial-in listeners only: how long a new connection may take to complete its Hello or
    /// handshake (default [`DEFAULT_HELLO_TIMEOUT`]).
    #[serde(default, deserialize_with = "opt_duration")]
    pub hello_timeout: Option<Duration>,
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
    /// Reports to request (default all), at `every` or each at its own period.
    pub reports: Option<Reports>,
    /// Request period (of the reports that have none of their own).
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub every: Duration,
    /// The longest one round of requests may take before the connection counts as hung (default 5 s,
    /// whatever `every` is).
    #[serde(default = "sysinfo_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// Labels added to every series.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The default `max_targets` of a dial-in listener.
pub const DEFAULT_MAX_TARGETS: usize = 1000;
/// The default `hello_timeout` of a dial-in listener.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The bounds of a dial-in listener (`[[mono_listen]]`, `[[hmon_listen]]`), from its block.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerLimits {
    /// The most targets kept, live and remembered.
    pub max_targets: usize,
    /// The source networks accepted; empty: any.
    pub allow: Vec<ipnet::IpNet>,
    /// The deadline for a new connection's Hello or handshake.
    pub hello_timeout: Duration,
}

impl ListenerLimits {
    /// The limits of a block's keys; `Err((key, message))` names what is wrong.
    pub fn new(
        max_targets: Option<usize>,
        allow: Option<&[String]>,
        hello_timeout: Option<Duration>,
    ) -> Result<ListenerLimits, (&'static str, String)> {
        let max_targets = max_targets.unwrap_or(DEFAULT_MAX_TARGETS);
        if max_targets == 0 {
            return Err(("max_targets", "must be above zero".into()));
        }
        let hello_timeout = hello_timeout.unwrap_or(DEFAULT_HELLO_TIMEOUT);
        if hello_timeout.is_zero() {
            return Err(("hello_timeout", "must be above zero".into()));
        }
        let mut nets = Vec::new();
        for a in allow.unwrap_or_default() {
            let net = match (a.parse::<ipnet::IpNet>(), a.parse::<std::net::IpAddr>()) {
                (Ok(net), _) => net.trunc(),
                (_, Ok(ip)) => ipnet::IpNet::from(ip),
                _ => {
                    let message = format!("{a:?} is neither a network (\"10.0.0.0/8\") nor an address");
                    return Err(("allow", message));
                }
            };
            nets.push(net);
        }
        Ok(ListenerLimits { max_targets, allow: nets, hello_timeout })
    }
}

impl HmonTarget {
    /// The listener bounds of a `[[hmon_listen]]` block (checked with the config).
    pub fn listener_limits(&self) -> ListenerLimits {
        ListenerLimits::new(self.max_targets, self.allow.as_deref(), self.hello_timeout)
            .unwrap_or_else(|_| ListenerLimits::new(None, None, None).expect("the defaults are valid"))
    }
}

impl MonoTarget {
    /// The listener bounds of a `[[mono_listen]]` block (checked with the config).
    pub fn listener_limits(&self) -> ListenerLimits {
        ListenerLimits::new(self.max_targets, self.allow.as_deref(), self.hello_timeout)
            .unwrap_or_else(|_| ListenerLimits::new(None, None, None).expect("the defaults are valid"))
    }
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
    /// `[[file_sd]]` blocks: targets listed in files (Prometheus's file_sd format).
    #[serde(default)]
    pub file_sd: Vec<FileSdSection>,
    /// The file and text this config was read from, so that a check made after parsing (of a file it
    /// names, say) still says `FILE:LINE: KEY`.
    #[serde(skip)]
    pub origin: Origin,
}

/// Where a config was read from: its file's name (`<flags>` for shorthand flags) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file's name, as errors give it.
    pub file: String,
    /// The file's text (empty for flags).
    pub text: Arc<str>,
}

impl Default for Origin {
    fn default() -> Origin {
        Origin { file: "<flags>".into(), text: Arc::from("") }
    }
}

impl Origin {
    /// An error about `key` (`password_file`, or dotted: `basic_auth.password_file`) of the `index`-th
    /// `[[section]]` block, or of the `[section]` table (`index` 0): at the key's line when it is
    /// written there, else at the block's header. The error's key is `section.key`.
    pub fn error_in(
        &self,
        section: &str,
        index: usize,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        let last = key.rsplit('.').next().unwrap_or(key);
        ConfigError {
            file: self.file.clone(),
            line: section_key_line(&self.text, section, index, last),
            key: format!("{section}.{key}"),
            message: message.into(),
        }
    }
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

/// The line of `key` inside the block that starts at or before `from` (its `name`): the first
/// `key =` or `"key" =` after the block's `[[...]]` header, before the next block. 0 when not found.
fn key_line(text: &str, from: usize, key: &str) -> usize {
    let from = from.min(text.len());
    key_line_in_block(text, text[..from].rfind("[[").unwrap_or(0), key)
}

/// The line of `key` in the block whose header starts at byte `block`: the first `key =`, `"key" =`
/// or `key.` (a dotted key) after the header and before the next table that is not one of its own
/// (`[[x]]`, or `[y]` without a dot). 0 when not found.
fn key_line_in_block(text: &str, block: usize, key: &str) -> usize {
    let rest = &text[block..];
    // The block ends at the next header line that opens another table.
    let header_end = rest.find('\n').map_or(rest.len(), |i| i + 1);
    let end = rest[header_end..]
        .split_inclusive('\n')
        .scan(header_end, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line.trim_start()))
        })
        .find(|(_, line)| {
            line.starts_with("[[")
                || line.starts_with('[') && !line[..line.find(']').unwrap_or(0)].contains('.')
        })
        .map_or(rest.len(), |(start, _)| start);
    let rest = &rest[..end];
    let mut patterns = vec![format!("\"{key}\""), format!("'{key}'")];
    if !key.is_empty() {
        patterns.push(key.to_owned());
    }
    let mut at = 0;
    while at < rest.len() {
        let hits = patterns.iter().filter_map(|pat| rest[at..].find(pat).map(|i| (at + i, pat.len())));
        let Some((i, len)) = hits.min() else { break };
        let before = rest[..i].chars().next_back();
        let after = rest[i + len..].trim_start_matches([' ', '\t']);
        let bare_start = before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        if bare_start && (after.starts_with('=') || after.starts_with('.')) {
            return line_of(text, block + i);
        }
        at = i + len.max(1);
        while !rest.is_char_boundary(at) {
            at += 1;
        }
    }
    0
}

/// The line of `key` in the `index`-th `[[section]]` block (or the `[section]` table), or of the
/// block's header when the key is not written there; 0 when there is no such block.
fn section_key_line(text: &str, section: &str, index: usize, key: &str) -> usize {
    let headers = [format!("[[{section}]]"), format!("[{section}]")];
    let mut at = 0;
    let mut found = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        let header = trimmed.split('#').next().unwrap_or("").trim_end();
        if headers.iter().any(|h| h == header) {
            if found == index {
                return match key_line_in_block(text, at, key) {
                    0 => line_of(text, at),
                    l => l,
                };
            }
            found += 1;
        }
        at += line.len();
    }
    0
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
        if !self.file_sd.is_empty() {
            s += &format!(", {} file_sd", self.file_sd.len());
        }
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
            key: String::new(),
            message: format!("cannot read the config file: {e}"),
        })?;
        let mut config = FleetConfig::parse(&file, &text)?;
        config.resolve_paths(path.parent().unwrap_or(Path::new(".")));
        Ok(config)
    }

    /// Makes the config's relative file paths (`[serve] web_config`) relative to `dir`, the
    /// config file's directory, as Prometheus does for the files its config names.
    pub fn resolve_paths(&mut self, dir: &Path) {
        if let Some(web) = self.serve.web_config.as_mut().filter(|w| w.is_relative()) {
            *web = dir.join(&*web);
        }
        for sd in &mut self.file_sd {
            sd.resolve_paths(dir);
        }
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
        let mut cfg = FleetConfig { origin: Origin { file: file.into(), text: Arc::from(text) }, ..cfg };
        cfg.add_default_ports();
        cfg.validate()?;
        Ok(cfg)
    }

    /// Gives every target address without a port its protocol's default port (`connect = "my.host"`
    /// of an `[[hmon]]` block is `my.host:4512`); an address that is wrong in another way is left as
    /// it is, for [`FleetConfig::validate`] to say so.
    fn add_default_ports(&mut self) {
        fn add(connect: &mut Option<String>, port: u16) {
            if let Some(addr) = connect.as_mut() {
                if let Ok(std::borrow::Cow::Owned(with)) = with_default_port(addr, port) {
                    *addr = with;
                }
            }
        }
        for t in &mut self.hmon {
            add(&mut t.connect, hmon::DEFAULT_PORT);
        }
        for t in &mut self.smon {
            add(&mut t.connect, smon_codec::DEFAULT_PORT);
        }
        for t in &mut self.sysinfo {
            add(&mut t.connect, sysinfo_wire::DEFAULT_PORT);
        }
    }

    /// Checks everything the config says by itself (its files are checked by the layers that read
    /// them); the first problem found, at its file, line and key.
    fn validate(&self) -> Result<(), ConfigError> {
        let (file, text) = (self.origin.file.as_str(), &*self.origin.text);
        for (i, sd) in self.file_sd.iter().enumerate() {
            if let Err((key, message)) = sd.check() {
                let key = if key == "-" { String::new() } else { key };
                let mut e = self.origin.error_in("file_sd", i, &key, message);
                e.key = e.key.trim_end_matches('.').to_owned();
                return Err(e);
            }
        }
        // An error at the line of `key` in the block named `name`, or at the name's line when the block
        // does not write the key (a default, or a key that is missing).
        let err = |name: &Spanned<String>, key: &str, message: String| ConfigError {
            file: file.into(),
            line: match key_line(text, name.span().start, key) {
                0 => line_of(text, name.span().start),
                l => l,
            },
            key: key.into(),
            message,
        };
        let mut seen: BTreeMap<&str, ()> = BTreeMap::new();
        for n in self.names() {
            if n.get_ref().is_empty() || n.get_ref().contains('/') {
                let message = format!("target name {:?} must be non-empty and without '/'", n.get_ref());
                return Err(err(n, "name", message));
            }
            if seen.insert(n.get_ref(), ()).is_some() {
                return Err(err(n, "name", format!("target name {:?} is used twice", n.get_ref())));
            }
        }
        let blocks_labels = self
            .meter161
            .iter()
            .map(|t| (&t.name, &t.labels))
            .chain(self.hmon.iter().map(|t| (&t.name, &t.labels)))
            .chain(self.hmon_listen.iter().map(|t| (&t.name, &t.labels)))
            .chain(self.mono_listen.iter().map(|t| (&t.name, &t.labels)))
            .chain(self.smon.iter().map(|t| (&t.name, &t.labels)))
            .chain(self.sysinfo.iter().map(|t| (&t.name, &t.labels)));
        for (name, labels) in blocks_labels {
            for key in labels.keys() {
                if let Err(message) = check_label_name(key) {
                    return Err(ConfigError { key: format!("labels.{key}"), ..err(name, key, message) });
                }
            }
        }
        for t in &self.meter161 {
            if t.dir.is_some() == t.dir_glob.is_some() {
                return Err(err(&t.name, "dir", "give exactly one of `dir` or `dir_glob`".into()));
            }
            if let Some(Err(e)) = t.dir_glob.as_deref().map(glob::Pattern::new) {
                return Err(err(&t.name, "dir_glob", format!("not a glob: {e}")));
            }
            if meter161::interval_ns(t.interval).is_err() {
                let min = Duration::from_nanos(meter161::MIN_INTERVAL_NS);
                let max = Duration::from_nanos(meter161::MAX_INTERVAL_NS);
                let line = key_line(text, t.name.span().start, "interval");
                let written = written_value(text, line)
                    .unwrap_or_else(|| humantime::format_duration(t.interval).to_string());
                let message = format!(
                    "{written} is outside {}..{} (what sys161 takes)",
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                );
                return Err(err(&t.name, "interval", message));
            }
        }
        for t in &self.hmon {
            if t.connect.is_none() || t.listen.is_some() {
                let message = "[[hmon]] takes `connect` (use [[hmon_listen]] for `listen`)".into();
                return Err(err(&t.name, if t.listen.is_some() { "listen" } else { "connect" }, message));
            }
            let keys = [
                ("max_targets", t.max_targets.is_some()),
                ("allow", t.allow.is_some()),
                ("hello_timeout", t.hello_timeout.is_some()),
            ];
            if let Some((key, _)) = keys.iter().find(|(_, given)| *given) {
                return Err(err(&t.name, key, "only for [[hmon_listen]] and [[mono_listen]]".into()));
            }
        }
        for t in &self.hmon_listen {
            if t.listen.is_none() || t.connect.is_some() {
                let message = "[[hmon_listen]] takes `listen` (use [[hmon]] for `connect`)".into();
                return Err(err(&t.name, if t.connect.is_some() { "connect" } else { "listen" }, message));
            }
        }
        let listeners = self
            .hmon_listen
            .iter()
            .map(|t| (&t.name, t.listen.as_deref(), t.max_targets, t.allow.as_deref(), t.hello_timeout))
            .chain(self.mono_listen.iter().map(|t| {
                (&t.name, Some(t.listen.as_str()), t.max_targets, t.allow.as_deref(), t.hello_timeout)
            }));
        for (name, listen, max_targets, allow, hello_timeout) in listeners {
            if let Err(message) = check_listen(listen.unwrap_or_default()) {
                return Err(err(name, "listen", message));
            }
            if let Err((key, message)) = ListenerLimits::new(max_targets, allow, hello_timeout) {
                return Err(err(name, key, message));
            }
        }
        for t in self.hmon.iter().chain(&self.hmon_listen) {
            if t.poll.is_zero() {
                return Err(err(&t.name, "poll", "must be above zero".into()));
            }
            for fact in t.facts.iter().flatten() {
                if hmon::FactKind::resolve(&hmon::IdOrName::parse_word(fact)).is_none() {
                    let known: Vec<&str> = hmon::FactKind::ALL.iter().map(|k| k.name()).collect();
                    let message = format!("unknown fact {fact:?} (known: {})", known.join(", "));
                    return Err(err(&t.name, "facts", message));
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
        for t in &self.mono_listen {
            if let Some(bad) = t.add.iter().find(|c| mono_counters::CounterName::parse(c).is_none()) {
                return Err(err(&t.name, "add", format!("{bad:?} is not \"Category/Name\"")));
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
            let names = t.reports.as_ref().map(Reports::names).unwrap_or_default();
            if let Some(bad) = names.iter().find(|r| report_by_name(r).is_none()) {
                let message = format!(
                    "unknown report {bad:?} (known: ps, memstat, kstat, channels, sched_latency, ipc_latency, watchdog)"
                );
                return Err(err(&t.name, "reports", message));
            }
            if t.every.is_zero() {
                return Err(err(&t.name, "every", "must be above zero".into()));
            }
            if t.timeout.is_zero() {
                return Err(err(&t.name, "timeout", "must be above zero".into()));
            }
        }
        let connects = self
            .hmon
            .iter()
            .map(|t| (&t.name, &t.connect))
            .chain(self.smon.iter().map(|t| (&t.name, &t.connect)))
            .chain(self.sysinfo.iter().map(|t| (&t.name, &t.connect)));
        for (name, connect) in connects {
            if let Some(Err(message)) = connect.as_deref().map(check_host_port) {
                return Err(err(name, "connect", message));
            }
        }
        let serve_err = |key: &str, message: String| self.origin.error_in("serve", 0, key, message);
        if self.serve.max_connections == 0 {
            return Err(serve_err("max_connections", "must be above zero".into()));
        }
        if self.serve.idle_timeout.is_zero() {
            return Err(serve_err("idle_timeout", "must be above zero".into()));
        }
        if self.serve.wakeup_slack > pace::MAX_WAKEUP_SLACK {
            return Err(serve_err("wakeup_slack", format!("must be at most {:?}", pace::MAX_WAKEUP_SLACK)));
        }
        validate_push(&self.remote_write, &self.otlp, file, text)?;
        if let Err(message) = check_listen(&self.serve.listen) {
            return Err(serve_err("listen", message));
        }
        Ok(())
    }

    /// Every target block's name, in the order of the kinds.
    fn names(&self) -> impl Iterator<Item = &Spanned<String>> {
        self.meter161
            .iter()
            .map(|t| &t.name)
            .chain(self.hmon.iter().map(|t| &t.name))
            .chain(self.hmon_listen.iter().map(|t| &t.name))
            .chain(self.mono_listen.iter().map(|t| &t.name))
            .chain(self.smon.iter().map(|t| &t.name))
            .chain(self.sysinfo.iter().map(|t| &t.name))
    }
}

/// The value written on `line` of `text` after its `=` (a string without its quotes), as the user wrote
/// it: `"5s"` of `interval = "5s"  # comment` is `5s`.
fn written_value(text: &str, line: usize) -> Option<String> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let value = l.split_once('=')?.1.trim();
    let value = match value.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => value.split('#').next()?.trim(),
    };
    (!value.is_empty()).then(|| value.to_owned())
}

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
    fn web_history_is_while_viewed_unless_always() {
        let c = FleetConfig::parse("t.toml", FULL).unwrap();
        assert_eq!(c.serve.web_history, WebHistory::WhileViewed);
        let always = FleetConfig::parse("t.toml", "[serve]\nweb_history = \"always\"\n").unwrap();
        assert_eq!(always.serve.web_history, WebHistory::Always);
        let e = FleetConfig::parse("t.toml", "[serve]\nweb_history = \"sometimes\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (2, "web_history"), "{e}");
        assert!(e.message.contains("while_viewed") && e.message.contains("always"), "{e}");
    }

    #[test]
    fn wakeup_slack_defaults_to_5ms_and_is_bounded() {
        let c = FleetConfig::parse("t.toml", FULL).unwrap();
        assert_eq!(c.serve.wakeup_slack, Duration::from_millis(5));
        let off = FleetConfig::parse("t.toml", "[serve]\nwakeup_slack = \"0s\"\n").unwrap();
        assert_eq!(off.serve.wakeup_slack, Duration::ZERO);
        let e = FleetConfig::parse("t.toml", "[serve]\nlisten = \"127.0.0.1:1\"\nwakeup_slack = \"1s\"\n")
            .unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (3, "serve.wakeup_slack"), "{e}");
        assert!(e.message.contains("at most 100ms"), "{e}");
    }

    #[test]
    fn unknown_facts_events_reports_and_bad_globs_are_rejected() {
        // Each error is at its key's line, not at the block's name.
        let cases = [
            ("[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nfacts = [\"Workspace\", \"Weather\"]\n", 4, "facts"),
            ("[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nsubscribe = [\"Lunch\"]\n", 4, "subscribe"),
            ("[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\nreports = [\"trace_clear\"]\n", 4, "reports"),
            ("[[meter161]]\nname = \"a\"\ndir_glob = \"/home/[x\"\n", 3, "dir_glob"),
            ("[[meter161]]\nname = \"a\"\ndir = \"/x\"\ninterval = \"5s\"\n", 4, "interval"),
            ("[[mono_listen]]\nname = \"a\"\nlisten = \"x:1\"\nadd = [\"NoSlash\"]\n", 4, "add"),
        ];
        for (text, line, key) in cases {
            let e = FleetConfig::parse("f.toml", text).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
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
        assert_eq!((c.mono_listen.len(), c.smon.len(), c.sysinfo.len()), (1, 2, 2));
    }

    #[test]
    fn listener_bounds_parse_and_bad_ones_are_rejected_at_their_line() {
        let text = "[[mono_listen]]\nname = \"m\"\nlisten = \"x:1\"\nmax_targets = 5\n\
                    allow = [\"10.0.0.0/8\", \"127.0.0.1\", \"::1\"]\nhello_timeout = \"2s\"\n";
        let c = FleetConfig::parse("f.toml", text).unwrap();
        let l = c.mono_listen[0].listener_limits();
        assert_eq!((l.max_targets, l.hello_timeout, l.allow.len()), (5, Duration::from_secs(2), 3));
        assert!(l.allow[1].contains(&"127.0.0.1".parse::<std::net::IpAddr>().unwrap()));
        let defaults =
            FleetConfig::parse("f.toml", "[[hmon_listen]]\nname = \"h\"\nlisten = \"x:1\"\n").unwrap();
        let l = defaults.hmon_listen[0].listener_limits();
        assert_eq!(
            (l.max_targets, l.hello_timeout, l.allow.len()),
            (DEFAULT_MAX_TARGETS, DEFAULT_HELLO_TIMEOUT, 0)
        );
        let cases = [
            ("[[mono_listen]]\nname = \"m\"\nlisten = \"x:1\"\n\nallow = [\"10.0.0.0/33\"]\n", 5, "allow"),
            ("[[hmon_listen]]\nname = \"h\"\nlisten = \"x:1\"\nmax_targets = 0\n", 4, "max_targets"),
            ("[[hmon_listen]]\nname = \"h\"\nlisten = \"x:1\"\nhello_timeout = \"0s\"\n", 4, "hello_timeout"),
            ("[[hmon]]\nname = \"h\"\nconnect = \"x:1\"\nallow = [\"::1\"]\n", 4, "allow"),
        ];
        for (text, line, key) in cases {
            let e = FleetConfig::parse("f.toml", text).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        }
    }

    #[test]
    fn bad_label_names_are_rejected_at_their_line() {
        let head = "[[smon]]\nname = \"box\"\nfile = \"/x\"\n";
        let cases = [
            ("labels = { \"my-label\" = \"x\" }\n", 4, "my-label", "[a-zA-Z_]"),
            ("labels = { ok = \"1\", target = \"evil\" }\n", 4, "target", "set by telemon"),
            ("labels = { le = \"1\" }\n", 4, "le", "set by telemon"),
            ("labels = { quantile = \"1\" }\n", 4, "quantile", "set by telemon"),
            ("labels = { __meta = \"1\" }\n", 4, "__meta", "__"),
            ("labels = { \"1x\" = \"1\" }\n", 4, "1x", "[a-zA-Z_]"),
            ("labels = { \"\" = \"1\" }\n", 4, "", "[a-zA-Z_]"),
            ("[smon.labels]\nok = \"1\"\n\"a.b\" = \"x\"\n", 6, "a.b", "[a-zA-Z_]"),
        ];
        for (tail, line, key, why) in cases {
            let text = format!("{head}{tail}");
            let e = FleetConfig::parse("f.toml", &text).unwrap_err();
            assert_eq!((e.line, e.key.clone()), (line, format!("labels.{key}")), "{e}");
            assert!(e.message.contains(why), "{e}");
            assert!(e.to_string().starts_with(&format!("f.toml:{line}: labels.{key}: ")), "{e}");
        }
        let ok =
            format!("{head}labels = {{ course = \"cs161 \\\"x\\\" é\", _x = \"\", Env2 = \"a\\nb\" }}\n");
        FleetConfig::parse("f.toml", &ok).unwrap();
    }

    #[test]
    fn every_label_metrics_md_names_is_reserved() {
        let doc = include_str!("../../../../docs/metrics.md");
        let mut named = std::collections::BTreeSet::new();
        let pieces: Vec<&str> = doc.split('{').collect();
        for (before, block) in pieces.iter().zip(&pieces[1..]) {
            // telemon_build_info's labels (branch, revision, ...) are on a family of no target: no clash.
            if before.ends_with("telemon_build_info") {
                continue;
            }
            let Some(inner) = block.split('}').next() else { continue };
            for part in inner.split(',') {
                let name = part.split('=').next().unwrap_or("").trim();
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    named.insert(name.to_owned());
                }
            }
        }
        assert!(named.contains("target") && named.contains("category"), "{named:?}");
        for name in named {
            assert!(RESERVED_LABELS.contains(&name.as_str()), "{name} is in metrics.md but not reserved");
            assert!(check_label_name(&name).is_err());
        }
    }

    #[test]
    fn an_error_is_at_its_own_key_and_in_the_users_units() {
        // Out of sys161's range, in the units written.
        let text = "[[meter161]]\nname = \"a\"\ndir = \"/x\"\ninterval = \"2500ms\" # too slow\n";
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!(e.to_string(), "f.toml:4: interval: 2500ms is outside 10us..2s (what sys161 takes)");
        let e =
            FleetConfig::parse("f.toml", "[[meter161]]\nname = \"a\"\ndir = \"/x\"\ninterval = \"5us\"\n")
                .unwrap_err();
        assert!(e.to_string().starts_with("f.toml:4: interval: 5us is outside 10us..2s"), "{e}");
        // A key a block does not write is not looked for in the next block: the block's name line.
        let text = "[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\npoll = \"0s\"\n\
                    [[hmon]]\nname = \"b\"\nconnect = \"x:2\"\npoll = \"1s\"\n";
        assert_eq!(FleetConfig::parse("f.toml", text).unwrap_err().line, 4);
        let text = "[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\n[[hmon]]\nname = \"b\"\n";
        assert_eq!(FleetConfig::parse("f.toml", text).unwrap_err().line, 5, "b lacks connect: its name");
        // [serve] listen, after a block that has a `listen` of its own.
        let text =
            "[[hmon_listen]]\nname = \"h\"\nlisten = \"127.0.0.1:7000\"\n[serve]\n\nlisten = \"nowhere\"\n";
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (6, "serve.listen"), "{e}");
        // The whole file: no line 0, no key `-`.
        let e = FleetConfig::load(Path::new("/nonexistent/t.toml")).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/t.toml: cannot read the config file: "), "{e}");
    }

    #[test]
    fn addresses_without_a_port_take_the_protocols_default() {
        let text = "[[hmon]]\nname = \"h\"\nconnect = \"127.0.0.1\"\n[[smon]]\nname = \"s\"\nconnect = \"box.lan\"\n\
                    [[sysinfo]]\nname = \"v\"\nconnect = \"[::1]\"\n[[sysinfo]]\nname = \"w\"\nconnect = \"[::1]:9\"\n";
        let c = FleetConfig::parse("f.toml", text).unwrap();
        assert_eq!(c.hmon[0].connect.as_deref(), Some("127.0.0.1:4512"));
        assert_eq!(c.smon[0].connect.as_deref(), Some("box.lan:7399"));
        assert_eq!(c.sysinfo[0].connect.as_deref(), Some("[::1]:7461"));
        assert_eq!(c.sysinfo[1].connect.as_deref(), Some("[::1]:9"));
        for (bad, why) in [("nohost:", "the port"), ("127.0.0.1:99999", "the port"), ("::1", "brackets")] {
            let text = format!("[[smon]]\nname = \"s\"\n\nconnect = \"{bad}\"\n");
            let e = FleetConfig::parse("f.toml", &text).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (4, "connect"), "{e}");
            assert!(e.message.contains(why), "{e}");
        }
    }

    #[test]
    fn an_unknown_key_names_file_line_and_key() {
        let text = "[[smon]]\nname = \"a\"\nconect = \"x:1\"\n";
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.file.as_str(), e.line, e.key.as_str()), ("f.toml", 3, "conect"), "{e}");
        assert!(e.to_string().starts_with("f.toml:3: conect: "), "{e}");
    }

    #[test]
    fn sysinfo_reports_are_a_list_at_every_or_a_table_of_periods() {
        let list =
            "[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\nevery = \"2s\"\nreports = [\"ps\", \"kstat\"]\n";
        let c = FleetConfig::parse("f.toml", list).unwrap();
        let t = &c.sysinfo[0];
        assert_eq!(t.timeout, Duration::from_secs(5));
        let periods = t.reports.as_ref().unwrap().periods(t.every);
        assert_eq!(periods, [("ps", Duration::from_secs(2)), ("kstat", Duration::from_secs(2))]);
        let table = "[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\ntimeout = \"3s\"\n\
                     reports = { ps = \"1s\", memstat = \"10s\", sched_latency = \"250ms\" }\n";
        let c = FleetConfig::parse("f.toml", table).unwrap();
        let t = &c.sysinfo[0];
        assert_eq!(t.timeout, Duration::from_secs(3));
        assert_eq!(
            t.reports.as_ref().unwrap().periods(t.every),
            [
                ("memstat", Duration::from_secs(10)),
                ("ps", Duration::from_secs(1)),
                ("sched_latency", Duration::from_millis(250))
            ]
        );
        let cases = [
            ("reports = { ps = \"soon\" }", 4, "reports", "bad duration \"soon\""),
            ("reports = { ps = \"0s\" }", 4, "reports", "above zero"),
            ("reports = { ps = 5 }", 4, "reports", "string"),
            ("reports = \"ps\"", 4, "reports", "a list of reports, or a table"),
            ("reports = { ps = \"1s\", weather = \"1s\" }", 4, "reports", "unknown report \"weather\""),
            ("timeout = \"0s\"", 4, "timeout", "above zero"),
        ];
        for (line, at, key, message) in cases {
            let text = format!("[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\n{line}\n");
            let e = FleetConfig::parse("f.toml", &text).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (at, key), "{line}: {e}");
            assert!(e.message.contains(message), "{line}: {e}");
            assert!(e.to_string().starts_with(&format!("f.toml:{at}: {key}: ")), "{e}");
        }
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
            max_targets: None,
            allow: None,
            hello_timeout: None,
            labels: BTreeMap::new(),
        };
        cfg.hmon.extend(self.hmon.iter().map(|a| hmon(a, true)));
        cfg.hmon_listen.extend(self.hmon_listen.iter().map(|a| hmon(a, false)));
        cfg.mono_listen.extend(self.mono_listen.iter().map(|a| MonoTarget {
            name: name(a),
            listen: a.clone(),
            add: Vec::new(),
            max_targets: None,
            allow: None,
            hello_timeout: None,
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
            timeout: sysinfo_timeout(),
            labels: BTreeMap::new(),
        }));
        cfg.add_default_ports();
        cfg.validate()?;
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
