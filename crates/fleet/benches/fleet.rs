//! The fleet's hot paths against the way they were done before the store was keyed once, in the same
//! run: rendering a scrape (`render/chunks` over `render/baseline`, lines/s), writing a value into an
//! existing series (`update/*` over `update/owned_labels`, updates/s), and publishing a target
//! (`publish/shared_schema` over `publish/clone_every_series`, series/s).
//!
//! `page/kept` over `page/written` is a scrape that copies the pieces the targets' publications rendered,
//! against one that writes every line (10,000 sys161-like targets).
//!
//! The fleet is sysinfo-like: targets with 250 series each (processes with pid and name labels, kernel
//! counters, and a 20-bucket histogram). Every case also runs in count mode, for
//! `cargo xtask bench --table`.

use std::sync::Arc;
use tokio::time::Instant;

use bench_harness::{Case, Group};
use criterion::{black_box, BatchSize, Throughput};
use telemon_fleet::render::{Chunks, Format};
use telemon_fleet::store::SeriesStore;
use telemon_fleet::target::{label, Publisher};
use telemon_fleet::{FleetSnapshot, MetricKind, Protocol, Registry, Series, TargetSnapshot, TargetState};

const TARGETS: usize = 40;
const PROCESSES: usize = 40;

/// One sysinfo-like target's series, through a real publisher.
fn target(registry: &Registry, i: usize) -> TargetSnapshot {
    let labels = vec![("env".to_owned(), "bench".to_owned())];
    let mut p = Publisher::new(registry, format!("vm{i}"), Protocol::SYSINFO, labels, 10_000);
    p.up();
    fill(&mut p, 1);
    p.flush();
    registry.snapshot().get(&format!("vm{i}")).expect("published").clone()
}

fn fill(p: &mut Publisher, tick: u64) {
    for pid in 0..PROCESSES {
        let (pid_s, name) = (pid.to_string(), format!("proc-{pid}"));
        let who = [("pid", pid_s.as_str()), ("name", name.as_str())];
        p.put("rvos_process_memory_bytes", "h", MetricKind::Gauge, &who, 4096 * (pid as u64 + tick));
        p.put("rvos_process_cpu_seconds_total", "h", MetricKind::Counter, &who, tick * 1_000 + pid as u64);
        for window in ["1s", "5s"] {
            let l = [("pid", pid_s.as_str()), ("name", name.as_str()), ("window", window)];
            p.put("rvos_process_cpu_ratio", "h", MetricKind::Gauge, &l, 0.125 * (pid % 8) as f64);
        }
    }
    for c in 0..60 {
        let c = format!("counter_{c}");
        p.put("rvos_kstat_total", "h", MetricKind::Counter, &[("counter", &c)], tick * 7);
    }
    let bounds: Vec<f64> = (0..20).map(|b| 1e-7 * f64::from(1u32 << b)).collect();
    let counts: Vec<u64> = (0..20).map(|b| tick * (b + 1)).collect();
    p.put_histogram("rvos_scheduler_latency_seconds", "h", &[], &bounds, &counts, 0.5, tick * 21);
}

fn fleet() -> FleetSnapshot {
    let registry = Registry::new();
    FleetSnapshot::from(
        (0..TARGETS)
            .map(|i| {
                let mut t = target(&registry, i);
                t.state = TargetState::Up;
                t
            })
            .collect::<Vec<_>>(),
    )
}

fn lines(snap: &FleetSnapshot) -> u64 {
    let page: usize = Chunks::new(snap.clone(), Format::Text004).map(|c| c.len()).sum();
    let text: String = Chunks::new(snap.clone(), Format::Text004)
        .map(|c| String::from_utf8(c.to_vec()).expect("UTF-8"))
        .collect();
    assert_eq!(page, text.len());
    text.lines().filter(|l| !l.starts_with('#')).count() as u64
}

