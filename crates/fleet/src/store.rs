//! The per-target series cache: current values, a cap on the number of series, counter rates,
//! and the unwrapping of 32-bit wrapping counters into monotonic 64-bit ones.
//!
//! A series is keyed once: [`SeriesStore::slot`] finds or creates it from borrowed labels (no
//! allocation when it exists) and returns a [`SlotId`]; updates write a value into the slot.
//! Collectors that see the same series again and again (a sys161 field, a Mono counter) keep the
//! slot and skip the lookup. A label with an empty value is no label, and is left out of the key
//! and the text. A series' labels are kept as their escaped exposition text, in one
//! buffer per target (the *arena*) that the published schema shares, in the order render reads
//! them. [`SeriesStore::publish`] shares the schema until the set of series changes.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio::time::Instant;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::series::{
    push_label, Family, Hist, LabelPairs, LabelSet, MetricKind, Num, Sample, Schema, Series, SeriesSet, Value,
};

/// A family's name as a collector gives it.
#[derive(Debug, Clone, Copy)]
enum FamilyName<'a> {
    /// A name in telemon's code: every target shares one copy ([`interned`]).
    Static(&'static str),
    /// A name that is already shared (a [`Series`]' own).
    Shared(&'a Arc<str>),
}

impl FamilyName<'_> {
    fn as_str(&self) -> &str {
        match self {
            FamilyName::Static(s) => s,
            FamilyName::Shared(s) => s,
        }
    }

    /// The family of this name, `help` and `kind`: for a name in telemon's code, the process's one
    /// copy, which every target holds (a pointer, not 40 bytes of its own).
    fn family(self, help: &'static str, kind: MetricKind) -> Arc<Family> {
        type Families = HashMap<(&'static str, &'static str, MetricKind), Arc<Family>>;
        static FAMILIES: OnceLock<Mutex<Families>> = OnceLock::new();
        match self {
            FamilyName::Static(name) => {
                let mut families =
                    FAMILIES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
                let f = families.entry((name, help, kind));
                f.or_insert_with(|| Arc::new(Family { name: interned(name), help, kind })).clone()
            }
            FamilyName::Shared(name) => Arc::new(Family { name: name.clone(), help, kind }),
        }
    }
}

/// The one `Arc<str>` of the process for a family name in telemon's code. Every target's family of
/// that name shares it: a target holds no copy of its own, and a scrape that meets the family in the
/// next target compares pointers, not text that is not in the cache. Only literals come here, so the
/// table is as large as the family names in the binary.
fn interned(name: &'static str) -> Arc<str> {
    static NAMES: OnceLock<Mutex<HashMap<&'static str, Arc<str>>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    names.entry(name).or_insert_with(|| Arc::from(name)).clone()
}

/// Default per-target cap on series.
pub const DEFAULT_SERIES_LIMIT: usize = 10_000;

/// A series' place in a [`SeriesStore`]. It stays valid until the series is removed (a sweep, a
/// `clear` on reconnect); a stale id is refused by [`SeriesStore::set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotId {
    index: u32,
    /// Never zero, so that an `Option<SlotId>` (a collector keeps one per series) is 8 bytes.
    generation: NonZeroU32,
}

impl SlotId {
    fn of(index: u32, generation: u32) -> SlotId {
        SlotId { index, generation: NonZeroU32::new(generation).unwrap_or(NonZeroU32::MIN) }
    }
}

/// What an update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The value (or its rate) changed: a publish is due.
    Changed,
    /// The same value as before.
    Unchanged,
    /// The slot no longer exists (look the series up again).
    Stale,
}

/// 24 bytes: a fleet holds hundreds of thousands. A counter's previous value, for its rate, is the
/// series' current [`Sample`] until the next update.
#[derive(Debug)]
struct Slot {
    /// The family's index (below [`MAX_FAMILIES`]), with [`LIVE`] and [`HIST`].
    tag: u16,
    /// The length of the label text (at most [`u16::MAX`] bytes).
    text_len: u16,
    /// Counts the series that held the slot, from 1 (never 0, see [`SlotId::generation`]).
    generation: u32,
    /// The round it was last set in (see [`SeriesStore::begin_round`]).
    seen: u32,
    /// Where the label text is: in the arena, or, with [`PENDING`] set, in the text of series
    /// created since the arena was built.
    text_at: u32,
    /// When the value was last set, in milliseconds since the store's epoch (wrapping, every 49
    /// days), for a counter's rate.
    prev_ms: u32,
    /// Where its value is in [`SeriesStore::samples`]: its series' place in the schema, or, for a
    /// series created since the schema was built, after the schema's.
    pos: u32,
}

/// [`Slot::tag`]: a series holds the slot.
const LIVE: u16 = 1 << 15;
/// [`Slot::tag`]: the series has a histogram in [`SeriesStore::hists`].
const HIST: u16 = 1 << 14;
/// The most families a store holds: their index shares [`Slot::tag`] with two flags.
const MAX_FAMILIES: usize = 1 << 14;

impl Slot {
    fn family(&self) -> u16 {
        self.tag & !(LIVE | HIST)
    }

    fn live(&self) -> bool {
        self.tag & LIVE != 0
    }

    fn hist(&self) -> bool {
        self.tag & HIST != 0
    }

    fn set(&mut self, flag: u16, on: bool) {
        self.tag = if on { self.tag | flag } else { self.tag & !flag };
    }
}

#[derive(Debug)]
struct StoreFamily {
    /// Shared with the other targets that have the family (see [`FamilyName::family`]).
    family: Arc<Family>,
    live: u32,
    /// The last round one of its series was set in, and how many of its live series were set in it:
    /// when that is all of them, a sweep of that round has nothing to remove.
    round: u32,
    seen: u32,
}

/// Marks `slot` as set in `round`.
fn mark_seen(families: &mut [StoreFamily], slot: &mut Slot, round: u32) {
    if slot.seen != round {
        slot.seen = round;
        count_seen(&mut families[usize::from(slot.family())], round);
    }
}

/// Counts one more of `f`'s series as set in `round`.
fn count_seen(f: &mut StoreFamily, round: u32) {
    if f.round != round {
        f.round = round;
        f.seen = 0;
    }
    f.seen += 1;
}

/// A time as a [`SeriesStore`] counts it (see [`SeriesStore::stamp`]): milliseconds since the store
/// was made, wrapping every 49 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp(u32);

/// One target's current series, bounded by a series limit.
#[derive(Debug)]
pub struct SeriesStore {
    limit: usize,
    len: usize,
    dropped: u64,
    round: u32,
    epoch: Instant,
    families: Vec<StoreFamily>,
    /// The families by name, once there are more than [`FEW_FAMILIES`] (fewer are searched in
    /// `families`: most targets have a dozen, and the map cost each of them about 420 bytes).
    family_index: Option<HashMap<Arc<str>, u16, DefaultHashBuilder>>,
    slots: Vec<Slot>,
    /// The values by [`Slot::pos`], when one changed since the last publish (else empty): in the
    /// schema's order, so that a scrape reads each target's values one after the other instead of
    /// stalling on a cache miss for nearly every value (slots are in the order series were created,
    /// and a family's series were scattered over the whole vector).
    samples: Vec<Sample>,
    /// The values handed to the last publish, when none changed since: then they are the current
    /// values, held once by the store and the snapshot. The first change after a publish copies
    /// them back into `samples`, and the next publish hands that vector over (no copy).
    published: Option<Arc<Vec<Sample>>>,
    /// The histograms, by slot index (few series are histograms).
    hists: HashMap<u32, Hist, DefaultHashBuilder>,
    free: Vec<u32>,
    /// Slot indexes, by the hash of (family, labels).
    index: HashTable<u32>,
    /// The label text of every series, in schema order, as of the last build of the schema (which
    /// shares it); removed series leave theirs until the next build.
    arena: Arc<str>,
    /// The label text of the series created since the arena was built.
    pending: String,
    /// Where a lookup writes the labels it is given as text, kept from one lookup to the next.
    scratch: String,
    hasher: DefaultHashBuilder,
    /// The schema of the last publish; `None` when the set of series changed since.
    schema: Option<Arc<Schema>>,
    hists_published: Option<Arc<[(u32, Hist)]>>,
    /// Lookups of its schema among the other targets' ([`shared`]) in a row that found none.
    share_misses: u8,
    /// Builds of its schema left before the next lookup, after [`SHARE_MISSES`] misses.
    share_skip: u8,
    /// Series created since the schema was last built.
    created: u32,
    /// Whether, at the last build, some but fewer than half of the series were new: its series come
    /// and go: it keeps room for the next ones' values, and takes room for their text at once.
    churning: bool,
}

