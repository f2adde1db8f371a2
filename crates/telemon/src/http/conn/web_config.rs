//! The web configuration file that every Prometheus exporter reads (prometheus/exporter-toolkit's
//! `--web.config.file`, v0.10 and later): TLS, basic auth users, response headers, a rate limit.
//!
//! The same file works for node_exporter and for telemon: every key of the toolkit's documentation
//! is read, and what rustls cannot do (TLS 1.0 and 1.1, CBC cipher suites, P-521, post-quantum
//! groups, e-mail and URI client SANs) is refused with an error that says so, never ignored. Every
//! error reads `FILE:LINE: KEY: why`, with what the file gave cut to a few dozen characters. Relative
//! file names are relative to the file's directory, as in the toolkit. YAML nested deeper than 64
//! lists and mappings, or holding more than 100,000 values once its aliases are expanded, is refused
//! before it is loaded (it would overflow the stack or take all memory; a real file nests three deep
//! and holds a few dozen values).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use super::auth::{Auth, RateLimiter};
use super::settings::{read_bounded, ClientAuth, Curve, PemSource, RateLimit, TlsSettings, TlsVersion};

/// The largest web configuration file read (a real one is a few hundred bytes).
pub const MAX_WEB_CONFIG_BYTES: u64 = 1 << 20;

/// The headers that `http_server_config.headers` may set, and the values each accepts (any when
/// empty): exactly the toolkit's list, so that every exporter answers alike.
pub const ALLOWED_HEADERS: [(&str, &[&str]); 5] = [
    ("Content-Security-Policy", &[]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-XSS-Protection", &[]),
    ("Strict-Transport-Security", &[]),
];

/// A web configuration file that cannot be used, with where (file, line, key) and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WebConfigError(String);

impl WebConfigError {
    /// `FILE:LINE: KEY: why`.
    ///
    /// A key longer than [`MAX_KEY_SHOWN`] bytes (it holds what the file gave, such as a user's name)
    /// and a reason longer than [`MAX_WHY_SHOWN`] are cut, so that an error stays a line whatever the file.
    pub(super) fn at(file: &Path, line: usize, key: &str, why: impl std::fmt::Display) -> WebConfigError {
        let (key, why) = (cut(key, MAX_KEY_SHOWN), why.to_string());
        let why = cut(&why, MAX_WHY_SHOWN);
        WebConfigError(format!("{}:{line}: {key}: {why}", file.display()))
    }
}

/// The longest key an error shows (bytes; more is cut and marked with `…`).
const MAX_KEY_SHOWN: usize = 160;
/// The longest reason an error gives (bytes; more is cut and marked with `…`).
const MAX_WHY_SHOWN: usize = 800;
/// The deepest nesting of lists and mappings read (a web config file nests three deep).
const MAX_WEB_CONFIG_DEPTH: usize = 64;
/// The most YAML nodes read (scalars, lists and mappings; an alias counts as every node it copies).
/// A file with a thousand users holds about two thousand.
const MAX_WEB_CONFIG_NODES: usize = 100_000;

/// `text`, cut at a character boundary to at most `max` bytes and marked with `…` when longer.
fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len()).into()
}

/// A value the file gave, quoted for an error: its first 64 characters when longer.
fn shown(value: &str) -> String {
    match value.char_indices().nth(64) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &value[..end], value.len()),
    }
}

/// The web configuration file's settings (exporter-toolkit's format): TLS, basic auth users,
/// response headers and a rate limit.
pub struct WebConfig {
    /// The file it was read from.
    pub path: PathBuf,
    /// TLS, when `tls_server_config` names a certificate.
    pub tls: Option<TlsSettings>,
    /// `http_server_config.http2` (default true). telemon offers HTTP/1.1 only (ALPN `http/1.1`),
    /// which every HTTP/2 client falls back to, so both values serve.
    pub http2: bool,
    /// `http_server_config.headers`: set on every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `rate_limit`, when its interval is not zero.
    pub rate_limit: Option<RateLimit>,
    pub(super) users: Arc<Auth>,
    pub(super) limiter: Option<RateLimiter>,
    pub(super) acceptor: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls)
            .field("http2", &self.http2)
            .field("headers", &self.headers)
            .field("users", &self.users.names())
            .field("rate_limit", &self.rate_limit)
            .finish_non_exhaustive()
    }
}

