//! Rendering a [`FleetSnapshot`] as Prometheus text format 0.0.4 or OpenMetrics 1.0.
//!
//! A small writer of our own: a scrape only renders the cache, and both formats must pass
//! `promtool check metrics` (which rejects OpenMetrics-style counter families in 0.0.4).
//!
//! A scrape is rendered as a stream of chunks ([`Chunks`]), family by family across targets, from
//! the label text each target and series escaped once when it was created; integers are written
//! exactly ([`Num`]), floats in their shortest form. Nothing is built twice, and at most one chunk
//! of the page is in memory at a time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use bytes::Bytes;

use crate::model::{FleetSnapshot, MetricKind, TargetSnapshot};
use crate::series::{escape_label_value, push_num, Num, ValueRef};

/// The exposition format of a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text004,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// Picks the format from an HTTP `Accept` header: OpenMetrics when it names
    /// `application/openmetrics-text`, else 0.0.4.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text004,
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text004 => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The size a chunk grows to before [`Chunks`] yields it.
pub const CHUNK: usize = 64 * 1024;

/// telemon's own per-target families (metrics.md), rendered from each target's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    Up,
    Connects,
    Errors,
    Dropped,
    LastUpdate,
    Received,
    /// Not per target: [`crate::own`]'s dial-in refusals.
    ListenerRefused,
    /// Not per target: the targets each dial-in listener holds.
    ListenerTargets,
}

impl Own {
    fn name(self) -> &'static str {
        match self {
            Own::Up => "telemon_target_up",
            Own::Connects => "telemon_target_connects_total",
            Own::Errors => "telemon_target_errors_total",
            Own::Dropped => "telemon_target_dropped_series_total",
            Own::LastUpdate => "telemon_target_last_update_timestamp_seconds",
            Own::Received => "telemon_target_received_bytes_total",
            Own::ListenerRefused => "telemon_listener_refused_total",
            Own::ListenerTargets => "telemon_listener_targets",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Own::Up => "1 while the target is connected and receiving, else 0.",
            Own::Connects => "Successful connections to the target (or accepted agents).",
            Own::Errors => "Errors collecting from the target, by kind.",
            Own::Dropped => "Series not kept because the target reached its series limit.",
            Own::LastUpdate => "Unix time of the last value received from the target.",
            Own::Received => "Bytes read from the target.",
            Own::ListenerRefused => {
                "Connections a dial-in listener closed without making them a target, by reason."
            }
            Own::ListenerTargets => "Targets a dial-in listener holds, live and remembered.",
        }
    }

    fn kind(self) -> MetricKind {
        match self {
            Own::Connects | Own::Errors | Own::Dropped | Own::Received | Own::ListenerRefused => {
                MetricKind::Counter
            }
            Own::Up | Own::LastUpdate | Own::ListenerTargets => MetricKind::Gauge,
        }
    }
}

/// telemon's own families with a series per target, in the order of a [`Piece`]'s first slots.
const OWN_PER_TARGET: [Own; 6] =
    [Own::Up, Own::Connects, Own::Errors, Own::Dropped, Own::LastUpdate, Own::Received];

/// One target's lines of a scrape page. A target that keeps its piece ([`keeps_piece`]) has it
/// rendered by each publication, on its collector's thread, once pages are asked for in a large fleet
/// (see [`crate::Registry::want_pages`]): a scrape then copies them into place, family by family,
/// instead of formatting every value again. A target without one has its lines written by the scrape.
///
/// The lines are the same in both formats (only the `# HELP`/`# TYPE` lines differ), so one piece
/// serves both. Its slots are the target's families: telemon's own per-target ones first
/// (`telemon_target_up` to `telemon_target_received_bytes_total`), then its series' families in the
/// order of [`crate::model::SeriesSet::families`].
#[derive(Debug, Default)]
pub struct Piece {
    text: Box<str>,
    /// Where each slot's lines end in `text` (a piece is of at most [`PIECE_SERIES`] series: far
    /// below 4 GiB).
    ends: Box<[u32]>,
}

