//! What `fleet-soak` and `product-soak` share: a fleet of in-process sims of the five protocols, each under its own
//! [`sim_common::Shutdown`] so that it can be stopped and started again on the same address or directory
//! ([`Slot`], [`start`], [`stop`]); the `telemon_target_up` transitions seen in scrapes of `/metrics`, Mono agents
//! told apart by the number each reports in one counter ([`Observed`], [`observe`]); and small helpers (a seeded
//! pick, percentiles, VmRSS).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sim_common::Running;
use smon_codec::Sample;
use tokio::net::{TcpListener, TcpSocket};

/// How long a restarted sim keeps trying to bind its old address.
pub const BIND_RETRY: Duration = Duration::from_secs(5);

/// Simulated time per step of an rvOS sim.
pub const RVOS_STEP: Duration = Duration::from_secs(10);
/// The counter in which Mono agent N reports [`AGENT_ID_BASE`] + N.
pub const AGENT_ID_COUNTER: &str = "Mono JIT/Methods from AOT";
/// [`AGENT_ID_COUNTER`]'s `counter` label on `/metrics`.
pub const AGENT_ID_COUNTER_LABEL: &str = "Methods from AOT";
/// What Mono agent 0 reports in [`AGENT_ID_COUNTER`].
pub const AGENT_ID_BASE: usize = 1000;

/// A sim's kind (one per protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// sys161 (meter161).
    Sys161,
    /// A Dyalog interpreter (HMON).
    Dyalog,
    /// An smon monitor.
    Smon,
    /// An rvOS sysinfo service.
    Rvos,
    /// A Mono agent (dials in).
    Mono,
}

/// Every kind.
pub const KINDS: [Kind; 5] = [Kind::Sys161, Kind::Dyalog, Kind::Smon, Kind::Rvos, Kind::Mono];

impl Kind {
    /// The `protocol` label of telemon's families.
    pub fn protocol(self) -> &'static str {
        match self {
            Kind::Sys161 => "meter161",
            Kind::Dyalog => "hmon",
            Kind::Smon => "smon",
            Kind::Rvos => "sysinfo",
            Kind::Mono => "mono",
        }
    }

    /// The sim's name.
    pub fn sim(self) -> &'static str {
        match self {
            Kind::Sys161 => "sys161",
            Kind::Dyalog => "dyalog",
            Kind::Smon => "smon",
            Kind::Rvos => "rvos",
            Kind::Mono => "mono-agent",
        }
    }
}

/// Where a sim lives.
#[derive(Debug, Clone)]
pub enum Place {
    /// sys161's folder (`DIR/.sockets/meter`).
    Dir(PathBuf),
    /// A TCP server's address (port 0 until first bound).
    Tcp(SocketAddr),
    /// A Mono agent dials telemon's `[[mono_listen]]` address.
    Dial(SocketAddr),
}

/// One sim of the fleet.
pub struct Slot {
    /// Its kind.
    pub kind: Kind,
    /// Its number within its kind.
    pub n: usize,
    /// Its telemon target name (for a Mono agent, only the soak's name for it).
    pub name: String,
    /// Where it lives.
    pub place: Place,
    /// The sim while it runs.
    pub running: Option<Running>,
}

/// A cheap smon source: a few figures that change every sample.
pub struct Synthetic(pub u64);

impl smon_sim::Source for Synthetic {
    fn sample(&mut self) -> Vec<Sample> {
        self.0 += 1;
        vec![
            Sample::new("linux.cpu.idle", [0], 1000 + self.0),
            Sample::new("linux.cpu.idle", [1], 2000 + 2 * self.0),
            Sample::new("linux.mem.free", [], 1 << 20),
        ]
    }
}

