//! The Prometheus files shipped in `deploy/prometheus` for `telemon serve`, checked with Debian's `promtool`:
//! `promtool check config` on `prometheus.yml` (which also checks the rule file it names), `promtool check rules`
//! on `rules.yml`, `promtool test rules` on `rules.test.yml` (the unit tests of every alert and recording rule),
//! and the commented hashmod sharding example of `prometheus.yml`, uncommented into a scratch directory.
//!
//! Without `promtool` on `PATH` each of those tests fails when `CI=true` (CI installs it: `.ci/prometheus.sh`),
//! and elsewhere prints `SKIPPED: ...` to stderr and passes. One more test, which needs no `promtool`, checks that
//! `rules.test.yml` tests every rule that `rules.yml` defines.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

/// `deploy/prometheus` at the root of the workspace.
fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

/// The text of a file of `deploy/prometheus`.
fn read(name: &str) -> String {
    let path = deploy_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The `promtool` found on `PATH` (Debian's `prometheus` package), or [`support::need`]'s `None`.
fn promtool(test: &str) -> Option<PathBuf> {
    support::need(
        test,
        "promtool",
        support::on_path("promtool"),
        "apt-get install prometheus (bash .ci/prometheus.sh)",
    )
}

/// Runs `promtool ARGS` and fails the test, showing everything it printed, unless it succeeds.
fn run_promtool(promtool: &Path, args: &[&OsStr]) -> String {
    let out = Command::new(promtool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", promtool.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {args:?} failed ({})\n{stdout}\n{stderr}", out.status);
    format!("{stdout}{stderr}")
}

#[test]
fn prometheus_yml_is_a_valid_config() {
    let Some(promtool) = promtool("prometheus_yml_is_a_valid_config") else { return };
    let config = deploy_dir().join("prometheus.yml");
    let out = run_promtool(&promtool, &["check".as_ref(), "config".as_ref(), config.as_os_str()]);
    // The config names rules.yml, and promtool checks it too.
    assert!(out.contains("1 rule files found"), "prometheus.yml should name rules.yml:\n{out}");
}

#[test]
fn rules_yml_is_valid() {
    let Some(promtool) = promtool("rules_yml_is_valid") else { return };
    let rules = deploy_dir().join("rules.yml");
    run_promtool(&promtool, &["check".as_ref(), "rules".as_ref(), rules.as_os_str()]);
}

#[test]
fn rules_pass_their_unit_tests() {
    let Some(promtool) = promtool("rules_pass_their_unit_tests") else { return };
    let tests = deploy_dir().join("rules.test.yml");
    let out = run_promtool(&promtool, &["test".as_ref(), "rules".as_ref(), tests.as_os_str()]);
    assert!(out.contains("SUCCESS"), "promtool test rules did not report SUCCESS:\n{out}");
}

/// `prometheus.yml` with the lines between the sharding example's markers uncommented.
fn uncomment_sharding_example(config: &str) -> String {
    const BEGIN: &str = "# --- BEGIN hashmod sharding example ---";
    const END: &str = "# --- END hashmod sharding example ---";
    let mut inside = false;
    let mut seen = 0;
    let mut lines = Vec::new();
    for line in config.lines() {
        match line.trim() {
            BEGIN => inside = true,
            END => inside = false,
            _ if inside => {
                // "  # - job_name: ..." becomes "  - job_name: ..."; a comment inside the example stays one.
                let indent = line.len() - line.trim_start().len();
                let rest = &line[indent..];
                let rest = rest.strip_prefix("# ").or_else(|| rest.strip_prefix('#')).unwrap_or(rest);
                lines.push(format!("{}{rest}", &line[..indent]));
                seen += 1;
                continue;
            }
            _ => {}
        }
        lines.push(line.to_owned());
    }
    assert!(
        seen > 0 && !inside,
        "prometheus.yml should hold the sharding example between {BEGIN:?} and {END:?}"
    );
    lines.join("\n") + "\n"
}

#[test]
fn sharding_example_is_a_valid_config_once_uncommented() {
    let Some(promtool) = promtool("sharding_example_is_a_valid_config_once_uncommented") else { return };
    let config = uncomment_sharding_example(&read("prometheus.yml"));
    assert!(config.contains("\n  - job_name: telemon-probe-sharded\n"), "uncommented example:\n{config}");
    assert!(config.contains("action: hashmod"), "uncommented example:\n{config}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("prometheus.yml"), &config).unwrap();
    std::fs::write(dir.path().join("rules.yml"), read("rules.yml")).unwrap();
    let path = dir.path().join("prometheus.yml");
    run_promtool(&promtool, &["check".as_ref(), "config".as_ref(), path.as_os_str()]);
}

/// The names after `key` (like `- alert:`) at the start of a trimmed line of `yaml`.
fn names_after(yaml: &str, key: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|line| line.trim().strip_prefix(key))
        .map(|name| name.trim().trim_matches(['"', '\'']).to_owned())
        .collect()
}

#[test]
fn every_rule_has_unit_tests() {
    let rules = read("rules.yml");
    let tests = read("rules.test.yml");

    let alerts = names_after(&rules, "- alert:");
    let records = names_after(&rules, "- record:");
    assert!(alerts.len() >= 7 && records.len() >= 2, "rules.yml: alerts {alerts:?}, records {records:?}");

    let tested_alerts = names_after(&tests, "alertname:");
    let tested_exprs = names_after(&tests, "- expr:");
    let untested: Vec<_> = alerts
        .iter()
        .filter(|a| !tested_alerts.contains(a))
        .chain(records.iter().filter(|r| !tested_exprs.contains(r)))
        .collect();
    assert!(untested.is_empty(), "rules.test.yml has no test of {untested:?}");

    // Each alert is tested firing (an exp_alerts list with an alert) and not firing (an empty one).
    for alert in &alerts {
        let cases: Vec<&str> = tests
            .split("- eval_time:")
            .filter(|case| names_after(case, "alertname:").first() == Some(alert))
            .collect();
        assert!(
            cases.iter().any(|c| c.contains("exp_alerts: []")),
            "{alert}: no case where it does not fire"
        );
        assert!(cases.iter().any(|c| c.contains("exp_labels:")), "{alert}: no case where it fires");
    }
}
