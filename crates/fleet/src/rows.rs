//! Series keyed once per row: a collector that sets the same rows report after report (a process,
//! a channel, a kernel counter) resolves each row's series to their slots once, and later reports
//! write values straight into the slots.
//!
//! A lookup by labels ([`Publisher::put`]) writes the labels as text, hashes it, and compares it with
//! the store's: with a thousand targets neither the index nor the store's text is in the cache, and
//! those misses were a third of a sysinfo fleet's CPU. A [`RowCache`] compares
//! a row's key (a few text fields the collector chooses, kept in one contiguous buffer per report) with
//! the key the row had in the report before, at about the same position, and reuses that row's
//! slots.

use std::cell::Cell;
use std::ops::Range;

use crate::model::MetricKind;
use crate::series::Num;
use crate::store::SlotId;
use crate::target::Publisher;

/// How many rows ahead of the expected position a key is looked for (rows removed since the
/// report before). A row not found there is looked up by labels, series by series.
const LOOKAHEAD: usize = 8;

/// Ends each field of a key: a byte that UTF-8 never holds, so that keys of different fields (or of a
/// different number of fields) never compare equal.
const END_OF_FIELD: u8 = 0xff;

/// The rows of one pass over a report: their keys, one after the other, and their slots.
#[derive(Debug, Default)]
struct Pass {
    keys: Vec<u8>,
    /// Per row, the end of its key in `keys` and of its slots in `slots`.
    rows: Vec<(u32, u32)>,
    slots: Vec<Option<SlotId>>,
}

thread_local! {
    /// The pass being made, between [`RowCache::begin`] and [`RowCache::end`]: one per thread, as large
    /// as the largest pass, so that a pass allocates nothing.
    static SCRATCH: Cell<Pass> = const { Cell::new(Pass::EMPTY) };
}

impl Pass {
    const EMPTY: Pass = Pass { keys: Vec::new(), rows: Vec::new(), slots: Vec::new() };

    /// Makes this pass a copy of `from`, in its own allocations when they are large enough and at most
    /// a sixteenth larger (a cache holds its pass between reports: a thousand targets' passes are
    /// megabytes, and spare room would be a share of them).
    fn copy_from(&mut self, from: &Pass) {
        fn copy<T: Copy>(to: &mut Vec<T>, from: &[T]) {
            if to.capacity() < from.len() || to.capacity() - from.len() > from.len() / 16 {
                *to = Vec::with_capacity(from.len());
            }
            to.clear();
            to.extend_from_slice(from);
        }
        copy(&mut self.keys, &from.keys);
        copy(&mut self.rows, &from.rows);
        copy(&mut self.slots, &from.slots);
    }

    /// Empties the pass, keeping its room.
    fn clear(&mut self) {
        self.keys.clear();
        self.rows.clear();
        self.slots.clear();
    }

    /// Row `i`'s key and the range of its slots.
    fn row(&self, i: usize) -> Option<(&[u8], Range<usize>)> {
        let &(key_end, slots_end) = self.rows.get(i)?;
        let (key_start, slots_start) = match i.checked_sub(1) {
            Some(p) => self.rows[p],
            None => (0, 0),
        };
        Some((&self.keys[key_start as usize..key_end as usize], slots_start as usize..slots_end as usize))
    }
}

/// The slots a collector's rows resolved to in the last pass over one report, by row key.
///
/// Call [`RowCache::begin`] at the start of each pass over the report (one cache per report), then
/// [`RowCache::row`] for each row, put the row's series through the returned [`Row`], and
/// [`RowCache::end`] after the last row (between passes, only the last one is kept). The
/// contract: a row's key determines the labels of every series the row puts, and a row puts its
/// series in the same order every time. Rows may come and go between passes; what the cache does
/// not recognise is looked up by labels as without it, so a wrong guess costs time, never a value
/// in the wrong series (a slot that was removed in between is refused by the store and looked up
/// again).
#[derive(Debug, Default)]
pub struct RowCache {
    prev: Pass,
    next: Pass,
    /// The row of `prev` the next row is expected to match.
    at: usize,
    /// Series put through a cached slot, for tests.
    #[cfg(test)]
    hits: usize,
}