/// Binds `addr` with SO_REUSEADDR (so that a restarted sim gets its port back despite the old connections in
/// TIME_WAIT), retrying for a while when the port is still taken.
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let deadline = Instant::now() + BIND_RETRY;
    loop {
        let attempt = TcpSocket::new_v4().and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(addr)?;
            s.listen(1024)
        });
        match attempt {
            Ok(l) => return Ok(l),
            Err(e) if addr.port() != 0 && Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))),
        }
    }
}

/// Starts the sim of `slot` (again), on its address or folder.
pub async fn start(slot: &mut Slot) -> Result<()> {
    let running = match (&slot.place, slot.kind) {
        (Place::Dir(dir), _) => {
            let (listener, _) =
                sys161_sim::bind(dir).with_context(|| format!("binding {}/.sockets/meter", dir.display()))?;
            let config = sys161_sim::Config::default();
            Running::spawn(|shutdown| sys161_sim::run(listener, config, shutdown))
        }
        (Place::Tcp(addr), kind) => {
            let listener = bind(*addr).await?;
            slot.place = Place::Tcp(listener.local_addr()?);
            match kind {
                Kind::Dyalog => Running::spawn(|shutdown| {
                    dyalog_sim::Sim::new(dyalog_sim::Config::default()).serve(listener, shutdown)
                }),
                Kind::Smon => {
                    let config = smon_sim::Config { interval: Duration::from_secs(1), ..Default::default() };
                    let source = Synthetic(slot.n as u64 * 1000);
                    Running::spawn(|shutdown| smon_sim::serve(listener, source, config, shutdown))
                }
                Kind::Rvos => {
                    // One step of the simulated kernel per 10 s (not 100 ms): its channels and processes
                    // drift upwards as it steps, and telemon's memory would follow the series they add.
                    let system = rvos_sim::SystemConfig {
                        processes: 8,
                        trace_capacity: 64,
                        trace_prefill: 0,
                        tick: RVOS_STEP,
                        ..Default::default()
                    };
                    let config = rvos_sim::Config { system, ..Default::default() };
                    Running::spawn(|shutdown| rvos_sim::run(listener, config, shutdown))
                }
                Kind::Sys161 | Kind::Mono => unreachable!("not a TCP server"),
            }
        }
        (Place::Dial(addr), _) => {
            let options = format!(
                "address={addr},counters={AGENT_ID_COUNTER};Mono JIT/Compiled methods;Mono System/Working Set,\
                 interval=1000"
            );
            let config = mono_agent_sim::AgentConfig::from_options(&options)?;
            let overrides = mono_agent_sim::ValueOverrides::default();
            let id = i32::try_from(AGENT_ID_BASE + slot.n).expect("a small number");
            overrides.set(AGENT_ID_COUNTER, mono_counters::CounterValue::Int(id));
            Running::spawn(|shutdown| async move {
                mono_agent_sim::run_with_overrides(config, overrides, shutdown)
                    .await
                    .map_err(io::Error::other)
            })
        }
    };
    slot.running = Some(running);
    Ok(())
}

/// Stops the sim of `slot`, if it runs.
pub async fn stop(slot: &mut Slot) {
    if let Some(running) = slot.running.take() {
        if let Err(e) = running.stop().await {
            eprintln!("[fleet-soak] {} ended with an error: {e}", slot.name);
        }
    }
}

/// A `telemon_target_up` transition seen in a scrape.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When the scrape that showed it had been read.
    pub at: Instant,
    /// The target's protocol.
    pub protocol: String,
    /// The target's name.
    pub target: String,
    /// Up (or down).
    pub up: bool,
}

/// What the scrapes saw.
#[derive(Debug, Default)]
pub struct Observed {
    /// Each listed target: (protocol, up).
    pub state: HashMap<String, (String, bool)>,
    /// Mono target name -> the agents that held it, from when (from [`AGENT_ID_COUNTER`]): a name comes back
    /// when an agent reconnects from a port an earlier connection used (loopback reuses them quickly).
    pub agents: HashMap<String, Vec<(Instant, usize)>>,
    /// When each name last came up.
    pub up_since: HashMap<String, Instant>,
    /// Every transition seen.
    pub seen: Vec<Seen>,
    /// (end of the scrape, its latency).
    pub scrapes: Vec<(Instant, Duration)>,
    /// (when, why).
    pub failures: Vec<(Instant, String)>,
}

