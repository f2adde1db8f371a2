//! `deploy/systemd/telemon.service`, tested for what can be tested without systemd running as PID 1:
//!
//! - the check its README documents, `systemd-analyze verify deploy/systemd/telemon.service` from the checkout,
//!   exits 0 and says nothing (an unknown or misspelt key, or a missing command, is a message there, which this
//!   test treats as a failure);
//! - the unit keeps its hardening, reloads with SIGHUP, does not restart a bad config (exit 2) and gives up on a
//!   start that keeps failing;
//! - what the unit provides, done by hand: the binary started with the unit's own `ExecStart` arguments as a
//!   user that is not root, the TLS key readable only by root, and the copy of it that `LoadCredential=` hands
//!   over (in `$CREDENTIALS_DIRECTORY`, owned by that user): with the original the start fails with exit 2
//!   (`Permission denied`, so the unit would not restart it); with the credential it serves HTTPS.
//!
//! Not exercised here (no systemd as PID 1): systemd itself creating the dynamic user and the credentials
//! directory, the sandboxing options at run time, and the restart policy in action. Without `systemd-analyze`
//! the verify test fails under `CI=true` and skips loudly elsewhere; so does the credential test when not run as
//! root (it must switch to another user).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The workspace root (the checkout).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn unit() -> String {
    std::fs::read_to_string(root().join("deploy/systemd/telemon.service")).expect("the unit")
}

/// The one value of `key=` in the unit.
fn value<'u>(unit: &'u str, key: &str) -> &'u str {
    let mut values = unit.lines().filter_map(|l| l.strip_prefix(key).and_then(|l| l.strip_prefix('=')));
    let first = values.next().unwrap_or_else(|| panic!("the unit has {key}="));
    assert!(values.next().is_none(), "one {key}= in the unit");
    first
}

#[test]
fn the_documented_check_passes_on_a_checkout() {
    let test = "the_documented_check_passes_on_a_checkout";
    let check = "systemd-analyze verify deploy/systemd/telemon.service";
    let readme = std::fs::read_to_string(root().join("deploy/systemd/README.md")).unwrap();
    assert!(readme.contains(&format!("`{check}`")), "the README documents `{check}`");
    let Some(analyze) = support::need_on_path(test, "systemd-analyze", "apt-get install systemd") else {
        return;
    };
    // Exactly as documented: from the checkout's root, on the file as committed.
    let out = std::process::Command::new(analyze)
        .args(["verify", "deploy/systemd/telemon.service"])
        .current_dir(root())
        .output()
        .expect("systemd-analyze runs");
    let said = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.trim().is_empty(), "{check}: {:?}\n{said}", out.status);
}

