//! The soak itself: setting everything up, the schedule, the observers, the checks and the table.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use fleet_soak::{
    label, match_causes, observe, parse_line, percentile, pick, Cause, Kind, Observed, Place, Rng, Slot,
};
use telemon_test_support::browser::Browser;
use telemon_test_support::{free_addr, Prometheus, Receiver, VictoriaMetrics};

use crate::analysis::{ended_down, gaps, inside, trend, Gaps, Losses, Trend};
use crate::plan::{Fault, Plan};
use crate::proc::{Api, Namespace, OtlpReceiver, Telemon};

/// How late a transition may be seen after its cause in telemon's own `/metrics` (a 1 s scrape; telemon backs
/// off up to 5 s between attempts, and the machine is loaded).
const GRACE: Duration = Duration::from_secs(15);
/// Prometheus's scrape interval.
const SCRAPE_INTERVAL: u64 = 15;
/// The senders' batch (remote write) and `queue_sync`, in ms.
const BATCH_MS: i64 = 1000;
/// The user Prometheus, the browser and the soak authenticate as.
const USER: &str = "prometheus";

/// The real components the soak needs, found on this machine.
#[derive(Debug, Clone)]
pub struct Components {
    /// Prometheus (Debian's `prometheus`).
    pub prometheus: PathBuf,
    /// VictoriaMetrics (Debian's `victoria-metrics`).
    pub victoria_metrics: PathBuf,
    /// chromedriver (Chromium itself is `/usr/bin/chromium`).
    pub chromedriver: PathBuf,
    /// The push virtualenv's Python (with `opentelemetry-proto`).
    pub python: PathBuf,
}

impl Components {
    /// Each component, or the list of those missing with how to install them. `venv` is the push virtualenv
    /// (`.ci/push-receivers.sh` makes `target/push-venv`).
    pub fn find(venv: &Path) -> std::result::Result<Components, Vec<(String, String)>> {
        use telemon_test_support::on_path;
        let mut missing = Vec::new();
        let mut need = |what: &str, found: Option<PathBuf>, hint: &str| {
            if found.is_none() {
                missing.push((what.to_owned(), hint.to_owned()));
            }
            found.unwrap_or_default()
        };
        let prometheus =
            need("prometheus", on_path("prometheus"), "apt-get install prometheus (bash .ci/prometheus.sh)");
        let victoria_metrics =
            need("victoria-metrics", on_path("victoria-metrics"), "bash .ci/push-receivers.sh");
        let chromium = Path::new("/usr/bin/chromium");
        need(
            "chromium",
            chromium.is_file().then(|| chromium.to_owned()),
            "apt-get install chromium (bash .ci/browser.sh)",
        );
        let chromedriver = need(
            "chromedriver",
            on_path("chromedriver"),
            "apt-get install chromium-driver (bash .ci/browser.sh)",
        );
        let python = venv.join("bin/python3");
        let python = need(
            "the push virtualenv",
            python.is_file().then_some(python),
            "bash .ci/push-receivers.sh makes target/push-venv (or set TELEMON_PUSH_VENV)",
        );
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() == 0 };
        need(
            "unshare and nsenter as root",
            (root && on_path("unshare").is_some() && on_path("nsenter").is_some()).then(PathBuf::new),
            "run as root with util-linux (the queues' tmpfs is mounted in a mount namespace of telemon's own)",
        );
        if missing.is_empty() {
            Ok(Components { prometheus, victoria_metrics, chromedriver, python })
        } else {
            Err(missing)
        }
    }
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct Options {
    /// The telemon binary (release for `cargo xtask soak --all`).
    pub telemon: PathBuf,
    /// The workspace root (the rules, the test certificates, the OTLP receiver's script).
    pub root: PathBuf,
    /// The components.
    pub components: Components,
    /// Minutes of the run, after every target is up.
    pub minutes: f64,
    /// The schedule's and the picks' seed.
    pub seed: u64,
    /// Sims of each of the five kinds in the config file (the Mono agents dial in).
    pub per_kind: usize,
    /// smon targets listed in the `[[file_sd]]` file at once.
    pub file_sd: usize,
    /// Dyalog interpreters dialling the `[[hmon_listen]]`.
    pub hmon_dialers: usize,
    /// Bogus dial-in connections in the burst.
    pub burst: usize,
    /// The OTLP sender's batch.
    pub otlp_batch: &'static str,
}

impl Options {
    /// The hour-long form's numbers (520 targets): 90 sims of each kind, 60 in file_sd, 10 dialling interpreters.
    pub fn full(telemon: PathBuf, root: PathBuf, components: Components, minutes: f64, seed: u64) -> Options {
        Options {
            telemon,
            root,
            components,
            minutes,
            seed,
            per_kind: 90,
            file_sd: 60,
            hmon_dialers: 10,
            burst: 2000,
            otlp_batch: "10s",
        }
    }
}

/// The outcome: the table (markdown), and whether every check passed.
#[derive(Debug, Clone)]
pub struct Report {
    /// The schedule and the table.
    pub text: String,
    /// Every check passed.
    pub passed: bool,
}

/// One sample of the figures watched every 10 s.
#[derive(Debug, Clone, Copy)]
struct Figures {
    /// Seconds since the start of the run.
    t: f64,
    /// telemon's run (0 before the SIGKILL, 1 after).
    run: u32,
    rss_kib: f64,
    fds: f64,
    cpu_ticks: f64,
    history_bytes: f64,
    /// Series the history holds.
    history_series: f64,
}

/// One of [`Figures`].
type Figure = fn(&Figures) -> f64;

/// A figure judged flat or not: its name, how to read it, the tolerance (relative), the slack (absolute), its
/// unit.
type Watched = (&'static str, Figure, f64, f64, &'static str);

/// What the 1 s scrapes of `/metrics` saw.
#[derive(Debug, Default)]
struct Scraped {
    obs: Observed,
    /// target -> telemon_target_connects_total, of the latest scrape.
    connects: HashMap<String, f64>,
    /// (sender, result) -> telemon_sender_samples_total, of the latest scrape of the current run.
    senders: HashMap<(String, String), f64>,
    /// The same, as last seen in each finished run.
    finished: Vec<HashMap<(String, String), f64>>,
    /// The largest increase of the OTLP sender's `sent` between two scrapes.
    otlp_step: f64,
    /// `telemon_config_last_reload_successful` of the latest scrape.
    reload_ok: Option<f64>,
    /// The latest scrape's time.
    at: Option<Instant>,
}

impl Scraped {
    fn sent(&self, sender: &str, result: &str) -> f64 {
        let key = (sender.to_owned(), result.to_owned());
        self.finished.iter().chain([&self.senders]).filter_map(|m| m.get(&key)).sum()
    }
}

type Shared = Arc<Mutex<Scraped>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Scraped> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Applies one `/metrics` body.
fn absorb(s: &mut Scraped, body: &str, at: Instant) {
    observe(&mut s.obs, body, at);
    s.connects.clear();
    let before_otlp = s.senders.get(&("otlp".to_owned(), "sent".to_owned())).copied();
    for line in body.lines() {
        let Some(name) = line.split('{').next() else { continue };
        match name {
            "telemon_target_connects_total" => {
                if let Some((_, labels, v)) = parse_line(line) {
                    if let (Some(t), Ok(v)) = (label(&labels, "target"), v.parse()) {
                        s.connects.insert(t.to_owned(), v);
                    }
                }
            }
            "telemon_sender_samples_total" => {
                if let Some((_, labels, v)) = parse_line(line) {
                    if let (Some(sender), Some(result), Ok(v)) =
                        (label(&labels, "sender"), label(&labels, "result"), v.parse())
                    {
                        s.senders.insert((sender.to_owned(), result.to_owned()), v);
                    }
                }
            }
            _ if line.starts_with("telemon_config_last_reload_successful ") => {
                s.reload_ok = line.rsplit(' ').next().and_then(|v| v.parse().ok());
            }
            _ => {}
        }
    }
    if let (Some(a), Some(b)) = (before_otlp, s.senders.get(&("otlp".to_owned(), "sent".to_owned()))) {
        s.otlp_step = s.otlp_step.max(b - a);
    }
    s.at = Some(at);
}

