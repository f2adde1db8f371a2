//! The fleet's recent past, in memory and bounded: per target, a ring per plotted series, sampled once a
//! second by a view (`telemon top`'s dashboard, the web view of `telemon serve`).
//!
//! What is kept of a series is what a chart plots: a counter's rate per second, any other number's value
//! (an info or a histogram is not kept). Each series has two tiers of `f32` points at implicit times (a
//! missing second is a `NaN` gap, so no timestamp is stored):
//!
//! | tier | step | points | span |
//! |---|---|---|---|
//! | fine | 1 s ([`FINE_STEP`]) | [`FINE_POINTS`] = 600 | the last 10 minutes |
//! | coarse | 10 s ([`COARSE_STEP`], the mean of the step's points) | [`COARSE_POINTS`] = 360 | the last hour |
//!
//! A full series costs [`BYTES_PER_SERIES`] = about 4,100 bytes: 960 points of 4 bytes (3,840), its ring's
//! fields and its key (a `family{k=v}` string) in the hash table's entry; the unit test
//! `memory_per_series_is_as_documented` computes it from the allocations. Bounds: a target keeps at most
//! [`MAX_SERIES_PER_TARGET`] series, and once the fleet's series would hold more than [`MAX_POINTS`] points
//! (16 MiB) every ring shrinks in proportion, down to [`MIN_FINE_POINTS`] seconds and
//! [`MIN_COARSE_POINTS`] steps (so 4,369 full series fit, and 1,000 sys161 targets' 11,000 series keep
//! about 4 minutes at 1 s and 23 minutes at 10 s).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use telemon_fleet::model::{FleetSnapshot, MetricKind, SeriesRef, TargetSnapshot};
use telemon_fleet::series::Schema;

/// The fine tier's step, in seconds.
pub const FINE_STEP: u32 = 1;
/// The fine tier's points per series at full size (10 minutes).
pub const FINE_POINTS: usize = 600;
/// The coarse tier's step, in seconds.
pub const COARSE_STEP: u32 = 10;
/// The coarse tier's points per series at full size (1 hour).
pub const COARSE_POINTS: usize = 360;
/// The fewest fine points a series keeps however large the fleet (1 minute).
pub const MIN_FINE_POINTS: usize = 60;
/// The fewest coarse points a series keeps however large the fleet (6 minutes).
pub const MIN_COARSE_POINTS: usize = 36;
/// The longest time window kept, in seconds.
pub const MAX_WINDOW_SECS: u32 = COARSE_STEP * COARSE_POINTS as u32;
/// The most series remembered per target.
pub const MAX_SERIES_PER_TARGET: usize = 128;
/// The points the whole fleet's rings hold before they shrink (4M `f32`: 16 MiB).
pub const MAX_POINTS: usize = 4 << 20;
/// The memory of one series at full size, its key and table entry included (see the module's docs).
pub const BYTES_PER_SERIES: usize = 4100;

/// A series' identity inside one target: the family and its labels, as `family{k=v,...}`.
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

/// The first character of a view's own derived series' keys (see [`History::put`]), which no family
/// name starts with.
pub const DERIVED: char = '=';

/// One point: seconds relative to the latest sample (0 or negative), and the value.
pub type Point = (f64, f64);

/// What a chart plots of a series: a counter's rate, anything else's value.
pub fn plotted(s: &SeriesRef) -> Option<f64> {
    match s.kind() {
        MetricKind::Counter => s.rate(),
        MetricKind::Gauge => s.number(),
        MetricKind::Info | MetricKind::Histogram => None,
    }
}

/// The ring sizes in force: full, or shrunk for a large fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Fine points per series.
    pub fine: usize,
    /// Coarse points per series.
    pub coarse: usize,
}