impl Piece {
    /// Renders `t`'s lines.
    pub fn render(t: &TargetSnapshot) -> Piece {
        thread_local! {
            // One buffer per thread, reused: a piece is then allocated once, at its size.
            static BUF: std::cell::RefCell<(String, Vec<u32>, [String; 4])> = Default::default();
        }
        BUF.with_borrow_mut(|(buf, ends, prefixes)| {
            buf.clear();
            ends.clear();
            for slot in 0..OWN_PER_TARGET.len() + t.series.families().len() {
                write_slot(buf, prefixes, t, slot);
                ends.push(u32::try_from(buf.len()).unwrap_or(u32::MAX));
            }
            Piece { text: Box::from(buf.as_str()), ends: Box::from(ends.as_slice()) }
        })
    }

    /// The lines of slot `i` (empty past the last).
    fn slot(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            i => self.ends.get(i - 1).map_or(self.text.len(), |&e| e as usize),
        };
        let end = self.ends.get(i).map_or(start, |&e| e as usize);
        self.text.get(start..end).unwrap_or_default()
    }
}

/// One family of the page: where its lines come from.
#[derive(Debug)]
enum Source {
    /// A process-wide family ([`Own::ListenerRefused`], [`Own::ListenerTargets`]).
    Own(Own),
    /// A slot of each target that has the family, in target order.
    Pieces { help: &'static str, kind: MetricKind, members: Vec<Member> },
}

/// One target's lines of a family on the page: 16 bytes, and a page's plan holds one per target
/// and family (3.2 MB at ten thousand sys161 targets).
#[derive(Debug, Clone, Copy)]
enum Member {
    /// Lines of its kept [`Piece`], found when the page is planned: writing the page then reads
    /// the members of a family in order and copies, with no pointer to follow from the target to
    /// its piece (at ten thousand targets, four cache misses each). `len` is a `u32`, as a piece's
    /// ends are.
    Kept { at: *const u8, len: u32 },
    /// A target without a kept piece ([`keeps_piece`]): slot `slot` of target `target`, written
    /// from its series when the page comes to it.
    Written { target: u32, slot: u32 },
}

impl Member {
    /// The kept lines `text` (a slot of a piece's text, shorter than 4 GiB).
    fn kept(text: &str) -> Member {
        Member::Kept { at: text.as_ptr(), len: u32::try_from(text.len()).unwrap_or(0) }
    }
}

/// A scrape page as a sequence of chunks of about [`CHUNK`] bytes. It owns the snapshot it
/// renders, so it can be handed to an HTTP body.
///
/// Planning the page notes where each family's lines are in the [`Piece`] of each target that has
/// one; writing it copies them, family by family, and writes the lines of the other targets from
/// their series.
#[derive(Debug)]
pub struct Chunks {
    /// What the page is of: it holds the pieces that `plan`'s lines point into.
    snapshot: FleetSnapshot,
    format: Format,
    plan: Vec<(Arc<str>, Source)>,
    /// The family being written, and the member within it.
    family: usize,
    member: usize,
    header_done: bool,
    done: bool,
    buf: String,
    /// Families rendered elsewhere (the push senders' own), written before `# EOF`.
    tail: String,
    /// Scratch space of [`write_slot`]: `name{target labels` of the family and target being written,
    /// per suffix ([`SUFFIXES`]).
    prefixes: [String; 4],
}

// SAFETY: the only fields that are not `Send` are the `Member::Kept` pointers of `plan`, which point
// into the text of pieces that `snapshot` owns and never changes (see `Chunks::fill`); `snapshot` is
// `Send`.
unsafe impl Send for Chunks {}

/// The suffixes of a family's sample names: the value itself, then a histogram's three.
const SUFFIXES: [&str; 4] = ["", "_bucket", "_sum", "_count"];

impl Chunks {
    /// Plans the page of `snapshot`: every family name, sorted, with the targets that have it, and
    /// the fleet's process-wide families (the dial-in listeners'). `telemon_build_info` and the HTTP
    /// server's families are the binary's: they come in the binary's tail ([`Chunks::with_tail`]), as
    /// do the push senders' families.
    pub fn new(snapshot: FleetSnapshot, format: Format) -> Chunks {
        Chunks::plan(snapshot, format, true)
    }

    /// The page of `snapshot`'s targets alone: their series and their `telemon_target_*` families,
    /// without the process-wide ones. A `/probe` answer is this (as blackbox_exporter answers only
    /// its probe): a Prometheus job of many probe targets would otherwise store the process's
    /// families once per target.
    pub fn targets_only(snapshot: FleetSnapshot, format: Format) -> Chunks {
        Chunks::plan(snapshot, format, false)
    }

