//! The data model of the fleet: what a view sees of every target.
//!
//! This module is a contract between the fleet core and its views (`telemon serve`,
//! `telemon top`): keep it stable.

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::SystemTime;

use crate::render::Piece;
use crate::series::escape_label_value;
pub use crate::series::{
    Family, FamilyRef, Hist, LabelPairs, LabelSet, MetricKind, Num, Sample, Series, SeriesRef, SeriesSet,
    Value, ValueRef,
};

/// The monitoring protocol a target speaks: its component's name (`hmon`), which is also its `protocol`
/// label. [`crate::protocol::Protocols`] gives the component of a name.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Protocol(&'static str);

impl Protocol {
    /// The protocol named `name` (a component's [`crate::protocol::Component::name`]).
    pub const fn new(name: &'static str) -> Protocol {
        Protocol(name)
    }

    /// The protocol's name as used in labels, config sections and URLs.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Debug for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Connection state of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetState {
    /// Connecting (first attempt or after a backoff).
    Connecting,
    /// Connected and collecting.
    Up,
    /// Not connected; waiting to retry, or gone.
    Down,
}

impl TargetState {
    /// The state's lower-case name (`connecting`, `up`, `down`).
    pub fn as_str(self) -> &'static str {
        match self {
            TargetState::Connecting => "connecting",
            TargetState::Up => "up",
            TargetState::Down => "down",
        }
    }
}

/// Why a target's collection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Could not connect, or the connection broke.
    Connect,
    /// The peer sent bytes that do not decode.
    Decode,
    /// The peer sent well-formed messages that break the protocol's rules, or is a peer of another protocol
    /// altogether (every protocol counts its `OtherProtocol` error here, never as [`ErrorKind::Decode`]).
    Protocol,
    /// The peer did not answer in time.
    Timeout,
}

impl ErrorKind {
    /// Every error kind, in a fixed order (the order of [`ErrorCounts`]).
    pub const ALL: [ErrorKind; 4] =
        [ErrorKind::Connect, ErrorKind::Decode, ErrorKind::Protocol, ErrorKind::Timeout];

    /// The kind's name as used in the `kind` label (`connect`, `decode`, `protocol`, `timeout`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Decode => "decode",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Timeout => "timeout",
        }
    }

    fn index(self) -> usize {
        match self {
            ErrorKind::Connect => 0,
            ErrorKind::Decode => 1,
            ErrorKind::Protocol => 2,
            ErrorKind::Timeout => 3,
        }
    }
}

/// Error counts of one target, per [`ErrorKind`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts([u64; 4]);

impl ErrorCounts {
    /// The count of errors of `kind`.
    pub fn get(&self, kind: ErrorKind) -> u64 {
        self.0[kind.index()]
    }

    /// Counts one more error of `kind` (saturating).
    pub fn bump(&mut self, kind: ErrorKind) {
        let n = &mut self.0[kind.index()];
        *n = n.saturating_add(1);
    }

    /// Every kind with its count, in [`ErrorKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (ErrorKind, u64)> + '_ {
        ErrorKind::ALL.into_iter().map(|k| (k, self.get(k)))
    }

    /// The sum over every kind.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// Something that happened on a target, kept for display (HMON notifications, user messages...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// When telemon saw it.
    pub at: SystemTime,
    /// What happened, one line (shared by every snapshot that lists it).
    pub text: Arc<str>,
}

/// What a view sees of one target.
#[derive(Debug, Clone)]
pub struct TargetSnapshot {
    /// Unique target name (`NAME` from the config, or `NAME/...` for targets found at run time).
    pub name: Arc<str>,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// Labels from the config, added to each of its series.
    pub labels: Arc<[(String, String)]>,
    /// The exposition text of `target` and the configured labels (`target="x",room="b12"`), escaped
    /// once when the target is created.
    pub label_text: Arc<str>,
    /// Connection state.
    pub state: TargetState,
    /// The last error, one line.
    pub last_error: Option<Arc<str>>,
    /// When its cache last changed.
    pub last_update: Option<SystemTime>,
    /// Successful connections so far (the first one included).
    pub connects: u64,
    /// Errors so far, per kind.
    pub errors: ErrorCounts,
    /// Series not stored because the target reached its series limit.
    pub dropped_series: u64,
    /// Bytes read from the target so far (`telemon_target_received_bytes_total`).
    pub received_bytes: u64,
    /// Current series, sorted by family.
    pub series: SeriesSet,
    /// Recent events, bounded, newest last.
    pub events: Arc<[EventRecord]>,
    /// Its lines of a scrape page, rendered at most once ([`TargetSnapshot::piece`]).
    pub(crate) piece: PieceCell,
}

/// A target's [`Piece`], rendered on first use. A clone starts without one (a clone is made to be
/// changed: see `Arc::make_mut`), and whoever changes a snapshot in place calls
/// [`TargetSnapshot::changed`].
#[derive(Default)]
pub(crate) struct PieceCell(OnceLock<Piece>);

impl PieceCell {
    /// The piece, if rendered.
    pub(crate) fn get(&self) -> Option<&Piece> {
        self.0.get()
    }
}

impl Clone for PieceCell {
    fn clone(&self) -> Self {
        PieceCell::default()
    }
}

impl std::fmt::Debug for PieceCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() { "PieceCell(rendered)" } else { "PieceCell(empty)" })
    }
}

