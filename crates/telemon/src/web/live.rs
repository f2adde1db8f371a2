//! The web view's live state: a sampler that, once a second, keeps each target's state log and, while
//! a view is watching, records what the views show into the shared [`History`] and publishes what
//! changed since the last second.
//!
//! What is watched decides what is done (see [`WebHistory`]):
//!
//! | watched | done each second |
//! |---|---|
//! | nothing (and not for a [`LINGER`]) | each target's state and since when (for the state log); nothing else is kept |
//! | `/` (its stream, or its API within a [`LINGER`]) | also `/`'s rows and delta, and the headline figures' history |
//! | a target's page (its stream, or its API within a [`LINGER`]) | also every series of that target into the history |
//! | anything, with `web_history = "always"` | every series of every target into the history, and `/`'s rows |

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::WebHistory;
use tokio::time::Instant;

use crate::history::{self, History, Priority, DERIVED};
use serde_json::{json, Map, Value};
use telemon_fleet::collect::AbortOnDrop;
use telemon_fleet::protocol::{Carry, Figure};
use telemon_fleet::{
    Fleet, FleetSnapshot, MetricKind, Protocols, SeriesRef, TargetSnapshot, TargetState, ValueRef,
};
use tokio::sync::broadcast;

/// The seconds of a sparkline on `/`.
pub const SPARK_SECS: u32 = 300;
/// The seconds of history a target page starts with (`?window=` asks for up to an hour).
pub const TARGET_WINDOW: u32 = 600;
/// State changes kept per target.
pub const STATE_LOG: usize = 32;
/// How long a view counts as watching after its stream closed or its last API request: a page
/// reloaded, or a tab opened again, finds its charts where it left them.
pub const LINGER: Duration = Duration::from_secs(60);
/// The series planned in the history per target for `/`'s headline figures.
const HEADLINES: usize = 3;

/// One second's update, shared by every stream.
#[derive(Debug)]
pub struct Tick {
    /// The history's second of this sample.
    pub at: u32,
    /// The fleet as sampled.
    pub snapshot: FleetSnapshot,
    /// `/`'s delta: the rows (only their changed fields) of the targets that changed, the ones gone,
    /// and the summary, as JSON.
    pub delta: String,
}

/// What the sampler keeps per target between seconds.
#[derive(Debug)]
struct Kept {
    state: TargetState,
    since: f64,
    log: VecDeque<(f64, TargetState)>,
    /// The row `/` last got (empty while `/` is not watched).
    row: Row,
    /// What the target's protocol keeps between two calls of its headlines (smon's CPU counters).
    carry: Carry,
}

/// Who watches one thing (`/`, or a target's page): streams open, and the last time one was asked
/// for or closed.
#[derive(Debug, Clone, Copy)]
struct Watchers {
    streams: usize,
    last: Instant,
}

impl Watchers {
    fn watching(&self, now: Instant) -> bool {
        self.streams > 0 || now.duration_since(self.last) < LINGER
    }
}

#[derive(Debug, Default)]
struct Inner {
    history: History,
    at: u32,
    kept: HashMap<Arc<str>, Kept>,
    summary: Value,
    /// `/`'s watchers.
    fleet: Option<Watchers>,
    /// Whether the rows of `/` in `kept` (and `summary`) are of the last sample.
    rows: bool,
    /// The target pages' watchers, by target name.
    pages: HashMap<Arc<str>, Watchers>,
}

/// The sampler's state, shared by the handlers.
#[derive(Debug)]
pub struct Live {
    /// The fleet watched.
    pub fleet: Arc<Fleet>,
    started: Instant,
    started_unix: f64,
    inner: Mutex<Inner>,
    ticks: broadcast::Sender<Arc<Tick>>,
    /// `web_history = "always"`.
    always: AtomicBool,
}

/// What a view stream is watching; dropped with the stream, it starts that view's [`LINGER`].
#[derive(Debug)]
pub struct Watch {
    live: Weak<Live>,
    page: Option<Arc<str>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let Some(live) = self.live.upgrade() else { return };
        let now = Instant::now();
        let mut inner = live.lock();
        let w = match &self.page {
            None => inner.fleet.as_mut(),
            Some(name) => inner.pages.get_mut(name),
        };
        if let Some(w) = w {
            w.streams = w.streams.saturating_sub(1);
            w.last = now;
        }
    }
}

fn unix(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A number for JSON: `null` when not finite, else the shortest decimal that single precision
/// keeps (`0.1`, where `json!(0.1f32)` would write `0.10000000149011612`).
pub fn num(v: Option<f64>) -> Value {
    match v.map(|v| v as f32) {
        Some(v) if v.is_finite() => v.to_string().parse::<f64>().map_or(Value::Null, Value::from),
        _ => Value::Null,
    }
}

/// The unit of what a chart plots of a series, from its family name: a counter's rate is per second.
pub fn unit(family: &str, kind: MetricKind) -> &'static str {
    let base = family.strip_suffix("_total").unwrap_or(family);
    let u = if base.ends_with("_bytes") {
        "B"
    } else if base.ends_with("_seconds") {
        "s"
    } else if base.ends_with("_ratio") {
        "ratio"
    } else {
        ""
    };
    match (kind, u) {
        (MetricKind::Counter, "B") => "B/s",
        (MetricKind::Counter, "s") => "s/s",
        (MetricKind::Counter, _) => "/s",
        _ => u,
    }
}