    fn plan(snapshot: FleetSnapshot, format: Format, process_wide: bool) -> Chunks {
        let mut plan: Vec<(Arc<str>, Source)> = Vec::new();
        let mut index: HashMap<Arc<str>, usize> = HashMap::new();
        fn add(
            plan: &mut Vec<(Arc<str>, Source)>,
            index: &mut HashMap<Arc<str>, usize>,
            name: Arc<str>,
            source: Source,
        ) -> usize {
            index.insert(name.clone(), plan.len());
            plan.push((name, source));
            plan.len() - 1
        }
        let n = snapshot.targets.len();
        for own in OWN_PER_TARGET {
            let source =
                Source::Pieces { help: own.help(), kind: own.kind(), members: Vec::with_capacity(n) };
            add(&mut plan, &mut index, Arc::from(own.name()), source);
        }
        if process_wide && !crate::own::listener_targets().is_empty() {
            for own in [Own::ListenerRefused, Own::ListenerTargets] {
                add(&mut plan, &mut index, Arc::from(own.name()), Source::Own(own));
            }
        }
        // Targets of one protocol mostly have the same families in the same order: the family at
        // the same position in the target before is tried first (one comparison, no hashing).
        let mut before: Vec<usize> = Vec::new();
        let own_slots = OWN_PER_TARGET.len();
        let targets = &snapshot.targets;
        for (ti, t) in targets.iter().enumerate() {
            // Each target is elsewhere on the heap: fetch the target eight on, and the piece and
            // family names of the one four on (its target fetched four targets ago).
            if let Some(ahead) = targets.get(ti + 8) {
                crate::series::prefetch(Arc::as_ptr(ahead));
            }
            if let Some(ahead) = targets.get(ti + 4) {
                if let Some(piece) = ahead.piece.get() {
                    crate::series::prefetch(piece.ends.as_ptr());
                }
                crate::series::prefetch(ahead.series.schema().families.as_ptr());
            }
            // A piece only where a publication rendered one: rendering it here would cost an
            // allocation and a copy more than writing the lines, for a piece that the target's next
            // publication replaces before the next scrape.
            let piece = t.piece.get();
            let member = |slot: usize| match piece {
                Some(p) => Member::kept(p.slot(slot)),
                None => Member::Written { target: ti as u32, slot: slot as u32 },
            };
            // The own families are the plan's first, in slot order (it is sorted at the end).
            for (slot, (_, source)) in plan.iter_mut().enumerate().take(own_slots) {
                if let Source::Pieces { members, .. } = source {
                    members.push(member(slot));
                }
            }
            for (fi, f) in t.series.families().enumerate() {
                let family = f.family();
                // Family names in telemon's code are one `Arc` per process: the pointers are equal
                // without reading the text.
                let same = |at: usize| Arc::ptr_eq(&plan[at].0, &family.name) || *plan[at].0 == *family.name;
                let guess = before.get(fi).copied().filter(|&at| same(at));
                let at = match guess.or_else(|| index.get(&*family.name).copied()) {
                    Some(at) => at,
                    None => {
                        // Room for every target left (most have the family): growing the vector
                        // by doubling copied it a dozen times per scrape and left up to half of it
                        // spare. Room that no member fills is never written, so never resident.
                        let members = Vec::with_capacity(n - ti);
                        let source = Source::Pieces { help: family.help, kind: family.kind, members };
                        add(&mut plan, &mut index, family.name.clone(), source)
                    }
                };
                match before.get_mut(fi) {
                    Some(b) => *b = at,
                    None => before.push(at),
                }
                if let Source::Pieces { members, .. } = &mut plan[at].1 {
                    members.push(member(own_slots + fi));
                }
            }
        }
        plan.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Chunks {
            snapshot,
            format,
            plan,
            family: 0,
            member: 0,
            header_done: false,
            done: false,
            buf: String::new(),
            tail: String::new(),
            prefixes: Default::default(),
        }
    }

    /// Adds whole families rendered elsewhere (with their `# HELP` and `# TYPE`) at the end of the
    /// page, before OpenMetrics' `# EOF`. Their names must not be among the snapshot's.
    pub fn with_tail(mut self, tail: String) -> Chunks {
        self.tail = tail;
        self
    }