impl Shape {
    /// The shape for a fleet of `series` series in all: full while they fit in [`MAX_POINTS`], else
    /// shrunk in proportion (never below the minimums).
    pub fn for_series(series: usize) -> Shape {
        let full = FINE_POINTS + COARSE_POINTS;
        if series.saturating_mul(full) <= MAX_POINTS {
            return Shape { fine: FINE_POINTS, coarse: COARSE_POINTS };
        }
        let scale = |n: usize| (n as u128 * MAX_POINTS as u128 / (series as u128 * full as u128)) as usize;
        Shape {
            fine: scale(FINE_POINTS).max(MIN_FINE_POINTS),
            coarse: scale(COARSE_POINTS).max(MIN_COARSE_POINTS),
        }
    }
}

/// One tier: values at consecutive steps, the newest at step `last`.
#[derive(Debug, Default)]
struct Tier {
    values: VecDeque<f32>,
    last: u32,
}

impl Tier {
    /// Puts `v` at step `at` (gaps since the last step become `NaN`); an older step is ignored, the same
    /// step replaced.
    fn put(&mut self, at: u32, v: f32, cap: usize) {
        let cap = cap.max(1);
        if self.values.capacity() < cap {
            // Exactly `cap` (growing by doubling would take 1,024 places for 600 points).
            self.values.reserve_exact(cap - self.values.len());
        }
        if self.values.is_empty() {
            self.values.push_back(v);
        } else if at == self.last {
            if let Some(b) = self.values.back_mut() {
                *b = v;
            }
        } else if at > self.last {
            let gap = (at - self.last - 1) as usize;
            if gap + 1 >= cap {
                self.values.clear();
            } else {
                let room = self.values.len() + gap + 1;
                self.values.drain(..room.saturating_sub(cap).min(self.values.len()));
                self.values.extend(std::iter::repeat_n(f32::NAN, gap));
            }
            self.values.push_back(v);
        } else {
            return;
        }
        self.last = at;
    }

    /// `(step, value)` of every point that is not a gap, oldest first.
    fn iter(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        let first = self.last.wrapping_sub(self.values.len().saturating_sub(1) as u32);
        self.values
            .iter()
            .enumerate()
            .map(move |(i, &v)| (first.wrapping_add(i as u32), v))
            .filter(|p| !p.1.is_nan())
    }

    /// The first step held.
    fn first(&self) -> Option<u32> {
        (!self.values.is_empty()).then(|| self.last - (self.values.len() as u32 - 1))
    }

    fn bytes(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<f32>()
    }
}

/// One series' past: the fine tier, the coarse tier and the coarse step being summed.
#[derive(Debug, Default)]
struct Ring {
    fine: Tier,
    coarse: Tier,
    /// The coarse step being summed, its sum and its count of points.
    open: Option<(u32, f32, u32)>,
}

impl Ring {
    fn put(&mut self, at: u32, v: f32, shape: Shape) {
        self.fine.put(at / FINE_STEP, v, shape.fine);
        let step = at / COARSE_STEP;
        self.open = match self.open {
            Some((s, sum, n)) if s == step => Some((s, sum + v, n + 1)),
            Some((s, sum, n)) => {
                self.coarse.put(s, sum / n as f32, shape.coarse);
                Some((step, v, 1))
            }
            None => Some((step, v, 1)),
        };
    }

    /// Shrinks to `shape` (a fleet that grew).
    fn fit(&mut self, shape: Shape) {
        for (tier, cap) in [(&mut self.fine, shape.fine), (&mut self.coarse, shape.coarse)] {
            if tier.values.len() > cap {
                tier.values.drain(..tier.values.len() - cap);
                tier.values.shrink_to(cap);
            }
        }
    }

    /// The points of the last `window` seconds before `now`, as (second, value), oldest first: the
    /// fine tier's, and before it the coarse tier's (each at the middle of its step).
    fn points(&self, now: u32, window: u32) -> Vec<(u32, f32)> {
        let from = now.saturating_sub(window);
        let fine_from = self.fine.first().map_or(u32::MAX, |f| f * FINE_STEP);
        let mut out: Vec<(u32, f32)> = self
            .coarse
            .iter()
            .map(|(s, v)| (s * COARSE_STEP + COARSE_STEP / 2, v))
            .filter(|&(t, _)| t >= from && t < fine_from)
            .collect();
        out.extend(self.fine.iter().map(|(s, v)| (s * FINE_STEP, v)).filter(|&(t, _)| t >= from));
        out
    }

