//! A test that needs a real component: it fails under `CI=true` when the component is missing, and elsewhere
//! says loudly that it did not run.

use std::path::PathBuf;

/// Whether this is a CI run (`CI=true` or `1`), where a missing real component is an error, not a reason to skip.
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// `name` found on `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// `found`, or, when it is `None`: a panic under `CI=true`, else a loud SKIPPED on stderr and `None`. `what`
/// names the missing component, `hint` how to install it.
pub fn need(test: &str, what: &str, found: Option<PathBuf>, hint: &str) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
    if in_ci() {
        panic!("{what} is missing and CI=true: {hint} so that {test} can run");
    }
    // Straight to the stderr handle: the test harness captures eprintln! and hides it when a test passes.
    let banner = "*".repeat(80);
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "\n{banner}\nSKIPPED: {test}: {what} is missing ({hint}).\n         It did NOT run.\n{banner}\n"
        ),
    );
    None
}

/// The program `name` from `PATH`, or [`need`]'s `None` (`hint`: how to install it).
pub fn need_on_path(test: &str, name: &str, hint: &str) -> Option<PathBuf> {
    need(test, name, on_path(name), hint)
}

/// `prometheus` and `promtool` from `PATH` (Debian's `prometheus` package), or [`need`]'s `None`.
pub fn prometheus_and_promtool(test: &str) -> Option<(PathBuf, PathBuf)> {
    let hint = "apt-get install prometheus (bash .ci/prometheus.sh)";
    let prometheus = need_on_path(test, "prometheus", hint)?;
    let promtool = need_on_path(test, "promtool", hint)?;
    Some((prometheus, promtool))
}

/// Alertmanager from `PATH` (Debian's `prometheus-alertmanager` package calls it `prometheus-alertmanager`, upstream
/// `alertmanager`), or [`need`]'s `None`.
pub fn alertmanager(test: &str) -> Option<PathBuf> {
    let found = on_path("prometheus-alertmanager").or_else(|| on_path("alertmanager"));
    need(
        test,
        "prometheus-alertmanager",
        found,
        "apt-get install prometheus-alertmanager (bash .ci/alertmanager.sh)",
    )
}
