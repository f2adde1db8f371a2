//! The fleet's recent past, in memory and bounded: per target, a ring per plotted series, sampled once a
//! second by a view (`telemon top`'s dashboard, the web view of `telemon serve`).
//!
//! What is kept of a series is what a chart plots: a counter's rate per second, any other number's value,
//! and of a histogram the quantiles [`QUANTILES`] of the observations it gained since its last change
//! (an info is not kept). Each kept line has two tiers of `f32` points at implicit times (a missing
//! second is a `NaN` gap, so no timestamp is stored):
//!
//! | tier | step | points | span |
//! |---|---|---|---|
//! | fine | 1 s ([`FINE_STEP`]) | [`FINE_POINTS`] = 600 | the last 10 minutes |
//! | coarse | 10 s ([`COARSE_STEP`], the mean of the step's points) | [`COARSE_POINTS`] = 360 | the last hour |
//!
//! A full series costs [`BYTES_PER_SERIES`] = about 4,100 bytes: 960 points of 4 bytes (3,840), its ring's
//! fields and its key (a `family{k=v}` string) in the hash table's entry; the unit test
//! `memory_per_series_is_as_documented` computes it from the allocations. A histogram is three series
//! (one per quantile).
//!
//! Bounds, fleet-wide (a target is recorded whole, however many series it has): once the series held
//! would hold more than [`MAX_POINTS`] points (16 MiB) every ring shrinks in proportion, down to
//! [`MIN_FINE_POINTS`] seconds and [`MIN_COARSE_POINTS`] steps (so 4,369 full series fit, and 1,000
//! sys161 targets' 11,000 series keep about 4 minutes at 1 s and 23 minutes at 10 s); and at most
//! [`MAX_SERIES`] series are held (43,690: [`MAX_POINTS`] at the smallest rings), of which series recorded
//! in the [`Priority::Background`] take at most [`BACKGROUND_SERIES`], so that what is shown always
//! finds room. A series refused for lack of room is said by [`History::bounded`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use telemon_fleet::model::{FleetSnapshot, MetricKind, SeriesRef, TargetSnapshot, ValueRef};
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
/// The points the whole fleet's rings hold before they shrink (4M `f32`: 16 MiB).
pub const MAX_POINTS: usize = 4 << 20;
/// The most series held, fleet-wide: as many as [`MAX_POINTS`] holds at the smallest rings.
pub const MAX_SERIES: usize = MAX_POINTS / (MIN_FINE_POINTS + MIN_COARSE_POINTS);
/// The most series held that were recorded in the [`Priority::Background`]: three quarters of
/// [`MAX_SERIES`], so that a quarter is always left for what is shown.
pub const BACKGROUND_SERIES: usize = MAX_SERIES / 4 * 3;
/// The quantiles kept of a histogram, and the names that end their keys (see [`quantile_key`]).
pub const QUANTILES: [(f64, &str); 3] = [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")];
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

/// The key of the quantile `QUANTILES[i]` of the histogram keyed `key`: `key p50`. No series' key
/// ends with a space and a quantile's name (a key ends with its family's name or with `}`).
pub fn quantile_key(key: &str, i: usize) -> String {
    format!("{key} {}", QUANTILES[i % QUANTILES.len()].1)
}

/// The histogram's key of a quantile's key (see [`quantile_key`]), or `None` for another key.
fn histogram_of(key: &str) -> Option<&str> {
    let (base, q) = key.rsplit_once(' ')?;
    QUANTILES.iter().any(|(_, name)| *name == q).then_some(base)
}

/// The quantiles [`QUANTILES`] of the observations a histogram gained from `before` to `after`, each
/// `(cumulative counts per upper bound in bounds, count of all observations)`, interpolated within
/// a bucket as Prometheus' `histogram_quantile` does: the first bucket starts at 0 (at its bound when
/// that is not above 0), and a quantile in the `+Inf` bucket is the highest finite bound. `None` when it
/// gained nothing, went back (a reset), or the counts do not match the bounds.
pub fn quantiles(bounds: &[f64], before: (&[u64], u64), after: (&[u64], u64)) -> Option<[f64; 3]> {
    let ((c0, n0), (c1, n1)) = (before, after);
    if c0.len() != bounds.len() || c1.len() != bounds.len() || n1 <= n0 {
        return None;
    }
    let gained: Vec<u64> = c0.iter().zip(c1).map(|(a, b)| b.checked_sub(*a)).collect::<Option<_>>()?;
    let total = (n1 - n0) as f64;
    let mut out = [0.0; 3];
    for (o, (q, _)) in out.iter_mut().zip(QUANTILES) {
        let rank = q * total;
        *o = match gained.iter().position(|&c| c as f64 >= rank) {
            Some(i) => {
                let upper = bounds[i];
                let lower = match i {
                    0 if upper > 0.0 => 0.0,
                    0 => upper,
                    _ => bounds[i - 1],
                };
                let below = if i == 0 { 0.0 } else { gained[i - 1] as f64 };
                // `below < rank <= gained[i]`: the first bucket that reaches the rank.
                lower + (upper - lower) * (rank - below) / (gained[i] as f64 - below)
            }
            None => *bounds.last()?,
        };
    }
    out.iter().all(|v| v.is_finite()).then_some(out)
}

/// Whose a whole target's series are, which decides how much of the fleet-wide bound they may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Shown now (a target's page, a dashboard): new series are kept while fewer than
    /// [`MAX_SERIES`] are held.
    Shown,
    /// Kept in case someone looks later (`web_history = "always"`): new series are kept while fewer
    /// than [`BACKGROUND_SERIES`] are held.
    Background,
}

