//! The dashboard's memory of the past: per target, a bounded ring of points per series, sampled
//! from the fleet once a second (rates for counters, values for the rest).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use telemon_fleet::{FleetSnapshot, MetricKind, SeriesRef, TargetSnapshot};

/// The longest time window (and so the history kept), in seconds.
pub const MAX_WINDOW_SECS: u32 = 3600;
/// The most series remembered per target.
pub const MAX_SERIES_PER_TARGET: usize = 128;
/// The total number of points kept across every target and series (about 16 MiB).
pub const MAX_POINTS: usize = 2_000_000;

/// A series' identity inside one target: the family and its labels, as `family{k="v",...}`.
pub fn key(s: &SeriesRef) -> String {
    let mut k = String::with_capacity(s.family().len() + 32);
    k.push_str(s.family());
    if !s.labels().is_empty() {
        k.push('{');
        for (i, (n, v)) in s.labels().iter().enumerate() {
            if i > 0 {
                k.push(',');
            }
            let _ = write!(k, "{n}={v}");
        }
        k.push('}');
    }
    k
}

/// One point: seconds since the history began, and the value.
pub type Point = (f64, f64);

/// What a dashboard plots of a series: a counter's rate, anything else's value.
pub fn plotted(s: &SeriesRef) -> Option<f64> {
    match s.kind() {
        MetricKind::Counter => s.rate(),
        MetricKind::Gauge => s.number(),
        MetricKind::Info | MetricKind::Histogram => None,
    }
}

/// One series' points: (second, value), oldest first.
type Ring = VecDeque<(u32, f32)>;

/// The recent past of every target.
#[derive(Debug)]
pub struct History {
    targets: HashMap<Arc<str>, HashMap<String, Ring>>,
    /// The second of the latest sample.
    now: u32,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History { targets: HashMap::new(), now: 0 }
    }

    /// The second of the latest sample (seconds since the history began).
    pub fn now(&self) -> u32 {
        self.now
    }

    /// Points kept per series, so that every target's series fit in [`MAX_POINTS`].
    fn capacity(targets: usize) -> usize {
        let per_target = MAX_POINTS / targets.max(1) / MAX_SERIES_PER_TARGET;
        per_target.clamp(60, MAX_WINDOW_SECS as usize + 1)
    }

    /// Records every target's plotted series at second `at` (a counter without a rate yet, an
    /// info or a histogram is skipped). Targets gone from the fleet are forgotten.
    pub fn record(&mut self, fleet: &FleetSnapshot, at: u32) {
        self.now = at;
        let cap = Self::capacity(fleet.targets.len());
        self.targets.retain(|name, _| fleet.get(name).is_some());
        for t in &fleet.targets {
            let series = self.targets.entry(t.name.clone()).or_default();
            // Each key once per target and second (not once per pair of series).
            let keys: Vec<String> = t.series.iter().map(|s| key(&s)).collect();
            // Series gone from the target (an exited process) are forgotten with it.
            let live: std::collections::HashSet<&str> = keys.iter().map(String::as_str).collect();
            series.retain(|k, _| live.contains(k.as_str()));
            for (s, k) in t.series.iter().zip(keys) {
                let Some(v) = plotted(&s) else { continue };
                if !series.contains_key(&k) && series.len() >= MAX_SERIES_PER_TARGET {
                    continue;
                }
                let ring = series.entry(k).or_default();
                while ring.len() >= cap {
                    ring.pop_front();
                }
                ring.push_back((at, v as f32));
            }
        }
    }

    /// The points of `target`'s series `key` within the last `window` seconds, as (seconds
    /// before now, negative, value).
    pub fn points(&self, target: &TargetSnapshot, key: &str, window: u32) -> Vec<Point> {
        let Some(ring) = self.targets.get(&target.name).and_then(|s| s.get(key)) else { return Vec::new() };
        let from = self.now.saturating_sub(window);
        ring.iter()
            .filter(|(t, _)| *t >= from)
            .map(|&(t, v)| (f64::from(t) - f64::from(self.now), f64::from(v)))
            .collect()
    }

    /// How much `key` moved within the window: the sum of absolute changes between points.
    pub fn movement(&self, target: &TargetSnapshot, key: &str, window: u32) -> f64 {
        let p = self.points(target, key, window);
        p.windows(2).map(|w| (w[1].1 - w[0].1).abs()).sum()
    }

    /// Points held in total (for tests and the memory bound).
    pub fn len(&self) -> usize {
        self.targets.values().flat_map(|s| s.values()).map(VecDeque::len).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use telemon_fleet::{LabelSet, Protocol, Value};

    fn target(v: f64, rate: Option<f64>) -> TargetSnapshot {
        let mut t = TargetSnapshot::new("t", Protocol::Smon, vec![]);
        t.series = telemon_fleet::SeriesSet::from(vec![
            telemon_fleet::Series {
                family: Arc::from("g"),
                help: "",
                labels: LabelSet::new([("i", "0")]),
                kind: MetricKind::Gauge,
                value: Value::Number(v),
                rate: None,
            },
            telemon_fleet::Series {
                family: Arc::from("c_total"),
                help: "",
                labels: LabelSet::default(),
                kind: MetricKind::Counter,
                value: Value::Number(v * 10.0),
                rate,
            },
        ]);
        t
    }

    #[test]
    fn records_gauges_and_counter_rates_within_the_window() {
        let mut h = History::new();
        for s in 0..100u32 {
            let t = target(f64::from(s), (s > 0).then_some(10.0));
            h.record(&FleetSnapshot::from(vec![t]), s);
        }
        let t = target(0.0, None);
        let p = h.points(&t, "g{i=0}", 10);
        assert_eq!(p.len(), 11);
        assert_eq!(p.last(), Some(&(0.0, 99.0)));
        assert_eq!(p[0], (-10.0, 89.0));
        assert_eq!(h.points(&t, "c_total", 60).len(), 61);
        assert_eq!(h.movement(&t, "g{i=0}", 10), 10.0);
        // A target that leaves the fleet is forgotten.
        h.record(&FleetSnapshot::default(), 100);
        assert!(h.is_empty());
    }

    #[test]
    fn rings_are_bounded() {
        let mut h = History::new();
        for s in 0..5000u32 {
            h.record(&FleetSnapshot::from(vec![target(1.0, Some(1.0))]), s);
        }
        assert_eq!(h.len(), 2 * (MAX_WINDOW_SECS as usize + 1));
        assert!(History::capacity(10_000) >= 60);
    }
}
