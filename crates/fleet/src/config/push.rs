//! The push senders' part of the fleet config: `[[remote_write]]`, `[[otlp]]` and `[serve] shard`.
//!
//! Kept apart from the target blocks of [`super`] (which re-exports these types), so the two grow without
//! touching each other; what both need (errors, durations, lines) is in `config/parse.rs`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::parse::{duration, line_of, one_second, ConfigError};

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

/// An instance's share of the targets: `index` of `count` (1-based), written `"2/4"`.
///
/// A target belongs to shard `1 + fnv1a64(name) % count`, where `fnv1a64` is the 64-bit FNV-1a
/// hash of the target name's UTF-8 bytes (offset basis `0xcbf29ce484222325`, prime
/// `0x100000001b3`). This function is part of the config's contract: it never changes, so the
/// same config splits the same way on every release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This instance's shard, 1..=count.
    pub index: u32,
    /// How many shards there are.
    pub count: u32,
}

impl Shard {
    /// Parses `"I/N"` with `1 <= I <= N`.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("bad shard {s:?}; write INDEX/COUNT, e.g. \"2/4\" (1 <= INDEX <= COUNT)");
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether the target named `name` belongs to this shard.
    pub fn owns(&self, name: &str) -> bool {
        fnv1a64(name.as_bytes()) % u64::from(self.count) == u64::from(self.index - 1)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        Shard::parse(s)
    }
}

/// 64-bit FNV-1a: the shard hash (see [`Shard`]).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub(super) fn shard_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Shard>, D::Error> {
    let s = String::deserialize(d)?;
    Shard::parse(&s).map(Some).map_err(serde::de::Error::custom)
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

/// Checks every `[[remote_write]]` and `[[otlp]]` block; errors name the file, line and key.
pub fn validate_push(
    remote_write: &[PushSection],
    otlp: &[PushSection],
    file: &str,
    text: &str,
) -> Result<(), ConfigError> {
    let at = |start: usize, key: &str, message: String| ConfigError {
        file: file.into(),
        line: if text.is_empty() { 0 } else { line_of(text, start) },
        key: key.into(),
        message,
    };
    // The line of a block's N-th header, for errors about a missing key.
    let header = |section: &str, n: usize| -> usize {
        let head = format!("[[{section}]]");
        let mut seen = 0;
        for (i, l) in text.lines().enumerate() {
            if l.trim() == head {
                if seen == n {
                    return i + 1;
                }
                seen += 1;
            }
        }
        0
    };
    for (section, blocks, want, other) in
        [("remote_write", remote_write, "url", "endpoint"), ("otlp", otlp, "endpoint", "url")]
    {
        for (n, b) in blocks.iter().enumerate() {
            let block_err = |key: &str, message: String| ConfigError {
                file: file.into(),
                line: header(section, n),
                key: key.into(),
                message,
            };
            let (wanted, unwanted) =
                if want == "url" { (&b.url, &b.endpoint) } else { (&b.endpoint, &b.url) };
            if let Some(u) = unwanted {
                return Err(at(
                    u.span().start,
                    other,
                    format!("[[{section}]] takes `{want}`, not `{other}`"),
                ));
            }
            let Some(url) = wanted else {
                return Err(block_err(want, format!("[[{section}]] needs `{want}`")));
            };
            let u = url.get_ref();
            let host = u.strip_prefix("http://").or_else(|| u.strip_prefix("https://"));
            if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
                return Err(at(url.span().start, want, format!("{u:?} is not an http:// or https:// URL")));
            }
            if b.batch.is_zero() {
                return Err(block_err("batch", "must be above zero".into()));
            }
            if b.timeout.is_zero() {
                return Err(block_err("timeout", "must be above zero".into()));
            }
            if *b.max_samples_per_send.get_ref() == 0 {
                let start = b.max_samples_per_send.span().start;
                return Err(at(start, "max_samples_per_send", "must be above zero".into()));
            }
            if b.queue_bytes < 1024 {
                return Err(block_err(
                    "queue_bytes",
                    format!("{} bytes is too small (at least 1024)", b.queue_bytes),
                ));
            }
            if let Some(labels) = &b.external_labels {
                for name in labels.get_ref().keys() {
                    if let Err(message) = check_external_label(name) {
                        return Err(at(labels.span().start, "external_labels", message));
                    }
                }
            }
            if let Some(headers) = &b.headers {
                for (k, v) in headers.get_ref() {
                    let name_ok = !k.is_empty() && k.bytes().all(|c| c.is_ascii_graphic() && c != b':');
                    if !name_ok || v.bytes().any(|c| c == b'\r' || c == b'\n') {
                        return Err(at(headers.span().start, "headers", format!("bad header {k:?}")));
                    }
                }
            }
            if b.queue_dir.is_some() {
                if b.queue_max_bytes < 1 << 20 {
                    return Err(block_err(
                        "queue_max_bytes",
                        format!("{} bytes is too small for a disk queue (at least 1MiB)", b.queue_max_bytes),
                    ));
                }
                if b.queue_sync.is_zero() {
                    return Err(block_err("queue_sync", "must be above zero".into()));
                }
                if b.queue_max_age.is_some_and(|a| a.is_zero()) {
                    return Err(block_err("queue_max_age", "must be above zero".into()));
                }
            }
            if let (Some(auth), Some(_)) = (&b.basic_auth, &b.bearer_token_file) {
                let message = "give `basic_auth` or `bearer_token_file`, not both".into();
                return Err(at(auth.span().start, "basic_auth", message));
            }
            if let Some(auth) = &b.basic_auth {
                let a = auth.get_ref();
                if a.password.is_some() == a.password_file.is_some() {
                    let message = "basic_auth takes exactly one of `password` or `password_file`".into();
                    return Err(at(auth.span().start, "basic_auth", message));
                }
            }
        }
    }
    // One directory per sender: two senders writing one queue would send each other's samples.
    let dirs: Vec<(&str, &PushSection)> = remote_write
        .iter()
        .map(|b| ("remote_write", b))
        .chain(otlp.iter().map(|b| ("otlp", b)))
        .filter(|(_, b)| b.queue_dir.is_some())
        .collect();
    for (i, (section, b)) in dirs.iter().enumerate() {
        let dir = b.queue_dir.as_ref().expect("filtered");
        if let Some((other_section, other)) = dirs[..i]
            .iter()
            .find(|(_, o)| same_dir(o.queue_dir.as_ref().expect("filtered").get_ref(), dir.get_ref()))
        {
            return Err(at(
                dir.span().start,
                "queue_dir",
                format!(
                    "{:?} is also the queue_dir of [[{other_section}]] {}; each sender needs a directory of its own (this is [[{section}]] {})",
                    dir.get_ref(),
                    other.sender_name(),
                    b.sender_name()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether two configured directories are one: the same path, or (when both exist) the same directory.
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    let normal = |p: &std::path::Path| p.components().collect::<PathBuf>();
    normal(a) == normal(b)
        || matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}
