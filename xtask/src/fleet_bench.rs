//! `cargo xtask fleet-bench`: what `telemon serve` costs while it watches N targets of one protocol.
//!
//! For each protocol and each N, the sims serve N instances (`--instances`, at most [`MAX_PER_SIM`] per
//! process), telemon (release build) watches every one of them with a one-second period, and once all
//! are up and a warm-up has passed, the measured window records telemon's CPU time, and a scrape of
//! `/metrics` every second. Everything runs under `target/fleet-bench/PROTOCOL-N/` (config, logs,
//! sys161 socket folders), which is kept for a look after the run.
//!
//! With `--push`, each (protocol, N) also runs with a `[[remote_write]]` sender pushing every series
//! each second to a sink in this process (a minimal HTTP server answering 204), so the table shows
//! the sender's cost beside the same fleet without one.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Every protocol, in table order.
pub const PROTOCOLS: [&str; 5] = ["meter161", "hmon", "smon", "sysinfo", "mono"];

/// The most instances one sim process serves (the open-file hard limit here is 20,000, and a server sim
/// holds a listener and a connection per instance).
const MAX_PER_SIM: u32 = 9_900;

/// How long telemon gets to see every target up.
const UP_DEADLINE: Duration = Duration::from_secs(60);

/// How long telemon runs with every target up before the measured window.
const WARM_UP: Duration = Duration::from_secs(5);

/// telemon's open-file limit: a socket per target, and some.
const NOFILE: u32 = 20_000;

/// One row of the table.
struct Row {
    protocol: &'static str,
    n: u32,
    push: bool,
    cpu_percent: f64,
    peak_rss_mib: f64,
    p50_ms: f64,
    p99_ms: f64,
    scrape_bytes: usize,
    up: usize,
}

/// Runs every (protocol, N) pair, prints the table and writes it to `target/fleet-bench.md`.
pub fn fleet_bench(root: &Path, sizes: &[u32], protocols: &[String], seconds: u64, push: bool) -> Result<()> {
    let mut chosen = Vec::new();
    for p in protocols {
        let Some(known) = PROTOCOLS.iter().find(|k| *k == p) else {
            bail!("no protocol {p:?}; known: {}", PROTOCOLS.join(", "));
        };
        chosen.push(*known);
    }
    if chosen.is_empty() {
        chosen.extend(PROTOCOLS);
    }
    let sizes = if sizes.is_empty() { &[10, 100, 1000][..] } else { sizes };
    if sizes.contains(&0) {
        bail!("N must be at least 1");
    }

    eprintln!("[xtask] building the release binaries");
    let mut build = Command::new(super::cargo());
    build.args(["build", "--release", "--quiet"]);
    for package in ["telemon", "sys161-sim", "dyalog-sim", "smon-sim", "rvos-sim", "mono-agent-sim"] {
        build.args(["-p", package]);
    }
    super::run(&mut build)?;

    let target = target_dir(root);
    let bench = Bench {
        release: target.join("release"),
        work: target.join("fleet-bench"),
        seconds: seconds.max(1),
        clk_tck: clock_ticks(),
    };
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for &protocol in &chosen {
        for &n in sizes {
            for with_push in if push { &[false, true][..] } else { &[false][..] } {
                let what = if *with_push { " + remote_write" } else { "" };
                eprintln!("[xtask] {protocol} x {n}{what}");
                match bench.run(protocol, n, *with_push) {
                    Ok(row) => rows.push(row),
                    Err(e) => {
                        eprintln!("[xtask] {protocol} x {n}{what} failed: {e:#}");
                        failed.push(format!("{protocol} x {n}{what}"));
                    }
                }
            }
        }
    }
    let table = table(&rows);
    println!("{table}");
    let out = target.join("fleet-bench.md");
    std::fs::write(&out, &table).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("[xtask] written to {}", out.display());
    if !failed.is_empty() {
        bail!("fleet-bench failed for {}", failed.join(", "));
    }
    Ok(())
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

/// Clock ticks per second, the unit of utime and stime in `/proc/PID/stat`.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| protocol | N | push | telemon CPU (% of a core) | peak RSS (MiB) | scrape p50 (ms) | scrape p99 (ms) | scrape size (bytes) | up |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} |",
            r.protocol,
            r.n,
            if r.push { "remote_write" } else { "none" },
            r.cpu_percent,
            r.peak_rss_mib,
            r.p50_ms,
            r.p99_ms,
            r.scrape_bytes,
            r.up
        );
    }
    t
}

/// Children killed (and reaped) when dropped, so that no run leaves a process behind, even on an error.
#[derive(Default)]
struct Children(Vec<(String, Child)>);

impl Children {
    fn spawn(&mut self, name: &str, cmd: &mut Command, log: &Path) -> Result<u32> {
        let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let pid = child.id();
        self.0.push((name.to_owned(), child));
        Ok(pid)
    }