impl Priority {
    fn limit(self) -> usize {
        match self {
            Priority::Shown => MAX_SERIES,
            Priority::Background => BACKGROUND_SERIES,
        }
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
    /// Each histogram's state at its last change, by its key.
    hists: HashMap<Arc<str>, HistState>,
    /// The second it was last recorded (whole, or a series of it).
    seen: u32,
    /// The second a series of it was last refused for lack of room.
    refused: Option<u32>,
}

/// A histogram at its last change: cumulative counts (shared with the snapshot it came from), the
/// count of all observations, and its quantiles' keys.
#[derive(Debug)]
struct HistState {
    counts: Arc<[u64]>,
    count: u64,
    keys: [Arc<str>; 3],
}

/// Puts `v` at second `at` into the ring `key` of `rings`, making the ring when fewer than `limit`
/// series are `held` in all (the new key made by `make`); `false` when there was no room.
fn put_in(
    rings: &mut HashMap<Arc<str>, Ring>,
    key: &str,
    make: impl FnOnce() -> Arc<str>,
    v: f64,
    (at, shape): (u32, Shape),
    held: &mut usize,
    limit: usize,
) -> bool {
    if let Some(ring) = rings.get_mut(key) {
        ring.put(at, v as f32, shape);
    } else if *held < limit {
        *held += 1;
        rings.entry(make()).or_default().put(at, v as f32, shape);
    } else {
        return false;
    }
    true
}

/// The recent past of every target.
#[derive(Debug, Default)]
pub struct History {
    targets: HashMap<Arc<str>, Rings>,
    /// The second of the latest sample.
    now: u32,
    shape: Option<Shape>,
    /// The series held in all, which [`MAX_SERIES`] bounds.
    held: usize,
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

    /// Records every target's plotted series at second `at`, as shown (a counter without a rate yet,
    /// or an info, is skipped). Targets gone from the fleet, and series gone from their target, are
    /// forgotten. The same as [`History::begin`] with every target's series, then
    /// [`History::record_target`] for each target.
    pub fn record(&mut self, fleet: &FleetSnapshot, at: u32) {
        let total: usize = fleet.targets.iter().map(|t| t.series.len()).sum();
        self.begin(fleet, at, total);
        for t in &fleet.targets {
            self.record_target(t, Priority::Shown);
        }
    }

