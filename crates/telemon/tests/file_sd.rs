//! `[[file_sd]]`: targets that come and go with files in Prometheus's file_sd format.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::{free_addr, http_get, until, Telemon};

/// `target -> value` of `telemon_target_up`.
async fn up(http: SocketAddr) -> BTreeMap<String, f64> {
    let (_, page) = http_get(http, "/metrics", &[]).await.expect("a scrape");
    page.lines()
        .filter(|l| l.starts_with("telemon_target_up{"))
        .filter_map(|l| {
            let target = l.split("target=\"").nth(1)?.split('"').next()?.to_owned();
            Some((target, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

async fn read_errors(http: SocketAddr) -> f64 {
    let (_, page) = http_get(http, "/metrics", &[]).await.expect("a scrape");
    page.lines()
        .find_map(|l| l.strip_prefix("telemon_file_sd_read_errors_total ")?.parse().ok())
        .expect("the counter is exported")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_follow_their_files_and_a_corrupt_file_keeps_its_last_targets() {
    let shutdown = sim_common::Shutdown::new();
    let mut sims = Vec::new();
    for _ in 0..3 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        sims.push(l.local_addr().unwrap().to_string());
        let config = smon_sim::Config { interval: smon_sim::MIN_INTERVAL, ..Default::default() };
        tokio::spawn(smon_sim::serve(
            l,
            smon_sim::ProcSource::new("/proc", "/sys"),
            config,
            shutdown.clone(),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("targets")).unwrap();
    let config = dir.path().join("telemon.toml");
    // Relative patterns are taken from the config file's directory. A long refresh_interval: what
    // follows within seconds comes from the file-system notifications.
    std::fs::write(
        &config,
        "[[file_sd]]\nfiles = [\"targets/*.json\", \"targets/*.yml\"]\nprotocol = \"smon\"\nrefresh_interval = \"1h\"\nlabels = { site = \"lab\" }\n",
    )
    .unwrap();
    let http = free_addr();
    let mut telemon =
        Telemon::spawn(&["serve", "--config", config.to_str().unwrap(), "--listen", &http.to_string()]);
    telemon.stderr_line("serving").await;
    let json = dir.path().join("targets/a.json");
    let yml = dir.path().join("targets/b.yml");
    let follows = async |what: &str, want: &[&str]| {
        let since = Instant::now();
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        until(what, Duration::from_millis(50), async || {
            let up = up(http).await;
            let names: Vec<String> = up.keys().cloned().collect();
            (names == want && up.values().all(|v| *v == 1.0)).then_some(())
        })
        .await;
        let took = since.elapsed();
        eprintln!("{what}: {took:?}");
        assert!(took < Duration::from_secs(5), "{what} within 5 s: {took:?}");
    };

    // Write: a JSON file with two targets and a label.
    let group = |targets: &[&String], rack: &str| {
        serde_json::json!([{ "targets": targets, "labels": { "rack": rack, "__meta_x": "dropped" } }])
            .to_string()
    };
    std::fs::write(&json, group(&[&sims[0], &sims[1]], "1")).unwrap();
    follows("a new file's targets", &[&sims[0], &sims[1]]).await;
    let (_, page) = http_get(http, "/metrics", &[]).await.unwrap();
    let labelled = |l: &str| l.contains(&sims[0]) && l.contains("rack=\"1\"") && l.contains("site=\"lab\"");
    assert!(page.lines().any(labelled), "the group's and the block's labels: {page}");
    assert!(!page.contains("__meta_x"));

    // A YAML file beside it.
    std::fs::write(&yml, format!("- targets: ['{}']\n", sims[2])).unwrap();
    follows("a YAML file's target", &[&sims[0], &sims[1], &sims[2]]).await;

    // Rewrite: one target leaves.
    std::fs::write(&json, group(&[&sims[1]], "1")).unwrap();
    follows("a rewritten file", &[&sims[1], &sims[2]]).await;

    // Corrupt: the file keeps its last targets, and the error is counted.
    let errors = read_errors(http).await;
    std::fs::write(&json, "[{\"targets\": [").unwrap();
    until("the read error counted", Duration::from_millis(50), async || {
        (read_errors(http).await > errors).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let names: Vec<String> = up(http).await.keys().cloned().collect();
    let mut want = vec![sims[1].clone(), sims[2].clone()];
    want.sort();
    assert_eq!(names, want, "the corrupt file keeps its last targets");

    // A config reload that leaves the block as it was: the discovered targets keep their connections.
    let (_, before) = http_get(http, "/metrics", &[]).await.unwrap();
    std::fs::write(&config, std::fs::read_to_string(&config).unwrap() + "\n# touched\n").unwrap();
    let hup = tokio::process::Command::new("kill").args(["-HUP", &telemon.pid().to_string()]).status().await;
    assert!(hup.unwrap().success());
    let line = telemon.stderr_line("reloaded the config").await;
    assert!(line.contains("0 started, 0 restarted, 0 stopped"), "{line}");
    let (_, after) = http_get(http, "/metrics", &[]).await.unwrap();
    let connects = |page: &str| -> Vec<String> {
        page.lines().filter(|l| l.starts_with("telemon_target_connects_total{")).map(str::to_owned).collect()
    };
    assert_eq!(connects(&before), connects(&after), "one connection each, before and after");

    // Delete: its targets go.
    std::fs::remove_file(&json).unwrap();
    follows("a deleted file", &[&sims[2]]).await;
    telemon.kill().await;
    shutdown.cancel();
}

#[tokio::test]
async fn a_bad_file_sd_block_names_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("telemon.toml");
    std::fs::write(&config, "[serve]\n\n[[file_sd]]\nfiles = [\"t/*.json\"]\nprotocol = \"mono\"\n").unwrap();
    let out = support::run(&["serve", "--check-config", config.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 2);
    let err = support::stderr(&out);
    assert!(err.contains("telemon.toml:5: file_sd.protocol:"), "{err}");
    std::fs::write(&config, "[[file_sd]]\nfiles = [\"t/*.json\"]\nprotocol = \"hmon\"\npol = \"1s\"\n")
        .unwrap();
    let out = support::run(&["serve", "--check-config", config.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 2);
    assert!(support::stderr(&out).contains("pol"), "{}", support::stderr(&out));
}
