//! Alerts that reach someone: every alert of `deploy/prometheus/rules.yml`, caused over the sims, must arrive at a
//! webhook through a real Prometheus and a real Alertmanager, first firing and then resolved once its cause ends.
//!
//! The test runs `telemon serve` (the binary) over three sys161 sims, a dyalog sim, an rvOS sim and a Mono agent, with
//! two push senders whose receivers are not there yet; a second `telemon serve` without targets; Prometheus 2.42
//! (Debian's `prometheus`) scraping both every second and evaluating `rules.yml` every second, with every `for:`
//! shortened to [`FOR`] (nothing else of the rules changes: their windows, such as `[5m]`, stay); Alertmanager
//! (Debian's `prometheus-alertmanager`) on a free loopback port, routing by `severity` (critical to `/pager`,
//! warning to `/chat`) with one notification per alert and 1 s group timers; and a webhook receiver in the test.
//!
//! All causes start together: a sys161 whose simulated clock stops (its debugger), one that is stopped, one whose
//! lines arrive corrupted, a Dyalog workspace 95% full and an untrapped signal, an rvOS timer task that stops
//! petting the watchdog, a Mono working set that grows by 1 MiB/s, the second telemon killed, and the push senders'
//! receivers absent from the start (one sender's disk queue grows, the other drops samples older than 10 s). Each
//! cause ends as soon as its alert arrives firing (the stopped sys161 and the killed telemon start again, the working
//! set falls back, a sender's receiver, a real Prometheus, starts), so that every alert resolves as soon as its rule
//! allows; an event (the signal) ends when it happens. Every alert that arrives must be one of those
//! expected, with exactly the expected labels (`target`, `protocol`, `severity` and the rest), its summary naming
//! the target and the value, at the receiver its severity says; and each must arrive resolved, after its cause
//! ended. The test prints, per alert, the time from the cause to the firing notification and from the cause's end
//! to the resolved one.
//!
//! It takes about as long as the longest window of the rules, a little over 5 minutes: an error, a dropped sample or
//! a signal keeps `rate(...[5m])` above 0 for 5 minutes. Without `prometheus` or `prometheus-alertmanager` on `PATH`
//! the test fails under `CI=true` (CI installs them: `.ci/prometheus.sh`, `.ci/alertmanager.sh`) and elsewhere
//! prints `SKIPPED` and passes. Every wait is bounded; nothing asserts how long anything took.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mono_counters::CounterValue;
use sim_common::Shutdown;

mod support;
use support::{http_get, urlencode, Alert, Alertmanager, Component, Labels, Launch, Notification, Webhook};

/// Every `for:` of the rules, shortened (a `for: 0m` stays).
const FOR: &str = "5s";
/// The safety net of the whole run, from the moment the causes start: the rules' longest window (5 minutes, which a
/// resolution waits for after an error or a signal), the firing before it, and room.
const RUN_BOUND: Duration = Duration::from_secs(10 * 60);
/// The Mono working set's counter, as the agent names it.
const WORKING_SET: &str = "Mono System/Working Set";
/// The Mono working set before and after the leak, and how fast it leaks: 1 MiB/s is 1,800 MiB per 30 minutes,
/// over the rule's 256 MiB.
const WORKING_SET_BASE: i64 = 200 << 20;
const LEAK_PER_SECOND: i64 = 1 << 20;

/// What the test makes happen; an alert ends its cause when it arrives firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cause {
    /// sys161 `halted`: its simulated clock stops (as in its debugger), the connection stays.
    ClockStopped,
    /// sys161 `crashed`: the sim stops; it starts again.
    SimStopped,
    /// sys161 `garbled`: every other `DATA` line corrupted.
    LinesCorrupted,
    /// The Dyalog workspace 95% full.
    WorkspaceFull,
    /// An untrapped signal in the Dyalog interpreter (an event: it ends as it happens).
    UntrappedSignal,
    /// rvOS's timer task stops petting the watchdog.
    TaskHung,
    /// The Mono working set grows.
    Leak,
    /// The second telemon is killed; it starts again.
    TelemonKilled,
    /// The receiver of the push sender `backlog` is not there (from telemon's start); a Prometheus starts there.
    BacklogReceiverDown,
    /// The same for the push sender `lossy`, which drops what is older than 10 s.
    LossyReceiverDown,
}

/// When a cause started and ended.
#[derive(Debug, Clone, Copy)]
struct Span {
    started: Instant,
    ended: Option<Instant>,
}