    fn write_header(&mut self, name: &str, help: &str, kind: MetricKind) {
        let meta_name = match (self.format, kind) {
            (Format::OpenMetrics, MetricKind::Counter) => name.strip_suffix("_total").unwrap_or(name),
            (Format::OpenMetrics, MetricKind::Info) => name.strip_suffix("_info").unwrap_or(name),
            _ => name,
        };
        let ty = match (self.format, kind) {
            (Format::OpenMetrics, MetricKind::Info) => "info",
            (_, k) => k.prometheus_type(),
        };
        let out = &mut self.buf;
        out.push_str("# HELP ");
        out.push_str(meta_name);
        out.push(' ');
        for c in help.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push_str("\n# TYPE ");
        out.push_str(meta_name);
        out.push(' ');
        out.push_str(ty);
        out.push('\n');
    }

    /// Writes until the buffer holds a chunk or the page is complete.
    fn fill(&mut self) {
        while self.buf.len() < CHUNK {
            let Some((name, source)) = self.plan.get(self.family) else {
                self.buf.push_str(&std::mem::take(&mut self.tail));
                if self.format == Format::OpenMetrics {
                    self.buf.push_str("# EOF\n");
                }
                self.done = true;
                return;
            };
            if !self.header_done {
                let (help, kind) = match source {
                    Source::Own(own) => (own.help(), own.kind()),
                    Source::Pieces { help, kind, .. } => (*help, *kind),
                };
                let name = name.clone();
                self.write_header(&name, help, kind);
                self.header_done = true;
            }
            let Chunks { plan, snapshot, buf, member, family, header_done, prefixes, .. } = self;
            let finished = match &plan[*family].1 {
                Source::Own(Own::ListenerRefused) => {
                    for (listener, reason, n) in crate::own::listener_refusals() {
                        buf.push_str("telemon_listener_refused_total{listener=\"");
                        escape_label_value(buf, &listener);
                        buf.push_str("\",reason=\"");
                        buf.push_str(reason);
                        buf.push_str("\"} ");
                        push_num(buf, Num::Uint(n));
                        buf.push('\n');
                    }
                    true
                }
                Source::Own(Own::ListenerTargets) => {
                    for (listener, n) in crate::own::listener_targets() {
                        buf.push_str("telemon_listener_targets{listener=\"");
                        escape_label_value(buf, &listener);
                        buf.push_str("\"} ");
                        push_num(buf, Num::Uint(n));
                        buf.push('\n');
                    }
                    true
                }
                Source::Own(_) => true,
                Source::Pieces { members, .. } => {
                    while let Some(&m) = members.get(*member) {
                        // Each target is elsewhere on the heap: fetch what the members a few on
                        // are read from.
                        for ahead in 1..=4u8 {
                            match members.get(*member + 4 * usize::from(ahead)) {
                                Some(&Member::Kept { at, .. }) if ahead == 2 => crate::series::prefetch(at),
                                Some(&Member::Written { target, slot }) => {
                                    let t = &snapshot.targets[target as usize];
                                    match (slot as usize).checked_sub(OWN_PER_TARGET.len()) {
                                        Some(fi) => t.series.prefetch(fi, ahead),
                                        None if ahead == 1 => crate::series::prefetch(t.label_text.as_ptr()),
                                        None => {}
                                    }
                                }
                                _ => {}
                            }
                        }
                        match m {
                            Member::Kept { at, len } => {
                                // SAFETY: `at` and `len` are a slot of the text of a piece of one of
                                // `snapshot`'s targets, which this page owns (`Arc`s): the text lives
                                // as long as the page, and a piece is never changed once rendered (a
                                // target changed in place must be unique to its owner, and this page
                                // holds an `Arc` of it).
                                let text = unsafe {
                                    std::str::from_utf8_unchecked(std::slice::from_raw_parts(
                                        at,
                                        len as usize,
                                    ))
                                };
                                buf.push_str(text);
                            }
                            Member::Written { target, slot } => {
                                write_slot(buf, prefixes, &snapshot.targets[target as usize], slot as usize);
                            }
                        }
                        *member += 1;
                        if buf.len() >= CHUNK {
                            break;
                        }
                    }
                    *member >= members.len()
                }
            };
            if finished {
                *family += 1;
                *member = 0;
                *header_done = false;
            }
        }
    }
}

impl Iterator for Chunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.done && self.buf.is_empty() {
            return None;
        }
        if !self.done {
            self.buf.reserve(CHUNK + CHUNK / 4);
            self.fill();
        }
        (!self.buf.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.buf).into_bytes()))
    }
}

