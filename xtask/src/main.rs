//! `cargo xtask`: run the emulators, fuzz, bench and CI.
//!
//! * `cargo xtask sim` starts every emulator on its default address or directory and, on a terminal, opens
//!   the `telemon top` dashboard over them (their logs go to `target/sim-logs/`); with `--plain` or when
//!   stdout is not a terminal, it points one `telemon` at each and shows their live output, prefixed by name,
//!   until Ctrl-C. Either way it serves the web view at <http://127.0.0.1:9465/> and prints that address.
//! * `cargo xtask screenshots` regenerates `docs/screenshots/` (the web view in headless Chromium, light and
//!   dark: the `screenshots` test of `crates/telemon/tests/web.rs`).
//! * `cargo xtask sim NAME [-- ARGS]` runs one emulator in the foreground.
//! * `cargo xtask fuzz [--seconds N] [--jobs J] [--minimize] [TARGET]` runs cargo-fuzz on stable (`-s none`),
//!   installing it when missing, J targets at a time, prints executions, corpus and crashes per target, and with
//!   `--minimize` grows and minimises the seed corpora (`cargo fuzz cmin`); `--replay` instead replays every
//!   seed corpus through the real fuzz binaries, built without cargo-fuzz but with `--cfg fuzzing` as
//!   cargo-fuzz builds them (this is what CI does).
//! * `cargo xtask bench [ARGS]` runs the criterion benches; `--table` runs every codec against its baseline
//!   and prints one table of times and callgrind instruction counts, with ratios (`target/bench-table.md`).
//! * `cargo xtask soak [--minutes N] [--clients N] [SIM...]` runs each server sim in release mode under many
//!   clients, some hostile, with a restart in the middle, and prints one table (see `sims/soak`).
//! * `cargo xtask soak --fleet [--minutes N]` runs `telemon serve` (release) over 200 sims of the five
//!   protocols while a tenth of them is restarted every 10 s, and prints one table: RSS growth, scrape p50/p99,
//!   every up/down caused against those seen (see `sims/fleet-soak`).
//! * `cargo xtask soak --all [--minutes N] [--seed S]` runs the whole product for an hour (or N minutes): `telemon
//!   serve` (release, TLS and basic auth) over 500 sims, a real Prometheus, VictoriaMetrics, an OTLP receiver, headless
//!   Chromium and recordings, with faults on a seeded schedule, and prints one table of checks (see
//!   `sims/product-soak`).
//! * `cargo xtask fleet-bench [N...] [--protocol P]... [--seconds S] [--record] [--push] [--push-disk] [--views K]
//!   [--threads T]... [--period D] [--storm] [--replay FILE]` measures `telemon serve` (release) watching
//!   N sim targets of each protocol (N = 10, 100, 1000 unless given; 60 s windows) and prints one table:
//!   telemon's CPU beside the floor's (`sims/fleet-floor`, the same polling with the protocol crates alone)
//!   and the sims', peak RSS, bytes per series, scrape latency and size (plain and gzip), targets up and
//!   flapping (also written to `target/fleet-bench.md`); `--record` runs it with `telemon serve --record`;
//!   `--push` adds a row per size with a remote write sender, for its cost; `--threads 1 --threads 2` runs each
//!   row with `[serve] threads` 1 then 2 (telemon on as many cores), `--period 10ms` polls faster, and `--storm` restarts
//!   every sim at once after the window (time to all up again, peak RSS beside the steady RSS); `--replay FILE`
//!   serves a recording to every target from one sim instead (peers that cost a copy).
//! * `cargo xtask deb [--test]` builds the Debian package, `target/debian/telemon_*.deb` (see `deb.rs` and
//!   `deploy/debian/README.md`); `--test` then lints, installs, upgrades and purges it on this machine.
//! * `cargo xtask ci` runs `.ci/run`.

