//! `telemon serve --check-config` checks what `serve` checks at start and on reload: the config, the web
//! config file it (or `--web.config.file`) names, the push senders' files and every address; each problem
//! is `telemon: bad config: FILE:LINE: KEY: why` with exit code 2, whether checking or serving.

mod support;

use std::path::Path;

/// `telemon serve --check-config FILE ARGS` and `telemon serve --config FILE ARGS` (stopped at once
/// when it serves): both must fail with exit 2 and `want` in their error.
async fn both_refuse(file: &Path, extra: &[&str], want: &str) {
    let file = file.to_str().unwrap();
    for mode in ["--check-config", "--config"] {
        let mut args = vec!["serve", mode, file, "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let out = support::run(&args, None).await;
        let err = support::stderr(&out);
        assert_eq!(support::code(&out), 2, "{mode}: {err}");
        assert!(err.starts_with("telemon: bad config: "), "{mode}: one prefix for every config error: {err}");
        assert!(err.contains(want), "{mode}: want {want:?} in {err}");
        assert_eq!(err.lines().count(), 1, "{mode}: one line: {err}");
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn the_web_config_a_config_names_is_checked_too() {
    let dir = tempfile::tempdir().unwrap();
    let target = "[[smon]]\nname = \"a\"\nconnect = \"127.0.0.1:7399\"\n";
    // A web config that does not exist: the line of the key that names it.
    let cc = write(dir.path(), "cc.toml", &format!("[serve]\nweb_config = \"missing.yml\"\n{target}"));
    both_refuse(&cc, &[], "cc.toml:2: serve.web_config: cannot read ").await;
    // A password where a bcrypt hash belongs: the web config's own file, line and key.
    write(dir.path(), "plain.yml", "basic_auth_users:\n  prometheus: secret\n");
    let cc = write(dir.path(), "cc.toml", &format!("[serve]\nweb_config = \"plain.yml\"\n{target}"));
    both_refuse(&cc, &[], "plain.yml:2: basic_auth_users.prometheus: not a bcrypt hash").await;
    // --web.config.file is applied by --check-config as by serve.
    let cc = write(dir.path(), "cc.toml", target);
    let plain = dir.path().join("plain.yml");
    both_refuse(&cc, &["--web.config.file", plain.to_str().unwrap()], "plain.yml:2: basic_auth_users.").await;
    both_refuse(&cc, &["--web.config.file", "/nonexistent/web.yml"], "--web.config.file: cannot read ").await;
    // A good one is named in the summary.
    let good = write(dir.path(), "good.yml", "http_server_config:\n  http2: false\n");
    let out = support::run(
        &["serve", "--check-config", cc.to_str().unwrap(), "--web.config.file", good.to_str().unwrap()],
        None,
    )
    .await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    assert!(support::stdout(&out).contains("web config"), "{}", support::stdout(&out));
}

#[tokio::test]
async fn a_push_senders_files_are_checked_at_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let head = "[[smon]]\nname = \"a\"\nconnect = \"127.0.0.1:7399\"\n";
    let cases = [
        (
            "[[remote_write]]\nurl = \"http://127.0.0.1:1/api/v1/write\"\n\
             basic_auth = { username = \"u\", password_file = \"/nonexistent/pw\" }\n",
            "cc.toml:6: basic_auth.password_file: cannot read /nonexistent/pw",
        ),
        (
            "[[otlp]]\nendpoint = \"http://127.0.0.1:1\"\n\nbearer_token_file = \"/nonexistent/token\"\n",
            "cc.toml:7: bearer_token_file: cannot read /nonexistent/token",
        ),
        (
            "[[remote_write]]\nurl = \"http://127.0.0.1:1/w\"\n[[remote_write]]\nurl = \"https://127.0.0.1:1/w\"\n\
             tls = { ca_file = \"/nonexistent/ca.pem\" }\n",
            "cc.toml:8: tls.ca_file: cannot read /nonexistent/ca.pem",
        ),
    ];
    for (block, want) in cases {
        let cc = write(dir.path(), "cc.toml", &format!("{head}{block}"));
        both_refuse(&cc, &[], want).await;
    }
}

#[tokio::test]
async fn addresses_are_checked_and_a_missing_port_is_the_protocols_default() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[[smon]]\nname = \"a\"\nconnect = \"nohost:\"\n",
            "cc.toml:3: connect: \"nohost:\" is not HOST:PORT",
        ),
        (
            "[[sysinfo]]\nname = \"a\"\nconnect = \"127.0.0.1:99999\"\n",
            "cc.toml:3: connect: \"127.0.0.1:99999\"",
        ),
        ("[[hmon]]\nname = \"a\"\nconnect = \"a b\"\n", "cc.toml:3: connect: \"a b\" is not HOST:PORT"),
        (
            "[[hmon_listen]]\nname = \"a\"\nlisten = \"nowhere\"\n",
            "cc.toml:3: listen: \"nowhere\" is not HOST:PORT",
        ),
        ("[[mono_listen]]\nname = \"a\"\nlisten = \"127.0.0.1:70000\"\n", "cc.toml:3: listen: "),
    ];
    for (text, want) in cases {
        let cc = write(dir.path(), "cc.toml", text);
        both_refuse(&cc, &[], want).await;
    }
    // `127.0.0.1` alone is the protocol's default port, as Prometheus applies the scheme's.
    let cc = write(dir.path(), "cc.toml", "[[hmon]]\nname = \"a\"\nconnect = \"127.0.0.1\"\n");
    let out = support::run(&["serve", "--check-config", cc.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
}

#[tokio::test]
async fn usage_and_unreadable_files_and_values_in_the_users_units() {
    let dir = tempfile::tempdir().unwrap();
    let smon = write(dir.path(), "ok.toml", "[[smon]]\nname = \"a\"\nconnect = \"127.0.0.1:7399\"\n");
    let out =
        support::run(&["serve", "--config", smon.to_str().unwrap(), "--listen", "notanaddr"], None).await;
    assert_eq!(support::code(&out), 2, "{}", support::stderr(&out));
    assert!(
        support::stderr(&out)
            .starts_with("telemon: bad config: <flags>: --listen: \"notanaddr\" is not HOST:PORT"),
        "{}",
        support::stderr(&out)
    );

    let out = support::run(&["serve", "--check-config", "/nonexistent/telemon.toml"], None).await;
    assert_eq!(support::code(&out), 2);
    let err = support::stderr(&out);
    assert!(
        err.starts_with("telemon: bad config: /nonexistent/telemon.toml: cannot read the config file: "),
        "no line 0, no key `-`: {err}"
    );

    let cc = write(dir.path(), "cc.toml", "[[meter161]]\nname = \"m\"\ndir = \"/x\"\n\ninterval = \"5s\"\n");
    both_refuse(&cc, &[], "cc.toml:5: interval: 5s is outside 10us..2s").await;
    let cc = write(
        dir.path(),
        "cc.toml",
        "[[sysinfo]]\nname = \"v\"\nconnect = \"127.0.0.1:1\"\nreports = [\"ps\", \"nope\"]\n",
    );
    both_refuse(&cc, &[], "cc.toml:4: reports: unknown report \"nope\"").await;
}

#[tokio::test]
async fn the_start_up_line_says_https_when_tls_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/web-tls");
    for f in ["server.pem", "server.key"] {
        std::fs::copy(data.join(f), dir.path().join(f)).unwrap();
    }
    let web =
        write(dir.path(), "web.yml", "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n");
    let cc = write(dir.path(), "cc.toml", "[[smon]]\nname = \"a\"\nconnect = \"127.0.0.1:1\"\n");
    let (cc, web) = (cc.to_str().unwrap(), web.to_str().unwrap());
    let mut telemon = support::Telemon::spawn(&[
        "serve",
        "--config",
        cc,
        "--listen",
        "127.0.0.1:0",
        "--web.config.file",
        web,
    ]);
    let line = telemon.stderr_line("serving").await;
    assert!(line.contains(" on https://127.0.0.1:") && line.ends_with("/metrics"), "{line}");
    telemon.kill().await;
    let mut telemon = support::Telemon::spawn(&["serve", "--config", cc, "--listen", "127.0.0.1:0"]);
    let line = telemon.stderr_line("serving").await;
    assert!(line.contains(" on http://127.0.0.1:"), "{line}");
    telemon.kill().await;
}
