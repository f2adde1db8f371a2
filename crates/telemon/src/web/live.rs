//! The web view's live state: a sampler that, once a second, records the fleet into the shared
//! [`History`], keeps each target's state log, and publishes what changed since the last second.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use telemon_fleet::collect::AbortOnDrop;
use telemon_fleet::history::{self, History, DERIVED};
use telemon_fleet::{Fleet, FleetSnapshot, MetricKind, Protocol, SeriesRef, TargetSnapshot, TargetState};
use tokio::sync::broadcast;

/// The seconds of a sparkline on `/`.
pub const SPARK_SECS: u32 = 300;
/// The seconds of history a target page starts with (`?window=` asks for up to an hour).
pub const TARGET_WINDOW: u32 = 600;
/// State changes kept per target.
pub const STATE_LOG: usize = 32;

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
    row: Map<String, Value>,
    /// smon's CPU counters at the last second: (idle, total).
    cpu: Option<(f64, f64)>,
}

#[derive(Debug, Default)]
struct Inner {
    history: History,
    at: u32,
    kept: HashMap<Arc<str>, Kept>,
    summary: Value,
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
}

fn unix(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A number for JSON: `null` when not finite, single precision (short).
pub fn num(v: Option<f64>) -> Value {
    match v {
        Some(v) if v.is_finite() => json!(v as f32),
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
struct Headline {
    title: String,
    unit: &'static str,
    key: String,
    value: Option<f64>,
}

fn from_series(title: &str, s: Option<SeriesRef>) -> Headline {
    let (key, value, unit) = match s {
        Some(s) => (history::key(&s), history::plotted(&s), unit(s.family(), s.kind())),
        None => (String::new(), None, ""),
    };
    Headline { title: title.to_owned(), unit, key, value }
}

fn labelled<'a>(t: &'a TargetSnapshot, family: &str, name: &str, value: &str) -> Option<SeriesRef<'a>> {
    t.series.family(family).find(|s| s.label(name) == value)
}

fn smon<'a>(t: &'a TargetSnapshot, prefix: &'a str) -> impl Iterator<Item = (String, f64)> + 'a {
    t.series.family("smon_value").filter_map(move |s| {
        let name = s.label("name");
        name.starts_with(prefix).then(|| (name.into_owned(), s.number().unwrap_or(0.0)))
    })
}

/// The two or three figures `/` shows of a target, per protocol (see docs/web.md). `cpu` is smon's
/// CPU counters of the second before, updated.
fn headlines(t: &TargetSnapshot, cpu: &mut Option<(f64, f64)>) -> Vec<Headline> {
    match t.protocol {
        Protocol::Meter161 => vec![
            from_series("kernel instr/s", t.series.family("sys161_kernel_instructions_total").next()),
            from_series("user instr/s", t.series.family("sys161_user_instructions_total").next()),
        ],
        Protocol::Hmon => vec![
            from_series("workspace used", t.series.family("dyalog_workspace_used_bytes").next()),
            from_series("threads", labelled(t, "dyalog_threads", "state", "total")),
        ],
        Protocol::Mono => t
            .series
            .iter()
            .filter(|s| s.family().starts_with("mono_runtime") && history::plotted(s).is_some())
            .take(2)
            .map(|s| {
                let title = s.label("counter").into_owned();
                from_series(&title, Some(s))
            })
            .collect(),
        Protocol::Smon => {
            let (mut idle, mut total) = (0.0, 0.0);
            for (name, v) in smon(t, "linux.cpu.") {
                total += v;
                if name == "linux.cpu.idle" || name == "linux.cpu.iowait" {
                    idle += v;
                }
            }
            let busy = match cpu.replace((idle, total)) {
                Some((i0, t0)) if total > t0 => Some(1.0 - (idle - i0) / (total - t0)),
                _ => None,
            };
            let mem: HashMap<String, f64> = smon(t, "linux.mem.").collect();
            let used = match (mem.get("linux.mem.total"), mem.get("linux.mem.available")) {
                (Some(total), Some(avail)) => Some(total - avail),
                _ => None,
            };
            vec![
                Headline { title: "CPU busy".into(), unit: "ratio", key: "=cpu_busy".into(), value: busy },
                Headline { title: "memory used".into(), unit: "B", key: "=mem_used".into(), value: used },
            ]
        }
        Protocol::Sysinfo => {
            let procs = t.series.family("rvos_process_memory_bytes").count();
            vec![
                Headline {
                    title: "processes".into(),
                    unit: "",
                    key: "=processes".into(),
                    value: (!t.series.is_empty()).then_some(procs as f64),
                },
                from_series("heap used", labelled(t, "rvos_kernel_heap_bytes", "state", "used")),
            ]
        }
    }
}

/// The labels of a target as a JSON object.
pub fn labels(t: &TargetSnapshot) -> Value {
    Value::Object(t.labels.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect())
}

impl Live {
    /// Starts the sampler on the current runtime; it ends when the returned guard is dropped (or the
    /// handlers' last reference to the state goes).
    pub fn start(fleet: Arc<Fleet>) -> (Arc<Live>, AbortOnDrop) {
        let (ticks, _) = broadcast::channel(8);
        let live = Arc::new(Live {
            fleet,
            started: Instant::now(),
            started_unix: unix(SystemTime::now()),
            inner: Mutex::new(Inner::default()),
            ticks,
        });
        live.sample();
        let weak = Arc::downgrade(&live);
        let task = tokio::spawn(run(weak));
        (live, AbortOnDrop(task))
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

    /// Samples the fleet once: history, state logs, the delta of `/`; publishes it.
    fn sample(&self) {
        let snapshot = self.fleet.snapshot();
        let mut inner = self.lock();
        let elapsed = self.started.elapsed().as_secs_f64().round() as u32;
        let at = if inner.kept.is_empty() && inner.at == 0 { elapsed } else { elapsed.max(inner.at + 1) };
        inner.at = at;
        let now = self.unix_at(at);
        inner.history.record(&snapshot, at);
        let Inner { history, kept, .. } = &mut *inner;
        let mut rows = Vec::new();
        let mut present = std::collections::HashSet::with_capacity(snapshot.targets.len());
        for t in &snapshot.targets {
            present.insert(t.name.clone());
            let k = kept.entry(t.name.clone()).or_insert_with(|| Kept {
                state: t.state,
                since: now,
                log: VecDeque::from([(now, t.state)]),
                row: Map::new(),
                cpu: None,
            });
            if k.state != t.state {
                k.state = t.state;
                k.since = now;
                if k.log.len() >= STATE_LOG {
                    k.log.pop_front();
                }
                k.log.push_back((now, t.state));
            }
            let heads = headlines(t, &mut k.cpu);
            for h in heads.iter().filter(|h| h.key.starts_with(DERIVED)) {
                if let Some(v) = h.value {
                    history.put(&t.name, &h.key, v);
                }
            }
            let row = row(t, k.since, &heads);
            let mut changed = Map::new();
            for (field, v) in &row {
                if k.row.get(field) != Some(v) {
                    changed.insert(field.clone(), v.clone());
                }
            }
            if !changed.is_empty() {
                changed.insert("name".into(), Value::from(&*t.name));
                rows.push(Value::Object(changed));
            }
            k.row = row;
        }
        let gone: Vec<Arc<str>> = kept.keys().filter(|n| !present.contains(*n)).cloned().collect();
        for name in &gone {
            kept.remove(name);
        }
        let summary = summary(&snapshot);
        let delta = json!({ "at": at, "t": now, "rows": rows, "gone": gone.iter().map(|n| &**n).collect::<Vec<&str>>(), "summary": summary });
        inner.summary = summary;
        drop(inner);
        let _ = self.ticks.send(Arc::new(Tick { at, snapshot, delta: delta.to_string() }));
    }

    /// `/`'s full state: every row, the summary, and the second it is of.
    pub fn full(&self) -> Value {
        let inner = self.lock();
        let snapshot = self.fleet.snapshot();
        let rows: Vec<Value> = snapshot
            .targets
            .iter()
            .filter_map(|t| inner.kept.get(&t.name).map(|k| Value::Object(k.row.clone())))
            .collect();
        json!({
            "at": inner.at,
            "t": self.unix_at(inner.at),
            "spark_secs": SPARK_SECS,
            "summary": inner.summary,
            "rows": rows,
        })
    }

    /// The headline sparklines of `names`: per target, per headline, the last [`SPARK_SECS`] values
    /// ending at `at` (`null` where none).
    pub fn sparklines(&self, names: &[String]) -> Value {
        let inner = self.lock();
        let snapshot = self.fleet.snapshot();
        let mut out = Map::new();
        for name in names.iter().take(1000) {
            let Some(t) = snapshot.get(name) else { continue };
            let mut cpu = inner.kept.get(&t.name).and_then(|k| k.cpu);
            let lines: Vec<Value> = headlines(t, &mut cpu)
                .iter()
                .map(|h| {
                    let v = inner.history.last_seconds(&t.name, &h.key, SPARK_SECS);
                    Value::Array(v.into_iter().map(|v| num(v.map(f64::from))).collect())
                })
                .collect();
            out.insert(name.clone(), Value::Array(lines));
        }
        json!({ "at": inner.at, "spark": out })
    }

    /// One target's page: every series grouped by family with help, unit, value, rate and the last
    /// `window` seconds; events; state log. `None` when there is no such target.
    pub fn target(&self, name: &str, window: u32) -> Option<Value> {
        let snapshot = self.fleet.snapshot();
        let t = snapshot.get(name)?;
        let inner = self.lock();
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
                        let points = inner.history.points_of(&t.name, &key, window);
                        let mut o = series_json(&s, &key);
                        o.insert(
                            "history".into(),
                            Value::Array(
                                points.into_iter().map(|(dt, v)| json!([dt as i64, v as f32])).collect(),
                            ),
                        );
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
        o.insert("families".into(), Value::Array(families));
        Some(Value::Object(o))
    }

    /// The fields of a target page that the stream updates: state, since, the state log, errors.
    pub fn target_state(&self, t: &TargetSnapshot) -> Map<String, Value> {
        let inner = self.lock();
        target_fields(t, inner.kept.get(&t.name))
    }
}

/// A target's state fields, events included.
fn target_fields(t: &TargetSnapshot, k: Option<&Kept>) -> Map<String, Value> {
    let mut o = match crate::http::target_json(t) {
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

/// One series' current figures: key, labels, value, rate and what a chart plots.
pub fn series_json(s: &SeriesRef, key: &str) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("key".into(), Value::from(key));
    o.insert(
        "labels".into(),
        Value::Object(s.labels().iter().map(|(k, v)| (k.to_string(), Value::from(v.as_ref()))).collect()),
    );
    o.insert("value".into(), s.number().filter(|v| v.is_finite()).map_or(Value::Null, Value::from));
    o.insert("rate".into(), num(s.rate()));
    o.insert("plotted".into(), num(history::plotted(s)));
    o
}

/// A row of `/`.
fn row(t: &TargetSnapshot, since: f64, heads: &[Headline]) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("name".into(), Value::from(&*t.name));
    o.insert("protocol".into(), Value::from(t.protocol.as_str()));
    o.insert("state".into(), Value::from(t.state.as_str()));
    o.insert("since".into(), json!(since));
    o.insert("last_error".into(), json!(t.last_error.as_deref()));
    o.insert("labels".into(), labels(t));
    o.insert("series".into(), json!(t.series.len()));
    o.insert("ht".into(), Value::Array(heads.iter().map(|h| json!([h.title, h.unit])).collect()));
    o.insert("h".into(), Value::Array(heads.iter().map(|h| num(h.value)).collect()));
    o
}

/// Targets up and in all, per protocol.
fn summary(snapshot: &FleetSnapshot) -> Value {
    let mut per: Map<String, Value> = Map::new();
    for p in Protocol::ALL {
        let of: Vec<_> = snapshot.targets.iter().filter(|t| t.protocol == p).collect();
        if !of.is_empty() {
            let up = of.iter().filter(|t| t.is_up()).count();
            per.insert(p.as_str().into(), json!({ "up": up, "total": of.len() }));
        }
    }
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
        live.sample();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use telemon_fleet::{LabelSet, Series, SeriesSet, Value as V};

    fn sys161(name: &str, kinsns: f64, rate: f64) -> TargetSnapshot {
        let mut t = TargetSnapshot::new(name, Protocol::Meter161, vec![("room".into(), "<b>".into())]);
        t.state = TargetState::Up;
        t.series = SeriesSet::from(vec![Series {
            family: Arc::from("sys161_kernel_instructions_total"),
            help: "kernel instructions",
            labels: LabelSet::default(),
            kind: MetricKind::Counter,
            value: V::Number(kinsns),
            rate: Some(rate),
        }]);
        t
    }

    #[tokio::test]
    async fn deltas_carry_only_what_changed_and_history_feeds_sparklines() {
        let fleet = Arc::new(Fleet::new());
        fleet.registry().put(sys161("a", 10.0, 5.0));
        fleet.registry().put(sys161("b", 10.0, 5.0));
        let (live, _guard) = Live::start(fleet.clone());
        let mut rx = live.subscribe();
        fleet.registry().update("b", |t| t.state = TargetState::Down);
        live.sample();
        let tick = rx.recv().await.unwrap();
        let delta: Value = serde_json::from_str(&tick.delta).unwrap();
        let rows = delta["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{delta}");
        assert_eq!(rows[0]["name"], "b");
        assert_eq!(rows[0]["state"], "down");
        assert!(rows[0].get("protocol").is_none(), "unchanged fields are left out: {delta}");
        assert_eq!(delta["summary"]["up"], 1);
        assert_eq!(delta["summary"]["protocols"]["meter161"]["total"], 2);
        let spark = live.sparklines(&["a".into(), "nope".into()]);
        let line = spark["spark"]["a"][0].as_array().unwrap();
        assert_eq!(line.len(), SPARK_SECS as usize);
        assert_eq!(line.last(), Some(&json!(5.0)));
        assert!(spark["spark"].get("nope").is_none());
        let page = live.target("b", 60).unwrap();
        assert_eq!(page["states"].as_array().unwrap().len(), 2);
        assert_eq!(page["families"][0]["unit"], "/s");
        assert_eq!(page["families"][0]["series"][0]["value"], 10.0);
        fleet.registry().remove("a");
        live.sample();
        let delta: Value = serde_json::from_str(&rx.recv().await.unwrap().delta).unwrap();
        assert_eq!(delta["gone"], json!(["a"]));
        let full = live.full();
        assert_eq!(full["rows"].as_array().unwrap().len(), 1);
        assert_eq!(full["rows"][0]["labels"]["room"], "<b>");
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
