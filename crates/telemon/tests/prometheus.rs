//! `telemon serve` scraped by a real Prometheus (Debian's `prometheus` package): the five sims and the exporter
//! run in-process, a Prometheus child process scrapes telemon every second — `/metrics` as job `telemon`, and
//! `/probe` as job `telemon-probe` with the relabeling of `deploy/prometheus/prometheus.yml` — and the test asks
//! Prometheus's query API what it stored:
//!
//! - `telemon_target_up` is 1 for each of the five protocols (and Prometheus's own `up` for both jobs);
//! - each protocol's families arrive with their labels: sys161's simulated clock rising, dyalog's used workspace
//!   equal to the dyalog sim's own figure (before and after the sim's world takes two steps), mono's
//!   `mono_runtime*` with `category`/`counter`, smon's `smon_value`, rvOS's kstat counters, process memory and a
//!   real histogram with `le` buckets, and the same rvOS families through the probe job;
//! - a smon sim that stops makes its `telemon_target_up` 0, and a new one on the same address makes it 1 again;
//! - `promtool check metrics` prints nothing on a full scrape of `/metrics` (and of `/probe`).
//!
//! Without `prometheus` (or `promtool`) on `PATH` the test fails when `CI=true` (CI installs Debian's package:
//! `.ci/prometheus.sh`), and elsewhere prints `SKIPPED: ...` to stderr and passes. Every wait polls Prometheus
//! under a safety net ([`DEADLINE`]) that fails the test with what was last seen; nothing asserts how long
//! anything took.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mono_agent_sim::{AgentConfig, Backoff};
use sim_common::Shutdown;
use smon_codec::Sample;
use smon_sim::{Source, MIN_INTERVAL};
use telemon_fleet::config::FleetConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

mod support;
use support::http_get;

/// The safety net of every wait: a broken test fails after this instead of hanging. Never a timing assertion.
const DEADLINE: Duration = Duration::from_secs(60);
/// The pause between two polls of Prometheus (it scrapes every second).
const POLL: Duration = Duration::from_millis(250);

// ---------------------------------------------------------------------------------------------------------------
// A tiny HTTP/1.1 client

/// `s` with everything but RFC 3986's unreserved characters percent-encoded (a query-string value).
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------------
// Prometheus

/// One series of an instant query's answer.
#[derive(Debug, Clone)]
struct Series {
    labels: BTreeMap<String, String>,
    value: f64,
}

impl Series {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str)
    }
}

/// A Prometheus child process (killed if the test drops it) with its config, data and log in a temp dir.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// A free port on 127.0.0.1 (bound, then released for the process that will listen on it).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// The scrape config: every second, `/metrics` as job `telemon`, and `probe_target` through `/probe` as job
/// `telemon-probe` with the relabeling of `deploy/prometheus/prometheus.yml`.
fn prometheus_yml(telemon: SocketAddr, probe_target: &str) -> String {
    format!(
        r#"global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s

scrape_configs:
  - job_name: telemon
    static_configs:
      - targets: ["{telemon}"]

  - job_name: telemon-probe
    metrics_path: /probe
    params:
      protocol: [sysinfo]
    static_configs:
      - targets: ["{probe_target}"]
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: {telemon}
"#
    )
}