    fn len(&self) -> usize {
        self.fine.values.len() + self.coarse.values.len()
    }
}

/// One target's rings, and the keys of its series as last recorded.
#[derive(Debug, Default)]
struct Rings {
    rings: HashMap<Arc<str>, Ring>,
    /// The schema of the series set last recorded whole, and its series' keys in order: while a
    /// target publishes the same series (the same schema), its keys are not built again.
    keys: Option<(Arc<Schema>, Vec<Arc<str>>)>,
}

/// The recent past of every target.
#[derive(Debug, Default)]
pub struct History {
    targets: HashMap<Arc<str>, Rings>,
    /// The second of the latest sample.
    now: u32,
    shape: Option<Shape>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// The second of the latest sample (seconds since the history began).
    pub fn now(&self) -> u32 {
        self.now
    }

    /// The ring sizes in force.
    pub fn shape(&self) -> Shape {
        self.shape.unwrap_or_else(|| Shape::for_series(0))
    }

    /// Records every target's plotted series at second `at` (a counter without a rate yet, an info or a
    /// histogram is skipped). Targets gone from the fleet, and series gone from their target, are
    /// forgotten. The same as [`History::begin`] with every target's series, then
    /// [`History::record_target`] for each target.
    pub fn record(&mut self, fleet: &FleetSnapshot, at: u32) {
        let total: usize = fleet.targets.iter().map(|t| t.series.len().min(MAX_SERIES_PER_TARGET)).sum();
        self.begin(fleet, at, total);
        for t in &fleet.targets {
            self.record_target(t);
        }
    }

    /// Starts the sample of second `at` for a view that records only some series (those it shows):
    /// forgets the targets gone from `fleet` and the series with no point in the last
    /// [`FINE_POINTS`] seconds, and sizes the rings for `series` series in all (or for those held,
    /// if more). Then call [`History::record_target`] and [`History::put`] for what is kept.
    pub fn begin(&mut self, fleet: &FleetSnapshot, at: u32, series: usize) {
        self.now = at;
        let stale = at.saturating_sub(FINE_POINTS as u32 * FINE_STEP);
        self.targets.retain(|name, t| {
            t.rings.retain(|_, r| r.fine.last * FINE_STEP >= stale);
            !t.rings.is_empty() && fleet.get(name).is_some()
        });
        let shape = Shape::for_series(series.max(self.series()));
        let shrunk =
            self.shape.is_some_and(|s| s != shape && (shape.fine < s.fine || shape.coarse < s.coarse));
        self.shape = Some(shape);
        if shrunk {
            self.targets.values_mut().flat_map(|t| t.rings.values_mut()).for_each(|r| r.fit(shape));
        }
    }