fn groups() -> Vec<Group> {
    let snap = fleet();
    let owned: Vec<(TargetSnapshot, Vec<Series>)> =
        snap.targets.iter().map(|t| (TargetSnapshot::clone(t), t.series.to_vec())).collect();
    let n_lines = lines(&snap);
    let render = {
        let snap = snap.clone();
        Group::new("render", Throughput::Elements(n_lines), 20)
            .sample_size(20)
            .case(Case::iter("baseline", move || baseline::render(&owned).len()))
            .case(
                Case::iter("chunks", move || {
                    Chunks::new(snap.clone(), Format::Text004).map(|c| black_box(c).len()).sum::<usize>()
                })
                .vs("baseline"),
            )
    };

    // One target's 250 updates of existing series.
    let updates = (PROCESSES * 4 + 61) as u64;
    let registry = Registry::new();
    let publisher = move || {
        let mut p = Publisher::new(&registry, "t", Protocol::SYSINFO, Vec::<(String, String)>::new(), 10_000);
        p.up();
        fill(&mut p, 1);
        p
    };
    let update = Group::new("update", Throughput::Elements(updates), 200)
        .case(Case::batched("owned_labels", BatchSize::LargeInput, publisher.clone(), |mut p| {
            // The old way: a vector of shared label strings built per update.
            for pid in 0..PROCESSES {
                let pid_s = pid.to_string();
                let name = format!("proc-{pid}");
                let who = || vec![label("pid", &pid_s), label("name", &name)];
                p.set("rvos_process_memory_bytes", "h", MetricKind::Gauge, who(), 8192.0);
                p.set("rvos_process_cpu_seconds_total", "h", MetricKind::Counter, who(), 2e3);
                for window in ["1s", "5s"] {
                    let mut l = who();
                    l.push(label("window", window));
                    p.set("rvos_process_cpu_ratio", "h", MetricKind::Gauge, l, 0.5);
                }
            }
            for c in 0..60 {
                let c = format!("counter_{c}");
                p.set("rvos_kstat_total", "h", MetricKind::Counter, vec![label("counter", &c)], 14.0);
            }
            p
        }))
        .case(
            Case::batched("borrowed_labels", BatchSize::LargeInput, publisher.clone(), |mut p| {
                fill(&mut p, 2);
                p
            })
            .vs("owned_labels"),
        );

    // A target of 250 gauges, published once (so the schema exists).
    let store = || {
        let mut st = SeriesStore::new(10_000);
        let now = Instant::now();
        for i in 0..250u64 {
            let id = st.slot("f", "h", MetricKind::Gauge, &[("i", &i.to_string())]).unwrap();
            st.set(id, i.into(), now);
        }
        st.publish();
        st
    };
    let publish = Group::new("publish", Throughput::Elements(250), 2000)
        .case(Case::batched(
            "clone_every_series",
            BatchSize::SmallInput,
            move || store().publish(),
            |set| Arc::<[Series]>::from(set.to_vec()),
        ))
        .case(
            Case::batched("shared_schema", BatchSize::SmallInput, store, |mut st| {
                let set = st.publish();
                (st, set)
            })
            .vs("clone_every_series"),
        );
    vec![render, render_fleet(), page(), update, publish, file_sd()]
}

/// Targets of [`page`]: sys161-like, 20 series each.
const PAGE_TARGETS: usize = 10_000;

/// A scrape of 10,000 sys161-like targets (20 gauges each): the targets' lines written at the scrape
/// (`page/written`, each target as it came from its publisher, no piece kept: what every scrape did
/// before pieces) against the pieces their publications rendered, copied (`page/kept`); lines/s.
/// The fleet is built on the first call, outside count mode's counting.
fn page() -> Group {
    let fleet: std::rc::Rc<std::cell::OnceCell<FleetSnapshot>> = std::rc::Rc::new(std::cell::OnceCell::new());
    let built = || {
        let registry = Registry::new();
        registry.want_pages();
        let mut ps: Vec<Publisher> = (0..PAGE_TARGETS)
            .map(|i| {
                let labels = Vec::<(String, String)>::new();
                let mut p = Publisher::new(&registry, format!("sys161-{i}"), Protocol::METER161, labels, 100);
                p.up();
                p
            })
            .collect();
        for (i, p) in ps.iter_mut().enumerate() {
            for k in 0..20u64 {
                let field = format!("{k}");
                p.put("sys161_field", "h", MetricKind::Gauge, &[("field", &field)], (i as u64) * 1_000 + k);
            }
            p.flush();
        }
        registry.snapshot()
    };
    // Per target: its 20 gauges and 9 lines of telemon's own (four of them errors by kind).
    let lines = (PAGE_TARGETS * 29) as u64;
    let f1 = fleet.clone();
    Group::new("page", Throughput::Elements(lines), 1)
        .sample_size(10)
        .case(Case::batched(
            "written",
            BatchSize::LargeInput,
            move || {
                // Clones start without a piece: the scrape writes every line, as before pieces.
                let snap = f1.get_or_init(built);
                FleetSnapshot {
                    targets: snap.targets.iter().map(|t| Arc::new(TargetSnapshot::clone(t))).collect(),
                }
            },
            |snap| Chunks::new(snap, Format::Text004).map(|c| black_box(c).len()).sum::<usize>(),
        ))
        .case(
            Case::batched(
                "kept",
                BatchSize::LargeInput,
                move || fleet.get_or_init(built).clone(),
                |snap| Chunks::new(snap, Format::Text004).map(|c| black_box(c).len()).sum::<usize>(),
            )
            .vs("written"),
        )
}

