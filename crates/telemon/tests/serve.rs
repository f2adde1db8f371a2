//! `telemon serve` end to end without Prometheus: the exporter (in-process) over the five sims
//! (in-process), scraped over HTTP; bad configs through the real binary; a `dir_glob` picking up
//! and dropping simulators; a garbage-spewing and a hanging target beside healthy ones; and
//! sys161's 32-bit counters unwrapped across a wrap.

use std::time::Duration;

use sim_common::Shutdown;
use smon_codec::Sample;
use smon_sim::{Config as SmonConfig, Source, MIN_INTERVAL};
use telemon::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod support;
use support::{free_addr, listener, within};

/// `GET path` (with `Accept` when given): (status, body).
async fn get(addr: std::net::SocketAddr, path: &str, accept: Option<&str>) -> (u16, String) {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    support::http_get(addr, path, &headers).await.expect("telemon answers")
}

/// The value of the first sample line starting with `prefix` (a family with some labels).
fn value(metrics: &str, prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Scrapes until `ok(metrics)` holds (a safety net, not a timing assertion); returns that scrape.
async fn scrape_until(addr: std::net::SocketAddr, what: &str, mut ok: impl FnMut(&str) -> bool) -> String {
    within(what, async {
        loop {
            let (status, body) = get(addr, "/metrics", None).await;
            assert_eq!(status, 200);
            if ok(&body) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// Two per-CPU counters and a string (the kernel release).
struct Cpus(support::Cpus);

impl Source for Cpus {
    fn sample(&mut self) -> Vec<Sample> {
        let mut samples = self.0.sample();
        samples.push(Sample::new("linux.kernel.release", [], smon_codec::Value::Text("6.1.0-test".into())));
        samples
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_five_protocols_are_exported_with_targets_healthz_and_probe() {
    let shutdown = Shutdown::new();
    let dir = tempfile::tempdir().unwrap();
    let sys161 = sys161_sim::Running::spawn(dir.path(), sys161_sim::Config::default()).unwrap();
    let (l, hmon_addr) = listener().await;
    tokio::spawn(dyalog_sim::Sim::new(dyalog_sim::Config::default()).serve(l, shutdown.clone()));
    let (l, smon_addr) = listener().await;
    let smon_config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(l, Cpus(support::Cpus(0)), smon_config, shutdown.clone()));
    let (l, rvos_addr) = listener().await;
    tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
    let mono_addr = free_addr().to_string();

    let toml = format!(
        r#"
[[meter161]]
name = "os161"
dir = "{dir}"
interval = "100ms"
labels = {{ course = "cs161" }}
[[hmon]]
name = "dyalog"
connect = "{hmon_addr}"
poll = "200ms"
[[mono_listen]]
name = "mono"
listen = "{mono_addr}"
add = ["Mono System/Working Set"]
[[smon]]
name = "box"
connect = "{smon_addr}"
[[sysinfo]]
name = "vm"
connect = "{rvos_addr}"
every = "300ms"
"#,
        dir = dir.path().display()
    );
    let config = Config::parse("test.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    let mut agent = mono_agent_sim::AgentConfig::from_options(&format!(
        "address={mono_addr},counters=Mono JIT/Compiled methods,interval=100"
    ))
    .unwrap();
    agent.backoff =
        mono_agent_sim::Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
    tokio::spawn(mono_agent_sim::run(agent, shutdown.clone()));

    let m = scrape_until(addr, "every protocol up with values", |m| {
        ["meter161", "hmon", "mono", "smon", "sysinfo"].iter().all(|p| {
            m.lines()
                .any(|l| l.starts_with(&format!("telemon_target_up{{protocol=\"{p}\"")) && l.ends_with(" 1"))
        }) && [
            "sys161_simulated_seconds_total{",
            "dyalog_workspace_used_bytes{",
            "dyalog_interpreter_info{",
            "mono_runtime_bytes{",
            "mono_agent_info{",
            "smon_value{",
            "smon_info{",
            "rvos_kstat_total{",
            "rvos_process_memory_bytes{",
            "rvos_scheduler_latency_seconds_bucket{",
            "rvos_watchdog_enabled{",
        ]
        .iter()
        .all(|f| m.contains(f))
    })
    .await;
    // Labels: target plus the configured ones; protocol only on telemon_* families.
    assert!(m.contains("sys161_kernel_instructions_total{target=\"os161\",course=\"cs161\"}"), "{m}");
    assert!(m.contains("mono_runtime_bytes{target=\"mono/127.0.0.1:"), "{m}");
    assert!(m.contains("category=\"Mono System\",counter=\"Working Set\""), "the added counter: {m}");
    assert!(m.contains("smon_value{target=\"box\",name=\"linux.cpu.idle\",index=\"1\"}"), "{m}");
    assert!(m.contains("smon_info{target=\"box\",name=\"linux.kernel.release\",value=\"6.1.0-test\"} 1"));
    assert!(m.contains("rvos_scheduler_latency_seconds_bucket{target=\"vm\",le=\"+Inf\"}"), "{m}");
    assert!(m.contains("# TYPE telemon_target_up gauge\n"));
    assert!(value(&m, "telemon_build_info{").is_some());
    // Every family exported is documented (docs/metrics.md is the public surface).
    let doc = include_str!("../../../docs/metrics.md");
    for family in m.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()) {
        assert!(
            doc.contains(&format!("`{family}`")) || doc.contains(&format!("`{family}{{")),
            "{family} is not in docs/metrics.md"
        );
    }

    // Counters advance between scrapes.
    let t0 = value(&m, "sys161_simulated_seconds_total{").unwrap();
    let m2 = scrape_until(addr, "simulated time to advance", |m| {
        value(m, "sys161_simulated_seconds_total{").is_some_and(|t| t > t0)
    })
    .await;
    assert!(value(&m2, "sys161_kernel_instructions_total{").unwrap() > 0.0);
    // Every target counts the bytes read from it.
    for p in ["meter161", "hmon", "mono", "smon", "sysinfo"] {
        let prefix = format!("telemon_target_received_bytes_total{{protocol=\"{p}\"");
        assert!(value(&m2, &prefix).is_some_and(|b| b > 0.0), "{p}: no bytes received: {m2}");
    }

    // OpenMetrics on request.
    let (status, om) = get(addr, "/metrics", Some("application/openmetrics-text;version=1.0.0")).await;
    assert_eq!(status, 200);
    assert!(om.ends_with("# EOF\n") && om.contains("# TYPE sys161_kernel_instructions counter\n"));

    let (status, body) = get(addr, "/healthz", None).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, body) = get(addr, "/targets", None).await;
    assert_eq!(status, 200);
    let targets: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = targets["targets"].as_array().unwrap();
    assert_eq!(list.len(), 5, "{body}");
    for t in list {
        assert_eq!(t["state"], "up", "{t}");
        assert!(t["last_update"].as_f64().unwrap() > 1.7e9, "{t}");
        assert_eq!(t["reconnects"], 0, "{t}");
    }

    // The multi-target pattern: a probe answers that one target's series, labelled by its address.
    let (status, probe) = get(addr, &format!("/probe?target={rvos_addr}&protocol=sysinfo"), None).await;
    assert_eq!(status, 200);
    assert!(
        probe.contains(&format!("telemon_target_up{{protocol=\"sysinfo\",target=\"{rvos_addr}\"}} 1")),
        "{probe}"
    );
    assert!(probe.contains(&format!("rvos_kstat_total{{target=\"{rvos_addr}\"")), "{probe}");
    assert!(!probe.contains("sys161_"), "only the probed target: {probe}");
    let (status, probe) = get(addr, &format!("/probe?target={hmon_addr}&protocol=hmon"), None).await;
    assert_eq!(status, 200);
    assert!(probe.contains("dyalog_workspace_used_bytes{"), "{probe}");
    let (status, probe) = get(addr, &format!("/probe?target={smon_addr}&protocol=smon"), None).await;
    assert_eq!(status, 200);
    assert!(probe.contains("smon_value{"), "{probe}");
    // A probe of nothing answers down, not an error page.
    let nobody = free_addr().to_string();
    let (status, probe) = get(addr, &format!("/probe?target={nobody}&protocol=smon"), None).await;
    assert_eq!(status, 200);
    assert!(
        probe.contains(&format!("telemon_target_up{{protocol=\"smon\",target=\"{nobody}\"}} 0")),
        "{probe}"
    );
    assert_eq!(get(addr, "/probe?target=x:1&protocol=gopher", None).await.0, 400);
    assert_eq!(get(addr, "/probe?protocol=hmon", None).await.0, 400);

    // A stopped sim goes down (its series go, telemon_target_up stays at 0); back up on restart.
    sys161.stop().await.unwrap();
    let m = scrape_until(addr, "meter161 down", |m| {
        m.contains("telemon_target_up{protocol=\"meter161\",target=\"os161\",course=\"cs161\"} 0")
    })
    .await;
    assert!(!m.contains("sys161_simulated_seconds_total{"), "a down target's series disappear");
    let sys161 = sys161_sim::Running::spawn(dir.path(), sys161_sim::Config::default()).unwrap();
    scrape_until(addr, "meter161 up again", |m| {
        m.contains("telemon_target_up{protocol=\"meter161\",target=\"os161\",course=\"cs161\"} 1")
            && m.contains(
                "telemon_target_connects_total{protocol=\"meter161\",target=\"os161\",course=\"cs161\"} 2",
            )
    })
    .await;

    sys161.stop().await.unwrap();
    shutdown.cancel();
    server.shutdown().await;
}

#[tokio::test]
async fn check_config_names_file_line_and_key_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[hmon]]\nname = \"a\"\nconnect = \"127.0.0.1:4512\"\npoll = \"often\"\n").unwrap();
    let out = support::run(&["serve", "--check-config", bad.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 2);
    let err = support::stderr(&out);
    assert!(err.contains("bad.toml:4: poll: "), "{err}");

    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[[smon]]\nname = \"a\"\nconnect = \"127.0.0.1:7399\"\n").unwrap();
    let out = support::run(&["serve", "--check-config", good.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    assert!(support::stdout(&out)
        .contains("ok (0 meter161, 0 hmon, 0 hmon_listen, 0 mono_listen, 1 smon, 0 sysinfo)"));

    // The same errors when serving, and a missing file.
    let out = support::run(&["serve", "--config", bad.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 2);
    let out = support::run(&["serve", "--check-config", "/nonexistent/telemon.toml"], None).await;
    assert_eq!(support::code(&out), 2);
    assert!(support::stderr(&out).contains("/nonexistent/telemon.toml: cannot read the config file"));
    let out = support::run(&["serve"], None).await;
    assert_eq!(support::code(&out), 2, "no targets is a usage error");

    // A label name that would break every scrape (issue 18, part 3).
    let labels = dir.path().join("labels.toml");
    let text = "[[smon]]\nname = \"box\"\nconnect = \"127.0.0.1:7399\"\n\
                labels = { course = \"x\", \"my-label\" = \"x\", target = \"evil\", le = \"1\" }\n";
    std::fs::write(&labels, text).unwrap();
    let out = support::run(&["serve", "--check-config", labels.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 2);
    let err = support::stderr(&out);
    assert!(err.contains("labels.toml:4: labels.le: "), "{err}");
}

/// Whether `target` (as written in the exposition) of a `dir_glob` is up, whatever its `dir` label.
fn is_up(metrics: &str, target: &str) -> bool {
    let head = format!("telemon_target_up{{protocol=\"meter161\",target=\"{target}\",dir=\"");
    metrics.lines().any(|l| l.starts_with(&head) && l.ends_with("} 1"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dir_glob_picks_up_new_simulators_and_drops_vanished_ones() {
    use std::os::unix::ffi::OsStrExt;
    let home = tempfile::tempdir().unwrap();
    let dir = |user: &[u8]| home.path().join(std::ffi::OsStr::from_bytes(user)).join("os161/root");
    std::fs::create_dir_all(dir(b"ann")).unwrap();
    std::fs::create_dir_all(dir(b"bob")).unwrap();
    let ann = sys161_sim::Running::spawn(&dir(b"ann"), sys161_sim::Config::default()).unwrap();
    let toml = format!(
        "[[meter161]]\nname = \"class\"\ndir_glob = \"{}/*/os161/root\"\ninterval = \"100ms\"\n",
        home.path().display()
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();

    // Named by what the wildcard matched; the whole directory is the `dir` label.
    scrape_until(addr, "ann picked up", |m| is_up(m, "class/ann")).await;
    let (_, targets) = get(addr, "/targets", None).await;
    assert!(targets.contains(&format!("\"dir\":\"{}\"", dir(b"ann").display())), "{targets}");
    let bob = sys161_sim::Running::spawn(&dir(b"bob"), sys161_sim::Config::default()).unwrap();
    scrape_until(addr, "bob picked up", |m| is_up(m, "class/bob")).await;

    // Two directories that `Path::display` shows alike get two targets, escaped losslessly.
    let (x1, x2) = (dir(b"x\xff"), dir(b"x\xfe"));
    assert_eq!(x1.display().to_string(), x2.display().to_string());
    std::fs::create_dir_all(&x1).unwrap();
    std::fs::create_dir_all(&x2).unwrap();
    let s1 = sys161_sim::Running::spawn(&x1, sys161_sim::Config::default()).unwrap();
    let s2 = sys161_sim::Running::spawn(&x2, sys161_sim::Config::default()).unwrap();
    // The exposition escapes the backslash once more.
    let (n1, n2) = ("class/x\\\\xff", "class/x\\\\xfe");
    scrape_until(addr, "both non-UTF-8 directories", |m| is_up(m, n1) && is_up(m, n2)).await;
    s1.stop().await.unwrap();
    s2.stop().await.unwrap();

    // Bob's directory vanishes: his target goes, with its series.
    bob.stop().await.unwrap();
    std::fs::remove_dir_all(home.path().join("bob")).unwrap();
    let m = scrape_until(addr, "bob dropped", |m| !m.contains("target=\"class/bob\"")).await;
    assert!(is_up(&m, "class/ann"));
    assert!(!m.contains("class//"), "no double slash");
    ann.stop().await.unwrap();
    server.shutdown().await;
}

/// Serves endless random bytes to every client.
async fn garbage_server() -> String {
    let (l, addr) = listener().await;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                let mut buf = vec![0u8; 4096];
                loop {
                    for b in buf.iter_mut() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        *b = x as u8;
                    }
                    if s.write_all(&buf).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        }
    });
    addr
}

/// Accepts and never says anything, never reads.
async fn silent_server() -> String {
    let (l, addr) = listener().await;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_hanging_targets_do_not_disturb_healthy_ones_or_a_scrape() {
    let shutdown = Shutdown::new();
    let (l, smon_addr) = listener().await;
    let smon_config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(l, Cpus(support::Cpus(0)), smon_config, shutdown.clone()));
    let (l, rvos_addr) = listener().await;
    tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
    let garbage = garbage_server().await;
    let silent = silent_server().await;
    let toml = format!(
        r#"
[serve]
series_limit = 500
[[smon]]
name = "healthy-smon"
connect = "{smon_addr}"
[[sysinfo]]
name = "healthy-vm"
connect = "{rvos_addr}"
every = "300ms"
[[smon]]
name = "garbage-smon"
connect = "{garbage}"
[[hmon]]
name = "garbage-hmon"
connect = "{garbage}"
[[sysinfo]]
name = "garbage-vm"
connect = "{garbage}"
[[hmon]]
name = "hanging-hmon"
connect = "{silent}"
[[sysinfo]]
name = "hanging-vm"
connect = "{silent}"
"#
    );
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    let errors = |m: &str, target: &str, kind: &str| {
        m.lines()
            .find(|l| {
                l.starts_with("telemon_target_errors_total{")
                    && l.contains(&format!("target=\"{target}\""))
                    && l.contains(&format!("kind=\"{kind}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let m = scrape_until(addr, "healthy targets up and the bad ones failing", |m| {
        m.contains("telemon_target_up{protocol=\"smon\",target=\"healthy-smon\"} 1")
            && m.contains("telemon_target_up{protocol=\"sysinfo\",target=\"healthy-vm\"} 1")
            && m.contains("rvos_kstat_total{target=\"healthy-vm\"")
            && errors(m, "garbage-hmon", "protocol") + errors(m, "garbage-hmon", "decode") > 0.0
            && errors(m, "garbage-vm", "decode") + errors(m, "garbage-vm", "protocol") > 0.0
            && errors(m, "hanging-hmon", "timeout") + errors(m, "hanging-hmon", "protocol") > 0.0
            && errors(m, "hanging-vm", "timeout") > 0.0
    })
    .await;
    assert!(m.contains("telemon_target_up{protocol=\"hmon\",target=\"hanging-hmon\"} 0"), "{m}");
    assert!(m.contains("telemon_target_up{protocol=\"hmon\",target=\"garbage-hmon\"} 0"), "{m}");
    // Random bytes may decode as smon values now and then: whatever they are, they stay within the
    // series limit.
    let garbage_series =
        m.lines().filter(|l| l.starts_with("smon_") && l.contains("target=\"garbage-smon\"")).count();
    assert!(garbage_series <= 500, "{garbage_series} series");

    // Many scrapes while the hanging targets hang: each answers (the safety net would fail a stall).
    for _ in 0..20 {
        let (status, body) = within("a scrape", get(addr, "/metrics", None)).await;
        assert_eq!(status, 200);
        assert!(body.contains("healthy-smon"));
    }
    let (_, targets) = get(addr, "/targets", None).await;
    let targets: serde_json::Value = serde_json::from_str(&targets).unwrap();
    let hanging =
        targets["targets"].as_array().unwrap().iter().find(|t| t["name"] == "hanging-vm").unwrap().clone();
    assert_eq!(hanging["state"], "down", "{hanging}");
    assert!(hanging["last_error"].as_str().is_some_and(|e| !e.is_empty()), "{hanging}");
    assert_eq!(hanging["connects"], 0, "a peer that never answers never counts as up: {hanging}");
    shutdown.cancel();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sys161_32_bit_counters_are_unwrapped_into_monotonic_ones() {
    let dir = tempfile::tempdir().unwrap();
    // Interrupts start 20 short of the wrap, and the sim runs fast.
    let mut sim_config = sys161_sim::Config { speed: 20.0, ..sys161_sim::Config::default() };
    sim_config.machine.u32_start = u32::MAX - 20;
    let sim = sys161_sim::Running::spawn(dir.path(), sim_config).unwrap();
    let toml =
        format!("[[meter161]]\nname = \"m\"\ndir = \"{}\"\ninterval = \"10ms\"\n", dir.path().display());
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    let wrapped = (1u64 << 32) as f64;
    let mut last = 0.0;
    let m = scrape_until(addr, "interrupts past 2^32", |m| {
        let v = value(m, "sys161_interrupts_total{").unwrap_or(0.0);
        assert!(v >= last, "interrupts went from {last} to {v}");
        last = v;
        v > wrapped
    })
    .await;
    // No reset was seen on the way: the rate is defined and the connection is the first.
    assert!(m.contains("telemon_target_connects_total{protocol=\"meter161\",target=\"m\"} 1"));
    sim.stop().await.unwrap();
    server.shutdown().await;
}

/// A raw HTTP/1.1 GET with extra headers: (lower-cased head, de-chunked body bytes).
async fn get_raw(addr: std::net::SocketAddr, path: &str, headers: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.expect("telemon listens");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let mut body = &raw[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return (head, body.to_vec());
    }
    let mut out = Vec::new();
    loop {
        let eol = body.windows(2).position(|w| w == b"\r\n").expect("a chunk size");
        let len = usize::from_str_radix(std::str::from_utf8(&body[..eol]).unwrap().trim(), 16).unwrap();
        if len == 0 {
            return (head, out);
        }
        out.extend_from_slice(&body[eol + 2..eol + 2 + len]);
        body = &body[eol + 2 + len + 2..];
    }
}

fn gunzip(bytes: &[u8]) -> String {
    use std::io::Read;
    let mut out = String::new();
    flate2::read::GzDecoder::new(bytes).read_to_string(&mut out).expect("a valid gzip stream");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_gzipped_when_the_scraper_asks_in_both_formats() {
    let shutdown = Shutdown::new();
    let (l, smon_addr) = listener().await;
    let smon_config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(l, Cpus(support::Cpus(0)), smon_config, shutdown.clone()));
    let toml = format!("[[smon]]\nname = \"box\"\nconnect = \"{smon_addr}\"\n");
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    scrape_until(addr, "smon values", |m| m.contains("smon_value{")).await;

    let (head, plain) = get_raw(addr, "/metrics", "").await;
    assert!(!head.contains("content-encoding"), "no gzip unless asked:\n{head}");
    assert!(String::from_utf8(plain).unwrap().contains("smon_value{target=\"box\""));

    // Prometheus's own header.
    let (head, body) = get_raw(addr, "/metrics", "Accept-Encoding: gzip\r\n").await;
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let text = gunzip(&body);
    assert!(
        text.contains("# TYPE smon_value gauge\n") && text.contains("smon_value{target=\"box\""),
        "{text}"
    );
    assert!(!text.contains("# EOF"));

    // OpenMetrics, gzipped: the same page rules, ending with # EOF.
    let om =
        "Accept: application/openmetrics-text;version=1.0.0\r\nAccept-Encoding: br;q=1.0, gzip;q=0.5\r\n";
    let (head, body) = get_raw(addr, "/metrics", om).await;
    assert!(
        head.contains("content-encoding: gzip") && head.contains("application/openmetrics-text"),
        "{head}"
    );
    assert!(gunzip(&body).ends_with("# EOF\n"));

    // gzip refused with q=0.
    let (head, _) = get_raw(addr, "/metrics", "Accept-Encoding: gzip;q=0, identity\r\n").await;
    assert!(!head.contains("content-encoding"), "{head}");

    // A probe answer is gzipped the same way.
    let probe = format!("/probe?target={smon_addr}&protocol=smon");
    let (head, body) = get_raw(addr, &probe, "Accept-Encoding: gzip\r\n").await;
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert!(gunzip(&body).contains("telemon_target_up{"));
    server.shutdown().await;
    shutdown.cancel();
}