/// The most families a store searches one by one, without a map by name.
const FEW_FAMILIES: usize = 32;

/// Marks a [`Slot::text_at`] in [`SeriesStore::pending`]; it also bounds the label text to 2 GiB.
const PENDING: u32 = 1 << 31;

/// The most label text of new series held before the arena is built again without a publish.
const MAX_PENDING: usize = 1 << 20;

/// The room a store whose series come and go takes at once for its new series' label text (instead
/// of growing it from a few bytes, a copy each time). It is given back at each build of the schema:
/// kept from one build to the next, it was 2 to 4 MB of RSS at 1,000 rvOS VMs.
const PENDING_FIRST: usize = 512;

/// Room for `n` values, and a few more in a store whose series come and go (see
/// [`SeriesStore::own`]).
fn with_room(n: usize, churning: bool) -> usize {
    if churning {
        n + n / 16 + 2
    } else {
        n
    }
}

/// A slot's label text.
fn slot_text<'a>(arena: &'a str, pending: &'a str, s: &Slot) -> &'a str {
    let (text, at) =
        if s.text_at & PENDING != 0 { (pending, s.text_at & !PENDING) } else { (arena, s.text_at) };
    text.get(at as usize..at as usize + s.text_len as usize).unwrap_or("")
}

fn key_hash(hasher: &DefaultHashBuilder, family: u16, text: &str) -> u64 {
    hasher.hash_one((family, text))
}

/// The longest label value kept from a peer (longer ones are cut at a character boundary).
pub const MAX_LABEL_LEN: usize = 256;

/// Writes `labels`, each value cut to [`MAX_LABEL_LEN`], as a label set's text: the one place a
/// series' labels are made, where a label with an empty value is left out (it is no label, on every
/// view; see [`LabelSet`]).
fn label_text(out: &mut String, labels: &[(&str, &str)]) {
    out.clear();
    for &(k, v) in labels {
        push_label(out, k, cut_label(v));
    }
}

