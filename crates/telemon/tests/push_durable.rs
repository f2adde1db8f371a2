//! Push that loses nothing (a disk queue per sender, `queue_dir`), against real receivers started by the test
//! on free loopback ports: VictoriaMetrics 1.79 and Prometheus 2.42 (`--web.enable-remote-write-receiver`,
//! `out_of_order_time_window` unset, so that a sample sent out of order would be refused).
//!
//! `telemon serve` over two sys161 sims, pushing every second to both, is killed with SIGKILL 20 times at
//! random moments (a seeded generator; `TELEMON_KILL_SEED` picks another run) and started again at once:
//! five stops fall in an outage of both receivers (two of them SIGTERM, which must keep the backlog), three
//! kills while the backlog of that outage is being sent. A last run drains the queues and stops with SIGTERM. Then, per series and receiver, every second telemon
//! ran must have its sample (except the last `queue_sync` before each kill), none twice in Prometheus, and
//! Prometheus must have refused no sample as out of order. The table of kills, samples expected, received,
//! missing and duplicated is printed.
//!
//! Also: a full disk (the queue on a 2 MiB tmpfs mounted in telemon's own mount namespace, `unshare -m`) drops
//! and counts while collection and scrapes go on, and sends again once space is freed; a long outage,
//! compressed (1,000 ticks of 10 ms), loses nothing under the bound and exactly the oldest samples over it.
//!
//! A missing receiver (or, for the full disk, `unshare` and root) fails the test under `CI=true` (`.ci/run`
//! installs the receivers) and elsewhere prints `SKIPPED:` and passes. Waits poll under a safety net; nothing
//! asserts how long anything took.

use std::collections::BTreeMap;
use std::time::Duration;

mod support;
use support::{need_on_path, Prometheus, Receiver, Telemon, VictoriaMetrics};

/// Stops in all: 20 SIGKILLs and the [`GRACEFUL`] SIGTERMs.
const STOPS: usize = 22;
const KILLS: usize = STOPS - GRACEFUL.len();
/// The stops (1-based) that fall in an outage of both receivers, and those right after it, while the
/// backlog is being sent.
const OUTAGE: std::ops::RangeInclusive<usize> = 6..=10;
const BACKLOG: std::ops::RangeInclusive<usize> = 11..=13;
/// Stops (1-based) made with SIGTERM instead of SIGKILL, in the outage: the next start sends their backlog.
const GRACEFUL: [usize; 2] = [8, 9];
/// The senders' `queue_sync` and `batch`, in ms.
const SYNC_MS: i64 = 1_000;
const BATCH_MS: i64 = 1_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A small seeded generator (xorshift64*): the kill moments, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// One run of telemon: from when it answered its first scrape to its kill (or stop).
#[derive(Debug, Clone, Copy)]
struct Window {
    start_ms: i64,
    end_ms: i64,
}

/// Starts `telemon serve` and waits until it answers `/metrics`.
async fn start(config: &std::path::Path) -> (Telemon, std::net::SocketAddr, i64) {
    let listen = support::free_addr();
    let telemon =
        Telemon::spawn(&["serve", "--config", config.to_str().unwrap(), "--listen", &listen.to_string()]);
    support::until("telemon to answer /metrics", Duration::from_millis(20), async || {
        matches!(support::http_get(listen, "/metrics", &[]).await, Ok((200, _))).then_some(())
    })
    .await;
    (telemon, listen, now_ms())
}

