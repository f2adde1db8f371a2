//! `telemon`'s config: one TOML file, each layer reading its own sections of it. `[serve]` is read here
//! (the HTTP server's settings, and the fleet-wide ones it passes down); the target blocks and
//! `[[file_sd]]` by the fleet (`telemon_fleet::config`, each protocol's blocks by its component); the push
//! senders' `[[remote_write]]` and `[[otlp]]` by `telemon_push`. A section no layer reads is an error, and
//! every error is `FILE:LINE: KEY: why`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use telemon_fleet::config::{
    check_listen, duration, shard_option, ConfigError, Document, FleetConfig, Place, Settings, Shard,
};
use telemon_fleet::store::DEFAULT_SERIES_LIMIT;
use telemon_fleet::Protocols;
use telemon_fleet::{pace, runtimes};
use telemon_push::PushConfig;

use crate::http::probe_allow::{probe_allow, ProbeAllow};

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
    /// (`serve`, `top` and `record`; see [`telemon_fleet::pace`]). `"0s"` wakes for each event; at
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
    /// How many threads the collectors run on (`serve`): each a single-threaded runtime, each
    /// target whole on one of them. `None` (the default): the cores available to the process. Read
    /// at start; a reload that changes it logs that it takes a restart.
    #[serde(default)]
    pub threads: Option<usize>,
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
            threads: None,
        }
    }
}

impl ServeSection {
    /// Checks the settings; each error at its key.
    fn check(&self, place: &Place) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(place.section_error("max_connections", "must be above zero"));
        }
        if self.idle_timeout.is_zero() {
            return Err(place.section_error("idle_timeout", "must be above zero"));
        }
        if self.wakeup_slack > pace::MAX_WAKEUP_SLACK {
            return Err(
                place.section_error("wakeup_slack", format!("must be at most {:?}", pace::MAX_WAKEUP_SLACK))
            );
        }
        if let Some(threads) = self.threads.filter(|t| !(1..=runtimes::MAX_THREADS).contains(t)) {
            let why = format!("{threads} is outside 1..={}", runtimes::MAX_THREADS);
            return Err(place.section_error("threads", why));
        }
        check_listen(&self.listen).map_err(|m| place.section_error("listen", m))
    }

    /// The collectors' threads in force: `threads`, or the cores available to the process.
    pub fn collector_threads(&self) -> usize {
        self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The fleet-wide settings of the fleet's units.
    pub fn fleet_settings(&self) -> Settings {
        Settings { series_limit: self.series_limit, shard: self.shard }
    }
}

/// The whole config of `telemon serve` (and `top`, `record`): each layer's part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `[serve]`.
    pub serve: ServeSection,
    /// Where `[serve]` is written, for errors found later (a web config file it names); `None` when the
    /// config has no `[serve]`.
    pub serve_place: Option<Place>,
    /// The targets and `[[file_sd]]` blocks.
    pub fleet: FleetConfig,
    /// The push senders.
    pub push: PushConfig,
}

impl Config {
    /// Reads `docs` (a config file, and the shorthand flags as a document of their own), their sections
    /// each read by the layer that owns it; the fleet's targets read by `protocols`.
    pub fn read(docs: &[Document], protocols: &Protocols) -> Result<Config, ConfigError> {
        let known: Vec<&str> = ["serve"]
            .into_iter()
            .chain(FleetConfig::sections(protocols))
            .chain(PushConfig::SECTIONS)
            .collect();
        for doc in docs {
            for (section, line) in doc.sections() {
                if !known.contains(&section.as_str()) {
                    let message = format!("unknown section, expected one of {}", known.join(", "));
                    return Err(ConfigError { file: doc.file().into(), line, key: section, message });
                }
            }
        }
        let mut config = Config::default();
        for doc in docs {
            let dir = Path::new(doc.file()).parent().unwrap_or(Path::new("."));
            for (serve, place) in doc.read_section("serve", |block| {
                let serve: ServeSection = block.read()?;
                serve.check(&block)?;
                Ok((serve, block.place().clone()))
            })? {
                config.serve = serve;
                if let Some(web) = config.serve.web_config.as_mut().filter(|w| w.is_relative()) {
                    *web = dir.join(&*web);
                }
                config.serve_place = Some(place);
            }
        }
        config.fleet = FleetConfig::read(docs, protocols)?;
        config.fleet.settings = config.serve.fleet_settings();
        config.push = PushConfig::read(docs)?;
        Ok(config)
    }

