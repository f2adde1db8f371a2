//! The counters the fake agent knows, in List order, and where their values come from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mono_counters::{Category, CounterName, CounterType, CounterValue, Header, Unit, Variance};

/// One counter the agent can sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterDef {
    /// Category string and name, as List, Add and `counters=` spell them.
    pub name: CounterName,
    /// The value type.
    pub kind: CounterType,
    /// The unit.
    pub unit: Unit,
    /// The variance.
    pub variance: Variance,
}

impl CounterDef {
    fn new(category: &str, name: &str, kind: CounterType, unit: Unit, variance: Variance) -> Self {
        CounterDef { name: CounterName::new(category, name), kind, unit, variance }
    }

    /// The header announcing this counter under `index`.
    pub fn header(&self, index: i16) -> Header {
        Header {
            category: Category::from_name(&self.name.category),
            name: self.name.name.clone(),
            kind: self.kind,
            unit: self.unit,
            variance: self.variance,
            index,
        }
    }
}

/// Every counter, in the agent's List order: counters registered by the runtime (legacy counters,
/// translated to unit NONE / variance VARIABLE, TIME_INTERVAL to LONG/TIME), then the seven
/// "Mono System" counters. The fake agent has no data sources.
pub fn builtin_counters() -> Vec<CounterDef> {
    use CounterType::*;
    use Unit::{Bytes, Events, Time};
    let none = Unit::None;
    let var = Variance::Variable;
    vec![
        CounterDef::new("Mono JIT", "Compiled methods", Int, none, var),
        CounterDef::new("Mono JIT", "Methods from AOT", Int, none, var),
        CounterDef::new("Mono JIT", "Total time spent JITting", Long, Time, var),
        CounterDef::new("Mono GC", "Minor GC collections", Int, none, var),
        CounterDef::new("Mono GC", "Major GC collections", Int, none, var),
        CounterDef::new("Mono GC", "Minor GC time", Long, Time, var),
        CounterDef::new("Mono GC", "Major GC time", Long, Time, var),
        CounterDef::new("Mono GC", "Heap size", Word, none, var),
        CounterDef::new("Mono Metadata", "Loaded images", Int, none, var),
        CounterDef::new("Mono System", "User Time", Long, Time, var),
        CounterDef::new("Mono System", "System Time", Long, Time, var),
        CounterDef::new("Mono System", "Total Time", Long, Time, var),
        CounterDef::new("Mono System", "Working Set", Long, Bytes, var),
        CounterDef::new("Mono System", "Private Bytes", Long, Bytes, var),
        CounterDef::new("Mono System", "Virtual Bytes", Long, Bytes, var),
        CounterDef::new("Mono System", "Page Faults", Long, Events, var),
    ]
}

/// Where counter values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueMode {
    /// Live figures: `/proc/self` for the system counters, growing JIT and GC figures.
    #[default]
    Live,
    /// Constant values (each counter's value is its position in the List), for tests.
    Fixed,
}

/// Values forced from outside, by `"Category/Name"`; they win over live and fixed values and are sent
/// converted to the counter's type. Clones share the same map, so a test can change values while the
/// agent runs: a live handle, passed to [`crate::run_with_overrides`] beside the plain `Clone` config.
#[derive(Debug, Clone, Default)]
pub struct ValueOverrides(Arc<Mutex<HashMap<String, CounterValue>>>);

impl ValueOverrides {
    /// Forces `"Category/Name"` to `value` from the next sample on.
    pub fn set(&self, counter: &str, value: CounterValue) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(counter.to_string(), value);
    }

    fn get(&self, counter: &CounterName) -> Option<CounterValue> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&counter.to_string()).copied()
    }
}

/// 100 ns ticks since 0001-01-01 UTC, like .NET `DateTime.Ticks` and the 2014 agent.
pub fn dotnet_ticks_now() -> i64 {
    const UNIX_EPOCH_IN_DOTNET_SECONDS: i64 = 62_135_596_800;
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (since.as_secs() as i64 + UNIX_EPOCH_IN_DOTNET_SECONDS) * 10_000_000
        + i64::from(since.subsec_nanos() / 100)
}

/// Reads current values; one per sample, so `/proc/self` is read once per sample.
pub(crate) struct ValueReader {
    mode: ValueMode,
    overrides: ValueOverrides,
    word_size: u8,
    started: Instant,
}

/// Figures from `/proc/self`, zero where unavailable.
#[derive(Debug, Default, Clone, Copy)]
struct ProcFigures {
    user_ticks: i64,
    system_ticks: i64,
    page_faults: i64,
    rss: i64,
    anon: i64,
    vsize: i64,
}