mod bench_table;
mod deb;
mod fleet_bench;
mod fuzz_run;
mod sims;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use sims::{Sim, SIMS};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Project chores: emulators, fuzzing, benches, CI")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Run every emulator with telemon watching it, or one emulator in the foreground.
    Sim {
        /// Prefixed line output of every emulator and a telemon per emulator, instead of the dashboard
        /// (what a stdout that is not a terminal gets anyway).
        #[arg(long)]
        plain: bool,
        /// Run only this emulator, in the foreground, with ARGS.
        name: Option<String>,
        /// Arguments for the one emulator (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Run cargo-fuzz on stable (`-s none`), or replay the seed corpora.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Replay each target's corpus once through the fuzz binary (no cargo-fuzz needed).
        #[arg(long)]
        replay: bool,
        /// Targets fuzzed at the same time.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// After the run, merge what it found into the seed corpus and minimise it (`cargo fuzz cmin`).
        #[arg(long)]
        minimize: bool,
        /// One target (default: all of them).
        target: Option<String>,
    },
    /// Run every criterion bench (ARGS after `--` go to criterion, e.g. a filter or `--measurement-time 3`).
    Bench {
        /// Every codec against its baseline in one table: criterion's time and callgrind's instruction
        /// counts, each also as a ratio to the baseline, and the trickle figures (`target/bench-table.md`).
        #[arg(long)]
        table: bool,
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Soak each server sim: many clients (80% behave, 10% garbage, 5% stop reading, 5% hang up mid-frame)
    /// and a restart half-way; prints delivered/s, p99 latency, peak RSS, crashes and samples lost.
    Soak {
        /// Instead: telemon serve over a fleet of 200 sims, a tenth restarted every 10 s (`sims/fleet-soak`).
        #[arg(long, conflicts_with_all = ["clients", "sims"])]
        fleet: bool,
        /// Instead: the whole product for an hour (or --minutes) with faults on a seeded schedule: telemon
        /// behind TLS and basic auth over 500 sims, a real Prometheus, VictoriaMetrics, an OTLP receiver,
        /// headless Chromium, recordings (`sims/product-soak`).
        #[arg(long, conflicts_with_all = ["clients", "sims", "fleet"])]
        all: bool,
        /// Minutes per sim (with --fleet: minutes of restarts; default 2; with --all: of the run, default 60).
        #[arg(long)]
        minutes: Option<f64>,
        /// With --all: the schedule's seed (default: from the clock; printed either way).
        #[arg(long, requires = "all")]
        seed: Option<u64>,
        /// Concurrent clients per sim.
        #[arg(long, default_value_t = 1000)]
        clients: usize,
        /// Only these sims (sys161, dyalog, smon, rvos; default all).
        sims: Vec<String>,
    },
    /// Measure `telemon serve` watching N targets per protocol: CPU, peak RSS, scrape latency and size.
    FleetBench {
        /// Targets per run (default: 10 100 1000).
        sizes: Vec<u32>,
        /// Only this protocol (repeatable; meter161, hmon, smon, sysinfo, mono; default all).
        #[arg(long = "protocol", value_name = "P")]
        protocols: Vec<String>,
        /// Seconds measured per run (telemon's window, then the floor's), after every target is up and
        /// a 5 s warm-up.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Run `telemon serve --record DIR` (every connection recorded), to measure what recording costs.
        #[arg(long)]
        record: bool,
        /// Also run each size with a remote write sender (to a sink in xtask), for the sender's cost.
        #[arg(long)]
        push: bool,
        /// Also run each size with a remote write sender whose queue is on disk (`queue_dir`).
        #[arg(long)]
        push_disk: bool,
        /// After the window, a second one of the same length with K web views open (each a
        /// `/api/v1/stream` read as a page reads it, after its sparklines), for the view's cost.
        #[arg(long, value_name = "K", default_value_t = 0)]
        views: usize,
        /// Run each row once per T (repeatable): `[serve] threads = T`, telemon on T cores; the notes say
        /// how many bytes a second telemon read from its targets in each (whether it kept up).
        #[arg(long = "threads", value_name = "T")]
        threads: Vec<usize>,
        /// Each target's period (meter161's interval, hmon's poll, sysinfo's every, the smon and Mono sims'
        /// interval), e.g. `10ms`; default 1s.
        #[arg(long, value_name = "DURATION", value_parser = fleet_bench::parse_period)]
        period: Option<std::time::Duration>,
        /// After the window, kill every sim and start it again at once: the time until every target is up
        /// again, and telemon's peak RSS meanwhile beside its steady RSS.
        #[arg(long)]
        storm: bool,
        /// Instead of N simulated instances, one sim serving this recording (from `telemon record`, one hmon,
        /// smon or sysinfo target) to every target as fast as asked: the peers then cost a copy, and the
        /// machine's cores go to telemon (for `--threads`).
        #[arg(long, value_name = "FILE")]
        replay: Option<std::path::PathBuf>,
        /// Run each row first with this telemon binary (an older build, say), then with the one built
        /// now: before and after in one run, each beside its own floor.
        #[arg(long, value_name = "BIN")]
        baseline: Option<std::path::PathBuf>,
    },
    /// Build the Debian package (target/debian/telemon_*.deb): binary, unit, conffile, man pages, completions.
    Deb {
        /// Then lint it, install it on this machine (as root), upgrade it and purge it
        /// (crates/telemon/tests/package.rs).
        #[arg(long)]
        test: bool,
    },
    /// Run the CI script, `.ci/run`.
    Ci,
    /// Regenerate docs/screenshots/ (the web view in headless Chromium, light and dark).
    Screenshots,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    match cli.command {
        Task::Sim { name: None, args, plain } if args.is_empty() => {
            if plain || !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                sim_all(&root)
            } else {
                sim_dashboard(&root)
            }
        }
        Task::Sim { name: None, .. } => bail!("name one emulator to pass it arguments: {}", names()),
        Task::Sim { name: Some(name), args, .. } => sim_one(&name, &args),
        Task::Fuzz { seconds, replay, jobs, minimize, target } => {
            fuzz(&root, seconds, replay, jobs, minimize, target.as_deref())
        }
        // Only the criterion targets: libtest benches of libs and bins would reject criterion's flags.
        Task::Bench { table: true, args } => bench_table::bench_table(&root, &args),
        Task::Bench { args, .. } => {
            run(Command::new(cargo()).args(["bench", "--workspace", "--bench", "*", "--"]).args(&args))
        }
        Task::Soak { all: true, minutes, seed, .. } => soak_all(&root, minutes.unwrap_or(60.0), seed),
        Task::Soak { fleet: true, minutes, .. } => soak_fleet(&root, minutes.unwrap_or(2.0)),
        Task::Soak { minutes, clients, sims, .. } => soak(&root, minutes.unwrap_or(2.0), clients, &sims),
        Task::FleetBench {
            sizes,
            protocols,
            seconds,
            record,
            push,
            push_disk,
            views,
            threads,
            period,
            storm,
            replay,
            baseline,
        } => {
            let push: Vec<fleet_bench::Push> =
                [(push, fleet_bench::Push::Memory), (push_disk, fleet_bench::Push::Disk)]
                    .into_iter()
                    .filter_map(|(on, p)| on.then_some(p))
                    .collect();
            let options = fleet_bench::Options {
                sizes,
                protocols,
                seconds,
                record,
                push,
                views,
                threads,
                period,
                storm,
                replay,
                baseline,
            };
            fleet_bench::fleet_bench(&root, &options)
        }
        Task::Deb { test } => {
            let package = deb::deb(&root)?;
            if test {
                deb::test(&package)?;
            }
            Ok(())
        }
        Task::Ci => run(Command::new("bash").arg(".ci/run")),
        Task::Screenshots => run(Command::new(cargo())
            .args(["test", "-p", "telemon", "--test", "web", "screenshots", "--", "--exact"])
            .env("TELEMON_SCREENSHOTS", root.join("docs/screenshots"))),
    }
}