    /// Fails if a child has ended (a sim that could not bind, telemon refusing its config...).
    fn check_alive(&mut self, work: &Path) -> Result<()> {
        for (name, child) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} ended ({status}); see {}/{name}.log", work.display());
            }
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // telemon first (it was started last), so that it does not count the sims going away.
        for (_, child) in self.0.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

struct Bench {
    release: PathBuf,
    work: PathBuf,
    seconds: u64,
    clk_tck: f64,
}

impl Bench {
    fn run(&self, protocol: &'static str, n: u32, push: bool) -> Result<Row> {
        let work = self.work.join(format!("{protocol}-{n}{}", if push { "-push" } else { "" }));
        if work.exists() {
            std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
        }
        std::fs::create_dir_all(&work)?;
        // Sims log warnings only (their default, info, writes a line per connection), unless asked.
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());

        let listen = format!("127.0.0.1:{}", free_port()?);
        let mut config = format!("[serve]\nlisten = \"{listen}\"\n");
        let mut children = Children::default();
        let mut next_port = 10_000;
        let chunks = (0..n).step_by(MAX_PER_SIM as usize).map(|start| (start, (n - start).min(MAX_PER_SIM)));
        if protocol == "mono" {
            // Agents dial telemon's listener: one block, each agent a target.
            let inspector = format!("127.0.0.1:{}", free_port()?);
            let _ = write!(config, "\n[[mono_listen]]\nname = \"mono\"\nlisten = \"{inspector}\"\n");
            for (i, (_, count)) in chunks.enumerate() {
                let mut sim = Command::new(self.release.join("mono-agent-sim"));
                sim.args(["--address", &inspector, "--interval", "1000", "--fixed-values"])
                    .args(["--instances", &count.to_string()])
                    .env("RUST_LOG", &log_level);
                children.spawn(
                    &format!("mono-agent-sim-{i}"),
                    &mut sim,
                    &work.join(format!("mono-agent-sim-{i}.log")),
                )?;
            }
        } else {
            for (i, (start, count)) in chunks.enumerate() {
                let name = format!("{}-{i}", sim_binary(protocol));
                let mut sim = Command::new(self.release.join(sim_binary(protocol)));
                sim.args(["--instances", &count.to_string()]).env("RUST_LOG", &log_level);
                if protocol == "meter161" {
                    let dir = work.join(format!("sys161-{i}"));
                    sim.arg("--dir").arg(&dir);
                    for k in 0..count {
                        // One instance serves DIR itself, N serve DIR/0..N-1.
                        let dir = if count == 1 { dir.clone() } else { dir.join(k.to_string()) };
                        let _ = write!(
                            config,
                            "\n[[meter161]]\nname = \"t{}\"\ndir = \"{}\"\ninterval = \"1s\"\n",
                            start + k,
                            dir.display()
                        );
                    }
                } else {
                    let first = free_ports(next_port, count)?;
                    next_port = first + count as u16;
                    let addr = format!("127.0.0.1:{first}");
                    match protocol {
                        "hmon" => sim.args(["--serve", &addr]),
                        "smon" => sim.args(["--listen", &addr, "--interval", "1s"]),
                        _ => sim.args(["--listen", &addr, "--trace-prefill", "0", "--trace-capacity", "64"]),
                    };
                    let period = match protocol {
                        "hmon" => "poll = \"1s\"\n",
                        "sysinfo" => "every = \"1s\"\n",
                        _ => "",
                    };
                    for k in 0..count {
                        let port = u32::from(first) + k;
                        let _ = write!(
                            config,
                            "\n[[{protocol}]]\nname = \"t{}\"\nconnect = \"127.0.0.1:{port}\"\n{period}",
                            start + k
                        );
                    }
                }
                children.spawn(&name, &mut sim, &work.join(format!("{name}.log")))?;
            }
        }
        let _sink = if push {
            let sink = Sink::start()?;
            let _ = write!(
                config,
                "\n[[remote_write]]\nurl = \"http://{}/api/v1/write\"\nbatch = \"1s\"\n",
                sink.addr
            );
            Some(sink)
        } else {
            None
        };
        let config_path = work.join("telemon.toml");
        std::fs::write(&config_path, config)?;

        let mut telemon = with_nofile_limit(&self.release.join("telemon"));
        telemon.arg("serve").arg("--config").arg(&config_path);
        let pid = children.spawn("telemon", &mut telemon, &work.join("telemon.log"))?;