/// Whether a target's [`Piece`] is kept with it: at most [`PIECE_SERIES`] series. A larger target's
/// lines are written family by family at each scrape instead (a kept piece costs its size: a thousand
/// rvOS targets of 300 series would hold a 20 MB page).
pub fn keeps_piece(t: &TargetSnapshot) -> bool {
    t.series.len() <= PIECE_SERIES
}

/// The most series of a target whose [`Piece`] is kept ([`keeps_piece`]): a piece of some 4 KiB.
pub const PIECE_SERIES: usize = 48;

/// Writes target `t`'s lines of slot `slot` (see [`Piece`]). `prefixes` is scratch space.
fn write_slot(buf: &mut String, prefixes: &mut [String; 4], t: &TargetSnapshot, slot: usize) {
    if let Some(&own) = OWN_PER_TARGET.get(slot) {
        write_own(buf, own, t);
        return;
    }
    let Some(f) = t.series.family_at(slot - OWN_PER_TARGET.len()) else {
        return;
    };
    let name = &f.family().name;
    // The plain prefix now; a histogram's three when the first histogram comes.
    let mut made = 0;
    let mut make = |prefixes: &mut [String; 4], upto: usize| {
        for (prefix, suffix) in prefixes[made..upto].iter_mut().zip(&SUFFIXES[made..]) {
            prefix.clear();
            prefix.push_str(name);
            prefix.push_str(suffix);
            prefix.push('{');
            prefix.push_str(&t.label_text);
        }
        made = made.max(upto);
    };
    make(prefixes, 1);
    for s in f.series() {
        let labels = s.label_text();
        match s.value() {
            ValueRef::Number(v) => line(buf, &prefixes[0], labels, None, v),
            ValueRef::Histogram(h) => {
                make(prefixes, 4);
                let [_, bucket, sum, count] = &*prefixes;
                for (le, &n) in h.le.iter().zip(h.counts.iter()) {
                    line(buf, bucket, labels, Some(le), Num::Uint(n));
                }
                line(buf, bucket, labels, Some("+Inf"), Num::Uint(h.count));
                line(buf, sum, labels, None, Num::Float(h.sum));
                line(buf, count, labels, None, Num::Uint(h.count));
            }
        }
    }
}

/// One sample line: `name{target labels[,series labels][,le="…"]} value`.
fn line(out: &mut String, prefix: &str, labels: &str, le: Option<&str>, v: Num) {
    // `prefix` is `name{target labels`, made once per family and target.
    out.push_str(prefix);
    if !labels.is_empty() {
        out.push(',');
        out.push_str(labels);
    }
    if let Some(le) = le {
        out.push_str(",le=\"");
        out.push_str(le);
        out.push('"');
    }
    out.push_str("} ");
    push_num(out, v);
    out.push('\n');
}

/// Target `t`'s lines of `own`: `name{protocol="…",target labels[,kind="…"]} value`.
fn write_own(out: &mut String, own: Own, t: &TargetSnapshot) {
    let name = own.name();
    let mut own_line = |extra: Option<(&str, &str)>, v: Num| {
        out.push_str(name);
        out.push_str("{protocol=\"");
        out.push_str(t.protocol.as_str());
        out.push_str("\",");
        out.push_str(&t.label_text);
        if let Some((k, val)) = extra {
            out.push(',');
            out.push_str(k);
            out.push_str("=\"");
            out.push_str(val);
            out.push('"');
        }
        out.push_str("} ");
        push_num(out, v);
        out.push('\n');
    };
    match own {
        Own::ListenerRefused | Own::ListenerTargets => {}
        Own::Up => own_line(None, Num::Uint(u64::from(t.is_up()))),
        Own::Connects => own_line(None, Num::Uint(t.connects)),
        Own::Errors => {
            for (kind, n) in t.errors.iter() {
                own_line(Some(("kind", kind.as_str())), Num::Uint(n));
            }
        }
        Own::Dropped => own_line(None, Num::Uint(t.dropped_series)),
        Own::Received => own_line(None, Num::Uint(t.received_bytes)),
        Own::LastUpdate => {
            if let Some(at) = t.last_update {
                let secs = at.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
                own_line(None, Num::Float(secs));
            }
        }
    }
}

