//! The shared table of per-target caches.
//!
//! Each target task owns its entry and replaces it when its cache changes; views take a
//! [`FleetSnapshot`] (cheap: the series and events are behind `Arc`s) and wait on
//! [`Registry::changed`] for the next change. A target's publisher keeps its entry, and a
//! publication replaces the target in it without looking its name up.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::model::{FleetSnapshot, TargetSnapshot};

/// The fleet's targets by name, with a generation number bumped on every change.
#[derive(Debug, Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    targets: Mutex<BTreeMap<Arc<str>, Entry>>,
    generation: watch::Sender<u64>,
    /// Whether a scrape page was asked for: publications of a large fleet then render their piece.
    pages: AtomicBool,
    /// How many targets `targets` holds: read by every publication, without the lock.
    len: AtomicUsize,
}

/// From how many targets on each publication renders its target's piece of the page, once pages are
/// asked for ([`Registry::want_pages`]). A piece costs a rendering, an allocation and a copy a
/// publication, wasted when the target publishes again before a scrape reads it, and its memory while
/// kept; in return a scrape copies it instead of writing the target's lines. Below this size a page is
/// a few MB, which the scrape writes itself in a few milliseconds, and the pieces cost more than they
/// save (1,000 targets without them, beside every publication rendering its piece: HMON 16% less CPU and
/// 4.6 MiB less peak RSS, Mono 11% and 1.0 MiB, sys161 the same CPU and 3.3 MiB; the scrape's p99 4–6 ms
/// → 3–5 ms); above it, the page's latency is what they buy (10,000 sys161 targets: p50 42 ms written
/// at the scrape, 23 ms copied).
pub const PIECES_FROM: usize = 2_000;

/// One target's place in the registry, kept by its publisher: a publication replaces the target in
/// it, without a search by name through the whole fleet's (each comparison a cache miss at a
/// thousand targets: 3 to 4% of telemon's time at 1,000 sys161 targets or smon streams).
#[derive(Debug, Clone)]
pub(crate) struct Entry(Arc<Mutex<Arc<TargetSnapshot>>>);

impl Entry {
    /// A new entry for `target`, inserted in `targets` under its name (replacing any there).
    fn insert(targets: &mut BTreeMap<Arc<str>, Entry>, target: Arc<TargetSnapshot>) -> Entry {
        let name = target.name.clone();
        let entry = Entry(Arc::new(Mutex::new(target)));
        targets.insert(name, entry.clone());
        entry
    }

    fn lock(&self) -> MutexGuard<'_, Arc<TargetSnapshot>> {
        // Entries are replaced whole, never edited in place: a panic leaves a whole snapshot.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The target as last published.
    fn get(&self) -> Arc<TargetSnapshot> {
        self.lock().clone()
    }

