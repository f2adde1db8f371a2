//! A target's published series: a shared schema (families, and every series' pre-escaped label text
//! in one buffer), and the values, which are all that a publish copies.
//!
//! A [`SeriesSet`] is what a target's snapshot (`crate::model::TargetSnapshot`) carries. Its [`Schema`] is built once
//! when the target's set of series changes and is shared (`Arc`) by every later publish until the
//! next change; a publish hands over a flat array of [`Sample`]s (16 bytes each) and shares the
//! histograms that did not change. The label text is in the order render writes the series, so a
//! scrape reads each target's labels front to back.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A number as the peer sent it: integers stay exact (a `u64` counter above 2^53 is rendered
/// digit for digit), other values are `f64`.
#[derive(Debug, Clone, Copy)]
pub enum Num {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// Any other number (`NaN` and infinities included).
    Float(f64),
}

impl Num {
    /// The value as `f64` (integers above 2^53 are rounded).
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::Uint(v) => v as f64,
            Num::Float(v) => v,
        }
    }

    /// Whether `self` and `other` are the same value written the same way (floats compared bit for bit,
    /// so a `NaN` equals itself and a change of representation counts as a change).
    pub fn same(self, other: Num) -> bool {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (Num::Uint(a), Num::Uint(b)) => a == b,
            (Num::Float(a), Num::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl PartialEq for Num {
    fn eq(&self, other: &Num) -> bool {
        match (*self, *other) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (Num::Uint(a), Num::Uint(b)) => a == b,
            (Num::Int(a), Num::Uint(b)) | (Num::Uint(b), Num::Int(a)) => u64::try_from(a) == Ok(b),
            (a, b) => a.as_f64() == b.as_f64(),
        }
    }
}

impl From<f64> for Num {
    fn from(v: f64) -> Num {
        Num::Float(v)
    }
}

impl From<u64> for Num {
    fn from(v: u64) -> Num {
        Num::Uint(v)
    }
}

impl From<i64> for Num {
    fn from(v: i64) -> Num {
        Num::Int(v)
    }
}

impl From<u32> for Num {
    fn from(v: u32) -> Num {
        Num::Uint(u64::from(v))
    }
}

impl From<usize> for Num {
    fn from(v: usize) -> Num {
        Num::Uint(v as u64)
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        push_num(&mut s, *self);
        f.write_str(&s)
    }
}

/// Appends `v` as the exposition formats spell it: integers exactly, `NaN`, `+Inf`, `-Inf`, whole
/// floats below 2^53 without a fraction, other floats in their shortest round-trip form.
pub fn push_num(out: &mut String, v: Num) {
    // SAFETY-free: every byte written below is ASCII.
    let mut ibuf = itoa::Buffer::new();
    match v {
        Num::Int(i) => out.push_str(ibuf.format(i)),
        Num::Uint(u) => out.push_str(ibuf.format(u)),
        Num::Float(f) => push_f64(out, f),
    }
}

/// Appends a float as [`push_num`] does.
pub fn push_f64(out: &mut String, f: f64) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" });
    } else if f.fract() == 0.0 && f.abs() < EXACT {
        if f == 0.0 && f.is_sign_negative() {
            out.push_str("-0");
        } else {
            out.push_str(itoa::Buffer::new().format(f as i64));
        }
    } else if !push_short_decimal(out, f) {
        out.push_str(ryu::Buffer::new().format_finite(f));
    }
}

/// Writes `f` with at most six decimals when that text reads back as exactly `f` (ratios, shares,
/// seconds from milliseconds: most of the floats peers send), which costs a fraction of the
/// shortest-form search; `false` (nothing written) otherwise.
fn push_short_decimal(out: &mut String, f: f64) -> bool {
    const SCALE: f64 = 1e6;
    let scaled = f * SCALE;
    // `scaled / SCALE` is the correctly rounded quotient of two exact values, so when it equals `f`
    // the decimal `scaled / 10^6` parses back to `f`.
    if !(scaled.abs() < 1e15 && scaled.fract() == 0.0 && scaled / SCALE == f) {
        return false;
    }
    let n = scaled as i64;
    let a = n.unsigned_abs();
    let (int, frac) = (a / 1_000_000, a % 1_000_000);
    if n < 0 {
        out.push('-');
    }
    out.push_str(itoa::Buffer::new().format(int));
    if frac != 0 {
        let mut digits = [b'0'; 6];
        let mut rest = frac;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        let len = 6 - digits.iter().rev().take_while(|&&d| d == b'0').count();
        out.push('.');
        out.push_str(std::str::from_utf8(&digits[..len]).expect("ASCII digits"));
    }
    true
}

