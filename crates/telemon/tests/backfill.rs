//! Backfill: `telemon export` of a one-hour meter161 recording made five hours ago (written with a fake
//! clock), loaded with `promtool tsdb create-blocks-from openmetrics`, and queried from a real Prometheus
//! started on that data directory (`/api/v1/query_range` returns the recorded values at the recorded times).
//!
//! Without `prometheus` or `promtool` on `PATH` the test fails when `CI=true`, and elsewhere prints
//! `SKIPPED: ...` and passes.

use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use telemon_capture::{link_type, Direction, Record, RecordKind, Target, Writer};

mod support;

const STEP_S: u64 = 15;
const SAMPLES: u64 = 241; // one hour, both ends included

/// A meter161 recording: the handshake, then a DATA row every 15 s for an hour from `start_s`; the
/// simulator's `irqs` rise by 10 a row.
fn recording(start_s: u64) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), "test fake clock").unwrap();
    let i = w.interface(&Target::new("os161", link_type::METER161, "/home/ta/os161/.sockets/meter")).unwrap();
    let at = |s: u64| s * 1_000_000_000;
    let mut rec =
        |t: u64, kind: RecordKind| w.record(&Record { interface: i, time_ns: t, dropped: 0, kind }).unwrap();
    rec(at(start_s) - 1, RecordKind::Open);
    let names = meter161::SYS161_FIELDS.join(" ");
    let widths = vec!["10"; meter161::SYS161_FIELDS.len()].join(" ");
    let hello = format!("HELLO 2\r\nHEAD {names}\r\nWIDTH {widths}\r\n");
    rec(at(start_s) - 1, RecordKind::Data { direction: Direction::Inbound, bytes: hello.into_bytes() });
    for n in 0..SAMPLES {
        let values: Vec<String> = meter161::SYS161_FIELDS
            .iter()
            .map(|f| match *f {
                "nsec" => (n * STEP_S * 1_000_000_000).to_string(),
                "irqs" => (10 * n).to_string(),
                _ => n.to_string(),
            })
            .collect();
        let line = format!("DATA {}\r\n", values.join(" "));
        rec(
            at(start_s + n * STEP_S),
            RecordKind::Data { direction: Direction::Inbound, bytes: line.into_bytes() },
        );
    }
    rec(at(start_s + SAMPLES * STEP_S), RecordKind::Close);
    w.into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_recording_backfills_prometheus() {
    let Some((prometheus, promtool)) =
        support::prometheus_and_promtool("an_exported_recording_backfills_prometheus")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let start_s = (now - 5 * 3600) / 60 * 60;
    let rec = dir.path().join("os161.pcapng");
    std::fs::write(&rec, recording(start_s)).unwrap();

    let out = support::run(&["export", rec.to_str().unwrap(), "--format", "openmetrics"], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    let om = support::stdout(&out);
    assert!(om.ends_with("# EOF\n"));
    let line = om.lines().find(|l| l.starts_with("sys161_interrupts_total")).unwrap();
    assert_eq!(
        line,
        format!("sys161_interrupts_total{{target=\"os161\"}} 0 {start_s}.000"),
        "seconds, not milliseconds"
    );
    let om_file = dir.path().join("out.om");
    std::fs::write(&om_file, &om).unwrap();

    let data = dir.path().join("data");
    let status = std::process::Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om_file)
        .arg(&data)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "promtool tsdb create-blocks-from openmetrics failed");

    let mut prom = support::Prometheus::new(&prometheus).data(&data).start().await;
    let end_s = start_s + (SAMPLES - 1) * STEP_S;
    let query =
        format!("/api/v1/query_range?query=sys161_interrupts_total&start={start_s}&end={end_s}&step=60");
    let addr = prom.addr();
    let body = prom
        .until("Prometheus to answer the query", async || match support::http_get(addr, &query, &[]).await {
            Ok((200, body)) if body.contains("\"values\"") => Some(body),
            _ => None,
        })
        .await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let values = v["data"]["result"][0]["values"].as_array().unwrap().clone();
    assert_eq!(values.len(), 61, "one point a minute for the hour: {body}");
    for (k, point) in values.iter().enumerate() {
        let t = point[0].as_f64().unwrap() as u64;
        let value: f64 = point[1].as_str().unwrap().parse().unwrap();
        assert_eq!(t, start_s + 60 * k as u64);
        // At minute k the last row is row 4k, whose irqs were 40k.
        assert_eq!(value, 40.0 * k as f64, "at {t}");
    }
    prom.kill().await;
}