impl ProcFigures {
    fn read() -> ProcFigures {
        let mut f = ProcFigures::default();
        // Clock ticks are USER_HZ, 100 on Linux; one tick is 100 000 units of 100 ns.
        const TICK: i64 = 100_000;
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // Fields after the parenthesised command name; field 3 (state) is index 0 here.
            if let Some((_, rest)) = stat.rsplit_once(')') {
                let fields: Vec<i64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
                let at = |n: usize| fields.get(n - 3).copied().unwrap_or(0);
                f.page_faults = at(10) + at(12);
                f.user_ticks = at(14) * TICK;
                f.system_ticks = at(15) * TICK;
            }
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            for line in status.lines() {
                let kib = |l: &str| {
                    l.split_whitespace().nth(1).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) * 1024
                };
                if line.starts_with("VmRSS:") {
                    f.rss = kib(line);
                } else if line.starts_with("RssAnon:") {
                    f.anon = kib(line);
                } else if line.starts_with("VmSize:") {
                    f.vsize = kib(line);
                }
            }
        }
        f
    }
}

impl ValueReader {
    pub(crate) fn new(mode: ValueMode, overrides: ValueOverrides, word_size: u8) -> Self {
        ValueReader { mode, overrides, word_size, started: Instant::now() }
    }

    /// The current values of `defs` (each paired with its position in the List).
    pub(crate) fn read<'a>(&self, defs: impl Iterator<Item = (usize, &'a CounterDef)>) -> Vec<CounterValue> {
        let proc = if self.mode == ValueMode::Live { ProcFigures::read() } else { ProcFigures::default() };
        let secs = self.started.elapsed().as_secs() as i64;
        defs.map(|(position, def)| {
            if let Some(v) = self.overrides.get(&def.name) {
                // Sent with the counter's own type (and WORD size), whatever type it was given in.
                return match (def.kind, v) {
                    (CounterType::Double, v) => CounterValue::Double(v.as_f64()),
                    (kind, CounterValue::Double(d)) => self.typed(kind, d as i64),
                    (kind, CounterValue::Int(x) | CounterValue::Word32(x)) => self.typed(kind, i64::from(x)),
                    (kind, CounterValue::Long(x) | CounterValue::Word64(x)) => self.typed(kind, x),
                };
            }
            let n = match self.mode {
                ValueMode::Fixed => position as i64,
                ValueMode::Live => live_figure(def, &proc, secs),
            };
            self.typed(def.kind, n)
        })
        .collect()
    }

    fn typed(&self, kind: CounterType, n: i64) -> CounterValue {
        match kind {
            CounterType::Int => CounterValue::Int(n as i32),
            CounterType::Word if self.word_size == 4 => CounterValue::Word32(n as i32),
            CounterType::Word => CounterValue::Word64(n),
            CounterType::Double => CounterValue::Double(n as f64),
            _ => CounterValue::Long(n),
        }
    }
}

/// A plausible, slowly changing figure for each built-in counter.
fn live_figure(def: &CounterDef, proc: &ProcFigures, secs: i64) -> i64 {
    let compiled = 800 + (secs * 7).min(4000);
    match (def.name.category.as_str(), def.name.name.as_str()) {
        ("Mono JIT", "Compiled methods") => compiled,
        ("Mono JIT", "Methods from AOT") => 1200 + secs / 10,
        ("Mono JIT", "Total time spent JITting") => compiled * 1_500,
        ("Mono GC", "Minor GC collections") => secs / 2,
        ("Mono GC", "Major GC collections") => secs / 30,
        ("Mono GC", "Minor GC time") => (secs / 2) * 20_000,
        ("Mono GC", "Major GC time") => (secs / 30) * 450_000,
        ("Mono GC", "Heap size") => 4 * 1024 * 1024 + (secs % 60) * 64 * 1024,
        ("Mono Metadata", "Loaded images") => 12 + secs / 60,
        ("Mono System", "User Time") => proc.user_ticks,
        ("Mono System", "System Time") => proc.system_ticks,
        ("Mono System", "Total Time") => proc.user_ticks + proc.system_ticks,
        ("Mono System", "Working Set") => proc.rss,
        ("Mono System", "Private Bytes") => proc.anon,
        ("Mono System", "Virtual Bytes") => proc.vsize,
        ("Mono System", "Page Faults") => proc.page_faults,
        _ => 0,
    }
}
