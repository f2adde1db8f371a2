//! Properties of the web configuration file reader (`WebConfig::parse`), exporter-toolkit's YAML:
//!
//! - a round trip: a generated config (users with real bcrypt hashes, every allowed header with values that need
//!   quoting, TLS on the committed test certificates with a generated `client_auth_type` and versions, a rate
//!   limit), written as YAML in varied but valid styles (plain, single- and double-quoted with escapes, literal
//!   blocks, flow mappings, indentation widths, comments, key orders), reads back to exactly what was generated;
//! - never a panic: arbitrary bytes, text made of YAML's syntax, and every prefix of a valid file (a half-written
//!   one, as a reload may see) give a config or a typed `FILE:LINE: KEY: why` error of bounded length (the same
//!   checks as the fuzz target `telemon_web_config`, the functions of `crate::fuzz`);
//! - deep nesting (100,000 `[`, `{`, `- `, `? `, tags, anchors) and alias bombs are refused with an error, not a
//!   stack overflow or all the memory.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::{web_config as fuzz_web_config, web_config_text, MAX_WEB_CONFIG_ERROR};
use crate::http::{ClientAuth, PemSource, TlsVersion, WebConfig};
use axum::http::{HeaderName, HeaderValue};
use proptest::prelude::*;

/// `tests/data/web-tls`, where the generated files claim to be (their certificate names are relative to it).
fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/web-tls")
}