/// Cuts a label value from a peer to [`MAX_LABEL_LEN`] bytes, at a character boundary.
pub fn cut_label(value: &str) -> &str {
    let mut end = value.len().min(MAX_LABEL_LEN);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

impl SeriesStore {
    /// An empty store holding at most `limit` series.
    pub fn new(limit: usize) -> Self {
        SeriesStore {
            limit,
            len: 0,
            dropped: 0,
            round: 0,
            epoch: Instant::now(),
            families: Vec::new(),
            family_index: None,
            slots: Vec::new(),
            samples: Vec::new(),
            published: None,
            hists: HashMap::default(),
            free: Vec::new(),
            index: HashTable::new(),
            arena: Arc::from(""),
            pending: String::new(),
            scratch: String::new(),
            hasher: DefaultHashBuilder::default(),
            schema: None,
            hists_published: None,
            share_misses: 0,
            share_skip: 0,
            created: 0,
            churning: false,
        }
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
        self.round = self.round.wrapping_add(1);
        u64::from(self.round)
    }

    fn family_id(&mut self, name: FamilyName<'_>, help: &'static str, kind: MetricKind) -> Option<u16> {
        if let Some(id) = self.find_family(name.as_str()) {
            let f = &mut self.families[usize::from(id)].family;
            if f.kind != kind {
                // A family's type is fixed by its first series; a collector never changes it.
                *f = name.family(f.help, kind);
                self.schema = None;
            }
            return Some(id);
        }
        let id = u16::try_from(self.families.len()).ok().filter(|&i| usize::from(i) < MAX_FAMILIES)?;
        let family = name.family(help, kind);
        let name = family.name.clone();
        self.families.push(StoreFamily { family, live: 0, round: 0, seen: 0 });
        match &mut self.family_index {
            Some(index) => {
                index.insert(name, id);
            }
            None if self.families.len() > FEW_FAMILIES => {
                let names = self.families.iter().enumerate().map(|(i, f)| (f.family.name.clone(), i as u16));
                self.family_index = Some(names.collect());
            }
            None => {}
        }
        Some(id)
    }

    /// The index of the family `name`, if the store has it.
    fn find_family(&self, name: &str) -> Option<u16> {
        match &self.family_index {
            Some(index) => index.get(name).copied(),
            None => self.families.iter().position(|f| *f.family.name == *name).map(|i| i as u16),
        }
    }

    /// The slot of the series `family{labels}`, created when new. Label values longer than
    /// [`MAX_LABEL_LEN`] are cut. `None` when the store is full (the series is
    /// counted as dropped).
    pub fn slot(
        &mut self,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(&str, &str)],
    ) -> Option<SlotId> {
        let mut text = std::mem::take(&mut self.scratch);
        label_text(&mut text, labels);
        let slot = self.slot_of_text(FamilyName::Static(family), help, kind, &text);
        self.scratch = text;
        slot
    }

    /// [`SeriesStore::slot`] for labels that are already a set (values are not cut again).
    pub(crate) fn slot_of_set(
        &mut self,
        family: &Arc<str>,
        help: &'static str,
        kind: MetricKind,
        labels: &LabelSet,
    ) -> Option<SlotId> {
        self.slot_of_text(FamilyName::Shared(family), help, kind, labels.text())
    }

    fn slot_of_text(
        &mut self,
        family: FamilyName<'_>,
        help: &'static str,
        kind: MetricKind,
        text: &str,
    ) -> Option<SlotId> {
        let Some(fam) = self.family_id(family, help, kind) else {
            self.dropped = self.dropped.saturating_add(1);
            return None;
        };
        let hash = key_hash(&self.hasher, fam, text);
        let (slots, arena, pending) = (&self.slots, &*self.arena, &*self.pending);
        if let Some(&i) = self.index.find(hash, |&i| {
            let s = &slots[i as usize];
            s.family() == fam && slot_text(arena, pending, s) == text
        }) {
            let s = &mut self.slots[i as usize];
            mark_seen(&mut self.families, s, self.round);
            return Some(SlotId::of(i, s.generation));
        }
        if self.pending.len() > MAX_PENDING || self.values().len() > 2 * self.len + 64 {
            // Series come and go and nothing publishes: build the arena now, so that the text and
            // values of removed series do not pile up.
            self.rebuild();
        }
        // Both texts stay below PENDING, and so does an arena built from them.
        let fits = self.arena.len() + self.pending.len() + text.len() < PENDING as usize
            && text.len() <= usize::from(u16::MAX);
        if !fits || self.len >= self.limit {
            self.dropped = self.dropped.saturating_add(1);
            return None;
        }
        let (text_at, text_len) = (self.pending.len() as u32 | PENDING, text.len() as u16);
        // A new value goes after the others until the next build of the schema puts it in its place
        // (the series is not in a published schema before that).
        let values = self.own();
        let Ok(pos) = u32::try_from(values.len()) else {
            self.dropped = self.dropped.saturating_add(1);
            return None;
        };
        values.push(Sample::EMPTY);
        if self.churning && self.pending.capacity() == 0 {
            self.pending.reserve(PENDING_FIRST.max(text.len()));
        }
        self.pending.push_str(text);
        self.created = self.created.saturating_add(1);
        let slot =
            Slot { tag: fam | LIVE, generation: 1, seen: self.round, text_at, text_len, prev_ms: 0, pos };
        let index = match self.free.pop() {
            Some(i) => {
                let generation = self.slots[i as usize].generation;
                self.slots[i as usize] = Slot { generation, ..slot };
                i
            }
            None => {
                let Ok(i) = u32::try_from(self.slots.len()) else {
                    self.dropped = self.dropped.saturating_add(1);
                    self.own().pop();
                    return None;
                };
                self.slots.push(slot);
                i
            }
        };
        let (slots, hasher, arena, pending) = (&self.slots, &self.hasher, &*self.arena, &*self.pending);
        self.index.insert_unique(hash, index, |&i| {
            let s = &slots[i as usize];
            key_hash(hasher, s.family(), slot_text(arena, pending, s))
        });
        let f = &mut self.families[usize::from(fam)];
        f.live += 1;
        count_seen(f, self.round);
        self.len += 1;
        self.schema = None;
        Some(SlotId::of(index, self.slots[index as usize].generation))
    }

    /// The current values, by [`Slot::pos`].
    fn values(&self) -> &[Sample] {
        self.published.as_deref().unwrap_or(&self.samples)
    }

    /// The current values, to change: copied from the last publish if it holds them.
    fn own(&mut self) -> &mut Vec<Sample> {
        if let Some(published) = self.published.take() {
            self.samples = Arc::try_unwrap(published).unwrap_or_else(|shared| {
                // With room for a few new series, whose values go after the others until the next
                // build of the schema: a store whose series come and go (processes changing state)
                // would otherwise grow a copy of every value again, once per publish.
                let mut own = Vec::with_capacity(with_room(shared.len(), self.churning));
                own.extend_from_slice(&shared);
                own
            });
        }
        &mut self.samples
    }

    /// The slot `id` names, if it is still the series it was handed out for.
    fn live_slot(slots: &mut [Slot], id: SlotId) -> Option<&mut Slot> {
        slots.get_mut(id.index as usize).filter(|s| s.live() && s.generation == id.generation.get())
    }

    /// Sets a series' value as observed at `now`. For counters, the rate is computed from the
    /// previous value; a decrease is a reset (no rate until the next update).
    pub fn set(&mut self, id: SlotId, value: Num, now: Instant) -> Change {
        self.set_at(id, value, self.stamp(now))
    }

    /// `now` as this store counts time, for [`SeriesStore::set_at`]: read it once for a batch of
    /// values, not once per value (a collector sets hundreds of thousands a second).
    pub fn stamp(&self, now: Instant) -> Stamp {
        // Wraps every 49 days; the gap between two updates is still right, unless it is longer.
        Stamp(now.saturating_duration_since(self.epoch).as_millis() as u32)
    }

    /// [`SeriesStore::set`] at a time read with [`SeriesStore::stamp`].
    pub fn set_at(&mut self, id: SlotId, value: Num, at: Stamp) -> Change {
        let t = at.0;
        let round = self.round;
        let Some(slot) = Self::live_slot(&mut self.slots, id) else { return Change::Stale };
        let counter = self.families[usize::from(slot.family())].family.kind == MetricKind::Counter;
        mark_seen(&mut self.families, slot, round);
        let pos = slot.pos as usize;
        let sample = self.published.as_deref().unwrap_or(&self.samples)[pos];
        let (v, prev) = (value.as_f64(), sample.value().as_f64());
        let elapsed = t.wrapping_sub(slot.prev_ms);
        let rate = if counter && v >= prev && elapsed > 0 {
            (v - prev) / (f64::from(elapsed) / 1e3)
        } else if counter && v >= prev {
            sample.rate() // two updates at one instant: keep the last rate
        } else {
            f64::NAN
        };
        slot.prev_ms = t;
        let new = Sample::new(value, rate);
        if !new.same(&sample) {
            self.own()[pos] = new;
            Change::Changed
        } else {
            Change::Unchanged
        }
    }

    /// Sets a histogram series: cumulative `counts` per upper bound in `bounds`, with the sum and
    /// count of the observations.
    pub fn set_hist(&mut self, id: SlotId, bounds: &[f64], counts: &[u64], sum: f64, count: u64) -> Change {
        let round = self.round;
        let Some(slot) = Self::live_slot(&mut self.slots, id) else { return Change::Stale };
        mark_seen(&mut self.families, slot, round);
        let change = match self.hists.get_mut(&id.index) {
            Some(h)
                if *h.bounds == *bounds
                    && *h.counts == *counts
                    && h.sum.to_bits() == sum.to_bits()
                    && h.count == count =>
            {
                Change::Unchanged
            }
            Some(h) => {
                if *h.bounds != *bounds {
                    (h.bounds, h.le) = crate::series::shared_bounds(bounds);
                }
                h.counts = Arc::from(counts);
                h.sum = sum;
                h.count = count;
                Change::Changed
            }
            None => {
                slot.set(HIST, true);
                self.hists.insert(id.index, Hist::new(bounds, counts, sum, count));
                // Histograms are part of the schema (they are rendered as their own lines).
                self.schema = None;
                Change::Changed
            }
        };
        if change == Change::Changed {
            self.hists_published = None;
        }
        change
    }

    /// Overrides the published rate of a slot (for sets built from owned series).
    pub(crate) fn force_rate(&mut self, id: SlotId, rate: Option<f64>) {
        if let Some(slot) = Self::live_slot(&mut self.slots, id) {
            let pos = slot.pos as usize;
            let sample = &mut self.own()[pos];
            *sample = Sample::new(sample.value(), rate.unwrap_or(f64::NAN));
        }
    }

    fn remove_slot(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        if !s.live() {
            return;
        }
        let hash = key_hash(&self.hasher, s.family(), slot_text(&self.arena, &self.pending, s));
        let hist = s.hist();
        s.set(LIVE | HIST, false);
        s.generation = s.generation.checked_add(1).unwrap_or(1);
        if hist {
            self.hists.remove(&i);
            self.hists_published = None;
        }
        // Its label text stays where it is until the arena is built again.
        (s.text_at, s.text_len) = (0, 0);
        let f = &mut self.families[usize::from(s.family())];
        f.live -= 1;
        if s.seen == f.round {
            f.seen -= 1;
        }
        if let Ok(entry) = self.index.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        // Its value stays until the schema is built again: no snapshot reads it.
        self.free.push(i);
        self.len -= 1;
        self.schema = None;
    }

    fn remove_where(&mut self, family: &str, gone: impl FnMut(&Slot, &str) -> bool) {
        let Some(fam) = self.find_family(family) else { return };
        self.remove_in(&[fam], gone);
    }

    /// Removes the live series of the families `fams` that are `gone`, in one pass over the slots.
    fn remove_in(&mut self, fams: &[u16], mut gone: impl FnMut(&Slot, &str) -> bool) {
        if fams.iter().all(|&f| self.families[usize::from(f)].live == 0) {
            return;
        }
        for i in 0..self.slots.len() as u32 {
            let s = &self.slots[i as usize];
            if s.live() && fams.contains(&s.family()) && gone(s, slot_text(&self.arena, &self.pending, s)) {
                self.remove_slot(i);
            }
        }
    }

    /// Removes the series of `family` with exactly `labels`, if present.
    pub fn remove(&mut self, family: &str, labels: &[(&str, &str)]) {
        let mut text = std::mem::take(&mut self.scratch);
        label_text(&mut text, labels);
        self.remove_where(family, |_, labels| labels == text);
        self.scratch = text;
    }

    /// Removes every series of `family` whose labels do not satisfy `keep` (e.g. processes that
    /// exited since the last report).
    pub fn retain_family(&mut self, family: &str, mut keep: impl FnMut(LabelPairs<'_>) -> bool) {
        self.remove_where(family, |_, labels| !keep(LabelPairs::of(labels)));
    }

    /// Removes every series of `family` not set since `round` began.
    pub fn sweep_family(&mut self, family: &str, round: u64) {
        self.sweep_families(&[family], round);
    }

    /// Removes every series of the `families` (of one report) not set since `round` began, in one
    /// pass over the slots; a family whose live series were all set in `round` is not looked at.
    pub fn sweep_families(&mut self, families: &[&str], round: u64) {
        let round = round as u32;
        let due: Vec<u16> = families
            .iter()
            .filter_map(|name| self.find_family(name))
            .filter(|&f| {
                let f = &self.families[usize::from(f)];
                f.live > 0 && !(f.round == round && f.seen == f.live)
            })
            .collect();
        if !due.is_empty() {
            // Rounds wrap: "set since round began" is "seen - round" small.
            self.remove_in(&due, |s, _| s.seen.wrapping_sub(round) > u32::MAX / 2);
        }
    }

    /// Forgets every series (the peer restarted or went away): the next values start afresh,
    /// with no rate. Slot ids handed out so far become stale.
    pub fn clear(&mut self) {
        if self.len == 0 && self.pending.is_empty() && self.arena.is_empty() {
            return;
        }
        for i in 0..self.slots.len() as u32 {
            self.remove_slot(i);
        }
        self.index.clear();
        self.arena = Arc::from("");
        self.pending = String::new();
        self.schema = None;
    }

    /// The current series for a target's snapshot (`crate::model::TargetSnapshot`): the schema is shared with the last
    /// publish unless the set of series changed; the values are copied.
    pub fn publish(&mut self) -> SeriesSet {
        let schema = match &self.schema {
            Some(s) => s.clone(),
            None => {
                // The set of series changed (mostly: a target's series were created): give back what the
                // vectors grew beyond, since they are kept for as long as the target.
                self.families.shrink_to_fit();
                self.slots.shrink_to_fit();
                self.rebuild()
            }
        };
        let hists = match &self.hists_published {
            Some(h) => h.clone(),
            None => {
                // By the value's place, as the schema's series name them.
                let slots = &self.slots;
                let mut h: Vec<(u32, Hist)> =
                    self.hists.iter().map(|(&i, h)| (slots[i as usize].pos, h.clone())).collect();
                h.sort_unstable_by_key(|e| e.0);
                let h: Arc<[(u32, Hist)]> = h.into();
                self.hists_published = Some(h.clone());
                h
            }
        };
        let samples = match &self.published {
            Some(p) => p.clone(),
            None => {
                let mut own = std::mem::take(&mut self.samples);
                if own.capacity() > with_room(own.len(), self.churning) {
                    own.shrink_to_fit();
                }
                let p = Arc::new(own);
                self.published = Some(p.clone());
                p
            }
        };
        SeriesSet { schema, samples, hists }
    }

    /// Builds the schema and the arena that goes with it.
    fn rebuild(&mut self) -> Arc<Schema> {
        let (schema, values) = self.build_schema();
        let schema = if self.share_skip > 0 {
            self.share_skip -= 1;
            Arc::new(schema)
        } else {
            let (schema, found) = shared(schema);
            self.share_misses = if found { 0 } else { self.share_misses.saturating_add(1) };
            if self.share_misses >= SHARE_MISSES {
                self.share_skip = SHARE_SKIP;
            }
            schema
        };
        // The values move to their series' new places (the last publish keeps its own).
        self.samples = values;
        self.published = None;
        self.pending = String::new();
        self.arena = schema.text.clone();
        self.schema = Some(schema.clone());
        self.hists_published = None;
        schema
    }

    /// The schema of the live series, with a new arena and their values in its order: the labels
    /// and values of each family's series one after the other, as render reads them. Each slot is
    /// pointed at its text and value in them.
    fn build_schema(&mut self) -> (Schema, Vec<Sample>) {
        let mut order: Vec<u16> =
            (0..self.families.len() as u16).filter(|&f| self.families[usize::from(f)].live > 0).collect();
        order.sort_unstable_by(|&a, &b| {
            self.families[usize::from(a)].family.name.cmp(&self.families[usize::from(b)].family.name)
        });
        let mut rank = vec![u16::MAX; self.families.len()];
        for (r, &f) in order.iter().enumerate() {
            rank[usize::from(f)] = r as u16;
        }
        // Within a family, series in slot order: sorting by label text compared strings that are
        // nowhere near the cache, every time a series came or went. A counting sort by family
        // places each live slot in two passes.
        let mut runs: Vec<std::ops::Range<u32>> = vec![0..0; order.len()];
        for s in self.slots.iter().filter(|s| s.live()) {
            runs[usize::from(rank[usize::from(s.family())])].end += 1;
        }
        let mut next = 0u32;
        for run in &mut runs {
            *run = next..next + run.end;
            next = run.end;
        }
        let mut live = vec![0u32; next as usize];
        let mut fill: Vec<u32> = runs.iter().map(|r| r.start).collect();
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| s.live()) {
            let at = &mut fill[usize::from(rank[usize::from(s.family())])];
            live[*at as usize] = i as u32;
            *at += 1;
        }
        let mut ends = Vec::with_capacity(live.len());
        // Some series, but fewer than half, are new since the last build: its series come and go.
        self.churning = self.created > 0 && (self.created as usize) * 2 < live.len();
        self.created = 0;
        let mut values = Vec::with_capacity(with_room(live.len(), self.churning));
        let old = self.published.as_deref().unwrap_or(&self.samples);
        let mut text =
            String::with_capacity(live.iter().map(|&i| usize::from(self.slots[i as usize].text_len)).sum());
        for (pos, &i) in live.iter().enumerate() {
            let s = &mut self.slots[i as usize];
            // The arena is no longer than the arena and pending text it is built from, both shorter
            // than PENDING; there are fewer live series than slots, indexed by u32.
            let at = text.len() as u32;
            text.push_str(slot_text(&self.arena, &self.pending, s));
            s.text_at = at;
            values.push(old[s.pos as usize]);
            s.pos = pos as u32;
            ends.push(text.len() as u32 | if s.hist() { Schema::HIST } else { 0 });
        }
        let schema = Schema {
            families: order.iter().map(|&f| self.families[usize::from(f)].family.clone()).collect(),
            runs: runs.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
            text: Arc::from(text),
        };
        (schema, values)
    }
}