/// A headline figure of a row on `/`.
struct Headline<'a> {
    title: Cow<'a, str>,
    unit: &'static str,
    /// Its series' key in the history (empty when there is none).
    key: Cow<'a, str>,
    value: Option<f64>,
}

fn from_series<'a>(title: impl Into<Cow<'a, str>>, s: Option<SeriesRef<'a>>) -> Headline<'a> {
    let (key, value, unit) = match s {
        // A series without labels is keyed by its family's name: nothing to allocate.
        Some(s) if s.labels().is_empty() => {
            (Cow::Borrowed(s.family()), history::plotted(&s), unit(s.family(), s.kind()))
        }
        Some(s) => (Cow::Owned(history::key(&s)), history::plotted(&s), unit(s.family(), s.kind())),
        None => (Cow::Borrowed(""), None, ""),
    };
    Headline { title: title.into(), unit, key, value }
}

/// The two or three figures `/` shows of a target: its protocol's headlines (see docs/web.md). `carry` is
/// what the protocol keeps from the second before.
fn headlines<'a>(protocols: &Protocols, t: &'a TargetSnapshot, carry: &mut Carry) -> Vec<Headline<'a>> {
    let Some(component) = protocols.get(t.protocol.as_str()) else { return Vec::new() };
    component
        .headlines(t, carry)
        .into_iter()
        .map(|h| match h.figure {
            Figure::Series(s) => from_series(h.title, s),
            Figure::Derived { unit, key, value } => {
                Headline { title: h.title, unit, key: Cow::Borrowed(key), value }
            }
        })
        .collect()
}

/// The labels of a target as a JSON object.
pub fn labels(t: &TargetSnapshot) -> Value {
    Value::Object(t.labels.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect())
}

impl Live {
    /// Starts the sampler on the current runtime; it ends when the returned guard is dropped (or the
    /// handlers' last reference to the state goes).
    pub fn start(fleet: Arc<Fleet>, history: WebHistory) -> (Arc<Live>, AbortOnDrop) {
        let (ticks, _) = broadcast::channel(8);
        let live = Arc::new(Live {
            fleet,
            started: Instant::now(),
            started_unix: unix(SystemTime::now()),
            inner: Mutex::new(Inner::default()),
            ticks,
            always: AtomicBool::new(false),
        });
        live.set_history(history);
        live.sample(false);
        let weak = Arc::downgrade(&live);
        let task = tokio::spawn(run(weak));
        (live, AbortOnDrop(task))
    }