    /// Forgets every target for which `keep` is false (a view that stopped showing them).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.targets.retain(|name, _| keep(name));
    }

    /// Records every plotted series of `t` at the second [`History::begin`] started (forgetting those
    /// gone from it, but not the ones [`History::put`] keeps under a [`DERIVED`] key).
    pub fn record_target(&mut self, t: &TargetSnapshot) {
        let (at, shape) = (self.now, self.shape());
        let target = self.targets.entry(t.name.clone()).or_default();
        let schema = t.series.schema();
        if !target.keys.as_ref().is_some_and(|(s, _)| Arc::ptr_eq(s, schema)) {
            // Another set of series: their keys, and the rings of series gone are forgotten.
            let keys: Vec<Arc<str>> = t.series.iter().map(|s| Arc::from(key(&s))).collect();
            let live: HashSet<&str> = keys.iter().map(|k| &**k).collect();
            target.rings.retain(|k, _| k.starts_with(DERIVED) || live.contains(&**k));
            target.keys = Some((schema.clone(), keys));
        }
        let Rings { rings, keys: Some((_, keys)) } = target else { return };
        for (s, k) in t.series.iter().zip(keys.iter()) {
            let Some(v) = plotted(&s) else { continue };
            if let Some(ring) = rings.get_mut(&**k) {
                ring.put(at, v as f32, shape);
            } else if rings.len() < MAX_SERIES_PER_TARGET {
                rings.entry(k.clone()).or_default().put(at, v as f32, shape);
            }
        }
    }

    /// Records `v` for the series `key` of `target` at the latest sample's second: a view's own figure
    /// (a count, a ratio computed from several series) under a key starting with [`DERIVED`], or one
    /// series it shows without recording the whole target (under [`key`]). Call it after
    /// [`History::begin`] (or [`History::record`]); it is forgotten with its target, or once it has
    /// had no point for [`FINE_POINTS`] seconds.
    pub fn put(&mut self, target: &Arc<str>, key: &str, v: f64) {
        let (at, shape) = (self.now, self.shape());
        let t = match self.targets.get_mut(&**target) {
            Some(t) => t,
            None => self.targets.entry(target.clone()).or_default(),
        };
        if let Some(ring) = t.rings.get_mut(key) {
            ring.put(at, v as f32, shape);
        } else if t.rings.len() < MAX_SERIES_PER_TARGET {
            t.rings.entry(Arc::from(key)).or_default().put(at, v as f32, shape);
            if !key.starts_with(DERIVED) {
                // The next whole record checks that it is one of the target's series.
                t.keys = None;
            }
        }
    }

    /// The points of the series `key` of the target named `target` within the last `window` seconds,
    /// as (seconds before now, negative, value), oldest first.
    pub fn points_of(&self, target: &str, key: &str, window: u32) -> Vec<Point> {
        let Some(ring) = self.targets.get(target).and_then(|s| s.rings.get(key)) else { return Vec::new() };
        ring.points(self.now, window)
            .into_iter()
            .map(|(t, v)| (f64::from(t) - f64::from(self.now), f64::from(v)))
            .collect()
    }

    /// [`History::points_of`] for `target`.
    pub fn points(&self, target: &TargetSnapshot, key: &str, window: u32) -> Vec<Point> {
        self.points_of(&target.name, key, window)
    }

    /// The values of the series `key` of `target` at each of the last `seconds` seconds, oldest first
    /// and ending at [`History::now`], `None` where there is none (for a sparkline of fixed width).
    pub fn last_seconds(&self, target: &str, key: &str, seconds: u32) -> Vec<Option<f32>> {
        let mut out = vec![None; seconds as usize];
        if let Some(ring) = self.targets.get(target).and_then(|s| s.rings.get(key)) {
            // The first second of the span (before the history began when it is young).
            let from = i64::from(self.now) - i64::from(seconds) + 1;
            for (t, v) in ring.fine.iter() {
                let i = i64::from(t * FINE_STEP) - from;
                if (0..i64::from(seconds)).contains(&i) {
                    out[i as usize] = Some(v);
                }
            }
        }
        out
    }

    /// How much `key` moved within the window: the sum of absolute changes between points.
    pub fn movement(&self, target: &TargetSnapshot, key: &str, window: u32) -> f64 {
        let p = self.points(target, key, window);
        p.windows(2).map(|w| (w[1].1 - w[0].1).abs()).sum()
    }

    /// Points held in total (gaps included).
    pub fn len(&self) -> usize {
        self.targets.values().flat_map(|s| s.rings.values()).map(Ring::len).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Series held in total.
    pub fn series(&self) -> usize {
        self.targets.values().map(|t| t.rings.len()).sum()
    }

    /// The memory the history holds, in bytes, estimated from its allocations (rings, keys, tables;
    /// a key is shared by its ring and the target's list of keys).
    pub fn memory(&self) -> usize {
        let entry = std::mem::size_of::<(Arc<str>, Ring)>() + 1;
        let key = 2 * std::mem::size_of::<usize>();
        self.targets
            .values()
            .map(|t| {
                let listed =
                    t.keys.as_ref().map_or(0, |(_, k)| k.capacity() * std::mem::size_of::<Arc<str>>());
                std::mem::size_of::<(Arc<str>, Rings)>()
                    + t.rings.capacity() * entry
                    + listed
                    + t.rings
                        .iter()
                        .map(|(k, r)| key + k.len() + r.fine.bytes() + r.coarse.bytes())
                        .sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use telemon_fleet::model::{LabelSet, Protocol, Value};

    fn target(name: &str, v: f64, rate: Option<f64>) -> TargetSnapshot {
        let mut t = TargetSnapshot::new(name, Protocol::SMON, vec![]);
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
            let t = target("t", f64::from(s), (s > 0).then_some(10.0));
            h.record(&FleetSnapshot::from(vec![t]), s);
        }
        let t = target("t", 0.0, None);
        let p = h.points(&t, "g{i=0}", 10);
        assert_eq!(p.len(), 11);
        assert_eq!(p.last(), Some(&(0.0, 99.0)));
        assert_eq!(p[0], (-10.0, 89.0));
        assert_eq!(h.points(&t, "c_total", 60).len(), 61);
        assert_eq!(h.movement(&t, "g{i=0}", 10), 10.0);
        let last = h.last_seconds("t", "g{i=0}", 3);
        assert_eq!(last, [Some(97.0), Some(98.0), Some(99.0)]);
        assert_eq!(h.last_seconds("t", "g{i=0}", 200)[199], Some(99.0), "ends at now, however long");
        let name: Arc<str> = Arc::from("t");
        h.put(&name, "=busy", 0.5);
        h.put(&name, "busy", 0.5);
        h.record(&FleetSnapshot::from(vec![target("t", 100.0, None)]), 100);
        h.put(&name, "=busy", 0.25);
        assert_eq!(h.last_seconds("t", "=busy", 2), [Some(0.5), Some(0.25)], "kept across record");
        assert!(h.last_seconds("t", "busy", 2).iter().all(Option::is_none), "not derived: gone with record");
        // A target that leaves the fleet is forgotten.
        h.record(&FleetSnapshot::default(), 101);
        assert!(h.is_empty());
    }

    #[test]
    fn a_view_records_only_what_it_shows_and_forgets_what_it_stopped_showing() {
        let mut h = History::new();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let fleet =
            |s: u32| FleetSnapshot::from(vec![target("a", f64::from(s), None), target("b", 1.0, None)]);
        // Second 0..10: all of `a`, one figure of `b`.
        for s in 0..10u32 {
            h.begin(&fleet(s), s, 3);
            h.record_target(&fleet(s).targets[0]);
            h.put(&b, "g{i=0}", 7.0);
        }
        assert_eq!(h.series(), 2, "a's gauge (its counter has no rate yet) and b's figure");
        assert_eq!(h.last_seconds("b", "g{i=0}", 2), [Some(7.0), Some(7.0)]);
        assert_eq!(h.last_seconds("a", "g{i=0}", 1), [Some(9.0)]);
        // From then on only `b`'s figure: `a`'s rings keep their past, then go once it is older than
        // the fine tier.
        for s in 10..=(9 + FINE_POINTS as u32) {
            h.begin(&fleet(s), s, 1);
            h.put(&b, "g{i=0}", 7.0);
        }
        assert_eq!(h.points_of("a", "g{i=0}", 3600).len(), 10);
        h.begin(&fleet(FINE_POINTS as u32 + 10), FINE_POINTS as u32 + 10, 1);
        assert_eq!(h.series(), 1, "a's rings had no point for {FINE_POINTS} s");
        assert!(h.points_of("a", "g{i=0}", 3600).is_empty());
        h.put(&a, "=x", 1.0);
        assert_eq!(h.series(), 2, "put starts a target's rings");
        h.retain(|name| name == "a");
        assert_eq!(h.series(), 1);
    }

    #[test]
    fn missing_seconds_are_gaps_and_older_points_come_from_the_coarse_tier() {
        let mut h = History::new();
        for s in (0..2000u32).filter(|s| !(1990..1995).contains(s)) {
            h.record(&FleetSnapshot::from(vec![target("t", f64::from(s), None)]), s);
        }
        let last = h.last_seconds("t", "g{i=0}", 12);
        assert_eq!(last[0], Some(1988.0));
        assert_eq!(&last[2..7], [None; 5]);
        let p = h.points_of("t", "g{i=0}", 3600);
        // 600 fine seconds minus the 5 missing, and the 10-second means before them.
        let fine: Vec<_> = p.iter().filter(|(t, _)| *t >= -599.0).collect();
        assert_eq!(fine.len(), 595);
        let coarse: Vec<_> = p.iter().filter(|(t, _)| *t < -599.0).collect();
        assert_eq!(coarse.len(), 140, "seconds 0..1400 in steps of 10");
        assert_eq!(*coarse[0], (-1999.0 + 5.0, 4.5), "the mean of seconds 0..=9 at the step's middle");
        assert!(p.windows(2).all(|w| w[0].0 < w[1].0), "oldest first");
    }

    #[test]
    fn rings_are_bounded_and_shrink_for_a_large_fleet() {
        let mut h = History::new();
        for s in 0..5000u32 {
            h.record(&FleetSnapshot::from(vec![target("t", 1.0, Some(1.0))]), s);
        }
        assert_eq!(h.len(), 2 * (FINE_POINTS + COARSE_POINTS));
        assert_eq!(Shape::for_series(4000), Shape { fine: FINE_POINTS, coarse: COARSE_POINTS });
        let big = Shape::for_series(11_000);
        assert!(
            big.fine >= 230 && big.coarse >= 140 && big.fine * 11_000 + big.coarse * 11_000 <= MAX_POINTS
        );
        assert_eq!(
            Shape::for_series(usize::MAX / 2),
            Shape { fine: MIN_FINE_POINTS, coarse: MIN_COARSE_POINTS }
        );
        // A fleet that grows shrinks the rings already full.
        let names: Vec<String> = (0..3000).map(|i| format!("t{i:04}")).collect();
        let mut fleet: Vec<TargetSnapshot> = vec![target("t", 1.0, Some(1.0))];
        fleet.extend(names.iter().map(|n| target(n, 1.0, Some(1.0))));
        fleet.sort_by(|a, b| a.name.cmp(&b.name));
        h.record(&FleetSnapshot::from(fleet), 5000);
        let shape = h.shape();
        assert!(shape.fine < FINE_POINTS);
        assert!(h.points_of("t", "g{i=0}", 3600).len() <= shape.fine + shape.coarse);
        assert!(h.len() <= MAX_POINTS);
    }

    #[test]
    fn memory_per_series_is_as_documented() {
        // 1,000 targets of two full series each, with keys as long as the fleet's usual ones (~40 bytes).
        let mut h = History::new();
        let names: Vec<String> = (0..1000).map(|i| format!("target{i:04}")).collect();
        let mut fleet = Vec::new();
        for n in &names {
            let mut t = TargetSnapshot::new(n.as_str(), Protocol::SMON, vec![]);
            t.series = telemon_fleet::SeriesSet::from(vec![
                telemon_fleet::Series {
                    family: Arc::from("sys161_kernel_instructions_total"),
                    help: "",
                    labels: LabelSet::default(),
                    kind: MetricKind::Gauge,
                    value: Value::Number(1.0),
                    rate: None,
                },
                telemon_fleet::Series {
                    family: Arc::from("dyalog_threads"),
                    help: "",
                    labels: LabelSet::new([("state", "suspended")]),
                    kind: MetricKind::Gauge,
                    value: Value::Number(1.0),
                    rate: None,
                },
            ]);
            fleet.push(t);
        }
        let fleet = FleetSnapshot::from(fleet);
        // Every 10 s for an hour fills both tiers (the fine one with gaps, which take their place too).
        for s in (0..=3700u32).step_by(10) {
            h.record(&fleet, s);
        }
        assert_eq!(h.series(), 2000);
        assert_eq!(h.len(), 2000 * (FINE_POINTS + COARSE_POINTS));
        let per_series = h.memory() / h.series();
        println!("history: {per_series} bytes per series");
        let points = (FINE_POINTS + COARSE_POINTS) * std::mem::size_of::<f32>();
        assert!(per_series >= points);
        assert!(
            per_series.abs_diff(BYTES_PER_SERIES) <= BYTES_PER_SERIES / 20,
            "{per_series} bytes per series, documented {BYTES_PER_SERIES}"
        );
    }
}