/// Real bcrypt hashes (cost 4, each prefix variant), made once: hashing per case would be slow.
fn hashes() -> &'static [String] {
    static HASHES: OnceLock<Vec<String>> = OnceLock::new();
    HASHES.get_or_init(|| {
        let mut out = Vec::new();
        for (i, pw) in ["alpha", "bravo", "charlie"].into_iter().enumerate() {
            let h = bcrypt::hash(pw, 4).unwrap();
            // bcrypt gives $2b$; Go's htpasswd writes $2y$ and older tools $2a$: all three are read.
            let prefix = ["$2b$", "$2a$", "$2y$"][i];
            out.push(format!("{prefix}{}", &h[4..]));
        }
        out.push(bcrypt::hash("delta", 5).unwrap());
        out
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Writing YAML

/// How a string is written.
#[derive(Debug, Clone, Copy)]
enum Style {
    /// As is, when that reads back as the same string.
    Plain,
    /// `'...'` with `''` for a quote.
    Single,
    /// `"..."` with escapes; `true` also escapes every non-ASCII character (`\u`, `\U`).
    Double(bool),
    /// A literal block (`|-`), for mapping values in block style only.
    Literal,
}

fn style() -> impl Strategy<Value = Style> {
    prop_oneof![
        Just(Style::Plain),
        Just(Style::Single),
        Just(Style::Double(false)),
        Just(Style::Double(true)),
        Just(Style::Literal),
    ]
}

/// Whether `s` may be written plain (in block and flow context alike) and read back as the same string.
fn plain_ok(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '$' || c == '/')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-./$@=;+".contains(c))
        && !["true", "false", "null", "True", "False", "Null", "TRUE", "FALSE", "NULL"].contains(&s)
}

fn double_quoted(s: &str, ascii: bool) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if ascii && !c.is_ascii() && (c as u32) < 0x10000 => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if ascii && !c.is_ascii() => out.push_str(&format!("\\U{:08X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` as a scalar in `style` (quoted when the style cannot hold it). `indent` is where a literal
/// block's text goes; `block` whether this is a block mapping's value (the only place a literal goes).
fn scalar(s: &str, style: Style, indent: usize, block: bool) -> String {
    match style {
        Style::Plain if plain_ok(s) => s.to_owned(),
        Style::Single if !s.chars().any(char::is_control) => format!("'{}'", s.replace('\'', "''")),
        // A literal block keeps every character as is; its first line may not start with a space (that
        // would be read as indentation) and trailing spaces would be kept, which is what we want.
        Style::Literal if block && !s.starts_with(' ') && !s.chars().any(char::is_control) => {
            format!("|-\n{}{s}", " ".repeat(indent))
        }
        Style::Double(ascii) => double_quoted(s, ascii),
        _ => double_quoted(s, false),
    }
}

/// How a file is laid out.
#[derive(Debug, Clone)]
struct Layout {
    /// Spaces per level (1 to 6).
    width: usize,
    /// Flow style (`{a: b, c: d}`) for sections, by section number.
    flow: Vec<bool>,
    /// A string style per scalar, by scalar number (cycled).
    styles: Vec<Style>,
    /// `---` first.
    doc_start: bool,
    /// Comment lines and trailing comments.
    comments: bool,
    /// The top-level sections' order (a permutation's seed).
    order: Vec<usize>,
    /// CRLF line ends.
    crlf: bool,
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        1usize..=6,
        prop::collection::vec(any::<bool>(), 8),
        prop::collection::vec(style(), 1..16),
        any::<bool>(),
        any::<bool>(),
        Just((0..4).collect::<Vec<usize>>()).prop_shuffle(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(width, flow, styles, doc_start, comments, order, crlf)| Layout {
            width,
            flow,
            styles,
            doc_start,
            comments,
            order,
            crlf,
        })
}

impl Layout {
    fn style(&self, n: &mut usize) -> Style {
        *n += 1;
        self.styles[*n % self.styles.len()]
    }

    /// Writes the top-level sections (each a key and its entries).
    fn write(&self, top: &[(&str, Vec<Node>)]) -> String {
        let mut out = String::new();
        if self.doc_start {
            out.push_str("---\n");
        }
        if self.comments {
            out.push_str("# a generated web config: see exporter-toolkit's docs\n\n");
        }
        let mut n = 0;
        for &which in &self.order {
            let Some((key, nodes)) = top.get(which) else { continue };
            self.mapping(&mut out, key, nodes, 0, which, &mut n);
            if self.comments {
                // At column 0: a literal block above ends before it.
                out.push_str("# end of a section\n");
            }
        }
        if self.crlf {
            out = out.replace('\n', "\r\n");
        }
        out
    }

    fn mapping(&self, out: &mut String, key: &str, nodes: &[Node], level: usize, k: usize, n: &mut usize) {
        let pad = " ".repeat(level * self.width);
        let flow =
            self.flow[(k + level) % self.flow.len()] && nodes.iter().all(|n| !matches!(n, Node::Map(..)));
        out.push_str(&format!("{pad}{key}:"));
        if flow {
            let items: Vec<String> = nodes
                .iter()
                .map(|node| match node {
                    Node::Leaf(k, v) => {
                        let (ks, vs) = (self.style(n), self.style(n));
                        format!("{}: {}", scalar(k, ks, 0, false), scalar(v, vs, 0, false))
                    }
                    Node::Plain(k, v) => format!("{k}: {v}"),
                    Node::Map(..) => unreachable!("flow style is for leaves only"),
                })
                .collect();
            out.push_str(&format!(" {{{}}}\n", items.join(", ")));
            return;
        }
        out.push('\n');
        let inner = " ".repeat((level + 1) * self.width);
        for node in nodes {
            match node {
                Node::Leaf(k, v) => {
                    let (ks, vs) = (self.style(n), self.style(n));
                    let key = scalar(k, ks, 0, false);
                    let value = scalar(v, vs, (level + 2) * self.width, true);
                    out.push_str(&format!("{inner}{key}: {value}"));
                    if self.comments && !value.starts_with('|') {
                        out.push_str("  # trailing comment");
                    }
                    out.push('\n');
                }
                Node::Plain(k, v) => out.push_str(&format!("{inner}{k}: {v}\n")),
                Node::Map(k, children) => self.mapping(out, k, children, level + 1, k.len(), n),
            }
        }
    }
}

/// A mapping entry: a string value or a nested mapping.
#[derive(Debug, Clone)]
enum Node {
    Leaf(String, String),
    /// Written as is, never quoted (`http2: true`: Go's YAML, like ours, does not take "true" for a boolean).
    Plain(String, String),
    Map(String, Vec<Node>),
}

// ---------------------------------------------------------------------------------------------------------------
// Generating configs

/// The allowed headers with a value each accepts: free text for three, one of a list for two.
fn header() -> impl Strategy<Value = (&'static str, String)> {
    let free = prop_oneof![
        "[ -~]{1,40}",
        "[^\\p{C}\\p{Zl}\\p{Zp}]{1,20}",
        Just("max-age=31536000; includeSubDomains".to_owned()),
        Just("1; mode=block".to_owned()),
        Just("default-src 'self'; img-src \"data:\" # not a comment".to_owned()),
        Just("  leading: spaces, 'quotes' and \"more\"  ".to_owned()),
        Just("ünïcødé ✓ 🦀".to_owned()),
    ];
    prop_oneof![
        (
            prop::sample::select(vec![
                "Content-Security-Policy",
                "X-XSS-Protection",
                "Strict-Transport-Security"
            ]),
            free
        ),
        (Just("X-Frame-Options"), prop::sample::select(vec!["deny".to_owned(), "sameorigin".to_owned()])),
        (Just("X-Content-Type-Options"), Just("nosniff".to_owned())),
    ]
}

/// `tls_server_config`: the client auth mode and the name it is written with, whether a client CA is
/// given, `min_version`, `max_version`.
type GeneratedTls = (ClientAuth, &'static str, bool, Option<TlsVersion>, Option<TlsVersion>);

/// A generated web config and what it must read back as.
#[derive(Debug, Clone)]
struct Generated {
    users: Vec<(String, String)>,
    headers: Vec<(&'static str, String)>,
    http2: Option<bool>,
    tls: Option<GeneratedTls>,
    rate_limit: Option<(&'static str, std::time::Duration, u32)>,
}

fn user_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9_-]{0,12}",
        "[^\\p{C}\\p{Zl}\\p{Zp}]{1,12}",
        Just("prom:etheus # x".to_owned()),
        Just(" spaced ".to_owned()),
        Just("o'brien \"q\"".to_owned()),
    ]
}

fn generated() -> impl Strategy<Value = Generated> {
    let users = prop::collection::vec((user_name(), 0..hashes().len()), 0..6).prop_map(|users| {
        let mut seen = std::collections::HashSet::new();
        users
            .into_iter()
            .filter(|(name, _)| seen.insert(name.clone()))
            .map(|(name, h)| (name, hashes()[h].clone()))
            .collect::<Vec<_>>()
    });
    let headers = prop::collection::vec(header(), 0..6).prop_map(|hs| {
        let mut seen = std::collections::HashSet::new();
        hs.into_iter().filter(|(name, _)| seen.insert(*name)).collect::<Vec<_>>()
    });
    let version = prop::option::of(prop_oneof![Just(TlsVersion::Tls12), Just(TlsVersion::Tls13)]);
    let auth = prop::sample::select(vec![
        (ClientAuth::NoClientCert, "NoClientCert"),
        (ClientAuth::RequestClientCert, "RequestClientCert"),
        (ClientAuth::RequireAnyClientCert, "RequireAnyClientCert"),
        (ClientAuth::RequireAnyClientCert, "RequireClientCert"),
        (ClientAuth::VerifyClientCertIfGiven, "VerifyClientCertIfGiven"),
        (ClientAuth::RequireAndVerifyClientCert, "RequireAndVerifyClientCert"),
    ]);
    let tls = prop::option::of((auth, any::<bool>(), version.clone(), version)).prop_map(|t| {
        t.map(|((auth, name), ca, min, max)| {
            // A CA with NoClientCert is refused; a verifying mode without one uses the system's CAs.
            let ca = ca && auth != ClientAuth::NoClientCert;
            let (min, max) = match (min, max) {
                (Some(a), Some(b)) if a > b => (Some(b), Some(a)),
                // Alone, either is within the defaults (TLS 1.2 to 1.3).
                other => other,
            };
            (auth, name, ca, min, max)
        })
    });
    let rate = prop::option::of(prop_oneof![
        (Just("100ms"), Just(std::time::Duration::from_millis(100))),
        (Just("1s"), Just(std::time::Duration::from_secs(1))),
        (Just("2m30s"), Just(std::time::Duration::from_secs(150))),
    ])
    // burst 0 included: it refuses every request, as in the toolkit, and reads back as 0.
    .prop_flat_map(|r| (Just(r), 0u32..1000))
    .prop_map(|(r, burst)| r.map(|(text, d)| (text, d, burst)));
    (users, headers, prop::option::of(any::<bool>()), tls, rate).prop_map(
        |(users, headers, http2, tls, rate_limit)| Generated { users, headers, http2, tls, rate_limit },
    )
}

fn version_name(v: TlsVersion) -> &'static str {
    match v {
        TlsVersion::Tls12 => "TLS12",
        TlsVersion::Tls13 => "TLS13",
    }
}

impl Generated {
    fn sections(&self) -> Vec<(&'static str, Vec<Node>)> {
        let leaf = |k: &str, v: &str| Node::Leaf(k.to_owned(), v.to_owned());
        let mut top = Vec::new();
        if !self.users.is_empty() {
            top.push(("basic_auth_users", self.users.iter().map(|(u, h)| leaf(u, h)).collect()));
        }
        let mut http = Vec::new();
        if let Some(h2) = self.http2 {
            http.push(Node::Plain("http2".into(), h2.to_string()));
        }
        if !self.headers.is_empty() {
            http.push(Node::Map("headers".into(), self.headers.iter().map(|(k, v)| leaf(k, v)).collect()));
        }
        if !http.is_empty() {
            top.push(("http_server_config", http));
        }
        if let Some((_, name, ca, min, max)) = &self.tls {
            let mut t = vec![leaf("cert_file", "server.pem"), leaf("key_file", "server.key")];
            t.push(leaf("client_auth_type", name));
            if *ca {
                t.push(leaf("client_ca_file", "ca.pem"));
            }
            if let Some(v) = min {
                t.push(leaf("min_version", version_name(*v)));
            }
            if let Some(v) = max {
                t.push(leaf("max_version", version_name(*v)));
            }
            top.push(("tls_server_config", t));
        }
        if let Some((interval, _, burst)) = &self.rate_limit {
            top.push(("rate_limit", vec![leaf("interval", interval), leaf("burst", &burst.to_string())]));
        }
        top
    }

    /// Checks that `config` is what was generated.
    fn check(&self, config: &WebConfig, text: &str) -> Result<(), TestCaseError> {
        prop_assert_eq!(config.basic_auth_users(), &self.users[..], "users of:\n{}", text);
        let want: Vec<(HeaderName, HeaderValue)> = self
            .headers
            .iter()
            .map(|(k, v)| (HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap()))
            .collect();
        prop_assert_eq!(&config.headers, &want, "headers of:\n{}", text);
        prop_assert_eq!(config.http2, self.http2.unwrap_or(true));
        prop_assert_eq!(
            config.rate_limit.map(|r| (r.interval, r.burst)),
            self.rate_limit.map(|(_, d, b)| (d, b))
        );
        match (&self.tls, &config.tls) {
            (None, None) => prop_assert!(!config.is_tls()),
            (Some((auth, _, ca, min, max)), Some(tls)) => {
                let dir = data_dir();
                prop_assert!(config.is_tls());
                prop_assert_eq!(&tls.cert, &PemSource::File(dir.join("server.pem")));
                prop_assert_eq!(&tls.key, &PemSource::File(dir.join("server.key")));
                prop_assert_eq!(&tls.client_ca, &ca.then(|| PemSource::File(dir.join("ca.pem"))));
                prop_assert_eq!(tls.client_auth, *auth);
                prop_assert_eq!(tls.min_version, min.unwrap_or(TlsVersion::Tls12));
                prop_assert_eq!(tls.max_version, max.unwrap_or(TlsVersion::Tls13));
            }
            (want, got) => prop_assert!(false, "tls: want {:?}, got {:?} from:\n{}", want, got, text),
        }
        Ok(())
    }
}

fn written() -> impl Strategy<Value = (Generated, String)> {
    (generated(), layout()).prop_map(|(g, layout)| {
        let text = layout.write(&g.sections());
        (g, text)
    })
}

fn path() -> PathBuf {
    data_dir().join("web.yml")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A generated config, written in any of the styles, reads back as itself.
    #[test]
    fn a_written_config_reads_back((g, text) in written()) {
        let config = WebConfig::parse(&path(), &text).map_err(|e| TestCaseError::fail(format!("{e}\nof:\n{text}")))?;
        g.check(&config, &text)?;
    }

    /// Arbitrary bytes (as lossy UTF-8) give a config or a typed error of bounded length, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        fuzz_web_config(&bytes);
    }

    /// Text made of YAML's syntax and the config's keys, nested deep at times, never panics either.
    #[test]
    fn yaml_syntax_never_panics(tokens in prop::collection::vec(prop::sample::select(vec![
        ":", ": ", "-", "- ", "[", "]", "{", "}", "\"", "'", "&a ", "*a", "&b ", "*b", "!", "!!str ", "!!map ", "!t ",
        "|", "|-", ">", ">+2", "\n", "\n  ", "\n    ", " ", "\t", "#", ",", "?", "? ", "%YAML 1.2\n", "---\n",
        "...\n", "\\", "\\u00e9", "é", "🦀", "\u{feff}", "\r\n", "tls_server_config", "basic_auth_users",
        "http_server_config", "headers", "X-Frame-Options", "cert_file", "key_file", "client_auth_type",
        "rate_limit", "interval", "burst", "0", "-1", "1e9", "100ms", "~", "null", "true", "$2b$04$",
        "[[[[[[[[", "- - - - - ", "{a: {b: {c: ",
    ]), 0..300)) {
        let text: String = tokens.concat();
        fuzz_web_config(text.as_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every prefix of a valid file (a half-written one: cut at every character, or at 300 points of a
    /// long one) gives a config or a typed error, never a panic.
    #[test]
    fn every_prefix_of_a_valid_file_is_read_or_refused((_g, text) in written()) {
        let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        let step = cuts.len().div_ceil(300).max(1);
        for &cut in cuts.iter().step_by(step).chain(cuts.last()) {
            web_config_text(&text[..cut]);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Deep nesting, alias bombs, long values

/// The error of `text`, which must be refused.
fn refused(text: &str) -> String {
    match WebConfig::parse(&path(), text) {
        Ok(c) => panic!("accepted {} bytes as {c:?}", text.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let n = 100_000;
    for (what, text) in [
        ("[", "[".repeat(n)),
        ("{", "{".repeat(n)),
        ("[ closed", format!("{}{}", "[".repeat(n), "]".repeat(n))),
        ("- on a line", "- ".repeat(n)),
        ("? on a line", "? ".repeat(n)),
        ("tags", "!t [".repeat(n)),
        ("anchors", "&a [".repeat(n)),
        ("block mappings", (0..2000).map(|i| format!("{}k:\n", " ".repeat(i))).collect::<String>()),
        ("block sequences", (0..2000).map(|i| format!("{}-\n", " ".repeat(i))).collect::<String>()),
        ("under a key", format!("basic_auth_users:\n  x: {}", "- ".repeat(n))),
    ] {
        let e = refused(&text);
        assert!(e.len() < MAX_WEB_CONFIG_ERROR + 200, "{what}: {} bytes of error", e.len());
        eprintln!("{what}: {e}");
    }
    // 60 levels deep is still YAML that reads (and is then refused for what it holds, not for its depth).
    let e = refused(&"- ".repeat(60));
    assert!(e.contains("expected a mapping"), "{e}");
}

#[test]
fn aliases_that_copy_without_end_are_refused() {
    // Nine aliases of nine aliases of ...: 9^9 values once copied.
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let e = refused(&text);
    assert!(e.contains(":6: yaml: more than 100000 values"), "{e}");
    // Aliases that nest deeper at each step.
    let mut text = String::from("a0: &a0 [[[[[[[[[[x]]]]]]]]]]\n");
    for i in 1..20 {
        let p = i - 1;
        text.push_str(&format!("a{i}: &a{i} [[[[[[[[[[*a{p}]]]]]]]]]]\n"));
    }
    let e = refused(&text);
    assert!(e.contains("yaml: nested deeper than 64"), "{e}");
    // A few aliases as a real file might use them read fine.
    let h = &hashes()[0];
    let config = WebConfig::parse(
        &path(),
        &format!("basic_auth_users:\n  a: &h '{h}'\n  b: *h\nhttp_server_config:\n  headers: {{X-Frame-Options: &d deny}}\n"),
    )
    .unwrap();
    assert_eq!(config.basic_auth_users(), &[("a".to_owned(), h.clone()), ("b".to_owned(), h.clone())]);
}

#[test]
fn errors_about_long_values_stay_short() {
    let long = "x".repeat(1 << 19);
    for text in [
        format!("{long}: 1\n"),
        format!("basic_auth_users:\n  {long}: not-a-hash\n"),
        format!("tls_server_config:\n  client_auth_type: {long}\n"),
        format!("tls_server_config:\n  cipher_suites: [TLS_{long}]\n"),
        format!("tls_server_config:\n  curve_preferences: [{long}]\n"),
        format!("tls_server_config:\n  min_version: {long}\n"),
        format!("tls_server_config:\n  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: ['{long} x']\n"),
        format!("http_server_config:\n  headers:\n    X-Frame-Options: {long}\n"),
        format!("http_server_config:\n  http2: {long}\n"),
        format!("rate_limit:\n  interval: 1{long}\n  burst: 1\n"),
        format!("rate_limit:\n  interval: 1s\n  burst: {long}\n"),
        format!("\"{}", "é".repeat(1 << 18)),
    ] {
        let e = refused(&text);
        let rest = e.strip_prefix(path().to_str().unwrap()).unwrap();
        assert!(rest.len() <= MAX_WEB_CONFIG_ERROR, "{} bytes: {}", rest.len(), &e[..300.min(e.len())]);
    }
}