        // Every target up, or the deadline.
        let deadline = Instant::now() + UP_DEADLINE;
        let mut up = 0;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            children.check_alive(&work)?;
            if let Ok(n_up) = targets_up(&listen) {
                up = n_up;
            }
            if up >= n as usize {
                break;
            }
        }
        if up < n as usize {
            eprintln!(
                "[xtask] only {up} of {n} targets up after {}s; measuring anyway",
                UP_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(WARM_UP);
        children.check_alive(&work)?;

        // The measured window: CPU time over it, a scrape each second.
        let ticks_before = cpu_ticks(pid)?;
        let start = Instant::now();
        let mut latencies = Vec::new();
        let mut scrape_bytes = 0;
        for i in 1..=self.seconds {
            let t = Instant::now();
            scrape_bytes = http_get(&listen, "/metrics")?.len();
            latencies.push(t.elapsed().as_secs_f64() * 1e3);
            if let Some(wait) = (start + Duration::from_secs(i)).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        let ticks = cpu_ticks(pid)? - ticks_before;
        let peak_rss_mib = vm_hwm_kib(pid)? as f64 / 1024.0;
        let up = targets_up(&listen)?;
        children.check_alive(&work)?;
        drop(children);

        latencies.sort_by(f64::total_cmp);
        Ok(Row {
            protocol,
            n,
            push,
            cpu_percent: ticks as f64 / self.clk_tck / elapsed * 100.0,
            peak_rss_mib,
            p50_ms: percentile(&latencies, 50.0),
            p99_ms: percentile(&latencies, 99.0),
            scrape_bytes,
            up,
        })
    }
}

/// A remote write receiver that reads each request and answers 204: what a fast receiver costs
/// telemon, without a receiver's own CPU in the way (it runs in xtask, not in telemon).
struct Sink {
    addr: std::net::SocketAddr,
}

impl Sink {
    fn start() -> Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                std::thread::spawn(move || Sink::serve(conn));
            }
        });
        Ok(Sink { addr })
    }

    /// Keep-alive HTTP/1.1: headers, a `Content-Length` body, `204`; until the peer closes.
    fn serve(mut conn: TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..end + 4 + len);
            if conn.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").is_err() {
                return;
            }
        }
    }
}

fn sim_binary(protocol: &str) -> &'static str {
    match protocol {
        "meter161" => "sys161-sim",
        "hmon" => "dyalog-sim",
        "smon" => "smon-sim",
        "sysinfo" => "rvos-sim",
        _ => "mono-agent-sim",
    }
}

/// `bin` with its open-file limit raised to [`NOFILE`]: by `prlimit` when there is one, else by the shell.
fn with_nofile_limit(bin: &Path) -> Command {
    let has_prlimit =
        Command::new("prlimit").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if has_prlimit.is_ok_and(|s| s.success()) {
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--nofile={NOFILE}:{NOFILE}")).arg(bin);
        cmd
    } else {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("ulimit -n {NOFILE}; exec \"$@\""), "sh"]).arg(bin);
        cmd
    }
}

/// A port on 127.0.0.1 that is free now.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The first of `n` consecutive ports, from `from` up, that are free now (each bound, then released). The
/// search stays below the ephemeral range, where telemon's own connections take their ports.
fn free_ports(from: u16, n: u32) -> Result<u16> {
    let end: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let mut first = u32::from(from);
    while first + n <= end {
        match (first..first + n).find(|&port| TcpListener::bind(("127.0.0.1", port as u16)).is_err()) {
            Some(taken) => first = taken + 1,
            None => return Ok(first as u16),
        }
    }
    bail!("no {n} consecutive free ports between {from} and {end}")
}

/// How many targets `/targets` shows up (the JSON has no spaces: `"state":"up"`).
fn targets_up(listen: &str) -> Result<usize> {
    let body = String::from_utf8(http_get(listen, "/targets")?)?;
    // Only the `targets` list, not the `probes` one (the keys may come in either order).
    let targets = &body[body.find("\"targets\":").context("no targets in /targets")?..];
    let targets = match targets.find("\"probes\":") {
        Some(end) => &targets[..end],
        None => targets,
    };
    Ok(targets.matches("\"state\":\"up\"").count())
}

/// The body of `GET path`, by plain HTTP/1.1 with `Connection: close`.
fn http_get(addr: &str, path: &str) -> Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).with_context(|| format!("reading GET {path}"))?;
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n").context("no end of headers")?;
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    let body = answer.split_off(end + 4);
    if head.contains("transfer-encoding: chunked") {
        return dechunk(&body);
    }
    Ok(body)
}

/// A chunked body's content.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").context("truncated chunk")?;
        let size = std::str::from_utf8(&body[..line])?.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).context("bad chunk size")?;
        if size == 0 {
            return Ok(out);
        }
        let data = body.get(line + 2..line + 2 + size).context("truncated chunk")?;
        out.extend_from_slice(data);
        body = body.get(line + 4 + size..).context("truncated chunk")?;
    }
}

/// utime + stime of `pid`, in clock ticks (fields 14 and 15 of `/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count from the parenthesis that closes it.
    let fields: Vec<&str> = stat[stat.rfind(')').context("bad stat")? + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64> { Ok(fields.get(n - 3).context("short stat")?.parse()?) };
    Ok(field(14)? + field(15)?)
}

/// Peak resident set size of `pid` (VmHWM), in KiB.
fn vm_hwm_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("bad VmHWM")?.parse()?)
}

/// The nearest-rank percentile of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
