//! The push senders against real receivers, each started by the test on a free loopback port with
//! a temporary data directory and stopped at the end:
//!
//! - Prometheus 2.42 (Debian's `prometheus`, `--web.enable-remote-write-receiver`) and
//!   VictoriaMetrics 1.79 (Debian's `victoria-metrics`) take remote write from one telemon over
//!   the five sims: every protocol's values read back equal the sims' own figures (sys161's
//!   counters as exact integers at each timestamp), and a stopped sim's series go stale in
//!   Prometheus (an instant query returns nothing, not the last value);
//! - VictoriaMetrics stopped for 20 s and started again: every 1 s sample of a healthy target
//!   from before, during and after the outage is there, with no gap and none twice;
//! - two telemon instances with `shard = 1/2` and `2/2` over 40 targets (36 smon, 4 found by a
//!   `dir_glob`) push to one VictoriaMetrics: every target exactly once, the union all 40;
//! - OTLP through the `rotel` collector (PyPI) into a Python receiver that decodes with the
//!   official `opentelemetry-proto` package: counters are cumulative monotonic Sums with a start
//!   time (a new one when the target restarts), histograms carry the rvOS `le` bounds, units and
//!   the Resource are right.
//!
//! A missing receiver fails the test under `CI=true` (`.ci/run` installs them: Debian packages
//! and a virtualenv under `target/push-venv`) and elsewhere prints `SKIPPED:` and passes. Waits
//! poll under a safety net; nothing asserts how long anything took.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sim_common::Shutdown;
use smon_sim::{Config as SmonConfig, MIN_INTERVAL};
use telemon::config::Config;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

mod support;
use support::{
    free_port, http, listener, need, need_on_path, Cpus, Receiver, SimOptions, Sims, VictoriaMetrics,
    DEADLINE,
};

/// The virtualenv `.ci/run` makes (`TELEMON_PUSH_VENV` overrides).
fn venv() -> PathBuf {
    std::env::var_os("TELEMON_PUSH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/push-venv"))
}

fn prometheus_bin(test: &str) -> Option<PathBuf> {
    need_on_path(test, "prometheus", "apt-get install prometheus (bash .ci/push-receivers.sh)")
}

fn vm_bin(test: &str) -> Option<PathBuf> {
    need_on_path(test, "victoria-metrics", "apt-get install victoria-metrics (bash .ci/push-receivers.sh)")
}

async fn until<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    support::until(what, Duration::from_millis(250), f).await
}

/// The smon sims' time between samples.
fn smon_interval() -> Duration {
    Duration::from_millis(100).max(MIN_INTERVAL)
}

async fn smon_sim(shutdown: &Shutdown) -> String {
    let (l, addr) = listener().await;
    let config = SmonConfig { interval: smon_interval(), ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(l, Cpus(0), config, shutdown.clone()));
    addr
}

/// The five sims, in-process, the Mono agent dialling in at once.
async fn sims() -> Sims {
    let sims = Sims::start(SimOptions { smon_interval: smon_interval(), ..SimOptions::steady() }).await;
    sims.start_mono_agent();
    sims
}

