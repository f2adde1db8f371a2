//! The narrow adapter between the fleet store and the senders: everything a sender reads of a
//! [`FleetSnapshot`] goes through here, so a change in the store touches this file only.

use std::sync::Arc;

use telemon_fleet::{FleetSnapshot, MetricKind, Protocol, Series, Value};

/// One target as the senders see it (borrowed from the snapshot).
#[derive(Debug, Clone)]
pub struct PushTarget<'a> {
    /// Unique target name (the `target` label).
    pub name: &'a Arc<str>,
    /// Its protocol.
    pub protocol: Protocol,
    /// Labels from the config.
    pub labels: &'a [(String, String)],
    /// Connected and collecting.
    pub up: bool,
    /// Successful connections so far: a change means the peer may have restarted its counters.
    pub connects: u64,
    /// Its current series (none while down), owned copies sharing the store's family names and
    /// label sets (so a sender can recognise a series by pointer).
    pub series: Vec<Series>,
}

/// The family telemon adds for every target: 1 while up, else 0.
pub const UP_FAMILY: &str = "telemon_target_up";

/// Every target of `snapshot`, sorted by name.
pub fn targets(snapshot: &FleetSnapshot) -> impl Iterator<Item = PushTarget<'_>> + '_ {
    snapshot.targets.iter().map(|t| PushTarget {
        name: &t.name,
        protocol: t.protocol,
        labels: &t.labels,
        up: t.is_up(),
        connects: t.connects,
        series: if t.is_up() { t.series.to_vec() } else { Vec::new() },
    })
}

/// A series' value as the senders use it.
pub fn number(value: &Value) -> Option<f64> {
    value.as_number()
}

/// The unit of a family, from the naming rules of metrics.md (base units in the name's suffix):
/// `_bytes` -> `By`, `_seconds` -> `s`, `_ratio` -> `1`, anything else `1` for a gauge, `{count}`
/// for a counter.
pub fn unit(family: &str, kind: MetricKind) -> &'static str {
    let base = family.strip_suffix("_total").unwrap_or(family);
    if base.ends_with("_bytes") {
        "By"
    } else if base.ends_with("_seconds") {
        "s"
    } else if base.ends_with("_ratio") || kind != MetricKind::Counter {
        "1"
    } else {
        "{count}"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_the_name_suffix() {
        assert_eq!(unit("rvos_process_memory_bytes", MetricKind::Gauge), "By");
        assert_eq!(unit("mono_runtime_bytes_total", MetricKind::Counter), "By");
        assert_eq!(unit("sys161_simulated_seconds_total", MetricKind::Counter), "s");
        assert_eq!(unit("rvos_scheduler_latency_seconds", MetricKind::Histogram), "s");
        assert_eq!(unit("rvos_process_cpu_ratio", MetricKind::Gauge), "1");
        assert_eq!(unit("sys161_kernel_instructions_total", MetricKind::Counter), "{count}");
        assert_eq!(unit("dyalog_threads", MetricKind::Gauge), "1");
    }
}