    /// Sets when the history is kept (a reload of `[serve] web_history`).
    pub fn set_history(&self, history: WebHistory) {
        self.always.store(history == WebHistory::Always, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver of the ticks to come.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Tick>> {
        self.ticks.subscribe()
    }

    /// Unix time of the history's second `at`.
    pub fn unix_at(&self, at: u32) -> f64 {
        self.started_unix + f64::from(at)
    }

    /// `/` is watched: by a stream (until the returned guard is dropped, then a [`LINGER`]), or by a
    /// request of its API (for a [`LINGER`]). If `/`'s rows were not kept, the fleet is sampled at
    /// once, so that [`Live::full`] answers with every row.
    pub fn watch_fleet(self: &Arc<Self>, stream: bool) -> Option<Watch> {
        let now = Instant::now();
        let stale = {
            let mut inner = self.lock();
            let w = inner.fleet.get_or_insert(Watchers { streams: 0, last: now });
            w.last = now;
            w.streams += usize::from(stream);
            !inner.rows
        };
        if stale {
            self.sample(false);
        }
        stream.then(|| Watch { live: Arc::downgrade(self), page: None })
    }

    /// The page of the target `name` is watched (as [`Live::watch_fleet`]): every series of it is
    /// recorded from the next second on. A request of the API counts only for a target that exists;
    /// a stream counts while it is open (and waits for the target to come).
    pub fn watch_page(self: &Arc<Self>, name: &str, stream: bool) -> Option<Watch> {
        let now = Instant::now();
        let name: Arc<str> = match self.fleet.snapshot().get(name) {
            Some(t) => t.name.clone(),
            None if stream => Arc::from(name),
            None => return None,
        };
        let mut inner = self.lock();
        let w = inner.pages.entry(name.clone()).or_insert(Watchers { streams: 0, last: now });
        w.last = now;
        w.streams += usize::from(stream);
        stream.then(|| Watch { live: Arc::downgrade(self), page: Some(name) })
    }

    /// Samples the fleet once now, as the sampler does each second (for benches and tools that
    /// drive a view without waiting).
    pub fn sample_now(&self) {
        self.sample(true);
    }

    /// Samples the fleet once: the state logs always; while watched, what the views show into the
    /// history and `/`'s delta; then publishes it. `periodic` is the sampler's second (always a new
    /// second); otherwise a view asked for a sample now (at the current second).
    fn sample(&self, periodic: bool) {
        let snapshot = self.fleet.snapshot();
        let protocols = self.fleet.protocols();
        let now_i = Instant::now();
        let always = self.always.load(Ordering::Relaxed);
        let mut inner = self.lock();
        let elapsed = now_i.duration_since(self.started).as_secs_f64().round() as u32;
        let at = if periodic { elapsed.max(inner.at + 1) } else { elapsed.max(inner.at) };
        inner.at = at;
        let now = self.unix_at(at);
        if !inner.fleet.is_some_and(|w| w.watching(now_i)) {
            inner.fleet = None;
        }
        let fleet_on = always || inner.fleet.is_some();
        inner.pages.retain(|_, w| w.watching(now_i));
        let Inner { history, kept, pages, .. } = &mut *inner;
        let recording = fleet_on || !pages.is_empty();
        if recording {
            let planned: usize = if always {
                snapshot.targets.iter().map(|t| t.series.len()).sum()
            } else {
                let pages: usize = pages.keys().filter_map(|n| snapshot.get(n)).map(|t| t.series.len()).sum();
                pages + if fleet_on { snapshot.targets.len() * HEADLINES } else { 0 }
            };
            history.begin(&snapshot, at, planned);
            // The pages watched first: what is shown finds room before what nobody looks at.
            for t in pages.keys().filter_map(|n| snapshot.get(n)) {
                history.record_target(t, Priority::Shown);
            }
        } else {
            *history = History::new();
        }
        // `/`'s delta's rows, written as JSON text (not built as `Value`s: most seconds change
        // every row's figures), and one row's fields.
        let mut rows = String::from("[");
        let mut fields = String::new();
        for t in &snapshot.targets {
            if !kept.contains_key(&t.name) {
                let k = Kept {
                    state: t.state,
                    since: now,
                    log: VecDeque::from([(now, t.state)]),
                    row: Row::default(),
                    carry: Carry::default(),
                };
                kept.insert(t.name.clone(), k);
            }
            let Some(k) = kept.get_mut(&t.name) else { continue };
            if k.state != t.state {
                k.state = t.state;
                k.since = now;
                if k.log.len() >= STATE_LOG {
                    k.log.pop_front();
                }
                k.log.push_back((now, t.state));
            }
            let page = pages.contains_key(&t.name);
            if always && !page {
                history.record_target(t, Priority::Background);
            }
            if !fleet_on {
                continue;
            }
            let heads = headlines(&protocols, t, &mut k.carry);
            for h in &heads {
                // A page's series are recorded already; its derived figures are not. A target recorded
                // in the background may have been refused room that its figures are given.
                if let Some(v) =
                    h.value.filter(|_| !h.key.is_empty() && (!page || h.key.starts_with(DERIVED)))
                {
                    history.put(&t.name, &h.key, v);
                }
            }
            fields.clear();
            k.row.update(t, k.since, &heads, &mut fields);
            if !fields.is_empty() {
                rows.push_str(if rows.len() > 1 { ",{" } else { "{" });
                rows.push_str(&fields);
                let _ = write!(rows, "\"name\":{}}}", Value::from(&*t.name));
            }
        }
        let mut gone: Vec<Arc<str>> = Vec::new();
        if kept.len() > snapshot.targets.len() {
            gone = kept.keys().filter(|n| snapshot.get(n).is_none()).cloned().collect();
            for name in &gone {
                kept.remove(name);
            }
        }
        if !fleet_on && inner.rows {
            // `/` is no longer watched: its rows go (and the smon CPU figures, now out of date), and
            // the history of the targets whose page is not watched either.
            let Inner { history, kept, pages, summary, .. } = &mut *inner;
            for k in kept.values_mut() {
                k.row = Row::default();
                k.carry = Carry::default();
            }
            *summary = Value::Null;
            history.retain(|name| pages.contains_key(name));
        }
        inner.rows = fleet_on;
        if !recording {
            return;
        }
        let delta = if fleet_on {
            let summary = summary(&snapshot);
            rows.push(']');
            let gone: Vec<&str> = gone.iter().map(|n| &**n).collect();
            let delta = format!(
                "{{\"at\":{at},\"t\":{},\"rows\":{rows},\"gone\":{},\"summary\":{summary}}}",
                json!(now),
                json!(gone)
            );
            inner.summary = summary;
            delta
        } else {
            String::new()
        };
        drop(inner);
        let _ = self.ticks.send(Arc::new(Tick { at, snapshot, delta }));
    }

    /// `/`'s full state: every row, the summary, and the second it is of.
    pub fn full(&self) -> Value {
        let inner = self.lock();
        let snapshot = self.fleet.snapshot();
        let rows: Vec<Value> = snapshot
            .targets
            .iter()
            .filter_map(|t| inner.kept.get(&t.name).map(|k| Value::Object(k.row.json(t))))
            .collect();
        json!({
            "at": inner.at,
            "t": self.unix_at(inner.at),
            "spark_secs": SPARK_SECS,
            "summary": inner.summary,
            "rows": rows,
            // What the history holds now, for a soak watching it over hours (`sims/product-soak`).
            "history": {
                "series": inner.history.series(),
                "points": inner.history.len(),
                "bytes": inner.history.memory(),
            },
        })
    }

    /// The headline sparklines of `names` as JSON text: per target, per headline, the last
    /// [`SPARK_SECS`] values ending at `at` (`null` where none). Written directly, not built as a
    /// `Value` first: 1,000 targets are 600,000 numbers.
    pub fn sparklines(&self, names: &[String]) -> String {
        let inner = self.lock();
        let snapshot = self.fleet.snapshot();
        let protocols = self.fleet.protocols();
        let mut out = String::with_capacity(64 + names.len().min(1000) * 2 * SPARK_SECS as usize * 2);
        let _ = write!(out, "{{\"at\":{},\"spark\":{{", inner.at);
        let mut comma = "";
        for name in names.iter().take(1000) {
            let Some(t) = snapshot.get(name) else { continue };
            out.push_str(comma);
            comma = ",";
            out.push_str(&Value::from(name.as_str()).to_string());
            out.push_str(":[");
            let mut carry = inner.kept.get(&t.name).map(|k| k.carry).unwrap_or_default();
            for (i, h) in headlines(&protocols, t, &mut carry).iter().enumerate() {
                out.push_str(if i == 0 { "[" } else { ",[" });
                for (j, v) in inner.history.last_seconds(&t.name, &h.key, SPARK_SECS).into_iter().enumerate()
                {
                    if j > 0 {
                        out.push(',');
                    }
                    push_num(&mut out, v);
                }
                out.push(']');
            }
            out.push(']');
        }
        out.push_str("}}");
        out
    }

    /// One target's page: every series grouped by family with help, unit, value, rate and the last
    /// `window` seconds; events; state log. `None` when there is no such target.
    pub fn target(&self, name: &str, window: u32) -> Option<Value> {
        let snapshot = self.fleet.snapshot();
        let t = snapshot.get(name)?;
        let inner = self.lock();
        let history = &inner.history;
        let bounded = history.bounded(&t.name);
        let window = window.clamp(10, history::MAX_WINDOW_SECS);
        let families: Vec<Value> = t
            .series
            .families()
            .map(|f| {
                let fam = f.family();
                let series: Vec<Value> = f
                    .series()
                    .map(|s| {
                        let key = history::key(&s);
                        let points = past(history, &t.name, &s, &key, window);
                        let mut o = series_json(&s, &key, plotted_json(history, &t.name, &s, &key));
                        // A histogram's `plotted` is an array: never null.
                        let shown = !o["plotted"].is_null();
                        o.insert("bound".into(), Value::Bool(bounded && shown && points.is_empty()));
                        o.insert("history".into(), Value::Array(points));
                        Value::Object(o)
                    })
                    .collect();
                json!({
                    "name": &*fam.name,
                    "help": fam.help,
                    "kind": fam.kind.prometheus_type(),
                    "unit": unit(&fam.name, fam.kind),
                    "series": series,
                })
            })
            .collect();
        let k = inner.kept.get(&t.name);
        let mut o = target_fields(t, k);
        o.insert("at".into(), json!(inner.at));
        o.insert("t".into(), json!(self.unix_at(inner.at)));
        o.insert("window".into(), json!(window));
        o.insert("history_bound".into(), json!(history::MAX_SERIES));
        o.insert("families".into(), Value::Array(families));
        Some(Value::Object(o))
    }

    /// Each series of `t`: its key, and its value, rate and what a chart plots of it (as
    /// [`series_json`] has them), for a target page's stream to send what changed.
    pub fn figures(&self, t: &TargetSnapshot) -> (Vec<String>, Vec<(Value, Value, Value)>) {
        let inner = self.lock();
        t.series
            .iter()
            .map(|s| {
                let key = history::key(&s);
                let plotted = plotted_json(&inner.history, &t.name, &s, &key);
                let o = series_json(&s, &key, plotted);
                (key, (o["value"].clone(), o["rate"].clone(), o["plotted"].clone()))
            })
            .collect()
    }

    /// The fields of a target page that the stream updates: state, since, the state log, errors.
    pub fn target_state(&self, t: &TargetSnapshot) -> Map<String, Value> {
        let inner = self.lock();
        target_fields(t, inner.kept.get(&t.name))
    }
}

/// A target's state fields, events included.
fn target_fields(t: &TargetSnapshot, k: Option<&Kept>) -> Map<String, Value> {
    let mut o = match super::target_json(t) {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    o.insert("since".into(), json!(k.map(|k| k.since)));
    o.insert(
        "states".into(),
        Value::Array(
            k.map(|k| k.log.iter().map(|(at, s)| json!([at, s.as_str()])).collect()).unwrap_or_default(),
        ),
    );
    o.insert("events".into(), Value::Array(t.events.iter().map(|e| json!([unix(e.at), &*e.text])).collect()));
    o
}

/// One series' current figures: key, labels, value (a histogram's count of observations), rate and
/// what a chart plots (`plotted`, from [`plotted_json`]).
pub fn series_json(s: &SeriesRef, key: &str, plotted: Value) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("key".into(), Value::from(key));
    o.insert(
        "labels".into(),
        Value::Object(s.labels().iter().map(|(k, v)| (k.to_string(), Value::from(v.as_ref()))).collect()),
    );
    let value = match s.value() {
        ValueRef::Number(n) => Some(n.as_f64()).filter(|v| v.is_finite()),
        ValueRef::Histogram(h) => Some(h.count as f64),
    };
    o.insert("value".into(), value.map_or(Value::Null, Value::from));
    o.insert("rate".into(), num(s.rate()));
    o.insert("plotted".into(), plotted);
    o
}

/// What a chart plots of the series `s` (keyed `key`) of `target` now: a counter's rate or another
/// number's value, or a histogram's quantiles `[p50, p90, p99]` at its last change (from `history`,
/// `null`s until it has changed while recorded).
pub fn plotted_json(history: &History, target: &str, s: &SeriesRef, key: &str) -> Value {
    match s.value() {
        ValueRef::Number(_) => num(history::plotted(s)),
        ValueRef::Histogram(_) => Value::Array(
            (0..history::QUANTILES.len())
                .map(|i| num(history.latest(target, &history::quantile_key(key, i)).map(f64::from)))
                .collect(),
        ),
    }
}

/// The past of the series `s` (keyed `key`) of `target` within `window` seconds, as `[[seconds
/// before now, what is plotted]]`: a number, or a histogram's `[p50, p90, p99]` (`null` for one
/// missing).
fn past(history: &History, target: &str, s: &SeriesRef, key: &str, window: u32) -> Vec<Value> {
    let point = |dt: f64, v: Value| json!([dt as i64, v]);
    if s.kind() != MetricKind::Histogram {
        let points = history.points_of(target, key, window);
        return points.into_iter().map(|(dt, v)| point(dt, num(Some(v)))).collect();
    }
    let mut at: std::collections::BTreeMap<i64, [Option<f64>; 3]> = Default::default();
    for i in 0..history::QUANTILES.len() {
        for (dt, v) in history.points_of(target, &history::quantile_key(key, i), window) {
            at.entry(dt as i64).or_default()[i] = Some(v);
        }
    }
    at.into_iter().map(|(dt, q)| point(dt as f64, Value::Array(q.into_iter().map(num).collect()))).collect()
}

/// A row of `/` as last sent, to send only what changed.
#[derive(Debug, Default)]
struct Row {
    /// `None` until the row is first sent.
    state: Option<TargetState>,
    since: f64,
    last_error: Option<Arc<str>>,
    labels: Option<Arc<[(String, String)]>>,
    series: usize,
    /// The headlines' titles and units.
    ht: Vec<(String, &'static str)>,
    /// The headlines' values.
    h: Vec<Option<f32>>,
}

fn f32_of(v: Option<f64>) -> Option<f32> {
    v.map(|v| v as f32).filter(|v| v.is_finite())
}

/// Appends `v` as JSON: its shortest decimal, or `null`.
fn push_num(out: &mut String, v: Option<f32>) {
    match v.filter(|v| v.is_finite()) {
        Some(v) => {
            let _ = write!(out, "{v}");
        }
        None => out.push_str("null"),
    }
}

impl Row {
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.state.is_none()
    }

    /// Takes `t`'s figures and appends the fields that changed to `out` as JSON members, each
    /// followed by a comma (the first time, every field). Nothing is allocated when nothing changed.
    fn update(&mut self, t: &TargetSnapshot, since: f64, heads: &[Headline], out: &mut String) {
        let first = self.state.is_none();
        if first {
            let _ = write!(out, "\"protocol\":\"{}\",", t.protocol.as_str());
        }
        if self.state != Some(t.state) {
            self.state = Some(t.state);
            let _ = write!(out, "\"state\":\"{}\",", t.state.as_str());
        }
        if self.since != since {
            self.since = since;
            let _ = write!(out, "\"since\":{},", json!(since));
        }
        if self.last_error.as_deref() != t.last_error.as_deref() || first {
            self.last_error = t.last_error.clone();
            let _ = write!(out, "\"last_error\":{},", json!(t.last_error.as_deref()));
        }
        if !self.labels.as_ref().is_some_and(|l| Arc::ptr_eq(l, &t.labels) || **l == *t.labels) {
            self.labels = Some(t.labels.clone());
            let _ = write!(out, "\"labels\":{},", labels(t));
        }
        if self.series != t.series.len() || first {
            self.series = t.series.len();
            let _ = write!(out, "\"series\":{},", t.series.len());
        }
        let ht = heads.iter().map(|h| (&*h.title, h.unit));
        if !ht.clone().eq(self.ht.iter().map(|(t, u)| (t.as_str(), *u))) || first {
            self.ht = ht.map(|(t, u)| (t.to_owned(), u)).collect();
            let ht: Vec<Value> = self.ht.iter().map(|(t, u)| json!([t, u])).collect();
            let _ = write!(out, "\"ht\":{},", Value::Array(ht));
        }
        let h = heads.iter().map(|h| f32_of(h.value));
        if !h.clone().eq(self.h.iter().copied()) || first {
            self.h.clear();
            self.h.extend(h);
            out.push_str("\"h\":[");
            for (i, v) in self.h.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_num(out, *v);
            }
            out.push_str("],");
        }
    }

    /// The whole row of `t` as `/api/v1/targets` has it.
    fn json(&self, t: &TargetSnapshot) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("name".into(), Value::from(&*t.name));
        o.insert("protocol".into(), Value::from(t.protocol.as_str()));
        o.insert("state".into(), Value::from(self.state.unwrap_or(t.state).as_str()));
        o.insert("since".into(), json!(self.since));
        o.insert("last_error".into(), json!(self.last_error.as_deref()));
        o.insert("labels".into(), labels(t));
        o.insert("series".into(), json!(self.series));
        o.insert("ht".into(), Value::Array(self.ht.iter().map(|(t, u)| json!([t, u])).collect()));
        o.insert("h".into(), Value::Array(self.h.iter().map(|v| num(v.map(f64::from))).collect()));
        o
    }
}