/// Targets and series per target of [`render_fleet`].
const FLEET_TARGETS: usize = 1_000;
const FLEET_ROWS: usize = 75;

/// A thousand targets of 300 series each, created a row at a time across all the targets (as a live
/// fleet's collectors interleave), so that a target's label sets are scattered over the heap.
fn big_fleet() -> FleetSnapshot {
    let registry = Registry::new();
    let mut ps: Vec<Publisher> = (0..FLEET_TARGETS)
        .map(|i| {
            let labels = vec![("env".to_owned(), "bench".to_owned())];
            let mut p = Publisher::new(&registry, format!("vm{i}"), Protocol::SYSINFO, labels, 10_000);
            p.up();
            p
        })
        .collect();
    for row in 0..FLEET_ROWS {
        for (i, p) in ps.iter_mut().enumerate() {
            let (pid, name) = (row.to_string(), format!("proc-{row}-{}", i % 7));
            for family in ["rvos_a", "rvos_b", "rvos_c", "rvos_d"] {
                p.put(family, "h", MetricKind::Gauge, &[("pid", &pid), ("name", &name)], (row * i) as u64);
            }
        }
    }
    for p in &mut ps {
        p.flush();
    }
    let mut snap = registry.snapshot();
    for t in &mut snap.targets {
        Arc::make_mut(t).state = TargetState::Up;
    }
    snap
}

/// Rendering a fleet too large for the CPU's caches (a 19 MB page), against the renderer of before
/// (which owns copies of the series); series per second. The fleet is built on the first call
/// (outside count mode's counting), once for both cases.
fn render_fleet() -> Group {
    type Fleet = (FleetSnapshot, Vec<(TargetSnapshot, Vec<Series>)>);
    let fleet: std::rc::Rc<std::cell::OnceCell<Fleet>> = std::rc::Rc::new(std::cell::OnceCell::new());
    let built = move || {
        let snap = big_fleet();
        let owned = snap.targets.iter().map(|t| (TargetSnapshot::clone(t), t.series.to_vec())).collect();
        (snap, owned)
    };
    let f1 = fleet.clone();
    Group::new("render_fleet", Throughput::Elements((FLEET_TARGETS * FLEET_ROWS * 4) as u64), 1)
        .sample_size(10)
        .case(Case::iter("baseline", move || baseline::render(&f1.get_or_init(built).1).len()))
        .case(
            Case::iter("chunks", move || {
                let snap = &fleet.get_or_init(built).0;
                Chunks::new(snap.clone(), Format::Text004).map(|c| black_box(c).len()).sum::<usize>()
            })
            .vs("baseline"),
        )
}

/// The renderer before the store was keyed once: every label escaped and every value formatted
/// through `fmt` on each scrape, each family gathered in its own string, then the page built again.
mod baseline {
    use std::collections::BTreeMap;
    use std::fmt::Write as _;

    use telemon_fleet::{MetricKind, Series, TargetSnapshot, Value};

    struct Family {
        help: &'static str,
        kind: MetricKind,
        lines: String,
    }