/// The most series of a schema that [`shared`] looks up among the other targets' schemas.
const MAX_SHARED_SERIES: usize = 256;
/// The most label text of a schema that [`shared`] looks up.
const MAX_SHARED_TEXT: usize = 16 << 10;
/// Lookups in a row that found no equal schema after which a store looks only now and then.
const SHARE_MISSES: u8 = 4;
/// Builds of a store's schema without a lookup, after [`SHARE_MISSES`] misses.
const SHARE_SKIP: u8 = 15;

/// The schemas that targets share: `schema`, or an equal one that another target published and
/// still holds. A fleet's targets of one kind mostly have the same series (every simulator the
/// same eleven `HEAD` fields), and each held a copy of its own: families, series and label text,
/// about 740 bytes of a sys161 target's 6.5 KiB. An equal schema has the same label text at the
/// same places, so a store that gets another's keeps its slots as they are.
///
/// Only small schemas are looked up (at most [`MAX_SHARED_SERIES`] series and
/// [`MAX_SHARED_TEXT`] bytes of label text), and only when a target's set of series changed: the
/// hash and the comparison are paid rarely, and are bounded. The table holds weak references, and
/// drops the dead ones each time it has doubled since it last did. Returns whether an equal schema
/// was found.
///
/// A store whose schema changes often and is like no other's (an rvOS VM's processes and channels,
/// every second) stops looking after [`SHARE_MISSES`] misses in a row, and looks once every
/// [`SHARE_SKIP`] builds after that: hashing up to 16 KB to find nothing was about 1% of telemon's
/// time at 1,000 VMs.
fn shared(schema: Schema) -> (Arc<Schema>, bool) {
    #[derive(Default)]
    struct Table {
        by_hash: HashMap<u64, Vec<Weak<Schema>>, DefaultHashBuilder>,
        entries: usize,
        prune_at: usize,
    }
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    if schema.ends.len() > MAX_SHARED_SERIES || schema.text.len() > MAX_SHARED_TEXT {
        return (Arc::new(schema), false);
    }
    let mut table = TABLE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let hash = table.by_hash.hasher().hash_one(&schema);
    let same = table.by_hash.entry(hash).or_default();
    if let Some(found) = same.iter().filter_map(Weak::upgrade).find(|s| **s == schema) {
        return (found, true);
    }
    let schema = Arc::new(schema);
    same.push(Arc::downgrade(&schema));
    table.entries += 1;
    if table.entries >= table.prune_at {
        table.by_hash.retain(|_, same| {
            same.retain(|s| s.strong_count() > 0);
            !same.is_empty()
        });
        table.entries = table.by_hash.values().map(Vec::len).sum();
        table.prune_at = (table.entries * 2).max(64);
    }
    (schema, false)
}