impl Observed {
    /// The agent whose connection the transition `s` was: for a down, the last agent seen under that name
    /// before it; for an up, the first one seen with or after it (the counter comes with the first sample).
    pub fn agent(&self, s: &Seen) -> Option<usize> {
        let held = self.agents.get(&s.target)?;
        if s.up {
            held.iter().find(|(at, _)| *at >= s.at).map(|(_, n)| *n)
        } else {
            held.iter().rev().find(|(at, _)| *at < s.at).map(|(_, n)| *n)
        }
    }

    /// Targets up.
    pub fn up_count(&self) -> usize {
        self.state.values().filter(|(_, up)| *up).count()
    }

    /// Targets of `protocol` up.
    pub fn up_of(&self, protocol: &str) -> usize {
        self.state.values().filter(|(p, up)| *up && p == protocol).count()
    }
}

/// A sample line's labels: (name, unescaped value).
pub type Labels<'a> = Vec<(&'a str, String)>;

/// Splits `name{labels} value` into the name, the labels and the value.
pub fn parse_line(line: &str) -> Option<(&str, Labels<'_>, &str)> {
    let (name, rest) = line.split_once('{')?;
    let mut labels = Vec::new();
    let mut rest = rest;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Some((name, labels, after.trim()));
        }
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim_start_matches(','), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
}

/// The value of label `key`.
pub fn label<'a>(labels: &'a [(&str, String)], key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
}

/// Applies one scrape's body.
pub fn observe(obs: &mut Observed, body: &str, at: Instant) {
    let mut now = HashMap::new();
    let mut ids = Vec::new();
    for line in body.lines() {
        if line.starts_with("telemon_target_up{") {
            let Some((_, labels, value)) = parse_line(line) else { continue };
            let (Some(protocol), Some(target)) = (label(&labels, "protocol"), label(&labels, "target"))
            else {
                continue;
            };
            now.insert(target.to_owned(), (protocol.to_owned(), value == "1"));
        } else if line.starts_with("mono_runtime") && line.contains(AGENT_ID_COUNTER_LABEL) {
            let Some((_, labels, value)) = parse_line(line) else { continue };
            if let (Some(target), Some(AGENT_ID_COUNTER_LABEL), Some(n)) = (
                label(&labels, "target"),
                label(&labels, "counter"),
                value.parse::<f64>().ok().and_then(|v| (v as usize).checked_sub(AGENT_ID_BASE)),
            ) {
                ids.push((target.to_owned(), n));
            }
        }
    }
    for (target, (protocol, up)) in &now {
        let changed = match obs.state.get(target) {
            Some((_, was)) => was != up,
            // A new name counts when it comes up (a Mono agent's new connection); listed down, it is not a change.
            None => *up,
        };
        if changed {
            obs.seen.push(Seen { at, protocol: protocol.clone(), target: target.clone(), up: *up });
            if *up {
                obs.up_since.insert(target.clone(), at);
            }
        }
    }
    // A name has a new holder when the number changes, or at the first number seen since it came up.
    for (target, n) in ids {
        let since = obs.up_since.get(&target).copied();
        let held = obs.agents.entry(target).or_default();
        if held.last().is_none_or(|(at, last)| *last != n || since.is_some_and(|u| u > *at)) {
            held.push((at, n));
        }
    }
    // Names that are no longer listed (a dial-in target's linger ended) leave without a transition.
    obs.state = now;
}

/// VmRSS and VmHWM of `pid`, in KiB.
pub fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// The soak's random choices (reproducible from the printed seed).
pub use sim_common::SplitMix64 as Rng;