/// Scrapes `/metrics` once a second into `shared`, until aborted.
async fn scraper(api: Api, shared: Shared) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let t0 = Instant::now();
        let result = api.get("/metrics").await;
        let end = Instant::now();
        let mut s = lock(&shared);
        match result {
            Ok(body) => {
                s.obs.scrapes.push((end, end - t0));
                absorb(&mut s, &body, end);
            }
            Err(e) => s.obs.failures.push((end, format!("{e:#}"))),
        }
    }
}

/// (utime + stime) of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?)
}

/// Samples telemon's RSS, descriptors, CPU and history bytes every 10 s into `out`, until aborted.
async fn sampler(
    api: Api,
    pid: Arc<AtomicU32>,
    run: Arc<AtomicU32>,
    start: Instant,
    out: Arc<Mutex<Vec<Figures>>>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    loop {
        tick.tick().await;
        let p = pid.load(Ordering::Relaxed);
        let history = api
            .get("/api/v1/targets")
            .await
            .ok()
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| Some((v["history"]["bytes"].as_f64()?, v["history"]["series"].as_f64()?)));
        let (Ok((rss, _)), Ok(fds), Some(cpu), Some(history)) = (
            fleet_soak::memory(p),
            std::fs::read_dir(format!("/proc/{p}/fd")).map(|d| d.count()),
            cpu_ticks(p),
            history,
        ) else {
            continue;
        };
        out.lock().unwrap_or_else(|e| e.into_inner()).push(Figures {
            t: start.elapsed().as_secs_f64(),
            run: run.load(Ordering::Relaxed),
            rss_kib: rss as f64,
            fds: fds as f64,
            cpu_ticks: cpu,
            history_bytes: history.0,
            history_series: history.1,
        });
    }
}

/// What the browser saw.
#[derive(Debug, Default)]
struct Browsed {
    /// Target pages opened in the second tab.
    pages: usize,
    /// Checks of a tab's stream state, and those that were not "live".
    checks: usize,
    not_live: usize,
    /// Each tab live at the end.
    live_at_end: [bool; 2],
    /// What went wrong with the browser itself.
    error: Option<String>,
}

const LIVE: &str = "const e = document.getElementById('live'); return e ? (e.dataset.live || '') : 'none';";

/// The stream's state in tab `w` (`live` while it streams).
async fn live(b: &Browser, w: &fantoccini::wd::WindowHandle) -> Result<String> {
    b.client.switch_to_window(w.clone()).await?;
    Ok(b.client.execute(LIVE, vec![]).await?.as_str().unwrap_or("").to_owned())
}