/// How long the first `cargo xtask sim` builds on a fresh clone of a 2-core machine (measured; see the README).
const FIRST_BUILD: &str = "4 minutes";

fn soak(root: &Path, minutes: f64, clients: usize, only: &[String]) -> Result<()> {
    // The sims with clients to soak (the Mono agent dials out to an inspector: it has none).
    let soaked: Vec<(&str, &str)> = SIMS.iter().filter(|s| s.serves).map(|s| (s.name, s.bin)).collect();
    for name in only {
        if !soaked.iter().any(|(n, _)| n == name) {
            let names: Vec<&str> = soaked.iter().map(|(n, _)| *n).collect();
            bail!("no soak for {name:?}; known: {}", names.join(", "));
        }
    }
    let chosen: Vec<_> =
        soaked.iter().filter(|(n, _)| only.is_empty() || only.iter().any(|o| o == n)).collect();
    let mut build = Command::new(cargo());
    build.args(["build", "--release", "--quiet", "--package", "soak"]);
    for (_, bin) in &chosen {
        build.args(["--package", bin]);
    }
    run(&mut build)?;
    let release = binary(root, "soak").parent().and_then(Path::parent).expect("target dir").join("release");
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (name, bin) in chosen {
        eprintln!("[xtask] soaking {name} for {minutes} min with {clients} clients");
        // 1,000 clients need more than the usual 1,024 descriptors, in the soak and in the sim.
        let script = r#"ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@""#;
        let out = Command::new("sh")
            .args(["-c", script, "soak"])
            .arg(release.join("soak"))
            .arg(name)
            .arg("--bin")
            .arg(release.join(bin))
            .args(["--minutes", &minutes.to_string(), "--clients", &clients.to_string()])
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running the soak of {name}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        if rows.is_empty() {
            rows.extend(lines.next().map(str::to_owned));
        } else {
            lines.next();
        }
        rows.extend(lines.map(str::to_owned));
        if !out.status.success() {
            failed.push(*name);
        }
    }
    println!("{}", rows.join("\n"));
    if !failed.is_empty() {
        bail!("soak failed for {}", failed.join(", "));
    }
    Ok(())
}

