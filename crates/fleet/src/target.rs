//! One target's side of the registry: a [`Publisher`] owns the target's series store and its
//! connection state, and publishes a new [`TargetSnapshot`] when something changed, at most a few
//! times a second however fast the peer sends.

use std::collections::HashSet;
use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

// tokio's clock, so that a replay on a paused runtime (`telemon export`) publishes on recorded time.
use tokio::time::Instant;

use crate::model::{ErrorKind, EventRecord, MetricKind, Protocol, TargetSnapshot, TargetState, Value};
use crate::recording::Recording;
use crate::registry::{Entry, Registry};
use crate::series::{LabelPairs, Num};
use crate::store::{Change, SeriesStore, SlotId, Stamp};
use telemon_capture::Tap;

/// Events kept per target for display: twice the eight `telemon top` shows. Each publication that
/// brings an event copies the list (an interpreter sends a notification about once a second).
pub const MAX_EVENTS: usize = 16;
pub use crate::store::MAX_LABEL_LEN;
/// The shortest pause between two publications of one target's cache.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(200);

/// A collection failure: what kind, and a one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The kind, counted in `telemon_target_errors_total`.
    pub kind: ErrorKind,
    /// What happened.
    pub message: String,
}

impl Failure {
    /// A failure of `kind`.
    pub fn new(kind: ErrorKind, message: impl Display) -> Self {
        Failure { kind, message: message.to_string() }
    }
}

/// Labels of one series, built from static names and peer-given values.
pub type Labels = Vec<(Arc<str>, Arc<str>)>;

/// Makes an owned label pair; the value is cut to [`MAX_LABEL_LEN`] bytes (see
/// [`Publisher::put`], which needs no owned labels).
pub fn label(name: &'static str, value: &str) -> (Arc<str>, Arc<str>) {
    (Arc::from(name), Arc::from(crate::store::cut_label(value)))
}

/// How often a target whose values arrive but do not change is published anyway, so that its
/// last-update time stays current.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// Owns one target's cache and publishes it into the [`Registry`].
///
/// A pointer to its state: a collector's future holds its publisher across every await and an `async
/// fn` can keep an argument twice, so a small handle keeps each target's task small.
#[derive(Debug)]
pub struct Publisher(Box<PublisherState>);

/// What a [`Publisher`] holds (its fields are private; use the publisher's methods).
#[derive(Debug)]
pub struct PublisherState {
    registry: Registry,
    /// Its place in the registry, which each publication replaces the target in.
    entry: Entry,
    /// The target as last published, shared with the registry (one copy, not two, per target); a
    /// change makes the publisher's own copy ([`Publisher::meta_mut`]).
    meta: Arc<TargetSnapshot>,
    store: SeriesStore,
    /// Events since the last publish; the ones before are in `meta.events` only.
    events: Vec<EventRecord>,
    /// Something a view shows changed since the last publication.
    dirty: bool,
    /// Values arrived since the last publication (changed or not).
    touched: bool,
    /// The time of the values being set now: read once per batch, not once per value.
    now: Option<Stamp>,
    last_publish: Option<Instant>,
    remove_on_drop: bool,
    /// Publish each change at once, with no [`PUBLISH_EVERY`] pause (see [`Publisher::publish_every_change`]):
    /// then `Some`, with the series set since the last publication (boxed: only a replay has one, and
    /// every live target would carry the set's 48 bytes).
    #[allow(clippy::box_collection)]
    every_change: Option<Box<HashSet<SlotId>>>,
    /// Bytes read from the target, counted by the collector's connection (see [`Publisher::received`]).
    received: Arc<AtomicU64>,
    /// Called after each publication (see [`Publisher::on_publish`]).
    on_publish: Option<OnPublish>,
    /// Where the target's connections are recorded, and as which link type (see [`Publisher::tap`]).
    recording: Option<(Arc<Recording>, u16)>,
}

/// A callback run after each publication, with the registry published into.
pub struct OnPublish(Box<dyn FnMut(&Registry) + Send>);

