//! `/probe` answers its target alone, as blackbox_exporter answers only its probe: every sample of
//! an answer carries the probed target's `target` label (its series and its `telemon_target_*`
//! families), and no process-wide family (`telemon_build_info`, the HTTP and listener families,
//! the probe counters) is in it; those stay on `/metrics`. (That a probe target nobody asks for is
//! dropped after `PROBE_IDLE` is a unit test of `http/probe.rs`, on a paused clock.)

use sim_common::Shutdown;
use smon_sim::{Config as SmonConfig, MIN_INTERVAL};
use telemon::config::Config;

mod support;
use support::{free_addr, http_get, listener, within, Cpus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_answers_its_target_alone_and_metrics_keeps_the_process_families() {
    let shutdown = Shutdown::new();
    let (l, smon_addr) = listener().await;
    let smon_config = SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() };
    tokio::spawn(smon_sim::serve(l, Cpus(0), smon_config, shutdown.clone()));
    // A listener, so that the listener families exist.
    let toml = format!("[[mono_listen]]\nname = \"agents\"\nlisten = \"{}\"\n", free_addr());
    let config = Config::parse("t.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();

    let path = format!("/probe?target={smon_addr}&protocol=smon");
    let openmetrics = [("Accept", "application/openmetrics-text; version=1.0.0")];
    for headers in [&[][..], &openmetrics[..]] {
        let (status, probe) = within("a probe", http_get(addr, &path, headers)).await.unwrap();
        assert_eq!(status, 200, "{probe}");
        let samples: Vec<&str> = probe.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(samples.iter().any(|l| l.starts_with("smon_value{")), "the target's series: {probe}");
        let up = format!("telemon_target_up{{protocol=\"smon\",target=\"{smon_addr}\"}} 1");
        assert!(samples.contains(&up.as_str()), "its telemon_target_* families: {probe}");
        let label = format!("target=\"{smon_addr}\"");
        for line in &samples {
            assert!(line.contains(&label), "a line of another target, or of none: {line}\n{probe}");
        }
        for family in ["telemon_build_info", "telemon_http_refused", "telemon_listener_", "telemon_probe_"] {
            assert!(!probe.contains(family), "{family} in a probe answer: {probe}");
        }
    }

    // /metrics has them, and the probe target's series are not there (it is not a configured one).
    let (status, metrics) = within("/metrics", http_get(addr, "/metrics", &[])).await.unwrap();
    assert_eq!(status, 200);
    for family in [
        "telemon_build_info{branch=",
        "telemon_http_refused_connections_total ",
        "telemon_listener_targets{listener=\"agents\"} ",
        "telemon_probe_targets_dropped_total{reason=\"idle\"} 0",
    ] {
        assert!(metrics.contains(family), "{family} missing from /metrics: {metrics}");
    }
    assert!(!metrics.contains(&smon_addr), "{metrics}");
    server.shutdown().await;
    shutdown.cancel();
}