/// Appends `v` with the exposition format's label-value escaping: backslash, double quote and
/// newline are escaped; everything else (any UTF-8) is written as it is.
pub fn escape_label_value(out: &mut String, v: &str) {
    let mut rest = v;
    // A byte scan: the three are ASCII, so they never sit inside a multi-byte character.
    while let Some(i) = rest.bytes().position(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(&rest[..i]);
        out.push_str(match rest.as_bytes()[i] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        });
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

/// The labels of one series, kept as their exposition text (`a="x",b="y"`), escaped once when the
/// series is created; render copies the text as it is, and the pairs are read back from it.
///
/// A label set is a range of a shared text: the series of a [`SeriesSet`] share their target's
/// label text (the store keeps it in one buffer, in the order render reads it), so cloning a label
/// set costs a reference count and owns no copy. Equality and hashing are by text.
///
/// Label names are written as they are given: they must be valid Prometheus label names
/// (`[a-zA-Z_][a-zA-Z0-9_]*`), as every name telemon uses is.
///
/// A label whose value is empty is left out when the set is made: Prometheus reads `a=""` as no
/// label `a`, and remote write forbids sending one, so the series is the same without it, on
/// every view (a scrape, the push senders, the web view, `top`).
#[derive(Clone)]
pub struct LabelSet {
    buf: Arc<str>,
    start: u32,
    text_len: u32,
}

impl LabelSet {
    /// A label set from `(name, value)` pairs, kept in the order given; a pair with an empty value
    /// is left out.
    pub fn new<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> LabelSet {
        let mut text = String::new();
        for (k, v) in pairs {
            push_label(&mut text, k.as_ref(), v.as_ref());
        }
        LabelSet::from_text(&text)
    }

    /// A label set from text that [`push_label`] wrote (a text of 4 GiB or more reads back as empty).
    pub(crate) fn from_text(text: &str) -> LabelSet {
        let text_len = u32::try_from(text.len()).unwrap_or(u32::MAX);
        LabelSet { buf: Arc::from(text), start: 0, text_len }
    }

    /// The label set at `start..start + text_len` of a shared text.
    pub(crate) fn within(buf: &Arc<str>, start: u32, text_len: u32) -> LabelSet {
        LabelSet { buf: buf.clone(), start, text_len }
    }

    /// The `(name, value)` pairs, in order; a value is borrowed from the text unless it had to be
    /// escaped.
    pub fn iter(&self) -> LabelPairs<'_> {
        LabelPairs::of(self.text())
    }

    /// The value of the label `name`, if present.
    pub fn get(&self, name: &str) -> Option<Cow<'_, str>> {
        self.iter().get(name)
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.text_len == 0
    }

    /// The escaped exposition text, `a="x",b="y"` (empty when there are no labels).
    pub fn text(&self) -> &str {
        text_at(&self.buf, self.start, self.text_len)
    }

    /// A copy that owns only its own text. The label set of a published series shares its
    /// target's whole label text: one kept for longer than the snapshot it came from (a sender's map
    /// key) is detached, so that it does not keep that text alive after the target's series change.
    pub fn detached(&self) -> LabelSet {
        if self.start == 0 && self.text_len as usize == self.buf.len() {
            self.clone()
        } else {
            LabelSet::from_text(self.text())
        }
    }

    /// Whether `a` and `b` are the same label set of the same text, not only equal ones (senders
    /// recognise a series they have seen by this).
    pub fn ptr_eq(a: &LabelSet, b: &LabelSet) -> bool {
        Arc::ptr_eq(&a.buf, &b.buf) && a.start == b.start && a.text_len == b.text_len
    }
}

/// `len` bytes of `text` from `start` (empty if that is not a range of whole characters in it).
fn text_at(text: &str, start: u32, len: u32) -> &str {
    let start = start as usize;
    text.get(start..start.saturating_add(len as usize)).unwrap_or("")
}

impl PartialEq for LabelSet {
    fn eq(&self, other: &LabelSet) -> bool {
        self.text() == other.text()
    }
}

impl Eq for LabelSet {}

impl std::hash::Hash for LabelSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text().hash(state);
    }
}

impl Default for LabelSet {
    fn default() -> LabelSet {
        LabelSet::from_text("")
    }
}

impl fmt::Debug for LabelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.text())
    }
}