/// Headless Chromium: `/` in one tab, and a second tab opening the next of `targets` every 10 s, both with the
/// stream's state read; at `stop`, waits (20 s at most) for both to be live.
async fn browse(
    driver: PathBuf,
    base: String,
    auth: String,
    targets: Vec<String>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Browsed {
    let mut seen = Browsed::default();
    let b = Browser::start_with(&driver, 1280, 900, &["--ignore-certificate-errors"]).await;
    let result: Result<()> = async {
        b.extra_header("Authorization", &auth).await;
        b.client.goto(&format!("{base}/")).await?;
        let first = b.client.window().await?;
        let second = b.client.new_window(true).await?.handle;
        b.client.switch_to_window(second.clone()).await?;
        b.extra_header("Authorization", &auth).await;
        let mut i = 0;
        loop {
            if *stop.borrow() {
                break;
            }
            let target = &targets[i % targets.len().max(1)];
            i += 1;
            b.client.switch_to_window(second.clone()).await?;
            b.client.goto(&format!("{base}/target/{}", target.replace('/', "%2F"))).await?;
            seen.pages += 1;
            let _ = tokio::time::timeout(Duration::from_secs(8), stop.changed()).await;
            for w in [&first, &second] {
                seen.checks += 1;
                if live(&b, w).await? != "live" {
                    seen.not_live += 1;
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), stop.changed()).await;
        }
        for (k, w) in [&first, &second].into_iter().enumerate() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if live(&b, w).await? == "live" {
                    seen.live_at_end[k] = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        seen.error = Some(format!("{e:#}"));
    }
    b.close().await;
    seen
}

/// Now, in Unix ms.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The soak's clock: an instant and the Unix ms it was.
#[derive(Debug, Clone, Copy)]
struct Clock {
    at: Instant,
    ms: i64,
}

impl Clock {
    fn now() -> Clock {
        Clock { at: Instant::now(), ms: now_ms() }
    }

    fn ms(&self, i: Instant) -> i64 {
        if i >= self.at {
            self.ms + (i - self.at).as_millis() as i64
        } else {
            self.ms - (self.at - i).as_millis() as i64
        }
    }
}

/// One smon sim behind the `[[file_sd]]` file.
struct SdTarget {
    slot: usize,
    /// Its `rev` label (changed by a relabel).
    rev: u32,
}

/// The `[[file_sd]]` file's content: one group per target, with its `rev` label.
fn sd_json(slots: &[Slot], active: &[SdTarget]) -> String {
    let groups: Vec<serde_json::Value> = active
        .iter()
        .map(|t| {
            serde_json::json!({ "targets": [slots[t.slot].name], "labels": { "rev": t.rev.to_string() } })
        })
        .collect();
    serde_json::Value::Array(groups).to_string()
}

/// Writes `text` to `path` at once (a temporary file renamed over it, as deploy tools do).
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// A reload's outcome.
#[derive(Debug, Default)]
struct Reloads {
    good: usize,
    good_ok: usize,
    broken: usize,
    broken_ok: usize,
    /// Targets whose connects changed through a reload without a cause: (reload, target).
    reconnected: Vec<(usize, String)>,
    notes: Vec<String>,
}

/// What the fault actions recorded.
#[derive(Debug, Default)]
struct Faults {
    causes: Vec<Cause>,
    /// Long-stopped sims (slot indexes): the alert must fire and resolve for them.
    long: Vec<usize>,
    /// (SIGKILL, restarted telemon answering).
    kills: Vec<(Instant, Instant)>,
    /// (stopped, back) of VictoriaMetrics.
    outages: Vec<(Instant, Instant)>,
    /// (filled, freed) of the queues' disk; and telemon's dropped_disk_error after it.
    disk: Vec<(Instant, Instant)>,
    /// file_sd rewrites: how long telemon took to show each (None: not within 5 s).
    sd: Vec<Option<Duration>>,
    reloads: Reloads,
    /// The burst: (connections made, telemon's descriptors before, at the end of the burst, 15 s after).
    burst: Option<(usize, usize, usize, usize)>,
    restart_failures: Vec<String>,
}

/// The addresses telemon's config names: its own three, and the two receivers'.
#[derive(Debug, Clone, Copy)]
struct Addrs {
    listen: SocketAddr,
    mono_listen: SocketAddr,
    hmon_listen: SocketAddr,
    vm: SocketAddr,
    otlp: SocketAddr,
}

/// The config file: `[serve]`, the sims of `listed` (fleet-soak's blocks), the listeners, the file_sd block and
/// the two senders; `broken` adds a block that is refused.
fn config_text(
    slots: &[Slot],
    listed: &[usize],
    at: &Addrs,
    opts: &Options,
    work: &Path,
    broken: bool,
) -> String {
    let Addrs { listen, mono_listen, hmon_listen, vm, otlp } = *at;
    let listed: Vec<Slot> = listed
        .iter()
        .map(|&i| Slot {
            kind: slots[i].kind,
            n: slots[i].n,
            name: slots[i].name.clone(),
            place: slots[i].place.clone(),
            running: None,
        })
        .collect();
    let mut toml = format!(
        "[serve]\nlisten = \"{listen}\"\nweb_config = \"web.yml\"\n\n\
         [[file_sd]]\nfiles = [\"sd/*.json\"]\nprotocol = \"smon\"\nrefresh_interval = \"10m\"\n\n\
         [[hmon_listen]]\nname = \"dialers\"\nlisten = \"{hmon_listen}\"\npoll = \"1s\"\nhello_timeout = \"5s\"\n\n\
         [[remote_write]]\nname = \"vm\"\nurl = \"http://{vm}/api/v1/write\"\nbatch = \"1s\"\n\
         queue_dir = \"{q}/vm\"\nqueue_sync = \"1s\"\ntimeout = \"5s\"\n\n\
         [[otlp]]\nname = \"otlp\"\nendpoint = \"http://{otlp}\"\nbatch = \"{batch}\"\n\
         queue_dir = \"{q}/otlp\"\nqueue_sync = \"1s\"\ntimeout = \"10s\"\n\n",
        q = work.join("queues").display(),
        batch = opts.otlp_batch,
    );
    toml += &fleet_soak::config("product-soak", &listed, mono_listen);
    if broken {
        toml += "\n[[smon]]\nname = \"broken\"\nconnect = 7399\n";
    }
    toml
}

/// Runs the soak with `opts`: the report, or an error when the soak itself could not do its part.
pub async fn run(opts: Options) -> Result<Report> {
    let seed = opts.seed;
    let plan = Plan::new(opts.minutes, seed);
    let mut rng = Rng(seed ^ 0x5eed);
    let _ = sim_common::raise_open_file_limit(16_384);
    let work = tempfile::Builder::new().prefix("product-soak-").tempdir()?;
    let w = work.path();
    eprintln!("[product-soak] seed {seed}; working in {}; schedule:\n{}", w.display(), plan.describe());

    // TLS and basic auth.
    let tls = opts.root.join("crates/telemon/tests/data/web-tls");
    for f in ["ca.pem", "server.pem", "server.key"] {
        std::fs::copy(tls.join(f), w.join(f))
            .with_context(|| format!("copying {}", tls.join(f).display()))?;
    }
    let password = format!("soak-{seed}");
    let hash = bcrypt::hash(&password, 6)?;
    std::fs::write(
        w.join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nbasic_auth_users:\n  {USER}: \"{hash}\"\n"
        ),
    )?;
    let auth =
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}")));
    // Picked again right before telemon starts (see below): a free port may be taken meanwhile.
    let (mut listen, mut mono_listen, mut hmon_listen) = (free_addr(), free_addr(), free_addr());
    let ca = std::fs::read(w.join("ca.pem"))?;

    // The receivers.
    let vm_bin = opts.components.victoria_metrics.clone();
    let vm_data = w.join("vm");
    let mut vm = Some(Receiver::vm(VictoriaMetrics::new(&vm_bin).data(&vm_data)).await);
    let vm_addr = vm.as_ref().map(Receiver::addr).context("VictoriaMetrics")?;
    let otlp = OtlpReceiver::start(
        &opts.components.python,
        &opts.root.join("crates/telemon/tests/otlp_receiver.py"),
    )
    .await?;

    // The sims: per kind in the config; smon sims for file_sd (those listed now, those to add later) and for
    // reloads to add.
    let mut slots: Vec<Slot> = Vec::new();
    for kind in fleet_soak::KINDS {
        for n in 0..opts.per_kind {
            let name = format!("{}-{n:02}", kind.sim());
            let place = match kind {
                Kind::Sys161 => {
                    let dir = w.join("sys161").join(&name);
                    std::fs::create_dir_all(&dir)?;
                    Place::Dir(dir)
                }
                Kind::Mono => Place::Dial(mono_listen),
                _ => Place::Tcp(SocketAddr::from(([127, 0, 0, 1], 0))),
            };
            slots.push(Slot { kind, n, name, place, running: None });
        }
    }
    let static_count = slots.len();
    let sd_rewrites = plan.faults.iter().filter(|f| f.1 == Fault::FileSd).count();
    let reloads_planned = plan.faults.iter().filter(|f| matches!(f.1, Fault::Reload { .. })).count();
    let sd_first = slots.len();
    for n in 0..opts.file_sd + sd_rewrites + reloads_planned {
        let tcp = Place::Tcp(SocketAddr::from(([127, 0, 0, 1], 0)));
        slots.push(Slot { kind: Kind::Smon, n: 500 + n, name: String::new(), place: tcp, running: None });
    }
    for slot in slots.iter_mut().filter(|s| s.kind != Kind::Mono) {
        fleet_soak::start(slot).await.with_context(|| format!("starting {}", slot.name))?;
        if slot.name.is_empty() {
            if let Place::Tcp(addr) = slot.place {
                slot.name = addr.to_string();
            }
        }
    }
    // The file_sd pool: the first `file_sd` listed, the next ones added one per rewrite; the last ones are
    // added to the config file by the good reloads (named reload-NN).
    let sd_pool: Vec<usize> = (sd_first..sd_first + opts.file_sd + sd_rewrites).collect();
    let mut reload_pool: Vec<usize> = (sd_first + opts.file_sd + sd_rewrites..slots.len()).collect();
    for (k, &i) in reload_pool.iter().enumerate() {
        slots[i].name = format!("reload-{k:02}");
    }
    let mut sd_active: Vec<SdTarget> =
        sd_pool[..opts.file_sd].iter().map(|&slot| SdTarget { slot, rev: 0 }).collect();
    let mut sd_next = opts.file_sd;
    std::fs::create_dir_all(w.join("sd"))?;
    write_atomic(&w.join("sd/targets.json"), &sd_json(&slots, &sd_active))?;
    let mut listed: Vec<usize> = (0..static_count).collect();

    // telemon, in its namespace.
    let ns = Namespace::start(&w.join("queues"), if plan.seconds >= 1200 { 512 } else { 128 }).await?;
    let record = w.join("record");
    let (record_file, record_total) = (2_000_000u64, 12_000_000u64);
    let args: Vec<String> = vec![
        "--config".into(),
        w.join("telemon.toml").display().to_string(),
        "--web.enable-lifecycle".into(),
        "--record".into(),
        record.display().to_string(),
        "--record-max-bytes".into(),
        record_file.to_string(),
        "--record-max-total".into(),
        record_total.to_string(),
    ];
    let log = w.join("telemon.log");
    // telemon binds its three addresses at start: one taken since it was found free (by a sim, or another
    // process) fails the start, which is then made again on new ones.
    let mut attempt = 0;
    let (mut telemon, api) = loop {
        attempt += 1;
        for slot in slots.iter_mut().filter(|s| s.kind == Kind::Mono) {
            slot.place = Place::Dial(mono_listen);
        }
        let at = Addrs { listen, mono_listen, hmon_listen, vm: vm_addr, otlp: otlp.addr };
        let text = config_text(&slots, &listed, &at, &opts, w, false);
        std::fs::write(w.join("telemon.toml"), text)?;
        let api = Api::new(listen, &ca, USER, &password)?;
        match Telemon::start(&ns, &opts.telemon, &args, &log, &api).await {
            Ok(t) => break (t, api),
            Err(e) if attempt < 3 && format!("{e:#}").contains("Address already in use") => {
                eprintln!("[product-soak] {e:#}; again on other ports");
                (listen, mono_listen, hmon_listen) = (free_addr(), free_addr(), free_addr());
            }
            Err(e) => return Err(e),
        }
    };
    let pid = Arc::new(AtomicU32::new(telemon.pid));
    let run_no = Arc::new(AtomicU32::new(0));
    for slot in slots.iter_mut().filter(|s| s.kind == Kind::Mono) {
        fleet_soak::start(slot).await.with_context(|| format!("starting {}", slot.name))?;
    }
    let dialers = sim_common::Shutdown::new();
    for _ in 0..opts.hmon_dialers {
        let sim = dyalog_sim::Sim::new(dyalog_sim::Config::default());
        tokio::spawn(sim.poll(hmon_listen.to_string(), dialers.clone()));
    }

    // Prometheus over https with basic_auth, with the rules.
    let prom_yml = format!(
        "global:\n  scrape_interval: {SCRAPE_INTERVAL}s\n  scrape_timeout: 10s\n  evaluation_interval: 5s\n\
         rule_files:\n  - {rules}\n\
         scrape_configs:\n  - job_name: telemon\n    scheme: https\n    basic_auth:\n      username: {USER}\n      password: \"{password}\"\n\
         \x20   tls_config:\n      ca_file: {ca}\n    static_configs:\n      - targets: [\"{listen}\"]\n",
        rules = opts.root.join("deploy/prometheus/rules.yml").display(),
        ca = w.join("ca.pem").display(),
    );
    let prometheus = Receiver {
        kind: telemon_test_support::Kind::Prometheus,
        component: Prometheus::new(&opts.components.prometheus).config(prom_yml).start().await,
    };

    // The observers.
    let shared: Shared = Arc::default();
    let scraping = tokio::spawn(scraper(api.clone(), shared.clone()));
    let expected_up = static_count + opts.file_sd + opts.hmon_dialers;
    let setup = Instant::now();
    loop {
        telemon.check(&log)?;
        let up = lock(&shared).obs.up_count();
        if up >= expected_up {
            break;
        }
        if setup.elapsed() > Duration::from_secs(120) {
            bail!("only {up} of {expected_up} targets up after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let clock = Clock::now();
    let start = clock.at;
    eprintln!(
        "[product-soak] {expected_up} targets up after {:.1?}; telemon https://{listen}/ (pid {}); running {} s",
        setup.elapsed(),
        telemon.pid,
        plan.seconds
    );
    let figures: Arc<Mutex<Vec<Figures>>> = Arc::default();
    let sampling = tokio::spawn(sampler(api.clone(), pid.clone(), run_no.clone(), start, figures.clone()));
    let (stop_browser, stopped) = tokio::sync::watch::channel(false);
    // The first sim of each kind that the config lists, in turn: the history the pages hold then repeats
    // every 40 s instead of following which protocol's pages are being visited.
    let pages: Vec<String> = slots[..static_count]
        .iter()
        .filter(|s| s.kind != Kind::Mono && s.n == 0)
        .map(|s| s.name.clone())
        .collect();
    // On a thread of its own: the WebDriver client's futures are not Send.
    let (driver, base) = (opts.components.chromedriver.clone(), format!("https://{listen}"));
    let browse_auth = auth.clone();
    let browsing = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
        match rt {
            Ok(rt) => rt.block_on(browse(driver, base, browse_auth, pages, stopped)),
            Err(e) => {
                Browsed { error: Some(format!("a runtime for the browser: {e}")), ..Browsed::default() }
            }
        }
    });

    // The schedule.
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Step {
        Fault(u64, usize),
        StartAgain(Vec<usize>),
        VmBack,
        DiskFree,
        AfterBurst,
    }
    let mut queue: BinaryHeap<Reverse<(Instant, Step)>> = BinaryHeap::new();
    for (k, (t, _)) in plan.faults.iter().enumerate() {
        queue.push(Reverse((start + Duration::from_secs(*t), Step::Fault(*t, k))));
    }
    let mut f = Faults::default();
    let restartable: Vec<usize> = (0..static_count).collect();
    let mut down: HashSet<usize> = HashSet::new();
    let mut reload_count = 0usize;
    let mut lateness = Duration::ZERO;
    let end = start + Duration::from_secs(plan.seconds);
    while let Some(Reverse((at, step))) = queue.pop() {
        tokio::time::sleep_until(at.into()).await;
        telemon.check(&log)?;
        let late = at.elapsed();
        if let Step::Fault(t, k) = &step {
            if plan.faults[*k].1 != Fault::Restarts || late > Duration::from_secs(5) {
                eprintln!("[product-soak] +{t}s {:?} (late by {late:.1?})", plan.faults[*k].1);
            }
            lateness = lateness.max(late);
        }
        match step {
            Step::Fault(_, k) => match plan.faults[k].1 {
                Fault::Restarts => {
                    // Not a sim started again in the last seconds (a late round after a slow step): its start
                    // must be seen before it stops again.
                    let recent = |i: usize| {
                        f.causes
                            .iter()
                            .rev()
                            .take_while(|c| c.at + GRACE > Instant::now())
                            .any(|c| c.slot == i)
                    };
                    let up: Vec<usize> =
                        restartable.iter().copied().filter(|i| !down.contains(i) && !recent(*i)).collect();
                    let picked = pick(&mut rng, up, (static_count / 10).max(1));
                    stop_all(&mut slots, &picked, &mut f.causes).await;
                    down.extend(picked.iter().copied());
                    queue.push(Reverse((
                        Instant::now() + Duration::from_secs(plan.down_for),
                        Step::StartAgain(picked),
                    )));
                }
                Fault::LongDown { seconds } => {
                    let candidates: Vec<usize> = restartable
                        .iter()
                        .copied()
                        .filter(|i| !down.contains(i) && slots[*i].kind != Kind::Mono)
                        .collect();
                    let picked = pick(&mut rng, candidates, 2);
                    for &i in &picked {
                        f.causes.push(Cause { at: Instant::now(), slot: i, up: false });
                        fleet_soak::stop(&mut slots[i]).await;
                        down.insert(i);
                        f.long.push(i);
                    }
                    queue.push(Reverse((
                        Instant::now() + Duration::from_secs(seconds),
                        Step::StartAgain(picked),
                    )));
                }
                Fault::ReceiverDown { seconds } => {
                    if let Some(r) = vm.take() {
                        r.stop().await;
                    }
                    f.outages.push((Instant::now(), Instant::now()));
                    queue.push(Reverse((Instant::now() + Duration::from_secs(seconds), Step::VmBack)));
                }
                Fault::FileSd => {
                    // One removed (the oldest), one added (a new sim), one relabelled (the newest before).
                    if !sd_active.is_empty() {
                        sd_active.remove(0);
                    }
                    if let Some(t) = sd_active.last_mut() {
                        t.rev += 1;
                    }
                    if let Some(&slot) = sd_pool.get(sd_next) {
                        sd_active.push(SdTarget { slot, rev: 0 });
                        sd_next += 1;
                    }
                    write_atomic(&w.join("sd/targets.json"), &sd_json(&slots, &sd_active))?;
                    f.sd.push(sd_seen(&api, &slots, &sd_active, &sd_pool).await);
                }
                Fault::Reload { broken } => {
                    reload_count += 1;
                    let added = if broken { None } else { reload_pool.pop() };
                    if let Some(i) = added {
                        listed.push(i);
                    }
                    let at = Addrs { listen, mono_listen, hmon_listen, vm: vm_addr, otlp: otlp.addr };
                    let write_config = |listed: &[usize], broken: bool| {
                        std::fs::write(
                            w.join("telemon.toml"),
                            config_text(&slots, listed, &at, &opts, w, broken),
                        )
                    };
                    write_config(&listed, broken)?;
                    reload(&api, &shared, &slots, &f.causes, broken, reload_count, &mut f.reloads).await;
                    if broken {
                        // The file as it was, for the restart after the SIGKILL (no reload: it is what runs).
                        write_config(&listed, false)?;
                    }
                }
                Fault::Kill => {
                    let killed = Instant::now();
                    telemon.kill().await;
                    {
                        let mut s = lock(&shared);
                        let last = std::mem::take(&mut s.senders);
                        s.finished.push(last);
                    }
                    telemon = Telemon::start(&ns, &opts.telemon, &args, &log, &api).await?;
                    pid.store(telemon.pid, Ordering::Relaxed);
                    run_no.store(1, Ordering::Relaxed);
                    f.kills.push((killed, Instant::now()));
                    fresh_scrape(&shared, Instant::now()).await;
                    eprintln!("[product-soak] telemon killed and restarted (pid {})", telemon.pid);
                }
                Fault::Burst => {
                    let before = fds(telemon.pid);
                    let made = burst(opts.burst, mono_listen, hmon_listen).await;
                    f.burst = Some((made, before, fds(telemon.pid), 0));
                    queue.push(Reverse((Instant::now() + Duration::from_secs(15), Step::AfterBurst)));
                }
                Fault::DiskFull { seconds } => {
                    ns.fill().await?;
                    f.disk.push((Instant::now(), Instant::now()));
                    queue.push(Reverse((Instant::now() + Duration::from_secs(seconds), Step::DiskFree)));
                }
            },
            Step::StartAgain(picked) => {
                let began = Instant::now();
                let n = picked.len();
                for i in picked {
                    f.causes.push(Cause { at: Instant::now(), slot: i, up: true });
                    if let Err(e) = fleet_soak::start(&mut slots[i]).await {
                        f.causes.pop();
                        f.restart_failures.push(format!("{}: {e:#}", slots[i].name));
                    }
                    down.remove(&i);
                }
                if began.elapsed() > Duration::from_secs(5) {
                    eprintln!("[product-soak] starting {n} sims again took {:.1?}", began.elapsed());
                }
            }
            Step::AfterBurst => {
                if let Some(b) = f.burst.as_mut() {
                    b.3 = fds(telemon.pid);
                }
            }
            Step::VmBack => {
                vm = Some(Receiver::vm(VictoriaMetrics::new(&vm_bin).data(&vm_data).at(vm_addr)).await);
                if let Some(o) = f.outages.last_mut() {
                    o.1 = Instant::now();
                }
            }
            Step::DiskFree => {
                ns.free().await?;
                if let Some(d) = f.disk.last_mut() {
                    d.1 = Instant::now();
                }
            }
        }
    }
    tokio::time::sleep_until(end.into()).await;
    telemon.check(&log)?;

    // The end: the browser's last look, the queues drained, the state logs, then telemon stopped.
    let _ = stop_browser.send(true);
    let browsed =
        tokio::task::spawn_blocking(move || browsing.join()).await.ok().and_then(|j| j.ok()).unwrap_or_else(
            || Browsed { error: Some("the browser's thread panicked".into()), ..Browsed::default() },
        );
    let drained = drain(&api).await;
    let mut state_logs = HashMap::new();
    for c in f.causes.iter().filter(|c| slots[c.slot].kind != Kind::Mono) {
        let name = &slots[c.slot].name;
        if !state_logs.contains_key(name) {
            let log = api
                .get(&format!("/api/v1/targets/{}", name.replace('/', "%2F")))
                .await
                .ok()
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok());
            state_logs.insert(name.clone(), log);
        }
    }
    let targets_json: Option<serde_json::Value> =
        api.get("/targets").await.ok().and_then(|b| serde_json::from_str(&b).ok());
    let (otlp_before, _) = otlp_counts(&otlp);
    tokio::time::sleep(Duration::from_secs(1)).await;
    scraping.abort();
    sampling.abort();
    if let Ok(body) = api.get("/metrics").await {
        absorb(&mut lock(&shared), &body, Instant::now());
    }
    let (otlp_after, otlp_distinct) = otlp_counts(&otlp);
    let stopped_at = Instant::now();
    let exit = telemon.terminate().await;
    dialers.cancel();
    for slot in slots.iter_mut() {
        fleet_soak::stop(slot).await;
    }

    // What the receivers hold.
    let span = (stopped_at - start).as_secs() + 120;
    let vm = match vm {
        Some(vm) => vm,
        None => Receiver::vm(VictoriaMetrics::new(&vm_bin).data(&vm_data).at(vm_addr)).await,
    };
    let clock_ms = |i: Instant| clock.ms(i);
    let losses = Losses {
        kill: f
            .kills
            .iter()
            .map(|(k, r)| (clock_ms(*k) - 2 * BATCH_MS - 1000, clock_ms(*r) + 2 * BATCH_MS))
            .collect(),
        disk: f.disk.iter().map(|(a, b)| (clock_ms(*a) - BATCH_MS, clock_ms(*b) + 2 * BATCH_MS)).collect(),
    };
    let dup_ok: Vec<(i64, i64)> = f
        .kills
        .iter()
        .map(|(k, _)| (clock_ms(*k) - 15_000, clock_ms(*k) + 1000))
        .chain(f.outages.iter().map(|(a, _)| (clock_ms(*a) - 15_000, clock_ms(*a) + 5000)))
        .collect();
    let ups = vm.export("telemon_target_up").await;
    let up_of: HashMap<String, Vec<(i64, f64)>> = ups
        .iter()
        .filter_map(|(l, s)| Some((l.get("target")?.clone(), s.clone())))
        .fold(HashMap::new(), |mut m, (t, s)| {
            m.entry(t).or_insert_with(Vec::new).extend(s);
            m
        });
    let mut vm_rows: Vec<(String, usize, Gaps, Vec<String>)> = Vec::new();
    for (family, series) in [
        ("telemon_target_up", ups.clone()),
        ("sys161_kernel_instructions_total", vm.export("sys161_kernel_instructions_total").await),
    ] {
        let mut total = Gaps::default();
        let mut lost = Vec::new();
        let mut dups = Vec::new();
        for (labels, samples) in &series {
            let mut ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
            ts.sort_unstable();
            let target = labels.get("target").cloned().unwrap_or_default();
            let excused = |a: i64, b: i64| {
                if family == "telemon_target_up" {
                    // A dial-in target exists while its peer is connected (and lingers down after):
                    // - a Mono name that was down when its series ended (telemon's stale marker) was forgotten
                    //   at the end of its 10-minute linger, and a later agent from the same port takes it again;
                    // - a dial-in name alive at the SIGKILL died with that telemon: the restarted one knows it
                    //   once its peer dials again (an interpreter's name), or never (an agent's port).
                    let mono = target.starts_with("mono/");
                    let dial_in = mono || target.starts_with("dialers/");
                    return dial_in && (inside(&losses.kill, a) || (mono && ended_down(samples, a)));
                }
                // A value series' gap is a loss only while its target was up all along.
                up_of
                    .get(&target)
                    .is_none_or(|u| u.iter().any(|(t, v)| *t > a - 3000 && *t < b + 3000 && *v != 1.0))
            };
            let g = gaps(&ts, BATCH_MS, &losses, &dup_ok, excused);
            for (a, b) in &g.lost_at {
                lost.push(format!("{family}{{target=\"{target}\"}} {a}..{b}"));
            }
            for t in &g.dup_at {
                dups.push(format!("{target} +{:.0}s", (t - clock.ms) as f64 / 1000.0));
            }
            total.expected += g.expected;
            total.received += g.received;
            total.kill += g.kill;
            total.disk += g.disk;
            total.lost += g.lost;
            total.duplicates += g.duplicates;
            total.bad_duplicates += g.bad_duplicates;
        }
        if !dups.is_empty() {
            lost.push(format!("duplicated outside a kill or an outage at {}", first(&dups)));
        }
        vm_rows.push((family.to_owned(), series.len(), total, lost));
    }
    let prom_up = prometheus.query(&format!("telemon_target_up[{span}s]")).await;
    let prom_self = prometheus.query(&format!("up{{job=\"telemon\"}}[{span}s]")).await;
    let prom_durations =
        prometheus.query(&format!("scrape_duration_seconds{{job=\"telemon\"}}[{span}s]")).await;
    let alerts = prometheus
        .query(&format!("ALERTS{{alertname=\"TelemonTargetDown\",alertstate=\"firing\"}}[{span}s]"))
        .await;
    let alerts_now = prometheus.query("ALERTS{alertname=\"TelemonTargetDown\",alertstate=\"firing\"}").await;
    let figures = figures.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let scraped = std::mem::take(&mut *lock(&shared));

    // The checks.
    let mut table = Table::default();
    let warm = plan.warm_up as f64;
    let after_kill: Vec<Figures> =
        figures.iter().copied().filter(|x| x.run == run_no.load(Ordering::Relaxed)).collect();
    // The history holds each series' rings whole from its first point, so it grows with the series it holds:
    // the Mono agents' new names (each lingers 10 minutes), the targets added, the pages visited. An hour's run
    // judges its bytes after the 10-minute warm-up (the lingers' steady state); a shorter one, shorter than a
    // linger, judges its bytes per series held.
    let history: Watched = if plan.seconds >= 1200 {
        ("web view history", |x| x.history_bytes / 1024.0, 0.10, 64.0, "KiB")
    } else {
        (
            "web view history per series held (a run shorter than a linger)",
            |x| x.history_bytes / x.history_series.max(1.0),
            0.10,
            64.0,
            "B",
        )
    };
    for (what, pick_fig, tol, slack, unit) in [
        ("telemon RSS", (|x: &Figures| x.rss_kib / 1024.0) as Figure, 0.10, 2.0, "MiB"),
        ("telemon open descriptors", |x: &Figures| x.fds, 0.05, 10.0, ""),
        history,
    ] {
        let samples: Vec<(f64, f64)> = after_kill.iter().map(|x| (x.t, pick_fig(x))).collect();
        let t: Trend = trend(&samples, warm, tol, slack);
        table.row(
            what,
            format!(
                "at the warm-up's end {:.1} {unit}, peak {:.1}, last {:.1}; median of the middle third {:.1}, of the last {:.1}; \
                 least-squares slope {:+.1}%/h of the median ({} samples)",
                t.warm, t.peak, t.last, t.middle, t.end, t.slope_per_hour * 100.0, samples.len()
            ),
            t.ok,
        );
    }
    if let (Some(a), Some(z)) = (after_kill.first(), after_kill.last()) {
        table.info(
            "web view history, first and last sample",
            format!(
                "{:.0} series in {:.0} KiB, then {:.0} series in {:.0} KiB",
                a.history_series,
                a.history_bytes / 1024.0,
                z.history_series,
                z.history_bytes / 1024.0
            ),
        );
    }
    table.info("telemon CPU per minute (% of one core)", cpu_per_minute(&figures));
    for (family, n, g, lost) in &vm_rows {
        let ok = g.lost == 0 && g.bad_duplicates == 0 && *n > 0;
        table.row(
            &format!("VictoriaMetrics `{family}`"),
            format!(
                "{n} series: {} s expected, {} received, documented losses {} s at the SIGKILL + {} s on the full disk, \
                 lost {} s, duplicates {} ({} outside a kill or an outage){}",
                g.expected, g.received, g.kill, g.disk, g.lost, g.duplicates, g.bad_duplicates,
                first(lost)
            ),
            ok,
        );
    }
    let dropped_disk = scraped.sent("vm", "dropped_disk_error");
    let disk_missing: i64 = vm_rows.iter().map(|r| r.2.disk).sum();
    table.row(
        "full disk",
        format!(
            "telemon counted {dropped_disk} remote write samples dropped (disk error); VictoriaMetrics misses \
             {disk_missing} in the window"
        ),
        !f.disk.is_empty() && (disk_missing as f64) <= dropped_disk && dropped_disk > 0.0,
    );
    let vm_sent = scraped.sent("vm", "sent");
    table.info(
        "remote write sender",
        format!("{vm_sent} samples sent (telemon's counters, both runs); drained at the end: {drained}"),
    );
    // Every series, in total: what VictoriaMetrics holds of all of them beside what telemon sent (the
    // family checks above place each missing second; this covers the series they do not read).
    let held = vm.value(&format!("sum(count_over_time({{__name__=~\".+\"}}[{span}s]))")).await;
    table.info(
        "VictoriaMetrics, every series",
        format!(
            "{} samples held over the run, against {vm_sent} sent",
            held.map_or_else(|| "n/a".to_owned(), |h| format!("{h:.0}"))
        ),
    );
    let otlp_sent = scraped.sent("otlp", "sent");
    let otlp_slack = scraped.otlp_step.max(1.0) * 2.0;
    let otlp_ok = otlp_distinct as f64 >= otlp_sent - 0.5
        && (otlp_distinct as f64) <= otlp_sent + otlp_slack
        && otlp_sent > 0.0;
    table.row(
        "OTLP receiver",
        format!(
            "telemon sent {otlp_sent} data points; the receiver got {otlp_after} ({otlp_before} before the last scrape), \
             {otlp_distinct} distinct, {} duplicates (at least all sent, at most 2 scrapes' worth more: {otlp_slack})",
            otlp_after - otlp_distinct
        ),
        otlp_ok,
    );
    for result in
        ["dropped_4xx", "dropped_queue_full", "dropped_shutdown", "dropped_corrupt", "dropped_disk_error"]
    {
        let (v, o) = (scraped.sent("vm", result), scraped.sent("otlp", result));
        if v + o > 0.0 {
            table.info(&format!("samples {result}"), format!("remote write {v}, OTLP {o}"));
        }
    }

    // Transitions.
    let kill_windows: Vec<(Instant, Instant)> =
        f.kills.iter().map(|(k, r)| (*k - GRACE, *r + GRACE)).collect();
    let in_kill = |at: Instant| kill_windows.iter().any(|(a, b)| at >= *a && at <= *b);
    let late = |at: Instant| at + GRACE > stopped_at;
    let causes: Vec<Cause> = f.causes.iter().copied().filter(|c| !in_kill(c.at) && !late(c.at)).collect();
    let (missed, unexpected) = match_causes(&scraped.obs, &slots, &causes, start, GRACE);
    let kinds = |up: bool| causes.iter().filter(|c| c.up == up).count();
    table.row(
        "transitions in /metrics (1 s scrapes)",
        format!(
            "caused {} downs / {} ups (those within {GRACE:?} of the SIGKILL left out), missed {}{}, unexpected {} (file_sd and reload changes, the SIGKILL)",
            kinds(false), kinds(true), missed.len(),
            first(&missed.iter().map(|c| describe(&slots[c.slot].name, c, start)).collect::<Vec<_>>()),
            unexpected.len()
        ),
        missed.is_empty() && !causes.is_empty(),
    );
    // /targets: each restarted target connected at least once per restart since the last telemon start.
    let since = f.kills.last().map_or(start, |k| k.1);
    // Connects expected: one per start after telemon's, and one at its start if the sim ran then.
    let mut restarts: HashMap<usize, usize> = HashMap::new();
    for c in f.causes.iter().filter(|c| c.up && c.at > since + GRACE && slots[c.slot].kind != Kind::Mono) {
        *restarts.entry(c.slot).or_default() += 1;
    }
    let ran_at_start =
        |slot: usize| f.causes.iter().rfind(|c| c.slot == slot && c.at <= since + GRACE).is_none_or(|c| c.up);
    let mut short = Vec::new();
    let listing = targets_json
        .as_ref()
        .and_then(|v| v["targets"].as_array().or(v.as_array()).cloned())
        .unwrap_or_default();
    for (slot, n) in &restarts {
        let name = &slots[*slot].name;
        let connects =
            listing.iter().find(|t| t["name"] == name.as_str()).and_then(|t| t["connects"].as_u64());
        let want = n + usize::from(ran_at_start(*slot));
        if connects.is_none_or(|c| (c as usize) < want) {
            short.push(format!("{name}: {connects:?} connects, {want} expected"));
        }
    }
    table.row(
        "restarts in /targets",
        format!(
            "{} restarted targets checked: connects >= starts since telemon's for all but {}{}",
            restarts.len(),
            short.len(),
            first(&short)
        ),
        short.is_empty() && !listing.is_empty(),
    );
    // Prometheus: a 0 and a 1 after each stop of a sim that is not a Mono agent.
    let mut prom_missed = Vec::new();
    let mut prom_checked = 0;
    for (k, c) in causes.iter().enumerate().filter(|(_, c)| !c.up && slots[c.slot].kind != Kind::Mono) {
        let Some(back) = causes[k..].iter().find(|d| d.up && d.slot == c.slot) else { continue };
        if back.at + Duration::from_secs(2 * SCRAPE_INTERVAL + 5) > stopped_at {
            continue;
        }
        prom_checked += 1;
        let name = &slots[c.slot].name;
        let samples: Vec<(i64, f64)> = prom_up
            .iter()
            .filter(|(l, _)| l.get("target") == Some(name))
            .flat_map(|(_, s)| s.clone())
            .collect();
        let (d, u) = (clock_ms(c.at), clock_ms(back.at));
        let zero = samples.iter().find(|(t, v)| *t >= d && *t <= u + 15_000 && *v == 0.0);
        let one = zero.and_then(|z| samples.iter().find(|(t, v)| *t > z.0 && *t <= u + 35_000 && *v == 1.0));
        if one.is_none() {
            prom_missed.push(format!("{name} stopped at +{:.0}s", (c.at - start).as_secs_f64()));
        }
    }
    table.row(
        "restarts in Prometheus's telemon_target_up",
        format!(
            "{prom_checked} stops of sims that are not Mono agents: a 0 then a 1 seen for all but {}{}",
            prom_missed.len(),
            first(&prom_missed)
        ),
        prom_missed.is_empty() && prom_checked > 0,
    );
    // The web view's state log (the last 32 changes of each target).
    let mut log_missed = Vec::new();
    let mut log_checked = 0;
    for c in causes.iter().filter(|c| c.at > since && slots[c.slot].kind != Kind::Mono) {
        let name = &slots[c.slot].name;
        let Some(Some(v)) = state_logs.get(name) else {
            log_missed.push(format!("{name}: no page"));
            continue;
        };
        let states: Vec<(f64, String)> = v["states"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| Some((s[0].as_f64()?, s[1].as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let at = clock_ms(c.at) as f64 / 1000.0;
        if states.first().is_none_or(|s| s.0 > at) {
            continue; // older than the log keeps
        }
        log_checked += 1;
        let found = states
            .iter()
            .any(|(t, s)| *t >= at - 1.0 && *t <= at + GRACE.as_secs_f64() && (s == "up") == c.up);
        if !found {
            log_missed.push(format!(
                "{name} {} at +{:.0}s",
                if c.up { "up" } else { "down" },
                (c.at - start).as_secs_f64()
            ));
        }
    }
    table.row(
        "restarts in the web view's state log",
        format!(
            "{log_checked} transitions since telemon's last start: all seen but {}{}",
            log_missed.len(),
            first(&log_missed)
        ),
        log_missed.is_empty() && log_checked > 0,
    );

    // Reloads and file_sd.
    let r = &f.reloads;
    table.row(
        "reloads",
        format!(
            "{} good ({} applied, connects unchanged for every unchanged target but {}{}), {} broken ({} refused with nothing changed){}",
            r.good, r.good_ok, r.reconnected.len(),
            first(&r.reconnected.iter().map(|(k, t)| format!("{t} at reload {k}")).collect::<Vec<_>>()),
            r.broken, r.broken_ok,
            first(&r.notes)
        ),
        r.good > 0 && r.good_ok == r.good && r.broken == 1 && r.broken_ok == 1 && r.reconnected.is_empty(),
    );
    let sd_slowest = f.sd.iter().flatten().max().copied().unwrap_or_default();
    let sd_late = f.sd.iter().filter(|d| d.is_none()).count();
    table.row(
        "file_sd rewrites",
        format!(
            "{} rewrites (one added, one removed, one relabelled each): slowest seen after {sd_slowest:.1?}, \
             {sd_late} not within 5 s",
            f.sd.len()
        ),
        !f.sd.is_empty() && sd_late == 0,
    );

    // Prometheus's own view.
    let self_samples: Vec<(i64, f64)> = prom_self.iter().flat_map(|(_, s)| s.clone()).collect();
    let bad_up: Vec<i64> = self_samples
        .iter()
        .filter(|(t, v)| {
            *v != 1.0
                && !f.kills.iter().any(|(k, r)| {
                    *t >= clock_ms(*k) && *t <= clock_ms(*r) + (SCRAPE_INTERVAL as i64 + 2) * 1000
                })
        })
        .map(|(t, _)| *t)
        .collect();
    table.row(
        "Prometheus `up` for telemon",
        format!("{} scrapes, {} not 1 outside the SIGKILL", self_samples.len(), bad_up.len()),
        bad_up.is_empty() && self_samples.len() as u64 >= plan.seconds / SCRAPE_INTERVAL / 2,
    );
    let mut durations: Vec<Duration> = prom_durations
        .iter()
        .flat_map(|(_, s)| s.iter().map(|(_, v)| Duration::from_secs_f64(v.max(0.0))))
        .collect();
    durations.sort();
    let mut own: Vec<Duration> = scraped.obs.scrapes.iter().map(|(_, d)| *d).collect();
    own.sort();
    table.info(
        "scrape duration",
        format!(
            "Prometheus (https, basic auth): p50 {:.0} ms, p99 {:.0} ms over {} scrapes; the soak's 1 s scrapes: p99 {:.0} ms, {} failed",
            percentile(&durations, 0.5).as_secs_f64() * 1e3,
            percentile(&durations, 0.99).as_secs_f64() * 1e3,
            durations.len(),
            percentile(&own, 0.99).as_secs_f64() * 1e3,
            scraped.obs.failures.len()
        ),
    );
    let long_names: Vec<&String> = f.long.iter().map(|i| &slots[*i].name).collect();
    let fired: Vec<&&String> =
        long_names.iter().filter(|n| alerts.iter().any(|(l, _)| l.get("target") == Some(**n))).collect();
    let still: Vec<&&String> =
        long_names.iter().filter(|n| alerts_now.iter().any(|(l, _)| l.get("target") == Some(**n))).collect();
    table.row(
        "TelemonTargetDown alerts",
        format!(
            "{} sims stopped long: fired for {}, still firing at the end for {}",
            long_names.len(),
            fired.len(),
            still.len()
        ),
        !long_names.is_empty() && fired.len() == long_names.len() && still.is_empty(),
    );
    table.row(
        "browser tabs",
        format!(
            "{} target pages opened; {} of {} looks at a tab not live; live at the end: / {}, target page {}{}",
            browsed.pages, browsed.not_live, browsed.checks, browsed.live_at_end[0], browsed.live_at_end[1],
            browsed.error.as_ref().map(|e| format!("; error: {e}")).unwrap_or_default()
        ),
        browsed.error.is_none() && browsed.live_at_end == [true, true] && browsed.pages > 0,
    );
    let files: Vec<u64> = std::fs::read_dir(&record)
        .map(|d| d.filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).collect())
        .unwrap_or_default();
    let total: u64 = files.iter().sum();
    table.row(
        "recordings",
        format!("{} files, {total} bytes (bound {record_total}, files of {record_file})", files.len()),
        files.len() > 1 && total <= record_total + record_file,
    );
    if let Some((made, before, during, after)) = f.burst {
        table.row(
            "burst of bogus dial-in connections",
            format!(
                "{made} made; telemon's descriptors {before} before, {during} at its end, {after} 15 s later \
                 (at most {} more: the connections of a round of restarts, and 20)",
                static_count / 10
            ),
            made >= opts.burst && after <= before + static_count / 10 + 20,
        );
    }
    table.info("schedule", format!("the latest fault ran {lateness:.1?} after its time"));
    for (k, r) in &f.kills {
        table.info(
            "SIGKILL",
            format!(
                "at +{:.0}s, answering again {:.1?} later; exit status at the end {exit:?}",
                (*k - start).as_secs_f64(),
                *r - *k
            ),
        );
    }
    if !f.restart_failures.is_empty() {
        table.row("sims restarted", first(&f.restart_failures), false);
    }
    table.row("telemon stopped cleanly at the end (SIGTERM)", format!("{exit:?}"), exit == Some(0));

    let mut text = format!(
        "product soak: {} targets ({} per kind, {} in file_sd, {} HMON dialling in), {} min, seed {seed}\n\nschedule:\n{}\n",
        expected_up, opts.per_kind, opts.file_sd, opts.hmon_dialers, opts.minutes, plan.describe()
    );
    text += &table.render();
    text += "\nFlat: the median of the last third of the samples after the warm-up at most 10% (descriptors 5%) plus a \
             little slack above the middle third's, and the peak within 1.5x the warm-up's last minute; both on the run \
             after the SIGKILL (in the warm-up). A series' missing seconds are documented losses inside the SIGKILL's or \
             the full disk's window; the others are lost unless excused (a value series' target down, a dial-in name \
             gone with the killed telemon or forgotten after its linger).\n";
    ns.stop().await;
    drop(prometheus);
    vm.stop().await;
    drop(otlp);
    drop(work);
    Ok(Report { passed: table.passed(), text })
}

/// Stops the sims of `picked` at once (each stop waits for its sim's task), noting each as a cause.
async fn stop_all(slots: &mut [Slot], picked: &[usize], causes: &mut Vec<Cause>) {
    let mut stopping = tokio::task::JoinSet::new();
    for &i in picked {
        causes.push(Cause { at: Instant::now(), slot: i, up: false });
        if let Some(running) = slots[i].running.take() {
            stopping.spawn(running.stop());
        }
    }
    while stopping.join_next().await.is_some() {}
}

/// Waits (10 s at most) for a scrape of `/metrics` that ended after `after`.
async fn fresh_scrape(shared: &Shared, after: Instant) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && lock(shared).at.is_none_or(|at| at <= after) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `NAME up|down at +Ss` of a cause.
fn describe(name: &str, c: &Cause, start: Instant) -> String {
    format!(
        "{name} {} at +{:.0}s",
        if c.up { "up" } else { "down" },
        c.at.saturating_duration_since(start).as_secs_f64()
    )
}

/// The first few of `items`, after `": "` (nothing when empty).
fn first(items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!(": {}", items.iter().take(5).cloned().collect::<Vec<_>>().join("; "))
    }
}

/// The table of checks.
#[derive(Debug, Default)]
struct Table {
    rows: Vec<(String, String, Option<bool>)>,
}

impl Table {
    fn row(&mut self, check: &str, value: String, ok: bool) {
        self.rows.push((check.to_owned(), value, Some(ok)));
    }

    fn info(&mut self, check: &str, value: String) {
        self.rows.push((check.to_owned(), value, None));
    }

    fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.2 != Some(false))
    }

    fn render(&self) -> String {
        let mut out = String::from("| check | value | result |\n|---|---|---|\n");
        for (c, v, ok) in &self.rows {
            let r = match ok {
                Some(true) => "PASS",
                Some(false) => "FAIL",
                None => "",
            };
            let _ = writeln!(out, "| {c} | {v} | {r} |");
        }
        let _ = writeln!(out, "\nresult: {}", if self.passed() { "PASS" } else { "FAIL" });
        out
    }
}

