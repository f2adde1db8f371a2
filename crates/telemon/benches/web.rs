//! The web view's sampler (`Live::sample_now`, what runs once a second) over 1,000 targets whose figures
//! change every second, in four cases: nobody watching (it follows states only), one target's page open
//! (its every series into the history), `/` open (rows, the delta, the headline figures' history) and
//! `web_history = "always"` (every series into the history, within its bound).
//! Each iteration first updates every target in the registry, as the collectors would, which is the
//! `update_only` baseline the others are compared with. Two fleets: sys161-like targets (11 series) and
//! rvOS-like ones (100 series). Every case also runs in count mode, for `cargo xtask bench --table`.

use std::sync::Arc;

use bench_harness::{Case, Group};
use criterion::Throughput;
use telemon::config::WebHistory;
use telemon::web::live::Live;
use telemon_fleet::{
    Fleet, LabelSet, MetricKind, Protocol, Series, SeriesSet, TargetSnapshot, TargetState, Value,
};

const TARGETS: usize = 1000;

fn series(protocol: Protocol, v: f64) -> SeriesSet {
    let mut all = Vec::new();
    match protocol {
        Protocol::METER161 => {
            for family in [
                "sys161_cpu_cycles_total",
                "sys161_interrupts_total",
                "sys161_kernel_instructions_total",
                "sys161_user_instructions_total",
                "sys161_idle_cycles_total",
                "sys161_disk_reads_total",
                "sys161_disk_writes_total",
                "sys161_net_sent_total",
                "sys161_net_received_total",
                "sys161_console_bytes_total",
                "sys161_simulated_seconds_total",
            ] {
                all.push(Series {
                    family: Arc::from(family),
                    help: "a counter",
                    labels: LabelSet::default(),
                    kind: MetricKind::Counter,
                    value: Value::Number(v * 100.0),
                    rate: Some(v),
                });
            }
        }
        _ => {
            for state in ["free", "used"] {
                all.push(Series {
                    family: Arc::from("rvos_kernel_heap_bytes"),
                    help: "heap",
                    labels: LabelSet::new([("state", state)]),
                    kind: MetricKind::Gauge,
                    value: Value::Number(v * 4096.0),
                    rate: None,
                });
            }
            for pid in 0..98 {
                all.push(Series {
                    family: Arc::from("rvos_process_memory_bytes"),
                    help: "memory",
                    labels: LabelSet::new([("pid", pid.to_string().as_str()), ("name", "init")]),
                    kind: MetricKind::Gauge,
                    value: Value::Number(v + f64::from(pid)),
                    rate: None,
                });
            }
        }
    }
    all.sort_by(|a, b| a.family.cmp(&b.family));
    SeriesSet::from(all)
}

/// A fleet of `TARGETS` targets of `protocol`, and a step that changes every target's figures.
fn fleet(protocol: Protocol) -> (Arc<Fleet>, impl Fn()) {
    let fleet = Arc::new(Fleet::new());
    let names: Arc<[String]> = (0..TARGETS).map(|i| format!("t{i:04}")).collect();
    for n in names.iter() {
        let mut t = TargetSnapshot::new(n.as_str(), protocol, vec![("room".into(), "a".into())]);
        t.state = TargetState::Up;
        t.series = series(protocol, 1.0);
        fleet.registry().put(t);
    }
    let registry = fleet.registry().clone();
    let v = std::sync::atomic::AtomicU64::new(1);
    let step = move || {
        let v = v.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as f64 + 1.0;
        let s = series(protocol, v);
        for n in names.iter() {
            registry.update(n, |t| t.series = s.clone());
        }
    };
    (fleet, step)
}

fn group(name: &str, protocol: Protocol, runtime: &tokio::runtime::Runtime) -> Group {
    let _in = runtime.enter();
    let (_, update) = fleet(protocol);
    let (f, step) = fleet(protocol);
    let (idle, _guard) = Live::start(f, WebHistory::WhileViewed);
    let (f, step2) = fleet(protocol);
    let (watched, _guard2) = Live::start(f, WebHistory::WhileViewed);
    let _watch = watched.watch_fleet(true);
    let (f, step3) = fleet(protocol);
    let (always, _guard3) = Live::start(f, WebHistory::Always);
    let (f, step4) = fleet(protocol);
    let (page, _guard4) = Live::start(f, WebHistory::WhileViewed);
    let _page = page.watch_page("t0500", true);
    // The guards would stop the samplers' tasks, which never run here (the runtime is not driven):
    // `sample_now` is the whole of a second's work.
    std::mem::forget((_guard, _guard2, _guard3, _guard4, _watch, _page));
    Group::new(name, Throughput::Elements(TARGETS as u64), 10)
        .case(Case::iter("update_only", update))
        .case(
            Case::iter("unwatched", move || {
                step();
                idle.sample_now();
            })
            .vs("update_only"),
        )
        .case(
            Case::iter("target_page_open", move || {
                step4();
                page.sample_now();
            })
            .vs("update_only"),
        )
        .case(
            Case::iter("fleet_page_open", move || {
                step2();
                watched.sample_now();
            })
            .vs("update_only"),
        )
        .case(
            Case::iter("history_always", move || {
                step3();
                always.sample_now();
            })
            .vs("update_only"),
        )
}

fn groups() -> Vec<Group> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
    let groups = vec![
        group("web_sampler_sys161_1000", Protocol::METER161, &runtime),
        group("web_sampler_rvos_1000", Protocol::SYSINFO, &runtime),
    ];
    std::mem::forget(runtime);
    groups
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
