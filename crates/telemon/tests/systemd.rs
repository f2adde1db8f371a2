//! `deploy/systemd/telemon.service`: `systemd-analyze verify` finds nothing to say about it (an unknown or
//! misspelt key is a warning there, which this test treats as a failure), it reloads with SIGHUP, and it keeps
//! its hardening. Without `systemd-analyze` the test fails under `CI=true` and skips loudly elsewhere.

mod support;

use std::path::Path;

#[test]
fn the_unit_verifies_and_is_hardened() {
    let test = "the_unit_verifies_and_is_hardened";
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd/telemon.service"),
    )
    .expect("the unit");
    for key in [
        "ExecReload=/bin/kill -HUP $MAINPID",
        "DynamicUser=yes",
        "StateDirectory=telemon",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
    ] {
        assert!(unit.contains(key), "the unit has {key:?}");
    }
    let Some(analyze) = support::need_on_path(test, "systemd-analyze", "apt-get install systemd") else {
        return;
    };
    // The unit as installed, but starting the binary under test (verify checks that ExecStart exists).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("telemon.service");
    std::fs::write(&file, unit.replace("/usr/local/bin/telemon", support::TELEMON)).unwrap();
    let out =
        std::process::Command::new(analyze).arg("verify").arg(&file).output().expect("systemd-analyze runs");
    let said = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
}
