//! The five sims (sys161, dyalog, smon, rvOS, the Mono agent) started in-process on free loopback ports,
//! for a test that points a telemon at one target of each protocol. Each test writes its own config text from
//! the addresses; what differs between the tests' sims is in [`SimOptions`].

use std::net::SocketAddr;
use std::time::Duration;

use sim_common::Shutdown;
use smon_codec::Sample;
use smon_sim::{Source, MIN_INTERVAL};
use tokio::net::TcpListener;

use crate::net::{free_addr, until};

/// An smon-sim source with two per-CPU idle counters that grow by 1 and 2 every sample.
pub struct Cpus(pub u64);

impl Source for Cpus {
    fn sample(&mut self) -> Vec<Sample> {
        self.0 += 1;
        vec![
            Sample::new("linux.cpu.idle", [0], 1000 + self.0),
            Sample::new("linux.cpu.idle", [1], 2000 + 2 * self.0),
        ]
    }
}

/// A boxed source (the smon sim's comes from [`SimOptions::smon_source`]).
struct Boxed(Box<dyn Source>);

impl Source for Boxed {
    fn sample(&mut self) -> Vec<Sample> {
        self.0.sample()
    }
}

/// What differs between the tests' sims. The default: every sim's own default config, an smon sim serving
/// [`Cpus`] every [`MIN_INTERVAL`], and a Mono agent with two counters that retries within 200 ms.
pub struct SimOptions {
    /// The dyalog sim's config.
    pub dyalog: dyalog_sim::Config,
    /// The rvOS sim's config (each rvOS sim of [`Sims::start_rvos`] too).
    pub rvos: rvos_sim::Config,
    /// The smon sim's time between samples.
    pub smon_interval: Duration,
    /// The smon sim's source (a new one when [`Sims::restart_smon`] starts it again).
    pub smon_source: fn() -> Box<dyn Source>,
    /// The Mono agent's `counters=` option: `;`-separated `Category/Name`.
    pub mono_counters: &'static str,
    /// The longest pause between the Mono agent's attempts to connect (the first is 10 ms).
    pub mono_backoff_max: Duration,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            dyalog: dyalog_sim::Config::default(),
            rvos: rvos_sim::Config::default(),
            smon_interval: MIN_INTERVAL,
            smon_source: || Box::new(Cpus(0)),
            mono_counters: "Mono JIT/Compiled methods;Mono System/Working Set",
            mono_backoff_max: Duration::from_millis(200),
        }
    }
}

impl SimOptions {
    /// The default, but a dyalog sim without a clock (its world changes only when the test steps it, so its
    /// figures compare exactly) and an rvOS sim whose trace starts with 100 records (small replies).
    pub fn steady() -> SimOptions {
        SimOptions {
            dyalog: dyalog_sim::Config { tick: None, ..dyalog_sim::Config::default() },
            rvos: rvos_sim::Config {
                system: rvos_sim::SystemConfig { trace_prefill: 100, ..rvos_sim::SystemConfig::default() },
                ..rvos_sim::Config::default()
            },
            ..SimOptions::default()
        }
    }
}

/// The five sims, running in-process until [`Sims::stop`] or a drop: sys161 in a temporary directory, dyalog,
/// smon and rvOS each on a port of its own, and the address where telemon's `[[mono_listen]]` should listen
/// for the Mono agent (started by [`Sims::start_mono_agent`]).
pub struct Sims {
    /// sys161's directory (its socket is `.sockets/meter` under it): a `[[meter161]]` block's `dir`.
    pub sys161_dir: tempfile::TempDir,
    /// The sys161 sim (taken out by a test that stops it early).
    pub sys161: Option<sys161_sim::Running>,
    /// The dyalog sim, whose world the test may read and step.
    pub dyalog: dyalog_sim::Sim,
    /// Where the dyalog sim listens.
    pub dyalog_addr: SocketAddr,
    /// Where the smon sim listens.
    pub smon_addr: SocketAddr,
    /// Where the rvOS sim listens.
    pub rvos_addr: SocketAddr,
    /// A free address for telemon's `[[mono_listen]]`, which the Mono agent dials.
    pub mono_listen: SocketAddr,
    /// Stops dyalog, rvOS, the Mono agent and anything else the test starts with it.
    pub shutdown: Shutdown,
    /// Stops the smon sim alone.
    smon: Shutdown,
    options: SimOptions,
}