/// sys161's counters at each timestamp equal the sim's model at that simulated time, exactly.
fn check_sys161_exact(clock: &[(i64, f64)], kinsns: &[(i64, f64)], irqs: &[(i64, f64)]) -> usize {
    let machine = sys161_sim::Machine::default();
    let by_ts = |v: &[(i64, f64)]| v.iter().copied().collect::<BTreeMap<i64, f64>>();
    let (k, i) = (by_ts(kinsns), by_ts(irqs));
    let mut checked = 0;
    for (ts, secs) in clock {
        let nsec = (secs * 1e9).round() as u64;
        let want = machine.counters_at(nsec);
        if let (Some(kv), Some(iv)) = (k.get(ts), i.get(ts)) {
            assert_eq!(*kv as u64, want[1], "kinsns at {ts} (nsec {nsec})");
            assert_eq!(*iv as u64, want[5], "irqs at {ts} (nsec {nsec})");
            checked += 1;
        }
    }
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_values_reach_prometheus_and_victoriametrics_and_a_stopped_sim_goes_stale() {
    let test = "remote_write_values_reach_prometheus_and_victoriametrics";
    let (Some(prom_bin), Some(vm_bin)) = (prometheus_bin(test), vm_bin(test)) else { return };
    let (prom, vm) =
        tokio::join!(Receiver::prometheus(&prom_bin), Receiver::vm(VictoriaMetrics::new(&vm_bin)));
    let mut sims = sims().await;
    let toml = format!(
        "{}\n[[remote_write]]\nname = \"prometheus\"\nurl = \"{}\"\nbatch = \"500ms\"\n[[remote_write]]\nname = \"vm\"\nurl = \"{}\"\nbatch = \"500ms\"\n",
        sims.toml(Some("250ms")),
        prom.write_url(),
        vm.write_url()
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();

    for r in [&prom, &vm] {
        let name = format!("{:?}", r.kind);
        until(&format!("{name}: telemon_target_up = 1 for the five protocols"), async || {
            let up = r.query("telemon_target_up == 1").await;
            let protocols: BTreeSet<String> =
                up.iter().filter_map(|(l, _)| l.get("protocol").cloned()).collect();
            (protocols.len() == 5).then_some(())
        })
        .await;
        // sys161: exact integers at every timestamp, over several samples.
        let checked = until(&format!("{name}: sys161 samples"), async || {
            let q = |f: &str| format!("{f}{{target=\"sys161\"}}[1m]");
            let clock = r.query(&q("sys161_simulated_seconds_total")).await;
            let k = r.query(&q("sys161_kernel_instructions_total")).await;
            let i = r.query(&q("sys161_interrupts_total")).await;
            let (Some(clock), Some(k), Some(i)) = (clock.first(), k.first(), i.first()) else { return None };
            let n = check_sys161_exact(&clock.1, &k.1, &i.1);
            (n >= 3).then_some(n)
        })
        .await;
        assert!(checked >= 3);
        eprintln!("{name}: sys161 checked exactly at {checked} timestamps");
        // smon: the two CPUs' values keep the source's relation at every timestamp.
        let idle = r.query("smon_value{target=\"smon\",name=\"linux.cpu.idle\"}[1m]").await;
        let by_index: BTreeMap<String, BTreeMap<i64, f64>> =
            idle.into_iter().map(|(l, v)| (l["index"].clone(), v.into_iter().collect())).collect();
        let matched = by_index["0"].iter().filter(|(ts, v0)| {
            let v1 = by_index["1"].get(ts);
            if let Some(v1) = v1 {
                assert_eq!(*v1 - 2000.0, 2.0 * (**v0 - 1000.0), "smon at {ts}");
            }
            v1.is_some()
        });
        assert!(matched.count() >= 1, "{name}: smon samples at common timestamps");
        // hmon: the used workspace is the dyalog sim's own figure.
        let want = sims.dyalog.world().lock().workspace.used as f64;
        let got = until(&format!("{name}: dyalog used = {want}"), async || {
            r.value("dyalog_workspace_used_bytes{target=\"dyalog\"}").await.filter(|v| *v == want)
        })
        .await;
        assert_eq!(got, want);
        // mono: the added counters with their labels.
        let ws = until(&format!("{name}: mono working set"), async || {
            r.value("mono_runtime_bytes{category=\"Mono System\",counter=\"Working Set\"}").await
        })
        .await;
        assert!(ws > 0.0);
        // sysinfo: a real histogram, +Inf bucket = count, at the same timestamp.
        let inf = r.query("rvos_scheduler_latency_seconds_bucket{target=\"rvos\",le=\"+Inf\"}[1m]").await;
        let count = r.query("rvos_scheduler_latency_seconds_count{target=\"rvos\"}[1m]").await;
        assert_eq!(inf.len(), 1, "{name}: {inf:?}");
        assert_eq!(inf[0].1, count[0].1, "{name}: +Inf bucket = count");
        assert!(!r.query("rvos_kstat_total{target=\"rvos\"}").await.is_empty());
    }

    // A stopped sim: its stale markers make an instant query answer nothing (without them,
    // Prometheus would show the last value for five minutes).
    sims.sys161.take().unwrap().stop().await.unwrap();
    until("sys161's series stale in Prometheus", async || {
        let gone = prom.query("sys161_kernel_instructions_total{target=\"sys161\"}").await.is_empty();
        let down = prom.value("telemon_target_up{target=\"sys161\"}").await == Some(0.0);
        (gone && down).then_some(())
    })
    .await;
    let stats = server.push_stats();
    server.shutdown().await;
    for s in stats {
        assert_eq!(s.dropped_total(), 0, "{}", s.sender);
        assert!(s.sent() > 0);
    }
    let _ = sims.sys161_dir.path();
    prom.stop().await;
    vm.stop().await;
}

/// The test CA, server certificate and key (`tests/data/tls/README.md`).
fn tls_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls").join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_reaches_a_prometheus_behind_tls_and_basic_auth() {
    let test = "remote_write_reaches_a_prometheus_behind_tls_and_basic_auth";
    let Some(prom_bin) = prometheus_bin(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    // Prometheus serves HTTPS only, with the test certificate, and asks for a user and password.
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  telemon: {}\n",
            tls_file("server.pem").display(),
            tls_file("server.key").display(),
            "$2b$04$KEAqMNh8I7N9PwYMAqDcp.Wuox2S8GsjbijmwLJi6wd..pw2MaWeC", // telemon-test-password
        ),
    )
    .unwrap();
    let mut prometheus = support::Prometheus::new(&prom_bin)
        .arg(format!("--web.config.file={}", web.display()))
        .remote_write_receiver()
        .spawn();
    let addr = prometheus.addr();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(tls_file("ca.pem")).unwrap()).unwrap();
    let https =
        reqwest::Client::builder().add_root_certificate(ca).timeout(Duration::from_secs(10)).build().unwrap();
    let get = |path: &str| {
        https.get(format!("https://{addr}{path}")).basic_auth("telemon", Some("telemon-test-password"))
    };
    prometheus
        .until("Prometheus ready over HTTPS", async || {
            get("/-/ready").send().await.ok()?.status().is_success().then_some(())
        })
        .await;
    let wrong = https.get(format!("https://{addr}/-/ready")).basic_auth("telemon", Some("wrong"));
    let denied = wrong.send().await.unwrap().status();
    assert_eq!(denied.as_u16(), 401, "Prometheus checks the password");

    let sys161_dir = tempfile::tempdir().unwrap();
    let sys161 = sys161_sim::Running::spawn(sys161_dir.path(), sys161_sim::Config::default()).unwrap();
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, "telemon-test-password\n").unwrap();
    let url = format!("https://127.0.0.1:{}/api/v1/write", addr.port());
    let toml = format!(
        r#"
[[meter161]]
name = "sys161"
dir = '{dir}'
interval = "250ms"
[[remote_write]]
name = "tls"
url = "{url}"
batch = "250ms"
basic_auth = {{ username = "telemon", password_file = '{password}' }}
tls = {{ ca_file = '{ca}' }}
[[remote_write]]
name = "wrong-password"
url = "{url}"
batch = "250ms"
basic_auth = {{ username = "telemon", password = "wrong" }}
tls = {{ ca_file = '{ca}' }}
[[remote_write]]
name = "no-ca"
url = "{url}"
batch = "250ms"
basic_auth = {{ username = "telemon", password_file = '{password}' }}
"#,
        dir = sys161_dir.path().display(),
        password = password_file.display(),
        ca = tls_file("ca.pem").display(),
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();

    // The samples arrive: Prometheus answers queries for them.
    let kinsns = until("sys161's kernel instructions in Prometheus", async || {
        let url = "/api/v1/query?query=sys161_kernel_instructions_total%7Btarget%3D%22sys161%22%7D";
        let text = get(url).send().await.ok()?.text().await.ok()?;
        let body: serde_json::Value = serde_json::from_str(&text).ok()?;
        let v = body["data"]["result"][0]["value"][1].as_str()?.parse::<f64>().ok()?;
        (v > 0.0).then_some(v)
    })
    .await;
    assert!(kinsns > 0.0);
    let stats = server.push_stats();
    let by_name = |n: &str| stats.iter().find(|s| s.sender == n).unwrap().clone();
    let (ok, wrong, no_ca) = (by_name("tls"), by_name("wrong-password"), by_name("no-ca"));
    // A wrong password is a 401: dropped at once and counted, never retried.
    until("the wrong password's samples dropped as 4xx", async || {
        (wrong.dropped("dropped_4xx") > 0).then_some(())
    })
    .await;
    // Without the CA, the server's certificate is refused: nothing is sent, the batch is retried.
    until("the sender without the CA to retry", async || (no_ca.retried() > 0).then_some(())).await;
    server.shutdown().await;
    sys161.stop().await.unwrap();
    assert!(ok.sent() > 0);
    assert_eq!(ok.dropped_total(), 0);
    assert_eq!((wrong.sent(), wrong.retried()), (0, 0), "a 401 is not retried");
    assert_eq!(no_ca.sent(), 0, "a certificate from an unknown CA is never trusted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20s_outage_of_victoriametrics_leaves_no_gap_and_no_duplicate() {
    let test = "a_20s_outage_of_victoriametrics_leaves_no_gap_and_no_duplicate";
    let Some(vm_bin) = vm_bin(test) else { return };
    let vdir = tempfile::tempdir().unwrap();
    let vm = Receiver::vm(VictoriaMetrics::new(&vm_bin).data(vdir.path())).await;
    let shutdown = Shutdown::new();
    let smon = smon_sim(&shutdown).await;
    let toml = format!(
        "[[smon]]\nname = \"box\"\nconnect = \"{smon}\"\n[[remote_write]]\nurl = \"{}\"\nbatch = \"1s\"\n",
        vm.write_url()
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let stats = server.push_stats()[0].clone();
    let selector = "{__name__=~\"telemon_target_up|smon_value\",target=\"box\"}";
    until("samples before the outage", async || {
        (vm.export(selector).await.iter().map(|s| s.1.len()).sum::<usize>() >= 6).then_some(())
    })
    .await;

    let addr = vm.addr();
    vm.stop().await;
    let stopped = telemon_ms();
    // The outage itself: 20 s of a receiver that is not there (the scenario, not a synchronisation).
    tokio::time::sleep(Duration::from_secs(20)).await;
    let oldest = stats.oldest_unsent_ms().expect("samples wait for the receiver");
    assert!(oldest <= stopped + 2_000, "the oldest unsent sample dates from the stop: {}", oldest - stopped);
    let vm = Receiver::vm(VictoriaMetrics::new(&vm_bin).data(vdir.path()).at(addr)).await;
    let restarted = telemon_ms();
    until("the backlog sent and two samples more", async || {
        let caught_up = stats.last_success_ms() > restarted + 2_000 && stats.retried() > 0;
        caught_up.then_some(())
    })
    .await;
    let stats_dropped = stats.dropped_total();
    server.shutdown().await;
    shutdown.cancel();

    let series = vm.export(selector).await;
    assert_eq!(series.len(), 3, "up and two smon series: {series:?}");
    for (labels, samples) in &series {
        let ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
        let distinct: BTreeSet<i64> = ts.iter().copied().collect();
        assert_eq!(distinct.len(), ts.len(), "{labels:?}: a sample arrived twice");
        assert!(ts[0] < stopped && *ts.last().unwrap() > restarted, "{labels:?} spans the outage");
        let gaps: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).filter(|d| *d > 1_500).collect();
        assert!(gaps.is_empty(), "{labels:?}: gaps {gaps:?} in {ts:?}");
        assert!(ts.len() >= 22, "{labels:?}: {} samples", ts.len());
        let widest = ts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        eprintln!(
            "outage: {} {}: {} samples, none twice, widest step {widest} ms, {} during the outage",
            labels["__name__"],
            labels.get("index").map(String::as_str).unwrap_or(""),
            ts.len(),
            ts.iter().filter(|t| **t > stopped && **t < restarted).count()
        );
    }
    eprintln!("outage: {} samples retried, {} dropped", stats.retried(), stats_dropped);
    assert_eq!(stats_dropped, 0);
    vm.stop().await;
}

fn telemon_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_over_40_targets_push_each_target_exactly_once() {
    let test = "two_shards_over_40_targets_push_each_target_exactly_once";
    let Some(vm_bin) = vm_bin(test) else { return };
    let vm = Receiver::vm(VictoriaMetrics::new(&vm_bin)).await;
    let shutdown = Shutdown::new();
    let smon = smon_sim(&shutdown).await;
    let home = tempfile::tempdir().unwrap();
    let mut sys161 = Vec::new();
    for user in ["ann", "bob", "cat", "dan"] {
        let dir = home.path().join(user).join("root");
        std::fs::create_dir_all(&dir).unwrap();
        sys161.push(sys161_sim::Running::spawn(&dir, sys161_sim::Config::default()).unwrap());
    }
    let mut toml =
        format!("[[meter161]]\nname = \"class\"\ndir_glob = \"{}/*/root\"\n", home.path().display());
    for i in 0..36 {
        toml += &format!("[[smon]]\nname = \"box{i:02}\"\nconnect = \"{smon}\"\n");
    }
    let mut servers = Vec::new();
    for shard in ["1/2", "2/2"] {
        let text = format!(
            "[serve]\nshard = \"{shard}\"\n{toml}[[remote_write]]\nurl = \"{}\"\nbatch = \"500ms\"\nexternal_labels = {{ instance_shard = \"{}\" }}\n",
            vm.write_url(),
            &shard[..1]
        );
        let config = Config::parse("t.toml", &text).unwrap();
        servers.push(telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap());
    }
    let up = until("40 targets up in VictoriaMetrics", async || {
        let up = vm.query("telemon_target_up == 1").await;
        (up.len() >= 40).then_some(up)
    })
    .await;
    let mut per_target: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (l, _) in &up {
        per_target.entry(l["target"].clone()).or_default().push(l["instance_shard"].clone());
    }
    assert_eq!(per_target.len(), 40, "{per_target:?}");
    assert!(per_target.values().all(|s| s.len() == 1), "each target from one shard: {per_target:?}");
    assert_eq!(
        per_target.keys().filter(|t| t.starts_with("class/")).count(),
        4,
        "the glob's matches are sharded too"
    );
    // Each instance's /targets shows its shard and exactly the targets it pushed.
    let mut counts = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let text = http()
            .get(format!("http://{}/targets", s.local_addr()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["shard"], format!("{}/2", i + 1));
        let names: BTreeSet<String> = body["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        let pushed: BTreeSet<String> =
            per_target.iter().filter(|(_, s)| s[0] == (i + 1).to_string()).map(|(t, _)| t.clone()).collect();
        assert_eq!(names, pushed);
        counts.push(names.len());
    }
    assert!(counts.iter().all(|n| *n > 0), "both shards have targets: {counts:?}");
    eprintln!("shards: {counts:?} targets, union {}", per_target.len());
    for s in servers {
        s.shutdown().await;
    }
    for s in sys161 {
        s.stop().await.unwrap();
    }
    shutdown.cancel();
    vm.stop().await;
}

/// One data point as the Python receiver prints it.
fn points_of(lines: &[serde_json::Value], name: &str) -> Vec<serde_json::Value> {
    lines.iter().filter(|l| l["name"] == name).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_through_rotel_arrives_as_sums_gauges_and_histograms() {
    let test = "otlp_through_rotel_arrives_as_sums_gauges_and_histograms";
    let venv = venv();
    let python = venv.join("bin/python3");
    let hint = "bash .ci/push-receivers.sh makes target/push-venv with rotel and opentelemetry-proto";
    let Some(python) = need(test, "the push virtualenv", python.is_file().then_some(python), hint) else {
        return;
    };
    let rotel = std::fs::read_dir(venv.join("lib"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|py| py.path().join("site-packages/rotel/rotel-agent"))
        .filter(|p| p.is_file());
    let Some(rotel) = need(test, "rotel (PyPI)", rotel, hint) else { return };

    // The checking receiver, then rotel in front of it.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_receiver.py");
    let mut receiver = Command::new(&python)
        .arg(&script)
        .arg("0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the Python receiver starts");
    let mut lines = BufReader::new(receiver.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    let port = first["listening"].as_u64().unwrap();
    let rotel_port = free_port();
    let _rotel = Command::new(&rotel)
        .args(["start", "--otlp-http-endpoint", &format!("127.0.0.1:{rotel_port}")])
        .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{}", free_port())])
        .args(["--exporter", "otlp", "--otlp-exporter-protocol", "http"])
        .args(["--otlp-exporter-endpoint", &format!("http://127.0.0.1:{port}")])
        .args(["--otlp-exporter-compression", "none"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("rotel starts");
    until("rotel listening", async || {
        tokio::net::TcpStream::connect(("127.0.0.1", rotel_port)).await.ok().map(|_| ())
    })
    .await;

    let shutdown = Shutdown::new();
    let sys_dir = tempfile::tempdir().unwrap();
    let sys161 = sys161_sim::Running::spawn(sys_dir.path(), sys161_sim::Config::default()).unwrap();
    let (l, rvos) = listener().await;
    tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
    let toml = format!(
        "[[meter161]]\nname = \"os161\"\ndir = '{}'\ninterval = \"250ms\"\nlabels = {{ course = \"cs161\" }}\n\
         [[sysinfo]]\nname = \"vm\"\nconnect = \"{rvos}\"\nevery = \"250ms\"\n\
         [[otlp]]\nendpoint = \"http://127.0.0.1:{rotel_port}\"\nbatch = \"500ms\"\nexternal_labels = {{ site = \"lab\" }}\n",
        sys_dir.path().display()
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();

    let mut seen: Vec<serde_json::Value> = Vec::new();
    let mut read_until =
        async |seen: &mut Vec<serde_json::Value>, what: &str, ok: &dyn Fn(&[serde_json::Value]) -> bool| {
            tokio::time::timeout(DEADLINE, async {
                while !ok(seen) {
                    let line = lines.next_line().await.unwrap().expect("the receiver runs");
                    seen.push(serde_json::from_str(&line).unwrap());
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{what} never arrived"));
        };
    read_until(&mut seen, "sys161 sums and rvOS histograms", &|s: &[serde_json::Value]| {
        let times = |name: &str| -> BTreeSet<u64> {
            points_of(s, name).iter().filter_map(|p| p["time"].as_u64()).collect()
        };
        times("sys161_kernel_instructions_total")
            .intersection(&times("sys161_simulated_seconds_total"))
            .count()
            >= 3
            && points_of(s, "rvos_scheduler_latency_seconds").iter().any(|p| p["count"].as_u64() > Some(0))
            && !points_of(s, "rvos_process_memory_bytes").is_empty()
    })
    .await;

    let kinsns = points_of(&seen, "sys161_kernel_instructions_total");
    for p in &kinsns {
        assert_eq!(p["type"], "sum", "{p}");
        assert_eq!(p["monotonic"], true);
        assert_eq!(p["temporality"], "AGGREGATION_TEMPORALITY_CUMULATIVE");
        assert_eq!(p["unit"], "{count}");
        let (start, time) = (p["start"].as_u64().unwrap(), p["time"].as_u64().unwrap());
        assert!(start > 1_600_000_000_000_000_000 && start <= time, "{p}");
        assert_eq!(p["attrs"]["target"], "os161");
        assert_eq!(p["attrs"]["course"], "cs161");
        assert_eq!(p["resource"]["service.name"], "telemon");
        assert_eq!(p["resource"]["site"], "lab");
        assert!(!p["resource"]["service.instance.id"].as_str().unwrap().is_empty());
    }
    let first_start = kinsns[0]["start"].as_u64().unwrap();
    // Exact integers: each kinsns point equals the sim's model at the clock of the same instant.
    let clock: BTreeMap<u64, f64> = points_of(&seen, "sys161_simulated_seconds_total")
        .iter()
        .map(|p| (p["time"].as_u64().unwrap(), p["value"].as_f64().unwrap()))
        .collect();
    assert_eq!(points_of(&seen, "sys161_simulated_seconds_total")[0]["unit"], "s");
    let machine = sys161_sim::Machine::default();
    let mut exact = 0;
    for p in &kinsns {
        if let Some(secs) = clock.get(&p["time"].as_u64().unwrap()) {
            assert_eq!(
                p["value"].as_f64().unwrap() as u64,
                machine.counters_at((secs * 1e9).round() as u64)[1]
            );
            exact += 1;
        }
    }
    assert!(exact >= 3);
    // Histograms: the bounds are the rvOS `le` bounds telemon exposes.
    let addr = server.local_addr();
    let metrics = http().get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
    let les: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("rvos_scheduler_latency_seconds_bucket{target=\"vm\""))
        .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next()?.parse().ok())
        .filter(|v: &f64| v.is_finite())
        .collect();
    let hist = points_of(&seen, "rvos_scheduler_latency_seconds");
    let h = hist.iter().rev().find(|p| p["count"].as_u64() > Some(0)).unwrap();
    assert_eq!(h["type"], "histogram");
    assert_eq!(h["temporality"], "AGGREGATION_TEMPORALITY_CUMULATIVE");
    assert_eq!(h["unit"], "s");
    let bounds: Vec<f64> = h["bounds"].as_array().unwrap().iter().map(|b| b.as_f64().unwrap()).collect();
    assert_eq!(bounds, les);
    let counts: Vec<u64> = h["counts"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
    assert_eq!(counts.len(), bounds.len() + 1);
    assert_eq!(counts.iter().sum::<u64>(), h["count"].as_u64().unwrap());
    let mem = points_of(&seen, "rvos_process_memory_bytes");
    assert_eq!((mem[0]["type"].as_str(), mem[0]["unit"].as_str()), (Some("gauge"), Some("By")));

    // A restarted sys161 starts its counters again: a new start time.
    sys161.stop().await.unwrap();
    let sys161 = sys161_sim::Running::spawn(sys_dir.path(), sys161_sim::Config::default()).unwrap();
    read_until(&mut seen, "a new start time after the restart", &|s: &[serde_json::Value]| {
        points_of(s, "sys161_kernel_instructions_total")
            .iter()
            .any(|p| p["start"].as_u64() > Some(first_start))
    })
    .await;

    // Both targets go down: each of their series ends with one point flagged
    // NO_RECORDED_VALUE (flags = 1) and without a value, sums and histograms alike, and up is 0.
    let before = seen.len();
    sys161.stop().await.unwrap();
    shutdown.cancel();
    let ended = |s: &[serde_json::Value], name: &str, target: &str| -> Vec<serde_json::Value> {
        points_of(&s[before..], name)
            .into_iter()
            .filter(|p| p["flags"] == 1 && p["attrs"]["target"] == target)
            .collect()
    };
    read_until(&mut seen, "the end of sys161's and rvOS's series", &|s: &[serde_json::Value]| {
        !ended(s, "sys161_kernel_instructions_total", "os161").is_empty()
            && !ended(s, "rvos_scheduler_latency_seconds", "vm").is_empty()
    })
    .await;
    let end = &ended(&seen, "sys161_kernel_instructions_total", "os161")[0];
    assert_eq!((end["type"].as_str(), end["value"].is_null()), (Some("sum"), true), "{end}");
    assert!(end["start"].as_u64() > Some(first_start), "the last window: {end}");
    let end = &ended(&seen, "rvos_scheduler_latency_seconds", "vm")[0];
    assert_eq!(end["type"], "histogram", "{end}");
    assert_eq!((end["count"].as_u64(), end["counts"].as_array().map(Vec::len)), (Some(0), Some(0)), "{end}");
    read_until(&mut seen, "up = 0 for both targets", &|s: &[serde_json::Value]| {
        let down = |target: &str| {
            points_of(&s[before..], "telemon_target_up")
                .iter()
                .any(|p| p["attrs"]["target"] == target && p["value"].as_f64() == Some(0.0))
        };
        down("os161") && down("vm")
    })
    .await;
    // The up series themselves go on (the targets are still configured): none of them ended.
    assert!(points_of(&seen, "telemon_target_up").iter().all(|p| p["flags"] == 0));
    let stats = server.push_stats()[0].clone();
    server.shutdown().await;
    assert!(stats.sent() > 0);
    assert_eq!(stats.dropped_total(), 0);
}
