//! `/probe` reaches only what `[serve] probe_allow` allows (loopback without it), resolves a name once and
//! connects to an address it checked.
//!
//! telemon runs in a network namespace of its own (`unshare -n`: nothing but loopback, so no packet can leave
//! the machine) with two documentation addresses on its loopback interface, `192.0.2.7` (allowed once the
//! reload opens `192.0.2.0/24`) and `203.0.113.5` (never allowed), and its own `/etc/hosts` (`unshare -m` and a
//! bind mount): names resolve there, never through the network. The test reaches telemon, and serves an rvOS
//! sim, from a thread that joined the namespace (`setns`). Needs root and util-linux; under `CI=true` their
//! absence fails the test.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::Telemon;

/// Runs `f` on a thread that joined the network namespace of process `pid`: sockets it makes live there.
fn in_netns<T: Send + 'static>(pid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).expect("the namespace");
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("the namespace thread")
}

/// `GET path` of telemon inside the namespace: the status and the body.
async fn get(pid: u32, http: SocketAddr, path: &str) -> (u16, String) {
    let stream = in_netns(pid, move || std::net::TcpStream::connect(http).expect("telemon listens"));
    stream.set_nonblocking(true).unwrap();
    let mut stream = tokio::net::TcpStream::from_std(stream).unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n");
    support::within(path, async {
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
    })
    .await
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reaches_only_allowed_addresses_and_names() {
    let test = "probe_reaches_only_allowed_addresses_and_names";
    let hint = "run as root with util-linux (unshare) and iproute2 (ip)";
    let (Some(unshare), Some(_ip)) = (
        support::need(test, "unshare as root", support::on_path("unshare").filter(|_| is_root()), hint),
        support::need_on_path(test, "ip", hint),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n192.0.2.7 inside.test\n203.0.113.5 outside.test\n\
         192.0.2.7 both.test\n203.0.113.5 both.test\n",
    )
    .unwrap();
    let config = dir.path().join("telemon.toml");
    std::fs::write(&config, "# no targets: a probe-only instance\n").unwrap();
    let http: SocketAddr = "127.0.0.1:9464".parse().unwrap();
    let script = format!(
        "ip link set lo up && ip addr add 192.0.2.7/32 dev lo && ip addr add 203.0.113.5/32 dev lo && \
         mount --bind {hosts} /etc/hosts && exec {telemon} serve --config {config} --listen {http}",
        hosts = hosts.display(),
        telemon = support::TELEMON,
        config = config.display(),
    );
    let mut telemon = Telemon::spawn_program(&unshare, &["-m", "-n", "sh", "-c", &script]);
    telemon.stderr_line("serving").await;
    let pid = telemon.pid();

    // An rvOS service inside the namespace, on every address of its loopback interface.
    let listener = in_netns(pid, || std::net::TcpListener::bind("0.0.0.0:0").expect("a port"));
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let shutdown = sim_common::Shutdown::new();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(rvos_sim::run(listener, rvos_sim::Config::default(), shutdown.clone()));
    let probe =
        async |target: &str| get(pid, http, &format!("/probe?target={target}&protocol=sysinfo")).await;

    // Without probe_allow: loopback only.
    let (status, body) = probe(&format!("127.0.0.1:{port}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("telemon_target_up{") && body.contains("} 1"), "{body}");
    let (status, body) = probe(&format!("192.0.2.7:{port}")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("probe_allow"), "the 403 says how to open it: {body}");
    let (status, body) = probe(&format!("inside.test:{port}")).await;
    assert_eq!(status, 403, "{body}");
    // Not HOST:PORT: 400, and no probe slot taken.
    for bad in ["[::1]:99999", "127.0.0.1", "127.0.0.1:0", "a%20b:80"] {
        let (status, body) = probe(bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (_, targets) = get(pid, http, "/targets").await;
    assert!(!targets.contains("99999"), "a refused target is not kept: {targets}");

    // A reload opens 192.0.2.0/24 (and so closes loopback).
    std::fs::write(&config, "[serve]\nprobe_allow = [\"192.0.2.0/24\"]\n").unwrap();
    let hup = tokio::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().await.unwrap();
    assert!(hup.success());
    telemon.stderr_line("reloaded the config").await;
    let (status, body) = probe(&format!("inside.test:{port}")).await;
    assert_eq!(status, 200, "a name inside probe_allow: {body}");
    assert!(body.contains("target=\"inside.test:"), "named as asked: {body}");
    let (status, body) = probe(&format!("192.0.2.7:{port}")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = probe(&format!("outside.test:{port}")).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = probe(&format!("both.test:{port}")).await;
    assert_eq!(status, 403, "a name with one address outside is refused: {body}");
    assert!(body.contains("203.0.113.5"), "{body}");
    let (status, body) = probe(&format!("127.0.0.1:{port}")).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = probe(&format!("nowhere.test:{port}")).await;
    assert_eq!(status, 502, "{body}");
    let (_, targets) = get(pid, http, "/targets").await;
    assert!(!targets.contains("\"127.0.0.1:"), "the loopback probe target went with the reload: {targets}");

    let (_, metrics) = get(pid, http, "/metrics").await;
    let refused = |reason: &str| -> f64 {
        let line = format!("telemon_probe_refused_total{{reason=\"{reason}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&line)?.parse().ok()).unwrap_or(-1.0)
    };
    assert_eq!(refused("invalid"), 4.0, "{metrics}");
    assert_eq!(refused("not_allowed"), 5.0, "{metrics}");
    assert_eq!(refused("unresolved"), 1.0, "{metrics}");
    assert_eq!(refused("limit"), 0.0, "{metrics}");
    tokio::time::sleep(Duration::from_millis(10)).await;
    telemon.kill().await;
    shutdown.cancel();
}
