//! The push senders' part of the config file: `[[remote_write]]` and `[[otlp]]`, read by this crate from the
//! one config [`Document`] (each layer reads its own sections), each error at its `FILE:LINE: KEY`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use telemon_fleet::config::{duration, one_second, ConfigError, Document, Place, Shard};
use toml::Spanned;

/// The default bound of a sender's queue (64 MiB).
pub const DEFAULT_QUEUE_BYTES: u64 = 64 << 20;
/// The default most samples (remote write) or data points (OTLP) in one request.
pub const DEFAULT_MAX_SAMPLES_PER_SEND: usize = 2_000;
/// The default timeout of one request.
pub const DEFAULT_PUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// The default bound of a sender's disk queue (`queue_max_bytes`, 1 GiB).
pub const DEFAULT_QUEUE_MAX_BYTES: u64 = 1 << 30;
/// How often a disk queue is synced to the disk by default (`queue_sync`).
pub const DEFAULT_QUEUE_SYNC: Duration = Duration::from_secs(1);
/// Label names an external label cannot take: telemon sets them itself.
pub const RESERVED_LABELS: [&str; 5] = ["target", "protocol", "kind", "le", "quantile"];

/// `[[remote_write]]` (takes `url`) or `[[otlp]]` (takes `endpoint`): one push sender.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PushSection {
    /// The sender's name in its self-metrics (`sender` label); default: the URL.
    pub name: Option<String>,
    /// Remote write: the receiver's URL, e.g. `http://mimir:9009/api/v1/push`.
    pub url: Option<Spanned<String>>,
    /// OTLP: the base URL; requests go to `{endpoint}/v1/metrics`.
    pub endpoint: Option<Spanned<String>>,
    /// How often the store is sampled and a request sent.
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub batch: Duration,
    /// The most samples (data points) in one request.
    #[serde(default = "default_max_samples")]
    pub max_samples_per_send: Spanned<usize>,
    /// The bound of the queue, in bytes: an integer, or a string such as `"64MiB"`.
    #[serde(default = "default_queue_bytes", deserialize_with = "byte_size")]
    pub queue_bytes: u64,
    /// Extra HTTP headers, e.g. `{ "X-Scope-OrgID" = "tenant-1" }`.
    #[serde(default)]
    pub headers: Option<Spanned<BTreeMap<String, String>>>,
    /// HTTP basic authentication.
    pub basic_auth: Option<Spanned<BasicAuth>>,
    /// A file holding a bearer token (read at start).
    pub bearer_token_file: Option<Spanned<PathBuf>>,
    /// TLS settings (HTTPS always goes through rustls).
    pub tls: Option<TlsSection>,
    /// Labels added to every series (remote write) or resource attributes (OTLP).
    #[serde(default)]
    pub external_labels: Option<Spanned<BTreeMap<String, String>>>,
    /// The timeout of one request.
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// A directory of its own for a disk queue that survives crashes and restarts (without it, the queue is
    /// in memory, bounded by `queue_bytes`).
    pub queue_dir: Option<Spanned<PathBuf>>,
    /// The bound of the disk queue, in bytes: an integer, or a string such as `"1GiB"`.
    #[serde(default = "default_queue_max_bytes", deserialize_with = "byte_size")]
    pub queue_max_bytes: u64,
    /// Samples older than this are dropped from the disk queue (counted); none by default.
    #[serde(default, deserialize_with = "opt_duration")]
    pub queue_max_age: Option<Duration>,
    /// What a full disk queue drops: its oldest samples (default) or the newest.
    #[serde(default)]
    pub when_full: WhenFull,
    /// How often the disk queue is synced to the disk (and at shutdown).
    #[serde(default = "default_queue_sync", deserialize_with = "duration")]
    pub queue_sync: Duration,
}

/// `when_full`: what a full disk queue drops.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// The oldest queued samples make room for new ones.
    #[default]
    DropOldest,
    /// New samples are dropped while the queue is full.
    DropNewest,
}

/// `basic_auth = { username = "...", password = "..." }` (or `password_file`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// User name.
    pub username: String,
    /// Password, written in the config.
    pub password: Option<String>,
    /// A file holding the password (read at start).
    pub password_file: Option<PathBuf>,
}

/// `tls = { ca_file = "..." }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// A PEM file of CA certificates trusted besides the built-in roots.
    pub ca_file: Option<PathBuf>,
}

impl PushSection {
    /// The URL a request goes to (remote write's `url`, OTLP's `{endpoint}/v1/metrics`).
    pub fn request_url(&self) -> String {
        match (&self.url, &self.endpoint) {
            (Some(u), _) => u.get_ref().clone(),
            (None, Some(e)) => format!("{}/v1/metrics", e.get_ref().trim_end_matches('/')),
            (None, None) => String::new(),
        }
    }