impl std::fmt::Debug for OnPublish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnPublish")
    }
}

impl Publisher {
    /// Registers a new target (state `connecting`) and returns its publisher.
    pub fn new(
        registry: &Registry,
        name: impl Into<Arc<str>>,
        protocol: Protocol,
        labels: impl Into<Arc<[(String, String)]>>,
        series_limit: usize,
    ) -> Self {
        let meta = Arc::new(TargetSnapshot::new(name, protocol, labels));
        let entry = registry.register(meta.clone());
        Publisher::registered(registry, entry, meta, series_limit)
    }

    fn registered(registry: &Registry, entry: Entry, meta: Arc<TargetSnapshot>, series_limit: usize) -> Self {
        crate::heap::note_change();
        Publisher(Box::new(PublisherState {
            registry: registry.clone(),
            entry,
            meta,
            store: SeriesStore::new(series_limit),
            events: Vec::new(),
            dirty: false,
            touched: false,
            now: None,
            last_publish: None,
            remove_on_drop: false,
            every_change: None,
            received: Arc::default(),
            on_publish: None,
            recording: None,
        }))
    }

    /// Registers a target found at run time under a name no other target holds: `None` when the name
    /// is taken by an entry that `replace` does not allow to be replaced (the check and the insert
    /// are one step, see [`Registry::insert_unique`]).
    pub fn try_new(
        registry: &Registry,
        name: impl Into<Arc<str>>,
        protocol: Protocol,
        labels: impl Into<Arc<[(String, String)]>>,
        series_limit: usize,
        replace: impl FnOnce(&TargetSnapshot) -> bool,
    ) -> Option<Self> {
        let meta = Arc::new(TargetSnapshot::new(name, protocol, labels));
        let entry = registry.claim(meta.clone(), replace)?;
        Some(Publisher::registered(registry, entry, meta, series_limit))
    }

    /// Removes the target from the registry when this publisher is dropped (targets found at run
    /// time, and probes).
    pub fn remove_on_drop(mut self) -> Self {
        self.remove_on_drop = true;
        self
    }

    /// Records the target's connections in `recording` (when there is one) as `link_type`.
    pub fn recording(mut self, recording: Option<Arc<Recording>>, link_type: u16) -> Self {
        self.recording = recording.map(|r| (r, link_type));
        self
    }

