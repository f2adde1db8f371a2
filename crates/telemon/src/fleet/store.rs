//! The per-target series cache: current values, a cap on the number of series, counter rates,
//! and the unwrapping of 32-bit wrapping counters into monotonic 64-bit ones.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::model::{MetricKind, Series, Value};

/// Default per-target cap on series.
pub const DEFAULT_SERIES_LIMIT: usize = 10_000;

type Key = (Arc<str>, Vec<(Arc<str>, Arc<str>)>);

#[derive(Debug)]
struct Entry {
    series: Series,
    /// The counter's previous value and when it was set, for the rate.
    last: Option<(f64, Instant)>,
}

/// One target's current series, bounded by a series limit.
#[derive(Debug)]
pub struct SeriesStore {
    limit: usize,
    entries: BTreeMap<Key, Entry>,
    dropped: u64,
}

impl SeriesStore {
    /// An empty store holding at most `limit` series.
    pub fn new(limit: usize) -> Self {
        SeriesStore { limit, entries: BTreeMap::new(), dropped: 0 }
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
        self.entries.len()
    }

    /// Whether the store holds no series.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets a series' value as observed at `now`. For counters, the rate is computed from the
    /// previous value; a decrease is a reset (rate `None` until the next update). A new series
    /// beyond the limit is dropped and counted; returns whether the value was stored.
    pub fn set(
        &mut self,
        family: &Arc<str>,
        help: &'static str,
        kind: MetricKind,
        labels: Vec<(Arc<str>, Arc<str>)>,
        value: Value,
        now: Instant,
    ) -> bool {
        let key: Key = (family.clone(), labels);
        if let Some(e) = self.entries.get_mut(&key) {
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
            return true;
        }
        if self.entries.len() >= self.limit {
            self.dropped = self.dropped.saturating_add(1);
            return false;
        }
        let last = value.as_number().map(|v| (v, now));
        let series = Series { family: key.0.clone(), help, labels: key.1.clone(), kind, value, rate: None };
        self.entries.insert(key, Entry { series, last });
        true
    }

    /// Removes the series of `family` with exactly `labels`, if present.
    pub fn remove(&mut self, family: &str, labels: &[(Arc<str>, Arc<str>)]) {
        self.entries.remove(&(Arc::from(family), labels.to_vec()));
    }

    /// Removes every series of `family` whose labels do not satisfy `keep` (e.g. processes that
    /// exited since the last report).
    pub fn retain_family(&mut self, family: &str, mut keep: impl FnMut(&[(Arc<str>, Arc<str>)]) -> bool) {
        self.entries.retain(|(f, labels), _| &**f != family || keep(labels));
    }

    /// Forgets every series (the peer restarted or went away): the next values start afresh,
    /// with no rate.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The current series, sorted by family then labels, for a [`super::model::TargetSnapshot`].
    pub fn to_series(&self) -> Arc<[Series]> {
        self.entries.values().map(|e| e.series.clone()).collect()
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

    #[test]
    fn counter_rate_from_the_last_two_updates_and_none_after_a_reset() {
        let mut st = SeriesStore::new(10);
        let f = fam("x_total");
        let t0 = Instant::now();
        assert!(st.set(&f, "h", MetricKind::Counter, vec![], Value::Number(10.0), t0));
        assert_eq!(st.to_series()[0].rate, None);
        st.set(&f, "h", MetricKind::Counter, vec![], Value::Number(30.0), t0 + Duration::from_secs(2));
        assert_eq!(st.to_series()[0].rate, Some(10.0));
        st.set(&f, "h", MetricKind::Counter, vec![], Value::Number(5.0), t0 + Duration::from_secs(3));
        assert_eq!(st.to_series()[0].rate, None, "a decrease is a reset");
        st.set(&f, "h", MetricKind::Counter, vec![], Value::Number(9.0), t0 + Duration::from_secs(5));
        assert_eq!(st.to_series()[0].rate, Some(2.0));
    }

    #[test]
    fn gauges_have_no_rate() {
        let mut st = SeriesStore::new(10);
        let f = fam("g");
        let t0 = Instant::now();
        st.set(&f, "h", MetricKind::Gauge, vec![], Value::Number(1.0), t0);
        st.set(&f, "h", MetricKind::Gauge, vec![], Value::Number(3.0), t0 + Duration::from_secs(1));
        assert_eq!(st.to_series()[0].rate, None);
        assert_eq!(st.to_series()[0].value, Value::Number(3.0));
    }

    #[test]
    fn new_series_beyond_the_limit_are_dropped_and_counted() {
        let mut st = SeriesStore::new(2);
        let f = fam("g");
        let now = Instant::now();
        for i in 0..5 {
            let l = vec![(fam("i"), fam(&i.to_string()))];
            st.set(&f, "h", MetricKind::Gauge, l, Value::Number(1.0), now);
        }
        assert_eq!(st.len(), 2);
        assert_eq!(st.dropped(), 3);
        // An existing series still updates at the limit.
        assert!(st.set(&f, "h", MetricKind::Gauge, vec![(fam("i"), fam("0"))], Value::Number(7.0), now));
        st.retain_family("g", |l| &*l[0].1 != "0");
        assert_eq!(st.len(), 1);
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