/// Appends one label, `name="value"` with the value escaped, and a comma before it unless `out`
/// is empty; nothing for an empty value, which is no label (see [`LabelSet`]). Every series' label
/// text is made here, once, when the series is created.
pub(crate) fn push_label(out: &mut String, name: &str, value: &str) {
    if value.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(name);
    out.push_str("=\"");
    escape_label_value(out, value);
    out.push('"');
}

/// The pairs of a [`LabelSet`], read from its text.
#[derive(Debug, Clone)]
pub struct LabelPairs<'a> {
    rest: &'a str,
}

impl<'a> LabelPairs<'a> {
    /// The pairs of a label set's text.
    pub(crate) fn of(text: &'a str) -> LabelPairs<'a> {
        LabelPairs { rest: text }
    }

    /// The value of the label `name`, if present.
    pub fn get(mut self, name: &str) -> Option<Cow<'a, str>> {
        self.find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

impl<'a> Iterator for LabelPairs<'a> {
    type Item = (&'a str, Cow<'a, str>);

    fn next(&mut self) -> Option<Self::Item> {
        // `name="escaped value"`, then `,` or the end. Every byte looked for is ASCII, so each cut is
        // at a character boundary; text that is not in this form (no label set holds any) ends the
        // walk.
        let text = self.rest;
        let eq = text.find("=\"")?;
        let bytes = text.as_bytes();
        let mut i = eq + 2;
        let mut escaped = false;
        while i < bytes.len() && bytes[i] != b'"' {
            if bytes[i] == b'\\' {
                escaped = true;
                i += 1;
            }
            i += 1;
        }
        let (name, value) = (text.get(..eq)?, text.get(eq + 2..i)?);
        self.rest = text.get(i + 1..).map_or("", |r| r.strip_prefix(',').unwrap_or(r));
        Some((name, if escaped { Cow::Owned(unescape_label_value(value)) } else { Cow::Borrowed(value) }))
    }
}

/// The inverse of [`escape_label_value`].
fn unescape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
        } else if let Some(e) = chars.next() {
            out.push(if e == 'n' { '\n' } else { e });
        }
    }
    out
}

/// A metric family of a target: name, HELP text and type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Family {
    /// The family name, e.g. `sys161_kernel_instructions_total`.
    pub name: Arc<str>,
    /// The HELP text.
    pub help: &'static str,
    /// The Prometheus type.
    pub kind: MetricKind,
}

/// The structure of a target's series: families sorted by name, each with its series. Targets whose
/// series are the same share one (see the store's `shared`).
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct Schema {
    pub(crate) families: Box<[Arc<Family>]>,
    /// Per family, its range of series.
    pub(crate) runs: Box<[Range<u32>]>,
    /// Per series, where its label text ends in `text` (it starts where the one before ends), with
    /// [`Schema::HIST`] set for a histogram. A series' place is also its value's place in
    /// [`SeriesSet`]'s samples and the key of its histogram, so that render reads the values in
    /// order: 4 bytes a series, of which a fleet's schemas hold hundreds of thousands.
    pub(crate) ends: Box<[u32]>,
    /// The label text of every series, in order.
    pub(crate) text: Arc<str>,
}

impl Schema {
    /// Marks a histogram in [`Schema::ends`] (label text is shorter than 2 GiB: see the store's arena).
    pub(crate) const HIST: u32 = 1 << 31;

    /// Number of series.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no series.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Series `i`'s label text: where it starts and its length, as [`text_at`] takes them.
    fn span(&self, i: u32) -> (u32, u32) {
        let end = |i: usize| self.ends.get(i).map_or(0, |e| e & !Schema::HIST);
        let start = if i == 0 { 0 } else { end(i as usize - 1) };
        (start, end(i as usize).saturating_sub(start))
    }

    /// Whether series `i` is a histogram.
    fn is_hist(&self, i: u32) -> bool {
        self.ends.get(i as usize).is_some_and(|e| e & Schema::HIST != 0)
    }
}

/// The current value of one series as published: its number and, for counters, the rate per second
/// from the last two updates (`NaN` when there is none). 16 bytes, as a fleet holds hundreds of
/// thousands: the rate is kept in single precision (about seven digits; it is for display, and the
/// exported value is the counter itself, exact).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// The value's bits: an `i64`, a `u64` or an `f64`, as `kind` says.
    bits: u64,
    rate: f32,
    kind: NumKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumKind {
    Int,
    Uint,
    Float,
}

impl Sample {
    /// A sample with no value (`NaN`) and no rate.
    pub const EMPTY: Sample = Sample::new(Num::Float(f64::NAN), f64::NAN);