/// Unwraps a 32-bit counter that wraps around (sys161's) into a monotonic 64-bit one.
///
/// Within one connection a decrease is a wrap; a new connection (a peer restart) starts a new
/// `Unwrap32` so the restart shows as a real reset. Eight bytes (a sys161 target keeps one per
/// `HEAD` field): the last 64-bit value, whose low half is the last reading.
#[derive(Debug, Clone, Copy)]
pub struct Unwrap32 {
    /// [`Unwrap32::NONE`] before the first reading. A value of `u64::MAX` (after 2^32 − 1 wraps)
    /// would read as a fresh start: no 32-bit counter gets there.
    last: u64,
}

impl Default for Unwrap32 {
    fn default() -> Self {
        Unwrap32 { last: Unwrap32::NONE }
    }
}

impl Unwrap32 {
    const NONE: u64 = u64::MAX;

    /// The 64-bit value of the next 32-bit reading.
    pub fn next(&mut self, v: u32) -> u64 {
        let value = if self.last == Unwrap32::NONE {
            u64::from(v)
        } else {
            let high = self.last & !u64::from(u32::MAX);
            let high = if v < self.last as u32 { high.wrapping_add(1 << 32) } else { high };
            high | u64::from(v)
        };
        self.last = value;
        value
    }
}

/// Building a set from owned series goes through a store, as a collector's would.
impl SeriesSet {
    /// A set holding `series` (for tests and one-off views; collectors go through the store).
    pub fn from_series(series: impl IntoIterator<Item = Series>) -> SeriesSet {
        let mut store = crate::store::SeriesStore::new(usize::MAX);
        let now = tokio::time::Instant::now();
        let mut rates = Vec::new();
        for s in series {
            let Some(slot) = store.slot_of_set(&s.family, s.help, s.kind, &s.labels) else { continue };
            match &s.value {
                Value::Number(v) => {
                    store.set(slot, Num::Float(*v), now);
                }
                Value::Histogram { buckets, sum, count } => {
                    let bounds: Vec<f64> = buckets.iter().map(|b| b.0).collect();
                    let counts: Vec<u64> = buckets.iter().map(|b| b.1).collect();
                    store.set_hist(slot, &bounds, &counts, *sum, *count);
                }
            }
            rates.push((slot, s.rate));
        }
        for (slot, rate) in rates {
            store.force_rate(slot, rate);
        }
        store.publish()
    }
}

impl FromIterator<Series> for SeriesSet {
    fn from_iter<I: IntoIterator<Item = Series>>(iter: I) -> SeriesSet {
        SeriesSet::from_series(iter)
    }
}