    /// Starts the sample of second `at` for a view that records only some series (those it shows):
    /// forgets the targets gone from `fleet`, those not recorded since the last sample, and the
    /// series with no point in the last [`FINE_POINTS`] seconds, and sizes the rings for `series`
    /// series in all (or for those held, if more; at most [`MAX_SERIES`]). Then call
    /// [`History::record_target`] and [`History::put`] for what is kept.
    pub fn begin(&mut self, fleet: &FleetSnapshot, at: u32, series: usize) {
        self.now = at;
        let stale = at.saturating_sub(FINE_POINTS as u32 * FINE_STEP);
        self.targets.retain(|name, t| {
            t.rings.retain(|_, r| r.fine.last * FINE_STEP >= stale);
            // A target with no ring yet (a histogram seen once, every series refused) is kept while
            // it is recorded.
            (!t.rings.is_empty() || t.seen.saturating_add(1) >= at) && fleet.get(name).is_some()
        });
        self.count();
        let shape = Shape::for_series(series.max(self.held).min(MAX_SERIES));
        let shrunk =
            self.shape.is_some_and(|s| s != shape && (shape.fine < s.fine || shape.coarse < s.coarse));
        self.shape = Some(shape);
        if shrunk {
            self.targets.values_mut().flat_map(|t| t.rings.values_mut()).for_each(|r| r.fit(shape));
        }
    }

    /// Counts the series held again (after some were forgotten).
    fn count(&mut self) {
        self.held = self.targets.values().map(|t| t.rings.len()).sum();
    }

    /// Forgets every target for which `keep` is false (a view that stopped showing them).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.targets.retain(|name, _| keep(name));
        self.count();
    }

    /// Records every plotted series of `t`, and the quantiles of each histogram that changed, at the
    /// second [`History::begin`] started (forgetting those gone from it, but not the ones
    /// [`History::put`] keeps under a [`DERIVED`] key). A series not held yet is kept if there is room
    /// for `priority`; else it is refused, which [`History::bounded`] then says.
    pub fn record_target(&mut self, t: &TargetSnapshot, priority: Priority) {
        let now = (self.now, self.shape());
        let limit = priority.limit();
        let held = &mut self.held;
        let target = self.targets.entry(t.name.clone()).or_default();
        target.seen = now.0;
        let schema = t.series.schema();
        if !target.keys.as_ref().is_some_and(|(s, _)| Arc::ptr_eq(s, schema)) {
            // Another set of series: their keys, and the rings of series gone are forgotten.
            let keys: Vec<Arc<str>> = t.series.iter().map(|s| Arc::from(key(&s))).collect();
            let live: HashSet<&str> = keys.iter().map(|k| &**k).collect();
            let before = target.rings.len();
            target.rings.retain(|k, _| {
                k.starts_with(DERIVED)
                    || live.contains(&**k)
                    || histogram_of(k).is_some_and(|h| live.contains(h))
            });
            target.hists.retain(|k, _| live.contains(&**k));
            *held -= before - target.rings.len();
            target.keys = Some((schema.clone(), keys));
        }
        let Rings { rings, keys: Some((_, keys)), hists, refused, .. } = target else { return };
        let mut room = true;
        for (s, k) in t.series.iter().zip(keys.iter()) {
            if let Some(v) = plotted(&s) {
                room &= put_in(rings, k, || k.clone(), v, now, held, limit);
            } else if let ValueRef::Histogram(h) = s.value() {
                let Some(last) = hists.get_mut(&**k) else {
                    let keys = [0, 1, 2].map(|i| Arc::from(quantile_key(k, i)));
                    hists.insert(k.clone(), HistState { counts: h.counts.clone(), count: h.count, keys });
                    continue;
                };
                if h.count == last.count && Arc::ptr_eq(&h.counts, &last.counts) {
                    continue;
                }
                if let Some(q) = quantiles(&h.bounds, (&last.counts, last.count), (&h.counts, h.count)) {
                    for (v, k) in q.into_iter().zip(&last.keys) {
                        room &= put_in(rings, k, || k.clone(), v, now, held, limit);
                    }
                }
                (last.counts, last.count) = (h.counts.clone(), h.count);
            }
        }
        if !room {
            *refused = Some(now.0);
        }
    }