impl RowCache {
    /// Starts a pass over the report: the rows of the pass before become what the next rows are
    /// matched against, and the new rows go into this thread's scratch pass.
    pub fn begin(&mut self) {
        self.prev = std::mem::take(&mut self.next);
        self.next = SCRATCH.take();
        self.next.clear();
        self.at = 0;
    }

    /// Ends a pass: it is kept in the pass before's vectors (sized for it: a report of the same size
    /// allocates nothing), and the scratch goes back to the thread.
    pub fn end(&mut self) {
        let mut kept = std::mem::take(&mut self.prev);
        kept.copy_from(&self.next);
        SCRATCH.set(std::mem::replace(&mut self.next, kept));
    }

    /// Starts the next row, identified by the text `fields` of its key (e.g. a process's pid and
    /// name; no fields for a report's one fixed row).
    pub fn row(&mut self, fields: &[&str]) -> Row<'_> {
        let start = self.next.keys.len();
        for field in fields {
            self.next.keys.extend_from_slice(field.as_bytes());
            self.next.keys.push(END_OF_FIELD);
        }
        let key = &self.next.keys[start..];
        let end = self.prev.rows.len().min(self.at + LOOKAHEAD);
        let found = (self.at..end).find_map(|i| {
            let (k, slots) = self.prev.row(i)?;
            (k == key).then_some((i, slots))
        });
        let cached = match found {
            Some((i, slots)) => {
                self.at = i + 1;
                slots
            }
            None => 0..0,
        };
        let (key_end, slots_end) = (self.next.keys.len() as u32, self.next.slots.len() as u32);
        self.next.rows.push((key_end, slots_end));
        Row { cache: self, cached }
    }
}

/// One row of a pass (see [`RowCache::row`]): puts its series through their cached slots.
#[derive(Debug)]
pub struct Row<'a> {
    cache: &'a mut RowCache,
    /// The slots of the matching row of the pass before, not yet used (empty: none matched).
    cached: Range<usize>,
}