/// Renders every target's series plus the `telemon_*` families of metrics.md, as one string.
pub fn render(snapshot: &FleetSnapshot, format: Format) -> String {
    let mut out = String::new();
    for chunk in Chunks::new(snapshot.clone(), format) {
        out.push_str(std::str::from_utf8(&chunk).expect("the renderer writes UTF-8"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SeriesSet;
    use crate::model::{ErrorKind, LabelSet, Protocol, Series, TargetState, Value};

    pub(super) fn snap() -> FleetSnapshot {
        let mut t = TargetSnapshot::new("box\"1", Protocol::SMON, vec![("room".into(), "b12".into())]);
        t.state = TargetState::Up;
        t.connects = 2;
        t.errors.bump(ErrorKind::Decode);
        t.series = SeriesSet::from(vec![
            Series {
                family: Arc::from("smon_cpu_seconds_total"),
                help: "CPU time.",
                labels: LabelSet::new([("mode", "user")]),
                kind: MetricKind::Counter,
                value: Value::Number(12.5),
                rate: None,
            },
            Series {
                family: Arc::from("smon_lat_seconds"),
                help: "Latency.",
                labels: LabelSet::default(),
                kind: MetricKind::Histogram,
                value: Value::Histogram { buckets: vec![(0.5, 1), (1.0, 3)], sum: 2.0, count: 4 },
                rate: None,
            },
        ]);
        let down = TargetSnapshot::new("gone", Protocol::HMON, Vec::new());
        FleetSnapshot::from(vec![t, down])
    }

    #[test]
    fn a_plan_member_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Member>(), 16);
    }

    #[test]
    fn text_004_counters_keep_total_and_labels_are_escaped() {
        let out = render(&snap(), Format::Text004);
        assert!(out.contains("# TYPE smon_cpu_seconds_total counter\n"), "{out}");
        assert!(
            out.contains("smon_cpu_seconds_total{target=\"box\\\"1\",room=\"b12\",mode=\"user\"} 12.5\n"),
            "{out}"
        );
        assert!(out.contains("telemon_target_up{protocol=\"smon\",target=\"box\\\"1\",room=\"b12\"} 1\n"));
        assert!(out.contains("telemon_target_up{protocol=\"hmon\",target=\"gone\"} 0\n"));
        assert!(out.contains("telemon_target_errors_total{protocol=\"smon\",target=\"box\\\"1\",room=\"b12\",kind=\"decode\"} 1\n"));
        assert!(out.contains("smon_lat_seconds_bucket{target=\"box\\\"1\",room=\"b12\",le=\"+Inf\"} 4\n"));
        // The binary's families (crates/telemon's build_info and HTTP server), not the fleet's.
        assert!(!out.contains("telemon_build_info") && !out.contains("telemon_http_"), "{out}");
        assert!(!out.contains("# EOF"));
        // One HELP/TYPE per family even with several targets.
        assert_eq!(out.matches("# TYPE telemon_target_up ").count(), 1);
    }

    #[test]
    fn openmetrics_strips_total_in_metadata_and_ends_with_eof() {
        let out = render(&snap(), Format::OpenMetrics);
        assert!(out.contains("# TYPE smon_cpu_seconds counter\n"), "{out}");
        assert!(out.contains("smon_cpu_seconds_total{"));
        assert!(out.ends_with("# EOF\n"));
    }

    #[test]
    fn a_page_of_targets_alone_has_their_families_and_no_process_wide_one() {
        let snap = snap();
        for format in [Format::Text004, Format::OpenMetrics] {
            let mut page = String::new();
            for chunk in Chunks::targets_only(snap.clone(), format) {
                page.push_str(std::str::from_utf8(&chunk).unwrap());
            }
            let samples: Vec<&str> = page.lines().filter(|l| !l.starts_with('#')).collect();
            assert!(samples.len() > 5, "{page}");
            for line in &samples {
                assert!(
                    line.contains("{target=\"") || line.contains(",target=\""),
                    "a line of no target: {line}"
                );
            }
            assert!(
                page.contains("smon_lat_seconds_bucket{")
                    && page.contains("telemon_target_up{protocol=\"hmon\"")
            );
            assert!(!page.contains("telemon_listener_"), "{page}");
            assert_eq!(page.ends_with("# EOF\n"), format == Format::OpenMetrics);
        }
    }

    /// A fleet of small targets (pieces kept) and large ones (written at each scrape).
    fn mixed() -> FleetSnapshot {
        let mut targets: Vec<TargetSnapshot> = (0..6)
            .map(|i| {
                let mut t = TargetSnapshot::new(format!("t{i}"), Protocol::SYSINFO, Vec::new());
                t.state = TargetState::Up;
                t.connects = i;
                let n = if i % 2 == 0 { 3 } else { PIECE_SERIES + 10 };
                t.series = SeriesSet::from(
                    (0..n)
                        .map(|k| Series {
                            family: Arc::from(if k % 3 == 0 { "rvos_a" } else { "rvos_b_total" }),
                            help: "A.",
                            labels: LabelSet::new([("k", k.to_string().as_str())]),
                            kind: if k % 3 == 0 { MetricKind::Gauge } else { MetricKind::Counter },
                            value: Value::Number(k as f64 + 0.5),
                            rate: None,
                        })
                        .collect::<Vec<_>>(),
                );
                t
            })
            .collect();
        targets.extend(snap().targets.iter().map(|t| TargetSnapshot::clone(t)));
        targets.sort_by(|a, b| a.name.cmp(&b.name));
        FleetSnapshot::from(targets)
    }

    #[test]
    fn kept_pieces_and_lines_written_at_the_scrape_make_the_same_page() {
        for format in [Format::Text004, Format::OpenMetrics] {
            let fleet = mixed();
            assert!(
                fleet.targets.iter().any(|t| keeps_piece(t)) && fleet.targets.iter().any(|t| !keeps_piece(t))
            );
            let written = render(&fleet, format);
            assert!(fleet.targets.iter().all(|t| t.piece.get().is_none()), "a scrape renders no piece");
            // The small targets' pieces rendered (as their publications would), then the large
            // targets' too: the same page from pieces and lines, then from pieces alone.
            for t in fleet.targets.iter().filter(|t| keeps_piece(t)) {
                t.piece();
            }
            assert_eq!(render(&fleet, format), written);
            for t in &fleet.targets {
                t.piece();
            }
            assert_eq!(render(&fleet, format), written);
            assert_eq!(written.matches("# TYPE rvos_a gauge\n").count(), 1, "{written}");
            assert!(written.contains("rvos_b_total{target=\"t1\",k=\"56\"} 56.5\n"), "{written}");
        }
    }

    #[test]
    fn a_target_changed_after_a_scrape_is_scraped_as_changed() {
        let reg = crate::Registry::new();
        reg.want_pages();
        reg.put_idle(crate::registry::PIECES_FROM - 1);
        let mut p = crate::Publisher::new(&reg, "t", Protocol::METER161, Vec::<(String, String)>::new(), 10);
        p.up();
        p.set("m", "h", MetricKind::Gauge, Vec::new(), 1.0);
        p.flush();
        let first = reg.snapshot();
        assert!(
            first.get("t").is_some_and(|t| t.piece.get().is_some()),
            "a publication renders the piece when pages are wanted"
        );
        assert!(render(&first, Format::Text004).contains("m{target=\"t\"} 1\n"));
        p.set("m", "h", MetricKind::Gauge, Vec::new(), 2.0);
        p.flush();
        assert!(render(&reg.snapshot(), Format::Text004).contains("m{target=\"t\"} 2\n"));
        assert!(reg.update("t", |t| t.state = TargetState::Down));
        assert!(render(&reg.snapshot(), Format::Text004)
            .contains("telemon_target_up{protocol=\"meter161\",target=\"t\"} 0\n"));
        // The page taken before the changes still says what it said.
        assert!(render(&first, Format::Text004).contains("m{target=\"t\"} 1\n"));
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(Format::from_accept(None), Format::Text004);
        assert_eq!(Format::from_accept(Some("text/plain;version=0.0.4")), Format::Text004);
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prom)), Format::OpenMetrics);
    }
}

#[cfg(test)]
mod promtool {
    //! `promtool check metrics` on rendered output: needs promtool (Prometheus 2.42); fails under
    //! `CI=true` when it is missing, skips loudly otherwise.
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    #[test]
    fn text_004_passes_promtool_check_metrics() {
        let Ok(mut child) = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        else {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "promtool is missing under CI=true");
            eprintln!("SKIPPED: promtool not found on PATH (apt-get install prometheus); not checking the exposition");
            return;
        };
        let out = render(&super::tests::snap(), Format::Text004);
        child.stdin.take().expect("piped").write_all(out.as_bytes()).expect("write to promtool");
        let res = child.wait_with_output().expect("promtool runs");
        assert!(
            res.status.success(),
            "promtool rejected:\n{}{}\n{out}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
    }
}
