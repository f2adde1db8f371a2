//! Reading the web configuration file (`WebConfig::parse`, exporter-toolkit's YAML): a typical file (three users,
//! three headers, TLS with client certificates on the committed test certificates, which are read and built into a
//! rustls config each time) and a large one (1,000 users, no TLS), bytes/s. The large one runs beside saphyr's
//! loader alone on the same text (`large/saphyr_load`), so the reader's own cost (the depth and alias check that
//! parses the events once more, the checks of every value) shows as a ratio. `typical/parse_system_cas` is the
//! typical file with `client_auth_type` verifying against the system's CA certificates (no `client_ca_file`; they
//! are read once per process, so this is what a reload costs). `bcrypt/hash_cost_10` is one bcrypt at the cost
//! `telemon hash-password` uses by default (what a first check of a user's password costs the server). Every case
//! also runs in count mode, for `cargo xtask bench --table`.

use std::path::{Path, PathBuf};

use bench_harness::{Case, Group};
use criterion::{black_box, Throughput};
use saphyr::{LoadableYamlNode, MarkedYaml};
use telemon::http::WebConfig;

/// A bcrypt hash at cost 10 (made once; parsing only checks its form).
const HASH: &str = "$2b$10$5bmoNMCgjDIJkQya8Duvoeyc8bq.jbsBgIMUnIyUmAHhiO6Nle4WG";

fn path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/web-tls/web.yml")
}

fn typical() -> String {
    format!(
        "# as deploy/web-config.yml, with mTLS\n\
         tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  min_version: TLS12\n\
         http_server_config:\n  http2: true\n  headers:\n    X-Content-Type-Options: nosniff\n    \
         X-Frame-Options: deny\n    Strict-Transport-Security: \"max-age=31536000; includeSubDomains\"\n\
         basic_auth_users:\n  prometheus: {HASH}\n  grafana: '{HASH}'\n  \"ops team\": \"{HASH}\"\n\
         rate_limit:\n  interval: 100ms\n  burst: 50\n"
    )
}

/// The typical file, verifying client certificates against the system's CAs.
fn system_cas() -> String {
    typical().replace("  client_ca_file: ca.pem\n", "")
}

fn large() -> String {
    let mut text =
        String::from("http_server_config:\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n");
    for i in 0..1000 {
        text.push_str(&format!("  user-{i:04}: {HASH}\n"));
    }
    text
}

fn groups() -> Vec<Group> {
    let (typical, large, system_cas) = (typical(), large(), system_cas());
    // All read, or the bench measures an error.
    WebConfig::parse(&path(), &typical).expect("the typical file reads");
    let tls = WebConfig::parse(&path(), &system_cas).expect("the file without client_ca_file reads").tls;
    assert!(tls.is_some_and(|t| t.client_ca.is_none()));
    assert_eq!(WebConfig::parse(&path(), &large).expect("the large file reads").user_names().len(), 1000);
    let large2 = large.clone();
    vec![
        Group::new("web_config_typical", Throughput::Bytes(typical.len() as u64), 20)
            .case(Case::iter("parse_with_tls", move || {
                WebConfig::parse(&path(), black_box(&typical)).expect("reads")
            }))
            .case(
                Case::iter("parse_system_cas", move || {
                    WebConfig::parse(&path(), black_box(&system_cas)).expect("reads")
                })
                .vs("parse_with_tls"),
            ),
        Group::new("bcrypt", Throughput::Elements(1), 3).flat(10).case(Case::iter("hash_cost_10", || {
            bcrypt::hash_with_result(black_box("s3cret"), 10).expect("hashes")
        })),
        Group::new("web_config_large", Throughput::Bytes(large.len() as u64), 5)
            .case(Case::iter("saphyr_load", move || {
                MarkedYaml::load_from_str(black_box(&large2)).expect("yaml")
            }))
            .case(
                Case::iter("parse_1000_users", move || {
                    WebConfig::parse(&path(), black_box(&large)).expect("reads")
                })
                .vs("saphyr_load"),
            ),
    ]
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