/// How a summary names its value.
#[derive(Debug)]
enum Summary {
    /// Exactly this text (the value is fixed by the test: "95% full", "is down").
    Exact(String),
    /// This prefix, a number, whatever unit the template adds, and this suffix.
    Value { prefix: String, suffix: &'static str },
}

impl Summary {
    fn check(&self, summary: &str) -> Result<(), String> {
        let middle = match self {
            Summary::Exact(want) if summary == want => return Ok(()),
            Summary::Exact(want) => return Err(format!("summary {summary:?}, expected {want:?}")),
            Summary::Value { prefix, suffix } => summary
                .strip_prefix(prefix.as_str())
                .and_then(|rest| rest.strip_suffix(suffix))
                .ok_or_else(|| format!("summary {summary:?}, expected {prefix:?} VALUE {suffix:?}"))?,
        };
        let number: String = middle.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        match number.parse::<f64>() {
            Ok(v) if v > 0.0 => Ok(()),
            _ => Err(format!("summary {summary:?}: no value above 0 in {middle:?}")),
        }
    }
}

/// One alert the causes must raise.
#[derive(Debug)]
struct Expected {
    cause: Cause,
    /// Whether its arrival ends the cause (with every other alert of the cause that does).
    ends_cause: bool,
    /// Where its severity routes it.
    receiver: &'static str,
    /// All of its labels, exactly.
    labels: Labels,
    summary: Summary,
    /// A name its description must give (the target, the sender, telemon's address).
    mention: String,
    fired: Option<Instant>,
    resolved: Option<Instant>,
}

/// `pairs` as labels.
fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The labels of an alert from telemon at `instance` (job `telemon`): `pairs` and those two.
fn on_telemon(instance: &str, pairs: &[(&str, &str)]) -> Labels {
    let mut l = labels(pairs);
    l.insert("job".into(), "telemon".into());
    l.insert("instance".into(), instance.into());
    l
}

impl Expected {
    fn new(cause: Cause, receiver: &'static str, labels: Labels, summary: Summary, mention: &str) -> Self {
        Expected {
            cause,
            ends_cause: true,
            receiver,
            labels,
            summary,
            mention: mention.to_owned(),
            fired: None,
            resolved: None,
        }
    }

    /// An alert that comes with another one's cause and does not end it.
    fn side_effect(mut self) -> Self {
        self.ends_cause = false;
        self
    }

    fn name(&self) -> String {
        let key =
            ["target", "sender", "job"].iter().find_map(|k| self.labels.get(*k)).cloned().unwrap_or_default();
        format!("{} {key}", self.labels["alertname"])
    }

    /// What is wrong with `alert`, which has this one's labels, as it arrived at `receiver`.
    fn check(&self, alert: &Alert, receiver: &str) -> Result<(), String> {
        if receiver != self.receiver {
            return Err(format!("routed to {receiver}, expected {}", self.receiver));
        }
        let annotation = |name: &str| alert.annotations.get(name).map(String::as_str).unwrap_or_default();
        self.summary.check(annotation("summary"))?;
        let description = annotation("description");
        if !description.contains(&self.mention) {
            return Err(format!("description {description:?} does not name {}", self.mention));
        }
        if alert.starts_at.len() < 19 {
            return Err(format!("startsAt {:?}", alert.starts_at));
        }
        // RFC 3339 in UTC: to the second, the text compares as the time does.
        if alert.status == "resolved" && alert.ends_at.get(..19) < alert.starts_at.get(..19) {
            return Err(format!(
                "resolved with endsAt {} before startsAt {}",
                alert.ends_at, alert.starts_at
            ));
        }
        Ok(())
    }
}

/// `deploy/prometheus/rules.yml` with every `for:` other than `0m` set to [`FOR`].
fn rules_with_short_for() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus/rules.yml");
    let rules = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut shortened = 0;
    let lines: Vec<String> = rules
        .lines()
        .map(|line| match line.trim_start().strip_prefix("for: ") {
            Some(d) if d.trim() != "0m" => {
                shortened += 1;
                format!("{}for: {FOR}", &line[..line.len() - line.trim_start().len()])
            }
            _ => line.to_owned(),
        })
        .collect();
    assert!(shortened > 0, "rules.yml: no `for:` found");
    lines.join("\n") + "\n"
}