    /// What wraps a connection to the target at `address` in a tap that records it when the target is
    /// recorded ([`Publisher::recording`]) and counts what it reads in [`Publisher::received`]: owned,
    /// so that a connect future holding it does not hold the publisher.
    pub fn tapper<S>(&self, address: &str) -> impl FnOnce(S) -> Tap<S> + Send + Sync + 'static {
        let (name, address, received) = (self.meta.name.clone(), address.to_owned(), self.received.clone());
        let recording = self.recording.clone();
        move |stream| match recording {
            Some((r, link)) => crate::recording::tap(Some(&*r), stream, &name, link, &address, received),
            None => crate::recording::tap(None, stream, &name, 0, &address, received),
        }
    }

    /// The target's state to change: the registry's copy stays as it was published.
    fn meta_mut(&mut self) -> &mut TargetSnapshot {
        Arc::make_mut(&mut self.meta)
    }

    /// The target's name.
    pub fn name(&self) -> &Arc<str> {
        &self.meta.name
    }

    /// The counter of bytes read from the target: a collector's connection adds to it as it reads, and
    /// each publication shows it as `telemon_target_received_bytes_total`.
    pub fn received(&self) -> &Arc<AtomicU64> {
        &self.received
    }

    /// Counts the bytes read from the target in `received` from now on (a connection accepted before
    /// its target had a publisher).
    pub fn count_received_in(&mut self, received: Arc<AtomicU64>) {
        self.received = received;
    }

    /// The target's cap on series.
    pub fn series_limit(&self) -> usize {
        self.store.limit()
    }

    /// The current connection state.
    pub fn state(&self) -> TargetState {
        self.meta.state
    }

    /// Successful connections so far.
    pub fn connects(&self) -> u64 {
        self.meta.connects
    }

    /// Connected: counts the connection, forgets the series of the last one (a peer restart is a
    /// real reset) and publishes.
    pub fn up(&mut self) {
        crate::heap::note_change();
        let meta = self.meta_mut();
        meta.state = TargetState::Up;
        meta.connects += 1;
        meta.last_error = None;
        self.store.clear();
        self.flush();
    }

    /// Disconnected because of `failure`: counts it, drops the series and publishes.
    pub fn down(&mut self, failure: &Failure) {
        crate::heap::note_change();
        let meta = self.meta_mut();
        meta.state = TargetState::Down;
        meta.errors.bump(failure.kind);
        meta.last_error = Some(Arc::from(failure.message.as_str()));
        self.store.clear();
        self.flush();
    }

    /// An error that does not end the connection (a bad message, a failed request): counted and
    /// shown, published with the next flush.
    pub fn error(&mut self, failure: &Failure) {
        tracing::debug!(target_name = %self.meta.name, kind = failure.kind.as_str(), "{}", failure.message);
        let meta = self.meta_mut();
        meta.errors.bump(failure.kind);
        meta.last_error = Some(Arc::from(failure.message.as_str()));
        self.dirty = true;
    }

    /// The values set from now on arrived now: the clock is read again at the next one. Call it as
    /// each message is handled, so that a counter's rate is taken over the times its values arrived,
    /// not from the start of an earlier batch that is held back for publication.
    pub fn arrived(&mut self) {
        self.now = None;
    }

    fn now(&mut self) -> Stamp {
        let state = &mut *self.0;
        *state.now.get_or_insert_with(|| state.store.stamp(Instant::now()))
    }

    fn changed(&mut self, change: Change) -> bool {
        self.touched = true;
        match change {
            Change::Changed => {
                self.dirty = true;
                true
            }
            Change::Unchanged => true,
            Change::Stale => false,
        }
    }

    /// The slot of the series `family{labels}`, created when new (see [`SeriesStore::slot`]);
    /// `None` when the target is at its series limit. Keep it and update with
    /// [`Publisher::put_slot`] to skip the lookup.
    pub fn slot(
        &mut self,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(&str, &str)],
    ) -> Option<SlotId> {
        let before = self.store.len();
        let slot = self.store.slot(family, help, kind, labels);
        if self.store.len() != before || slot.is_none() {
            self.dirty = true;
        }
        slot
    }

    /// Sets the value of a slot from [`Publisher::slot`]; `false` when the slot is stale (the
    /// series was removed, or the target reconnected): look it up again.
    pub fn put_slot(&mut self, slot: SlotId, value: impl Into<Num>) -> bool {
        self.before_set(slot);
        let now = self.now();
        let change = self.store.set_at(slot, value.into(), now);
        self.changed(change)
    }

    /// Sets one series' value, looking the series up by its borrowed labels (no allocation when it
    /// exists).
    pub fn put(
        &mut self,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(&str, &str)],
        value: impl Into<Num>,
    ) {
        if let Some(slot) = self.slot(family, help, kind, labels) {
            self.put_slot(slot, value);
        }
    }

    /// Sets one series' value like [`Publisher::put`], with its slot kept in `kept` from one call to
    /// the next: the series is looked up only the first time, and again after it was removed. `kept`
    /// must always be used for the same `family{labels}`.
    pub fn put_kept(
        &mut self,
        kept: &mut Option<SlotId>,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(&str, &str)],
        value: impl Into<Num>,
    ) {
        let value = value.into();
        if kept.is_some_and(|slot| self.put_slot(slot, value)) {
            return;
        }
        *kept = self.slot(family, help, kind, labels);
        if let Some(slot) = *kept {
            self.put_slot(slot, value);
        }
    }

    /// Sets a histogram series: cumulative `counts` per upper bound in `bounds`, the sum and the
    /// count of the observations.
    #[allow(clippy::too_many_arguments)]
    pub fn put_histogram(
        &mut self,
        family: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
        count: u64,
    ) {
        if let Some(slot) = self.slot(family, help, MetricKind::Histogram, labels) {
            self.before_set(slot);
            let change = self.store.set_hist(slot, bounds, counts, sum, count);
            self.changed(change);
        }
    }

    /// Sets one series' value from owned labels (see [`Publisher::put`], which needs none).
    pub fn set(
        &mut self,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: Labels,
        value: f64,
    ) {
        self.set_value(family, help, kind, labels, Value::Number(value));
    }

    /// Sets one series to any [`Value`] (histograms), from owned labels.
    pub fn set_value(
        &mut self,
        family: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: Labels,
        value: Value,
    ) {
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (&**k, &**v)).collect();
        match value {
            Value::Number(v) => self.put(family, help, kind, &labels, v),
            Value::Histogram { buckets, sum, count } => {
                let bounds: Vec<f64> = buckets.iter().map(|b| b.0).collect();
                let counts: Vec<u64> = buckets.iter().map(|b| b.1).collect();
                self.put_histogram(family, help, &labels, &bounds, &counts, sum, count);
            }
        }
    }

    /// Removes one series.
    pub fn remove(&mut self, family: &str, labels: &[(&str, &str)]) {
        let before = self.store.len();
        self.store.remove(family, labels);
        self.dirty |= self.store.len() != before;
    }

    /// Starts a round of updates; after setting what a report lists, [`Publisher::sweep_families`]
    /// with the round removes what it no longer lists (an exited process, a closed channel).
    pub fn begin_round(&mut self) -> u64 {
        self.store.begin_round()
    }

    /// Removes every series of the `families` not set since `round` began, in one pass.
    pub fn sweep_families(&mut self, families: &[&str], round: u64) {
        let before = self.store.len();
        self.store.sweep_families(families, round);
        self.dirty |= self.store.len() != before;
    }

    /// Removes every series of `family` whose labels fail `keep`.
    pub fn retain_family(&mut self, family: &str, keep: impl FnMut(LabelPairs<'_>) -> bool) {
        let before = self.store.len();
        self.store.retain_family(family, keep);
        self.dirty |= self.store.len() != before;
    }

    /// Records an event for display (bounded to [`MAX_EVENTS`]). A text equal to one of the events
    /// kept shares its copy: a peer's notifications mostly repeat (an interpreter's compactions,
    /// resizes and signals), and their texts were about a kilobyte per interpreter.
    pub fn event(&mut self, text: impl AsRef<str> + Into<Arc<str>>) {
        let kept =
            self.events.iter().rev().chain(self.meta.events.iter().rev()).find(|e| *e.text == *text.as_ref());
        let text = match kept {
            Some(e) => e.text.clone(),
            None => text.into(),
        };
        if self.events.len() == MAX_EVENTS {
            self.events.remove(0);
        }
        self.events.push(EventRecord { at: SystemTime::now(), text });
        self.dirty = true;
    }

    /// Publishes every change as soon as it is made, instead of at most one publication per
    /// [`PUBLISH_EVERY`]: what a replay of a recording needs (`telemon export`), where every recorded
    /// sample is a point of its own however fast it arrived. A live target keeps the pause.
    ///
    /// A series set a second time since the last publication (the next sample of a stream that sent
    /// several in one read) first publishes the one before, so that each value is seen.
    pub fn publish_every_change(&mut self) {
        self.every_change = Some(Box::default());
    }

    /// In [`Publisher::publish_every_change`] mode: publishes what is held when `slot` was already set
    /// since the last publication.
    fn before_set(&mut self, slot: SlotId) {
        let Some(set) = self.0.every_change.as_mut() else { return };
        if !set.insert(slot) && self.dirty {
            self.flush();
            if let Some(set) = self.0.every_change.as_mut() {
                set.insert(slot);
            }
        }
    }

    /// Runs `f` after each publication, with the registry: a replay (`telemon export`) renders the
    /// fleet there, so that every publication is seen, however many a burst of buffered bytes makes
    /// before the task yields (a watch on the registry would see only the last of them).
    pub fn on_publish(&mut self, f: impl FnMut(&Registry) + Send + 'static) {
        self.on_publish = Some(OnPublish(Box::new(f)));
    }

    /// The shortest pause between two publications.
    fn pause(&self) -> Duration {
        if self.every_change.is_some() {
            Duration::ZERO
        } else {
            PUBLISH_EVERY
        }
    }

    /// Publishes if something changed and the last publication is at least [`PUBLISH_EVERY`] old
    /// (or, when values arrived unchanged, [`HEARTBEAT`] old); call [`Publisher::flush`] on a timer
    /// as well so the last change is never held back.
    pub fn maybe_flush(&mut self) {
        self.now = None;
        let since = self.last_publish.map(|t| t.elapsed());
        if (self.dirty && since.is_none_or(|s| s >= self.pause()))
            || (self.touched && since.is_none_or(|s| s >= HEARTBEAT))
        {
            self.flush();
        }
    }

    /// When the changes held back by [`Publisher::maybe_flush`] are due: `None` when nothing is held.
    pub fn flush_due(&self) -> Option<tokio::time::Instant> {
        if !self.dirty {
            return None;
        }
        Some(self.last_publish.map_or_else(Instant::now, |t| t + self.pause()))
    }

    /// Publishes the cache now if anything changed since the last publication.
    pub fn flush_if_dirty(&mut self) {
        if self.dirty {
            self.flush();
        }
    }

    /// Publishes the cache now.
    pub fn flush(&mut self) {
        self.now = None;
        let state = &mut *self.0;
        // The registry holds the last publication: this is its copy, made once per publication.
        let meta = Arc::make_mut(&mut state.meta);
        if state.touched {
            meta.last_update = Some(SystemTime::now());
        }
        if !state.events.is_empty() {
            // The last MAX_EVENTS of the published ones and the new ones; the new ones' vector is
            // given back, as most publishes have none.
            let new = std::mem::take(&mut state.events);
            let old = &meta.events;
            let kept = old.len().min(MAX_EVENTS - new.len());
            meta.events = old[old.len() - kept..].iter().cloned().chain(new).collect();
        }
        meta.dropped_series = state.store.dropped();
        meta.received_bytes = state.received.load(Ordering::Relaxed);
        meta.series = state.store.publish();
        meta.changed();
        if state.registry.pieces_at_publication() && crate::render::keeps_piece(meta) {
            // Rendered here, on the collector's thread: a scrape then copies it.
            meta.piece();
        }
        self.registry.publish(&self.entry, self.meta.clone());
        self.dirty = false;
        self.touched = false;
        self.last_publish = Some(Instant::now());
        if let Some(set) = self.0.every_change.as_mut() {
            set.clear();
        }
        let PublisherState { on_publish, registry, .. } = &mut *self.0;
        if let Some(f) = on_publish {
            (f.0)(registry);
        }
    }
}