impl Prometheus {
    /// Starts Prometheus on a free port and waits until `/-/ready` answers 200.
    async fn start(bin: &Path, telemon: SocketAddr, probe_target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, prometheus_yml(telemon, probe_target)).unwrap();
        let data = dir.path().join("data");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let addr = free_addr();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut prometheus = Prometheus { child, addr, dir };
        let ready = tokio::time::timeout(DEADLINE, async {
            loop {
                if let Some(status) = prometheus.child.try_wait().unwrap() {
                    return Err(format!("Prometheus exited ({status})"));
                }
                if let Ok((200, _)) = http_get(addr, "/-/ready", &[]).await {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        match ready {
            Ok(Ok(())) => prometheus,
            Ok(Err(e)) => panic!("{e}\n{}", prometheus.log_tail()),
            Err(_) => panic!("Prometheus never became ready on {addr}\n{}", prometheus.log_tail()),
        }
    }

    /// The end of Prometheus's log.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!("--- the end of Prometheus's log ---\n{}", lines[lines.len().saturating_sub(30)..].join("\n"))
    }

    /// Each scrape target's health and last error, from `/api/v1/targets`.
    async fn targets(&self) -> String {
        let body = match http_get(self.addr, "/api/v1/targets", &[]).await {
            Ok((_, body)) => body,
            Err(e) => return format!("GET /api/v1/targets: {e}"),
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else { return body };
        let active = v["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        let lines: Vec<String> = active
            .iter()
            .map(|t| {
                format!(
                    "{} {} health={} lastError={}",
                    t["labels"]["job"], t["scrapeUrl"], t["health"], t["lastError"]
                )
            })
            .collect();
        format!("--- Prometheus's targets ---\n{}", lines.join("\n"))
    }

    /// An instant query's vector.
    async fn query(&self, query: &str) -> Result<Vec<Series>, String> {
        let path = format!("/api/v1/query?query={}", urlencode(query));
        let (status, body) = http_get(self.addr, &path, &[]).await.map_err(|e| format!("GET {path}: {e}"))?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{status} {body:?}: {e}"))?;
        if status != 200 || v["status"] != "success" || v["data"]["resultType"] != "vector" {
            return Err(format!("{status} {body}"));
        }
        let result = v["data"]["result"].as_array().ok_or_else(|| format!("no result in {body}"))?;
        result
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .ok_or_else(|| format!("no metric in {r}"))?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                let value = r["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("value of {r}"))?;
                Ok(Series { labels, value })
            })
            .collect()
    }

    /// Polls `query` until `ok` holds for its answer and returns that answer; fails the test with the last answer,
    /// Prometheus's targets and its log when [`DEADLINE`] passes first.
    async fn until(&self, what: &str, query: &str, mut ok: impl FnMut(&[Series]) -> bool) -> Vec<Series> {
        let mut last = String::from("no answer yet");
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                match self.query(query).await {
                    Ok(series) if ok(&series) => return series,
                    Ok(series) => last = format!("{series:#?}"),
                    Err(e) => last = e,
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        match found {
            Ok(series) => series,
            Err(_) => panic!(
                "{what}: never happened within {DEADLINE:?}\nquery: {query}\nlast answer: {last}\n{}\n{}",
                self.targets().await,
                self.log_tail()
            ),
        }
    }

    /// Kills Prometheus and reaps it.
    async fn stop(mut self) {
        self.child.kill().await.expect("Prometheus is killed");
    }
}

/// Every series present with the value 1.
fn all_one(series: &[Series]) -> bool {
    !series.is_empty() && series.iter().all(|s| s.value == 1.0)
}

/// The value of the only series.
fn only(series: &[Series]) -> Option<f64> {
    match series {
        [s] => Some(s.value),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The sims

/// Two CPUs' idle counters, rising: the smon sim's figures.
struct Cpus(u64);

impl Source for Cpus {
    fn sample(&mut self) -> Vec<Sample> {
        self.0 += 1;
        vec![
            Sample::new("linux.cpu.idle", [0u64], 1000 + self.0),
            Sample::new("linux.cpu.idle", [1u64], 2000 + 2 * self.0),
        ]
    }
}

/// A smon sim serving `listener` until its shutdown is cancelled.
fn start_smon(listener: TcpListener) -> Shutdown {
    let shutdown = Shutdown::new();
    let config = smon_sim::Config { interval: MIN_INTERVAL, ..smon_sim::Config::default() };
    tokio::spawn(smon_sim::serve(listener, Cpus(0), config, shutdown.clone()));
    shutdown
}

/// A TCP sim's listener on a port of its own.
async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// The five sims (rvOS twice: one watched through telemon's config, one probed through Prometheus's list),
/// running in-process.
struct Sims {
    sys161_dir: tempfile::TempDir,
    sys161: Option<sys161_sim::Running>,
    dyalog: dyalog_sim::Sim,
    dyalog_addr: String,
    smon_addr: SocketAddr,
    smon: Shutdown,
    rvos_addr: String,
    probe_addr: String,
    mono_listen: SocketAddr,
    /// dyalog, both rvOS sims and the mono agent.
    shutdown: Shutdown,
}

impl Drop for Sims {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.smon.cancel();
    }
}

impl Sims {
    async fn start() -> Sims {
        let shutdown = Shutdown::new();
        let sys161_dir = tempfile::tempdir().unwrap();
        let sys161 = sys161_sim::Running::spawn(sys161_dir.path(), sys161_sim::Config::default()).unwrap();
        // No clock: the world changes only when the test steps it, so its figures can be compared exactly.
        let dyalog = dyalog_sim::Sim::new(dyalog_sim::Config { tick: None, ..dyalog_sim::Config::default() });
        let (l, dyalog_addr) = listener().await;
        tokio::spawn(dyalog.clone().serve(l, shutdown.clone()));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let smon_addr = l.local_addr().unwrap();
        let smon = start_smon(l);
        let small = || rvos_sim::Config {
            system: rvos_sim::SystemConfig { trace_prefill: 100, ..rvos_sim::SystemConfig::default() },
            ..rvos_sim::Config::default()
        };
        let (l, rvos_addr) = listener().await;
        tokio::spawn(rvos_sim::run(l, small(), shutdown.clone()));
        let (l, probe_addr) = listener().await;
        tokio::spawn(rvos_sim::run(l, small(), shutdown.clone()));
        Sims {
            sys161_dir,
            sys161: Some(sys161),
            dyalog,
            dyalog_addr,
            smon_addr,
            smon,
            rvos_addr,
            probe_addr,
            mono_listen: free_addr(),
            shutdown,
        }
    }

    /// telemon's config: one target of each protocol (the mono agent dials in to `mono_listen`).
    fn toml(&self) -> String {
        format!(
            r#"[[meter161]]
name = "sys161"
dir = '{}'

[[hmon]]
name = "dyalog"
connect = "{}"
poll = "250ms"

[[mono_listen]]
name = "mono"
listen = "{}"

[[smon]]
name = "smon"
connect = "{}"

[[sysinfo]]
name = "rvos"
connect = "{}"
every = "500ms"
"#,
            self.sys161_dir.path().display(),
            self.dyalog_addr,
            self.mono_listen,
            self.smon_addr,
            self.rvos_addr,
        )
    }

    /// The fake Mono agent, dialling telemon's `[[mono_listen]]` (start it once telemon listens).
    fn start_mono_agent(&self) {
        let options = format!(
            "address={},counters=Mono JIT/Compiled methods;Mono System/Working Set,interval=100",
            self.mono_listen
        );
        let mut config = AgentConfig::from_options(&options).unwrap();
        config.backoff = Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(200) };
        let overrides = mono_agent_sim::ValueOverrides::default();
        tokio::spawn(mono_agent_sim::run_with_overrides(config, overrides, self.shutdown.clone()));
    }

    /// Stops the smon sim; its port is free again once the sim has dropped its listener.
    fn stop_smon(&self) {
        self.smon.cancel();
    }

    /// A new smon sim on the first one's address.
    async fn restart_smon(&mut self) {
        let rebound = tokio::time::timeout(DEADLINE, async {
            loop {
                match TcpListener::bind(self.smon_addr).await {
                    Ok(l) => return l,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await;
        let l = rebound.unwrap_or_else(|_| panic!("{} never became free again", self.smon_addr));
        self.smon = start_smon(l);
    }

    async fn stop(mut self) {
        if let Some(sys161) = self.sys161.take() {
            sys161.stop().await.expect("the sys161 sim ends cleanly");
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// promtool

/// `promtool check metrics` on `exposition`: it must print nothing and exit 0.
async fn promtool_check_metrics(promtool: &Path, what: &str, exposition: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", promtool.display()));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(exposition.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("promtool check metrics never ended")
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && printed.is_empty(),
        "promtool check metrics on {what}: {}\n{printed}\n--- the exposition ---\n{exposition}",
        out.status
    );
}

// ---------------------------------------------------------------------------------------------------------------
// The test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_every_protocol_and_the_probe() {
    let Some((prometheus_bin, promtool)) =
        support::prometheus_and_promtool("prometheus_scrapes_every_protocol_and_the_probe")
    else {
        return;
    };
    let mut sims = Sims::start().await;
    let config = FleetConfig::parse("prometheus-e2e.toml", &sims.toml()).unwrap_or_else(|e| panic!("{e}"));
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.expect("telemon serve starts");
    let telemon = server.local_addr();
    sims.start_mono_agent();
    let prom = Prometheus::start(&prometheus_bin, telemon, &sims.probe_addr).await;

    // Prometheus scrapes both jobs.
    let up = prom
        .until("both jobs scraped", r#"up{job=~"telemon|telemon-probe"}"#, |s| s.len() == 2 && all_one(s))
        .await;
    assert!(up.iter().any(|s| s.label("job") == Some("telemon-probe")), "{up:?}");

    // Every protocol's target is up.
    for protocol in ["meter161", "hmon", "mono", "smon", "sysinfo"] {
        let query = format!(r#"telemon_target_up{{job="telemon",protocol="{protocol}"}}"#);
        let up = prom.until(&format!("{protocol} target up"), &query, all_one).await;
        assert_eq!(up.len(), 1, "{up:?}");
        let target = up[0].label("target").unwrap_or_default();
        match protocol {
            // An agent is named after its block and its peer address.
            "mono" => assert!(target.starts_with("mono/127.0.0.1:"), "{up:?}"),
            "meter161" => assert_eq!(target, "sys161"),
            "hmon" => assert_eq!(target, "dyalog"),
            "sysinfo" => assert_eq!(target, "rvos"),
            _ => assert_eq!(target, protocol),
        }
    }

    // meter161: the simulated clock, above 0 and rising.
    let clock = r#"sys161_simulated_seconds_total{job="telemon",target="sys161"}"#;
    let first =
        prom.until("sys161 simulated seconds above 0", clock, |s| only(s).is_some_and(|v| v > 0.0)).await;
    let first = first[0].value;
    prom.until(&format!("sys161 simulated seconds above {first}"), clock, |s| {
        only(s).is_some_and(|v| v > first)
    })
    .await;

    // hmon: the used workspace is the dyalog sim's own figure, before and after its world moves.
    let used_query = r#"dyalog_workspace_used_bytes{job="telemon",target="dyalog"}"#;
    let used = || sims.dyalog.world().lock().workspace.used as f64;
    let before = used();
    prom.until(&format!("dyalog used workspace = the sim's {before}"), used_query, |s| {
        only(s) == Some(before)
    })
    .await;
    sims.dyalog.world().step();
    sims.dyalog.world().step();
    let after = used();
    assert_ne!(before, after, "two steps of the dyalog sim's world grow its workspace");
    prom.until(&format!("dyalog used workspace = the sim's {after}"), used_query, |s| only(s) == Some(after))
        .await;
    let info = prom
        .until(
            "dyalog_interpreter_info",
            r#"dyalog_interpreter_info{job="telemon",target="dyalog"}"#,
            all_one,
        )
        .await;
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].label("wsid"), Some("CLEAR WS"), "{info:?}");
    assert!(!info[0].label("version").unwrap_or_default().is_empty(), "{info:?}");

    // mono: the agent's counters, with category and counter labels.
    let mono = prom
        .until("mono_runtime series", r#"{job="telemon",__name__=~"mono_runtime.*"}"#, |s| {
            s.iter().any(|x| {
                x.label("category") == Some("Mono System") && x.label("counter") == Some("Working Set")
            }) && s.iter().any(|x| {
                x.label("category") == Some("Mono JIT") && x.label("counter") == Some("Compiled methods")
            })
        })
        .await;
    for s in &mono {
        assert!(s.label("category").is_some() && s.label("counter").is_some(), "{s:?}");
        assert!(s.label("target").unwrap_or_default().starts_with("mono/"), "{s:?}");
    }

    // smon: the stream's numbers.
    prom.until("smon_value series", r#"smon_value{job="telemon",target="smon"}"#, |s| {
        s.iter().any(|x| x.label("name") == Some("linux.cpu.idle") && x.label("index") == Some("1"))
    })
    .await;

    // sysinfo: kstat counters, process memory, and a real histogram.
    prom.until("rvos_kstat_total series", r#"rvos_kstat_total{job="telemon",target="rvos"}"#, |s| {
        !s.is_empty() && s.iter().all(|x| x.label("counter").is_some())
    })
    .await;
    prom.until(
        "rvos_process_memory_bytes series",
        r#"rvos_process_memory_bytes{job="telemon",target="rvos"}"#,
        |s| !s.is_empty() && s.iter().all(|x| x.label("pid").is_some() && x.label("name").is_some()),
    )
    .await;
    let buckets = r#"rvos_scheduler_latency_seconds_bucket{job="telemon",target="rvos"}"#;
    prom.until("rvos_scheduler_latency_seconds buckets", buckets, |s| {
        s.len() > 1
            && s.iter().all(|x| x.label("le").is_some())
            && s.iter().any(|x| x.label("le") == Some("+Inf"))
    })
    .await;

    // The probe job: the rvOS sim that only Prometheus lists, named by its own address.
    let probe = &sims.probe_addr.clone();
    let up = prom.until("the probed target up", r#"telemon_target_up{job="telemon-probe"}"#, all_one).await;
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].label("instance"), Some(probe.as_str()), "{up:?}");
    assert_eq!(up[0].label("target"), Some(probe.as_str()), "{up:?}");
    assert_eq!(up[0].label("protocol"), Some("sysinfo"), "{up:?}");
    let kstat = prom
        .until("rvos_kstat_total through the probe", r#"rvos_kstat_total{job="telemon-probe"}"#, |s| {
            !s.is_empty()
        })
        .await;
    assert!(kstat.iter().all(|s| s.label("instance") == Some(probe.as_str())), "{kstat:?}");

    // smon: the sim stops, the target goes down; a new sim on the same address brings it back.
    let smon_up = r#"telemon_target_up{job="telemon",protocol="smon"}"#;
    sims.stop_smon();
    prom.until("the smon target down once its sim stopped", smon_up, |s| only(s) == Some(0.0)).await;
    sims.restart_smon().await;
    prom.until("the smon target up again on the same address", smon_up, |s| only(s) == Some(1.0)).await;
    let connects = r#"telemon_target_connects_total{job="telemon",protocol="smon"}"#;
    prom.until("a second smon connect", connects, |s| only(s).is_some_and(|v| v >= 2.0)).await;

    // promtool finds nothing to say about a full scrape (and about a probe's answer).
    let (status, metrics) = http_get(telemon, "/metrics", &[]).await.expect("GET /metrics");
    assert_eq!(status, 200, "{metrics}");
    for protocol in ["meter161", "hmon", "mono", "smon", "sysinfo"] {
        assert!(
            metrics.contains(&format!("protocol=\"{protocol}\"")),
            "no {protocol} in /metrics:\n{metrics}"
        );
    }
    promtool_check_metrics(&promtool, "/metrics", &metrics).await;
    let path = format!("/probe?target={}&protocol=sysinfo", urlencode(probe));
    let (status, probed) = http_get(telemon, &path, &[]).await.expect("GET /probe");
    assert_eq!(status, 200, "{probed}");
    promtool_check_metrics(&promtool, &path, &probed).await;

    prom.stop().await;
    server.shutdown().await;
    sims.stop().await;
}