/// Prometheus: scrapes telemon (job `telemon`) and the spare telemon (job `telemon-spare`) every second, evaluates
/// `rules` every second and sends to `alertmanager`.
fn prometheus_yml(rules: &Path, telemon: SocketAddr, spare: SocketAddr, alertmanager: SocketAddr) -> String {
    format!(
        r#"global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - '{}'
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["{alertmanager}"]
scrape_configs:
  - job_name: telemon
    static_configs:
      - targets: ["{telemon}"]
  - job_name: telemon-spare
    static_configs:
      - targets: ["{spare}"]
"#,
        rules.display()
    )
}

/// Alertmanager: critical to `/pager`, warning to `/chat` (as deploy/alertmanager routes them), one notification per
/// alert (`group_by: ['...']`), sent a second after it changes, never repeated within the test.
fn alertmanager_yml(webhook: &Webhook) -> String {
    format!(
        r#"route:
  receiver: chat
  group_by: ['...']
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['severity="critical"']
      receiver: pager
    - matchers: ['severity="warning"']
      receiver: chat
receivers:
  - name: pager
    webhook_configs:
      - url: {}
        send_resolved: true
  - name: chat
    webhook_configs:
      - url: {}
        send_resolved: true
"#,
        webhook.url("/pager"),
        webhook.url("/chat")
    )
}

/// A listener on a free loopback port, and its address.
async fn bind() -> (tokio::net::TcpListener, SocketAddr) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// `telemon serve --config CONFIG` on `at` (or a free port), its output in its directory; waits for `/metrics`.
async fn serve(config: &Path, at: Option<SocketAddr>) -> Component {
    let launch = Launch::new("telemon", Path::new(support::TELEMON));
    let launch = match at {
        Some(addr) => launch.at(addr),
        None => launch,
    };
    let listen = launch.addr().to_string();
    let mut telemon = launch.arg("serve").arg("--config").arg(config).arg("--listen").arg(listen).spawn();
    telemon.wait_ready("/metrics").await;
    telemon
}

/// The targets on telemon's `/metrics` that are up: `(protocol, target)`.
async fn targets_up(telemon: SocketAddr) -> Vec<(String, String)> {
    let Ok((200, metrics)) = http_get(telemon, "/metrics", &[]).await else { return Vec::new() };
    let label = |line: &str, name: &str| {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        Some(line[start..].split('"').next()?.to_owned())
    };
    metrics
        .lines()
        .filter(|l| l.starts_with("telemon_target_up{") && l.ends_with("} 1"))
        .filter_map(|l| Some((label(l, "protocol")?, label(l, "target")?)))
        .collect()
}

/// How many series an instant query on Prometheus answers (none when it fails).
async fn count(prometheus: &Component, query: &str) -> usize {
    let path = format!("/api/v1/query?query={}", urlencode(query));
    let Ok((200, body)) = http_get(prometheus.addr(), &path, &[]).await else { return 0 };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["result"].as_array().map_or(0, Vec::len)
}

/// Everything the causes act on.
struct Rig {
    halted: sys161_sim::Control,
    garbled: sys161_sim::Control,
    crashed_dir: tempfile::TempDir,
    crashed: Option<sys161_sim::Running>,
    dyalog: dyalog_sim::Sim,
    workspace_used: i64,
    rvos: rvos_sim::SimHandle,
    mono: mono_agent_sim::ValueOverrides,
    leak: Option<tokio::task::JoinHandle<()>>,
    spare_config: PathBuf,
    spare_addr: SocketAddr,
    spare: Option<Component>,
    /// Where each push sender's receiver is to be, by its cause.
    receiver_addrs: BTreeMap<Cause, SocketAddr>,
    receivers: Vec<support::Receiver>,
    prometheus_bin: PathBuf,
}