/// `soak --fleet`: telemon over 200 sims for `minutes` of restarts ([`soak_release`] of fleet-soak).
fn soak_fleet(root: &Path, minutes: f64) -> Result<()> {
    eprintln!("[xtask] fleet soak: telemon over 200 sims for {minutes} min of restarts");
    soak_release(root, "fleet-soak", &["--minutes".into(), minutes.to_string()])
}

/// `soak --all`: the whole product for `minutes` ([`soak_release`] of product-soak, which finds the rules, the
/// test certificates and the OTLP receiver under `root`).
fn soak_all(root: &Path, minutes: f64, seed: Option<u64>) -> Result<()> {
    eprintln!("[xtask] product soak: everything at once for {minutes} min, with faults");
    let mut args = vec!["--root".into(), root.display().to_string(), "--minutes".into(), minutes.to_string()];
    if let Some(seed) = seed {
        args.extend(["--seed".into(), seed.to_string()]);
    }
    soak_release(root, "product-soak", &args)
}

/// Builds telemon and `package` (release) and runs the latter with `--telemon PATH` and `args`; it prints the
/// table, and its exit status is ours.
fn soak_release(root: &Path, package: &str, args: &[String]) -> Result<()> {
    run(Command::new(cargo()).args(["build", "--release", "--quiet", "-p", "telemon", "-p", package]))?;
    let release = binary(root, "soak").parent().and_then(Path::parent).expect("target dir").join("release");
    let status = Command::new(release.join(package))
        .arg("--telemon")
        .arg(release.join("telemon"))
        .args(args)
        .status()
        .with_context(|| format!("running {package}"))?;
    if !status.success() {
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn names() -> String {
    SIMS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn find_sim(name: &str) -> Result<&'static Sim> {
    SIMS.iter().find(|s| s.name == name).with_context(|| format!("no emulator {name:?}; known: {}", names()))
}

/// Builds `packages` (debug) with cargo's own progress showing, after a line that says what is built: a
/// first build of the emulators and telemon takes minutes on a small machine, and a silent one looks hung.
fn build(packages: &[&str]) -> Result<()> {
    eprintln!(
        "[xtask] building {} (debug; a first build takes about {FIRST_BUILD} on 2 cores, later ones seconds)",
        packages.join(", ")
    );
    let mut cmd = Command::new(cargo());
    cmd.arg("build");
    for p in packages {
        cmd.args(["--package", p]);
    }
    run(&mut cmd)
}

fn binary(root: &Path, bin: &str) -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    target.join("debug").join(bin)
}

fn sim_one(name: &str, args: &[String]) -> Result<()> {
    let sim = find_sim(name)?;
    run(Command::new(cargo())
        .args(["run", "--quiet", "--package", sim.package, "--bin", sim.bin, "--"])
        .args(args))
}

/// Starts every emulator and a telemon per emulator, and relays their output until Ctrl-C.
fn sim_all(root: &Path) -> Result<()> {
    if SIMS.is_empty() {
        bail!("no emulators yet");
    }
    let mut packages: Vec<&str> = SIMS.iter().map(|s| s.package).collect();
    packages.push("telemon");
    build(&packages)?;

    let children = killed_on_ctrlc()?;
    let mut relays = Vec::new();
    for sim in SIMS {
        let mut emulator = Command::new(binary(root, sim.bin));
        emulator.args(sim.args);
        relays.extend(spawn_relayed(&children, &format!("{}-sim", sim.name), &mut emulator)?);
        let mut watcher = Command::new(binary(root, "telemon"));
        watcher.args(sim.telemon);
        relays.extend(spawn_relayed(&children, sim.name, &mut watcher)?);
    }
    // The web view: one `telemon serve` over every emulator but the Mono agent, whose inspector port the
    // `telemon mono listen` above holds.
    let logs = sim_logs(root)?;
    let config = logs.join("web.toml");
    std::fs::write(&config, SIMS.iter().filter(|s| s.name != "mono").map(|s| s.fleet).collect::<String>())?;
    let mut web = Command::new(binary(root, "telemon"));
    web.arg("serve").arg("--config").arg(&config).args(["--listen", sims::WEB]);
    relays.extend(spawn_relayed(&children, "web", &mut web)?);
    eprintln!(
        "[xtask] running {}; the web view is at http://{}/; Ctrl-C stops everything",
        names(),
        sims::WEB
    );
    for relay in relays {
        let _ = relay.join();
    }
    for child in children.lock().unwrap().iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    Ok(())
}

/// The children list that Ctrl-C empties by killing each child.
fn killed_on_ctrlc() -> Result<Arc<Mutex<Vec<Child>>>> {
    let children: Arc<Mutex<Vec<Child>>> = Arc::default();
    let handled = Arc::clone(&children);
    ctrlc::set_handler(move || {
        for child in handled.lock().unwrap().iter_mut() {
            let _ = child.kill();
        }
    })?;
    Ok(children)
}

/// Every emulator in the background, logging to `target/sim-logs/NAME.log`, and `telemon top` over them in the
/// foreground; when the dashboard quits, the emulators are stopped.
fn sim_dashboard(root: &Path) -> Result<()> {
    let mut packages: Vec<&str> = SIMS.iter().map(|s| s.package).collect();
    packages.push("telemon");
    build(&packages)?;
    let logs = sim_logs(root)?;
    let config = logs.join("telemon.toml");
    std::fs::write(&config, SIMS.iter().map(|s| s.fleet).collect::<Vec<_>>().join(""))?;

    let children = killed_on_ctrlc()?;
    for sim in SIMS {
        let log = std::fs::File::create(logs.join(format!("{}.log", sim.name)))?;
        let child = Command::new(binary(root, sim.bin))
            .args(sim.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", sim.bin))?;
        children.lock().unwrap().push(child);
    }
    // A moment to bind, so the dashboard does not open on connection errors.
    std::thread::sleep(std::time::Duration::from_millis(500));
    eprintln!("[xtask] the web view of the dashboard's targets: http://{}/", sims::WEB);
    let status = Command::new(binary(root, "telemon"))
        .arg("top")
        .arg("--config")
        .arg(&config)
        .arg("--log")
        .arg(logs.join("telemon.log"))
        .args(["--web", sims::WEB])
        .status()
        .context("starting telemon top");
    eprintln!("[xtask] (the web view was at http://{}/)", sims::WEB);
    for child in children.lock().unwrap().iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    eprintln!("[xtask] emulators stopped; their logs are in {}", logs.display());
    let status = status?;
    if !status.success() {
        bail!("telemon top failed ({status})");
    }
    Ok(())
}

/// `target/sim-logs/` (under `CARGO_TARGET_DIR` when set), created.
fn sim_logs(root: &Path) -> Result<PathBuf> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let logs = target.join("sim-logs");
    std::fs::create_dir_all(&logs)?;
    Ok(logs)
}

/// Spawns `cmd` and relays each line of its stdout and stderr with a `[prefix]`.
fn spawn_relayed(
    children: &Arc<Mutex<Vec<Child>>>,
    prefix: &str,
    cmd: &mut Command,
) -> Result<Vec<std::thread::JoinHandle<()>>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    children.lock().unwrap().push(child);
    Ok(vec![relay(prefix.to_string(), out), relay(prefix.to_string(), err)])
}