impl From<Vec<Series>> for SeriesSet {
    fn from(v: Vec<Series>) -> SeriesSet {
        SeriesSet::from_series(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn targets_share_one_copy_of_each_family_in_the_code() {
        let families: Vec<Arc<Family>> = (0..2)
            .map(|_| {
                let mut st = SeriesStore::new(10);
                st.slot("shared_family", "h", MetricKind::Gauge, &[]).unwrap();
                st.families[0].family.clone()
            })
            .collect();
        assert!(Arc::ptr_eq(&families[0], &families[1]));
        // Another type or HELP text is another family, with the same one copy of the name.
        let mut st = SeriesStore::new(10);
        st.slot("shared_family", "h", MetricKind::Counter, &[]).unwrap();
        let counter = st.publish().schema.families[0].clone();
        assert!(!Arc::ptr_eq(&counter, &families[0]) && counter.kind == MetricKind::Counter);
        assert!(Arc::ptr_eq(&counter.name, &families[0].name));
        // A name that comes with its series keeps its own.
        let own: Arc<str> = Arc::from("shared_family");
        let mut st = SeriesStore::new(10);
        st.slot_of_set(&own, "h", MetricKind::Gauge, &LabelSet::new([("k", "v")])).unwrap();
        assert!(Arc::ptr_eq(&st.publish().schema.families[0].name, &own));
    }

    #[test]
    fn a_slot_is_24_bytes_a_kept_slot_id_8_and_a_family_24() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
        assert_eq!(std::mem::size_of::<StoreFamily>(), 24);
        assert_eq!(std::mem::size_of::<Sample>(), 16);
        assert_eq!(std::mem::size_of::<Option<SlotId>>(), 8);
    }

    const F: &str = "x_total";

    fn one(st: &mut SeriesStore) -> (Num, Option<f64>) {
        let set = st.publish();
        let s = set.iter().next().expect("a series");
        let v = match s.value() {
            crate::series::ValueRef::Number(n) => n,
            _ => panic!("a number"),
        };
        (v, s.rate())
    }

    #[test]
    fn counter_rate_from_the_last_two_updates_and_none_after_a_reset() {
        let mut st = SeriesStore::new(10);
        let t0 = Instant::now();
        let id = st.slot(F, "h", MetricKind::Counter, &[]).unwrap();
        assert_eq!(st.set(id, Num::Uint(10), t0), Change::Changed);
        assert_eq!(one(&mut st).1, None);
        st.set(id, Num::Uint(30), t0 + Duration::from_secs(2));
        assert_eq!(one(&mut st), (Num::Uint(30), Some(10.0)));
        st.set(id, Num::Uint(5), t0 + Duration::from_secs(3));
        assert_eq!(one(&mut st).1, None, "a decrease is a reset");
        st.set(id, Num::Uint(9), t0 + Duration::from_secs(5));
        assert_eq!(one(&mut st).1, Some(2.0));
    }

    #[test]
    fn unchanged_values_do_not_count_as_changes() {
        let mut st = SeriesStore::new(10);
        let t0 = Instant::now();
        let g = st.slot("g", "h", MetricKind::Gauge, &[("a", "1")]).unwrap();
        assert_eq!(st.set(g, Num::Float(1.0), t0), Change::Changed);
        assert_eq!(st.set(g, Num::Float(1.0), t0 + Duration::from_secs(1)), Change::Unchanged);
        let c = st.slot(F, "h", MetricKind::Counter, &[]).unwrap();
        st.set(c, Num::Uint(5), t0);
        assert_eq!(st.set(c, Num::Uint(7), t0 + Duration::from_secs(1)), Change::Changed);
        // Same value: the rate moves from 2/s to 0/s, which is a change; then nothing is.
        assert_eq!(st.set(c, Num::Uint(7), t0 + Duration::from_secs(2)), Change::Changed);
        assert_eq!(st.set(c, Num::Uint(7), t0 + Duration::from_secs(3)), Change::Unchanged);
    }

    #[test]
    fn values_are_held_once_between_publishes_and_a_snapshot_keeps_its_own() {
        let mut st = SeriesStore::new(10);
        let t0 = Instant::now();
        let a = st.slot("g", "h", MetricKind::Gauge, &[("a", "1")]).unwrap();
        let b = st.slot("g", "h", MetricKind::Gauge, &[("a", "2")]).unwrap();
        st.set(a, Num::Int(1), t0);
        st.set(b, Num::Int(2), t0);
        let first = st.publish();
        // Nothing changed: the store and both snapshots hold one vector of values.
        assert_eq!(st.set(a, Num::Int(1), t0), Change::Unchanged);
        let second = st.publish();
        assert!(Arc::ptr_eq(&first.samples, &second.samples));
        assert!(st.samples.capacity() == 0, "the store keeps no copy of its own");
        // A change copies them; the snapshots before keep the values they had.
        assert_eq!(st.set(b, Num::Int(20), t0), Change::Changed);
        let third = st.publish();
        assert!(!Arc::ptr_eq(&second.samples, &third.samples));
        let values = |set: &SeriesSet| set.iter().map(|s| s.number().unwrap()).collect::<Vec<_>>();
        assert_eq!(values(&first), [1.0, 2.0]);
        assert_eq!(values(&third), [1.0, 20.0]);
        // A series created after a publish, and one removed, leave the snapshot as it was.
        st.remove("g", &[("a", "1")]);
        let c = st.slot("g", "h", MetricKind::Gauge, &[("a", "3")]).unwrap();
        st.set(c, Num::Int(3), t0);
        assert_eq!(values(&third), [1.0, 20.0]);
        assert_eq!(values(&st.publish()), [3.0, 20.0], "c took a's slot");
    }

    #[test]
    fn published_values_are_in_the_schemas_order_whatever_order_series_came_in() {
        let mut st = SeriesStore::new(100);
        let t0 = Instant::now();
        // Created a row at a time across three families (as a report's processes are), so that in
        // slot order each family's series are scattered.
        let mut ids = Vec::new();
        for row in 0..5u64 {
            for f in ["c_total", "a", "b"] {
                let kind = if f == "c_total" { MetricKind::Counter } else { MetricKind::Gauge };
                let id = st.slot(f, "h", kind, &[("row", &row.to_string())]).unwrap();
                st.set(id, Num::Uint(row * 10 + u64::from(f.as_bytes()[0] - b'a')), t0);
                ids.push((f, row, id));
            }
        }
        let h = st.slot("d", "h", MetricKind::Histogram, &[]).unwrap();
        st.set_hist(h, &[1.0, 2.0], &[3, 4], 5.0, 4);
        let check = |set: &SeriesSet, removed: &[(&str, u64)]| {
            // Each series' value is the next one in the values vector, and its text the next.
            assert_eq!(set.samples.len(), set.schema.len());
            assert!(set.schema.ends.windows(2).all(|w| w[0] & !Schema::HIST <= w[1] & !Schema::HIST));
            let mut want = Vec::new();
            for f in ["a", "b", "c_total"] {
                for row in (0..5u64).filter(|r| !removed.contains(&(f, *r))) {
                    want.push(format!(
                        "{f}{{row=\"{row}\"}} {}",
                        row * 10 + u64::from(f.as_bytes()[0] - b'a')
                    ));
                }
            }
            let got: Vec<String> = set
                .iter()
                .filter(|s| s.family() != "d")
                .map(|s| format!("{}{{{}}} {}", s.family(), s.label_text(), s.number().unwrap()))
                .collect();
            assert_eq!(got, want);
            let hist = set.family("d").next().expect("the histogram");
            assert!(
                matches!(hist.value(), crate::series::ValueRef::Histogram(h) if h.count == 4 && *h.counts == [3, 4])
            );
        };
        let first = st.publish();
        check(&first, &[]);
        assert!(!st.churning && first.samples.capacity() == first.samples.len(), "all new: no room kept");
        // Series removed and created in other families move every value after them: the snapshot
        // before keeps its own, and the next one is in its own schema's order again.
        st.remove("a", &[("row", "1")]);
        st.remove("c_total", &[("row", "3")]);
        let late = st.slot("a", "h", MetricKind::Gauge, &[("row", "9")]).unwrap();
        st.set(late, Num::Uint(99), t0);
        st.remove("a", &[("row", "9")]);
        assert_eq!(ids[0].0, "c_total");
        st.set(ids[0].2, Num::Uint(2), t0);
        let second = st.publish();
        assert!(st.churning && second.samples.capacity() > second.samples.len(), "room for the next ones");
        check(&first, &[]);
        check(&second, &[("a", 1), ("c_total", 3)]);
    }

    #[test]
    fn series_that_come_and_go_without_a_publish_do_not_grow_the_values() {
        let mut st = SeriesStore::new(10);
        let t0 = Instant::now();
        let keep = st.slot("k", "h", MetricKind::Gauge, &[]).unwrap();
        st.set(keep, Num::Uint(7), t0);
        for _ in 0..10_000 {
            // No labels: no label text either, so only the values would pile up.
            let id = st.slot("g", "h", MetricKind::Gauge, &[]).unwrap();
            st.set(id, Num::Uint(1), t0);
            st.remove("g", &[]);
        }
        assert!(
            st.values().len() <= 2 * st.len() + 65,
            "{} values for {} series",
            st.values().len(),
            st.len()
        );
        assert_eq!(st.publish().iter().map(|s| s.number().unwrap()).collect::<Vec<_>>(), [7.0]);
    }

    #[test]
    fn a_store_whose_schema_is_like_no_other_looks_it_up_only_now_and_then() {
        const FAMILY: &str = "store_test_share_back_off";
        let mut other = SeriesStore::new(10);
        other.slot(FAMILY, "h", MetricKind::Gauge, &[("k", "same")]).unwrap();
        let theirs = other.publish().schema;
        let publish_as = |st: &mut SeriesStore, v: &str| {
            st.clear();
            st.slot(FAMILY, "h", MetricKind::Gauge, &[("k", v)]).unwrap();
            st.publish().schema
        };
        let mut st = SeriesStore::new(10);
        assert!(Arc::ptr_eq(&publish_as(&mut st, "same"), &theirs), "found while it looks");
        for i in 0..SHARE_MISSES {
            assert!(!Arc::ptr_eq(&publish_as(&mut st, &format!("unique-{i}")), &theirs));
        }
        // Four misses in a row: the next builds are not looked up, equal or not.
        for _ in 0..SHARE_SKIP {
            assert!(!Arc::ptr_eq(&publish_as(&mut st, "same"), &theirs), "not looked up");
        }
        assert!(Arc::ptr_eq(&publish_as(&mut st, "same"), &theirs), "looked up again, and found");
        assert_eq!((st.share_misses, st.share_skip), (0, 0));
    }

    #[test]
    fn gauges_have_no_rate() {
        let mut st = SeriesStore::new(10);
        let t0 = Instant::now();
        let id = st.slot("g", "h", MetricKind::Gauge, &[]).unwrap();
        st.set(id, Num::Float(1.0), t0);
        st.set(id, Num::Float(3.0), t0 + Duration::from_secs(1));
        assert_eq!(one(&mut st), (Num::Float(3.0), None));
    }

    #[test]
    fn new_series_beyond_the_limit_are_dropped_and_counted() {
        let mut st = SeriesStore::new(2);
        let now = Instant::now();
        for i in 0..5 {
            if let Some(id) = st.slot("g", "h", MetricKind::Gauge, &[("i", &i.to_string())]) {
                st.set(id, Num::Float(1.0), now);
            }
        }
        assert_eq!(st.len(), 2);
        assert_eq!(st.dropped(), 3);
        // An existing series still updates at the limit.
        let id = st.slot("g", "h", MetricKind::Gauge, &[("i", "0")]).unwrap();
        assert_eq!(st.set(id, Num::Float(7.0), now), Change::Changed);
        st.retain_family("g", |l| l.get("i").as_deref() != Some("0"));
        assert_eq!(st.len(), 1);
        assert_eq!(st.set(id, Num::Float(8.0), now), Change::Stale, "a removed series' slot is stale");
    }

    #[test]
    fn label_text_beyond_64_kib_and_families_beyond_the_limit_are_dropped_and_counted() {
        let mut st = SeriesStore::new(100_000);
        // 300 labels of 256 bytes (the most a value keeps): more label text than a slot holds.
        let names: Vec<String> = (0..300).map(|i| format!("l{i}")).collect();
        let value = "v".repeat(256);
        let labels: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), value.as_str())).collect();
        assert!(st.slot("g", "h", MetricKind::Gauge, &labels).is_none());
        assert!(st.slot("g", "h", MetricKind::Gauge, &labels[..200]).is_some(), "51 KiB is held");
        assert_eq!((st.len(), st.dropped()), (1, 1));
        let labels = LabelSet::new([("k", "v")]);
        let kept = (1..MAX_FAMILIES + 10)
            .filter(|i| {
                let family: Arc<str> = Arc::from(format!("f{i}"));
                st.slot_of_set(&family, "h", MetricKind::Gauge, &labels).is_some()
            })
            .count();
        assert_eq!(kept, MAX_FAMILIES - 1, "with g, the store holds MAX_FAMILIES families");
        assert_eq!(st.dropped(), 1 + 10);
        assert_eq!(st.publish().schema.families.len(), MAX_FAMILIES);
    }

    #[test]
    fn a_counters_rate_holds_across_the_wrap_of_the_millisecond_clock() {
        let mut st = SeriesStore::new(10);
        let id = st.slot(F, "h", MetricKind::Counter, &[]).unwrap();
        // Half a second before the slot's clock wraps (2^32 ms, 49.7 days), then 2 s later.
        let before = st.epoch + Duration::from_millis((1 << 32) - 500);
        st.set(id, Num::Uint(100), before);
        st.set(id, Num::Uint(160), before + Duration::from_secs(2));
        assert_eq!(one(&mut st), (Num::Uint(160), Some(30.0)));
        // Two updates in the same millisecond keep the last rate.
        st.set(id, Num::Uint(170), before + Duration::from_micros(2_000_300));
        assert_eq!(one(&mut st).1, Some(30.0));
    }

    /// A sweep is skipped when every live series of the family was set in its round; these are the
    /// cases where the count of series set could go wrong.
    #[test]
    fn a_sweep_after_a_round_that_set_everything_keeps_everything_and_one_that_did_not_still_sweeps() {
        let mut st = SeriesStore::new(10);
        let now = Instant::now();
        let set = |st: &mut SeriesStore, pid: &str| {
            let id = st.slot("p", "h", MetricKind::Gauge, &[("pid", pid)]).unwrap();
            st.set(id, Num::Float(1.0), now);
            // Set twice in one round: counted once.
            st.set(id, Num::Float(1.0), now);
        };
        let round = st.begin_round();
        for pid in ["1", "2", "3"] {
            set(&mut st, pid);
        }
        st.sweep_family("p", round);
        assert_eq!(st.len(), 3, "all set: nothing swept");
        // A round that sets two, removes one of them and creates one: "1" was not set.
        let round = st.begin_round();
        set(&mut st, "2");
        set(&mut st, "3");
        st.remove("p", &[("pid", "3")]);
        set(&mut st, "4");
        st.sweep_family("p", round);
        let left: Vec<String> = st.publish().iter().map(|s| s.label("pid").into_owned()).collect();
        assert_eq!(left, ["2", "4"]);
        // A sweep of an older round than the family's last one still compares each series' round.
        let old = st.begin_round();
        set(&mut st, "2");
        let _ = st.begin_round();
        set(&mut st, "4");
        st.sweep_family("p", old);
        assert_eq!(st.len(), 2, "both set since the old round began");
        // Two families in one pass: each loses what the round did not set.
        let q = st.slot("q", "h", MetricKind::Gauge, &[("pid", "9")]).unwrap();
        st.set(q, Num::Float(1.0), now);
        let round = st.begin_round();
        set(&mut st, "4");
        st.sweep_families(&["p", "q", "absent"], round);
        let left: Vec<String> =
            st.publish().iter().map(|s| format!("{}{}", s.family(), s.label("pid"))).collect();
        assert_eq!(left, ["p4"]);
    }

    #[test]
    fn a_sweep_drops_what_a_round_did_not_set() {
        let mut st = SeriesStore::new(10);
        let now = Instant::now();
        st.begin_round();
        for i in ["1", "2", "3"] {
            let id = st.slot("p", "h", MetricKind::Gauge, &[("pid", i)]).unwrap();
            st.set(id, Num::Float(1.0), now);
        }
        let id = st.slot("other", "h", MetricKind::Gauge, &[]).unwrap();
        st.set(id, Num::Float(1.0), now);
        let round = st.begin_round();
        let id = st.slot("p", "h", MetricKind::Gauge, &[("pid", "2")]).unwrap();
        st.set(id, Num::Float(2.0), now);
        st.sweep_family("p", round);
        let left: Vec<String> =
            st.publish().iter().map(|s| format!("{}{:?}", s.family(), s.labels().get("pid"))).collect();
        assert_eq!(left, ["otherNone", "pSome(\"2\")"]);
        assert_eq!(st.len(), 2);
    }

    #[test]
    fn targets_with_the_same_series_share_one_schema_and_keep_their_own_values() {
        // Family names of this test alone: other tests' stores share the process's table.
        let fill = |st: &mut SeriesStore, name: &str, v: u64| {
            for fam in ["shared_schema_a", "shared_schema_b"] {
                let id = st.slot(fam, "h", MetricKind::Gauge, &[("name", name)]).unwrap();
                st.set(id, Num::Uint(v), Instant::now());
            }
            st.publish()
        };
        let (mut one, mut two, mut other) =
            (SeriesStore::new(10), SeriesStore::new(10), SeriesStore::new(10));
        let (a, b) = (fill(&mut one, "init", 1), fill(&mut two, "init", 2));
        assert!(Arc::ptr_eq(&a.schema, &b.schema), "the same series: one schema");
        let c = fill(&mut other, "sh", 3);
        assert!(!Arc::ptr_eq(&a.schema, &c.schema), "other label text: a schema of its own");
        let values = |set: &SeriesSet| set.iter().map(|s| s.number()).collect::<Vec<_>>();
        assert_eq!((values(&a), values(&b)), (vec![Some(1.0); 2], vec![Some(2.0); 2]));
        // A new series in one target: that target gets a schema of its own, and its slots (whose
        // text is in the shared arena) still find their series.
        let id = one.slot("shared_schema_c", "h", MetricKind::Gauge, &[]).unwrap();
        one.set(id, Num::Uint(9), Instant::now());
        let grown = one.publish();
        assert!(!Arc::ptr_eq(&grown.schema, &b.schema) && grown.schema.len() == 3);
        let again = one.slot("shared_schema_a", "h", MetricKind::Gauge, &[("name", "init")]);
        assert_eq!(one.len(), 3, "found, not created again: {again:?}");
        assert!(Arc::ptr_eq(&fill(&mut two, "init", 4).schema, &b.schema), "unchanged: still shared");
    }

    #[test]
    fn a_store_of_many_families_finds_each_by_name() {
        let mut st = SeriesStore::new(1000);
        let names: Vec<&'static str> =
            (0..3 * FEW_FAMILIES).map(|i| &*Box::leak(format!("many_{i}").into_boxed_str())).collect();
        for (i, name) in names.iter().enumerate() {
            let id = st.slot(name, "h", MetricKind::Gauge, &[]).unwrap();
            st.set(id, Num::Uint(i as u64), Instant::now());
        }
        for name in &names {
            st.slot(name, "h", MetricKind::Gauge, &[]).unwrap();
        }
        assert_eq!((st.len(), st.families.len()), (names.len(), names.len()));
        st.remove("many_3", &[]);
        st.remove("many_40", &[]);
        assert_eq!(st.len(), names.len() - 2);
    }

    #[test]
    fn label_text_is_one_buffer_in_render_order_and_schemas_are_shared_across_publishes() {
        let mut st = SeriesStore::new(100);
        let now = Instant::now();
        let a = st.slot("cpu", "h", MetricKind::Gauge, &[("pid", "1"), ("name", "init")]).unwrap();
        let b = st.slot("mem", "h", MetricKind::Gauge, &[("pid", "1"), ("name", "init")]).unwrap();
        st.set(a, Num::Float(1.0), now);
        st.set(b, Num::Uint(4096), now);
        let first = st.publish();
        assert_eq!(&*first.schema.text, r#"pid="1",name="init"pid="1",name="init""#);
        let l: Vec<LabelSet> = first.iter().map(|s| s.labels()).collect();
        assert_eq!(l[0], l[1]);
        assert_eq!(first.iter().map(|s| s.label_text()).collect::<Vec<_>>(), [r#"pid="1",name="init""#; 2]);
        st.set(a, Num::Float(2.0), now);
        let second = st.publish();
        assert!(Arc::ptr_eq(&first.schema, &second.schema), "same series: the schema is shared");
        assert_eq!(second.family("cpu").next().unwrap().number(), Some(2.0));
        assert_eq!(
            first.family("cpu").next().unwrap().number(),
            Some(1.0),
            "an old snapshot keeps its values"
        );
        st.slot("new", "h", MetricKind::Gauge, &[]).unwrap();
        assert!(!Arc::ptr_eq(&second.schema, &st.publish().schema));
    }

    #[test]
    fn labels_are_cut_and_a_cleared_store_starts_afresh() {
        let mut st = SeriesStore::new(10);
        let now = Instant::now();
        let long = "é".repeat(300);
        let id = st.slot("g", "h", MetricKind::Gauge, &[("name", &long)]).unwrap();
        st.set(id, Num::Float(1.0), now);
        let again = st.slot("g", "h", MetricKind::Gauge, &[("name", &long)]).unwrap();
        assert_eq!(id, again, "the cut value finds the same series");
        let set = st.publish();
        let v = set.iter().next().unwrap().label("name").into_owned();
        assert!(v.len() <= MAX_LABEL_LEN && v.chars().all(|c| c == 'é'));
        st.clear();
        assert!(st.is_empty() && st.publish().is_empty());
        assert_eq!(st.set(id, Num::Float(2.0), now), Change::Stale);
    }

    #[test]
    fn a_label_with_an_empty_value_is_left_out_of_the_series_and_its_key() {
        let mut st = SeriesStore::new(10);
        let now = Instant::now();
        let a = st.slot("smon_value", "h", MetricKind::Gauge, &[("name", "up"), ("index", "")]).unwrap();
        st.set(a, Num::Uint(1), now);
        // The same series, however the labels are given: with the empty one, or without it.
        assert_eq!(st.slot("smon_value", "h", MetricKind::Gauge, &[("name", "up")]), Some(a));
        let b = st.slot("smon_value", "h", MetricKind::Gauge, &[("index", ""), ("name", "x")]).unwrap();
        st.set(b, Num::Uint(2), now);
        assert_eq!(
            published(&mut st),
            [r#"smon_value{name="up"} Some(1.0)"#, r#"smon_value{name="x"} Some(2.0)"#]
        );
        st.remove("smon_value", &[("name", "x"), ("index", "")]);
        assert_eq!(published(&mut st), [r#"smon_value{name="up"} Some(1.0)"#]);
    }

    #[test]
    fn histograms_share_unchanged_bounds() {
        let mut st = SeriesStore::new(10);
        let id = st.slot("lat_seconds", "h", MetricKind::Histogram, &[]).unwrap();
        assert_eq!(st.set_hist(id, &[0.5, 1.0], &[1, 3], 2.0, 4), Change::Changed);
        let a = st.publish();
        assert_eq!(st.set_hist(id, &[0.5, 1.0], &[1, 3], 2.0, 4), Change::Unchanged);
        assert_eq!(st.set_hist(id, &[0.5, 1.0], &[2, 3], 2.5, 5), Change::Changed);
        let b = st.publish();
        assert!(Arc::ptr_eq(&a.hists[0].1.bounds, &b.hists[0].1.bounds));
        assert_eq!(&*b.hists[0].1.counts, &[2, 3]);
    }

    /// The store's series as `family{labels} value`, sorted, from a publish.
    fn published(st: &mut SeriesStore) -> Vec<String> {
        st.publish().lines()
    }

    #[test]
    fn series_created_between_builds_are_found_and_old_snapshots_keep_their_labels() {
        let mut st = SeriesStore::new(100);
        let now = Instant::now();
        let a = st.slot("g", "h", MetricKind::Gauge, &[("k", "a")]).unwrap();
        st.set(a, Num::Int(1), now);
        let old = st.publish();
        // One series in the arena, one in the pending text, one removed from the arena.
        let b = st.slot("g", "h", MetricKind::Gauge, &[("k", "b")]).unwrap();
        st.set(b, Num::Int(2), now);
        assert_eq!(st.slot("g", "h", MetricKind::Gauge, &[("k", "a")]), Some(a), "found in the arena");
        assert_eq!(st.slot("g", "h", MetricKind::Gauge, &[("k", "b")]), Some(b), "found in the pending text");
        st.remove("g", &[("k", "a")]);
        assert_eq!(published(&mut st), [r#"g{k="b"} Some(2.0)"#]);
        assert_eq!(st.slot("g", "h", MetricKind::Gauge, &[("k", "b")]), Some(b), "found in the new arena");
        assert_eq!(&*st.arena, r#"k="b""#, "the removed series' text is gone");
        let c = st.slot("g", "h", MetricKind::Gauge, &[("k", "a")]).unwrap();
        assert_ne!(c, a, "a new series in the old slot");
        assert_eq!(st.set(a, Num::Int(9), now), Change::Stale);
        let labels: Vec<String> = old.iter().map(|s| s.label_text().to_owned()).collect();
        assert_eq!(labels, [r#"k="a""#], "an old snapshot reads its own arena");
        // A label set kept beyond its snapshot is detached from the arena.
        let set = st.publish();
        let kept: Vec<LabelSet> = set.iter().map(|s| s.labels()).collect();
        assert!(LabelSet::ptr_eq(&kept[0], &set.iter().next().unwrap().labels()), "one arena per schema");
        let detached = kept[0].detached();
        assert_eq!(detached, kept[0]);
        assert!(!LabelSet::ptr_eq(&detached, &kept[0]));
        assert!(LabelSet::ptr_eq(&detached.detached(), &detached), "already its own text");
    }

    #[test]
    fn churn_without_a_publish_keeps_the_label_text_bounded() {
        let mut st = SeriesStore::new(10);
        let now = Instant::now();
        let long = "x".repeat(200);
        for i in 0..20_000u32 {
            let n = i.to_string();
            let id = st.slot("g", "h", MetricKind::Gauge, &[("n", &n), ("pad", &long)]).unwrap();
            st.set(id, Num::Uint(u64::from(i)), now);
            st.remove("g", &[("n", &n), ("pad", &long)]);
            assert!(st.pending.len() <= MAX_PENDING + 300, "pending text grew to {}", st.pending.len());
        }
        assert!(st.is_empty());
        let id = st.slot("g", "h", MetricKind::Gauge, &[("n", "last")]).unwrap();
        st.set(id, Num::Uint(7), now);
        assert_eq!(published(&mut st), [r#"g{n="last"} Some(7.0)"#]);
    }

    proptest::proptest! {
        /// Series created, set, removed and published in any order: every publish lists what a plain
        /// map of the same operations holds, each series with its own labels and value.
        #[test]
        fn any_churn_publishes_what_a_map_holds(ops in proptest::collection::vec((0u8..4, 0u8..6, 0u8..3), 1..200)) {
            let mut st = SeriesStore::new(100);
            let now = Instant::now();
            let mut model = std::collections::BTreeMap::new();
            for (i, (op, key, fam)) in ops.into_iter().enumerate() {
                let family = ["a", "b", "c"][usize::from(fam)];
                let value = key.to_string();
                let labels = [("k", value.as_str()), ("esc", if key % 2 == 0 { "q\"\n" } else { "" })];
                match op {
                    0 | 1 => {
                        let id = st.slot(family, "h", MetricKind::Gauge, &labels).unwrap();
                        st.set(id, Num::Uint(i as u64), now);
                        model.insert((family, key), i);
                    }
                    2 => {
                        st.remove(family, &labels);
                        model.remove(&(family, key));
                    }
                    _ => {}
                }
                if op == 3 || i % 7 == 0 {
                    let mut want: Vec<String> = model
                        .iter()
                        .map(|(&(f, k), &v)| {
                            // An empty value is no label.
                            let esc = if k % 2 == 0 { r#",esc="q\"\n""# } else { "" };
                            format!(r#"{f}{{k="{k}"{esc}}} Some({v}.0)"#)
                        })
                        .collect();
                    want.sort();
                    proptest::prop_assert_eq!(published(&mut st), want);
                }
            }
        }
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
        assert_eq!(std::mem::size_of::<Unwrap32>(), 8);
    }
}