impl Rig {
    /// Starts `cause` (the receivers are down from the start: nothing to do).
    async fn start(&mut self, cause: Cause) {
        match cause {
            Cause::ClockStopped => self.halted.pause(),
            Cause::SimStopped => {
                self.crashed.take().unwrap().stop().await.expect("the sys161 sim ends cleanly");
            }
            Cause::LinesCorrupted => self.garbled.corrupt_every(2),
            Cause::WorkspaceFull => {
                let mut state = self.dyalog.world().lock();
                self.workspace_used = state.workspace.used;
                state.workspace.used = state.workspace.size / 20 * 19;
            }
            Cause::UntrappedSignal => self.dyalog.world().raise(dyalog_sim::WorldEvent::Event {
                kind: hmon::EventKind::UntrappedSignal,
                tid: Some(1),
                stack: Some(vec!["#.Worker.Loop[7]".into(), "#.Worker.Fetch[2]".into()]),
                dmx: None,
                size: None,
            }),
            Cause::TaskHung => self.rvos.hang(rvos_sim::KernelTask::Timer, true),
            Cause::Leak => {
                let mono = self.mono.clone();
                self.leak = Some(tokio::spawn(async move {
                    let start = Instant::now();
                    loop {
                        let grown = (start.elapsed().as_secs_f64() * LEAK_PER_SECOND as f64) as i64;
                        mono.set(WORKING_SET, CounterValue::Long(WORKING_SET_BASE + grown));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }));
            }
            Cause::TelemonKilled => self.spare.take().unwrap().kill().await,
            Cause::BacklogReceiverDown | Cause::LossyReceiverDown => {}
        }
    }

    /// Ends `cause`.
    async fn end(&mut self, cause: Cause) {
        match cause {
            Cause::ClockStopped => self.halted.resume(),
            Cause::SimStopped => {
                let config = sys161_sim::Config::default();
                self.crashed = Some(sys161_sim::Running::spawn(self.crashed_dir.path(), config).unwrap());
            }
            Cause::LinesCorrupted => self.garbled.corrupt_every(0),
            Cause::WorkspaceFull => self.dyalog.world().lock().workspace.used = self.workspace_used,
            Cause::UntrappedSignal => {}
            Cause::TaskHung => self.rvos.hang(rvos_sim::KernelTask::Timer, false),
            Cause::Leak => {
                self.leak.take().unwrap().abort();
                self.mono.set(WORKING_SET, CounterValue::Long(WORKING_SET_BASE));
            }
            Cause::TelemonKilled => self.spare = Some(serve(&self.spare_config, Some(self.spare_addr)).await),
            Cause::BacklogReceiverDown | Cause::LossyReceiverDown => {
                let receiver = support::Prometheus::new(&self.prometheus_bin).at(self.receiver_addrs[&cause]);
                self.receivers.push(support::Receiver::prometheus_as(receiver).await);
            }
        }
    }
}

/// The table of what arrived when, for the report and for a failure.
fn table(expected: &[Expected], causes: &BTreeMap<Cause, Span>) -> String {
    let secs = |from: Option<Instant>, to: Option<Instant>| match (from, to) {
        (Some(a), Some(b)) => format!("{:>7.1} s", b.saturating_duration_since(a).as_secs_f64()),
        _ => format!("{:>9}", "-"),
    };
    let mut out = format!("{:<44} {:>16}  {:>22}\n", "alert", "cause -> firing", "cause ended -> resolved");
    for e in expected {
        let span = causes[&e.cause];
        out += &format!(
            "{:<44} {:>16}  {:>22}\n",
            e.name(),
            secs(Some(span.started), e.fired),
            secs(span.ended, e.resolved)
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_alert_reaches_the_webhook_firing_then_resolved() {
    let test = "every_alert_reaches_the_webhook_firing_then_resolved";
    let Some((prometheus_bin, _promtool)) = support::prometheus_and_promtool(test) else { return };
    let Some(alertmanager_bin) = support::alertmanager(test) else { return };
    let work = tempfile::tempdir().unwrap();

    let mut webhook = Webhook::start().await;
    let alertmanager = Alertmanager::new(&alertmanager_bin, alertmanager_yml(&webhook)).start().await;

    // The sims.
    let shutdown = Shutdown::new();
    let sys161 = |control: &sys161_sim::Control| {
        let dir = tempfile::tempdir().unwrap();
        let config = sys161_sim::Config { control: control.clone(), ..sys161_sim::Config::default() };
        let sim = sys161_sim::Running::spawn(dir.path(), config).unwrap();
        (dir, sim)
    };
    let (halted, garbled) = (sys161_sim::Control::default(), sys161_sim::Control::default());
    let (halted_dir, _halted_sim) = sys161(&halted);
    let (garbled_dir, _garbled_sim) = sys161(&garbled);
    let (crashed_dir, crashed_sim) = sys161(&sys161_sim::Control::default());
    let dyalog = dyalog_sim::Sim::new(dyalog_sim::Config { tick: None, ..dyalog_sim::Config::default() });
    let (l, dyalog_addr) = bind().await;
    tokio::spawn(dyalog.clone().serve(l, shutdown.clone()));
    let rvos_config = rvos_sim::Config {
        system: rvos_sim::SystemConfig { trace_prefill: 100, ..rvos_sim::SystemConfig::default() },
        ..rvos_sim::Config::default()
    };
    let (rvos, rvos_handle) = rvos_sim::start(rvos_config);
    let (l, rvos_addr) = bind().await;
    tokio::spawn(rvos_sim::serve(l, rvos, shutdown.clone()));
    let mono_listen = support::free_addr();

    // telemon over them, with two push senders whose receivers are not there: one keeps everything on its disk
    // queue, the other drops what is older than 10 s.
    let receiver_addrs = BTreeMap::from([
        (Cause::BacklogReceiverDown, support::free_addr()),
        (Cause::LossyReceiverDown, support::free_addr()),
    ]);
    let mut config = String::new();
    for (name, dir) in [("halted", &halted_dir), ("crashed", &crashed_dir), ("garbled", &garbled_dir)] {
        config += &format!(
            "[[meter161]]\nname = \"{name}\"\ndir = '{}'\ninterval = \"250ms\"\n\n",
            dir.path().display()
        );
    }
    config += &format!(
        "[[hmon]]\nname = \"dyalog\"\nconnect = \"{dyalog_addr}\"\npoll = \"250ms\"\n\n\
         [[sysinfo]]\nname = \"rvos\"\nconnect = \"{rvos_addr}\"\nevery = \"500ms\"\n\n\
         [[mono_listen]]\nname = \"mono\"\nlisten = \"{mono_listen}\"\n\n"
    );
    for (name, cause, extra) in [
        ("backlog", Cause::BacklogReceiverDown, ""),
        ("lossy", Cause::LossyReceiverDown, "queue_max_age = \"10s\"\n"),
    ] {
        let receiver = receiver_addrs[&cause];
        config += &format!(
            "[[remote_write]]\nname = \"{name}\"\nurl = \"http://{receiver}/api/v1/write\"\nbatch = \"1s\"\n\
             timeout = \"2s\"\nqueue_dir = '{}'\nexternal_labels = {{ via = \"{name}\" }}\n{extra}\n",
            work.path().join(name).display()
        );
    }
    let telemon_config = work.path().join("telemon.toml");
    std::fs::write(&telemon_config, config).unwrap();
    let telemon = serve(&telemon_config, None).await;
    let receivers_down = Instant::now();
    let telemon_addr = telemon.addr();

    let mono = mono_agent_sim::ValueOverrides::default();
    mono.set(WORKING_SET, CounterValue::Long(WORKING_SET_BASE));
    let mut agent = mono_agent_sim::AgentConfig::from_options(&format!(
        "address={mono_listen},counters={WORKING_SET},interval=100"
    ))
    .unwrap();
    agent.backoff =
        mono_agent_sim::Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(200) };
    tokio::spawn(mono_agent_sim::run_with_overrides(agent, mono.clone(), shutdown.clone()));

    // The spare telemon, which watches nothing: it is there to be killed.
    let spare_config = work.path().join("spare.toml");
    std::fs::write(&spare_config, "").unwrap();
    let spare = serve(&spare_config, None).await;
    let spare_addr = spare.addr();

    let up = support::until("the six targets up", Duration::from_millis(100), async || {
        let up = targets_up(telemon_addr).await;
        (up.len() == 6).then_some(up)
    })
    .await;
    let mono_target = up.iter().find(|(p, _)| p == "mono").map(|(_, t)| t.clone()).expect("the Mono agent");

    // Prometheus, once every target is up (a target still connecting would be down for it).
    let rules = work.path().join("rules.yml");
    std::fs::write(&rules, rules_with_short_for()).unwrap();
    let yml = prometheus_yml(&rules, telemon_addr, spare_addr, alertmanager.addr());
    let prometheus = support::Prometheus::new(&prometheus_bin).config(yml).start().await;
    support::until("Prometheus scraping both telemons", Duration::from_millis(200), async || {
        (count(&prometheus, r#"up{job=~"telemon|telemon-spare"} == 1"#).await == 2).then_some(())
    })
    .await;
    // ...and seeing each simulated clock move, so that a clock that stops must stand still for the rule's whole
    // window (with a single sample before it stops, rate() would be 0 at once).
    support::until("Prometheus seeing the sys161 clocks move", Duration::from_millis(200), async || {
        (count(&prometheus, "rate(sys161_simulated_seconds_total[1m]) > 0").await == 3).then_some(())
    })
    .await;

    // What must arrive.
    let (a, b) = (telemon_addr.to_string(), spare_addr.to_string());
    let value = |prefix: &str, suffix| Summary::Value { prefix: prefix.to_owned(), suffix };
    let exact = |s: &str| Summary::Exact(s.to_owned());
    let mut expected = vec![
        Expected::new(
            Cause::SimStopped,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "TelemonTargetDown"),
                    ("severity", "warning"),
                    ("target", "crashed"),
                    ("protocol", "meter161"),
                ],
            ),
            exact("telemon target crashed is down"),
            "crashed",
        ),
        Expected::new(
            Cause::SimStopped,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "TelemonTargetErrors"),
                    ("severity", "warning"),
                    ("target", "crashed"),
                    ("protocol", "meter161"),
                    ("kind", "connect"),
                ],
            ),
            value("telemon target crashed: connect errors (", "/s)"),
            "crashed",
        )
        .side_effect(),
        Expected::new(
            Cause::ClockStopped,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "Sys161SimulatedTimeStopped"),
                    ("severity", "warning"),
                    ("target", "halted"),
                    ("protocol", "meter161"),
                ],
            ),
            exact("System/161 halted: simulated time has stopped"),
            "halted",
        ),
        Expected::new(
            Cause::LinesCorrupted,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "TelemonTargetErrors"),
                    ("severity", "warning"),
                    ("target", "garbled"),
                    ("protocol", "meter161"),
                    ("kind", "decode"),
                ],
            ),
            value("telemon target garbled: decode errors (", "/s)"),
            "garbled",
        ),
        Expected::new(
            Cause::WorkspaceFull,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "DyalogWorkspaceNearlyFull"),
                    ("severity", "warning"),
                    ("target", "dyalog"),
                    ("protocol", "hmon"),
                ],
            ),
            exact("Dyalog dyalog: workspace 95% full"),
            "dyalog",
        ),
        Expected::new(
            Cause::UntrappedSignal,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "DyalogUntrappedSignal"),
                    ("severity", "warning"),
                    ("target", "dyalog"),
                    ("protocol", "hmon"),
                    ("event", "UntrappedSignal"),
                ],
            ),
            exact("Dyalog dyalog: untrapped signal (1 since telemon connected)"),
            "dyalog",
        ),
        Expected::new(
            Cause::TaskHung,
            "/pager",
            on_telemon(
                &a,
                &[
                    ("alertname", "RvosWatchdogHeartbeatStale"),
                    ("severity", "critical"),
                    ("target", "rvos"),
                    ("protocol", "sysinfo"),
                    ("task", "timer"),
                ],
            ),
            value("rvOS rvos: watchdog heartbeat of timer is stale (", " old)"),
            "rvos",
        ),
        Expected::new(
            Cause::Leak,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "MonoWorkingSetGrowth"),
                    ("severity", "warning"),
                    ("target", &mono_target),
                    ("protocol", "mono"),
                    ("category", "Mono System"),
                    ("counter", "Working Set"),
                ],
            ),
            value(&format!("Mono {mono_target}: working set growing by "), "B per 30 minutes"),
            &mono_target,
        ),
        Expected::new(
            Cause::TelemonKilled,
            "/pager",
            labels(&[
                ("alertname", "TelemonDown"),
                ("severity", "critical"),
                ("job", "telemon-spare"),
                ("instance", &b),
            ]),
            exact(&format!("telemon is down: Prometheus cannot scrape job telemon-spare at {b}")),
            &b,
        ),
        Expected::new(
            Cause::BacklogReceiverDown,
            "/chat",
            on_telemon(
                &a,
                &[("alertname", "TelemonSenderQueueGrowing"), ("severity", "warning"), ("sender", "backlog")],
            ),
            value("telemon push sender backlog: disk queue growing by ", "B/s"),
            "backlog",
        ),
        Expected::new(
            Cause::LossyReceiverDown,
            "/chat",
            on_telemon(
                &a,
                &[
                    ("alertname", "TelemonSenderDropping"),
                    ("severity", "warning"),
                    ("sender", "lossy"),
                    ("result", "dropped_too_old"),
                ],
            ),
            value("telemon push sender lossy: dropped_too_old at ", " samples/s"),
            "lossy",
        ),
    ];

    let mut rig = Rig {
        halted,
        garbled,
        crashed_dir,
        crashed: Some(crashed_sim),
        dyalog,
        workspace_used: 0,
        rvos: rvos_handle,
        mono,
        leak: None,
        spare_config,
        spare_addr,
        spare: Some(spare),
        receiver_addrs,
        receivers: Vec::new(),
        prometheus_bin,
    };

    // Every cause at once (the receivers have been down since telemon started).
    let run = Instant::now();
    let down = Span { started: receivers_down, ended: None };
    let mut causes = BTreeMap::from([(Cause::BacklogReceiverDown, down), (Cause::LossyReceiverDown, down)]);
    for cause in [
        Cause::ClockStopped,
        Cause::SimStopped,
        Cause::LinesCorrupted,
        Cause::WorkspaceFull,
        Cause::UntrappedSignal,
        Cause::TaskHung,
        Cause::Leak,
        Cause::TelemonKilled,
    ] {
        let started = Instant::now();
        rig.start(cause).await;
        let ended = (cause == Cause::UntrappedSignal).then_some(started);
        causes.insert(cause, Span { started, ended });
    }

    // The notifications, until every alert has arrived resolved.
    let bound = Instant::now() + RUN_BOUND;
    while expected.iter().any(|e| e.resolved.is_none()) {
        let wait = bound.saturating_duration_since(Instant::now());
        let Some(notification) = webhook.next(wait).await else {
            panic!(
                "not every alert arrived firing and resolved within {RUN_BOUND:?}:\n{}\n{}\n{}",
                table(&expected, &causes),
                prometheus.log_tail(),
                alertmanager.log_tail()
            );
        };
        let ended = receive(&notification, &mut expected, &causes);
        for cause in ended {
            rig.end(cause).await;
            causes.get_mut(&cause).unwrap().ended = Some(Instant::now());
        }
    }

    // The report: how long each took to reach the webhook (straight to stderr: the harness hides what passes).
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "\nevery alert at the webhook, firing and resolved, {:.0} s after the causes started (for: {FOR}):\n{}",
            run.elapsed().as_secs_f64(),
            table(&expected, &causes)
        ),
    );
    shutdown.cancel();
    for receiver in rig.receivers {
        receiver.stop().await;
    }
    prometheus.kill().await;
    alertmanager.kill().await;
    telemon.kill().await;
}

