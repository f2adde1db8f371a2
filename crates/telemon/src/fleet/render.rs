//! Rendering a [`FleetSnapshot`] as Prometheus text format 0.0.4 or OpenMetrics 1.0.
//!
//! A small writer of our own: a scrape only renders the cache, and both formats must pass
//! `promtool check metrics` (which rejects OpenMetrics-style counter families in 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::UNIX_EPOCH;

use super::model::{FleetSnapshot, MetricKind, Series, TargetSnapshot, Value};

/// The exposition format of a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text004,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// Picks the format from an HTTP `Accept` header: OpenMetrics when it names
    /// `application/openmetrics-text`, else 0.0.4.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text004,
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text004 => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// One family's metadata and its sample lines, gathered across targets.
struct Family {
    help: &'static str,
    kind: MetricKind,
    lines: String,
}

/// Renders every target's series plus the `telemon_*` families of metrics.md (and
/// `telemon_target_dropped_series_total`).
pub fn render(snapshot: &FleetSnapshot, format: Format) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut build = String::new();
    write_sample(&mut build, "telemon_build_info", &[("version", env!("CARGO_PKG_VERSION"))], &[], "", 1.0);
    families.insert(
        "telemon_build_info".into(),
        Family { help: "telemon build information.", kind: MetricKind::Info, lines: build },
    );
    render_own(&mut families);
    for t in &snapshot.targets {
        render_target(&mut families, t);
    }
    let mut out = String::with_capacity(families.values().map(|f| f.lines.len() + 128).sum());
    for (name, f) in &families {
        let meta_name = match (format, f.kind) {
            (Format::OpenMetrics, MetricKind::Counter) => name.strip_suffix("_total").unwrap_or(name),
            (Format::OpenMetrics, MetricKind::Info) => name.strip_suffix("_info").unwrap_or(name),
            _ => name.as_str(),
        };
        let ty = match (format, f.kind) {
            (Format::OpenMetrics, MetricKind::Info) => "info",
            (_, k) => k.prometheus_type(),
        };
        let _ = writeln!(out, "# HELP {meta_name} {}", escape_help(f.help));
        let _ = writeln!(out, "# TYPE {meta_name} {ty}");
        out.push_str(&f.lines);
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// telemon's own counters ([`super::own`]): refused connections.
fn render_own(families: &mut BTreeMap<String, Family>) {
    let refusals = super::own::listener_refusals();
    if !refusals.is_empty() {
        let name = "telemon_listener_refused_total";
        let help = "Connections a dial-in listener closed without making them a target, by reason.";
        let lines = family(families, name, help, MetricKind::Counter);
        for (listener, reason, n) in refusals {
            write_sample(
                lines,
                name,
                &[("listener", &listener), ("reason", reason.as_str())],
                &[],
                "",
                n as f64,
            );
        }
    }
    let name = "telemon_http_refused_connections_total";
    let help = "HTTP connections refused at once because [serve] max_connections were open.";
    let lines = family(families, name, help, MetricKind::Counter);
    write_sample(lines, name, &[], &[], "", super::own::http_refusals() as f64);
}

fn family<'a>(
    families: &'a mut BTreeMap<String, Family>,
    name: &str,
    help: &'static str,
    kind: MetricKind,
) -> &'a mut String {
    if !families.contains_key(name) {
        families.insert(name.to_owned(), Family { help, kind, lines: String::with_capacity(4096) });
    }
    &mut families.get_mut(name).expect("inserted above").lines
}

