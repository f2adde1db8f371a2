//! `telemon serve --web.config.file`: exporter-toolkit's web configuration file (the one node_exporter reads).
//!
//! - the schema: every key of the toolkit's documentation read, or refused with a clear error (TLS 1.0/1.1, CBC
//!   suites, P-521...); unknown keys and each bad input (a missing certificate, a key without a certificate, a
//!   plain-text password, a bad `client_auth_type`, a missing `client_ca_file`, ...) give `FILE:LINE: KEY`, from
//!   `WebConfig::load` and from the real binary (exit code 2);
//! - HTTPS with basic auth: 401 with `WWW-Authenticate: Basic` without the password, `/healthz` open, the
//!   configured headers on every response, and a client that stalls its handshake never holds up another;
//! - plain HTTP to the TLS port gets Go's `400 Bad Request` ("Client sent an HTTP request to an HTTPS server.");
//! - exporter-toolkit's own test files, in spirit (written with this repository's certificates): the `Verify` types
//!   without `client_ca_file` verify against the system's CAs (`SSL_CERT_FILE` in the binary's environment), a
//!   self-signed `CA:TRUE` client certificate listed as its own `client_ca_file` is taken, Go's names of TLS 1.3's
//!   suites are read (and TLS 1.3 keeps all its suites, as in Go), `burst: 0` refuses every request; a refused
//!   client certificate is logged with why (the real binary's stderr);
//! - certificate rotation: new files, and a new connection sees the new certificate, with no restart;
//! - a real Prometheus (Debian's 2.42) scraping over `https` with `tls_config.ca_file` and `basic_auth` (`up` 1, and
//!   0 with a wrong password, which gets 401), and with `client_auth_type: RequireAndVerifyClientCert` (refused
//!   without a client certificate, served with one). Without `prometheus` on `PATH` that test fails when
//!   `CI=true` and skips loudly elsewhere.
//!
//! Every wait is under the safety net of `support::within` / `until`; nothing asserts how long anything took.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use telemon::config::Config;
use telemon::http::{ClientAuth, Curve, PemSource, TlsVersion, WebConfig};

mod support;

const PASSWORD: &str = "telemon-test-password";

/// `tests/data/web-tls/NAME`.
fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/web-tls").join(name)
}

fn hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