impl WebConfig {
    /// Reads and checks the web configuration file at `path`: its YAML, and the certificate, key
    /// and CA files it names (the TLS setup is built now, so that a bad file fails here).
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = read_bounded(path, MAX_WEB_CONFIG_BYTES)
            .map_err(|why| WebConfigError(format!("{}: {why}", path.display())))?;
        let text = String::from_utf8(text)
            .map_err(|_| WebConfigError(format!("{}: not UTF-8 text", path.display())))?;
        WebConfig::parse(path, &text)
    }

    /// Checks `text` as the web configuration file `path` (relative file names in it are relative to
    /// `path`'s directory).
    pub fn parse(path: &Path, text: &str) -> Result<WebConfig, WebConfigError> {
        let doc = Doc { file: path, dir: path.parent().unwrap_or(Path::new("")) };
        check_shape(path, text)?;
        let docs = MarkedYaml::load_from_str(text).map_err(|e| {
            WebConfigError::at(
                path,
                e.marker().line(),
                "yaml",
                format!("{} (column {})", e.info(), e.marker().col() + 1),
            )
        })?;
        let root = match docs.as_slice() {
            [] => None,
            [root] => Some(root),
            [_, second, ..] => {
                return Err(doc.err(line(second), "yaml", "one YAML document expected, found several"))
            }
        };
        let mut config = WebConfig {
            path: path.to_owned(),
            tls: None,
            http2: true,
            headers: Vec::new(),
            rate_limit: None,
            users: Arc::new(Auth::new(Vec::new())),
            limiter: None,
            acceptor: None,
        };
        let Some(root) = root else { return Ok(config) };
        let mut users = Vec::new();
        for (key, key_line, value) in doc.mapping(root, "(top level)")? {
            match key.as_str() {
                "tls_server_config" => config.tls = doc.tls(value)?,
                "http_server_config" => {
                    for (key, key_line, value) in doc.mapping(value, "http_server_config")? {
                        let name = format!("http_server_config.{key}");
                        match key.as_str() {
                            "http2" => config.http2 = doc.boolean(value, &name)?.unwrap_or(true),
                            "headers" => config.headers = doc.headers(value)?,
                            _ => return Err(doc.unknown(key_line, &name, &["http2", "headers"])),
                        }
                    }
                }
                "basic_auth_users" => {
                    for (user, user_line, hash) in doc.mapping(value, "basic_auth_users")? {
                        let name = format!("basic_auth_users.{user}");
                        let hash = doc.string(hash, &name)?.unwrap_or_default();
                        check_bcrypt(&hash).map_err(|why| doc.err(user_line, &name, why))?;
                        users.push((user, hash));
                    }
                }
                "rate_limit" => config.rate_limit = doc.rate_limit(value)?,
                _ => {
                    let known = ["tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"];
                    return Err(doc.unknown(key_line, &key, &known));
                }
            }
        }
        config.users = Arc::new(Auth::new(users));
        config.limiter = config.rate_limit.map(RateLimiter::new);
        if let Some(tls) = &config.tls {
            let lines = doc.tls_lines(root);
            let server = super::tls::server_config(tls).map_err(|(key, why)| {
                let at = lines
                    .get(key)
                    .copied()
                    .unwrap_or_else(|| lines.get("tls_server_config").copied().unwrap_or(1));
                doc.err(at, &format!("tls_server_config.{key}"), why)
            })?;
            config.acceptor = Some(tokio_rustls::TlsAcceptor::from(server));
        }
        Ok(config)
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        self.acceptor.is_some()
    }

    /// The names of `basic_auth_users` (every path but `/healthz` needs one when not empty).
    pub fn user_names(&self) -> Vec<&str> {
        self.users.names()
    }

    /// `basic_auth_users` as the file gives them: (name, bcrypt hash) pairs, in the file's order
    /// (the hashes are not secret, but are never logged either).
    pub fn basic_auth_users(&self) -> &[(String, String)] {
        self.users.users()
    }
}