/// telemon's CPU in each minute, in % of one core, from the 10 s samples (of one run each).
fn cpu_per_minute(figures: &[Figures]) -> String {
    let ticks = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    let mut per: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for w in figures.windows(2) {
        if w[0].run != w[1].run {
            continue;
        }
        let e = per.entry((w[1].t / 60.0) as u64).or_default();
        e.0 += (w[1].cpu_ticks - w[0].cpu_ticks) / ticks;
        e.1 += w[1].t - w[0].t;
    }
    per.iter()
        .map(|(m, (cpu, secs))| format!("{}: {:.0}", m + 1, 100.0 * cpu / secs.max(1.0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Open descriptors of `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// The OTLP receiver's count: points, distinct points.
fn otlp_counts(r: &OtlpReceiver) -> (u64, u64) {
    let c = r.count.lock().unwrap_or_else(|e| e.into_inner());
    (c.points, c.points - c.duplicates())
}

/// Waits (60 s at most) until both disk queues are empty: whether they were.
async fn drain(api: &Api) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(m) = api.get("/metrics").await {
            let queued: f64 = m
                .lines()
                .filter(|l| l.starts_with("telemon_sender_queue_disk_bytes{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            if queued == 0.0 {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// Waits (5 s at most) until telemon's `/metrics` lists exactly `active` of the file_sd pool, each with its
/// `rev` label: how long that took, or `None`.
async fn sd_seen(api: &Api, slots: &[Slot], active: &[SdTarget], pool: &[usize]) -> Option<Duration> {
    let t0 = Instant::now();
    let want: HashSet<&str> = active.iter().map(|t| slots[t.slot].name.as_str()).collect();
    let pool: HashSet<&str> = pool.iter().map(|i| slots[*i].name.as_str()).collect();
    while t0.elapsed() < Duration::from_secs(5) {
        if let Ok(m) = api.get("/metrics").await {
            let mut listed = HashSet::new();
            let mut revs: HashMap<String, String> = HashMap::new();
            for line in m.lines().filter(|l| !l.starts_with('#')) {
                let Some((name, labels, _)) = parse_line(line) else { continue };
                let Some(target) = label(&labels, "target") else { continue };
                if !pool.contains(target) {
                    continue;
                }
                if name == "telemon_target_up" {
                    listed.insert(target.to_owned());
                }
                if let Some(rev) = label(&labels, "rev") {
                    revs.insert(target.to_owned(), rev.to_owned());
                }
            }
            let labelled =
                active.iter().all(|t| revs.get(&slots[t.slot].name).is_some_and(|r| *r == t.rev.to_string()));
            if listed.len() == want.len() && listed.iter().all(|t| want.contains(t.as_str())) && labelled {
                return Some(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// `POST /-/reload`, then 5 s later: a good reload applied with every connection kept but those of targets a
/// cause touched; a broken one refused, the last reload marked failed, and nothing changed.
async fn reload(
    api: &Api,
    shared: &Shared,
    slots: &[Slot],
    causes: &[Cause],
    broken: bool,
    k: usize,
    out: &mut Reloads,
) {
    fresh_scrape(shared, Instant::now()).await;
    let before = lock(shared).connects.clone();
    let t0 = Instant::now();
    let answer = api.post("/-/reload").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (after, reload_ok, at) = {
        let s = lock(shared);
        (s.connects.clone(), s.reload_ok, s.at)
    };
    // A sim stopped or started since 30 s before the reload may have reconnected meanwhile.
    let touched = |target: &str| {
        causes.iter().any(|c| c.at + Duration::from_secs(30) > t0 && slots[c.slot].name == target)
    };
    let mut changed = Vec::new();
    for (target, c) in &before {
        match after.get(target) {
            Some(a) if a == c => {}
            // A Mono agent's name, or a target a restart or a file_sd rewrite touched, may change.
            _ if target.starts_with("mono/") || touched(target) => {}
            None if target.contains(':') => {}
            _ => changed.push(target.clone()),
        }
    }
    let status = answer.as_ref().map(|a| a.0).unwrap_or(0);
    if broken {
        out.broken += 1;
        let refused = !(200..300).contains(&status) && reload_ok == Some(0.0);
        if refused && changed.is_empty() && after.len() >= before.len() {
            out.broken_ok += 1;
        } else {
            out.notes.push(format!(
                "broken reload {k}: status {status}, reload_successful {reload_ok:?}, {} targets before, {} after",
                before.len(),
                after.len()
            ));
        }
    } else {
        out.good += 1;
        if (200..300).contains(&status) && reload_ok == Some(1.0) && at.is_some_and(|a| a > t0) {
            out.good_ok += 1;
        } else {
            out.notes
                .push(format!("reload {k}: status {status}, reload_successful {reload_ok:?}: {answer:?}"));
        }
    }
    if !changed.is_empty() {
        // Why they reconnected: their last error, from /targets.
        let listing: Option<serde_json::Value> =
            api.get("/targets").await.ok().and_then(|b| serde_json::from_str(&b).ok());
        let why: Vec<String> = changed
            .iter()
            .take(3)
            .map(|t| {
                let row = listing
                    .as_ref()
                    .and_then(|l| l["targets"].as_array()?.iter().find(|r| r["name"] == t.as_str()).cloned());
                let row = row.unwrap_or_default();
                format!(
                    "{t}: connects {:?} -> {:?}, last error {}, errors {}",
                    before.get(t),
                    after.get(t),
                    row["last_error"],
                    row["errors"]
                )
            })
            .collect();
        out.notes.push(format!("reload {k}: {} reconnected ({})", changed.len(), why.join("; ")));
    }
    out.reconnected.extend(changed.into_iter().map(|t| (k, t)));
}

/// `n` bogus connections to the dial-in listeners, 128 at a time, each from a loopback source of its own
/// (127.2.x.y, so that the listeners' per-source refusal does not shut out the genuine agents on 127.0.0.1):
/// a third say nothing and hang up after 1 s, the others send garbage. Returns how many connected.
async fn burst(n: usize, mono: SocketAddr, hmon: SocketAddr) -> usize {
    use tokio::io::AsyncWriteExt;
    let mut tasks = tokio::task::JoinSet::new();
    let mut made = 0;
    for i in 0..n {
        while tasks.len() >= 128 {
            if let Some(Ok(true)) = tasks.join_next().await {
                made += 1;
            }
        }
        let to = if i % 2 == 0 { mono } else { hmon };
        let source = std::net::IpAddr::from([127, 2, (i / 250) as u8, (i % 250 + 1) as u8]);
        tasks.spawn(async move {
            let Ok(socket) = tokio::net::TcpSocket::new_v4() else { return false };
            if socket.bind(SocketAddr::new(source, 0)).is_err() {
                return false;
            }
            let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(5), socket.connect(to)).await else {
                return false;
            };
            if i % 3 == 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            } else {
                let _ = s.write_all(b"\x00\xffbogus dial-in, not a hello\r\n\r\n").await;
            }
            true
        });
    }
    while let Some(r) = tasks.join_next().await {
        if let Ok(true) = r {
            made += 1;
        }
    }
    made
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::median;

    #[test]
    fn a_scrape_is_absorbed() {
        let mut s = Scraped::default();
        let body = "telemon_target_up{protocol=\"smon\",target=\"a\"} 1\n\
                    telemon_target_connects_total{protocol=\"smon\",target=\"a\"} 3\n\
                    telemon_sender_samples_total{sender=\"otlp\",result=\"sent\"} 10\n\
                    telemon_config_last_reload_successful 1\n";
        absorb(&mut s, body, Instant::now());
        assert_eq!(s.connects["a"], 3.0);
        assert_eq!(s.sent("otlp", "sent"), 10.0);
        assert_eq!(s.reload_ok, Some(1.0));
        s.finished.push(std::mem::take(&mut s.senders));
        absorb(&mut s, &body.replace("} 10", "} 4"), Instant::now());
        assert_eq!(s.sent("otlp", "sent"), 14.0, "both runs");
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