/// `k` distinct items of `from`, in random order.
pub fn pick(rng: &mut Rng, mut from: Vec<usize>, k: usize) -> Vec<usize> {
    let k = k.min(from.len());
    for i in 0..k {
        let j = i + rng.below((from.len() - i) as u64) as usize;
        from.swap(i, j);
    }
    from.truncate(k);
    from
}

/// A transition the soak caused: sim `slot` stopped (`up == false`) or started again at `at`.
#[derive(Debug, Clone, Copy)]
pub struct Cause {
    /// When.
    pub at: Instant,
    /// Which sim (an index of the slots).
    pub slot: usize,
    /// Started (or stopped).
    pub up: bool,
}

/// The `q` quantile of `sorted` (zero when empty).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// KiB in MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The config blocks of `slots` (the Mono agents' is one `[[mono_listen]]` on `mono_listen`), after a comment
/// naming `writer`: sys161 sampled every second, Dyalog polled every second, rvOS asked every 2 s.
pub fn config(writer: &str, slots: &[Slot], mono_listen: SocketAddr) -> String {
    let mut toml = format!("# written by {writer}\n");
    for s in slots {
        let _ = match &s.place {
            Place::Dir(dir) => write!(
                toml,
                "\n[[meter161]]\nname = \"{}\"\ndir = \"{}\"\ninterval = \"1s\"\n",
                s.name,
                dir.display()
            ),
            Place::Tcp(addr) => match s.kind {
                Kind::Dyalog => {
                    write!(toml, "\n[[hmon]]\nname = \"{}\"\nconnect = \"{addr}\"\npoll = \"1s\"\n", s.name)
                }
                Kind::Rvos => {
                    write!(
                        toml,
                        "\n[[sysinfo]]\nname = \"{}\"\nconnect = \"{addr}\"\nevery = \"2s\"\n",
                        s.name
                    )
                }
                _ => write!(toml, "\n[[smon]]\nname = \"{}\"\nconnect = \"{addr}\"\n", s.name),
            },
            Place::Dial(_) => Ok(()),
        };
    }
    let _ = write!(toml, "\n[[mono_listen]]\nname = \"mono\"\nlisten = \"{mono_listen}\"\n");
    toml
}

