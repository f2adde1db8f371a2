//! `telemon export` writes every sample a recording holds, however fast it arrived (issue 35): recordings
//! made at 10, 100 and 200 ms intervals export exactly as many points of a series as `telemon replay --json`
//! prints rows, value for value, for meter161, Mono and smon.

use std::path::Path;
use std::time::Duration;

use sim_common::Shutdown;

mod support;
use support::{code, run, stderr, stdout, Telemon};

const INTERVALS_MS: [u64; 3] = [10, 100, 200];
const ROWS: &str = "30";

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp dir")
}

/// The values of the series `series` (name and labels as exposed) in `telemon export`'s OpenMetrics, in order.
async fn exported(recording: &Path, series: &str) -> Vec<f64> {
    let out = run(&["export", path(recording), "--format", "openmetrics"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let prefix = format!("{series} ");
    stdout(&out)
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// `telemon replay FILE --json`'s rows.
async fn replayed(recording: &Path) -> Vec<serde_json::Value> {
    let out = run(&["replay", path(recording), "--json"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    support::json_lines(&stdout(&out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meter161_recordings_export_every_row() {
    for ms in INTERVALS_MS {
        let dir = tempfile::tempdir().unwrap();
        let sim = sys161_sim::Running::spawn(dir.path(), sys161_sim::Config::default()).unwrap();
        let rec = dir.path().join("m.pcapng");
        let interval = format!("{ms}ms");
        let live = Telemon::spawn(&[
            "meter161",
            "--dir",
            path(dir.path()),
            "--interval",
            &interval,
            "--count",
            ROWS,
            "--json",
            "--record",
            path(&rec),
        ]);
        let (status, live_rows, err) = live.finish().await;
        assert_eq!(status, 0, "{err:?}");
        assert_eq!(live_rows.len(), 30);
        sim.stop().await.unwrap();

        let rows = replayed(&rec).await;
        let kinsns: Vec<f64> = rows.iter().map(|r| r["kinsns"].as_f64().unwrap()).collect();
        let series = format!("sys161_kernel_instructions_total{{target=\"{}\"}}", path(dir.path()));
        let points = exported(&rec, &series).await;
        assert!(rows.len() >= 30, "{ms} ms: {} rows", rows.len());
        assert_eq!(points, kinsns, "{ms} ms: one point per row, the row's cumulative value");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mono_recordings_export_every_sample() {
    for ms in INTERVALS_MS {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("m.pcapng");
        let mut live = Telemon::spawn(&[
            "mono",
            "listen",
            "127.0.0.1:0",
            "--count",
            ROWS,
            "--json",
            "--record",
            path(&rec),
        ]);
        let line = live.stderr_line("listening for Mono agents on ").await;
        let addr = line.rsplit(' ').next().unwrap().to_owned();
        // A counter that changes with every sample.
        let mut config = mono_agent_sim::AgentConfig::from_options(&format!(
            "address={addr},counters=Mono JIT/Compiled methods,interval={ms}"
        ))
        .unwrap();
        config.values = mono_agent_sim::ValueMode::Fixed;
        let overrides = mono_agent_sim::ValueOverrides::default();
        let shutdown = Shutdown::new();
        tokio::spawn(mono_agent_sim::run_with_overrides(config, overrides.clone(), shutdown.clone()));
        let bump = tokio::spawn(async move {
            for n in 0i32.. {
                overrides.set("Mono JIT/Compiled methods", mono_counters::CounterValue::Int(n));
                tokio::time::sleep(Duration::from_millis(ms / 2)).await;
            }
        });
        let (status, live_rows, err) = live.finish().await;
        bump.abort();
        shutdown.cancel();
        assert_eq!(status, 0, "{err:?}");
        assert_eq!(live_rows.len(), 30);

        let rows = replayed(&rec).await;
        let values: Vec<f64> =
            rows.iter().map(|r| r["values"]["Mono JIT/Compiled methods"].as_f64().unwrap()).collect();
        let capture = telemon_capture::Capture::from_file(&rec, telemon_capture::Limits::default()).unwrap();
        let target = &capture.targets()[0].name;
        let series =
            format!("mono_runtime{{target=\"{target}\",category=\"Mono JIT\",counter=\"Compiled methods\"}}");
        let points = exported(&rec, &series).await;
        assert!(rows.len() >= 30, "{ms} ms: {} rows", rows.len());
        assert_eq!(points, values, "{ms} ms: one point per sample");
    }
}

struct Cpus(u64);

impl smon_sim::Source for Cpus {
    fn sample(&mut self) -> Vec<smon_codec::Sample> {
        self.0 += 1;
        (0..2u64).map(|cpu| smon_codec::Sample::new("linux.cpu.user", [cpu], 100 * self.0 + cpu)).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smon_recordings_export_every_value() {
    for ms in INTERVALS_MS {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("s.pcapng");
        let shutdown = Shutdown::new();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let config = smon_sim::Config { interval: Duration::from_millis(ms), ..smon_sim::Config::default() };
        tokio::spawn(smon_sim::serve(l, Cpus(0), config, shutdown.clone()));
        // The stream's own header values, then two values a sample.
        let live =
            Telemon::spawn(&["smon", "connect", &addr, "--count", "70", "--json", "--record", path(&rec)]);
        let (status, _, err) = live.finish().await;
        shutdown.cancel();
        assert_eq!(status, 0, "{err:?}");

        let rows = replayed(&rec).await;
        let cpu0: Vec<f64> = rows
            .iter()
            .filter(|r| r["index"] == serde_json::json!([0]))
            .map(|r| r["value"].as_f64().unwrap())
            .collect();
        let series = format!("smon_value{{target=\"{addr}\",name=\"linux.cpu.user\",index=\"0\"}}");
        let points = exported(&rec, &series).await;
        assert!(cpu0.len() >= 25, "{ms} ms: {} values", cpu0.len());
        assert_eq!(points, cpu0, "{ms} ms: one point per value");
    }
}