/// A series' values on `/metrics`, summed over the lines that start with `prefix`.
fn sum_of(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Per series of one receiver: (samples in the windows, missing seconds, timestamps twice).
fn check(samples: &[(i64, f64)], windows: &[Window]) -> (usize, Vec<(i64, i64)>, usize) {
    let ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
    let twice = ts.windows(2).filter(|w| w[0] == w[1]).count();
    let mut received = 0;
    let mut missing = Vec::new();
    for w in windows {
        // From the first second after the start (the first tick, and the targets' first rows) to the last
        // queue_sync and tick before the end: each second holds a sample.
        let (from, to) = (w.start_ms + 2 * BATCH_MS, w.end_ms - SYNC_MS - BATCH_MS);
        let inside: Vec<i64> = ts.iter().copied().filter(|t| *t >= w.start_ms && *t <= w.end_ms).collect();
        received += inside.len();
        if to <= from {
            continue;
        }
        let mut edge = vec![from];
        edge.extend(inside.iter().copied().filter(|t| *t > from && *t < to));
        edge.push(to);
        for pair in edge.windows(2) {
            if pair[1] - pair[0] > BATCH_MS * 3 / 2 {
                missing.push((pair[0], pair[1]));
            }
        }
    }
    (received, missing, twice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_9s_during_outages_and_backlogs_lose_nothing_collected() {
    let test = "twenty_kill_9s_during_outages_and_backlogs_lose_nothing_collected";
    let hint = "apt-get install prometheus victoria-metrics (bash .ci/push-receivers.sh)";
    let (Some(prom_bin), Some(vm_bin)) =
        (need_on_path(test, "prometheus", hint), need_on_path(test, "victoria-metrics", hint))
    else {
        return;
    };
    let seed = std::env::var("TELEMON_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(37u64);
    let mut rng = Rng(seed.max(1));
    let (vdir, pdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut vm = Some(Receiver::vm(VictoriaMetrics::new(&vm_bin).data(vdir.path())).await);
    let mut prom = Some(Receiver::prometheus_as(Prometheus::new(&prom_bin).data(pdir.path())).await);
    let (vm_addr, prom_addr) = (vm.as_ref().unwrap().addr(), prom.as_ref().unwrap().addr());

    let sims: Vec<(tempfile::TempDir, sys161_sim::Running)> = (0..2)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            let sim = sys161_sim::Running::spawn(dir.path(), sys161_sim::Config::default()).unwrap();
            (dir, sim)
        })
        .collect();
    let work = tempfile::tempdir().unwrap();
    let mut toml = String::new();
    for (name, (dir, _)) in ["a", "b"].iter().zip(&sims) {
        toml += &format!(
            "[[meter161]]\nname = \"{name}\"\ndir = \"{}\"\ninterval = \"200ms\"\n",
            dir.path().display()
        );
    }
    for (name, addr) in [("vm", vm_addr), ("prom", prom_addr)] {
        toml += &format!(
            "[[remote_write]]\nname = \"{name}\"\nurl = \"http://{addr}/api/v1/write\"\nbatch = \"1s\"\n\
             queue_dir = \"{}\"\nqueue_sync = \"1s\"\ntimeout = \"2s\"\n",
            work.path().join(name).display()
        );
    }
    let config = work.path().join("telemon.toml");
    std::fs::write(&config, toml).unwrap();

    let mut windows = Vec::new();
    for kill in 1..=STOPS {
        if kill == *OUTAGE.start() {
            vm.take().unwrap().stop().await;
            prom.take().unwrap().stop().await;
        }
        if kill == *BACKLOG.start() {
            vm = Some(Receiver::vm(VictoriaMetrics::new(&vm_bin).data(vdir.path()).at(vm_addr)).await);
            let again = Prometheus::new(&prom_bin).data(pdir.path()).at(prom_addr);
            prom = Some(Receiver::prometheus_as(again).await);
        }
        let (telemon, _, start_ms) = start(&config).await;
        // 1.5 s to 4 s: within a batch, during a request, between a sync and the next.
        tokio::time::sleep(Duration::from_millis(1_500 + rng.below(2_500))).await;
        if GRACEFUL.contains(&kill) {
            // A graceful stop in the outage keeps the backlog on disk for the next start.
            let (status, _, err) = telemon.interrupt().await;
            assert_eq!(status, 0, "{err:?}");
            assert!(!err.iter().any(|l| l.contains("dropped")), "{err:?}");
        } else {
            telemon.kill().await;
        }
        windows.push(Window { start_ms, end_ms: now_ms() });
    }

    // A last run sends what is left, then stops gracefully.
    let (telemon, listen, start_ms) = start(&config).await;
    support::until("both disk queues drained", Duration::from_millis(250), async || {
        let (_, metrics) = support::http_get(listen, "/metrics", &[]).await.ok()?;
        let queued = sum_of(&metrics, "telemon_sender_queue_disk_bytes{");
        let sent = sum_of(&metrics, "telemon_sender_samples_total{sender=\"vm\",result=\"sent\"}");
        (queued == 0.0
            && sent > 0.0
            && metrics.contains("telemon_sender_queue_disk_bytes{sender=\"prom\"} 0"))
        .then_some(metrics)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, last) = support::http_get(listen, "/metrics", &[]).await.unwrap();
    let (status, _, err) = telemon.interrupt().await;
    assert_eq!(status, 0, "{err:?}");
    windows.push(Window { start_ms, end_ms: now_ms() });
    for reason in
        ["dropped_4xx", "dropped_queue_full", "dropped_shutdown", "dropped_disk_error", "dropped_corrupt"]
    {
        assert_eq!(
            sum_of(&last, &format!("telemon_sender_samples_total{{sender=\"prom\",result=\"{reason}\"}}")),
            0.0
        );
        assert_eq!(
            sum_of(&last, &format!("telemon_sender_samples_total{{sender=\"vm\",result=\"{reason}\"}}")),
            0.0
        );
    }
    for (_, sim) in sims {
        sim.stop().await.unwrap();
    }

    let (vm, prom) = (vm.unwrap(), prom.unwrap());
    let (_, prom_metrics) = support::http_get(prom.addr(), "/metrics", &[]).await.unwrap();
    let out_of_order = sum_of(&prom_metrics, "prometheus_tsdb_out_of_order_samples_total");
    let expected_per_series: i64 = windows.iter().map(|w| (w.end_ms - w.start_ms) / BATCH_MS).sum();
    let mut table = String::from(
        "| receiver | series | kills | samples expected | received | missing (s) | twice |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    let mut failures = Vec::new();
    for receiver in [&vm, &prom] {
        let kind = if receiver.kind == support::Kind::Vm { "VictoriaMetrics" } else { "Prometheus" };
        let mut series: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
        for name in ["telemon_target_up", "sys161_kernel_instructions_total"] {
            for target in ["a", "b"] {
                let selector = format!("{name}{{target=\"{target}\"}}");
                let found = if receiver.kind == support::Kind::Vm {
                    receiver.export(&selector).await
                } else {
                    receiver.query(&format!("{selector}[1h]")).await
                };
                let mut samples: Vec<(i64, f64)> = found.into_iter().flat_map(|(_, s)| s).collect();
                samples.sort_by_key(|s| s.0);
                series.insert(selector, samples);
            }
        }
        for (selector, samples) in &series {
            let (received, missing, twice) = check(samples, &windows);
            let missing_s: i64 = missing.iter().map(|(a, b)| (b - a) / BATCH_MS).sum();
            table += &format!(
                "| {kind} | `{selector}` | {KILLS} | {expected_per_series} | {received} | {missing_s} | {twice} |\n"
            );
            if !missing.is_empty() {
                failures.push(format!("{kind} {selector}: no sample between {missing:?}"));
            }
            // VictoriaMetrics keeps a resent sample twice: at most one request's worth per kill.
            let twice_bound = if receiver.kind == support::Kind::Vm { STOPS + 1 } else { 0 };
            if twice > twice_bound {
                failures.push(format!("{kind} {selector}: {twice} timestamps twice"));
            }
        }
    }
    eprintln!("kill -9 loop (seed {seed}), windows {windows:?}\n{table}Prometheus out-of-order refusals: {out_of_order}");
    assert_eq!(out_of_order, 0.0, "Prometheus refused samples as out of order");
    assert!(failures.is_empty(), "{failures:#?}\n{table}");
    vm.stop().await;
    prom.stop().await;
}

/// An smon stream of `n` values that all change every sample (many samples per tick, to fill a queue fast).
struct Many(u64, u64);

impl smon_sim::Source for Many {
    fn sample(&mut self) -> Vec<smon_codec::Sample> {
        self.0 += 1;
        (0..self.1).map(|i| smon_codec::Sample::new("load.v", [i], self.0 * 1000 + i)).collect()
    }
}

/// An smon sim serving `values` values every 10 ms on a loopback port.
async fn smon(values: u64, shutdown: &sim_common::Shutdown) -> String {
    let (l, addr) = support::listener().await;
    let config = smon_sim::Config { interval: smon_sim::MIN_INTERVAL, ..smon_sim::Config::default() };
    tokio::spawn(smon_sim::serve(l, Many(0, values), config, shutdown.clone()));
    addr
}

/// Writes `dir/telemon.toml`: the smon target `box` at `smon_addr`, pushed every `batch` to VictoriaMetrics at
/// `vm_addr` by the sender `vm` with its disk queue in `queue` (and the `extra` lines); returns its path.
fn smon_to_vm(
    dir: &std::path::Path,
    smon_addr: &str,
    vm_addr: std::net::SocketAddr,
    batch: &str,
    queue: &std::path::Path,
    extra: &str,
) -> std::path::PathBuf {
    let config = dir.join("telemon.toml");
    let text = format!(
        "[[smon]]\nname = \"box\"\nconnect = \"{smon_addr}\"\n\
         [[remote_write]]\nname = \"vm\"\nurl = \"http://{vm_addr}/api/v1/write\"\nbatch = \"{batch}\"\n\
         queue_dir = \"{}\"\ntimeout = \"2s\"\n{extra}",
        queue.display()
    );
    std::fs::write(&config, text).unwrap();
    config
}

/// The telemon_sender_samples_total of `result` on `metrics`.
fn result(metrics: &str, result: &str) -> f64 {
    sum_of(metrics, &format!("telemon_sender_samples_total{{sender=\"vm\",result=\"{result}\"}}"))
}

/// A full disk: the queue directory is a 2 MiB tmpfs in telemon's own mount namespace (`unshare -m`), nearly
/// filled before telemon starts, while the receiver is down. Collection and scrapes go on, what cannot be
/// written is dropped and counted; once a file is removed from the tmpfs and the receiver is back, the queue
/// takes writes again and sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_drops_and_counts_then_sending_resumes_when_space_is_freed() {
    let test = "a_full_disk_drops_and_counts_then_sending_resumes_when_space_is_freed";
    let hint = "apt-get install victoria-metrics util-linux, and run as root";
    let root = nix_root();
    let (Some(vm_bin), Some(unshare), Some(nsenter)) = (
        need_on_path(test, "victoria-metrics", hint),
        support::need(test, "unshare -m as root", support::on_path("unshare").filter(|_| root), hint),
        support::need(test, "nsenter as root", support::on_path("nsenter").filter(|_| root), hint),
    ) else {
        return;
    };
    let shutdown = sim_common::Shutdown::new();
    let smon_addr = smon(50, &shutdown).await;
    let vm_addr = support::free_addr();
    let work = tempfile::tempdir().unwrap();
    let queue = work.path().join("queue");
    std::fs::create_dir_all(&queue).unwrap();
    let config = smon_to_vm(work.path(), &smon_addr, vm_addr, "20ms", &queue, "");
    let listen = support::free_addr();
    // The tmpfs leaves 64 KiB free; telemon runs in the namespace that has it.
    let script = format!(
        "mount -t tmpfs -o size=2m tmpfs {q} && head -c $((2048 * 1024 - 65536)) /dev/zero > {q}/filler && \
         exec {telemon} serve --config {c} --listen {listen}",
        q = queue.display(),
        telemon = support::TELEMON,
        c = config.display()
    );
    let telemon = Telemon::spawn_program(&unshare, &["-m", "sh", "-c", &script]);
    let metrics = async || support::http_get(listen, "/metrics", &[]).await.ok().map(|(_, m)| m);
    let full =
        support::until("the disk to fill and drops to be counted", Duration::from_millis(100), async || {
            let m = metrics().await?;
            (result(&m, "dropped_disk_error") > 0.0).then_some(m)
        })
        .await;
    // Collection and scrapes go on: the target is up and its values keep changing.
    assert!(full.contains("telemon_target_up{protocol=\"smon\",target=\"box\"} 1"), "{full}");
    let value = |m: &str| sum_of(m, "smon_value{target=\"box\",name=\"load.v\",index=\"0\"}");
    support::until(
        "the values to keep changing while the disk is full",
        Duration::from_millis(100),
        async || {
            let m = metrics().await?;
            (value(&m) > value(&full)
                && result(&m, "dropped_disk_error") > result(&full, "dropped_disk_error"))
            .then_some(())
        },
    )
    .await;

    // Space comes back, and so does the receiver.
    let status = tokio::process::Command::new(&nsenter)
        .args(["-t", &telemon.pid().to_string(), "-m", "rm", &format!("{}/filler", queue.display())])
        .status()
        .await
        .unwrap();
    assert!(status.success(), "nsenter rm");
    let vm = Receiver::vm(VictoriaMetrics::new(&vm_bin).at(vm_addr)).await;
    let freed = support::until("sending to resume", Duration::from_millis(100), async || {
        let m = metrics().await?;
        (result(&m, "sent") > 0.0).then_some(m)
    })
    .await;
    // The disk takes writes again: the drops stop, and what is written is sent.
    support::until("a second with no new drop and more sent", Duration::from_millis(500), async || {
        let before = metrics().await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = metrics().await?;
        (result(&after, "dropped_disk_error") == result(&before, "dropped_disk_error")
            && result(&after, "sent") > result(&before, "sent"))
        .then_some(())
    })
    .await;
    let received: usize = vm.export("smon_value{target=\"box\"}").await.iter().map(|s| s.1.len()).sum();
    assert!(received > 0, "VictoriaMetrics got what was queued after the disk freed up");
    let (status, _, err) = telemon.interrupt().await;
    assert_eq!(status, 0, "{err:?}");
    let logged = err.iter().filter(|l| l.contains("dropping what cannot be written")).count();
    assert_eq!(logged, 1, "logged once a minute at most: {err:?}");
    eprintln!(
        "full disk: {} samples dropped (disk error), then {} sent",
        result(&freed, "dropped_disk_error"),
        result(&freed, "sent")
    );
    shutdown.cancel();
    vm.stop().await;
}

fn nix_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A long outage, compressed: values that change every 10 ms, sampled every 10 ms, for 1,000 ticks (what a 1 s
/// batch makes in about 17 minutes). With a bound that is not reached (50 values, 64 MiB) nothing is lost; with one
/// that is (200 values, 1 MiB), exactly the oldest samples are dropped, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_outage_loses_nothing_under_the_bound_and_exactly_the_oldest_over_it() {
    let test = "a_long_outage_loses_nothing_under_the_bound_and_exactly_the_oldest_over_it";
    let Some(vm_bin) = need_on_path(test, "victoria-metrics", "apt-get install victoria-metrics") else {
        return;
    };
    for (bound, values, reached) in [("64MiB", 50, false), ("1MiB", 200, true)] {
        let shutdown = sim_common::Shutdown::new();
        let smon_addr = smon(values, &shutdown).await;
        let vm_addr = support::free_addr();
        let work = tempfile::tempdir().unwrap();
        let bound_line = format!("queue_max_bytes = \"{bound}\"\n");
        let config =
            smon_to_vm(work.path(), &smon_addr, vm_addr, "10ms", &work.path().join("q"), &bound_line);
        let (telemon, listen, started_ms) = start(&config).await;
        let metrics = async || support::http_get(listen, "/metrics", &[]).await.ok().map(|(_, m)| m);
        // The outage: the receiver is not there for 1,000 ticks of samples.
        let outage = support::until("1,000 ticks queued", Duration::from_millis(200), async || {
            let m = metrics().await?;
            let ticks = sum_of(&m, "smon_value{target=\"box\",name=\"load.v\",index=\"0\"}") / 1000.0;
            (ticks >= 1000.0).then_some(m)
        })
        .await;
        let vm = Receiver::vm(VictoriaMetrics::new(&vm_bin).at(vm_addr)).await;
        let back = std::time::Instant::now();
        let drained = support::until("the backlog sent", Duration::from_millis(200), async || {
            let m = metrics().await?;
            (sum_of(&m, "telemon_sender_queue_disk_bytes{") < 20_000.0 && result(&m, "sent") > 0.0)
                .then_some(m)
        })
        .await;
        let (status, _, err) = telemon.interrupt().await;
        assert_eq!(status, 0, "{err:?}");
        shutdown.cancel();
        let dropped = result(&drained, "dropped_queue_full");
        // Per series: the samples VictoriaMetrics holds are one unbroken run to the end (nothing missing
        // after the first one kept); over the bound, that run starts late: the oldest are what went.
        let series = vm.export("smon_value{target=\"box\"}").await;
        assert_eq!(series.len() as u64, values, "every value");
        let mut first_kept = Vec::new();
        for (labels, samples) in &series {
            let ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
            let steps: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).filter(|d| *d > 500).collect();
            assert!(steps.is_empty(), "{bound}: {labels:?} has a hole {steps:?}");
            first_kept.push(ts[0]);
        }
        let queued_at_outage = result(&outage, "sent") + result(&outage, "dropped_queue_full");
        let drain_s = back.elapsed().as_secs_f64();
        eprintln!(
            "long outage, bound {bound}: {dropped} samples dropped (queue full), {} sent ({queued_at_outage} before \
             the receiver came back), the backlog drained in {drain_s:.1} s: {:.0} samples/s",
            result(&drained, "sent"),
            result(&drained, "sent") / drain_s
        );
        if reached {
            assert!(dropped > 0.0, "the 1 MiB bound is reached by 1,000 ticks of 200 values");
            // What is gone is the oldest: every series' first kept sample is seconds after the outage began.
            assert!(first_kept.iter().all(|t| *t > started_ms + 2_000), "{first_kept:?} from {started_ms}");
        } else {
            assert_eq!(dropped, 0.0, "nothing lost under the bound");
            assert!(first_kept.iter().all(|t| *t < started_ms + 2_000), "{first_kept:?} from {started_ms}");
            assert_eq!(
                result(&drained, "dropped_disk_error") + result(&drained, "dropped_corrupt"),
                0.0,
                "{drained}"
            );
        }
        vm.stop().await;
    }
}