fn relay(prefix: String, stream: impl Read + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            match line {
                Ok(line) => println!("[{prefix}] {line}"),
                Err(_) => break,
            }
        }
    })
}

/// `cfg(fuzzing)` added to the flags a cargo build of `fuzz/` passes to rustc. `fuzz/.cargo/config.toml` sets
/// it too, but cargo ignores that file's `build.rustflags` when `RUSTFLAGS` (or `CARGO_ENCODED_RUSTFLAGS`) is
/// set: the flag is appended to whichever of the two is in use.
fn with_cfg_fuzzing(cmd: &mut Command) {
    const CFG: [&str; 2] = ["--cfg", "fuzzing"];
    match std::env::var("CARGO_ENCODED_RUSTFLAGS") {
        Ok(encoded) if !encoded.is_empty() => {
            cmd.env("CARGO_ENCODED_RUSTFLAGS", format!("{encoded}\x1f{}", CFG.join("\x1f")));
        }
        _ => {
            let flags = std::env::var("RUSTFLAGS").unwrap_or_default();
            cmd.env_remove("CARGO_ENCODED_RUSTFLAGS");
            cmd.env("RUSTFLAGS", format!("{flags} {}", CFG.join(" ")).trim_start());
        }
    }
}

fn fuzz_targets(root: &Path) -> Result<Vec<String>> {
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(root.join("fuzz/fuzz_targets"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            targets.push(path.file_stem().unwrap().to_string_lossy().into_owned());
        }
    }
    targets.sort();
    Ok(targets)
}