/// Writes `yaml` as `web.yml` in `dir`, with the test certificates beside it (so relative names work).
fn web_config(dir: &Path, yaml: &str) -> PathBuf {
    for f in ["ca.pem", "server.pem", "server.key", "client.pem", "client.key"] {
        std::fs::copy(data(f), dir.join(f)).unwrap();
    }
    let path = dir.join("web.yml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The error of `yaml` as a web config file (which must be refused).
fn refused(yaml: &str) -> (String, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = web_config(dir.path(), yaml);
    match WebConfig::load(&path) {
        Ok(c) => panic!("accepted:\n{yaml}\nas {c:?}"),
        Err(e) => (e.to_string(), path, dir),
    }
}

/// Asserts that `yaml` is refused with `FILE:LINE: KEY: ...` and the error mentions `why`.
fn assert_refused(yaml: &str, line: usize, key: &str, why: &str) {
    let (e, path, _dir) = refused(yaml);
    let want = format!("{}:{line}: {key}: ", path.display());
    assert!(e.starts_with(&want), "want {want:?}...\n got {e:?}\nfor:\n{yaml}");
    assert!(e.contains(why), "want {why:?} in {e:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// The schema

#[test]
fn every_documented_key_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        r#"# every key of exporter-toolkit's docs/web-configuration.md
tls_server_config:
  cert_file: server.pem
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.pem
  client_allowed_sans: [prometheus.test, 127.0.0.1]
  min_version: TLS12
  max_version: TLS13
  cipher_suites:
    - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
    - TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
    - TLS_AES_128_GCM_SHA256
  prefer_server_cipher_suites: false
  curve_preferences: [X25519, CurveP256, CurveP384]
http_server_config:
  http2: false
  headers:
    Content-Security-Policy: default-src 'self'
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    X-XSS-Protection: "1; mode=block"
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  alice: {}
  bob: {}
rate_limit:
  interval: 100ms
  burst: 20
"#,
        hash("a"),
        hash("b")
    );
    let config = WebConfig::load(&web_config(dir.path(), &yaml)).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.is_tls());
    let tls = config.tls.as_ref().unwrap();
    // Relative names are relative to the web config file's directory.
    assert_eq!(tls.cert, PemSource::File(dir.path().join("server.pem")));
    assert_eq!(tls.key, PemSource::File(dir.path().join("server.key")));
    assert_eq!(tls.client_ca, Some(PemSource::File(dir.path().join("ca.pem"))));
    assert_eq!(tls.client_auth, ClientAuth::RequireAndVerifyClientCert);
    assert_eq!(tls.client_allowed_sans, ["prometheus.test", "127.0.0.1"]);
    assert_eq!((tls.min_version, tls.max_version), (TlsVersion::Tls12, TlsVersion::Tls13));
    assert_eq!(
        tls.cipher_suites,
        [
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        ]
    );
    assert!(!tls.prefer_server_cipher_suites);
    assert_eq!(tls.curve_preferences, [Curve::X25519, Curve::P256, Curve::P384]);
    assert!(!config.http2);
    let headers: Vec<String> =
        config.headers.iter().map(|(k, v)| format!("{k}: {}", v.to_str().unwrap())).collect();
    assert_eq!(headers.len(), 5, "{headers:?}");
    assert!(headers.contains(&"x-frame-options: deny".to_owned()), "{headers:?}");
    assert_eq!(config.user_names(), ["alice", "bob"]);
    assert_eq!(config.rate_limit.map(|r| (r.interval, r.burst)), Some((Duration::from_millis(100), 20)));
    // The hashes are secrets: never in Debug.
    assert!(!format!("{config:?}").contains("$2b$"), "{config:?}");

    // Inline PEM (cert, key, client_ca), the other client_auth_types, defaults.
    let inline = |s: &str| std::fs::read_to_string(data(s)).unwrap().replace('\n', "\n    ");
    let yaml = format!(
        "tls_server_config:\n  cert: |\n    {}\n  key: |\n    {}\n  client_ca: |\n    {}\n  client_auth_type: VerifyClientCertIfGiven\n",
        inline("server.pem"),
        inline("server.key"),
        inline("ca.pem")
    );
    let config = WebConfig::load(&web_config(dir.path(), &yaml)).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let tls = config.tls.as_ref().unwrap();
    assert!(matches!(tls.cert, PemSource::Inline(_)) && matches!(tls.key, PemSource::Inline(_)));
    assert!(!format!("{config:?}").contains("PRIVATE KEY"), "an inline key is never printed");
    assert_eq!(
        (tls.min_version, tls.max_version, tls.prefer_server_cipher_suites),
        (TlsVersion::Tls12, TlsVersion::Tls13, true)
    );
    assert!(
        config.http2
            && config.headers.is_empty()
            && config.user_names().is_empty()
            && config.rate_limit.is_none()
    );
    for (name, auth) in [
        ("NoClientCert", ClientAuth::NoClientCert),
        ("RequestClientCert", ClientAuth::RequestClientCert),
        ("RequireAnyClientCert", ClientAuth::RequireAnyClientCert),
        ("RequireClientCert", ClientAuth::RequireAnyClientCert),
    ] {
        let yaml = format!("tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: {name}\n");
        let config =
            WebConfig::load(&web_config(dir.path(), &yaml)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(config.tls.unwrap().client_auth, auth);
    }
    // Empty files and empty sections: plain HTTP, no users (as the toolkit).
    for yaml in [
        "",
        "# nothing\n",
        "tls_server_config:\n",
        "tls_server_config: {}\nbasic_auth_users: {}\n",
        "rate_limit:\n  interval: 0\n",
    ] {
        let config =
            WebConfig::load(&web_config(dir.path(), yaml)).unwrap_or_else(|e| panic!("{yaml:?}: {e}"));
        assert!(!config.is_tls() && config.user_names().is_empty(), "{yaml:?}");
    }
}

#[test]
fn bad_inputs_say_file_line_and_key() {
    let tls = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";
    // An unknown key, at each level.
    assert_refused("tls_server_config: {}\nbasic_auth: {}\n", 2, "basic_auth", "unknown key");
    assert_refused(&format!("{tls}  cert_path: x\n"), 4, "tls_server_config.cert_path", "unknown key");
    assert_refused("http_server_config:\n  http3: true\n", 2, "http_server_config.http3", "unknown key");
    assert_refused("rate_limit:\n  interval: 1s\n  bursts: 2\n", 3, "rate_limit.bursts", "unknown key");
    // Files.
    assert_refused(
        "tls_server_config:\n  cert_file: missing.pem\n  key_file: server.key\n",
        2,
        "tls_server_config.cert_file",
        "missing.pem",
    );
    assert_refused(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: nope.key\n",
        3,
        "tls_server_config.key_file",
        "nope.key",
    );
    assert_refused(
        "tls_server_config:\n  key_file: server.key\n",
        2,
        "tls_server_config.key_file",
        "a key without a certificate",
    );
    assert_refused(
        "tls_server_config:\n  cert_file: server.pem\n",
        2,
        "tls_server_config.cert_file",
        "without its key",
    );
    assert_refused(
        "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
        2,
        "tls_server_config.cert_file",
        "no PEM certificate",
    );
    assert_refused(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: client.key\n",
        3,
        "tls_server_config.key_file",
        "cannot use this key",
    );
    // Users: a plain-text password, a bad cost.
    assert_refused("basic_auth_users:\n  alice: hunter2\n", 2, "basic_auth_users.alice", "not a bcrypt hash");
    let (e, _, _d) = refused("basic_auth_users:\n  alice: hunter2\n");
    assert!(!e.contains("hunter2"), "the password is never echoed: {e}");
    let cost_99 = hash("x").replacen("$04$", "$99$", 1);
    assert_refused(
        &format!("basic_auth_users:\n  root: \"{cost_99}\"\n"),
        2,
        "basic_auth_users.root",
        "cost 99",
    );
    // client_auth_type and its CA.
    assert_refused(
        &format!("{tls}  client_auth_type: RequireCert\n"),
        4,
        "tls_server_config.client_auth_type",
        "is not one of",
    );
    assert_refused(
        &format!("{tls}  client_ca_file: ca.pem\n"),
        4,
        "tls_server_config.client_ca_file",
        "without a client_auth_type",
    );
    assert_refused(
        &format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: gone.pem\n"),
        5,
        "tls_server_config.client_ca_file",
        "gone.pem",
    );
    assert_refused(
        &format!("{tls}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.pem\n  client_allowed_sans: [a.test]\n"),
        6,
        "tls_server_config.client_allowed_sans",
        "RequireAndVerifyClientCert",
    );
    assert_refused(
        &format!("{tls}  client_allowed_sans: [\"mailto:x@y.test\"]\n"),
        4,
        "tls_server_config.client_allowed_sans",
        "DNS names and IP addresses only",
    );
    // What rustls cannot do: refused, not ignored.
    assert_refused(
        &format!("{tls}  min_version: TLS10\n"),
        4,
        "tls_server_config.min_version",
        "rustls has TLS 1.2 and 1.3 only",
    );
    assert_refused(
        &format!("{tls}  max_version: TLS11\n"),
        4,
        "tls_server_config.max_version",
        "rustls has TLS 1.2 and 1.3 only",
    );
    assert_refused(&format!("{tls}  min_version: SSL3\n"), 4, "tls_server_config.min_version", "not one of");
    assert_refused(
        &format!("{tls}  min_version: TLS13\n  max_version: TLS12\n"),
        4,
        "tls_server_config.min_version",
        "above max_version",
    );
    assert_refused(
        &format!("{tls}  cipher_suites:\n    - TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA\n"),
        5,
        "tls_server_config.cipher_suites",
        "not supported by rustls",
    );
    assert_refused(
        &format!("{tls}  cipher_suites: [TLS13_AES_128_GCM_SHA256]\n"),
        4,
        "tls_server_config.cipher_suites",
        "rustls's name: the file takes Go's, TLS_AES_128_GCM_SHA256",
    );
    assert_refused(
        &format!("{tls}  cipher_suites: [AES]\n"),
        4,
        "tls_server_config.cipher_suites",
        "unknown cipher suite",
    );
    assert_refused(
        &format!("{tls}  curve_preferences: [CurveP521]\n"),
        4,
        "tls_server_config.curve_preferences",
        "not supported",
    );
    assert_refused(
        &format!("{tls}  curve_preferences: [P256]\n"),
        4,
        "tls_server_config.curve_preferences",
        "unknown curve",
    );
    assert_refused(
        &format!("{tls}  prefer_server_cipher_suites: maybe\n"),
        4,
        "tls_server_config.prefer_server_cipher_suites",
        "true or false",
    );
    // Headers: the toolkit's list, and its values where it has a list.
    assert_refused(
        "http_server_config:\n  headers:\n    Server: telemon\n",
        3,
        "http_server_config.headers.Server",
        "can not be configured",
    );
    assert_refused(
        "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
        3,
        "http_server_config.headers.X-Frame-Options",
        "\"deny\"",
    );
    assert_refused(
        "http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
        3,
        "http_server_config.headers.X-Content-Type-Options",
        "nosniff",
    );
    assert_refused("http_server_config:\n  http2: 2\n", 2, "http_server_config.http2", "true or false");
    // Rate limit.
    assert_refused("rate_limit:\n  interval: soon\n  burst: 1\n", 2, "rate_limit.interval", "not a duration");
    assert_refused("rate_limit:\n  interval: 1s\n  burst: -1\n", 3, "rate_limit.burst", "not a whole number");
    // YAML itself: syntax, duplicate keys, types, several documents.
    assert_refused("tls_server_config:\n  cert_file: [\n", 3, "yaml", "");
    assert_refused(&format!("{tls}  cert_file: server.pem\n"), 4, "yaml", "duplicate");
    assert_refused("tls_server_config: yes\n", 1, "tls_server_config", "expected a mapping");
    assert_refused("basic_auth_users: {}\n---\nrate_limit: {}\n", 3, "yaml", "one YAML document");
}

#[tokio::test]
async fn the_binary_exits_2_on_a_bad_web_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = web_config(dir.path(), "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: gone.pem\n");
    let file = path.to_str().unwrap();
    let out = support::run(
        &["serve", "--web.config.file", file, "--smon", "127.0.0.1:1", "--listen", "127.0.0.1:0"],
        None,
    )
    .await;
    let err = support::stderr(&out);
    assert_eq!(support::code(&out), 2, "{err}");
    assert!(err.contains(&format!("{file}:5: tls_server_config.client_ca_file: ")), "{err}");

    let path = web_config(dir.path(), "basic_auth_users:\n  prometheus: telemon-test-password\n");
    let file = path.to_str().unwrap();
    let out = support::run(
        &["serve", "--web.config.file", file, "--smon", "127.0.0.1:1", "--listen", "127.0.0.1:0"],
        None,
    )
    .await;
    let err = support::stderr(&out);
    assert_eq!(support::code(&out), 2, "{err}");
    assert!(err.contains(&format!("{file}:2: basic_auth_users.prometheus: not a bcrypt hash")), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");

    let missing = dir.path().join("none.yml");
    let file = missing.to_str().unwrap();
    let out = support::run(
        &["serve", "--web.config.file", file, "--smon", "127.0.0.1:1", "--listen", "127.0.0.1:0"],
        None,
    )
    .await;
    assert_eq!(support::code(&out), 2, "{}", support::stderr(&out));
    assert!(support::stderr(&out).contains(file), "{}", support::stderr(&out));
}

// ---------------------------------------------------------------------------------------------------------------
// A server in-process

/// A config with one smon target (nobody listens there: serving does not need it up).
fn fleet_config(web: &Path) -> Config {
    let mut config = Config::parse("tls.toml", "[[smon]]\nname = \"x\"\nconnect = \"127.0.0.1:1\"\n")
        .unwrap_or_else(|e| panic!("{e}"));
    config.serve.web_config = Some(web.to_owned());
    config
}

/// An HTTPS client trusting the test CA, with `identity` (PEM cert + key files) when given.
fn client(identity: Option<(&str, &str)>) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(data("ca.pem")).unwrap()).unwrap();
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .timeout(support::DEADLINE);
    if let Some((cert, key)) = identity {
        let mut pem = std::fs::read(data(cert)).unwrap();
        pem.extend(std::fs::read(data(key)).unwrap());
        builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    builder.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_basic_auth_covers_every_path_but_healthz() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n    Content-Security-Policy: \"default-src 'self'\"\nbasic_auth_users:\n  prometheus: {}\n",
        hash(PASSWORD)
    );
    let mut config = fleet_config(&web_config(dir.path(), &yaml));
    config.serve.idle_timeout = Duration::from_secs(1);
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.expect("serve starts");
    let addr = server.local_addr();
    assert!(server.web().current().is_some_and(|w| w.is_tls()));

    // A client that connects and never says hello does not hold up the others...
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    let http = client(None);
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", addr.port());
    for path in ["/metrics", "/targets", "/", "/probe?target=127.0.0.1:1&protocol=smon", "/nowhere"] {
        let r = http.get(url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} without a password");
        assert_eq!(r.headers()["www-authenticate"], "Basic", "{path}");
        assert_eq!(r.headers()["x-frame-options"], "deny", "{path}: headers on every response");
        let r = http.get(url(path)).basic_auth("prometheus", Some("wrong")).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} with a wrong password");
        let r = http.get(url(path)).basic_auth("nobody", Some(PASSWORD)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} with an unknown user");
    }
    let r = http.get(url("/metrics")).basic_auth("prometheus", Some(PASSWORD)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-security-policy"], "default-src 'self'");
    assert!(r.text().await.unwrap().contains("telemon_target_up"));
    let r = http.get(url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200, "/healthz needs no password");
    assert_eq!(r.headers()["x-frame-options"], "deny");
    // Plain HTTP on the TLS port gets Go's answer, word for word.
    let plain = support::http_get(addr, "/healthz", &[]).await.expect("an answer to plain HTTP");
    assert_eq!(plain, (400, "Client sent an HTTP request to an HTTPS server.\n".to_owned()));
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
        raw.write_all(b"HEAD /metrics HTTP/1.0\r\n\r\n").await.unwrap();
        let mut got = Vec::new();
        support::within("the answer to plain HTTP", raw.read_to_end(&mut got)).await.unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
        );
        // Bytes that are neither TLS nor HTTP: closed without an answer.
        let mut junk = tokio::net::TcpStream::connect(addr).await.unwrap();
        junk.write_all(b"SSH-2.0-x\r\n").await.unwrap();
        let mut got = Vec::new();
        let read = support::within("junk to be closed", junk.read_to_end(&mut got)).await;
        assert!(read.is_err() || got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    }

    // ...and is dropped after the idle timeout (1 s here).
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    let n = support::within("the stalled handshake to be closed", stalled.read(&mut buf)).await;
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");

    // A reload to no web config: plain HTTP for new connections.
    server.web().set(None);
    let (status, _) = support::http_get(addr, "/metrics", &[]).await.unwrap();
    assert_eq!(status, 200);
    server.shutdown().await;
}