    /// Records `v` for the series `key` of `target` at the latest sample's second, as shown: a
    /// view's own figure (a count, a ratio computed from several series) under a key starting with
    /// [`DERIVED`], or one series it shows without recording the whole target (under [`key`]). Call
    /// it after [`History::begin`] (or [`History::record`]); it is forgotten with its target, or
    /// once it has had no point for [`FINE_POINTS`] seconds.
    pub fn put(&mut self, target: &Arc<str>, key: &str, v: f64) {
        let now = (self.now, self.shape());
        let t = match self.targets.get_mut(&**target) {
            Some(t) => t,
            None => self.targets.entry(target.clone()).or_default(),
        };
        t.seen = now.0;
        let held = self.held;
        if !put_in(&mut t.rings, key, || Arc::from(key), v, now, &mut self.held, MAX_SERIES) {
            t.refused = Some(now.0);
        } else if self.held > held && !key.starts_with(DERIVED) {
            // The next whole record checks that it is one of the target's series.
            t.keys = None;
        }
    }

    /// Whether a series of `target` was refused at the latest sample for lack of room (the
    /// fleet-wide bound [`MAX_SERIES`], or [`BACKGROUND_SERIES`] for its priority): its series with no
    /// points have none for that reason.
    pub fn bounded(&self, target: &str) -> bool {
        self.targets.get(target).is_some_and(|t| t.refused == Some(self.now))
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

    /// Series held in total (at most [`MAX_SERIES`]).
    pub fn series(&self) -> usize {
        self.held
    }

    /// The newest value of the series `key` of `target` within the fine tier (the last change of a
    /// histogram's quantile, say), if any.
    pub fn latest(&self, target: &str, key: &str) -> Option<f32> {
        let ring = self.targets.get(target)?.rings.get(key)?;
        ring.fine.values.iter().rev().copied().find(|v| !v.is_nan())
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
                // Its quantiles' keys are counted with their rings, its counts are the snapshot's.
                let hists = t.hists.capacity() * (std::mem::size_of::<(Arc<str>, HistState)>() + 1);
                std::mem::size_of::<(Arc<str>, Rings)>()
                    + t.rings.capacity() * entry
                    + listed
                    + hists
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
            h.record_target(&fleet(s).targets[0], Priority::Shown);
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

    /// A target of `n` gauges (`g{i=0}`... at 1.0).
    fn wide(name: &str, n: usize) -> TargetSnapshot {
        let mut t = TargetSnapshot::new(name, Protocol::SYSINFO, vec![]);
        t.series = telemon_fleet::SeriesSet::from(
            (0..n)
                .map(|i| telemon_fleet::Series {
                    family: Arc::from("g"),
                    help: "",
                    labels: LabelSet::new([("i", i.to_string())]),
                    kind: MetricKind::Gauge,
                    value: Value::Number(1.0),
                    rate: None,
                })
                .collect::<Vec<_>>(),
        );
        t
    }

    #[test]
    fn a_target_is_kept_whole_and_the_fleet_within_its_bound() {
        // One target of 300 series: all of them (a page shows every one).
        let mut h = History::new();
        h.record(&FleetSnapshot::from(vec![wide("vm", 300)]), 0);
        assert_eq!(h.series(), 300);
        assert_eq!(h.last_seconds("vm", "g{i=299}", 1), [Some(1.0)]);
        assert!(!h.bounded("vm"));

        // 150 such targets are more than the fleet-wide bound. In the background they take at most
        // their share, the first ones whole; the others are refused, and said so.
        let one = wide("t000", 300).series;
        let fleet = FleetSnapshot::from(
            (0..150)
                .map(|i| {
                    let mut t = TargetSnapshot::new(format!("t{i:03}").as_str(), Protocol::SYSINFO, vec![]);
                    t.series = one.clone();
                    t
                })
                .collect::<Vec<_>>(),
        );
        const { assert!(150 * 300 > MAX_SERIES) };
        let mut h = History::new();
        h.begin(&fleet, 0, 150 * 300);
        fleet.targets.iter().for_each(|t| h.record_target(t, Priority::Background));
        assert_eq!(h.series(), BACKGROUND_SERIES);
        assert!(!h.bounded("t000") && h.bounded("t149"));
        assert!(h.last_seconds("t149", "g{i=0}", 1)[0].is_none());
        // A page opened on the last target: what is shown is recorded first, and finds room.
        h.begin(&fleet, 1, 150 * 300);
        h.record_target(fleet.get("t149").unwrap(), Priority::Shown);
        fleet.targets.iter().for_each(|t| h.record_target(t, Priority::Background));
        assert_eq!(h.series(), BACKGROUND_SERIES + 300);
        assert!(!h.bounded("t149") && h.bounded("t148"));
        assert_eq!(h.last_seconds("t149", "g{i=299}", 1), [Some(1.0)]);
        // Everything shown: the whole bound, and no more points than the points' bound.
        h.record(&fleet, 2);
        assert_eq!(h.series(), MAX_SERIES);
        assert!(h.len() <= MAX_POINTS && h.bounded("t148") && !h.bounded("t149"));
        assert_eq!(h.series(), h.targets.values().map(|t| t.rings.len()).sum::<usize>(), "the count");
        // Forgotten targets give their room back.
        h.retain(|name| name == "t000");
        assert_eq!(h.series(), 300);
    }

    /// A target with one histogram of bounds 1, 2, 4 and these cumulative counts and count.
    fn histogram(counts: [u64; 3], count: u64) -> TargetSnapshot {
        let mut t = TargetSnapshot::new("vm", Protocol::SYSINFO, vec![]);
        t.series = telemon_fleet::SeriesSet::from(vec![telemon_fleet::Series {
            family: Arc::from("lat_seconds"),
            help: "",
            labels: LabelSet::default(),
            kind: MetricKind::Histogram,
            value: Value::Histogram {
                buckets: [1.0, 2.0, 4.0].into_iter().zip(counts).collect(),
                sum: 0.0,
                count,
            },
            rate: None,
        }]);
        t
    }

    #[test]
    fn histograms_are_kept_as_the_quantiles_of_what_they_gained() {
        let bounds = [1.0, 2.0, 4.0];
        // 50 observations up to 1, 40 in (1, 2], 10 in (2, 4].
        let q = quantiles(&bounds, (&[10, 10, 10], 10), (&[60, 100, 110], 110)).unwrap();
        assert_eq!(q, [1.0, 2.0, 2.0 + 2.0 * 9.0 / 10.0]);
        assert_eq!(quantiles(&bounds, (&[0; 3], 0), (&[0; 3], 5)), Some([4.0; 3]), "all in +Inf");
        assert_eq!(quantiles(&[-1.0, 1.0], (&[0; 2], 0), (&[4, 4], 4)), Some([-1.0; 3]));
        assert_eq!(quantiles(&bounds, (&[5; 3], 5), (&[5; 3], 5)), None, "nothing gained");
        assert_eq!(quantiles(&bounds, (&[5; 3], 5), (&[1; 3], 6)), None, "a reset");
        assert_eq!(quantiles(&bounds, (&[5; 3], 5), (&[6; 2], 6)), None, "other bounds");
        assert_eq!(quantiles(&[1.0, f64::INFINITY], (&[0; 2], 0), (&[0, 2], 2)), None, "not finite");

        let mut h = History::new();
        let fleet = |t: TargetSnapshot| FleetSnapshot::from(vec![t]);
        h.record(&fleet(histogram([0, 0, 0], 0)), 0);
        h.record(&fleet(histogram([50, 90, 100], 100)), 1);
        let p99 = quantile_key("lat_seconds", 2);
        assert_eq!(p99, "lat_seconds p99");
        assert_eq!(h.last_seconds("vm", &quantile_key("lat_seconds", 0), 1), [Some(1.0)]);
        assert_eq!(h.last_seconds("vm", &p99, 1), [Some(3.8)]);
        // No observation: no point (a gap), and the latest is the last change's.
        h.record(&fleet(histogram([50, 90, 100], 100)), 2);
        h.record(&fleet(histogram([50, 90, 100], 110)), 3);
        assert_eq!(h.last_seconds("vm", &p99, 3), [Some(3.8), None, Some(4.0)]);
        assert_eq!(h.latest("vm", &p99), Some(4.0));
        assert_eq!(h.series(), 3);
        // Its quantiles go with the histogram.
        h.record(&fleet(target("vm", 1.0, None)), 4);
        assert_eq!((h.series(), h.latest("vm", &p99)), (1, None));
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
