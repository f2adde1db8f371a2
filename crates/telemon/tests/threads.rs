//! `[serve] threads`: the collectors run on that many threads (the main one and `collector-K`), every
//! target collected whichever thread it is on; a reload that changes the number says it takes a restart; and
//! the default follows the cores the process may run on.

use std::time::Duration;

mod support;
use support::{free_addr, http_get, until, SimOptions, Sims, Telemon};

/// The names of the threads of process `pid`.
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut names: Vec<String> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_owned())
        .collect();
    names.sort();
    names
}

/// Sends `server` SIGHUP (a reload).
fn hangup(server: &Telemon) {
    // SAFETY: kill(2) signals the child; no memory is involved.
    assert_eq!(unsafe { libc::kill(server.pid() as i32, libc::SIGHUP) }, 0);
}

/// Targets up in a scrape of `/metrics`.
async fn up(addr: std::net::SocketAddr) -> Option<usize> {
    let (_, body) = http_get(addr, "/metrics", &[]).await.ok()?;
    Some(body.lines().filter(|l| l.starts_with("telemon_target_up{") && l.ends_with(" 1")).count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_spreads_its_targets_over_its_threads_and_collects_every_one() {
    let sims = Sims::start(SimOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("threads.toml");
    let targets = |threads: usize| {
        let mut text = format!("[serve]\nthreads = {threads}\n");
        for k in 0..4 {
            text += &format!(
                "\n[[sysinfo]]\nname = \"r{k}\"\nconnect = \"{}\"\nevery = \"200ms\"\n",
                sims.rvos_addr
            );
            text += &format!("\n[[smon]]\nname = \"s{k}\"\nconnect = \"{}\"\n", sims.smon_addr);
        }
        text + &format!("\n[[meter161]]\nname = \"m\"\ndir = '{}'\n", sims.sys161_dir.path().display())
    };
    std::fs::write(&config, targets(3)).unwrap();
    let addr = free_addr();
    let mut server =
        Telemon::spawn(&["serve", "--config", config.to_str().unwrap(), "--listen", &addr.to_string()]);
    let line = server.stderr_line("serving").await;
    assert!(line.contains(" (3 collector threads) on http://"), "{line}");
    // Nine units over three threads: three on each, all of them up.
    until("the nine targets up", Duration::from_millis(50), async || (up(addr).await? == 9).then_some(()))
        .await;
    let names = thread_names(server.pid());
    for name in ["collector-1", "collector-2"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(!names.iter().any(|n| n == "collector-3"), "{names:?}");

    // A reload that asks for one thread changes nothing of them, and says so.
    std::fs::write(&config, targets(1)).unwrap();
    hangup(&server);
    let line = server.stderr_line("reloaded the config").await;
    assert!(line.contains("[serve] threads stays 3 until telemon restarts"), "{line}");
    assert_eq!(up(addr).await, Some(9));
    // Asked again, it still runs 3: the message is about the threads running, not the last config read.
    hangup(&server);
    let line = server.stderr_line("reloaded the config").await;
    assert!(line.contains("[serve] threads stays 3 until telemon restarts"), "{line}");
    // And back to 3: nothing to say.
    std::fs::write(&config, targets(3)).unwrap();
    hangup(&server);
    let line = server.stderr_line("reloaded the config").await;
    assert!(!line.contains("threads stays"), "{line}");
    server.kill().await;
    sims.stop().await;
}

/// Without `threads`, as many as the cores the process may run on: one under `taskset -c 0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_threads_are_the_cores_it_may_run_on() {
    let Some(taskset) = support::need_on_path(
        "by_default_the_threads_are_the_cores_it_may_run_on",
        "taskset",
        "apt-get install util-linux",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("empty.toml");
    std::fs::write(&config, "").unwrap();
    for (cores, extra) in [("0", 0), ("0,1", 1)] {
        let addr = free_addr();
        let args = ["-c", cores, support::TELEMON, "serve", "--config", config.to_str().unwrap(), "--listen"];
        let mut args: Vec<&str> = args.to_vec();
        let listen = addr.to_string();
        args.push(&listen);
        let mut server = Telemon::spawn_program(&taskset, &args);
        let line = server.stderr_line("serving").await;
        let names = thread_names(server.pid());
        let collect = names.iter().filter(|n| n.starts_with("collector-")).count();
        // A core this machine does not have is not counted.
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        let extra = extra.min(available - 1);
        assert_eq!(collect, extra, "taskset -c {cores}: {names:?}");
        let said = if extra == 0 {
            "(1 collector thread)".to_owned()
        } else {
            format!("({} collector threads)", extra + 1)
        };
        assert!(line.contains(&said), "taskset -c {cores}: {line}");
        server.kill().await;
    }
}