    /// Replaces the target (shared with the publisher, which changes its own copy: see
    /// `Publisher::flush`).
    fn set(&self, target: Arc<TargetSnapshot>) {
        // The one before is dropped after the lock is let go.
        let _old = std::mem::replace(&mut *self.lock(), target);
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// An empty registry at generation 0.
    pub fn new() -> Self {
        Registry {
            inner: Arc::new(Inner {
                targets: Mutex::new(BTreeMap::new()),
                generation: watch::Sender::new(0),
                pages: AtomicBool::new(false),
                len: AtomicUsize::new(0),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Arc<str>, Entry>> {
        // A panicking writer leaves whole snapshots behind (entries are replaced, never edited
        // in place), so the table is still consistent.
        self.inner.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the size of `targets`, just changed under the lock.
    fn counted(&self, targets: &BTreeMap<Arc<str>, Entry>) {
        self.inner.len.store(targets.len(), Ordering::Relaxed);
    }

    fn bump(&self) {
        self.inner.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Inserts or replaces the target named `target.name`.
    pub fn put(&self, target: impl Into<Arc<TargetSnapshot>>) {
        self.register(target.into());
    }

    /// [`Registry::put`], returning the target's entry, for its publisher to publish into.
    pub(crate) fn register(&self, target: Arc<TargetSnapshot>) -> Entry {
        let entry = {
            let mut targets = self.lock();
            match targets.get(&target.name) {
                Some(entry) => {
                    entry.set(target);
                    entry.clone()
                }
                None => {
                    let entry = Entry::insert(&mut targets, target);
                    self.counted(&targets);
                    entry
                }
            }
        };
        self.bump();
        entry
    }

    /// Replaces the target in its entry (a publication): no search by name. An entry removed from the
    /// registry since is not put back.
    pub(crate) fn publish(&self, entry: &Entry, target: Arc<TargetSnapshot>) {
        entry.set(target);
        self.bump();
    }

    /// Inserts `target` only if its name is free, or taken by an entry that `replace` allows to be
    /// replaced (e.g. a dial-in target that is down); the check and the insert are one step, so two
    /// tasks can never end up sharing one name. Returns whether it was inserted.
    pub fn insert_unique(
        &self,
        target: impl Into<Arc<TargetSnapshot>>,
        replace: impl FnOnce(&TargetSnapshot) -> bool,
    ) -> bool {
        self.claim(target.into(), replace).is_some()
    }

    /// [`Registry::insert_unique`], returning the new entry when inserted. A replaced entry is left to
    /// whoever kept it (its publisher's publications no longer reach the registry).
    pub(crate) fn claim(
        &self,
        target: Arc<TargetSnapshot>,
        replace: impl FnOnce(&TargetSnapshot) -> bool,
    ) -> Option<Entry> {
        let entry = {
            let mut targets = self.lock();
            if targets.get(&target.name).is_some_and(|old| !replace(&old.get())) {
                return None;
            }
            let entry = Entry::insert(&mut targets, target);
            self.counted(&targets);
            entry
        };
        self.bump();
        Some(entry)
    }

    /// Applies `f` to the target named `name`, if present; returns whether it was.
    pub fn update(&self, name: &str, f: impl FnOnce(&mut TargetSnapshot)) -> bool {
        let found = match self.lock().get(name) {
            Some(entry) => {
                let mut target = entry.lock();
                let target = Arc::make_mut(&mut target);
                f(target);
                target.changed();
                true
            }
            None => false,
        };
        if found {
            self.bump();
        }
        found
    }

    /// Removes the target named `name`; returns it if it was present.
    pub fn remove(&self, name: &str) -> Option<Arc<TargetSnapshot>> {
        let gone = {
            let mut targets = self.lock();
            let gone = targets.remove(name);
            self.counted(&targets);
            gone
        };
        if gone.is_some() {
            self.bump();
        }
        gone.map(|entry| entry.get())
    }

    /// Removes `entry`, if the registry still holds it (not another target's that took its name
    /// since).
    pub(crate) fn remove_entry(&self, entry: &Entry) {
        let removed = {
            let mut targets = self.lock();
            let name = entry.lock().name.clone();
            let ours = targets.get(&name).is_some_and(|e| Arc::ptr_eq(&e.0, &entry.0));
            let removed = ours && targets.remove(&name).is_some();
            self.counted(&targets);
            removed
        };
        if removed {
            self.bump();
        }
    }

    /// Says that scrape pages are served from now on: while the registry holds at least
    /// [`PIECES_FROM`] targets, each publication then renders its target's [`TargetSnapshot::piece`]
    /// on its collector's thread, and a scrape only copies the pieces. Otherwise (a smaller fleet;
    /// `telemon top`, `record`), no publication renders one, and a page writes the targets' lines.
    pub fn want_pages(&self) {
        self.inner.pages.store(true, Ordering::Relaxed);
    }

    /// Whether a publication renders its target's piece: pages are wanted, and the fleet is large
    /// enough ([`PIECES_FROM`]).
    pub(crate) fn pieces_at_publication(&self) -> bool {
        self.inner.pages.load(Ordering::Relaxed) && self.inner.len.load(Ordering::Relaxed) >= PIECES_FROM
    }

    /// Adds `n` idle targets (`idle-0`, ...), for a test's fleet to be as large as one whose
    /// publications render their pieces ([`PIECES_FROM`]).
    #[cfg(test)]
    pub(crate) fn put_idle(&self, n: usize) {
        for i in 0..n {
            self.put(TargetSnapshot::new(format!("idle-{i}"), crate::model::Protocol::METER161, Vec::new()));
        }
    }

    /// Every target, sorted by name.
    pub fn snapshot(&self) -> FleetSnapshot {
        FleetSnapshot { targets: self.lock().values().map(Entry::get).collect() }
    }

    /// A receiver of the generation number, bumped whenever any target changes.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Protocol, TargetState};

    #[test]
    fn publications_render_pieces_only_in_a_fleet_that_serves_pages_and_is_large() {
        use crate::model::MetricKind;
        let reg = Registry::new();
        // With `a` and `b`, as many targets as `PIECES_FROM`.
        reg.put_idle(PIECES_FROM - 2);
        let publish = |p: &mut crate::Publisher, v: f64| {
            p.set("m", "h", MetricKind::Gauge, Vec::new(), v);
            p.flush();
        };
        let piece = |name: &str| reg.snapshot().get(name).is_some_and(|t| t.piece.get().is_some());
        let mut a = crate::Publisher::new(&reg, "a", Protocol::METER161, Vec::<(String, String)>::new(), 10);
        let b = crate::Publisher::new(&reg, "b", Protocol::METER161, Vec::<(String, String)>::new(), 10)
            .remove_on_drop();
        publish(&mut a, 1.0);
        assert!(!piece("a"), "no page asked for");
        reg.want_pages();
        publish(&mut a, 2.0);
        assert!(piece("a"), "pages, a large fleet");
        drop(b);
        publish(&mut a, 3.0);
        assert!(!piece("a"), "one target fewer: the scrape writes its lines");
    }

    #[tokio::test]
    async fn changes_bump_the_generation_and_snapshots_are_sorted() {
        let reg = Registry::new();
        let mut rx = reg.changed();
        assert_eq!(*rx.borrow_and_update(), 0);
        reg.put(TargetSnapshot::new("zeta", Protocol::SMON, Vec::new()));
        reg.put(TargetSnapshot::new("alpha", Protocol::HMON, Vec::new()));
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 2);

        assert!(reg.update("alpha", |t| t.state = TargetState::Up));
        assert!(!reg.update("missing", |t| t.state = TargetState::Up));
        assert_eq!(*rx.borrow_and_update(), 3);

        let snap = reg.snapshot();
        let names: Vec<&str> = snap.targets.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert!(snap.get("alpha").unwrap().is_up());

        assert!(reg.remove("zeta").is_some());
        assert!(reg.remove("zeta").is_none());
        assert_eq!(*rx.borrow_and_update(), 4);
        assert_eq!(reg.snapshot().targets.len(), 1);
    }

    #[test]
    fn insert_unique_refuses_a_taken_name_unless_replace_allows_it() {
        let reg = Registry::new();
        let mut first = TargetSnapshot::new("x", Protocol::METER161, vec![("dir".into(), "/a".into())]);
        first.state = TargetState::Up;
        assert!(reg.insert_unique(first, |_| false));
        let second = TargetSnapshot::new("x", Protocol::METER161, vec![("dir".into(), "/b".into())]);
        assert!(!reg.insert_unique(second.clone(), |_| false));
        assert!(!reg.insert_unique(second.clone(), |old| old.state == TargetState::Down));
        assert_eq!(&*reg.snapshot().get("x").unwrap().labels[0].1, "/a", "the first entry is kept");
        reg.update("x", |t| t.state = TargetState::Down);
        assert!(reg.insert_unique(second, |old| old.state == TargetState::Down));
        assert_eq!(&*reg.snapshot().get("x").unwrap().labels[0].1, "/b");
    }
}