fn fuzz(
    root: &Path,
    seconds: u64,
    replay: bool,
    jobs: usize,
    minimize: bool,
    only: Option<&str>,
) -> Result<()> {
    let all = fuzz_targets(root)?;
    let targets: Vec<String> = match only {
        Some(t) if all.iter().any(|a| a == t) => vec![t.to_string()],
        Some(t) => bail!("no fuzz target {t:?}; known: {}", all.join(", ")),
        None => all,
    };
    if replay {
        return replay_corpora(root, &targets);
    }
    let has_cargo_fuzz = Command::new(cargo())
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !has_cargo_fuzz.is_ok_and(|s| s.success()) {
        eprintln!("[xtask] installing cargo-fuzz");
        run(Command::new(cargo()).args(["install", "cargo-fuzz", "--locked"]))?;
    }
    // New inputs go to a git-ignored working corpus (fuzz/artifacts/TARGET/corpus); the committed seed corpus is
    // only read, unless --minimize merges the run's finds into it.
    fuzz_run::campaign(root, &targets, seconds, jobs, minimize)
}

/// Runs each target's seed corpus once through the fuzz binary itself (libFuzzer with `-runs=0`
/// executes every corpus input and exits), built with plain cargo on stable and `--cfg fuzzing`, as
/// cargo-fuzz builds it (the crates' `fuzz` modules exist only under that cfg, or in their unit tests).
fn replay_corpora(root: &Path, targets: &[String]) -> Result<()> {
    let fuzz_dir = root.join("fuzz");
    let mut build = Command::new(cargo());
    build.current_dir(&fuzz_dir).args(["build", "--release", "--quiet"]);
    for target in targets {
        build.args(["--bin", target]);
    }
    with_cfg_fuzzing(&mut build);
    run(&mut build)?;
    for target in targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        if !corpus.is_dir() {
            bail!("fuzz target {target} has no seed corpus at {}", corpus.display());
        }
        let inputs = std::fs::read_dir(&corpus)?.count();
        eprintln!("[xtask] replaying {inputs} inputs through {target}");
        // A crashing input is written under fuzz/artifacts/ (git-ignored), not into the work tree.
        let artifacts = fuzz_dir.join("artifacts").join(target);
        std::fs::create_dir_all(&artifacts)?;
        run(Command::new(fuzz_dir.join("target/release").join(target))
            .arg(&corpus)
            .arg("-runs=0")
            .arg(format!("-artifact_prefix={}/", artifacts.display())))?;
    }
    Ok(())
}