impl TargetSnapshot {
    /// A target that has not connected yet: no series, no events, no errors.
    pub fn new(
        name: impl Into<Arc<str>>,
        protocol: Protocol,
        labels: impl Into<Arc<[(String, String)]>>,
    ) -> Self {
        // Most targets have no labels and no events yet: they share one empty slice of each.
        static EMPTY_LABELS: LazyLock<Arc<[(String, String)]>> = LazyLock::new(|| Arc::from([]));
        static NO_EVENTS: LazyLock<Arc<[EventRecord]>> = LazyLock::new(|| Arc::from([]));
        let name = name.into();
        let mut labels = labels.into();
        if labels.iter().any(|(_, v)| v.is_empty()) {
            // An empty value is no label (see `LabelSet`): left out once, here, for every view.
            labels = labels.iter().filter(|(_, v)| !v.is_empty()).cloned().collect();
        }
        let labels = if labels.is_empty() { EMPTY_LABELS.clone() } else { labels };
        let mut text = String::from("target=\"");
        escape_label_value(&mut text, &name);
        text.push('"');
        for (k, v) in labels.iter() {
            text.push(',');
            text.push_str(k);
            text.push_str("=\"");
            escape_label_value(&mut text, v);
            text.push('"');
        }
        TargetSnapshot {
            name,
            protocol,
            labels,
            label_text: Arc::from(text),
            state: TargetState::Connecting,
            last_error: None,
            last_update: None,
            connects: 0,
            errors: ErrorCounts::default(),
            dropped_series: 0,
            received_bytes: 0,
            series: SeriesSet::default(),
            events: NO_EVENTS.clone(),
            piece: PieceCell::default(),
        }
    }

    /// Its lines of a scrape page: rendered at the first call, then kept with the snapshot (in a
    /// large fleet that serves pages, a publication calls it on the collector's thread, so that a
    /// scrape only copies it: see [`crate::Registry::want_pages`]). A snapshot changed in place after a call must say so
    /// ([`TargetSnapshot::changed`]); one changed through `Arc::make_mut` of a shared `Arc` is a
    /// clone, which starts without a piece.
    pub fn piece(&self) -> &Piece {
        self.piece.0.get_or_init(|| Piece::render(self))
    }

    /// Forgets the rendered [`TargetSnapshot::piece`]: to call after changing the snapshot in place.
    pub fn changed(&mut self) {
        self.piece = PieceCell::default();
    }

    /// Whether the target is up (`telemon_target_up` is 1).
    pub fn is_up(&self) -> bool {
        self.state == TargetState::Up
    }
}

/// What a view sees of the whole fleet at one moment.
#[derive(Debug, Clone, Default)]
pub struct FleetSnapshot {
    /// Every target, sorted by name.
    pub targets: Vec<Arc<TargetSnapshot>>,
}

impl FleetSnapshot {
    /// The target named `name`, if any.
    pub fn get(&self, name: &str) -> Option<&TargetSnapshot> {
        self.targets.binary_search_by(|t| (*t.name).cmp(name)).ok().map(|i| &*self.targets[i])
    }
}

impl From<Vec<TargetSnapshot>> for FleetSnapshot {
    /// A snapshot of `targets`, which must be sorted by name.
    fn from(targets: Vec<TargetSnapshot>) -> FleetSnapshot {
        FleetSnapshot { targets: targets.into_iter().map(Arc::new).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_targets_share_one_empty_set_of_series_labels_and_events() {
        let a = TargetSnapshot::new("a", Protocol::METER161, Vec::new());
        let b = TargetSnapshot::new("b", Protocol::SMON, Vec::new());
        assert!(Arc::ptr_eq(&a.series.schema, &b.series.schema));
        assert!(Arc::ptr_eq(&a.series.samples, &b.series.samples));
        assert!(Arc::ptr_eq(&a.series.hists, &b.series.hists));
        assert!(Arc::ptr_eq(&a.labels, &b.labels) && Arc::ptr_eq(&a.events, &b.events));
        assert!(a.series.is_empty() && a.labels.is_empty() && a.events.is_empty());
        let c = TargetSnapshot::new("c", Protocol::SMON, vec![("room".to_owned(), "b12".to_owned())]);
        assert_eq!(&*c.label_text, "target=\"c\",room=\"b12\"");
        // A configured label with an empty value is no label.
        let d = TargetSnapshot::new(
            "d",
            Protocol::SMON,
            vec![("a".to_owned(), String::new()), ("b".to_owned(), "1".to_owned())],
        );
        assert_eq!((&*d.label_text, d.labels.len()), ("target=\"d\",b=\"1\"", 1));
    }

    #[test]
    fn a_protocol_is_its_components_name() {
        for c in crate::protocol::Protocols::built_in().iter() {
            assert_eq!(c.protocol().as_str(), c.name());
            assert_eq!(c.protocol().to_string(), c.name());
        }
        assert_eq!(Protocol::METER161.as_str(), "meter161");
        assert_ne!(Protocol::new("http"), Protocol::HMON);
    }

    #[test]
    fn error_counts_per_kind() {
        let mut e = ErrorCounts::default();
        e.bump(ErrorKind::Decode);
        e.bump(ErrorKind::Decode);
        e.bump(ErrorKind::Timeout);
        assert_eq!(e.get(ErrorKind::Decode), 2);
        assert_eq!(e.get(ErrorKind::Connect), 0);
        assert_eq!(e.total(), 3);
        let v: Vec<_> = e.iter().map(|(k, n)| (k.as_str(), n)).collect();
        assert_eq!(v, [("connect", 0), ("decode", 2), ("protocol", 0), ("timeout", 1)]);
    }

    #[test]
    fn fleet_snapshot_lookup_by_name() {
        let labels = vec![("room".to_owned(), "b12".to_owned())];
        let snap = FleetSnapshot::from(vec![
            TargetSnapshot::new("a", Protocol::HMON, labels.clone()),
            TargetSnapshot::new("b/x", Protocol::SMON, labels),
        ]);
        assert_eq!(snap.get("b/x").map(|t| t.protocol), Some(Protocol::SMON));
        assert!(snap.get("c").is_none());
    }
}