/// Refuses YAML nested deeper than [`MAX_WEB_CONFIG_DEPTH`] or holding more than
/// [`MAX_WEB_CONFIG_NODES`] nodes once its aliases are expanded, before saphyr's loader sees it:
/// the loader recurses once per level (100,000 `- ` on a line overflowed the stack) and copies the
/// anchored node at each alias (ten aliases of ten aliases of ... would take all memory). This
/// walks saphyr-parser's events, which it makes without recursion; a syntax error is left to the
/// loader to report (the events before it passed this check).
fn check_shape(path: &Path, text: &str) -> Result<(), WebConfigError> {
    use saphyr_parser::{Event, Parser};
    /// A list or mapping not closed yet.
    struct Open {
        anchor: usize,
        /// The node count when it opened (itself included).
        first: usize,
        /// Its height: 1, or 1 + its highest child's.
        height: usize,
    }
    let mut open: Vec<Open> = Vec::new();
    // Anchor id -> (nodes, height) of what it names.
    let mut anchors: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut nodes = 0usize;
    let too_deep = |at: usize| {
        WebConfigError::at(
            path,
            at,
            "yaml",
            format!("nested deeper than {MAX_WEB_CONFIG_DEPTH} lists and mappings (a web config file nests three deep)"),
        )
    };
    for event in Parser::new_from_str(text) {
        let Ok((event, span)) = event else { return Ok(()) };
        let at = span.start.line().max(1);
        // A node just completed: (its nodes, its height, its anchor).
        let done = match event {
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                nodes = nodes.saturating_add(1);
                open.push(Open { anchor, first: nodes, height: 1 });
                if open.len() > MAX_WEB_CONFIG_DEPTH {
                    return Err(too_deep(at));
                }
                None
            }
            Event::SequenceEnd | Event::MappingEnd => {
                open.pop().map(|o| (nodes - o.first + 1, o.height, o.anchor))
            }
            Event::Scalar(_, _, anchor, _) => {
                nodes = nodes.saturating_add(1);
                Some((1, 0, anchor))
            }
            Event::Alias(id) => {
                let (n, height) = anchors.get(&id).copied().unwrap_or((1, 0));
                nodes = nodes.saturating_add(n);
                if open.len().saturating_add(height) > MAX_WEB_CONFIG_DEPTH {
                    return Err(too_deep(at));
                }
                Some((n, height, 0))
            }
            _ => None,
        };
        if nodes > MAX_WEB_CONFIG_NODES {
            return Err(WebConfigError::at(
                path,
                at,
                "yaml",
                format!("more than {MAX_WEB_CONFIG_NODES} values (aliases counted as every value they copy): a web config file holds a few dozen"),
            ));
        }
        if let Some((n, height, anchor)) = done {
            if anchor > 0 {
                anchors.insert(anchor, (n, height));
            }
            if let Some(parent) = open.last_mut() {
                parent.height = parent.height.max(height + 1);
            }
        }
    }
    Ok(())
}

/// A bcrypt hash as Go's `bcrypt.Cost` accepts it (`$2a$`, `$2b$`, `$2y$`, cost 4 to 31).
fn check_bcrypt(hash: &str) -> Result<(), String> {
    let why = "not a bcrypt hash: give the hash of the password (`telemon hash-password` prints one), never the password itself";
    let parts = bcrypt::HashParts::from_str(hash).map_err(|_| why.to_owned())?;
    if !(4..=31).contains(&parts.get_cost()) {
        return Err(format!("bcrypt cost {} is outside 4..=31", parts.get_cost()));
    }
    Ok(())
}

fn line(node: &MarkedYaml<'_>) -> usize {
    node.span.start.line().max(1)
}

/// The file being read: where errors point and relative paths start.
struct Doc<'a> {
    file: &'a Path,
    dir: &'a Path,
}

/// A mapping's entries: key, the key's line, value.
type Entries<'n, 'i> = Vec<(String, usize, &'n MarkedYaml<'i>)>;