impl std::ops::Deref for Publisher {
    type Target = PublisherState;
    fn deref(&self) -> &PublisherState {
        &self.0
    }
}

impl std::ops::DerefMut for Publisher {
    fn deref_mut(&mut self) -> &mut PublisherState {
        &mut self.0
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        crate::heap::note_change();
        if self.remove_on_drop {
            self.registry.remove_entry(&self.entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_and_the_publisher_share_one_copy_of_the_target() {
        let reg = Registry::new();
        let mut p = Publisher::new(&reg, "t", Protocol::SMON, vec![], 10);
        p.up();
        p.set("g", "h", MetricKind::Gauge, vec![], 1.0);
        p.flush();
        assert!(Arc::ptr_eq(&reg.snapshot().targets[0], &p.meta), "one copy once published");
        // A change is the publisher's own until it publishes it.
        p.error(&Failure::new(ErrorKind::Decode, "bad"));
        let published = reg.snapshot();
        assert!(!Arc::ptr_eq(&published.targets[0], &p.meta));
        assert_eq!(published.targets[0].errors.get(ErrorKind::Decode), 0);
        p.flush();
        let t = &reg.snapshot().targets[0];
        assert!(Arc::ptr_eq(t, &p.meta));
        assert_eq!(t.errors.get(ErrorKind::Decode), 1);
        assert_eq!(t.series.len(), 1, "with its series");
    }

    #[test]
    fn publishing_every_change_publishes_each_value_of_a_series_set_twice_between_flushes() {
        let reg = Registry::new();
        let mut p = Publisher::new(&reg, "t", Protocol::SMON, vec![], 10);
        p.publish_every_change();
        let seen: Arc<std::sync::Mutex<Vec<f64>>> = Arc::default();
        let sink = seen.clone();
        p.on_publish(move |reg| {
            let t = &reg.snapshot().targets[0];
            sink.lock().unwrap().push(t.series.family("g").next().and_then(|s| s.number()).unwrap_or(-1.0));
        });
        p.up();
        seen.lock().unwrap().clear();
        // Three samples of two series that arrived in one read: a publication before each series is
        // set again, then the one the collector makes after the read.
        let labels = [("i", "0")];
        for v in [1u64, 2, 3] {
            p.put("g", "h", MetricKind::Gauge, &labels, v);
            p.put("other", "h", MetricKind::Gauge, &labels, v);
        }
        p.maybe_flush();
        assert_eq!(*seen.lock().unwrap(), [1.0, 2.0, 3.0]);
        // Unchanged values publish nothing more.
        p.put("g", "h", MetricKind::Gauge, &labels, 3u64);
        p.put("g", "h", MetricKind::Gauge, &labels, 3u64);
        p.maybe_flush();
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_publisher_whose_name_another_target_took_neither_overwrites_nor_removes_it() {
        let reg = Registry::new();
        let down = |old: &TargetSnapshot| old.state == TargetState::Down;
        let mut first =
            Publisher::try_new(&reg, "x", Protocol::MONO, vec![], 10, down).unwrap().remove_on_drop();
        first.down(&Failure::new(ErrorKind::Connect, "gone"));
        let mut second =
            Publisher::try_new(&reg, "x", Protocol::MONO, vec![], 10, down).expect("a down name is free");
        second.up();
        second.flush();
        // The first one's publications go to its own entry, which the registry no longer holds.
        first.event("late");
        first.flush();
        assert!(Arc::ptr_eq(&reg.snapshot().targets[0], &second.meta));
        drop(first);
        let snap = reg.snapshot();
        assert!(snap.get("x").is_some_and(|t| t.is_up()), "still the second one");
        // Publishing in place: the registry holds one entry per name, whatever the publications.
        for _ in 0..3 {
            second.event("e");
            second.flush();
        }
        assert_eq!(reg.snapshot().targets.len(), 1);
        drop(second);
        assert!(reg.snapshot().get("x").is_some(), "not asked to remove itself");
    }

    #[test]
    fn publishes_state_series_and_events_and_removes_itself_when_asked() {
        let reg = Registry::new();
        let mut p = Publisher::new(&reg, "t", Protocol::SMON, vec![], 10).remove_on_drop();
        assert_eq!(reg.snapshot().get("t").unwrap().state, TargetState::Connecting);
        p.up();
        p.set("g", "h", MetricKind::Gauge, vec![label("name", &"x".repeat(300))], 1.0);
        p.event("hello");
        p.flush_if_dirty();
        let snap = reg.snapshot();
        let t = snap.get("t").unwrap();
        assert!(t.is_up());
        assert_eq!(t.connects, 1);
        assert_eq!(t.series.len(), 1);
        assert_eq!(t.series.iter().next().unwrap().label("name").len(), MAX_LABEL_LEN);
        assert_eq!(&*t.events[0].text, "hello");
        p.down(&Failure::new(ErrorKind::Connect, "gone"));
        let snap = reg.snapshot();
        let t = snap.get("t").unwrap();
        assert_eq!((t.state, t.series.len(), t.errors.get(ErrorKind::Connect)), (TargetState::Down, 0, 1));
        assert_eq!(t.last_error.as_deref(), Some("gone"));
        assert!(t.events.len() == 1, "events are kept across publishes");
        drop(p);
        assert!(reg.snapshot().get("t").is_none());
    }

    #[test]
    fn the_last_events_are_kept_in_order_across_publishes() {
        let reg = Registry::new();
        let mut p = Publisher::new(&reg, "t", Protocol::HMON, vec![], 10);
        let texts = |reg: &Registry| -> Vec<String> {
            reg.snapshot().get("t").unwrap().events.iter().map(|e| e.text.to_string()).collect()
        };
        for i in 0..10 {
            p.event(format!("{i}"));
        }
        p.flush();
        assert_eq!(texts(&reg), (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
        // 60 more in one publish, then 70 more in another (more than MAX_EVENTS between publishes).
        for i in 10..70 {
            p.event(format!("{i}"));
        }
        p.flush();
        assert_eq!(texts(&reg), (70 - MAX_EVENTS..70).map(|i| i.to_string()).collect::<Vec<_>>());
        for i in 70..140 {
            p.event(format!("{i}"));
        }
        p.flush();
        assert_eq!(texts(&reg), (140 - MAX_EVENTS..140).map(|i| i.to_string()).collect::<Vec<_>>());
        p.flush();
        assert_eq!(texts(&reg).len(), MAX_EVENTS, "a publish without events keeps them");
    }

    #[test]
    fn events_with_the_same_text_share_one_copy_of_it() {
        let reg = Registry::new();
        let mut p = Publisher::new(&reg, "t", Protocol::HMON, vec![], 10);
        p.event("WorkspaceCompaction (thread 0)");
        p.flush();
        p.event(String::from("WorkspaceCompaction (thread 0)"));
        p.event("WorkspaceResize: 8 bytes");
        p.event(String::from("WorkspaceCompaction (thread 0)"));
        p.flush();
        let snap = reg.snapshot();
        let events = &snap.get("t").unwrap().events;
        let texts: Vec<&str> = events.iter().map(|e| &*e.text).collect();
        assert_eq!(
            texts,
            [
                "WorkspaceCompaction (thread 0)",
                "WorkspaceCompaction (thread 0)",
                "WorkspaceResize: 8 bytes",
                "WorkspaceCompaction (thread 0)"
            ]
        );
        // One published before and two new ones, all the same copy; the other text its own.
        assert!(
            Arc::ptr_eq(&events[0].text, &events[1].text) && Arc::ptr_eq(&events[0].text, &events[3].text)
        );
        assert!(!Arc::ptr_eq(&events[0].text, &events[2].text));
    }

    #[test]
    fn a_kept_slot_is_reused_and_looked_up_again_once_its_series_is_gone() {
        let reg = Registry::new();
        let mut p = Publisher::new(&reg, "t", Protocol::HMON, vec![], 10);
        p.up();
        let mut kept = None;
        p.put_kept(&mut kept, "g", "h", MetricKind::Gauge, &[("k", "v")], 1u64);
        let first = kept.expect("a slot is kept");
        p.put_kept(&mut kept, "g", "h", MetricKind::Gauge, &[("k", "v")], 2u64);
        assert_eq!(kept, Some(first), "the kept slot is used");
        p.retain_family("g", |_| false);
        p.put("other", "h", MetricKind::Gauge, &[], 0u64);
        p.put_kept(&mut kept, "g", "h", MetricKind::Gauge, &[("k", "v")], 3u64);
        assert_ne!(kept, Some(first), "a removed series is looked up again");
        p.flush();
        let snap = reg.snapshot();
        let g: Vec<String> = snap.get("t").unwrap().series.lines();
        assert!(g.iter().any(|l| l.starts_with("g{") && l.ends_with("Some(3.0)")), "{g:?}");
    }

    #[test]
    fn label_values_are_cut_at_a_char_boundary() {
        let v = "é".repeat(200);
        let (_, cut) = label("x", &v);
        assert!(cut.len() <= MAX_LABEL_LEN && cut.chars().all(|c| c == 'é'));
    }
}
