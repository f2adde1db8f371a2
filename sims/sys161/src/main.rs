//! `sys161-sim`: serve a fake System/161 meter socket at `DIR/.sockets/meter` until Ctrl-C.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use sys161_sim::{Config, Control, Machine, Mode};

/// A fake System/161 meter socket that behaves like the real sys161 (watch it with stat161 or
/// `telemon meter161`).
#[derive(Debug, Parser)]
#[command(name = "sys161-sim", version, about)]
struct Args {
    /// The directory to serve, like sys161's working directory: the socket is DIR/.sockets/meter.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Simulated time per wall time (e.g. 6 for a spinning kernel, 0.5 for a slow one).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Processor cycles per simulated second.
    #[arg(long, default_value_t = Machine::default().clock_hz)]
    clock_hz: u64,
    /// Start the six 32-bit counters (irqs to net) at this value; e.g. 4294967000 to see them wrap.
    #[arg(long, default_value_t = 0)]
    u32_start: u32,
    /// Simulated nanoseconds at start-up.
    #[arg(long, default_value_t = 0)]
    start_nsec: u64,
    /// Follow the protocol text instead of sys161: intervals from 100 ns, `OK` on success.
    #[arg(long)]
    spec_mode: bool,
    /// Send `ERROR` and close each connection after this many DATA lines (0: instead of the greeting).
    #[arg(long)]
    error_after: Option<u64>,
    /// The protocol version to announce in HELLO (sys161: 2), to test how clients refuse others.
    #[arg(long, default_value_t = meter161::PROTOCOL_VERSION)]
    hello_version: u32,
    /// Messages a client may leave unread before it is dropped.
    #[arg(long, default_value_t = Config::default().queue_capacity)]
    queue: usize,
    /// Stop the simulated clock AFTER this long, for FOR (without +FOR, for good), as when sys161 sits in
    /// its debugger: no DATA meanwhile, the connections stay open, and simulated time then goes on from
    /// where it stood. E.g. 30s+2m.
    #[arg(long, value_name = "AFTER[+FOR]", value_parser = parse_pause)]
    pause: Option<Pause>,
    /// Send every N-th DATA line of each connection corrupted (its kinsns word is not a number), as a
    /// broken peer would; clients count a decode error and read on. 0: never.
    #[arg(long, value_name = "N", default_value_t = 0)]
    corrupt_every: u64,
    /// Serve N independent machines from this one process, at DIR/0/.sockets/meter to
    /// DIR/N-1/.sockets/meter (the folders are created as needed).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    instances: u32,
    #[command(flatten)]
    replay: sim_common::recorded_peer::ReplayArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    sim_common::init_tracing();
    let args = Args::parse();
    let control = Control::default();
    control.corrupt_every(args.corrupt_every);
    if let Some(pause) = args.pause {
        tokio::spawn(pause.run(control.clone()));
    }
    let config = Config {
        control,
        mode: if args.spec_mode { Mode::SpecText } else { Mode::Sys161 },
        speed: args.speed,
        start_nsec: args.start_nsec,
        machine: Machine { clock_hz: args.clock_hz, u32_start: args.u32_start },
        queue_capacity: args.queue,
        error_after: args.error_after,
        version: args.hello_version,
        ..Config::default()
    };
    if args.instances > 1 {
        return serve_instances(&args.dir, args.instances, config).await;
    }
    let (listener, path) =
        sys161_sim::bind(&args.dir).with_context(|| format!("cannot serve {}", args.dir.display()))?;
    if let Some(replay) = args
        .replay
        .load(sim_common::recorded_peer::link_type::METER161, sim_common::recorded_peer::Mode::Stream)?
    {
        tracing::info!(socket = %path.display(), "sys161-sim serving a recording");
        let listener = sim_common::NumberedUnixListener::new(listener);
        return Ok(
            sim_common::recorded_peer::serve(listener, replay, sim_common::shutdown_on_ctrl_c()).await?
        );
    }
    tracing::info!(socket = %path.display(), mode = ?config.mode, speed = config.speed, "sys161-sim listening");
    sys161_sim::run(listener, config, sim_common::shutdown_on_ctrl_c()).await?;
    Ok(())
}

/// `--instances N`: N machines, each with its own socket `DIR/i/.sockets/meter` and its own simulated clock,
/// served by tasks of this one runtime.
async fn serve_instances(dir: &Path, n: u32, config: Config) -> anyhow::Result<()> {
    // A listener per instance and a socket per client.
    if let Err(e) = sim_common::raise_open_file_limit(2 * u64::from(n) + 64) {
        tracing::warn!(error = %e, "cannot raise the open-file limit");
    }
    let shutdown = sim_common::shutdown_on_ctrl_c();
    let mut listeners = Vec::with_capacity(n as usize);
    let mut paths = Vec::with_capacity(n as usize);
    for i in 0..n {
        let dir = dir.join(i.to_string());
        let (listener, path) =
            sys161_sim::bind(&dir).with_context(|| format!("cannot serve {}", dir.display()))?;
        listeners.push(listener);
        paths.push(path);
    }
    // On stderr whatever RUST_LOG says: the line a benchmark waits for.
    eprintln!(
        "sys161-sim: serving {n} instances on {}..{}",
        paths[0].display(),
        paths[paths.len() - 1].display()
    );
    let instances =
        listeners.into_iter().map(|listener| sys161_sim::run(listener, config.clone(), shutdown.clone()));
    sim_common::run_instances(instances, &shutdown).await?;
    Ok(())
}

/// `--pause AFTER[+FOR]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pause {
    after: Duration,
    length: Option<Duration>,
}

impl Pause {
    /// Stops the clock after `after`, and starts it again `length` later (if any).
    async fn run(self, control: Control) {
        tokio::time::sleep(self.after).await;
        tracing::info!(after = ?self.after, length = ?self.length, "the simulated clock stops");
        control.pause();
        if let Some(length) = self.length {
            tokio::time::sleep(length).await;
            tracing::info!("the simulated clock runs again");
            control.resume();
        }
    }
}

fn parse_pause(s: &str) -> Result<Pause, String> {
    let duration = |d: &str| humantime::parse_duration(d.trim()).map_err(|e| format!("{d:?}: {e}"));
    match s.split_once('+') {
        Some((after, length)) => Ok(Pause { after: duration(after)?, length: Some(duration(length)?) }),
        None => Ok(Pause { after: duration(s)?, length: None }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_takes_a_start_and_an_optional_length() {
        let s = Duration::from_secs;
        assert_eq!(parse_pause("30s+2m"), Ok(Pause { after: s(30), length: Some(s(120)) }));
        assert_eq!(parse_pause("0s"), Ok(Pause { after: s(0), length: None }));
        assert!(parse_pause("soon").is_err());
        assert!(parse_pause("1s+").is_err());
    }
}