impl Row<'_> {
    /// Sets the row's next series, as [`Publisher::put`] does.
    pub fn put(
        &mut self,
        p: &mut Publisher,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(&str, &str)],
        value: impl Into<Num>,
    ) {
        let mut slot = self.cached.next().and_then(|i| self.cache.prev.slots[i]);
        #[cfg(test)]
        let cached = slot;
        p.put_kept(&mut slot, family, help, kind, labels, value);
        #[cfg(test)]
        if cached.is_some() && cached == slot {
            self.cache.hits += 1;
        }
        let next = &mut self.cache.next;
        next.slots.push(slot);
        if let Some(last) = next.rows.last_mut() {
            last.1 = next.slots.len() as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::testing::publisher;
    use crate::model::Protocol;
    use crate::registry::Registry;

    fn values(reg: &Registry, p: &mut Publisher) -> Vec<String> {
        p.flush();
        reg.snapshot().get("t").unwrap().series.lines()
    }

    #[test]
    fn rows_reuse_their_slots_and_survive_rows_coming_and_going() {
        let (reg, mut p) = publisher(Protocol::SYSINFO);
        let mut cache = RowCache::default();
        let pass = |p: &mut Publisher, cache: &mut RowCache, rows: &[(&str, u64)]| {
            cache.begin();
            for &(name, v) in rows {
                let mut row = cache.row(&[name]);
                row.put(p, "a", "h", MetricKind::Gauge, &[("name", name)], v);
                row.put(p, "b", "h", MetricKind::Gauge, &[("name", name)], v * 10);
            }
            cache.end();
        };
        pass(&mut p, &mut cache, &[("x", 1), ("y", 2), ("z", 3)]);
        pass(&mut p, &mut cache, &[("x", 4), ("y", 5), ("z", 6)]);
        assert_eq!(cache.hits, 6, "the second pass finds every slot");
        assert_eq!(
            values(&reg, &mut p),
            [
                "a{name=\"x\"} Some(4.0)",
                "a{name=\"y\"} Some(5.0)",
                "a{name=\"z\"} Some(6.0)",
                "b{name=\"x\"} Some(40.0)",
                "b{name=\"y\"} Some(50.0)",
                "b{name=\"z\"} Some(60.0)"
            ]
        );
        // A row gone from the middle, a new one first: the others still land in their own series.
        cache.hits = 0;
        pass(&mut p, &mut cache, &[("w", 7), ("x", 8), ("z", 9)]);
        assert_eq!(cache.hits, 4, "x and z are found past the new row and the gone one");
        pass(&mut p, &mut cache, &[("w", 11), ("x", 12), ("z", 13)]);
        let v = values(&reg, &mut p);
        for want in ["a{name=\"w\"} Some(11.0)", "b{name=\"x\"} Some(120.0)", "a{name=\"z\"} Some(13.0)"] {
            assert!(v.iter().any(|s| s == want), "{want} in {v:?}");
        }
        assert!(v.iter().any(|s| s == "a{name=\"y\"} Some(5.0)"), "y was not set again, not moved: {v:?}");
    }

    #[test]
    fn caches_share_the_threads_scratch_and_keep_their_pass_in_their_own_room() {
        let (reg, mut p) = publisher(Protocol::SYSINFO);
        let (mut small, mut large) = (RowCache::default(), RowCache::default());
        let pass = |p: &mut Publisher, cache: &mut RowCache, family: &'static str, n: u64, v: u64| {
            cache.begin();
            for i in 0..n {
                let name = i.to_string();
                cache.row(&[&name]).put(p, family, "h", MetricKind::Gauge, &[("name", &name)], v + i);
            }
            cache.end();
        };
        for round in 0..3 {
            let before = (small.next.keys.as_ptr(), large.next.slots.as_ptr());
            pass(&mut p, &mut small, "s", 2, 100 * round);
            pass(&mut p, &mut large, "l", 40, 100 * round);
            if round > 0 {
                let after = (small.next.keys.as_ptr(), large.next.slots.as_ptr());
                assert_eq!(before, after, "a pass of the same size is kept where the one before was");
            }
        }
        assert_eq!(small.hits + large.hits, 2 * 42, "every row found after the first round");
        assert!(small.next.keys.capacity() < 8, "the small report's pass is not the scratch's size");
        let v = values(&reg, &mut p);
        for want in ["s{name=\"1\"} Some(201.0)", "l{name=\"39\"} Some(239.0)"] {
            assert!(v.iter().any(|s| s == want), "{want} in {v:?}");
        }
    }

    #[test]
    fn a_removed_series_is_looked_up_again_not_written_into_a_reused_slot() {
        let (reg, mut p) = publisher(Protocol::SYSINFO);
        let mut cache = RowCache::default();
        cache.begin();
        cache.row(&["x"]).put(&mut p, "a", "h", MetricKind::Gauge, &[("name", "x")], 1u64);
        // The series goes (a sweep), and another takes its slot.
        p.remove("a", &[("name", "x")]);
        p.put("a", "h", MetricKind::Gauge, &[("name", "other")], 2u64);
        cache.begin();
        cache.row(&["x"]).put(&mut p, "a", "h", MetricKind::Gauge, &[("name", "x")], 3u64);
        assert_eq!(values(&reg, &mut p), ["a{name=\"other\"} Some(2.0)", "a{name=\"x\"} Some(3.0)"]);
        assert_eq!(cache.hits, 0, "the stale slot was refused");
    }
}
