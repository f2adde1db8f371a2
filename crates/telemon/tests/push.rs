//! The push senders against receivers written in the test (an axum server on a loopback port):
//! remote write's headers and encoding, a receiver answering 400 (dropped at once, counted, never
//! retried), one answering 503 twice then 204 (retried, nothing lost, nothing twice), the queue's
//! byte bound with the receiver down, and the flush at shutdown.
//!
//! The tests against real receivers (Prometheus, VictoriaMetrics, an OTLP collector) are in
//! `push_receivers.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use sim_common::Shutdown;
use smon_sim::{Config as SmonConfig, MIN_INTERVAL};
use telemon::config::Config;
use telemon_push::remote_write::{decode_request, is_stale, TimeSeries, WriteRequest};

mod support;
use support::{within, Cpus};

/// One request as the fake receiver saw it.
#[derive(Debug, Clone)]
struct Seen {
    headers: HeaderMap,
    request: WriteRequest,
    status: u16,
}

type Script = Arc<dyn Fn(usize) -> (u16, Option<&'static str>) + Send + Sync>;

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Script,
}

/// A remote write receiver answering request `i` (0-based) with `script(i)`: a status and an
/// optional `Retry-After`.
async fn fake_receiver(
    script: impl Fn(usize) -> (u16, Option<&'static str>) + Send + Sync + 'static,
) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let fake = Fake { seen: Arc::new(Mutex::new(Vec::new())), script: Arc::new(script) };
    let seen = fake.seen.clone();
    async fn write(State(f): State<Fake>, headers: HeaderMap, body: Bytes) -> axum::response::Response {
        let request = decode_request(&body).expect("a snappy-compressed WriteRequest");
        let mut seen = f.seen.lock().unwrap();
        let (status, after) = (f.script)(seen.len());
        seen.push(Seen { headers, request, status });
        let mut resp = axum::response::IntoResponse::into_response(StatusCode::from_u16(status).unwrap());
        if let Some(a) = after {
            resp.headers_mut().insert("retry-after", a.parse().unwrap());
        }
        resp
    }
    let app = Router::new().route("/api/v1/write", post(write)).with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

async fn smon() -> (String, Shutdown) {
    let shutdown = Shutdown::new();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(l, Cpus(0), config, shutdown.clone()));
    (addr, shutdown)
}

/// Every (series, timestamp) of some requests, in order; with the labels as one string.
fn samples<'a>(reqs: impl Iterator<Item = &'a Seen>) -> Vec<(String, i64, f64)> {
    let mut out = Vec::new();
    for r in reqs {
        for ts in &r.request.timeseries {
            let l: Vec<String> = ts.labels.iter().map(|l| format!("{}={}", l.name, l.value)).collect();
            for s in &ts.samples {
                out.push((l.join(","), s.timestamp, s.value));
            }
        }
    }
    out
}

