//! `rvos-sim`: a fake rvOS init server and sysinfo service on the host transport (TCP or a Unix socket).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use rvos_sim::{Config, KernelTask, SystemConfig, DEFAULT_ADDR};

/// A fake rvOS init server and sysinfo service, for `telemon sysinfo` and the sysinfo-wire client.
#[derive(Debug, Parser)]
#[command(name = "rvos-sim", version, about)]
struct Args {
    /// TCP address to listen on (loopback only).
    #[arg(long, default_value = DEFAULT_ADDR, conflicts_with = "socket")]
    listen: String,
    /// Listen on this Unix socket path instead (a stale socket there is replaced).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// How long the service waits for the request on a new channel (`0` waits forever).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    deadline: Duration,
    /// Turn the watchdog off (`Watchdog: disabled`).
    #[arg(long)]
    no_watchdog: bool,
    /// Watchdog timeout.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    watchdog_timeout: Duration,
    /// A kernel task hung from boot: it never pets the watchdog, so its heartbeat only grows older
    /// (repeatable).
    #[arg(long, value_name = "TASK", value_enum)]
    hang_task: Vec<KernelTask>,
    /// Processes at boot (idle and init included).
    #[arg(long, default_value_t = 12)]
    processes: usize,
    /// Trace entries recorded at boot (the ring holds 16384).
    #[arg(long, default_value_t = 16384)]
    trace_prefill: usize,
    /// Trace ring capacity.
    #[arg(long, default_value_t = 16384)]
    trace_capacity: usize,
    /// Simulated time per step of the system.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// Random seed.
    #[arg(long, default_value_t = 0x5157_1bf0)]
    seed: u64,
    /// Channels one client may hold at once before init answers "no channels".
    #[arg(long, default_value_t = 32)]
    max_channels: usize,
    /// How long each reply waits after its request (a slow VM).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    reply_delay: Duration,
    /// Live kernel channels the system settles around (the Channels report's rows; the kernel's
    /// table holds at most 1024).
    #[arg(long, default_value_t = rvos_sim::system::DEFAULT_LIVE_CHANNELS)]
    channels: usize,
    /// Serve N independent systems from this one process, on N consecutive TCP ports from --listen's
    /// (which must not be 0). Each keeps its own trace ring: consider a smaller --trace-capacity and
    /// --trace-prefill for thousands.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    instances: u32,
    #[command(flatten)]
    replay: sim_common::recorded_peer::ReplayArgs,
}

/// Runs the simulated system on `listener`, or serves the recording of `--replay`.
async fn run<L: sim_common::Accept>(
    listener: L,
    config: Config,
    replay: Option<std::sync::Arc<sim_common::recorded_peer::Replay>>,
    shutdown: sim_common::Shutdown,
) -> std::io::Result<()>
where
    L::Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    match replay {
        Some(replay) => sim_common::recorded_peer::serve(listener, replay, shutdown).await,
        None => rvos_sim::run(listener, config, shutdown).await,
    }
}

#[tokio::main]
async fn main() -> anyhow_free::Result {
    sim_common::init_tracing();
    let args = Args::parse();
    let config = Config {
        request_deadline: (!args.deadline.is_zero()).then_some(args.deadline),
        max_channels_per_client: args.max_channels,
        reply_delay: args.reply_delay,
        system: SystemConfig {
            live_channels: args.channels,
            processes: args.processes,
            trace_capacity: args.trace_capacity,
            trace_prefill: args.trace_prefill,
            watchdog: !args.no_watchdog,
            watchdog_timeout: args.watchdog_timeout,
            hung_tasks: args.hang_task,
            tick: args.tick.max(Duration::from_millis(1)),
            seed: args.seed,
            ..SystemConfig::default()
        },
    };
    if args.instances > 1 {
        if args.socket.is_some() {
            usage_error("--instances N > 1 serves TCP ports, not a Unix --socket");
        }
        return serve_instances(&args.listen, args.instances, config).await;
    }
    let replay = args
        .replay
        .load(sim_common::recorded_peer::link_type::SYSINFO, sim_common::recorded_peer::Mode::Conversation)?;
    let shutdown = sim_common::shutdown_on_ctrl_c();
    match args.socket {
        Some(path) => {
            if path.exists() {
                use std::os::unix::fs::FileTypeExt;
                if std::fs::symlink_metadata(&path)?.file_type().is_socket() {
                    std::fs::remove_file(&path)?;
                }
            }
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let listener = tokio::net::UnixListener::bind(&path)?;
            tracing::info!(path = %path.display(), "rvos-sim listening");
            run(sim_common::NumberedUnixListener::new(listener), config, replay, shutdown).await?;
            let _ = std::fs::remove_file(&path);
        }
        None => {
            let addr: std::net::SocketAddr = args.listen.parse().map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("--listen {}: {e}", args.listen),
                )
            })?;
            if !addr.ip().is_loopback() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("--listen {addr}: only loopback addresses are allowed"),
                ));
            }
            let listener = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!(addr = %listener.local_addr()?, "rvos-sim listening");
            run(listener, config, replay, shutdown).await?;
        }
    }
    Ok(())
}

/// Exits with clap's usage error (status 2).
fn usage_error(message: impl std::fmt::Display) -> ! {
    use clap::CommandFactory;
    Args::command().error(clap::error::ErrorKind::ArgumentConflict, message).exit()
}

/// `--instances N`: N systems, each with its own processes, trace ring and clients, on consecutive
/// loopback ports, served by tasks of this one runtime.
async fn serve_instances(listen: &str, n: u32, config: Config) -> anyhow_free::Result {
    let first: std::net::SocketAddr = listen.parse().map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("--listen {listen}: {e}"))
    })?;
    if !first.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("--listen {first}: only loopback addresses are allowed"),
        ));
    }
    let addrs = sim_common::consecutive_addrs(&first.to_string(), n)
        .unwrap_or_else(|e| usage_error(format!("--instances: {e}")));
    // A listener per instance and a socket per client.
    if let Err(e) = sim_common::raise_open_file_limit(2 * u64::from(n) + 64) {
        tracing::warn!(error = %e, "cannot raise the open-file limit");
    }
    let shutdown = sim_common::shutdown_on_ctrl_c();
    let listeners = sim_common::bind_consecutive(&addrs).await?;
    // On stderr whatever RUST_LOG says: the line a benchmark waits for.
    eprintln!("rvos-sim: serving {n} instances on {}..{}", addrs[0], addrs[addrs.len() - 1]);
    let instances =
        listeners.into_iter().map(|listener| rvos_sim::run(listener, config.clone(), shutdown.clone()));
    sim_common::run_instances(instances, &shutdown).await
}

mod anyhow_free {
    /// `main`'s result: an I/O error is printed by the runtime and exits with 1.
    pub type Result = std::io::Result<()>;
}