/// Matches every cause with the earliest unused transition of its target seen after `from` and within `grace`
/// of it (a Mono agent's target is told by [`Observed::agent`]): the causes not matched, and the transitions
/// seen that no cause explains.
pub fn match_causes<'a>(
    obs: &'a Observed,
    slots: &[Slot],
    causes: &[Cause],
    from: Instant,
    grace: Duration,
) -> (Vec<Cause>, Vec<&'a Seen>) {
    let seen: Vec<&Seen> = obs.seen.iter().filter(|s| s.at > from).collect();
    let mut used = vec![false; seen.len()];
    let mut missed = Vec::new();
    let same_target = |c: &Cause, s: &Seen| {
        let slot = &slots[c.slot];
        s.protocol == slot.kind.protocol()
            && match slot.kind {
                Kind::Mono => obs.agent(s) == Some(slot.n),
                _ => s.target == slot.name,
            }
    };
    for c in causes {
        let found = seen.iter().enumerate().position(|(j, s)| {
            !used[j] && s.up == c.up && s.at >= c.at && s.at <= c.at + grace && same_target(c, s)
        });
        match found {
            Some(j) => used[j] = true,
            None => missed.push(*c),
        }
    }
    let unexpected = seen.iter().zip(&used).filter(|(_, u)| !**u).map(|(s, _)| *s).collect();
    (missed, unexpected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_line_is_split_into_name_labels_and_value() {
        let (name, labels, value) =
            parse_line(r#"telemon_target_up{protocol="mono",target="a\"b\\c",x="1"} 0"#).unwrap();
        assert_eq!((name, value), ("telemon_target_up", "0"));
        assert_eq!(label(&labels, "protocol"), Some("mono"));
        assert_eq!(label(&labels, "target"), Some(r#"a"b\c"#));
        assert_eq!(label(&labels, "x"), Some("1"));
        assert!(parse_line("no_labels 1").is_none());
    }

    #[test]
    fn transitions_and_mono_agents_are_seen() {
        let mut obs = Observed::default();
        let t0 = Instant::now();
        let t = |s: u64| t0 + Duration::from_secs(s);
        let up =
            |p: &str, t: &str, v: u8| format!("telemon_target_up{{protocol=\"{p}\",target=\"{t}\"}} {v}\n");
        let id = |t: &str, n: usize| {
            format!(
                "mono_runtime{{target=\"{t}\",category=\"Mono JIT\",counter=\"Methods from AOT\"}} {}\n",
                AGENT_ID_BASE + n
            )
        };
        observe(&mut obs, &(up("hmon", "a", 0) + &up("mono", "mono/x:1", 1) + &id("mono/x:1", 7)), t(1));
        assert_eq!(obs.seen.len(), 1, "a new name that is up counts, a new one that is down does not");
        assert_eq!(obs.agent(&obs.seen[0]), Some(7));
        observe(
            &mut obs,
            &(up("hmon", "a", 1) + &up("mono", "mono/x:1", 0) + &up("mono", "mono/x:2", 0)),
            t(2),
        );
        let s = &obs.seen[1..];
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s.iter().any(|s| s.target == "a" && s.up && s.protocol == "hmon"));
        assert!(s.iter().any(|s| s.target == "mono/x:1" && !s.up && obs.agent(s) == Some(7)));
        observe(&mut obs, &up("mono", "mono/x:2", 1), t(3));
        assert!(obs.seen.last().is_some_and(|s| s.target == "mono/x:2" && s.up));
        assert_eq!(obs.state.len(), 1, "names no longer listed are forgotten");

        // Agent 9 reconnects from the port agent 7 had: the name's transitions from then on are agent 9's.
        observe(&mut obs, &(up("mono", "mono/x:1", 1)), t(4));
        observe(&mut obs, &(up("mono", "mono/x:1", 1) + &id("mono/x:1", 9)), t(5));
        observe(&mut obs, &(up("mono", "mono/x:1", 0)), t(6));
        let again: Vec<_> = obs.seen.iter().filter(|s| s.target == "mono/x:1" && s.at >= t(4)).collect();
        assert_eq!(again.len(), 2, "{again:?}");
        assert!(again.iter().all(|s| obs.agent(s) == Some(9)), "{again:?}");
        assert_eq!(obs.agent(&obs.seen[0]), Some(7), "the first connection stays agent 7's");
        // Agent 9 again, from the same port, its number a scrape after the up.
        observe(&mut obs, &(up("mono", "mono/x:1", 1)), t(7));
        observe(&mut obs, &(up("mono", "mono/x:1", 1) + &id("mono/x:1", 9)), t(8));
        observe(&mut obs, &(up("mono", "mono/x:1", 0)), t(9));
        let third: Vec<_> = obs.seen.iter().filter(|s| s.target == "mono/x:1" && s.at >= t(7)).collect();
        assert_eq!(third.len(), 2, "{third:?}");
        assert!(third.iter().all(|s| obs.agent(s) == Some(9)), "{third:?}");
        assert_eq!(obs.agents["mono/x:1"].len(), 3, "three connections");
    }

    #[test]
    fn a_pick_is_distinct_and_bounded() {
        let mut rng = Rng(3);
        let mut p = pick(&mut rng, (0..200).collect(), 20);
        assert_eq!(p.len(), 20);
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), 20);
        assert_eq!(pick(&mut rng, vec![1, 2], 5).len(), 2);
    }

    #[test]
    fn percentiles_of_a_few_values() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&d, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