/// The rules of remote write 1.0 that the compliance suite checks on every series a sender posts
/// (SortedLabels, EmptyLabels, RepeatedLabels, NameLabel): its label names, which follow them.
fn check_labels(ts: &TimeSeries) -> Vec<&str> {
    let names: Vec<&str> = ts.labels.iter().map(|l| l.name.as_str()).collect();
    assert!(
        names.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
        "in byte order, none twice: {names:?}"
    );
    assert!(ts.labels.iter().all(|l| !l.value.is_empty()), "an empty value: {:?}", ts.labels);
    assert!(names.contains(&"__name__"), "{names:?}");
    names
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    within(what, async {
        while !ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_is_dropped_and_counted_and_503s_are_retried_without_loss_or_duplicates() {
    let (smon_addr, shutdown) = smon().await;
    let (bad, bad_seen) = fake_receiver(|_| (400, None)).await;
    let (flaky, flaky_seen) = fake_receiver(|i| match i {
        0 => (503, None),
        1 => (503, Some("0")),
        _ => (204, None),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let toml = format!(
        r#"
[[smon]]
name = "box"
connect = "{smon_addr}"
labels = {{ room = "b12" }}
[[remote_write]]
name = "bad"
url = "http://{bad}/api/v1/write"
batch = "100ms"
[[remote_write]]
name = "flaky"
url = "http://{flaky}/api/v1/write"
batch = "100ms"
headers = {{ "X-Scope-OrgID" = "tenant-1" }}
bearer_token_file = "{token}"
external_labels = {{ cluster = "lab" }}
"#,
        token = token.display()
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let stats = server.push_stats();
    let (bad_stats, flaky_stats) = (stats[0].clone(), stats[1].clone());
    wait_for("five accepted requests with smon values and three refused ones", || {
        let ok = flaky_seen.lock().unwrap();
        let accepted = ok.iter().filter(|s| s.status == 204).count();
        let with_values = samples(ok.iter()).iter().any(|s| s.0.starts_with("__name__=smon_value,"));
        accepted >= 5 && with_values && bad_seen.lock().unwrap().len() >= 3
    })
    .await;
    // Stop the senders (flushing) so that the counts below are final.
    let addr = server.local_addr();
    let metrics = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    server.shutdown().await;
    shutdown.cancel();

    // The request as the spec wants it.
    let flaky_seen = flaky_seen.lock().unwrap().clone();
    let h = &flaky_seen[0].headers;
    assert_eq!(h["content-encoding"], "snappy");
    assert_eq!(h["content-type"], "application/x-protobuf");
    assert_eq!(h["x-prometheus-remote-write-version"], "0.1.0");
    assert!(h["user-agent"].to_str().unwrap().starts_with("telemon/"), "{h:?}");
    assert_eq!(h["x-scope-orgid"], "tenant-1");
    assert_eq!(h["authorization"], "Bearer s3cret");
    for ts in flaky_seen.iter().flat_map(|s| &s.request.timeseries) {
        let names = check_labels(ts);
        assert!(names.contains(&"cluster") && names.contains(&"target"), "{names:?}");
        assert!(ts.samples.windows(2).all(|w| w[0].timestamp < w[1].timestamp), "in order");
    }
    let all = samples(flaky_seen.iter());
    assert!(all.iter().any(|s| s.0 == "__name__=smon_value,cluster=lab,index=0,name=linux.cpu.idle,room=b12,target=box"), "{all:?}");

    // 503, 503, 204: the same batch three times, then new ones; nothing lost, nothing twice.
    assert_eq!((flaky_seen[0].status, flaky_seen[1].status, flaky_seen[2].status), (503, 503, 204));
    let first = samples(flaky_seen[..1].iter());
    assert_eq!(first, samples(flaky_seen[1..2].iter()), "a retry re-sends the same batch");
    assert_eq!(first, samples(flaky_seen[2..3].iter()));
    let accepted = samples(flaky_seen.iter().filter(|s| s.status == 204));
    let sent: BTreeSet<(String, i64)> = all.iter().map(|s| (s.0.clone(), s.1)).collect();
    let got: BTreeSet<(String, i64)> = accepted.iter().map(|s| (s.0.clone(), s.1)).collect();
    assert_eq!(got.len(), accepted.len(), "no sample accepted twice");
    assert_eq!(sent, got, "every sample tried was accepted in the end");
    assert_eq!(flaky_stats.sent(), accepted.len() as u64);
    assert_eq!(flaky_stats.retried(), 2 * first.len() as u64);
    assert_eq!(flaky_stats.dropped_total(), 0);
    // Per series, the accepted timestamps only go up (across requests too).
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for (series, ts, _) in &accepted {
        let prev = last.insert(series, *ts);
        assert!(prev.is_none_or(|p| p < *ts), "{series} went back in time");
    }

    // 400: each batch once, dropped and counted by reason, never retried.
    let bad_seen = bad_seen.lock().unwrap().clone();
    let bad_all = samples(bad_seen.iter());
    let distinct: BTreeSet<(String, i64)> = bad_all.iter().map(|s| (s.0.clone(), s.1)).collect();
    assert_eq!(distinct.len(), bad_all.len(), "a 400 is never retried");
    assert_eq!(bad_stats.retried(), 0);
    assert_eq!(bad_stats.sent(), 0);
    assert_eq!(bad_stats.dropped("dropped_4xx"), bad_all.len() as u64);
    assert!(
        metrics.contains("telemon_sender_samples_total{sender=\"bad\",result=\"dropped_4xx\"} "),
        "{metrics}"
    );
    assert!(metrics.contains("telemon_sender_samples_total{sender=\"flaky\",result=\"sent\"} "), "{metrics}");
    assert!(!all.iter().any(|s| is_stale(s.2)), "no stale marker while the target is up");
    eprintln!(
        "errors: 503 twice then 204: {} samples retried, {} accepted, 0 lost; 400: {} requests, {} samples dropped, 0 retried",
        flaky_stats.retried(),
        accepted.len(),
        bad_seen.len(),
        bad_stats.dropped("dropped_4xx")
    );
}

/// An smon source with a value that has no index path (as `linux.mem.total`) and one that has.
struct MemAndCpu(u64);

impl smon_sim::Source for MemAndCpu {
    fn sample(&mut self) -> Vec<smon_codec::Sample> {
        self.0 += 1;
        vec![
            smon_codec::Sample::new("linux.mem.total", Vec::new(), 4096u64),
            smon_codec::Sample::new("linux.cpu.idle", [0], 1000 + self.0),
        ]
    }
}

/// Remote write 1.0's MUSTs, as the receiver decodes them: labels sorted by name in byte order
/// with `__name__` among them (a configured `Zone` and an external `Region` sort before it), and no
/// empty value: not the `index` of a value without an index path, not a configured label or an
/// external label set to "".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_posted_has_its_labels_in_byte_order_and_none_empty() {
    let shutdown = Shutdown::new();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let smon_addr = l.local_addr().unwrap();
    let config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(l, MemAndCpu(0), config, shutdown.clone()));
    let (receiver, seen) = fake_receiver(|_| (204, None)).await;
    let toml = format!(
        r#"
[[smon]]
name = "box"
connect = "{smon_addr}"
labels = {{ Zone = "a", _x = "", room = "b12" }}
[[remote_write]]
url = "http://{receiver}/api/v1/write"
batch = "100ms"
external_labels = {{ Region = "eu", empty = "" }}
"#
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let mem = "Region=eu,Zone=a,__name__=smon_value,name=linux.mem.total,room=b12,target=box";
    let cpu = "Region=eu,Zone=a,__name__=smon_value,index=0,name=linux.cpu.idle,room=b12,target=box";
    let up = "Region=eu,Zone=a,__name__=telemon_target_up,protocol=smon,room=b12,target=box";
    wait_for("both smon values pushed", || {
        let all = samples(seen.lock().unwrap().iter());
        let has = |name: &str| all.iter().any(|s| s.0.contains(name));
        has("name=linux.mem.total") && has("name=linux.cpu.idle")
    })
    .await;
    let addr = server.local_addr();
    let metrics = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    server.shutdown().await;
    shutdown.cancel();
    let seen = seen.lock().unwrap().clone();
    for ts in seen.iter().flat_map(|s| &s.request.timeseries) {
        check_labels(ts);
    }
    let series: BTreeSet<String> = samples(seen.iter()).into_iter().map(|s| s.0).collect();
    for want in [cpu, mem, up] {
        assert!(series.contains(want), "{want} in {series:#?}");
    }
    // The sim's own strings (smon_info) too: every series starts with the same labels.
    assert!(
        series.iter().all(|s| s.starts_with("Region=eu,Zone=a,__name__=smon_") || s == up),
        "{series:#?}"
    );
    assert_eq!(
        series.iter().filter(|s| s.contains("linux.mem.total")).count(),
        1,
        "the same labels every time"
    );
    // The scrape agrees: no empty value there either.
    let line =
        metrics.lines().find(|l| l.starts_with("smon_value{") && l.contains("linux.mem.total")).unwrap();
    assert_eq!(line, "smon_value{target=\"box\",Zone=\"a\",room=\"b12\",name=\"linux.mem.total\"} 4096");
    assert!(!metrics.contains("=\"\""), "an empty label value on /metrics: {metrics}");
}

/// This process's resident set, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_receiver_down_the_queue_stays_within_queue_bytes_and_drops_the_oldest() {
    let shutdown = Shutdown::new();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rvos = l.local_addr().unwrap();
    tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
    // A port nobody listens on.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let toml = format!(
        r#"
[[sysinfo]]
name = "vm"
connect = "{rvos}"
every = "100ms"
[[remote_write]]
url = "http://{down}/api/v1/write"
batch = "5ms"
queue_bytes = "1MiB"
"#
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let stats = server.push_stats()[0].clone();
    wait_for("the queue to fill and drop", || stats.dropped("dropped_queue_full") > 0).await;
    let (rss0, dropped0) = (rss(), stats.dropped("dropped_queue_full"));
    let addr = server.local_addr();
    let mut max_queue = 0.0f64;
    within("the drops to go on", async {
        loop {
            let m = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
            let q: f64 = m
                .lines()
                .find(|l| l.starts_with("telemon_sender_queue_bytes{"))
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
                .unwrap();
            max_queue = max_queue.max(q);
            if stats.dropped("dropped_queue_full") > dropped0 + 5_000 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let grown = rss().saturating_sub(rss0);
    assert!(max_queue <= (1 << 20) as f64, "queue bytes {max_queue}");
    assert!(max_queue > (1 << 19) as f64, "the queue filled: {max_queue}");
    // Tens of thousands of samples dropped since; memory did not follow them.
    assert!(grown < 32 << 20, "RSS grew by {grown} bytes");
    eprintln!(
        "bounds: queue at most {max_queue} bytes of {}, {} dropped, RSS grew {} KiB meanwhile",
        1 << 20,
        stats.dropped("dropped_queue_full"),
        grown >> 10
    );
    assert_eq!(stats.sent(), 0);
    assert!(stats.retried() > 0, "connection errors are retried");
    server.shutdown().await;
    assert!(stats.dropped("dropped_shutdown") > 0, "what was left at the deadline is counted");
    shutdown.cancel();
}

#[tokio::test]
async fn a_bad_shard_flag_is_a_usage_error_and_check_config_counts_the_senders() {
    let out = support::run(&["serve", "--shard", "3/2", "--smon", "127.0.0.1:1"], None).await;
    assert_eq!(support::code(&out), 2, "{}", support::stderr(&out));
    assert!(support::stderr(&out).contains("bad shard \"3/2\""), "{}", support::stderr(&out));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("push.toml");
    std::fs::write(
        &file,
        "[[smon]]\nname = \"a\"\nconnect = \"127.0.0.1:7399\"\n[[remote_write]]\nurl = \"http://x:1/w\"\n[[otlp]]\nendpoint = \"http://x:2\"\n",
    )
    .unwrap();
    let out = support::run(&["serve", "--check-config", file.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    assert!(
        support::stdout(&out).contains("; pushing to 1 remote_write, 1 otlp"),
        "{}",
        support::stdout(&out)
    );
    std::fs::write(&file, "[[remote_write]]\nurl = \"http://x:1/w\"\nexternal_labels = { le = \"1\" }\n")
        .unwrap();
    let out = support::run(&["serve", "--check-config", file.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 2);
    assert!(support::stderr(&out).contains("push.toml:3: external_labels: "), "{}", support::stderr(&out));
}
