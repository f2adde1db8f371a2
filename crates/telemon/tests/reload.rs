//! `telemon serve` changed while it runs: SIGHUP and `POST /-/reload` apply only what changed, a bad
//! config changes nothing, and reloading does not leak.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use support::{free_addr, http_get, until, within, Telemon};

/// The sims: 50 rvOS sysinfo services, in-process.
async fn rvos_sims(n: usize, shutdown: &sim_common::Shutdown) -> Vec<String> {
    let mut addrs = Vec::new();
    for _ in 0..n {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(l.local_addr().unwrap().to_string());
        tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
    }
    addrs
}

/// A config of sysinfo targets `(name, addr, room)` and a Mono listener on `mono`.
fn config(targets: &[(String, String, &str)], mono: SocketAddr) -> String {
    let mut text = format!("[[mono_listen]]\nname = \"agents\"\nlisten = \"{mono}\"\n");
    for (name, addr, room) in targets {
        text += &format!(
            "[[sysinfo]]\nname = \"{name}\"\nconnect = \"{addr}\"\nreports = [\"ps\"]\nevery = \"500ms\"\nlabels = {{ room = \"{room}\" }}\n"
        );
    }
    text
}

/// `family{...target="NAME"...} VALUE` lines of a page: `target -> value`.
fn by_target(page: &str, family: &str) -> BTreeMap<String, f64> {
    page.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| {
            let target = l.split("target=\"").nth(1)?.split('"').next()?.to_owned();
            let value = l.rsplit(' ').next()?.parse().ok()?;
            Some((target, value))
        })
        .collect()
}

fn gauge(page: &str, name: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

async fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http_get(addr, "/metrics", &[]).await.expect("a scrape");
    assert_eq!(status, 200);
    body
}