    pub fn render(targets: &[(TargetSnapshot, Vec<Series>)]) -> String {
        let mut families: BTreeMap<String, Family> = BTreeMap::new();
        for (t, series) in targets {
            let base: Vec<(&str, &str)> = std::iter::once(("target", &*t.name))
                .chain(t.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .collect();
            let mut with_proto = vec![("protocol", t.protocol.as_str())];
            with_proto.extend(base.iter().copied());
            let up = family(&mut families, "telemon_target_up", "Up.", MetricKind::Gauge);
            write_labelled(up, "telemon_target_up", "", &with_proto, [].into_iter(), None, 1.0);
            for s in series {
                let lines = family(&mut families, &s.family, s.help, s.kind);
                let pairs: Vec<_> = s.labels.iter().collect();
                let extra = pairs.iter().map(|(k, v)| (*k, &**v));
                match &s.value {
                    Value::Number(v) => write_labelled(lines, &s.family, "", &base, extra, None, *v),
                    Value::Histogram { buckets, sum, count } => {
                        let mut le = String::new();
                        for (bound, n) in buckets {
                            le.clear();
                            push_f64(&mut le, *bound);
                            write_labelled(
                                lines,
                                &s.family,
                                "_bucket",
                                &base,
                                extra.clone(),
                                Some(&le),
                                *n as f64,
                            );
                        }
                        write_labelled(
                            lines,
                            &s.family,
                            "_bucket",
                            &base,
                            extra.clone(),
                            Some("+Inf"),
                            *count as f64,
                        );
                        write_labelled(lines, &s.family, "_sum", &base, extra.clone(), None, *sum);
                        write_labelled(lines, &s.family, "_count", &base, extra, None, *count as f64);
                    }
                }
            }
        }
        let mut out = String::with_capacity(families.values().map(|f| f.lines.len() + 128).sum());
        for (name, f) in &families {
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {}", f.kind.prometheus_type());
            out.push_str(&f.lines);
        }
        out
    }

    fn family<'a>(
        families: &'a mut BTreeMap<String, Family>,
        name: &str,
        help: &'static str,
        kind: MetricKind,
    ) -> &'a mut String {
        if !families.contains_key(name) {
            families.insert(name.to_owned(), Family { help, kind, lines: String::with_capacity(4096) });
        }
        &mut families.get_mut(name).expect("inserted above").lines
    }

    fn write_labelled<'e>(
        out: &mut String,
        name: &str,
        suffix: &str,
        base: &[(&str, &str)],
        extra: impl Iterator<Item = (&'e str, &'e str)>,
        le: Option<&str>,
        v: f64,
    ) {
        out.push_str(name);
        out.push_str(suffix);
        let mut first = true;
        let mut label = |out: &mut String, k: &str, val: &str| {
            out.push(if first { '{' } else { ',' });
            first = false;
            out.push_str(k);
            out.push_str("=\"");
            for c in val.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        };
        for &(k, val) in base {
            label(out, k, val);
        }
        for (k, val) in extra {
            label(out, k, val);
        }
        if let Some(le) = le {
            label(out, "le", le);
        }
        if !first {
            out.push('}');
        }
        out.push(' ');
        push_f64(out, v);
        out.push('\n');
    }

    fn push_f64(out: &mut String, v: f64) {
        if v.is_nan() {
            out.push_str("NaN");
        } else if v.is_infinite() {
            out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{v}");
        }
    }
}

/// Reading a `[[file_sd]]` target file of 1,000 targets in 100 groups: the JSON parse alone (the baseline),
/// the YAML parse alone, and the whole read of the JSON file (each target made a checked `[[hmon]]` block).
fn file_sd() -> Group {
    use std::path::Path;
    use telemon_fleet::config::file_sd::{parse_groups, FileSdSection, Group as TargetGroup};
    let groups: Vec<TargetGroup> = (0..100)
        .map(|g| TargetGroup {
            targets: (0..10).map(|t| format!("10.0.{g}.{t}:4502")).collect(),
            labels: [("room".to_owned(), format!("b{g}")), ("site".to_owned(), "lab".to_owned())].into(),
        })
        .collect();
    let json = serde_json::to_vec(&groups).unwrap();
    let yaml = serde_yaml_ng::to_string(&groups).unwrap().into_bytes();
    let section: FileSdSection = toml::from_str("files = ['t/*']\nprotocol = 'hmon'\npoll = '2s'\n").unwrap();
    let json2 = json.clone();
    let protocols = telemon_fleet::protocol::Protocols::built_in();
    Group::new("file_sd", Throughput::Elements(1000), 20)
        .case(Case::iter("json", move || parse_groups(Path::new("t.json"), black_box(&json)).unwrap().len()))
        .case(
            Case::iter("yaml", move || parse_groups(Path::new("t.yml"), black_box(&yaml)).unwrap().len())
                .vs("json"),
        )
        .case(
            Case::iter("read_json_blocks", move || {
                section.read_bytes(&protocols, Path::new("t.json"), black_box(&json2)).unwrap().0.len()
            })
            .vs("json"),
        )
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