    /// A sample of `value` with `rate` (`NaN`: none).
    pub const fn new(value: Num, rate: f64) -> Sample {
        let (bits, kind) = match value {
            Num::Int(v) => (v as u64, NumKind::Int),
            Num::Uint(v) => (v, NumKind::Uint),
            Num::Float(v) => (v.to_bits(), NumKind::Float),
        };
        Sample { bits, rate: rate as f32, kind }
    }

    /// The value (unused for histograms).
    pub const fn value(&self) -> Num {
        match self.kind {
            NumKind::Int => Num::Int(self.bits as i64),
            NumKind::Uint => Num::Uint(self.bits),
            NumKind::Float => Num::Float(f64::from_bits(self.bits)),
        }
    }

    /// The rate per second, `NaN` when unknown.
    pub fn rate(&self) -> f64 {
        f64::from(self.rate)
    }

    /// Whether `self` and `other` hold the same value and rate, bit for bit (a `NaN` equals itself).
    pub fn same(&self, other: &Sample) -> bool {
        self.bits == other.bits && self.kind == other.kind && self.rate.to_bits() == other.rate.to_bits()
    }
}

/// A histogram's current value: cumulative counts per upper bound (the `+Inf` bucket is `count`).
#[derive(Debug, Clone, PartialEq)]
pub struct Hist {
    /// Upper bounds (`le`), ascending; shared while they do not change.
    pub bounds: Arc<[f64]>,
    /// Each bound as the exposition writes it, formatted once with the bounds.
    pub le: Arc<[Box<str>]>,
    /// Cumulative count per bound.
    pub counts: Arc<[u64]>,
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Hist {
    /// A histogram with `le` texts formatted from `bounds`; both are shared with every other
    /// histogram with the same bounds, in any target.
    pub fn new(bounds: &[f64], counts: &[u64], sum: f64, count: u64) -> Hist {
        let (bounds, le) = shared_bounds(bounds);
        Hist { bounds, le, counts: Arc::from(counts), sum, count }
    }
}

/// How many different sets of bounds [`shared_bounds`] keeps track of at once.
const MAX_SHARED_BOUNDS: usize = 64;

/// `bounds` and their `le` texts, shared with the histograms that have the same bounds: a fleet of
/// a thousand peers of one kind has a few sets of bounds, each on thousands of histograms. Only
/// sets still in use are remembered, at most [`MAX_SHARED_BOUNDS`] of them; others get their own.
pub(crate) fn shared_bounds(bounds: &[f64]) -> (Arc<[f64]>, Arc<[Box<str>]>) {
    type Shared = Vec<(Weak<[f64]>, Weak<[Box<str>]>)>;
    static SHARED: Mutex<Shared> = Mutex::new(Vec::new());
    let same =
        |b: &[f64]| b.len() == bounds.len() && b.iter().zip(bounds).all(|(x, y)| x.to_bits() == y.to_bits());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    for (b, le) in shared.iter() {
        if let (Some(b), Some(le)) = (b.upgrade(), le.upgrade()) {
            if same(&b) {
                return (b, le);
            }
        }
    }
    let made: (Arc<[f64]>, _) = (Arc::from(bounds), le_texts(bounds));
    shared.retain(|(b, le)| b.strong_count() > 0 && le.strong_count() > 0);
    if shared.len() < MAX_SHARED_BOUNDS {
        shared.push((Arc::downgrade(&made.0), Arc::downgrade(&made.1)));
    }
    made
}

/// The exposition text of each bound.
fn le_texts(bounds: &[f64]) -> Arc<[Box<str>]> {
    bounds
        .iter()
        .map(|&b| {
            let mut s = String::new();
            push_f64(&mut s, b);
            s.into_boxed_str()
        })
        .collect()
}

/// A target's series as a view sees them. Cheap to clone: three `Arc`s.
#[derive(Debug, Clone)]
pub struct SeriesSet {
    pub(crate) schema: Arc<Schema>,
    /// The values in the schema's order (a series' value at its place in [`Schema::ends`]): the
    /// store's own vector, handed over at a publish (see [`crate::store::SeriesStore::publish`]).
    pub(crate) samples: Arc<Vec<Sample>>,
    /// The histograms, by their series' place in the schema (ascending).
    pub(crate) hists: Arc<[(u32, Hist)]>,
}

/// The empty set, shared: every target starts with it, and it was three allocations each.
static EMPTY_SET: std::sync::LazyLock<SeriesSet> = std::sync::LazyLock::new(|| SeriesSet {
    schema: Arc::default(),
    samples: Arc::default(),
    hists: Arc::from([]),
});

impl Default for SeriesSet {
    /// No series (one set that every caller shares).
    fn default() -> Self {
        EMPTY_SET.clone()
    }
}

/// A series' value as a view sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// A single number.
    Number(Num),
    /// A histogram.
    Histogram(&'a Hist),
}

/// One series of a [`SeriesSet`].
#[derive(Debug, Clone, Copy)]
pub struct SeriesRef<'a> {
    family: &'a Family,
    /// Its place in the schema.
    at: u32,
    set: &'a SeriesSet,
}