#[test]
fn the_unit_is_hardened_and_does_not_restart_a_bad_config() {
    let unit = unit();
    for key in [
        "ExecReload=/bin/kill -HUP $MAINPID",
        "DynamicUser=yes",
        "StateDirectory=telemon",
        "ConfigurationDirectory=telemon",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
        // A bad config exits 2: not restarted. Anything else: restarted 5 s apart, at most 5 times a minute.
        "Restart=on-failure\n",
        "RestartSec=5s\n",
        "RestartPreventExitStatus=2\n",
        "StartLimitIntervalSec=60s\n",
        "StartLimitBurst=5\n",
        // The key, root's, handed over as a credential; a note in its place when there is none.
        "LoadCredential=telemon.key:/etc/telemon/telemon.key\n",
    ] {
        assert!(unit.contains(key), "the unit has {key:?}");
    }
    assert!(value(&unit, "SetCredential").starts_with("telemon.key:"));
    // Five restarts RestartSec apart fit in the start-limit window, so a failing start does stop.
    let every = humantime::parse_duration(value(&unit, "RestartSec")).unwrap();
    let window = humantime::parse_duration(value(&unit, "StartLimitIntervalSec")).unwrap();
    let burst: u32 = value(&unit, "StartLimitBurst").parse().unwrap();
    assert!(every * burst < window, "{burst} starts {every:?} apart fit in {window:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_only_key_reaches_a_non_root_telemon_as_a_credential() {
    let test = "a_root_only_key_reaches_a_non_root_telemon_as_a_credential";
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        assert!(
            !support::in_ci(),
            "{test}: must run as root under CI=true (it starts telemon as another user)"
        );
        eprintln!("SKIPPED {test}: not root, cannot start telemon as another user");
        return;
    }
    const NOBODY: u32 = 65534;
    let data = |name: &str| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/web-tls").join(name);
    let dir = tempfile::tempdir().unwrap();
    let open = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(dir.path(), 0o755);
    // The binary where the other user can run it.
    let telemon = dir.path().join("telemon");
    std::fs::copy(support::TELEMON, &telemon).unwrap();
    open(&telemon, 0o755);
    // /etc/telemon: the config, the web config, the certificate (0644) and the key (0600 root, as openssl writes it).
    let etc = dir.path().join("etc-telemon");
    std::fs::create_dir(&etc).unwrap();
    open(&etc, 0o755);
    std::fs::copy(data("server.pem"), etc.join("telemon.pem")).unwrap();
    std::fs::copy(data("server.key"), etc.join("telemon.key")).unwrap();
    open(&etc.join("telemon.key"), 0o600);
    // What LoadCredential=telemon.key:/etc/telemon/telemon.key makes of it: a read-only copy that only the
    // service's user can read, in $CREDENTIALS_DIRECTORY (/run/credentials/telemon.service).
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::copy(etc.join("telemon.key"), credentials.join("telemon.key")).unwrap();
    open(&credentials.join("telemon.key"), 0o400);
    std::os::unix::fs::chown(credentials.join("telemon.key"), Some(NOBODY), Some(NOBODY)).unwrap();
    open(&credentials, 0o500);
    std::os::unix::fs::chown(&credentials, Some(NOBODY), Some(NOBODY)).unwrap();

    // The unit's ExecStart, with this checkout's binary and /etc/telemon here.
    let unit = unit();
    let exec = value(&unit, "ExecStart");
    let args = exec.strip_prefix("/usr/bin/env telemon ").expect("ExecStart runs telemon from PATH");
    let config = etc.join("telemon.toml");
    let args: Vec<String> =
        args.split(' ').map(|a| a.replace("/etc/telemon/telemon.toml", config.to_str().unwrap())).collect();
    assert_eq!(args, ["serve", "--config", config.to_str().unwrap()]);
    let start = |key_file: &Path| {
        let addr = support::free_addr();
        std::fs::write(
            &config,
            format!(
                "[serve]\nlisten = \"{addr}\"\nweb_config = \"web-config.yml\"\n\n[[smon]]\nname = \"x\"\nconnect = \"127.0.0.1:1\"\n"
            ),
        )
        .unwrap();
        std::fs::write(
            etc.join("web-config.yml"),
            format!("tls_server_config:\n  cert_file: telemon.pem\n  key_file: {}\n", key_file.display()),
        )
        .unwrap();
        let child = tokio::process::Command::new(&telemon)
            .args(&args)
            .env("CREDENTIALS_DIRECTORY", &credentials)
            .current_dir(dir.path())
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("telemon starts");
        (child, addr)
    };

    // The key itself: the other user cannot read it, and the start fails as a bad config (exit 2: no restart).
    let (child, _) = start(&etc.join("telemon.key"));
    let out = support::within("telemon to refuse the key", child.wait_with_output()).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("key_file") && err.contains("Permission denied"), "{err}");

    // The credential: served over HTTPS.
    let (mut child, addr) = start(&credentials.join("telemon.key"));
    let ca = reqwest::Certificate::from_pem(&std::fs::read(data("ca.pem")).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .timeout(support::DEADLINE)
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{}/healthz", addr.port());
    let status = support::until("telemon to serve HTTPS", Duration::from_millis(100), async || {
        if let Ok(Some(exit)) = child.try_wait() {
            panic!("telemon exited: {exit}");
        }
        client.get(&url).send().await.ok().map(|r| r.status())
    })
    .await;
    assert_eq!(status, 200);
    child.kill().await.unwrap();
}