/// Takes one notification: each of its alerts must be expected, checked, arrive firing once and then resolved
/// once, and only after its cause ended. Returns the causes whose alerts have now all arrived firing.
fn receive(n: &Notification, expected: &mut [Expected], causes: &BTreeMap<Cause, Span>) -> Vec<Cause> {
    let alerts = n.alerts();
    assert!(!alerts.is_empty(), "a notification without alerts at {}: {}", n.path, n.body);
    let mut ended = Vec::new();
    for alert in alerts {
        let Some(e) = expected.iter_mut().find(|e| e.labels == alert.labels) else {
            panic!(
                "an alert that no cause explains, at {}: {alert:#?}\nexpected:\n{}",
                n.path,
                expected.iter().map(|e| format!("{:?}", e.labels)).collect::<Vec<_>>().join("\n")
            );
        };
        if let Err(why) = e.check(&alert, &n.path) {
            panic!("{}: {why}\n{alert:#?}", e.name());
        }
        assert_eq!(n.status(), alert.status, "one alert per notification: {}", n.body);
        let span = causes[&e.cause];
        match alert.status.as_str() {
            "firing" => {
                assert!(e.fired.is_none() && e.resolved.is_none(), "{} fired again: {alert:#?}", e.name());
                e.fired = Some(n.at);
                let cause = e.cause;
                let ends = |x: &&Expected| x.cause == cause && x.ends_cause;
                if span.ended.is_none() && expected.iter().filter(ends).all(|x| x.fired.is_some()) {
                    ended.push(cause);
                }
            }
            "resolved" => {
                assert!(e.fired.is_some(), "{} resolved before it fired: {alert:#?}", e.name());
                assert!(e.resolved.is_none(), "{} resolved twice: {alert:#?}", e.name());
                assert!(
                    span.ended.is_some_and(|end| end <= n.at),
                    "{} resolved while its cause ({:?}) lasted: {alert:#?}",
                    e.name(),
                    e.cause
                );
                e.resolved = Some(n.at);
            }
            other => panic!("{}: status {other:?}", e.name()),
        }
    }
    ended
}