/// The certificate the server at `addr` presents to a new connection.
async fn served_certificate(addr: SocketAddr) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(data("ca.pem")).unwrap();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.expect("TLS handshake");
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(name: &str) -> Vec<u8> {
    let pem = std::fs::read(data(name)).unwrap();
    let cert: rustls::pki_types::CertificateDer<'static> =
        rustls::pki_types::pem::PemObject::from_pem_slice(&pem).unwrap();
    cert.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path =
        web_config(dir.path(), "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n");
    let server = telemon::http::start(&fleet_config(&path), Some("127.0.0.1:0")).await.expect("serve starts");
    let addr = server.local_addr();
    assert_eq!(served_certificate(addr).await, der("server.pem"));

    // The way cert-manager or certbot do it: new files renamed over the old ones, the key first.
    for (from, to) in [("rotated.key", "server.key"), ("rotated.pem", "server.pem")] {
        std::fs::copy(data(from), dir.path().join("new")).unwrap();
        std::fs::rename(dir.path().join("new"), dir.path().join(to)).unwrap();
    }
    support::until(
        "a new connection to see the rotated certificate",
        Duration::from_millis(200),
        async || (served_certificate(addr).await == der("rotated.pem")).then_some(()),
    )
    .await;

    // A broken new pair (a certificate without its key) keeps the rotated one in use.
    std::fs::copy(data("server.pem"), dir.path().join("server.pem")).unwrap();
    tokio::time::sleep(telemon::http::CERT_CHECK_INTERVAL * 2).await;
    assert_eq!(served_certificate(addr).await, der("rotated.pem"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_clients_without_a_good_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let path = web_config(
        dir.path(),
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_ca_file: ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n  client_allowed_sans: [prometheus.test]\n",
    );
    let server = telemon::http::start(&fleet_config(&path), Some("127.0.0.1:0")).await.expect("serve starts");
    let url = format!("https://127.0.0.1:{}/metrics", server.local_addr().port());
    let r = client(Some(("client.pem", "client.key"))).get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(client(None).get(&url).send().await.is_err(), "no client certificate");
    assert!(
        client(Some(("stranger.pem", "stranger.key"))).get(&url).send().await.is_err(),
        "a certificate of another CA"
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------------------------
// exporter-toolkit's own test files, in spirit: each case of its web/testdata that Go accepts, written
// with this repository's certificates (the toolkit's files are not copied here).

#[test]
fn exporter_toolkit_files_load_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(data("stranger.pem"), dir.path().join("stranger.pem")).unwrap();
    let tls = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";
    let load = |yaml: &str| {
        WebConfig::load(&web_config(dir.path(), yaml)).unwrap_or_else(|e| panic!("{e}\nfor:\n{yaml}"))
    };
    // web_config_noAuth.good.yml and most others: a Verify type without client_ca_file (Go then
    // verifies against the system's CAs).
    for (name, auth) in [
        ("VerifyClientCertIfGiven", ClientAuth::VerifyClientCertIfGiven),
        ("RequireAndVerifyClientCert", ClientAuth::RequireAndVerifyClientCert),
    ] {
        let config = load(&format!("{tls}  client_auth_type: \"{name}\"\n"));
        let tls = config.tls.unwrap();
        assert_eq!((tls.client_auth, tls.client_ca), (auth, None));
    }
    // web_config_noAuth_allCiphers.good.yml less its CBC suites: Go's names of TLS 1.3's suites too.
    let config = load(&format!(
        "{tls}  client_auth_type: \"VerifyClientCertIfGiven\"\n  cipher_suites:\n  - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n  - TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\n  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n  - TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256\n  - TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256\n  - TLS_AES_128_GCM_SHA256\n  - TLS_AES_256_GCM_SHA384\n  - TLS_CHACHA20_POLY1305_SHA256\n"
    ));
    assert_eq!(config.tls.unwrap().cipher_suites.len(), 9);
    // tls_config_noAuth.requireandverifyclientcert.good.yml: a self-signed client certificate as its own CA.
    let config = load(&format!(
        "{tls}  client_auth_type: \"RequireAndVerifyClientCert\"\n  client_ca_file: \"stranger.pem\"\n"
    ));
    assert_eq!(config.tls.unwrap().client_ca, Some(PemSource::File(dir.path().join("stranger.pem"))));
    // web_config_rate_limiter_one_second.yaml: burst 0 (every request refused, as with Go's limiter); no
    // burst at all is 0 too.
    for yaml in ["rate_limit:\n  interval: \"1s\"\n  burst: 0\n", "rate_limit:\n  interval: 1s\n"] {
        let limit = load(yaml).rate_limit.unwrap();
        assert_eq!((limit.interval, limit.burst), (Duration::from_secs(1), 0), "{yaml}");
    }
    // web_config_rate_limiter_nonblocking.yaml: interval 0 is no limit, whatever the burst.
    assert!(load("rate_limit:\n  interval: 0\n  burst: 0\n").rate_limit.is_none());
}

/// A server for `yaml` (with the test certificates beside it) and its address.
async fn serve(dir: &Path, yaml: &str) -> telemon::http::Server {
    let path = web_config(dir, yaml);
    telemon::http::start(&fleet_config(&path), Some("127.0.0.1:0")).await.expect("serve starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_types_without_a_client_ca_verify_against_the_system_cas() {
    let dir = tempfile::tempdir().unwrap();
    let tls = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";
    let server = serve(dir.path(), &format!("{tls}  client_auth_type: VerifyClientCertIfGiven\n")).await;
    let url = format!("https://127.0.0.1:{}/metrics", server.local_addr().port());
    let r = client(None).get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "no certificate: served, as in Go");
    // The test CA is no system CA: its client certificate is refused.
    assert!(client(Some(("client.pem", "client.key"))).get(&url).send().await.is_err());
    server.shutdown().await;

    let server = serve(dir.path(), &format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n")).await;
    let url = format!("https://127.0.0.1:{}/metrics", server.local_addr().port());
    assert!(client(None).get(&url).send().await.is_err(), "a certificate is required");
    assert!(client(Some(("client.pem", "client.key"))).get(&url).send().await.is_err());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_ca_client_certificate_listed_as_the_client_ca_is_taken() {
    // stranger.pem is self-signed with basicConstraints CA:TRUE, as the toolkit's client_selfsigned.pem.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(data("stranger.pem"), dir.path().join("stranger.pem")).unwrap();
    let server = serve(
        dir.path(),
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: stranger.pem\n",
    )
    .await;
    let url = format!("https://127.0.0.1:{}/metrics", server.local_addr().port());
    let r = client(Some(("stranger.pem", "stranger.key"))).get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(client(None).get(&url).send().await.is_err(), "no certificate");
    assert!(client(Some(("client.pem", "client.key"))).get(&url).send().await.is_err(), "another CA's");
    server.shutdown().await;
}

/// The TLS handshake of a client offering only `suites` at `version`: the suite agreed on.
async fn handshake_with(
    addr: SocketAddr,
    version: &'static rustls::SupportedProtocolVersion,
    suites: &[rustls::CipherSuite],
) -> Result<rustls::CipherSuite, std::io::Error> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.retain(|s| suites.contains(&s.suite()));
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(data("ca.pem")).unwrap();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await?;
    Ok(tls.get_ref().1.negotiated_cipher_suite().unwrap().suite())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_names_of_tls13_suites_are_taken_and_tls13_keeps_all_its_suites() {
    use rustls::CipherSuite as S;
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        dir.path(),
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  cipher_suites:\n    - TLS_AES_256_GCM_SHA384\n    - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n",
    )
    .await;
    let addr = server.local_addr();
    let tls12 = &rustls::version::TLS12;
    let tls13 = &rustls::version::TLS13;
    let suite = handshake_with(addr, tls12, &[S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]).await.unwrap();
    assert_eq!(suite, S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256);
    assert!(
        handshake_with(addr, tls12, &[S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]).await.is_err(),
        "a TLS 1.2 suite not listed"
    );
    // As in Go, TLS 1.3's suites are not chosen by the list: even one it does not name is agreed on.
    for suite in [S::TLS13_AES_256_GCM_SHA384, S::TLS13_CHACHA20_POLY1305_SHA256] {
        assert_eq!(handshake_with(addr, tls13, &[suite]).await.unwrap(), suite);
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_0_refuses_every_request_as_the_toolkit_does() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "rate_limit:\n  interval: 1s\n  burst: 0\n").await;
    for path in ["/metrics", "/healthz"] {
        let (status, _) = support::http_get(server.local_addr(), path, &[]).await.unwrap();
        assert_eq!(status, 429, "{path}");
    }
    server.shutdown().await;
}

/// `telemon serve --web.config.file FILE` on a free port, with `SSL_CERT_FILE` (the system's CAs, as
/// rustls-native-certs and Go read them) naming `ca_file` only; ready once it accepts connections.
async fn spawn_serve_with_system_cas(file: &Path, ca_file: &Path) -> (support::Telemon, SocketAddr) {
    let addr = support::free_addr();
    let telemon = support::Telemon::spawn_program(
        Path::new("/usr/bin/env"),
        &[
            "-u",
            "SSL_CERT_DIR",
            &format!("SSL_CERT_FILE={}", ca_file.display()),
            support::TELEMON,
            "serve",
            "--web.config.file",
            file.to_str().unwrap(),
            "--smon",
            "127.0.0.1:1",
            "--listen",
            &addr.to_string(),
        ],
    );
    let stat = format!("/proc/{}/stat", telemon.pid());
    support::until("telemon to listen", Duration::from_millis(50), async || {
        // A telemon that exited (a zombie until it is waited for) will never listen.
        let state = std::fs::read_to_string(&stat).unwrap_or_default();
        assert!(!state.contains(") Z "), "telemon exited instead of listening");
        tokio::net::TcpStream::connect(addr).await.ok().map(|_| ())
    })
    .await;
    (telemon, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_cas_verify_clients_and_each_refusal_is_logged_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = web_config(
        dir.path(),
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n",
    );
    // The "system" holds the test CA only.
    let (mut telemon, addr) = spawn_serve_with_system_cas(&path, &data("ca.pem")).await;
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());
    let r = client(Some(("client.pem", "client.key"))).get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "signed by a system CA");
    assert!(client(Some(("stranger.pem", "stranger.key"))).get(&url).send().await.is_err());
    let line = telemon.stderr_line("TLS handshake refused").await;
    assert!(line.contains("a CA certificate (basicConstraints CA:TRUE)"), "{line}");
    assert!(line.contains("refused=1") && line.contains("peer=127.0.0.1:"), "{line}");
    telemon.kill().await;

    // Another server, and a client with no certificate at all.
    let (mut telemon, addr) = spawn_serve_with_system_cas(&path, &data("ca.pem")).await;
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());
    assert!(client(None).get(&url).send().await.is_err());
    let line = telemon.stderr_line("TLS handshake refused").await;
    assert!(line.contains("no client certificate was sent"), "{line}");
    telemon.kill().await;
}

// ---------------------------------------------------------------------------------------------------------------
// A real Prometheus

/// `up` per job, from Prometheus's query API (empty until the first scrapes).
async fn up_by_job(prometheus: SocketAddr) -> Vec<(String, f64)> {
    let Ok((200, body)) = support::http_get(prometheus, "/api/v1/query?query=up", &[]).await else {
        return vec![];
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let mut up: Vec<(String, f64)> = v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let job = r["metric"]["job"].as_str().unwrap_or_default().to_owned();
            (job, r["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(-1.0))
        })
        .collect();
    up.sort_by(|a, b| a.0.cmp(&b.0));
    up
}

/// Each job's last scrape error, from `/api/v1/targets`.
async fn last_errors(prometheus: SocketAddr) -> Vec<(String, String)> {
    let Ok((_, body)) = support::http_get(prometheus, "/api/v1/targets", &[]).await else { return vec![] };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["labels"]["job"].as_str().unwrap_or_default().to_owned(),
                t["lastError"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_over_https_with_basic_auth_and_client_certificates() {
    let Some((prometheus_bin, _)) = support::prometheus_and_promtool(
        "prometheus_scrapes_over_https_with_basic_auth_and_client_certificates",
    ) else {
        return;
    };
    let sims = support::Sims::start(support::SimOptions::steady()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("auth")).unwrap();
    std::fs::create_dir(dir.path().join("mtls")).unwrap();
    let basic = web_config(
        &dir.path().join("auth"),
        &format!("tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nbasic_auth_users:\n  prometheus: {}\n", hash(PASSWORD)),
    );
    let mtls = web_config(
        &dir.path().join("mtls"),
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_ca_file: ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n",
    );
    let mut config = Config::parse("tls-e2e.toml", &sims.toml(None)).unwrap_or_else(|e| panic!("{e}"));
    config.serve.web_config = Some(basic);
    let with_auth = telemon::http::start(&config, Some("127.0.0.1:0")).await.expect("serve starts");
    // The second server watches sys161 only (the sims' Mono agent dials one listener).
    let sys161 = sims.toml(None).split("[[hmon]]").next().unwrap().to_owned();
    let mut config = Config::parse("tls-e2e-mtls.toml", &sys161).unwrap_or_else(|e| panic!("{e}"));
    config.serve.web_config = Some(mtls);
    let with_mtls = telemon::http::start(&config, Some("127.0.0.1:0")).await.expect("serve starts");
    let (a, m) = (with_auth.local_addr(), with_mtls.local_addr());
    let (ca, cert, key) = (data("ca.pem"), data("client.pem"), data("client.key"));
    let (ca, cert, key) = (ca.display(), cert.display(), key.display());
    let yml = format!(
        r#"global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: auth-good
    scheme: https
    tls_config: {{ ca_file: "{ca}" }}
    basic_auth: {{ username: prometheus, password: "{PASSWORD}" }}
    static_configs: [{{ targets: ["{a}"] }}]
  - job_name: auth-wrong
    scheme: https
    tls_config: {{ ca_file: "{ca}" }}
    basic_auth: {{ username: prometheus, password: wrong }}
    static_configs: [{{ targets: ["{a}"] }}]
  - job_name: mtls-cert
    scheme: https
    tls_config: {{ ca_file: "{ca}", cert_file: "{cert}", key_file: "{key}" }}
    static_configs: [{{ targets: ["{m}"] }}]
  - job_name: mtls-none
    scheme: https
    tls_config: {{ ca_file: "{ca}" }}
    static_configs: [{{ targets: ["{m}"] }}]
"#
    );
    let prometheus = support::Prometheus::new(&prometheus_bin).config(yml).start().await;
    let p = prometheus.addr();
    let want = [("auth-good", 1.0), ("auth-wrong", 0.0), ("mtls-cert", 1.0), ("mtls-none", 0.0)];
    let up = support::within("all four jobs scraped", async {
        loop {
            let up = up_by_job(p).await;
            if up.iter().map(|(j, v)| (j.as_str(), *v)).eq(want) {
                return up;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    let errors = last_errors(p).await;
    let error = |job: &str| errors.iter().find(|(j, _)| j == job).map(|(_, e)| e.clone()).unwrap_or_default();
    assert!(error("auth-wrong").contains("401"), "{errors:?}");
    assert!(error("auth-good").is_empty() && error("mtls-cert").is_empty(), "{errors:?}");
    assert!(!error("mtls-none").is_empty(), "{errors:?}");
    // The scraped series are telemon's.
    let (_, body) =
        support::http_get(p, "/api/v1/query?query=telemon_target_up%7Bjob%3D%22auth-good%22%7D", &[])
            .await
            .unwrap();
    assert!(body.contains("\"protocol\":\"meter161\""), "{body}\n{up:?}");
    prometheus.kill().await;
    with_auth.shutdown().await;
    with_mtls.shutdown().await;
    sims.stop().await;
}

// ---------------------------------------------------------------------------------------------------------------
// The shipped examples

/// `deploy/NAME` at the root of the workspace.
fn deploy(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(name)
}

#[test]
fn the_example_web_config_loads() {
    // Its relative file names, beside it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(deploy("web-config.yml"), dir.path().join("web-config.yml")).unwrap();
    std::fs::copy(data("server.pem"), dir.path().join("telemon.pem")).unwrap();
    std::fs::copy(data("server.key"), dir.path().join("telemon.key")).unwrap();
    let config = WebConfig::load(&dir.path().join("web-config.yml")).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.is_tls());
    assert_eq!(config.user_names(), ["prometheus"]);
    assert_eq!(config.headers.len(), 2);
}

#[tokio::test]
async fn the_https_scrape_example_is_a_valid_prometheus_config_once_uncommented() {
    let Some(promtool) = support::need_on_path(
        "the_https_scrape_example_is_a_valid_prometheus_config_once_uncommented",
        "promtool",
        "apt-get install prometheus (bash .ci/prometheus.sh)",
    ) else {
        return;
    };
    let config = std::fs::read_to_string(deploy("prometheus/prometheus.yml")).unwrap();
    let (begin, end) = ("# --- BEGIN https example ---", "# --- END https example ---");
    let (Some(from), Some(to)) = (config.find(begin), config.find(end)) else {
        panic!("prometheus.yml should hold the https example between {begin:?} and {end:?}")
    };
    // The BEGIN marker's line stays (its indent is already in config[..from]); the lines after it lose their "# ".
    let mut lines = config[from..to].lines();
    let marker = lines.next().unwrap_or_default();
    let block: String =
        std::iter::once(format!("{marker}\n")).chain(lines.map(|l| l.replacen("# ", "", 1) + "\n")).collect();
    assert!(
        block.contains("scheme: https") && block.contains("basic_auth:") && block.contains("ca_file:"),
        "{block}"
    );
    let uncommented = format!("{}{block}{}", &config[..from], &config[to..]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("prometheus.yml"), uncommented).unwrap();
    std::fs::copy(deploy("prometheus/rules.yml"), dir.path().join("rules.yml")).unwrap();
    std::fs::copy(data("ca.pem"), dir.path().join("telemon-ca.pem")).unwrap();
    std::fs::write(dir.path().join("telemon.password"), format!("{PASSWORD}\n")).unwrap();
    let out = tokio::process::Command::new(promtool)
        .arg("check")
        .arg("config")
        .arg(dir.path().join("prometheus.yml"))
        .output()
        .await
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool check config: {printed}");
}