fn render_target(families: &mut BTreeMap<String, Family>, t: &TargetSnapshot) {
    let proto = t.protocol.as_str();
    let base: Vec<(&str, &str)> = std::iter::once(("target", &*t.name))
        .chain(t.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    let mut with_proto = vec![("protocol", proto)];
    with_proto.extend(base.iter().copied());

    let up = if t.is_up() { 1.0 } else { 0.0 };
    let lines = family(
        families,
        "telemon_target_up",
        "1 while the target is connected and receiving, else 0.",
        MetricKind::Gauge,
    );
    write_sample(lines, "telemon_target_up", &with_proto, &[], "", up);
    let lines = family(
        families,
        "telemon_target_connects_total",
        "Successful connections to the target (or accepted agents).",
        MetricKind::Counter,
    );
    write_sample(lines, "telemon_target_connects_total", &with_proto, &[], "", t.connects as f64);
    let lines = family(
        families,
        "telemon_target_errors_total",
        "Errors collecting from the target, by kind.",
        MetricKind::Counter,
    );
    for (kind, n) in t.errors.iter() {
        write_sample(
            lines,
            "telemon_target_errors_total",
            &with_proto,
            &[("kind", kind.as_str())],
            "",
            n as f64,
        );
    }
    let lines = family(
        families,
        "telemon_target_dropped_series_total",
        "Series not kept because the target reached its series limit.",
        MetricKind::Counter,
    );
    write_sample(lines, "telemon_target_dropped_series_total", &with_proto, &[], "", t.dropped_series as f64);
    if let Some(at) = t.last_update {
        let secs = at.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let lines = family(
            families,
            "telemon_target_last_update_timestamp_seconds",
            "Unix time of the last value received from the target.",
            MetricKind::Gauge,
        );
        write_sample(lines, "telemon_target_last_update_timestamp_seconds", &with_proto, &[], "", secs);
    }

    // Series come sorted by family: look the family up once per run of it.
    for run in t.series.chunk_by(|a, b| a.family == b.family) {
        let lines = family(families, &run[0].family, run[0].help, run[0].kind);
        for s in run {
            write_series(lines, s, &base);
        }
    }
}

fn write_series(lines: &mut String, s: &Series, base: &[(&str, &str)]) {
    {
        let extra = s.labels.iter().map(|(k, v)| (&**k, &**v));
        match &s.value {
            Value::Number(v) => write_labelled(lines, &s.family, "", base, extra, None, *v),
            Value::Histogram { buckets, sum, count } => {
                let mut le = String::new();
                for (bound, n) in buckets {
                    le.clear();
                    push_f64(&mut le, *bound);
                    write_labelled(lines, &s.family, "_bucket", base, extra.clone(), Some(&le), *n as f64);
                }
                write_labelled(lines, &s.family, "_bucket", base, extra.clone(), Some("+Inf"), *count as f64);
                write_labelled(lines, &s.family, "_sum", base, extra.clone(), None, *sum);
                write_labelled(lines, &s.family, "_count", base, extra, None, *count as f64);
            }
        }
    }
}

/// One sample line: `name{base...,extra...[,le="..."]} value`, written without intermediate
/// allocations.
fn write_labelled<'e>(
    out: &mut String,
    name: &str,
    suffix: &str,
    base: &[(&str, &str)],
    extra: impl Iterator<Item = (&'e str, &'e str)>,
    le: Option<&str>,
    v: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    let mut first = true;
    let mut label = |out: &mut String, k: &str, val: &str| {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        escape_label_into(out, val);
        out.push('"');
    };
    for &(k, val) in base {
        label(out, k, val);
    }
    for (k, val) in extra {
        label(out, k, val);
    }
    if let Some(le) = le {
        label(out, "le", le);
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    push_f64(out, v);
    out.push('\n');
}

fn write_sample(out: &mut String, name: &str, a: &[(&str, &str)], b: &[(&str, &str)], suffix: &str, v: f64) {
    write_labelled(out, name, suffix, a, b.iter().copied(), None, v);
}

/// A sample value as Prometheus spells it (`NaN`, `+Inf`, `-Inf`, else Rust's shortest form).
fn push_f64(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

fn escape_label_into(out: &mut String, v: &str) {
    if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(h: &str) -> String {
    h.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::model::{ErrorKind, Protocol, Series, TargetState};
    use std::sync::Arc;

    pub(super) fn snap() -> FleetSnapshot {
        let mut t = TargetSnapshot::new("box\"1", Protocol::Smon, vec![("room".into(), "b12".into())]);
        t.state = TargetState::Up;
        t.connects = 2;
        t.errors.bump(ErrorKind::Decode);
        t.series = Arc::from(vec![
            Series {
                family: Arc::from("smon_cpu_seconds_total"),
                help: "CPU time.",
                labels: vec![(Arc::from("mode"), Arc::from("user"))].into(),
                kind: MetricKind::Counter,
                value: Value::Number(12.5),
                rate: None,
            },
            Series {
                family: Arc::from("smon_lat_seconds"),
                help: "Latency.",
                labels: vec![].into(),
                kind: MetricKind::Histogram,
                value: Value::Histogram { buckets: vec![(0.5, 1), (1.0, 3)], sum: 2.0, count: 4 },
                rate: None,
            },
        ]);
        let down = TargetSnapshot::new("gone", Protocol::Hmon, vec![]);
        FleetSnapshot { targets: vec![t, down] }
    }

    #[test]
    fn text_004_counters_keep_total_and_labels_are_escaped() {
        let out = render(&snap(), Format::Text004);
        assert!(out.contains("# TYPE smon_cpu_seconds_total counter\n"), "{out}");
        assert!(
            out.contains("smon_cpu_seconds_total{target=\"box\\\"1\",room=\"b12\",mode=\"user\"} 12.5\n"),
            "{out}"
        );
        assert!(out.contains("telemon_target_up{protocol=\"smon\",target=\"box\\\"1\",room=\"b12\"} 1\n"));
        assert!(out.contains("telemon_target_up{protocol=\"hmon\",target=\"gone\"} 0\n"));
        assert!(out.contains("telemon_target_errors_total{protocol=\"smon\",target=\"box\\\"1\",room=\"b12\",kind=\"decode\"} 1\n"));
        assert!(out.contains("smon_lat_seconds_bucket{target=\"box\\\"1\",room=\"b12\",le=\"+Inf\"} 4\n"));
        assert!(out.contains("# TYPE telemon_build_info gauge\n"));
        assert!(!out.contains("# EOF"));
        // One HELP/TYPE per family even with several targets.
        assert_eq!(out.matches("# TYPE telemon_target_up ").count(), 1);
    }

    #[test]
    fn openmetrics_strips_total_in_metadata_and_ends_with_eof() {
        let out = render(&snap(), Format::OpenMetrics);
        assert!(out.contains("# TYPE smon_cpu_seconds counter\n"), "{out}");
        assert!(out.contains("smon_cpu_seconds_total{"));
        assert!(out.contains("# TYPE telemon_build info\n"));
        assert!(out.ends_with("# EOF\n"));
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(Format::from_accept(None), Format::Text004);
        assert_eq!(Format::from_accept(Some("text/plain;version=0.0.4")), Format::Text004);
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prom)), Format::OpenMetrics);
    }
}

#[cfg(test)]
mod promtool {
    //! `promtool check metrics` on rendered output: needs promtool (Prometheus 2.42); fails under
    //! `CI=true` when it is missing, skips loudly otherwise.
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    #[test]
    fn text_004_passes_promtool_check_metrics() {
        let Ok(mut child) = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        else {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "promtool is missing under CI=true");
            eprintln!("SKIPPED: promtool not found on PATH (apt-get install prometheus); not checking the exposition");
            return;
        };
        let out = render(&super::tests::snap(), Format::Text004);
        child.stdin.take().expect("piped").write_all(out.as_bytes()).expect("write to promtool");
        let res = child.wait_with_output().expect("promtool runs");
        assert!(
            res.status.success(),
            "promtool rejected:\n{}{}\n{out}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
    }
}