    /// The sender's name in its self-metrics.
    pub fn sender_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.request_url())
    }

    /// The configured external labels, sorted by name.
    pub fn external_labels(&self) -> Vec<(String, String)> {
        self.external_labels
            .as_ref()
            .map(|l| l.get_ref().iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// The directory of the disk queue of the instance that owns `shard` of the targets: `queue_dir` itself,
    /// or with a shard, `queue_dir/shard-I-of-N`, so that the instances of one config never share a queue.
    /// `None` for a memory queue.
    pub fn queue_path(&self, shard: Option<Shard>) -> Option<PathBuf> {
        let dir = self.queue_dir.as_ref()?.get_ref();
        Some(match shard {
            Some(s) => dir.join(format!("shard-{}-of-{}", s.index, s.count)),
            None => dir.clone(),
        })
    }

    /// The configured extra headers.
    pub fn headers(&self) -> Vec<(String, String)> {
        self.headers
            .as_ref()
            .map(|l| l.get_ref().iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }
}

fn default_max_samples() -> Spanned<usize> {
    Spanned::new(0..0, DEFAULT_MAX_SAMPLES_PER_SEND)
}
fn default_queue_bytes() -> u64 {
    DEFAULT_QUEUE_BYTES
}
fn default_timeout() -> Duration {
    DEFAULT_PUSH_TIMEOUT
}
fn default_queue_max_bytes() -> u64 {
    DEFAULT_QUEUE_MAX_BYTES
}
fn default_queue_sync() -> Duration {
    DEFAULT_QUEUE_SYNC
}
fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// Parses `"64MiB"`, `"512KiB"`, `"1GiB"`, `"1000000"` or `"10MB"` (SI) into bytes.
pub fn parse_byte_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Int(n) => Ok(n),
        Raw::Text(s) => parse_byte_size(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("bad size {s:?}; write e.g. 67108864 or \"64MiB\""))
        }),
    }
}

/// Whether `name` is a label name telemon accepts in `external_labels`: `[a-zA-Z_][a-zA-Z0-9_]*`,
/// not starting with `__`, and not one of [`RESERVED_LABELS`]. `Err` says why not.
pub fn check_external_label(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("{name:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"));
    }
    if name.starts_with("__") {
        return Err(format!("{name:?}: names starting with \"__\" are reserved"));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!("{name:?} is set by telemon itself (reserved: {})", RESERVED_LABELS.join(", ")));
    }
    Ok(())
}

/// The push senders' blocks of a config: `[[remote_write]]` (Prometheus remote write 1.0) and `[[otlp]]`
/// (OTLP/HTTP protobuf).
#[derive(Debug, Clone, Default)]
pub struct PushConfig {
    /// `[[remote_write]]` blocks.
    pub remote_write: Vec<PushSection>,
    /// `[[otlp]]` blocks.
    pub otlp: Vec<PushSection>,
    /// Where each block is (remote write's, then OTLP's): for the errors found when its files are read.
    places: Vec<Place>,
}

impl PartialEq for PushConfig {
    fn eq(&self, other: &PushConfig) -> bool {
        self.remote_write == other.remote_write && self.otlp == other.otlp
    }
}