    /// Parses config `text` (named `file` in errors) with the built-in protocols.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        Config::read(&[Document::parse(file, text)?], &Protocols::built_in())
    }

    /// Reads and checks the config file at `path` with the built-in protocols.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::read(&[Document::load(path)?], &Protocols::built_in())
    }

    /// Sets `[serve] shard` (a flag that overrides it), for the fleet and push as well.
    pub fn set_shard(&mut self, shard: Shard) {
        self.serve.shard = Some(shard);
        self.fleet.settings.shard = Some(shard);
    }

    /// The number of target blocks (a `dir_glob` or a listener counts once).
    pub fn blocks(&self) -> usize {
        self.fleet.blocks()
    }

    /// `2 meter161, 1 hmon, ...; pushing to 1 remote_write, 0 otlp`: the blocks per kind, for people.
    pub fn summary(&self) -> String {
        let mut s = self.fleet.summary();
        if !self.push.remote_write.is_empty() || !self.push.otlp.is_empty() {
            s += &format!(
                "; pushing to {} remote_write, {} otlp",
                self.push.remote_write.len(),
                self.push.otlp.len()
            );
        }
        s
    }
}

/// Where a command's config comes from, as data, so that a reload reads it again the same way: the
/// config file (read anew each time), the shorthand flags' document, and the flags that override `[serve]`
/// keys.
#[derive(Debug, Clone)]
pub struct Source {
    /// `--config FILE`.
    pub file: Option<PathBuf>,
    /// The shorthand target flags, as a document (`<flags>`).
    pub flags: Option<Document>,
    /// `--shard`, over `[serve] shard`.
    pub shard: Option<Shard>,
    /// `--web.config.file`, over `[serve] web_config`.
    pub web_config: Option<PathBuf>,
    /// The protocols the targets are read by.
    pub protocols: Protocols,
}

impl Source {
    /// Only the config file at `path`.
    pub fn file(path: &Path) -> Source {
        Source {
            file: Some(path.to_owned()),
            flags: None,
            shard: None,
            web_config: None,
            protocols: Protocols::built_in(),
        }
    }

    /// Reads the config: the file as it is now, the flags, the overrides.
    pub fn read(&self) -> Result<Config, ConfigError> {
        let mut docs = Vec::new();
        if let Some(path) = &self.file {
            docs.push(Document::load(path)?);
        }
        docs.extend(self.flags.clone());
        let mut config = Config::read(&docs, &self.protocols)?;
        if let Some(shard) = self.shard {
            config.set_shard(shard);
        }
        if self.web_config.is_some() {
            config.serve.web_config = self.web_config.clone();
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's full config (the block after `<!-- telemon.toml`) reads as it says: every key.
    #[test]
    fn the_readme_full_config_reads() {
        let readme = include_str!("../../../README.md");
        let start = readme.find("<!-- telemon.toml").expect("the README marks its full config");
        let block = &readme[start..];
        let body = &block[block.find("```toml\n").expect("a toml block") + 8..];
        let body = &body[..body.find("```").expect("the block ends")];
        let c = Config::parse("README.md", body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.serve.threads, Some(2));
        assert_eq!(c.serve.collector_threads(), 2);
        assert!(!c.fleet.targets.is_empty());
    }

    #[test]
    fn threads_are_checked_at_their_line_and_default_to_the_cores() {
        let e = Config::parse("t.toml", "[serve]\nthreads = 0\n").unwrap_err();
        assert_eq!(e.to_string(), "t.toml:2: serve.threads: 0 is outside 1..=256");
        let e = Config::parse("t.toml", "[serve]\n\nthreads = 257\n").unwrap_err();
        assert_eq!(e.to_string(), "t.toml:3: serve.threads: 257 is outside 1..=256");
        let c = Config::parse("t.toml", "").unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!((c.serve.threads, c.serve.collector_threads()), (None, cores));
    }
}
