//! What every protocol's target blocks share: their names, labels and addresses, and the values they are
//! written in (durations). The protocols' components read their blocks with these.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserializer;

use super::addr::{check_listen, with_default_port};
use super::document::{ConfigError, Place};
use super::parse;

/// A block's configured labels, as a target carries them.
pub fn labels(l: &BTreeMap<String, String>) -> Vec<(String, String)> {
    l.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A humantime duration ("1s", "250ms").
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse::duration(d)
}

/// An optional humantime duration.
pub fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    parse::duration(d).map(Some)
}

/// One second: the default of several periods.
pub fn one_second() -> Duration {
    Duration::from_secs(1)
}

/// Label names that telemon sets itself (every label named in `docs/metrics.md`, plus `le` and
/// `quantile`): a configured or peer-supplied label may not take one of them, or a line would carry
/// the name twice and Prometheus would reject the whole scrape.
pub const RESERVED_LABELS: &[&str] = &[
    "bitwidth",
    "category",
    "channel",
    "counter",
    "counters",
    "dir",
    "event",
    "field",
    "index",
    "kind",
    "le",
    "listener",
    "name",
    "pid",
    "protocol",
    "quantile",
    "reason",
    "result",
    "runtime",
    "sender",
    "session_uuid",
    "side",
    "state",
    "tag",
    "target",
    "task",
    "unicode",
    "value",
    "version",
    "window",
    "wsid",
];

/// Checks a label name from the config or from a peer: it must match `[a-zA-Z_][a-zA-Z0-9_]*`, must
/// not begin with `__` (reserved by Prometheus) and must not be one of [`RESERVED_LABELS`]. The
/// error says why, for a person.
pub fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("label name {name:?} must match [a-zA-Z_][a-zA-Z0-9_]*"));
    }
    if name.starts_with("__") {
        return Err(format!("label name {name:?} must not begin with \"__\" (reserved by Prometheus)"));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!("label name {name:?} is set by telemon itself; choose another"));
    }
    Ok(())
}

/// Checks what every target block has: a name (non-empty, without `/`) and label names that Prometheus
/// and telemon take.
pub fn check_target(block: &Place, name: &str, labels: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    if name.is_empty() || name.contains('/') {
        return Err(block.error("name", format!("target name {name:?} must be non-empty and without '/'")));
    }
    for key in labels.keys() {
        if let Err(message) = check_label_name(key) {
            let at = format!("labels.{key}");
            return Err(ConfigError { line: block.line(&at), ..block.error(&at, message) });
        }
    }
    Ok(())
}

/// A block's `connect` address, checked: `HOST:PORT`, or `HOST` with the protocol's `default_port`.
pub fn check_connect(block: &Place, connect: Option<&str>, default_port: u16) -> Result<String, ConfigError> {
    let connect = connect.unwrap_or_default();
    with_default_port(connect, default_port).map(|a| a.into_owned()).map_err(|m| block.error("connect", m))
}

/// A dial-in listener's keys (`[[hmon_listen]]`, `[[mono_listen]]`), checked.
pub fn check_listener(
    block: &Place,
    listen: Option<&str>,
    max_targets: Option<usize>,
    allow: Option<&[String]>,
    hello_timeout: Option<Duration>,
) -> Result<(), ConfigError> {
    check_listen(listen.unwrap_or_default()).map_err(|m| block.error("listen", m))?;
    crate::collect::dialin::ListenerLimits::new(max_targets, allow, hello_timeout)
        .map(|_| ())
        .map_err(|(key, message)| block.error(key, message))
}