impl PushConfig {
    /// The sections the push senders read.
    pub const SECTIONS: [&'static str; 2] = ["remote_write", "otlp"];

    /// The push blocks of `docs`, each checked (a URL, bounds, labels, headers, auth), and no two disk
    /// queues in one directory.
    pub fn read(docs: &[Document]) -> Result<PushConfig, ConfigError> {
        let mut config = PushConfig::default();
        let mut remote_places = Vec::new();
        let mut otlp_places = Vec::new();
        for doc in docs {
            for (section, want, other) in [("remote_write", "url", "endpoint"), ("otlp", "endpoint", "url")] {
                let read = doc.read_section(section, |block| {
                    let b: PushSection = block.read()?;
                    b.check(section, want, other, &block)?;
                    Ok((b, block.place().clone()))
                })?;
                for (b, place) in read {
                    if section == "remote_write" {
                        config.remote_write.push(b);
                        remote_places.push(place);
                    } else {
                        config.otlp.push(b);
                        otlp_places.push(place);
                    }
                }
            }
        }
        config.places = remote_places.into_iter().chain(otlp_places).collect();
        config.check_dirs()?;
        Ok(config)
    }

    /// Parses config `text` (named `file` in errors), reading the push sections only.
    pub fn parse(file: &str, text: &str) -> Result<PushConfig, ConfigError> {
        PushConfig::read(&[Document::parse(file, text)?])
    }

    /// The blocks as `(section, block)`, remote write first.
    pub fn blocks(&self) -> impl Iterator<Item = (&'static str, &PushSection)> {
        self.remote_write.iter().map(|b| ("remote_write", b)).chain(self.otlp.iter().map(|b| ("otlp", b)))
    }

    /// Where the `index`-th block of `section` is, for an error found later (a file it names).
    pub fn place(&self, section: &str, index: usize) -> Option<&Place> {
        let at = if section == "remote_write" { index } else { self.remote_write.len() + index };
        self.places.get(at)
    }

    /// One directory per sender: two senders writing one queue would send each other's samples.
    fn check_dirs(&self) -> Result<(), ConfigError> {
        let dirs: Vec<(usize, &str, &PushSection)> = self
            .blocks()
            .enumerate()
            .filter(|(_, (_, b))| b.queue_dir.is_some())
            .map(|(i, (section, b))| (i, section, b))
            .collect();
        for (k, (i, section, b)) in dirs.iter().enumerate() {
            let dir = b.queue_dir.as_ref().expect("filtered");
            if let Some((_, other_section, other)) = dirs[..k]
                .iter()
                .find(|(_, _, o)| same_dir(o.queue_dir.as_ref().expect("filtered").get_ref(), dir.get_ref()))
            {
                let message = format!(
                    "{:?} is also the queue_dir of [[{other_section}]] {}; each sender needs a directory of its own (this is [[{section}]] {})",
                    dir.get_ref(),
                    other.sender_name(),
                    b.sender_name()
                );
                return Err(match self.places.get(*i) {
                    Some(place) => place.error("queue_dir", message),
                    None => ConfigError { file: "<push>".into(), line: 0, key: "queue_dir".into(), message },
                });
            }
        }
        Ok(())
    }
}

impl PushSection {
    /// Checks a block of `section`, which takes `want` (`url` or `endpoint`) and not `other`.
    fn check(&self, section: &str, want: &str, other: &str, place: &Place) -> Result<(), ConfigError> {
        let b = self;
        let (wanted, unwanted) = if want == "url" { (&b.url, &b.endpoint) } else { (&b.endpoint, &b.url) };
        if unwanted.is_some() {
            return Err(place.error(other, format!("[[{section}]] takes `{want}`, not `{other}`")));
        }
        let Some(url) = wanted else {
            return Err(place.error(want, format!("[[{section}]] needs `{want}`")));
        };
        let u = url.get_ref();
        let host = u.strip_prefix("http://").or_else(|| u.strip_prefix("https://"));
        if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
            return Err(place.error(want, format!("{u:?} is not an http:// or https:// URL")));
        }
        if b.batch.is_zero() {
            return Err(place.error("batch", "must be above zero"));
        }
        if b.timeout.is_zero() {
            return Err(place.error("timeout", "must be above zero"));
        }
        if *b.max_samples_per_send.get_ref() == 0 {
            return Err(place.error("max_samples_per_send", "must be above zero"));
        }
        if b.queue_bytes < 1024 {
            return Err(
                place.error("queue_bytes", format!("{} bytes is too small (at least 1024)", b.queue_bytes))
            );
        }
        if let Some(labels) = &b.external_labels {
            for name in labels.get_ref().keys() {
                if let Err(message) = check_external_label(name) {
                    return Err(place.error("external_labels", message));
                }
            }
        }
        if let Some(headers) = &b.headers {
            for (k, v) in headers.get_ref() {
                let name_ok = !k.is_empty() && k.bytes().all(|c| c.is_ascii_graphic() && c != b':');
                if !name_ok || v.bytes().any(|c| c == b'\r' || c == b'\n') {
                    return Err(place.error("headers", format!("bad header {k:?}")));
                }
            }
        }
        if b.queue_dir.is_some() {
            if b.queue_max_bytes < 1 << 20 {
                let message =
                    format!("{} bytes is too small for a disk queue (at least 1MiB)", b.queue_max_bytes);
                return Err(place.error("queue_max_bytes", message));
            }
            if b.queue_sync.is_zero() {
                return Err(place.error("queue_sync", "must be above zero"));
            }
            if b.queue_max_age.is_some_and(|a| a.is_zero()) {
                return Err(place.error("queue_max_age", "must be above zero"));
            }
        }
        if b.basic_auth.is_some() && b.bearer_token_file.is_some() {
            return Err(place.error("basic_auth", "give `basic_auth` or `bearer_token_file`, not both"));
        }
        if let Some(auth) = &b.basic_auth {
            let a = auth.get_ref();
            if a.password.is_some() == a.password_file.is_some() {
                return Err(place
                    .error("basic_auth", "basic_auth takes exactly one of `password` or `password_file`"));
            }
        }
        Ok(())
    }
}

/// Whether two configured directories are one: the same path, or (when both exist) the same directory.
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    let normal = |p: &std::path::Path| p.components().collect::<PathBuf>();
    normal(a) == normal(b)
        || matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}