/// Targets up and in all, per protocol.
fn summary(snapshot: &FleetSnapshot) -> Value {
    let mut per: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for t in snapshot.targets.iter() {
        let (up, total) = per.entry(t.protocol.as_str()).or_default();
        *up += usize::from(t.is_up());
        *total += 1;
    }
    let per: Map<String, Value> =
        per.into_iter().map(|(p, (up, total))| (p.to_owned(), json!({ "up": up, "total": total }))).collect();
    let up = snapshot.targets.iter().filter(|t| t.is_up()).count();
    json!({ "up": up, "total": snapshot.targets.len(), "protocols": per })
}

/// Samples once a second while the state lives.
async fn run(live: Weak<Live>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    every.tick().await;
    loop {
        every.tick().await;
        let Some(live) = live.upgrade() else { return };
        live.sample(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use telemon_fleet::{LabelSet, Series, SeriesSet, Value as V};

    fn sys161(name: &str, kinsns_total: f64, rate: f64) -> TargetSnapshot {
        let mut t =
            TargetSnapshot::new(name, telemon_fleet::Protocol::METER161, vec![("room".into(), "<b>".into())]);
        t.state = TargetState::Up;
        t.series = SeriesSet::from(vec![kinsns(kinsns_total, rate)]);
        t
    }

    fn kinsns(total: f64, rate: f64) -> Series {
        Series {
            family: Arc::from("sys161_kernel_instructions_total"),
            help: "kernel instructions",
            labels: LabelSet::default(),
            kind: MetricKind::Counter,
            value: V::Number(total),
            rate: Some(rate),
        }
    }

    #[tokio::test]
    async fn deltas_carry_only_what_changed_and_history_feeds_sparklines() {
        let fleet = Arc::new(Fleet::new());
        fleet.registry().put(sys161("a", 10.0, 5.0));
        fleet.registry().put(sys161("b", 10.0, 5.0));
        let (live, _guard) = Live::start(fleet.clone(), WebHistory::WhileViewed);
        let _watch = live.watch_fleet(true);
        let mut rx = live.subscribe();
        fleet.registry().update("b", |t| t.state = TargetState::Down);
        live.sample(true);
        let tick = rx.recv().await.unwrap();
        let delta: Value = serde_json::from_str(&tick.delta).unwrap();
        let rows = delta["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{delta}");
        assert_eq!(rows[0]["name"], "b");
        assert_eq!(rows[0]["state"], "down");
        assert!(rows[0].get("protocol").is_none(), "unchanged fields are left out: {delta}");
        assert_eq!(delta["summary"]["up"], 1);
        assert_eq!(delta["summary"]["protocols"]["meter161"]["total"], 2);
        let spark: Value = serde_json::from_str(&live.sparklines(&["a".into(), "nope".into()])).unwrap();
        let line = spark["spark"]["a"][0].as_array().unwrap();
        assert_eq!(line.len(), SPARK_SECS as usize);
        assert_eq!(line.last().and_then(Value::as_f64), Some(5.0));
        assert!(spark["spark"].get("nope").is_none());
        let page = live.target("b", 60).unwrap();
        assert_eq!(page["states"].as_array().unwrap().len(), 2);
        assert_eq!(page["families"][0]["unit"], "/s");
        assert_eq!(page["families"][0]["series"][0]["value"], 10.0);
        fleet.registry().remove("a");
        live.sample(true);
        let delta: Value = serde_json::from_str(&rx.recv().await.unwrap().delta).unwrap();
        assert_eq!(delta["gone"], json!(["a"]));
        let full = live.full();
        assert_eq!(full["rows"].as_array().unwrap().len(), 1);
        assert_eq!(full["rows"][0]["labels"]["room"], "<b>");
    }

    /// Seconds of the sampler, on paused time.
    async fn seconds(n: u64) {
        for _ in 0..n {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_recorded_unless_watched_and_it_goes_a_linger_after() {
        let fleet = Arc::new(Fleet::new());
        fleet.registry().put(sys161("a", 10.0, 5.0));
        fleet.registry().put(sys161("b", 10.0, 5.0));
        let (live, _guard) = Live::start(fleet.clone(), WebHistory::WhileViewed);
        let mut rx = live.subscribe();
        seconds(5).await;
        assert!(rx.try_recv().is_err(), "no tick while nobody watches");
        {
            let inner = live.lock();
            assert_eq!(inner.history.series(), 0);
            assert!(inner.kept.values().all(|k| k.row.is_empty()), "no rows kept");
            assert_eq!(inner.kept.len(), 2, "but the states are followed");
        }
        // `b` goes down unwatched: its page later says since when.
        fleet.registry().update("b", |t| t.state = TargetState::Down);
        seconds(2).await;
        let down_at = live.lock().kept[&Arc::from("b")].since;
        // An API request of `/` samples at once, and `/` is watched for a linger.
        live.watch_fleet(false);
        assert_eq!(live.full()["rows"].as_array().map(Vec::len), Some(2));
        seconds(3).await;
        {
            let inner = live.lock();
            assert_eq!(inner.history.series(), 2, "one headline of each (the other has no series)");
            assert_eq!(inner.kept[&Arc::from("b")].since, down_at);
        }
        // A page stream records all of its target, and keeps `/`'s sampling off once `/`'s linger
        // ends.
        fleet.registry().update("a", |t| {
            t.series = SeriesSet::from(vec![
                kinsns(10.0, 5.0),
                Series {
                    family: Arc::from("sys161_cpu_cycles_total"),
                    help: "cycles",
                    labels: LabelSet::default(),
                    kind: MetricKind::Counter,
                    value: V::Number(1.0),
                    rate: Some(2.0),
                },
            ]);
        });
        let page = live.watch_page("a", true);
        assert!(live.watch_page("nope", false).is_none(), "an API request of no target counts for nothing");
        seconds(LINGER.as_secs() + 2).await;
        {
            let inner = live.lock();
            assert!(!inner.rows && inner.fleet.is_none(), "`/` was not asked for since");
            assert!(inner.kept.values().all(|k| k.row.is_empty()));
            assert_eq!(inner.history.series(), 2, "a's two series, b's headline forgotten");
            assert_eq!(inner.history.last_seconds("a", "sys161_cpu_cycles_total", 1), [Some(2.0)]);
        }
        drop(page);
        seconds(LINGER.as_secs() - 2).await;
        assert_eq!(live.lock().history.series(), 2, "kept for a linger after the page closed");
        seconds(3).await;
        assert_eq!(live.lock().history.series(), 0, "and then let go");
        let mut rx = live.subscribe();
        seconds(2).await;
        assert!(rx.try_recv().is_err(), "no tick once nobody watches");
        // Always: everything is recorded with no one watching.
        live.set_history(WebHistory::Always);
        seconds(2).await;
        let inner = live.lock();
        assert_eq!(inner.history.series(), 3, "every series of both, and a's headline is one of them");
        assert!(inner.rows);
    }

    /// An rvOS-like target: `gauges` channel queues, the watchdog's heartbeat age (last by name, as in
    /// rvOS) and a latency histogram of bounds 1 ms, 2 ms, 4 ms holding `observed` observations, all
    /// up to 1 ms.
    fn vm(name: &str, gauges: usize, observed: u64) -> TargetSnapshot {
        let gauge = |family: &str, labels: LabelSet, v: f64| Series {
            family: Arc::from(family),
            help: "a gauge",
            labels,
            kind: MetricKind::Gauge,
            value: V::Number(v),
            rate: None,
        };
        let mut series: Vec<Series> = (0..gauges)
            .map(|i| gauge("rvos_channel_queue_length", LabelSet::new([("channel", i.to_string())]), 1.0))
            .collect();
        series.push(gauge("rvos_watchdog_heartbeat_age_seconds", LabelSet::default(), 0.25));
        series.push(Series {
            family: Arc::from("rvos_ipc_latency_seconds"),
            help: "IPC latency",
            labels: LabelSet::default(),
            kind: MetricKind::Histogram,
            value: V::Histogram {
                buckets: vec![(0.001, observed), (0.002, observed), (0.004, observed)],
                sum: 0.0,
                count: observed,
            },
            rate: None,
        });
        series.sort_by(|a, b| a.family.cmp(&b.family));
        let mut t = TargetSnapshot::new(name, telemon_fleet::Protocol::SYSINFO, vec![]);
        t.state = TargetState::Up;
        t.series = SeriesSet::from(series);
        t
    }

    fn family<'a>(page: &'a Value, name: &str) -> &'a Value {
        page["families"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_records_every_series_of_its_target_and_its_histograms_quantiles() {
        let fleet = Arc::new(Fleet::new());
        fleet.registry().put(vm("vm", 240, 0));
        let (live, _guard) = Live::start(fleet.clone(), WebHistory::WhileViewed);
        let _page = live.watch_page("vm", true);
        for n in 1..=3 {
            fleet.registry().update("vm", |t| t.series = vm("vm", 240, n * 10).series);
            seconds(1).await;
        }
        let page = live.target("vm", 60).unwrap();
        // The series past the 128 once kept per target have a history too.
        let heartbeat = &family(&page, "rvos_watchdog_heartbeat_age_seconds")["series"][0];
        assert!(heartbeat["history"].as_array().is_some_and(|h| h.len() >= 2), "{heartbeat}");
        assert_eq!(heartbeat["bound"], false);
        let histogram = &family(&page, "rvos_ipc_latency_seconds")["series"][0];
        assert_eq!(histogram["value"], 30.0, "a histogram's value is its count");
        // Every observation is up to 1 ms: the quantiles are within the first bucket.
        assert_eq!(histogram["plotted"], json!([0.0005, 0.0009, 0.00099]), "{histogram}");
        // A point at each change since it was first seen.
        let past = histogram["history"].as_array().unwrap();
        assert!(!past.is_empty() && past.len() < 3, "{histogram}");
        assert_eq!(past.last(), Some(&json!([0, [0.0005, 0.0009, 0.00099]])));
        let (keys, figures) = live.figures(&fleet.snapshot().targets[0]);
        let i = keys.iter().position(|k| k == "rvos_ipc_latency_seconds").unwrap();
        assert_eq!(figures[i].2, histogram["plotted"], "the stream sends the same");
        assert_eq!(page["history_bound"], history::MAX_SERIES);
    }

    #[tokio::test(start_paused = true)]
    async fn a_series_without_history_for_lack_of_room_says_so() {
        // Recorded in the background ("always"), 120 targets of 300 series are more than the
        // history keeps of them: the last ones are refused until their page is watched.
        let fleet = Arc::new(Fleet::new());
        let one = vm("t000", 298, 0).series;
        for i in 0..120 {
            let mut t =
                TargetSnapshot::new(format!("t{i:03}").as_str(), telemon_fleet::Protocol::SYSINFO, vec![]);
            t.series = one.clone();
            fleet.registry().put(t);
        }
        const { assert!(120 * 300 > history::BACKGROUND_SERIES) };
        let (live, _guard) = Live::start(fleet.clone(), WebHistory::Always);
        seconds(1).await;
        let page = live.target("t119", 60).unwrap();
        let heartbeat = &family(&page, "rvos_watchdog_heartbeat_age_seconds")["series"][0];
        assert_eq!(
            (&heartbeat["bound"], heartbeat["history"].as_array().map(Vec::len)),
            (&json!(true), Some(0))
        );
        let first = live.target("t000", 60).unwrap();
        assert_eq!(family(&first, "rvos_watchdog_heartbeat_age_seconds")["series"][0]["bound"], false);
        // Its page is recorded first, and finds room.
        let _page = live.watch_page("t119", true);
        seconds(1).await;
        let page = live.target("t119", 60).unwrap();
        let heartbeat = &family(&page, "rvos_watchdog_heartbeat_age_seconds")["series"][0];
        assert_eq!(
            (&heartbeat["bound"], heartbeat["history"].as_array().map(Vec::len)),
            (&json!(false), Some(1))
        );
    }

    #[test]
    fn smon_figures_take_cpu_and_memory_in_one_pass() {
        let value = |name: &str, v: f64| Series {
            family: Arc::from("smon_value"),
            help: "a value",
            labels: LabelSet::new([("name", name)]),
            kind: MetricKind::Gauge,
            value: V::Number(v),
            rate: None,
        };
        let mut t = TargetSnapshot::new("s", telemon_fleet::Protocol::SMON, vec![]);
        t.series = SeriesSet::from(vec![
            value("linux.cpu.idle", 70.0),
            value("linux.cpu.iowait", 5.0),
            value("linux.cpu.user", 25.0),
            value("linux.mem.available", 3.0),
            value("linux.mem.total", 8.0),
            value("linux.net.rx", 1e9),
        ]);
        assert_eq!(telemon_fleet::protocol::smon::figures(&t), ((75.0, 100.0), Some(8.0), Some(3.0)));
        let mut carry = Carry(Some((65.0, 80.0)));
        let heads = headlines(&Protocols::built_in(), &t, &mut carry);
        assert_eq!(heads[0].value, Some(0.5), "10 of 20 ticks busy since the last second");
        assert_eq!(heads[1].value, Some(5.0));
        assert_eq!(carry, Carry(Some((75.0, 100.0))));
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(num(Some(0.1)).to_string(), "0.1");
        assert_eq!(num(Some(1.0 / 3.0)).to_string(), "0.33333334");
        assert_eq!(num(Some(5.0)).to_string(), "5.0");
        assert_eq!(num(Some(f64::NAN)), Value::Null);
        assert_eq!(num(Some(1e300)), Value::Null, "beyond single precision");
        assert_eq!(num(None), Value::Null);
    }

    #[test]
    fn units_follow_the_family_name() {
        assert_eq!(unit("dyalog_workspace_used_bytes", MetricKind::Gauge), "B");
        assert_eq!(unit("rvos_channel_bytes_total", MetricKind::Counter), "B/s");
        assert_eq!(unit("sys161_simulated_seconds_total", MetricKind::Counter), "s/s");
        assert_eq!(unit("rvos_process_cpu_ratio", MetricKind::Gauge), "ratio");
        assert_eq!(unit("sys161_interrupts_total", MetricKind::Counter), "/s");
        assert_eq!(unit("dyalog_threads", MetricKind::Gauge), "");
    }
}