impl<'a> SeriesRef<'a> {
    /// The family name.
    pub fn family(&self) -> &'a str {
        &self.family.name
    }

    /// The family's HELP text.
    pub fn help(&self) -> &'static str {
        self.family.help
    }

    /// The Prometheus type.
    pub fn kind(&self) -> MetricKind {
        self.family.kind
    }

    /// The protocol-specific labels (the target's own labels are not included).
    pub fn labels(&self) -> LabelSet {
        let (start, len) = self.set.schema.span(self.at);
        LabelSet::within(&self.set.schema.text, start, len)
    }

    /// The escaped exposition text of the labels, `a="x",b="y"`.
    pub fn label_text(&self) -> &'a str {
        let (start, len) = self.set.schema.span(self.at);
        text_at(&self.set.schema.text, start, len)
    }

    /// The value of the label `name`, or `""`.
    pub fn label(&self, name: &str) -> Cow<'a, str> {
        LabelPairs::of(self.label_text()).get(name).unwrap_or_default()
    }

    fn sample(&self) -> Sample {
        self.set.samples.get(self.at as usize).copied().unwrap_or(Sample::EMPTY)
    }

    /// The value.
    pub fn value(&self) -> ValueRef<'a> {
        if self.set.schema.is_hist(self.at) {
            if let Ok(i) = self.set.hists.binary_search_by_key(&self.at, |h| h.0) {
                return ValueRef::Histogram(&self.set.hists[i].1);
            }
        }
        ValueRef::Number(self.sample().value())
    }

    /// The value as `f64`, or `None` for a histogram.
    pub fn number(&self) -> Option<f64> {
        match self.value() {
            ValueRef::Number(n) => Some(n.as_f64()),
            ValueRef::Histogram(_) => None,
        }
    }

    /// For counters, the rate per second from the last two updates; `None` until two updates exist,
    /// after a reset, and for every other kind.
    pub fn rate(&self) -> Option<f64> {
        let r = self.sample().rate();
        (!r.is_nan()).then_some(r)
    }

    /// An owned copy.
    pub fn to_series(&self) -> Series {
        let value = match self.value() {
            ValueRef::Number(n) => Value::Number(n.as_f64()),
            ValueRef::Histogram(h) => Value::Histogram {
                buckets: h.bounds.iter().copied().zip(h.counts.iter().copied()).collect(),
                sum: h.sum,
                count: h.count,
            },
        };
        Series {
            family: self.family.name.clone(),
            help: self.family.help,
            labels: self.labels(),
            kind: self.family.kind,
            value,
            rate: self.rate(),
        }
    }
}

/// One family of a [`SeriesSet`] with its series.
#[derive(Debug, Clone, Copy)]
pub struct FamilyRef<'a> {
    family: &'a Family,
    /// Its series' places in the schema, from `start` to before `end`.
    start: u32,
    end: u32,
    set: &'a SeriesSet,
}

impl<'a> FamilyRef<'a> {
    /// The family's name, HELP text and type.
    pub fn family(&self) -> &'a Family {
        self.family
    }

    /// Its series.
    pub fn series(&self) -> impl ExactSizeIterator<Item = SeriesRef<'a>> + 'a {
        let (family, set) = (self.family, self.set);
        (self.start..self.end).map(move |at| SeriesRef { family, at, set })
    }
}