/// Fds and RSS of a process.
fn fds_and_rss(pid: u32) -> (usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (fds, rss)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_restarts_only_what_changed_and_a_bad_one_changes_nothing() {
    let shutdown = sim_common::Shutdown::new();
    let sims = rvos_sims(50, &shutdown).await;
    let name = |i: usize| format!("s{i:02}");
    let mono = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("telemon.toml");
    // 49 targets; the reload removes s00, relabels s01, adds s49, and leaves 47 as they were.
    let before: Vec<(String, String, &str)> = (0..49).map(|i| (name(i), sims[i].clone(), "a")).collect();
    std::fs::write(&file, config(&before, mono)).unwrap();
    let http = free_addr();
    let mut telemon = Telemon::spawn(&[
        "serve",
        "--config",
        file.to_str().unwrap(),
        "--listen",
        &http.to_string(),
        "--web.enable-lifecycle",
    ]);
    telemon.stderr_line("serving").await;
    let pid = telemon.pid();
    // A dial-in Mono agent.
    let mut agent =
        mono_agent_sim::AgentConfig::from_options(&format!("address={mono},interval=200")).unwrap();
    agent.backoff =
        mono_agent_sim::Backoff { initial: Duration::from_millis(50), max: Duration::from_millis(500) };
    tokio::spawn(mono_agent_sim::run(agent, shutdown.clone()));
    let all_up = |page: &str, want: usize| {
        let up = by_target(page, "telemon_target_up");
        up.len() == want && up.values().all(|v| *v == 1.0)
    };
    until("49 targets and the agent up", Duration::from_millis(100), async || {
        let page = scrape(http).await;
        all_up(&page, 50).then_some(())
    })
    .await;

    // Scrape every 100 ms around the reload.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let scraper = tokio::spawn(async move {
        let mut pages = Vec::new();
        loop {
            pages.push(scrape(http).await);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stop_rx.wait_for(|s| *s) => return pages,
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut after: Vec<(String, String, &str)> = (1..50).map(|i| (name(i), sims[i].clone(), "a")).collect();
    after[0].2 = "b"; // s01 relabelled
    std::fs::write(&file, config(&after, mono)).unwrap();
    let hup = tokio::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().await.unwrap();
    assert!(hup.success());
    telemon.stderr_line("reloaded the config").await;
    until("s49 up and s00 gone", Duration::from_millis(100), async || {
        let page = scrape(http).await;
        let up = by_target(&page, "telemon_target_up");
        (up.get("s49") == Some(&1.0) && !up.contains_key("s00")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_tx.send_replace(true);
    let pages = scraper.await.unwrap();
    assert!(pages.len() >= 10, "{} scrapes", pages.len());
    let unchanged: Vec<String> = (2..49).map(name).chain(["mono/agents".into()]).collect();
    for page in &pages {
        let up = by_target(page, "telemon_target_up");
        let connects = by_target(page, "telemon_target_connects_total");
        for t in unchanged.iter().filter(|t| !t.starts_with("mono")) {
            assert_eq!(up.get(t), Some(&1.0), "{t} never goes down around the reload");
            assert_eq!(connects.get(t), Some(&1.0), "{t} keeps its one connection");
        }
        // The agent is named after its peer: find it by protocol.
        let agents: Vec<f64> = page
            .lines()
            .filter(|l| l.starts_with("telemon_target_connects_total{protocol=\"mono\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert_eq!(agents, [1.0], "the dial-in agent stays connected: {agents:?}");
    }
    let last = pages.last().unwrap();
    assert!(last.contains("room=\"b\"") && last.contains("target=\"s01\""), "s01 relabelled");
    assert!(last.lines().any(|l| l.contains("target=\"s01\"") && l.contains("room=\"b\"")));
    assert_eq!(gauge(last, "telemon_config_last_reload_successful"), Some(1.0));

    // A bad config changes nothing: the file's line and key in the log, the gauge at 0.
    std::fs::write(&file, config(&after, mono) + "[[sysinfo]]\nname = \"x\"\nconect = \"127.0.0.1:1\"\n")
        .unwrap();
    let (status, body) = post(http, "/-/reload").await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("telemon.toml:") && body.contains("conect"), "{body}");
    let line = telemon.stderr_line("reload failed").await;
    assert!(line.contains("telemon.toml:") && line.contains("conect"), "{line}");
    let page = scrape(http).await;
    assert_eq!(gauge(&page, "telemon_config_last_reload_successful"), Some(0.0));
    assert!(all_up(&page, 50), "all 49 and the agent still up");
    assert!(by_target(&page, "telemon_target_connects_total").values().all(|v| *v == 1.0));

    // The same good file 100 times: memory and descriptors stay where they were.
    std::fs::write(&file, config(&after, mono)).unwrap();
    let (status, body) = post(http, "/-/reload").await;
    assert_eq!(status, 200, "{body}");
    let (fds0, rss0) = fds_and_rss(pid);
    for _ in 0..100 {
        let (status, body) = post(http, "/-/reload").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("0 started, 0 restarted, 0 stopped"), "{body}");
    }
    let (fds1, rss1) = fds_and_rss(pid);
    eprintln!("100 reloads: fds {fds0} -> {fds1}, RSS {rss0} -> {rss1} KiB");
    assert!(fds1 <= fds0 + 2, "descriptors: {fds0} -> {fds1}");
    assert!(rss1 <= rss0 + 4096, "RSS: {rss0} -> {rss1} KiB");
    let page = scrape(http).await;
    assert!(all_up(&page, 50));
    assert_eq!(gauge(&page, "telemon_config_last_reload_successful"), Some(1.0));
    telemon.kill().await;
    shutdown.cancel();
}

/// `telemon serve` over an empty config (a probe-only instance) in a directory of its own: the directory, the
/// config file, the HTTP address and the process.
fn probe_only() -> (tempfile::TempDir, std::path::PathBuf, SocketAddr, Telemon) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("telemon.toml");
    std::fs::write(&file, "").unwrap();
    let http = free_addr();
    let telemon =
        Telemon::spawn(&["serve", "--config", file.to_str().unwrap(), "--listen", &http.to_string()]);
    (dir, file, http, telemon)
}

#[tokio::test]
async fn reload_over_http_needs_the_lifecycle_flag() {
    let (_dir, _file, http, mut telemon) = probe_only();
    let line = telemon.stderr_line("serving").await;
    assert!(
        line.contains("no targets (/probe only)"),
        "a config without targets is a probe-only instance: {line}"
    );
    let (status, body) = post(http, "/-/reload").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--web.enable-lifecycle"), "{body}");
    telemon.kill().await;
}

/// `POST path` with an empty body: the status and the body.
async fn post(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    within("a POST", async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req =
            format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        (status, body)
    })
    .await
}

/// A bad web config is refused on reload as at start (file:line:key), and the server goes on as it was; a good
/// one then turns basic auth on without a restart.
#[tokio::test]
async fn a_bad_web_config_is_refused_on_reload() {
    let (dir, file, http, mut telemon) = probe_only();
    telemon.stderr_line("serving").await;
    let pid = telemon.pid().to_string();
    let cases = [
        (
            "missing.yml",
            "tls_server_config:\n  cert_file: nowhere.pem\n  key_file: nowhere.key\n",
            "cert_file",
        ),
        ("nocert.yml", "tls_server_config:\n  key_file: web.yml\n", "tls_server_config"),
        ("plain.yml", "basic_auth_users:\n  alice: secret\n", "basic_auth_users.alice"),
        ("unknown.yml", "basic_auth_users: {}\ntls_config: {}\n", "tls_config"),
    ];
    for (name, yaml, key) in cases {
        std::fs::write(dir.path().join(name), yaml).unwrap();
        std::fs::write(&file, format!("[serve]\nweb_config = \"{name}\"\n")).unwrap();
        tokio::process::Command::new("kill").args(["-HUP", &pid]).status().await.unwrap();
        let line = telemon.stderr_line("reload failed").await;
        assert!(line.contains(&format!("{name}:")) && line.contains(key), "{name}: {line}");
        let (status, page) = http_get(http, "/metrics", &[]).await.unwrap();
        assert_eq!(status, 200, "still served as before");
        assert_eq!(gauge(&page, "telemon_config_last_reload_successful"), Some(0.0));
    }
    // The files a config names, checked as `--check-config` and a start check them: at the key that names them.
    let cases = [
        ("[serve]\nweb_config = \"gone.yml\"\n", ":2: serve.web_config: cannot read "),
        (
            "[[remote_write]]\nurl = \"http://127.0.0.1:1/w\"\nbasic_auth = { username = \"u\", password_file = \"/nonexistent\" }\n",
            ":3: basic_auth.password_file: cannot read /nonexistent",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&file, text).unwrap();
        tokio::process::Command::new("kill").args(["-HUP", &pid]).status().await.unwrap();
        let line = telemon.stderr_line("reload failed").await;
        assert!(line.contains(want), "{want}: {line}");
    }
    // A good one: users from now on.
    let hash = bcrypt::hash("pw", 4).unwrap();
    std::fs::write(dir.path().join("good.yml"), format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
    std::fs::write(&file, "[serve]\nweb_config = \"good.yml\"\n").unwrap();
    tokio::process::Command::new("kill").args(["-HUP", &pid]).status().await.unwrap();
    telemon.stderr_line("reloaded the config").await;
    let (status, _) = http_get(http, "/metrics", &[]).await.unwrap();
    assert_eq!(status, 401, "basic auth applies after the reload");
    let (status, _) = http_get(http, "/metrics", &[("Authorization", "Basic YWxpY2U6cHc=")]).await.unwrap();
    assert_eq!(status, 200, "alice:pw");
    let (status, _) = http_get(http, "/healthz", &[]).await.unwrap();
    assert_eq!(status, 200, "/healthz stays open");
    telemon.kill().await;
}

/// A reload that changes `[serve] listen` moves HTTP alone: the targets keep their connections; one that asks for
/// a port in use changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_listen_address_moves_http_alone() {
    let shutdown = sim_common::Shutdown::new();
    let sims = rvos_sims(1, &shutdown).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("telemon.toml");
    let (a, b) = (free_addr(), free_addr());
    let text = |listen: SocketAddr| {
        format!("[serve]\nlisten = \"{listen}\"\n[[sysinfo]]\nname = \"vm\"\nconnect = \"{}\"\n", sims[0])
    };
    std::fs::write(&file, text(a)).unwrap();
    let mut telemon = Telemon::spawn(&["serve", "--config", file.to_str().unwrap()]);
    telemon.stderr_line("serving").await;
    let pid = telemon.pid().to_string();
    until("vm up", Duration::from_millis(50), async || {
        by_target(&scrape(a).await, "telemon_target_up").get("vm").is_some_and(|v| *v == 1.0).then_some(())
    })
    .await;
    // A port in use: refused, HTTP stays where it was.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(&file, text(taken.local_addr().unwrap())).unwrap();
    tokio::process::Command::new("kill").args(["-HUP", &pid]).status().await.unwrap();
    let line = telemon.stderr_line("reload failed").await;
    assert!(line.contains("cannot listen"), "{line}");
    assert_eq!(gauge(&scrape(a).await, "telemon_config_last_reload_successful"), Some(0.0));
    // A free one: HTTP moves, the target keeps its connection.
    std::fs::write(&file, text(b)).unwrap();
    tokio::process::Command::new("kill").args(["-HUP", &pid]).status().await.unwrap();
    let line = telemon.stderr_line("reloaded the config").await;
    assert!(line.contains(&format!("HTTP on {b}")), "{line}");
    let page = scrape(b).await;
    assert_eq!(by_target(&page, "telemon_target_connects_total").get("vm"), Some(&1.0));
    assert_eq!(gauge(&page, "telemon_config_last_reload_successful"), Some(1.0));
    until("the old address to close", Duration::from_millis(100), async || {
        http_get(a, "/healthz", &[]).await.is_err().then_some(())
    })
    .await;
    telemon.kill().await;
    shutdown.cancel();
}

/// The points of every series' history in a `/api/v1/targets/NAME` answer.
async fn history_points(addr: SocketAddr, name: &str) -> usize {
    let (status, body) = http_get(addr, &format!("/api/v1/targets/{name}"), &[]).await.expect("the API");
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    let families = page["families"].as_array().expect("families");
    assert!(!families.is_empty(), "{name} has series");
    families
        .iter()
        .flat_map(|f| f["series"].as_array().into_iter().flatten())
        .map(|s| s["history"].as_array().map_or(0, Vec::len))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_history_keeps_nothing_unwatched_until_a_reload_says_always() {
    let shutdown = sim_common::Shutdown::new();
    let sims = rvos_sims(2, &shutdown).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("telemon.toml");
    let addr = free_addr();
    let text = |history: &str| {
        format!(
            "[serve]\nlisten = \"{addr}\"\nweb_history = \"{history}\"\n\
             [[sysinfo]]\nname = \"first\"\nconnect = \"{}\"\nevery = \"500ms\"\n\
             [[sysinfo]]\nname = \"second\"\nconnect = \"{}\"\nevery = \"500ms\"\n",
            sims[0], sims[1]
        )
    };
    std::fs::write(&file, text("while_viewed")).unwrap();
    let mut telemon = Telemon::spawn(&["serve", "--config", file.to_str().unwrap()]);
    telemon.stderr_line("serving").await;
    until("both up", Duration::from_millis(50), async || {
        let up = by_target(&scrape(addr).await, "telemon_target_up");
        (up.get("first") == Some(&1.0) && up.get("second") == Some(&1.0)).then_some(())
    })
    .await;
    // Seconds with nobody watching leave no history: a page opened now starts empty.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(history_points(addr, "first").await, 0, "nothing recorded while unwatched");
    // Its page is watched from then on (the request counts for a minute).
    until("first's charts to fill", Duration::from_millis(200), async || {
        (history_points(addr, "first").await > 0).then_some(())
    })
    .await;
    // `always`, by a reload: `second`, never asked for, is recorded too.
    std::fs::write(&file, text("always")).unwrap();
    tokio::process::Command::new("kill").args(["-HUP", &telemon.pid().to_string()]).status().await.unwrap();
    telemon.stderr_line("reloaded the config").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let points = history_points(addr, "second").await;
    assert!(points >= 2, "{points} points of second's history after 3 s of `always`");
    telemon.kill().await;
    shutdown.cancel();
}
