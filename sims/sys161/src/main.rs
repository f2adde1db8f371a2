//! `sys161-sim`: serve a fake System/161 meter socket at `DIR/.sockets/meter` until Ctrl-C.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use sys161_sim::{Config, Machine, Mode};

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    sim_common::init_tracing();
    let args = Args::parse();
    let config = Config {
        mode: if args.spec_mode { Mode::SpecText } else { Mode::Sys161 },
        speed: args.speed,
        start_nsec: args.start_nsec,
        machine: Machine { clock_hz: args.clock_hz, u32_start: args.u32_start },
        queue_capacity: args.queue,
        error_after: args.error_after,
        version: args.hello_version,
        ..Config::default()
    };
    let (listener, path) =
        sys161_sim::bind(&args.dir).with_context(|| format!("cannot serve {}", args.dir.display()))?;
    tracing::info!(socket = %path.display(), mode = ?config.mode, speed = config.speed, "sys161-sim listening");
    sys161_sim::run(listener, config, sim_common::shutdown_on_ctrl_c()).await?;
    Ok(())
}