impl SeriesSet {
    /// The schema: the same `Arc` while the target publishes the same series.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.schema.len()
    }

    /// Whether there are no series.
    pub fn is_empty(&self) -> bool {
        self.schema.is_empty()
    }

    /// The families, sorted by name.
    pub fn families(&self) -> impl ExactSizeIterator<Item = FamilyRef<'_>> + '_ {
        self.schema.families.iter().zip(self.schema.runs.iter()).map(move |(family, run)| FamilyRef {
            family,
            start: run.start,
            end: run.end,
            set: self,
        })
    }

    /// The `i`th family (in name order), if any.
    pub fn family_at(&self, i: usize) -> Option<FamilyRef<'_>> {
        let (family, run) = (self.schema.families.get(i)?, self.schema.runs.get(i)?);
        Some(FamilyRef { family, start: run.start, end: run.end, set: self })
    }

    /// Asks the CPU to fetch, ahead of rendering, what family `i` is read from. Each `step`, 4 down
    /// to 1, reads what the step before fetched and fetches the next link: the schema and the values,
    /// the family's run, its first series, then that series' label text and value.
    /// Render takes the steps for the families it will write next, four, three, two and one ahead:
    /// with a thousand targets none of them is in the cache, and rendering stalled on each in turn.
    pub(crate) fn prefetch(&self, i: usize, step: u8) {
        let schema = &*self.schema;
        // Read only by steps 2 and 1, once step 3 has fetched the run.
        let first = || schema.runs.get(i).map(|run| run.start);
        match step {
            4 => {
                prefetch(schema);
                prefetch(&*self.samples);
            }
            3 => {
                if let Some(run) = schema.runs.get(i) {
                    prefetch(run);
                }
                prefetch(self.samples.as_ptr());
            }
            2 => {
                if let Some(at) = first() {
                    // The end before its own, where its text starts.
                    prefetch(schema.ends.as_ptr().wrapping_add((at as usize).saturating_sub(1)));
                }
            }
            _ => {
                if let Some(at) = first() {
                    let (start, _) = schema.span(at);
                    prefetch(schema.text.as_ptr().wrapping_add(start as usize));
                    prefetch(self.samples.as_ptr().wrapping_add(at as usize));
                }
            }
        }
    }

    /// Every series, sorted by family.
    pub fn iter(&self) -> impl Iterator<Item = SeriesRef<'_>> + '_ {
        self.families().flat_map(|f| f.series())
    }

    /// The series of `family`.
    pub fn family(&self, name: &str) -> impl Iterator<Item = SeriesRef<'_>> + '_ {
        let i = self.schema.families.binary_search_by(|f| (*f.name).cmp(name)).ok();
        i.and_then(|i| self.family_at(i)).into_iter().flat_map(|f| f.series())
    }

    /// Every series as `family{labels} value`, sorted (for tests).
    #[cfg(test)]
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.iter().map(|s| format!("{}{{{}}} {:?}", s.family(), s.label_text(), s.number())).collect();
        v.sort();
        v
    }

    /// Owned copies of every series.
    pub fn to_vec(&self) -> Vec<Series> {
        self.iter().map(|s| s.to_series()).collect()
    }
}

impl PartialEq for SeriesSet {
    fn eq(&self, other: &SeriesSet) -> bool {
        self.len() == other.len()
            && self.iter().zip(other.iter()).all(|(a, b)| a.to_series() == b.to_series())
    }
}

/// Asks the CPU to bring `p`'s cache line in, without waiting for it (nothing where that cannot be
/// asked).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no memory, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The Prometheus type of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// Monotonic counter (family name ends in `_total`).
    Counter,
    /// Gauge.
    Gauge,
    /// Info: a gauge of 1 whose labels carry the information (family name ends in `_info`).
    Info,
    /// Histogram (value is [`Value::Histogram`]).
    Histogram,
}

impl MetricKind {
    /// The `# TYPE` word in the Prometheus text format 0.0.4 (info is a gauge there).
    pub fn prometheus_type(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge | MetricKind::Info => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// The current value of a series.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A single number.
    Number(f64),
    /// A histogram: cumulative bucket counts by upper bound `le` (ascending; `+Inf` implied by
    /// `count`), the sum of the observations and their count.
    Histogram {
        /// `(le, cumulative count)` pairs, ascending by `le`.
        buckets: Vec<(f64, u64)>,
        /// Sum of all observations.
        sum: f64,
        /// Number of observations.
        count: u64,
    },
}

impl Value {
    /// The number, or `None` for a histogram.
    pub fn as_number(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            Value::Histogram { .. } => None,
        }
    }
}

