//! The per-target series cache: current values, a cap on the number of series, counter rates,
//! and the unwrapping of 32-bit wrapping counters into monotonic 64-bit ones.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::model::{MetricKind, Series, Value};

/// Default per-target cap on series.
pub const DEFAULT_SERIES_LIMIT: usize = 10_000;

/// The labels of one series, shared between the store and every snapshot that holds it.
pub type LabelSet = Arc<[(Arc<str>, Arc<str>)]>;

#[derive(Debug)]
struct Entry {
    series: Series,
    /// The counter's previous value and when it was set, for the rate.
    last: Option<(f64, Instant)>,
    /// The round it was last set in (see [`SeriesStore::begin_round`]).
    seen: u64,
}

/// One target's current series, bounded by a series limit.
///
/// Updating a series that exists allocates nothing: the store is indexed by family, then by
/// labels, and looked up with borrowed keys.
#[derive(Debug)]
pub struct SeriesStore {
    limit: usize,
    families: BTreeMap<Arc<str>, BTreeMap<LabelSet, Entry>>,
    len: usize,
    dropped: u64,
    round: u64,
}

impl SeriesStore {
    /// An empty store holding at most `limit` series.
    pub fn new(limit: usize) -> Self {
        SeriesStore { limit, families: BTreeMap::new(), len: 0, dropped: 0, round: 0 }
    }

    /// The most series this store holds.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Series refused so far because the store was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Number of series held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the store holds no series.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Starts a new round: every series set from now on is marked with it, so that
    /// [`SeriesStore::sweep_family`] can drop the ones a report no longer lists.
    pub fn begin_round(&mut self) -> u64 {
        self.round += 1;
        self.round
    }

    /// Sets a series' value as observed at `now`. For counters, the rate is computed from the
    /// previous value; a decrease is a reset (rate `None` until the next update). A new series
    /// beyond the limit is dropped and counted; returns whether the value was stored.
    pub fn set(
        &mut self,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(Arc<str>, Arc<str>)],
        value: Value,
        now: Instant,
    ) -> bool {
        let round = self.round;
        if let Some(e) = self.families.get_mut(family).and_then(|f| f.get_mut(labels)) {
            let rate = match (kind, value.as_number(), e.last) {
                (MetricKind::Counter, Some(v), Some((prev, at))) if v >= prev => {
                    let dt = now.saturating_duration_since(at).as_secs_f64();
                    (dt > 0.0).then(|| (v - prev) / dt).or(e.series.rate)
                }
                _ => None,
            };
            e.last = value.as_number().map(|v| (v, now));
            e.series.kind = kind;
            e.series.value = value;
            e.series.rate = rate;
            e.seen = round;
            return true;
        }
        if self.len >= self.limit {
            self.dropped = self.dropped.saturating_add(1);
            return false;
        }
        let last = value.as_number().map(|v| (v, now));
        let labels: LabelSet = Arc::from(labels);
        let fam = match self.families.get_key_value(family) {
            Some((k, _)) => k.clone(),
            None => Arc::from(family),
        };
        let series = Series { family: fam.clone(), help, labels: labels.clone(), kind, value, rate: None };
        self.families.entry(fam).or_default().insert(labels, Entry { series, last, seen: round });
        self.len += 1;
        true
    }

    /// Removes the series of `family` with exactly `labels`, if present.
    pub fn remove(&mut self, family: &str, labels: &[(Arc<str>, Arc<str>)]) {
        if let Some(f) = self.families.get_mut(family) {
            if f.remove(labels).is_some() {
                self.len -= 1;
            }
        }
    }

    /// Removes every series of `family` whose labels do not satisfy `keep` (e.g. processes that
    /// exited since the last report).
    pub fn retain_family(&mut self, family: &str, mut keep: impl FnMut(&[(Arc<str>, Arc<str>)]) -> bool) {
        if let Some(f) = self.families.get_mut(family) {
            let before = f.len();
            f.retain(|labels, _| keep(labels));
            self.len -= before - f.len();
        }
    }

    /// Removes every series of `family` not set since `round` began.
    pub fn sweep_family(&mut self, family: &str, round: u64) {
        if let Some(f) = self.families.get_mut(family) {
            let before = f.len();
            f.retain(|_, e| e.seen >= round);
            self.len -= before - f.len();
        }
    }

    /// Forgets every series (the peer restarted or went away): the next values start afresh,
    /// with no rate.
    pub fn clear(&mut self) {
        self.families.clear();
        self.len = 0;
    }

    /// The current series, sorted by family then labels, for a [`super::model::TargetSnapshot`].
    pub fn to_series(&self) -> Arc<[Series]> {
        self.families.values().flat_map(|f| f.values()).map(|e| e.series.clone()).collect()
    }
}