impl Sims {
    /// Starts sys161, dyalog, smon and rvOS.
    pub async fn start(options: SimOptions) -> Sims {
        let shutdown = Shutdown::new();
        let sys161_dir = tempfile::tempdir().unwrap();
        let sys161 = sys161_sim::Running::spawn(sys161_dir.path(), sys161_sim::Config::default()).unwrap();
        let dyalog = dyalog_sim::Sim::new(options.dyalog.clone());
        let (l, dyalog_addr) = bind().await;
        tokio::spawn(dyalog.clone().serve(l, shutdown.clone()));
        let (l, smon_addr) = bind().await;
        let smon = Shutdown::new();
        serve_smon(l, &options, smon.clone());
        let (l, rvos_addr) = bind().await;
        tokio::spawn(rvos_sim::run(l, options.rvos.clone(), shutdown.clone()));
        Sims {
            sys161_dir,
            sys161: Some(sys161),
            dyalog,
            dyalog_addr,
            smon_addr,
            rvos_addr,
            mono_listen: free_addr(),
            shutdown,
            smon,
            options,
        }
    }

    /// telemon's config over these sims: one target of each protocol, named `sys161`, `dyalog`, `mono` (the
    /// `[[mono_listen]]` the Mono agent dials), `smon` and `rvos`; dyalog polled every 250 ms, rvOS asked every
    /// 500 ms, and sys161 sampled every `sys161_interval` (`"250ms"`, say; its default when `None`).
    pub fn toml(&self, sys161_interval: Option<&str>) -> String {
        let interval = sys161_interval.map(|i| format!("interval = \"{i}\"\n")).unwrap_or_default();
        format!(
            r#"[[meter161]]
name = "sys161"
dir = '{}'
{interval}
[[hmon]]
name = "dyalog"
connect = "{}"
poll = "250ms"

[[mono_listen]]
name = "mono"
listen = "{}"

[[smon]]
name = "smon"
connect = "{}"

[[sysinfo]]
name = "rvos"
connect = "{}"
every = "500ms"
"#,
            self.sys161_dir.path().display(),
            self.dyalog_addr,
            self.mono_listen,
            self.smon_addr,
            self.rvos_addr,
        )
    }

    /// Another rvOS sim like the first, on a port of its own: its address.
    pub async fn start_rvos(&self) -> SocketAddr {
        let (l, addr) = bind().await;
        tokio::spawn(rvos_sim::run(l, self.options.rvos.clone(), self.shutdown.clone()));
        addr
    }

    /// The fake Mono agent, dialling [`Sims::mono_listen`] every 10 ms at first (it samples every 100 ms).
    pub fn start_mono_agent(&self) {
        let options =
            format!("address={},counters={},interval=100", self.mono_listen, self.options.mono_counters);
        let mut config = mono_agent_sim::AgentConfig::from_options(&options).unwrap();
        config.backoff = mono_agent_sim::Backoff {
            initial: Duration::from_millis(10),
            max: self.options.mono_backoff_max,
        };
        tokio::spawn(mono_agent_sim::run(config, self.shutdown.clone()));
    }

    /// Stops the smon sim; its port is free again once the sim has dropped its listener.
    pub fn stop_smon(&self) {
        self.smon.cancel();
    }

    /// A new smon sim on the first one's address.
    pub async fn restart_smon(&mut self) {
        let addr = self.smon_addr;
        let l = until(&format!("{addr} free again"), Duration::from_millis(50), async || {
            TcpListener::bind(addr).await.ok()
        })
        .await;
        self.smon = Shutdown::new();
        serve_smon(l, &self.options, self.smon.clone());
    }

    /// Stops every sim, the sys161 sim last (it must end cleanly).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        self.smon.cancel();
        if let Some(sys161) = self.sys161.take() {
            sys161.stop().await.expect("the sys161 sim ends cleanly");
        }
    }
}

impl Drop for Sims {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.smon.cancel();
    }
}

/// A listener on a free loopback port, and its address.
async fn bind() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// The smon sim of `options` on `listener`, until `shutdown`.
fn serve_smon(listener: TcpListener, options: &SimOptions, shutdown: Shutdown) {
    let config = smon_sim::Config { interval: options.smon_interval, ..smon_sim::Config::default() };
    tokio::spawn(smon_sim::serve(listener, Boxed((options.smon_source)()), config, shutdown));
}
