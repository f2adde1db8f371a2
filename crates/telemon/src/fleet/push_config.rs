//! The push senders' part of the fleet config: `[[remote_write]]`, `[[otlp]]` and `[serve] shard`.
//!
//! Kept apart from the target blocks of [`super::config`] (which re-exports these types), so the
//! two grow without touching each other.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::config::{duration, line_of, one_second, ConfigError, FleetConfig};

/// The default bound of a sender's queue (64 MiB).
pub const DEFAULT_QUEUE_BYTES: u64 = 64 << 20;
/// The default most samples (remote write) or data points (OTLP) in one request.
pub const DEFAULT_MAX_SAMPLES_PER_SEND: usize = 2_000;
/// The default timeout of one request.
pub const DEFAULT_PUSH_TIMEOUT: Duration = Duration::from_secs(30);
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
pub fn validate_push(cfg: &FleetConfig, file: &str, text: &str) -> Result<(), ConfigError> {
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
        [("remote_write", &cfg.remote_write, "url", "endpoint"), ("otlp", &cfg.otlp, "endpoint", "url")]
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FleetConfig, ConfigError> {
        FleetConfig::parse("p.toml", text)
    }

    #[test]
    fn every_option_parses() {
        let c = parse(
            r#"
[serve]
shard = "2/4"
[[remote_write]]
name = "mimir"
url = "https://mimir:9009/api/v1/push"
batch = "2s"
max_samples_per_send = 500
queue_bytes = "1MiB"
headers = { "X-Scope-OrgID" = "tenant-1" }
basic_auth = { username = "u", password_file = "/etc/pw" }
tls = { ca_file = "/etc/ca.pem" }
external_labels = { cluster = "lab", _x = "1" }
timeout = "5s"
[[remote_write]]
url = "http://vm:8428/api/v1/write"
bearer_token_file = "/etc/token"
queue_bytes = 4096
[[otlp]]
endpoint = "http://collector:4318/"
"#,
        )
        .unwrap();
        assert_eq!(c.serve.shard, Some(Shard { index: 2, count: 4 }));
        let rw = &c.remote_write[0];
        assert_eq!(rw.batch, Duration::from_secs(2));
        assert_eq!(*rw.max_samples_per_send.get_ref(), 500);
        assert_eq!(rw.queue_bytes, 1 << 20);
        assert_eq!(rw.headers(), [("X-Scope-OrgID".to_owned(), "tenant-1".to_owned())]);
        assert_eq!(rw.timeout, Duration::from_secs(5));
        assert_eq!(rw.sender_name(), "mimir");
        assert_eq!(c.remote_write[1].queue_bytes, 4096);
        assert_eq!(c.remote_write[1].max_samples_per_send.get_ref(), &DEFAULT_MAX_SAMPLES_PER_SEND);
        assert_eq!(c.remote_write[1].sender_name(), "http://vm:8428/api/v1/write");
        assert_eq!(c.otlp[0].request_url(), "http://collector:4318/v1/metrics");
        assert_eq!(c.otlp[0].queue_bytes, DEFAULT_QUEUE_BYTES);
    }

    #[test]
    fn bad_blocks_name_file_line_and_key() {
        let cases = [
            ("[[remote_write]]\nendpoint = \"http://x\"\n", 2, "endpoint"),
            ("[[otlp]]\nbatch = \"1s\"\n", 1, "endpoint"),
            ("[[remote_write]]\nurl = \"ftp://x\"\n", 2, "url"),
            ("[[remote_write]]\nurl = \"http://x\"\nexternal_labels = { \"a-b\" = \"1\" }\n", 3, "external_labels"),
            ("[[remote_write]]\nurl = \"http://x\"\nexternal_labels = { __x = \"1\" }\n", 3, "external_labels"),
            ("[[remote_write]]\nurl = \"http://x\"\nexternal_labels = { target = \"1\" }\n", 3, "external_labels"),
            ("[[remote_write]]\nurl = \"http://x\"\nexternal_labels = { le = \"1\" }\n", 3, "external_labels"),
            ("[[remote_write]]\nurl = \"http://x\"\nmax_samples_per_send = 0\n", 3, "max_samples_per_send"),
            ("[[remote_write]]\nurl = \"http://x\"\nqueue_bytes = \"lots\"\n", 3, "queue_bytes"),
            ("[[remote_write]]\nurl = \"http://x\"\nbatch = \"never\"\n", 3, "batch"),
            ("[[remote_write]]\nurl = \"http://x\"\nbearer_token_file = \"/t\"\nbasic_auth = { username = \"u\", password = \"p\" }\n", 4, "basic_auth"),
            ("[[remote_write]]\nurl = \"http://x\"\nbasic_auth = { username = \"u\" }\n", 3, "basic_auth"),
            ("[[otlp]]\nendpoint = \"http://x\"\ncompression = \"gzip\"\n", 3, "compression"),
            ("[serve]\nshard = \"3/2\"\n", 2, "shard"),
            ("[serve]\nshard = \"0/2\"\n", 2, "shard"),
            ("[[remote_write]]\nurl = \"http://x\"\n[[remote_write]]\nurl = \"http://y\"\nbatch = \"0s\"\n", 3, "batch"),
        ];
        for (text, line, key) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (line, key), "{text}: {e}");
            assert!(e.to_string().starts_with(&format!("p.toml:{line}: {key}: ")), "{e}");
        }
    }

    #[test]
    fn the_readme_push_example_and_every_deploy_push_config_parse() {
        let readme = include_str!("../../../../README.md");
        let start = readme.find("<!-- telemon-push.toml").expect("the README marks its push example");
        let block = &readme[start..];
        let body = &block[block.find("```toml\n").expect("a toml block") + 8..];
        let body = &body[..body.find("```").expect("the block ends")];
        let c = FleetConfig::parse("README.md", body).unwrap();
        assert_eq!((c.remote_write.len(), c.otlp.len()), (1, 1));
        assert_eq!(c.serve.shard, Some(Shard { index: 1, count: 2 }));

        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/push");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let c = FleetConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(c.remote_write.len() + c.otlp.len(), 1, "{}", path.display());
                n += 1;
            }
        }
        assert!(n >= 6, "{n} configs in deploy/push");
    }

    #[test]
    fn label_names_follow_the_prometheus_rule() {
        for ok in ["a", "_a", "cluster_1", "A9"] {
            check_external_label(ok).unwrap();
        }
        for bad in
            ["", "1a", "a-b", "a.b", "__name__", "__x", "target", "protocol", "kind", "le", "quantile", "é"]
        {
            assert!(check_external_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_shard_hash_is_fnv1a64_and_never_changes() {
        // The published FNV-1a test vectors: a change here re-shards every fleet.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let shards =
            [Shard::parse("1/3").unwrap(), Shard::parse("2/3").unwrap(), Shard::parse("3/3").unwrap()];
        for i in 0..300 {
            let name = format!("t{i}");
            assert_eq!(shards.iter().filter(|s| s.owns(&name)).count(), 1, "{name}");
        }
        assert!(Shard::parse("1/1").unwrap().owns("anything"));
        assert_eq!(Shard::parse(" 2/4 ").unwrap().to_string(), "2/4");
        for bad in ["", "2", "a/b", "0/1", "2/1", "1/0", "-1/2"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_byte_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_byte_size("10 MB"), Some(10_000_000));
        assert_eq!(parse_byte_size("12"), Some(12));
        assert_eq!(parse_byte_size("1TiB"), None);
    }
}
