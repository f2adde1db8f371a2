//! The Prometheus files shipped in `deploy/prometheus` for `telemon serve`, checked with Debian's `promtool`:
//! `promtool check config` on `prometheus.yml` (which also checks the rule file it names), `promtool check rules`
//! on `rules.yml`, `promtool test rules` on `rules.test.yml` (the unit tests of every alert and recording rule),
//! and the commented hashmod sharding example of `prometheus.yml`, uncommented into a scratch directory. The
//! Alertmanager example of `deploy/alertmanager` is checked with Debian's `amtool`: `amtool check-config`, and
//! `amtool config routes test` sends every alert of `rules.yml` to the receiver its severity names.
//!
//! Without `promtool` (or `amtool`) on `PATH` each of those tests fails when `CI=true` (CI installs them:
//! `.ci/prometheus.sh`, `.ci/alertmanager.sh`), and elsewhere prints `SKIPPED: ...` to stderr and passes. Two more
//! tests need neither: `rules.test.yml` tests every rule that `rules.yml` defines, and every alert has a severity
//! that the Alertmanager example routes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

/// `deploy/prometheus` at the root of the workspace.
fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

/// `deploy/alertmanager/alertmanager.yml`.
fn alertmanager_yml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/alertmanager/alertmanager.yml")
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

/// The `amtool` found on `PATH` (Debian's `prometheus-alertmanager` package), or [`support::need`]'s `None`.
fn amtool(test: &str) -> Option<PathBuf> {
    support::need_on_path(
        test,
        "amtool",
        "apt-get install prometheus-alertmanager (bash .ci/alertmanager.sh)",
    )
}

/// Runs `TOOL ARGS` (`promtool`, `amtool`) and fails the test, showing everything it printed, unless it succeeds;
/// returns stdout and stderr.
fn run_tool(tool: &Path, args: &[&OsStr]) -> (String, String) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", tool.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{} {args:?} failed ({})\n{stdout}\n{stderr}", tool.display(), out.status);
    (stdout, stderr)
}

/// Runs `promtool ARGS` ([`run_tool`]): what it printed.
fn run_promtool(promtool: &Path, args: &[&OsStr]) -> String {
    let (stdout, stderr) = run_tool(promtool, args);
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

/// Each alert of `rules.yml` with its `severity` label (empty when it has none).
fn alert_severities(rules: &str) -> Vec<(String, String)> {
    rules
        .split("- alert:")
        .skip(1)
        .map(|rule| {
            let name = rule.lines().next().unwrap_or_default().trim().to_owned();
            let severity = names_after(rule, "severity:").into_iter().next().unwrap_or_default();
            (name, severity)
        })
        .collect()
}

/// The receiver that `deploy/alertmanager/alertmanager.yml` names for `severity`.
fn receiver_of(severity: &str) -> &'static str {
    match severity {
        "critical" => "pager",
        "warning" => "chat",
        other => panic!("severity {other:?}: the Alertmanager example routes critical and warning"),
    }
}

#[test]
fn every_alert_has_a_severity_the_alertmanager_example_routes() {
    let severities = alert_severities(&read("rules.yml"));
    assert_eq!(severities.len(), names_after(&read("rules.yml"), "- alert:").len(), "{severities:?}");
    for (alert, severity) in &severities {
        assert!(["critical", "warning"].contains(&severity.as_str()), "{alert}: severity {severity:?}");
    }
    assert!(
        severities.iter().any(|(_, s)| s == "critical") && severities.iter().any(|(_, s)| s == "warning")
    );
}

#[test]
fn alertmanager_yml_is_a_valid_config() {
    let Some(amtool) = amtool("alertmanager_yml_is_a_valid_config") else { return };
    let config = alertmanager_yml();
    let (out, _) = run_tool(&amtool, &["check-config".as_ref(), config.as_os_str()]);
    assert!(out.contains("SUCCESS") && out.contains("2 receivers"), "amtool check-config:\n{out}");
}

#[test]
fn alertmanager_yml_routes_each_alert_by_its_severity() {
    let Some(amtool) = amtool("alertmanager_yml_routes_each_alert_by_its_severity") else { return };
    let config = format!("--config.file={}", alertmanager_yml().display());
    // `amtool config routes test` with the receiver expected (it fails when the route gives another) and labels.
    let route = |receiver: &str, labels: &[String]| {
        let mut args = vec!["config".to_owned(), "routes".into(), "test".into(), config.clone()];
        args.push(format!("--verify.receivers={receiver}"));
        args.extend_from_slice(labels);
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let (out, _) = run_tool(&amtool, &args);
        assert_eq!(out.trim(), receiver, "{labels:?}");
    };
    for (alert, severity) in alert_severities(&read("rules.yml")) {
        let labels = [format!("alertname={alert}"), format!("severity={severity}"), "target=t".into()];
        route(receiver_of(&severity), &labels);
    }
    // An alert without a severity goes to the default receiver.
    route("chat", &["alertname=Other".into()]);
}