impl Doc<'_> {
    fn err(&self, line: usize, key: &str, why: impl std::fmt::Display) -> WebConfigError {
        WebConfigError::at(self.file, line, key, why)
    }

    fn unknown(&self, line: usize, key: &str, known: &[&str]) -> WebConfigError {
        self.err(line, key, format!("unknown key (expected one of {})", known.join(", ")))
    }

    /// `node` as a mapping with string keys (an empty one for null).
    fn mapping<'n, 'i>(
        &self,
        node: &'n MarkedYaml<'i>,
        key: &str,
    ) -> Result<Entries<'n, 'i>, WebConfigError> {
        match &node.data {
            YamlData::Value(Scalar::Null) => Ok(Vec::new()),
            YamlData::Tagged(_, inner) => self.mapping(inner, key),
            YamlData::Mapping(m) => m
                .iter()
                .map(|(k, v)| match &k.data {
                    YamlData::Value(Scalar::String(s)) => Ok((s.to_string(), line(k), v)),
                    _ => Err(self.err(line(k), key, "keys must be strings")),
                })
                .collect(),
            _ => Err(self.err(line(node), key, "expected a mapping (key: value lines)")),
        }
    }

    /// A string; `None` for null. Numbers and booleans are taken as their text (as Go's YAML does).
    fn string(&self, node: &MarkedYaml<'_>, key: &str) -> Result<Option<String>, WebConfigError> {
        match &node.data {
            YamlData::Value(Scalar::Null) => Ok(None),
            YamlData::Value(Scalar::String(s)) => Ok(Some(s.to_string())),
            YamlData::Value(Scalar::Integer(i)) => Ok(Some(i.to_string())),
            YamlData::Value(Scalar::Boolean(b)) => Ok(Some(b.to_string())),
            YamlData::Tagged(_, inner) => self.string(inner, key),
            _ => Err(self.err(line(node), key, "expected a string")),
        }
    }

    fn boolean(&self, node: &MarkedYaml<'_>, key: &str) -> Result<Option<bool>, WebConfigError> {
        match &node.data {
            YamlData::Value(Scalar::Null) => Ok(None),
            YamlData::Value(Scalar::Boolean(b)) => Ok(Some(*b)),
            // YAML 1.1's spellings, which Go's YAML (v2) reads as booleans.
            YamlData::Value(Scalar::String(s)) => match s.as_ref() {
                "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => Ok(Some(true)),
                "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n" | "N" => Ok(Some(false)),
                _ => Err(self.err(line(node), key, format!("expected true or false, not {}", shown(s)))),
            },
            YamlData::Tagged(_, inner) => self.boolean(inner, key),
            _ => Err(self.err(line(node), key, "expected true or false")),
        }
    }

    /// A list of strings (null is empty).
    fn strings(&self, node: &MarkedYaml<'_>, key: &str) -> Result<Vec<(String, usize)>, WebConfigError> {
        match &node.data {
            YamlData::Value(Scalar::Null) => Ok(Vec::new()),
            YamlData::Sequence(items) => items
                .iter()
                .map(|item| Ok((self.string(item, key)?.unwrap_or_default(), line(item))))
                .collect(),
            YamlData::Tagged(_, inner) => self.strings(inner, key),
            _ => Err(self.err(line(node), key, "expected a list")),
        }
    }

    fn path(&self, value: String) -> PathBuf {
        let p = PathBuf::from(value);
        if p.is_absolute() {
            p
        } else {
            self.dir.join(p)
        }
    }

    /// The lines of `tls_server_config` and of each of its keys.
    fn tls_lines(&self, root: &MarkedYaml<'_>) -> HashMap<&'static str, usize> {
        let mut lines = HashMap::new();
        let YamlData::Mapping(top) = &root.data else { return lines };
        for (k, v) in top {
            if matches!(&k.data, YamlData::Value(Scalar::String(s)) if s == "tls_server_config") {
                lines.insert("tls_server_config", line(k));
                if let YamlData::Mapping(m) = &v.data {
                    for (k, _) in m {
                        if let YamlData::Value(Scalar::String(s)) = &k.data {
                            if let Some(known) = TLS_KEYS.iter().find(|known| **known == s.as_ref()) {
                                lines.insert(*known, line(k));
                            }
                        }
                    }
                }
            }
        }
        lines
    }

    fn tls(&self, node: &MarkedYaml<'_>) -> Result<Option<TlsSettings>, WebConfigError> {
        let section_line = line(node);
        let mut inline_cert = None;
        let mut inline_key = None;
        let mut inline_ca = None;
        let mut cert_file = None;
        let mut key_file = None;
        let mut ca_file = None;
        let mut client_auth = None;
        let mut sans = Vec::new();
        let mut sans_line = section_line;
        let mut min_version = (TlsVersion::Tls12, 0);
        let mut max_version = (TlsVersion::Tls13, 0);
        let mut cipher_suites = Vec::new();
        let mut prefer_server = true;
        let mut curves = Vec::new();
        for (key, key_line, value) in self.mapping(node, "tls_server_config")? {
            let name = format!("tls_server_config.{key}");
            let text =
                || self.string(value, &name).map(|s| s.filter(|s| !s.is_empty()).map(|s| (s, key_line)));
            match key.as_str() {
                "cert" => inline_cert = text()?,
                "key" => inline_key = text()?,
                "client_ca" => inline_ca = text()?,
                "cert_file" => cert_file = text()?,
                "key_file" => key_file = text()?,
                "client_ca_file" => ca_file = text()?,
                "client_auth_type" => {
                    let given = self.string(value, &name)?.unwrap_or_default();
                    let auth = ClientAuth::parse(&given).ok_or_else(|| {
                        self.err(key_line, &name, format!(
                            "{} is not one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert", shown(&given)
                        ))
                    })?;
                    client_auth = Some((auth, key_line));
                }
                "client_allowed_sans" => {
                    sans_line = key_line;
                    for (san, at) in self.strings(value, &name)? {
                        let ok = san.parse::<std::net::IpAddr>().is_ok()
                            || rustls::pki_types::DnsName::try_from(san.as_str()).is_ok();
                        if !ok {
                            return Err(self.err(at, &name, format!(
                                "{}: telemon matches DNS names and IP addresses only (rustls's verifier has no e-mail or URI names)", shown(&san)
                            )));
                        }
                        sans.push(san);
                    }
                    if sans.is_empty() {
                        // Go treats an empty list as set: nobody could match.
                        return Err(self.err(key_line, &name, "an empty list would refuse every client"));
                    }
                }
                "min_version" | "max_version" => {
                    let given = self.string(value, &name)?.unwrap_or_default();
                    let version = match given.as_str() {
                        "TLS12" => TlsVersion::Tls12,
                        "TLS13" => TlsVersion::Tls13,
                        "TLS10" | "TLS11" => {
                            return Err(self.err(key_line, &name, format!(
                                "{given} is not supported: rustls has TLS 1.2 and 1.3 only (use TLS12 or TLS13)"
                            )))
                        }
                        _ => return Err(self.err(key_line, &name, format!("{} is not one of TLS12, TLS13 (nor TLS10, TLS11, which rustls lacks)", shown(&given)))),
                    };
                    if key == "min_version" {
                        min_version = (version, key_line);
                    } else {
                        max_version = (version, key_line);
                    }
                }
                "cipher_suites" => {
                    for (suite, at) in self.strings(value, &name)? {
                        cipher_suites.push(cipher_suite(&suite).map_err(|why| self.err(at, &name, why))?);
                    }
                }
                "prefer_server_cipher_suites" => prefer_server = self.boolean(value, &name)?.unwrap_or(true),
                "curve_preferences" => {
                    for (curve, at) in self.strings(value, &name)? {
                        curves.push(match curve.as_str() {
                            "X25519" => Curve::X25519,
                            "CurveP256" => Curve::P256,
                            "CurveP384" => Curve::P384,
                            "CurveP521" | "X25519MLKEM768" | "SecP256r1MLKEM768" | "SecP384r1MLKEM1024" => {
                                return Err(self.err(at, &name, format!(
                                    "{curve} is not supported by rustls with ring: use X25519, CurveP256 or CurveP384"
                                )))
                            }
                            _ => return Err(self.err(at, &name, format!("unknown curve {} (X25519, CurveP256, CurveP384)", shown(&curve)))),
                        });
                    }
                }
                _ => return Err(self.unknown(key_line, &name, &TLS_KEYS)),
            }
        }
        let client_auth_line = client_auth.map(|(_, l)| l);
        let client_auth = client_auth.map_or(ClientAuth::NoClientCert, |(a, _)| a);
        let enabled = inline_cert.is_some()
            || inline_key.is_some()
            || cert_file.is_some()
            || key_file.is_some()
            || inline_ca.is_some()
            || ca_file.is_some()
            || client_auth_line.is_some();
        if !enabled {
            // An empty tls_server_config: plain HTTP, as in the toolkit.
            return Ok(None);
        }
        let cert_at = cert_file
            .as_ref()
            .map(|(_, l)| (*l, "tls_server_config.cert_file"))
            .or(inline_cert.as_ref().map(|(_, l)| (*l, "tls_server_config.cert")))
            .unwrap_or((section_line, "tls_server_config"));
        let cert = match (cert_file, inline_cert) {
            (Some((f, _)), _) => PemSource::File(self.path(f)),
            (None, Some((text, _))) => PemSource::Inline(text),
            (None, None) => {
                let at = key_file.as_ref().or(inline_key.as_ref()).map_or(section_line, |(_, l)| *l);
                let key = if key_file.is_some() { "tls_server_config.key_file" } else { "tls_server_config" };
                return Err(self.err(at, key, "a key without a certificate: give cert_file (or cert) too"));
            }
        };
        let key = match (key_file, inline_key) {
            (Some((f, _)), _) => PemSource::File(self.path(f)),
            (None, Some((text, _))) => PemSource::Inline(text),
            (None, None) => {
                return Err(self.err(
                    cert_at.0,
                    cert_at.1,
                    "a certificate without its key: give key_file (or key) too",
                ));
            }
        };
        let ca_at = ca_file
            .as_ref()
            .map(|(_, l)| (*l, "tls_server_config.client_ca_file"))
            .or(inline_ca.as_ref().map(|(_, l)| (*l, "tls_server_config.client_ca")))
            .unwrap_or((section_line, "tls_server_config"));
        let client_ca = match (ca_file, inline_ca) {
            (Some((f, _)), _) => Some(PemSource::File(self.path(f))),
            (None, Some((text, _))) => Some(PemSource::Inline(text)),
            (None, None) => None,
        };
        if client_ca.is_some() && client_auth == ClientAuth::NoClientCert {
            return Err(self.err(ca_at.0, ca_at.1,
                "a client CA without a client_auth_type: set client_auth_type (RequireAndVerifyClientCert for mTLS)"));
        }
        if !sans.is_empty()
            && !matches!(
                client_auth,
                ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert
            )
        {
            return Err(self.err(sans_line, "tls_server_config.client_allowed_sans",
                "needs client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert (otherwise a client may send no certificate to match)"));
        }
        if min_version.0 > max_version.0 {
            let at = if min_version.1 > 0 { min_version.1 } else { max_version.1 };
            return Err(self.err(at, "tls_server_config.min_version", "min_version is above max_version"));
        }
        Ok(Some(TlsSettings {
            cert,
            key,
            client_ca,
            client_auth,
            client_allowed_sans: sans,
            min_version: min_version.0,
            max_version: max_version.0,
            cipher_suites,
            prefer_server_cipher_suites: prefer_server,
            curve_preferences: curves,
        }))
    }

    fn headers(&self, node: &MarkedYaml<'_>) -> Result<Vec<(HeaderName, HeaderValue)>, WebConfigError> {
        let mut headers = Vec::new();
        for (name, key_line, value) in self.mapping(node, "http_server_config.headers")? {
            let key = format!("http_server_config.headers.{name}");
            let Some((_, allowed)) = ALLOWED_HEADERS.iter().find(|(h, _)| *h == name) else {
                let list: Vec<&str> = ALLOWED_HEADERS.iter().map(|(h, _)| *h).collect();
                return Err(self.err(
                    key_line,
                    &key,
                    format!("this header can not be configured (only {})", list.join(", ")),
                ));
            };
            let value = self.string(value, &key)?.unwrap_or_default();
            if value.is_empty() {
                continue; // "Unset if blank."
            }
            if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
                return Err(self.err(key_line, &key, format!("{} is not one of {allowed:?}", shown(&value))));
            }
            let header_value = HeaderValue::from_str(&value)
                .map_err(|_| self.err(key_line, &key, "not a valid header value (control characters?)"))?;
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| self.err(key_line, &key, "not a valid header name"))?;
            headers.push((header_name, header_value));
        }
        Ok(headers)
    }

    fn rate_limit(&self, node: &MarkedYaml<'_>) -> Result<Option<RateLimit>, WebConfigError> {
        let mut interval = Duration::ZERO;
        let mut burst = None;
        for (key, key_line, value) in self.mapping(node, "rate_limit")? {
            let name = format!("rate_limit.{key}");
            match key.as_str() {
                "interval" => {
                    let text = self.string(value, &name)?.unwrap_or_default();
                    interval = if text == "0" || text.is_empty() {
                        Duration::ZERO
                    } else {
                        humantime::parse_duration(&text).map_err(|e| {
                            self.err(
                                key_line,
                                &name,
                                format!("{} is not a duration such as 1s or 500ms: {e}", shown(&text)),
                            )
                        })?
                    };
                }
                "burst" => {
                    let text = self.string(value, &name)?.unwrap_or_default();
                    burst = Some(text.parse::<u32>().map_err(|_| {
                        self.err(key_line, &name, format!("{} is not a whole number", shown(&text)))
                    })?);
                }
                _ => return Err(self.unknown(key_line, &name, &["interval", "burst"])),
            }
        }
        if interval.is_zero() {
            return Ok(None);
        }
        // As the toolkit (golang.org/x/time/rate): a burst of 0, or none, lets no request through.
        let burst = burst.unwrap_or(0);
        if burst == 0 {
            tracing::warn!(
                file = %self.file.display(),
                "rate_limit.burst is 0 (or missing): every request is refused with 429, as exporter-toolkit does; give burst: 1 or more"
            );
        }
        Ok(Some(RateLimit { interval, burst }))
    }
}

