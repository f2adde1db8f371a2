//! `telemon sysinfo` end to end: the real binary against rvos-sim, started in-process.

use rvos_sim::{Config, SystemConfig};
use sim_common::Shutdown;

mod support;
use support::{run as telemon, stdout};

struct Sim {
    addr: String,
    shutdown: Shutdown,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn sim(config: Config) -> Sim {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = Shutdown::new();
    tokio::spawn(rvos_sim::run(listener, config, shutdown.clone()));
    Sim { addr, shutdown }
}

fn small() -> Config {
    Config { system: SystemConfig { trace_prefill: 100, ..SystemConfig::default() }, ..Config::default() }
}

#[tokio::test]
async fn every_command_prints_the_kernel_text() {
    let sim = sim(small()).await;
    for (cmd, starts) in [
        ("ps", "  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\n"),
        ("memstat", "Kernel heap: 4096K total, "),
        ("trace", ""),
        ("kstat", "  SCHED_SWITCHES           "),
        ("channels", "    CH   EP_A   EP_B"),
        ("schedlat", "  Scheduler run-queue latency\n"),
        ("ipclat", "  IPC delivery latency\n"),
        ("watchdog", "Watchdog: enabled\n  Timeout: 10s (100000000 ticks)\n"),
        ("trace-clear", "ok\n"),
    ] {
        let out = telemon(&["sysinfo", "--connect", &sim.addr, cmd], None).await;
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        let text = stdout(&out);
        assert!(text.starts_with(starts), "{cmd}: {text}");
        assert!(text.ends_with('\n'));
    }
}

#[tokio::test]
async fn json_is_the_parsed_report() {
    let sim = sim(small()).await;
    let out = telemon(&["sysinfo", "--connect", &sim.addr, "ps", "--json"], None).await;
    assert!(out.status.success());
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["command"], "ps");
    assert_eq!(v["end"], "sentinel");
    assert_eq!(v["report"]["report"], "ps");
    let idle = &v["report"]["processes"][0];
    assert_eq!(idle["name"], "idle");
    assert_eq!(idle["pid"], 0);
    assert!(idle["cpu_1s"].as_f64().unwrap() <= 1.0);

    let out = telemon(&["sysinfo", "--connect", &sim.addr, "--json", "watchdog"], None).await;
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["report"]["enabled"], true);
    assert_eq!(v["report"]["kernel_tasks"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn a_full_trace_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rvos.sock");
    let listener = sim_common::NumberedUnixListener::new(tokio::net::UnixListener::bind(&path).unwrap());
    let shutdown = Shutdown::new();
    tokio::spawn(rvos_sim::run(listener, Config::default(), shutdown.clone()));
    let out = telemon(&["sysinfo", "--socket", path.to_str().unwrap(), "trace", "--json"], None).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["report"]["entries"].as_array().unwrap().len(), 16384);
    assert!(v["chunks"].as_u64().unwrap() >= 400);
    shutdown.cancel();
}

#[tokio::test]
async fn watch_repeats_until_count() {
    let sim = sim(small()).await;
    let out = telemon(
        &["sysinfo", "--connect", &sim.addr, "--watch", "10ms", "--count", "3", "kstat", "--json"],
        None,
    )
    .await;
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> =
        stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    let switches: Vec<u64> =
        lines.iter().map(|v| v["report"]["counters"][0]["value"].as_u64().unwrap()).collect();
    assert!(switches.windows(2).all(|w| w[0] <= w[1]), "kstat counters are monotonic: {switches:?}");
}

#[tokio::test]
async fn parse_saved_text() {
    let text = "Watchdog: disabled\n";
    let out = telemon(&["sysinfo", "parse", "watchdog", "--json"], Some(text.as_bytes())).await;
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v["report"],
        serde_json::json!({"report": "watchdog", "enabled": false, "timeout_secs": null,
        "timeout_ticks": null, "kernel_tasks": [], "critical_processes": [], "unknown": []})
    );

    let trace = "5: pid 1 hit a\nnot a trace line\n6: pid 2 hit b\n";
    let out = telemon(&["sysinfo", "parse", "trace"], Some(trace.as_bytes())).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out), trace, "the unknown line is printed back in its place");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 line(s) not recognised"));

    let out = telemon(&["sysinfo", "parse", "trace"], Some(b"\xff\xfe")).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not UTF-8"));
}

#[tokio::test]
async fn errors_and_exit_codes() {
    // Nobody listening: a peer error.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    let out = telemon(&["sysinfo", "--connect", &addr, "ps"], None).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
    // Usage errors.
    let out = telemon(&["sysinfo", "--socket", "/x", "--connect", &addr, "ps"], None).await;
    assert_eq!(out.status.code(), Some(2));
    let out = telemon(&["sysinfo", "parse", "bogus"], Some(b"")).await;
    assert_eq!(out.status.code(), Some(2));
    let out = telemon(&["sysinfo", "--connect", &addr, "--count", "2", "ps"], None).await;
    assert_eq!(out.status.code(), Some(2));
}
