//! Tests of the push senders' part of the config ([`super::config`]): their sections of a config file.

use std::path::PathBuf;
use std::time::Duration;

use super::config::*;
use telemon_fleet::config::{fnv1a64, ConfigError, Shard};

fn parse(text: &str) -> Result<PushConfig, ConfigError> {
    PushConfig::parse("p.toml", text)
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
        ("[[remote_write]]\nurl = \"http://x\"\n[[remote_write]]\nurl = \"http://y\"\nbatch = \"0s\"\n", 5, "batch"),
    ];
    for (text, line, key) in cases {
        let e = parse(text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{text}: {e}");
        assert!(e.to_string().starts_with(&format!("p.toml:{line}: {key}: ")), "{e}");
    }
}

#[test]
fn the_readme_push_example_and_every_deploy_push_config_parse() {
    let readme = include_str!("../../../README.md");
    let start = readme.find("<!-- telemon-push.toml").expect("the README marks its push example");
    let block = &readme[start..];
    let body = &block[block.find("```toml\n").expect("a toml block") + 8..];
    let body = &body[..body.find("```").expect("the block ends")];
    let c = PushConfig::parse("README.md", body).unwrap();
    assert_eq!((c.remote_write.len(), c.otlp.len()), (1, 1));

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/push");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let doc = telemon_fleet::config::Document::load(&path).unwrap_or_else(|e| panic!("{e}"));
            let c = PushConfig::read(&[doc]).unwrap_or_else(|e| panic!("{e}"));
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
    let shards = [Shard::parse("1/3").unwrap(), Shard::parse("2/3").unwrap(), Shard::parse("3/3").unwrap()];
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

#[test]
fn disk_queue_options_parse_with_their_defaults() {
    let c = parse(
        r#"
[serve]
shard = "2/4"
[[remote_write]]
url = "http://vm:8428/api/v1/write"
queue_dir = "/var/lib/telemon/vm"
queue_max_bytes = "256MiB"
queue_max_age = "2h"
when_full = "drop_newest"
queue_sync = "250ms"
[[otlp]]
endpoint = "http://collector:4318"
queue_dir = "/var/lib/telemon/otlp"
[[remote_write]]
url = "http://mimir:9009/api/v1/push"
"#,
    )
    .unwrap();
    let rw = &c.remote_write[0];
    assert_eq!(rw.queue_max_bytes, 256 << 20);
    assert_eq!(rw.queue_max_age, Some(Duration::from_secs(7200)));
    assert_eq!(rw.when_full, WhenFull::DropNewest);
    assert_eq!(rw.queue_sync, Duration::from_millis(250));
    let shard = Some(Shard { index: 2, count: 4 });
    assert_eq!(rw.queue_path(shard), Some(PathBuf::from("/var/lib/telemon/vm/shard-2-of-4")));
    assert_eq!(rw.queue_path(None), Some(PathBuf::from("/var/lib/telemon/vm")));
    let otlp = &c.otlp[0];
    assert_eq!(
        (otlp.queue_max_bytes, otlp.queue_max_age, otlp.when_full, otlp.queue_sync),
        (DEFAULT_QUEUE_MAX_BYTES, None, WhenFull::DropOldest, DEFAULT_QUEUE_SYNC)
    );
    assert_eq!(c.remote_write[1].queue_path(None), None, "a memory queue");
}

#[test]
fn two_senders_sharing_a_queue_dir_is_an_error_naming_both() {
    let err = parse(
        r#"
[[remote_write]]
name = "vm"
url = "http://vm:8428/api/v1/write"
queue_dir = "/var/lib/telemon/q"
[[otlp]]
name = "collector"
endpoint = "http://collector:4318"
queue_dir = "/var/lib/telemon/./q/"
"#,
    )
    .unwrap_err();
    assert_eq!((err.line, err.key.as_str()), (9, "queue_dir"), "{err}");
    assert!(
        err.message.contains("[[remote_write]] vm") && err.message.contains("[[otlp]] collector"),
        "{err}"
    );
}

#[test]
fn disk_queue_bounds_are_checked() {
    for (bad, key) in [
        ("queue_max_bytes = 1000", "queue_max_bytes"),
        ("queue_sync = \"0s\"", "queue_sync"),
        ("queue_max_age = \"0s\"", "queue_max_age"),
        ("when_full = \"block\"", "when_full"),
    ] {
        let text =
            format!("[[remote_write]]\nurl = \"http://vm:8428/api/v1/write\"\nqueue_dir = \"/q\"\n{bad}\n");
        let err = parse(&text).unwrap_err();
        assert!(err.key.contains(key) || err.message.contains(key), "{bad}: {err}");
    }
}