/// Every key of `tls_server_config`.
const TLS_KEYS: [&str; 13] = [
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
];

/// Go's name (`tls.CipherSuites()`) of every cipher suite rustls (with ring) has: TLS 1.3's three
/// (which rustls names `TLS13_...`) and TLS 1.2's six ECDHE AEAD suites.
const GO_CIPHER_SUITES: [(&str, rustls::CipherSuite); 9] = {
    use rustls::CipherSuite as S;
    [
        ("TLS_AES_128_GCM_SHA256", S::TLS13_AES_128_GCM_SHA256),
        ("TLS_AES_256_GCM_SHA384", S::TLS13_AES_256_GCM_SHA384),
        ("TLS_CHACHA20_POLY1305_SHA256", S::TLS13_CHACHA20_POLY1305_SHA256),
        ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
        ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
        ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ]
};

/// A Go cipher suite name, as rustls's suite.
fn cipher_suite(name: &str) -> Result<rustls::CipherSuite, String> {
    if let Some((_, suite)) = GO_CIPHER_SUITES.iter().find(|(go, _)| *go == name) {
        return Ok(*suite);
    }
    let known: Vec<&str> = GO_CIPHER_SUITES.iter().map(|(go, _)| *go).collect();
    if let Some((go, _)) = GO_CIPHER_SUITES.iter().find(|(_, s)| s.as_str() == Some(name)) {
        return Err(format!(
            "{} is rustls's name: the file takes Go's, {go} (so that node_exporter reads it too)",
            shown(name)
        ));
    }
    if name.starts_with("TLS_") {
        Err(format!(
            "{} is not supported by rustls (it has no CBC, RSA key exchange or 3DES suites): use one of {}",
            shown(name),
            known.join(", ")
        ))
    } else {
        Err(format!("unknown cipher suite {}: use one of {}", shown(name), known.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_of_rustls_has_its_go_name() {
        let provider = rustls::crypto::ring::default_provider();
        let ours: Vec<rustls::CipherSuite> = GO_CIPHER_SUITES.iter().map(|(_, s)| *s).collect();
        let theirs: Vec<rustls::CipherSuite> = provider.cipher_suites.iter().map(|s| s.suite()).collect();
        for suite in &theirs {
            assert!(ours.contains(suite), "{suite:?} has no Go name");
        }
        assert_eq!(ours.len(), theirs.len(), "{ours:?} vs {theirs:?}");
        for (go, suite) in GO_CIPHER_SUITES {
            assert_eq!(cipher_suite(go), Ok(suite));
            // TLS 1.2's names are the same in both; TLS 1.3's rustls spelling is refused with Go's.
            let rustls_name = suite.as_str().unwrap();
            if rustls_name != go {
                assert!(cipher_suite(rustls_name).unwrap_err().contains(go));
            }
        }
    }
}