/// Unwraps a 32-bit counter that wraps around (sys161's) into a monotonic 64-bit one.
///
/// Within one connection a decrease is a wrap; a new connection (a peer restart) starts a new
/// `Unwrap32` so the restart shows as a real reset.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unwrap32 {
    last: Option<u32>,
    high: u64,
}

impl Unwrap32 {
    /// The 64-bit value of the next 32-bit reading.
    pub fn next(&mut self, v: u32) -> u64 {
        if let Some(last) = self.last {
            if v < last {
                self.high = self.high.wrapping_add(1 << 32);
            }
        }
        self.last = Some(v);
        self.high | u64::from(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fam(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    const F: &str = "x_total";

    #[test]
    fn counter_rate_from_the_last_two_updates_and_none_after_a_reset() {
        let mut st = SeriesStore::new(10);
        let f = F;
        let t0 = Instant::now();
        assert!(st.set(f, "h", MetricKind::Counter, &[], Value::Number(10.0), t0));
        assert_eq!(st.to_series()[0].rate, None);
        st.set(f, "h", MetricKind::Counter, &[], Value::Number(30.0), t0 + Duration::from_secs(2));
        assert_eq!(st.to_series()[0].rate, Some(10.0));
        st.set(f, "h", MetricKind::Counter, &[], Value::Number(5.0), t0 + Duration::from_secs(3));
        assert_eq!(st.to_series()[0].rate, None, "a decrease is a reset");
        st.set(f, "h", MetricKind::Counter, &[], Value::Number(9.0), t0 + Duration::from_secs(5));
        assert_eq!(st.to_series()[0].rate, Some(2.0));
    }

    #[test]
    fn gauges_have_no_rate() {
        let mut st = SeriesStore::new(10);
        let f = "g";
        let t0 = Instant::now();
        st.set(f, "h", MetricKind::Gauge, &[], Value::Number(1.0), t0);
        st.set(f, "h", MetricKind::Gauge, &[], Value::Number(3.0), t0 + Duration::from_secs(1));
        assert_eq!(st.to_series()[0].rate, None);
        assert_eq!(st.to_series()[0].value, Value::Number(3.0));
    }

    #[test]
    fn new_series_beyond_the_limit_are_dropped_and_counted() {
        let mut st = SeriesStore::new(2);
        let f = "g";
        let now = Instant::now();
        for i in 0..5 {
            let l = vec![(fam("i"), fam(&i.to_string()))];
            st.set(f, "h", MetricKind::Gauge, &l, Value::Number(1.0), now);
        }
        assert_eq!(st.len(), 2);
        assert_eq!(st.dropped(), 3);
        // An existing series still updates at the limit.
        assert!(st.set(f, "h", MetricKind::Gauge, &[(fam("i"), fam("0"))], Value::Number(7.0), now));
        st.retain_family("g", |l| &*l[0].1 != "0");
        assert_eq!(st.len(), 1);
    }

    #[test]
    fn a_sweep_drops_what_a_round_did_not_set() {
        let mut st = SeriesStore::new(10);
        let now = Instant::now();
        let l = |i: &str| [(fam("pid"), fam(i))];
        st.begin_round();
        for i in ["1", "2", "3"] {
            st.set("p", "h", MetricKind::Gauge, &l(i), Value::Number(1.0), now);
        }
        st.set("other", "h", MetricKind::Gauge, &[], Value::Number(1.0), now);
        let round = st.begin_round();
        st.set("p", "h", MetricKind::Gauge, &l("2"), Value::Number(2.0), now);
        st.sweep_family("p", round);
        let left: Vec<String> = st
            .to_series()
            .iter()
            .map(|s| format!("{}{:?}", s.family, s.labels.first().map(|l| &*l.1)))
            .collect();
        assert_eq!(left, ["otherNone", "pSome(\"2\")"]);
        assert_eq!(st.len(), 2);
    }

    #[test]
    fn unwrap32_across_a_wrap_and_a_fresh_start_on_reconnect() {
        let mut u = Unwrap32::default();
        assert_eq!(u.next(u32::MAX - 5), u64::from(u32::MAX - 5));
        assert_eq!(u.next(u32::MAX), u64::from(u32::MAX));
        assert_eq!(u.next(3), (1u64 << 32) + 3);
        assert_eq!(u.next(3), (1u64 << 32) + 3);
        assert_eq!(u.next(1), (2u64 << 32) + 1);
        let mut fresh = Unwrap32::default();
        assert_eq!(fresh.next(1), 1);
    }
}
