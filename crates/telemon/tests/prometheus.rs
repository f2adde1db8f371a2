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

use telemon::config::Config;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

mod support;
use support::{http_get, urlencode, Component, SimOptions, Sims, DEADLINE};

/// The pause between two polls of Prometheus (it scrapes every second).
const POLL: Duration = Duration::from_millis(250);

// ---------------------------------------------------------------------------------------------------------------
// A tiny HTTP/1.1 client

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
struct Prometheus(Component);

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
        Prometheus(support::Prometheus::new(bin).config(prometheus_yml(telemon, probe_target)).start().await)
    }

    /// Each scrape target's health and last error, from `/api/v1/targets`.
    async fn targets(&self) -> String {
        let body = match http_get(self.0.addr(), "/api/v1/targets", &[]).await {
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
        let (status, body) =
            http_get(self.0.addr(), &path, &[]).await.map_err(|e| format!("GET {path}: {e}"))?;
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
                self.0.log_tail()
            ),
        }
    }

    /// Kills Prometheus and reaps it.
    async fn stop(self) {
        self.0.kill().await;
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
    let out = support::within("promtool check metrics to end", child.wait_with_output()).await.unwrap();
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
    // rvOS twice: one watched through telemon's config, one probed through Prometheus's list.
    let mut sims = Sims::start(SimOptions::steady()).await;
    let probe = sims.start_rvos().await.to_string();
    let config = Config::parse("prometheus-e2e.toml", &sims.toml(None)).unwrap_or_else(|e| panic!("{e}"));
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.expect("telemon serve starts");
    let telemon = server.local_addr();
    sims.start_mono_agent();
    let prom = Prometheus::start(&prometheus_bin, telemon, &probe).await;

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
    let path = format!("/probe?target={}&protocol=sysinfo", urlencode(&probe));
    let (status, probed) = http_get(telemon, &path, &[]).await.expect("GET /probe");
    assert_eq!(status, 200, "{probed}");
    promtool_check_metrics(&promtool, &path, &probed).await;

    prom.stop().await;
    server.shutdown().await;
    sims.stop().await;
}