/// One series of a target, owned: a family name, protocol-specific labels and the current value
/// (see [`SeriesSet::to_vec`]; views borrow [`SeriesRef`]s instead).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Family name, e.g. `sys161_kernel_instructions_total`.
    pub family: Arc<str>,
    /// The family's HELP text.
    pub help: &'static str,
    /// Protocol-specific labels only; `target` and the target's configured labels are added when
    /// rendering. Shared with the store (a snapshot costs no label copies).
    pub labels: LabelSet,
    /// Counter, gauge, info or histogram.
    pub kind: MetricKind,
    /// Current value.
    pub value: Value,
    /// For counters: the rate per second computed from the last two updates; `None` until two
    /// updates exist, after a reset, and for every other kind.
    pub rate: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_with_the_same_bounds_share_them_and_their_le_texts() {
        // Bounds no other test uses: the shared sets are process-wide.
        let bounds = [0.125, 0.25, 7e20];
        let a = Hist::new(&bounds, &[1, 2, 3], 1.0, 3);
        let b = Hist::new(&bounds, &[0, 0, 0], 0.0, 0);
        assert!(Arc::ptr_eq(&a.bounds, &b.bounds) && Arc::ptr_eq(&a.le, &b.le));
        assert_eq!(&*a.le, ["0.125".into(), "0.25".into(), "7e20".into()] as [Box<str>; 3]);
        let c = Hist::new(&[0.125, 0.25], &[1, 2], 1.0, 2);
        assert!(!Arc::ptr_eq(&a.bounds, &c.bounds), "other bounds are not shared");
        assert_eq!(a.counts[..], [1, 2, 3], "counts are each histogram's own");
        // -0.0 and 0.0 are different texts: they are not the same bounds.
        let (z, le) = shared_bounds(&[-0.0]);
        let (p, _) = shared_bounds(&[0.0]);
        assert!(!Arc::ptr_eq(&z, &p) && &*le[0] == "-0");
    }

    fn num(v: Num) -> String {
        let mut s = String::new();
        push_num(&mut s, v);
        s
    }

    #[test]
    fn integers_are_exact_above_2_pow_53() {
        assert_eq!(num(Num::Uint(u64::MAX)), "18446744073709551615");
        assert_eq!(num(Num::Uint((1 << 53) + 1)), "9007199254740993");
        assert_eq!(num(Num::Int(i64::MIN)), "-9223372036854775808");
        // Through f64 the same value would have been rounded.
        assert_ne!(num(Num::Float(((1u64 << 53) + 1) as f64)), "9007199254740993");
    }

    #[test]
    fn floats_as_prometheus_spells_them() {
        assert_eq!(num(Num::Float(1.0)), "1");
        assert_eq!(num(Num::Float(-3.0)), "-3");
        assert_eq!(num(Num::Float(12.5)), "12.5");
        assert_eq!(num(Num::Float(0.1)), "0.1");
        assert_eq!(num(Num::Float(f64::NAN)), "NaN");
        assert_eq!(num(Num::Float(f64::INFINITY)), "+Inf");
        assert_eq!(num(Num::Float(f64::NEG_INFINITY)), "-Inf");
        assert_eq!(num(Num::Float(1e300)), "1e300");
        assert_eq!(num(Num::Float(1.5e-7)), "1.5e-7");
        assert_eq!(num(Num::Float(-0.0)), "-0");
        assert_eq!(num(Num::Float(0.125)), "0.125");
        assert_eq!(num(Num::Float(-2.5)), "-2.5");
        assert_eq!(num(Num::Float(-0.000001)), "-0.000001");
        assert_eq!(num(Num::Float(0.30000000000000004)), "0.30000000000000004");
        assert_eq!(num(Num::Float(1234.5678)), "1234.5678");
        for v in [0.1, 1e300, 1.5e-7, 123456.789, f64::MIN_POSITIVE, 2f64.powi(60)] {
            assert_eq!(num(Num::Float(v)).parse::<f64>().unwrap(), v, "round trip of {v}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_float_reads_back_exactly(bits in proptest::num::u64::ANY, small in -1e7f64..1e7, decimals in 0u32..7) {
            for f in [f64::from_bits(bits), small, (small * 10f64.powi(decimals as i32)).round() / 10f64.powi(decimals as i32)] {
                let text = num(Num::Float(f));
                if f.is_nan() {
                    proptest::prop_assert_eq!(text, "NaN");
                } else {
                    let back: f64 = text.replace("Inf", "inf").parse().unwrap();
                    proptest::prop_assert_eq!(back.to_bits(), f.to_bits(), "{} -> {}", f, text);
                }
            }
        }
    }

    #[test]
    fn label_values_escaped_as_the_exposition_format_says() {
        let esc = |v: &str| {
            let mut s = String::new();
            escape_label_value(&mut s, v);
            s
        };
        assert_eq!(esc("plain"), "plain");
        assert_eq!(esc(r"a\b"), r"a\\b");
        assert_eq!(esc("say \"hi\""), r#"say \"hi\""#);
        assert_eq!(esc("two\nlines"), r"two\nlines");
        assert_eq!(esc("tab\tand\rcr"), "tab\tand\rcr", "only \\, \" and newline are escaped");
        assert_eq!(esc("été ∑ 日本 🦀"), "été ∑ 日本 🦀", "UTF-8 that is not ASCII is written as it is");
        assert_eq!(esc("\\\"\n"), "\\\\\\\"\\n");
        let set = LabelSet::new([("a", "x\"y"), ("b", "z")]);
        assert_eq!(set.text(), r#"a="x\"y",b="z""#);
        assert_eq!(set.get("a").as_deref(), Some("x\"y"));
        assert_eq!(LabelSet::default().text(), "");
    }

    /// Remote write 1.0: a label MUST NOT have an empty value; Prometheus reads one as no label. So
    /// a set never holds one, and the series is the one without it.
    #[test]
    fn a_label_with_an_empty_value_is_no_label() {
        let set = LabelSet::new([("name", "cpu.idle"), ("index", ""), ("z", "1")]);
        assert_eq!(set.text(), r#"name="cpu.idle",z="1""#);
        assert_eq!((set.get("index"), set.len()), (None, 2));
        assert_eq!(set, LabelSet::new([("name", "cpu.idle"), ("z", "1")]), "the same series");
        assert_eq!(LabelSet::new([("index", "")]).text(), "");
        assert!(LabelSet::new([("a", ""), ("b", "")]).is_empty());
        assert_eq!(LabelSet::new([("a", ""), ("b", "x")]).text(), r#"b="x""#, "no comma before the first");
    }

    #[test]
    fn a_label_set_reads_its_pairs_back_from_its_text() {
        let pairs = [("a", "x=\"y\",b=\"z"), ("b", "\\"), ("c", " "), ("d", "two\nlines"), ("e", "日本")];
        let set = LabelSet::new(pairs);
        let back: Vec<(&str, String)> = set.iter().map(|(k, v)| (k, v.into_owned())).collect();
        assert_eq!(back, pairs.map(|(k, v)| (k, v.to_owned())));
        assert_eq!(set.len(), 5);
        assert_eq!(set.get("c").as_deref(), Some(" "));
        assert_eq!(set.get("z"), None);
        assert!(matches!(set.get("e"), Some(Cow::Borrowed(_))), "a value with nothing escaped is borrowed");
        assert_eq!(LabelSet::default().iter().count(), 0);
        assert!(LabelSet::default().is_empty());
    }

    #[test]
    fn text_that_is_not_a_label_set_ends_the_walk_without_panicking() {
        for text in ["a", "a=\"", "a=\"x", "a=\"x\\", "=\"\"", "a=\"x\"junk", "a=\"\\\u{e9}\"", ",,,"] {
            let n = LabelSet::from_text(text).iter().count();
            assert!(n <= 1, "{text:?} gave {n} pairs");
        }
    }

    proptest::proptest! {
        #[test]
        fn label_sets_round_trip_any_values(values in proptest::collection::vec(proptest::prelude::any::<String>(), 0..5)) {
            let pairs: Vec<(String, String)> = values.into_iter().enumerate().map(|(i, v)| (format!("l{i}"), v)).collect();
            let set = LabelSet::new(pairs.iter().map(|(k, v)| (k, v)));
            let back: Vec<(String, String)> = set.iter().map(|(k, v)| (k.to_owned(), v.into_owned())).collect();
            let kept: Vec<(String, String)> = pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect();
            proptest::prop_assert_eq!(back, kept);
        }

        #[test]
        fn any_text_never_panics(text in proptest::prelude::any::<String>()) {
            let set = LabelSet::from_text(&text);
            let _ = set.iter().count();
            let _ = set.get("a");
        }
    }

    #[test]
    fn a_set_from_owned_series_round_trips() {
        let series = vec![
            Series {
                family: Arc::from("b_total"),
                help: "B.",
                labels: LabelSet::new([("k", "v")]),
                kind: MetricKind::Counter,
                value: Value::Number(3.0),
                rate: Some(1.5),
            },
            Series {
                family: Arc::from("a_seconds"),
                help: "A.",
                labels: LabelSet::default(),
                kind: MetricKind::Histogram,
                value: Value::Histogram { buckets: vec![(0.5, 1), (1.0, 3)], sum: 2.0, count: 4 },
                rate: None,
            },
        ];
        let set = SeriesSet::from_series(series.clone());
        assert_eq!(set.len(), 2);
        let back = set.to_vec();
        assert_eq!(back, [series[1].clone(), series[0].clone()], "sorted by family");
        assert_eq!(set.family("b_total").next().map(|s| s.label("k")).as_deref(), Some("v"));
        assert!(set.family("c").next().is_none());
    }
}
