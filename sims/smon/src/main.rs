//! `smon-sim`: sample `/proc` every interval and write the smon stream to stdout, append it to a file,
//! or serve it to TCP clients.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use smon_sim::{
    serve, serve_feed, write_stream, Config, ProcSource, DEFAULT_CLIENT_QUEUE, DEFAULT_LISTEN, MIN_INTERVAL,
};

/// A monitor in the spirit of Tino's `mon`: real /proc figures as an smon stream.
#[derive(Debug, Parser)]
#[command(name = "smon-sim", version, about)]
struct Args {
    /// Time between samples (`mon` uses 5 s; at least 10ms).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Append the stream to FILE (each run starts with a resync), like `mon >>mon.out`.
    #[arg(long, value_name = "FILE", conflicts_with = "listen")]
    out: Option<PathBuf>,
    /// Serve the stream to TCP clients on ADDR instead of writing it (`--listen` alone: 127.0.0.1:7399).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = DEFAULT_LISTEN)]
    listen: Option<String>,
    /// Stop after N samples.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Where /proc is.
    #[arg(long, default_value = "/proc", value_name = "DIR")]
    proc: PathBuf,
    /// Where /sys is (for interface numbers).
    #[arg(long, default_value = "/sys", value_name = "DIR")]
    sys: PathBuf,
    /// Samples queued per TCP client before a slow client is dropped.
    #[arg(long, default_value_t = DEFAULT_CLIENT_QUEUE, value_name = "N")]
    queue: usize,
    /// With --listen: serve N independent streams from this one process, on N consecutive ports from
    /// ADDR's (which must not be 0); one /proc reader feeds them all.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    instances: u32,
    #[command(flatten)]
    replay: sim_common::recorded_peer::ReplayArgs,
}

#[tokio::main]
async fn main() -> Result<()> {
    sim_common::init_tracing();
    let args = Args::parse();
    let mode = sim_common::recorded_peer::Mode::Stream;
    if let Some(replay) = args.replay.load(sim_common::recorded_peer::link_type::SMON, mode)? {
        let addr = args.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "serving a recorded smon stream");
        return Ok(
            sim_common::recorded_peer::serve(listener, replay, sim_common::shutdown_on_ctrl_c()).await?
        );
    }
    if args.interval < MIN_INTERVAL {
        eprintln!("smon-sim: --interval must be at least {}", humantime::format_duration(MIN_INTERVAL));
        std::process::exit(2);
    }
    if !args.proc.join("stat").exists() {
        bail!("{} does not look like /proc (no stat file)", args.proc.display());
    }
    let source = ProcSource::new(&args.proc, &args.sys);
    let config =
        Config { interval: args.interval, count: args.count, client_queue: args.queue.max(1), events: None };
    if args.instances > 1 {
        let Some(addr) = &args.listen else {
            usage_error("--instances N > 1 needs --listen: several streams cannot share stdout or a file")
        };
        return serve_instances(addr, args.instances, source, config).await;
    }
    let shutdown = sim_common::shutdown_on_ctrl_c();
    if let Some(addr) = &args.listen {
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "serving smon");
        serve(listener, source, config, shutdown).await?;
    } else if let Some(path) = &args.out {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await
            .with_context(|| format!("opening {}", path.display()))?;
        write_stream(file, source, &config, shutdown).await?;
    } else {
        match write_stream(tokio::io::stdout(), source, &config, shutdown).await {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
}

/// Exits with clap's usage error (status 2).
fn usage_error(message: impl std::fmt::Display) -> ! {
    use clap::CommandFactory;
    Args::command().error(clap::error::ErrorKind::ArgumentConflict, message).exit()
}

/// `--instances N`: N servers on consecutive ports, each with its own clients and encoders, fed by one
/// sampler (the figures are the same machine's, so reading /proc N times per interval would only cost).
async fn serve_instances(addr: &str, n: u32, source: ProcSource, config: Config) -> Result<()> {
    // A listener per instance and a socket per client.
    if let Err(e) = sim_common::raise_open_file_limit(2 * u64::from(n) + 64) {
        tracing::warn!(error = %e, "cannot raise the open-file limit");
    }
    let addrs =
        sim_common::consecutive_addrs(addr, n).unwrap_or_else(|e| usage_error(format!("--instances: {e}")));
    let shutdown = sim_common::shutdown_on_ctrl_c();
    let listeners = sim_common::bind_consecutive(&addrs).await?;
    // On stderr whatever RUST_LOG says: the line a benchmark waits for.
    eprintln!("smon-sim: serving {n} instances on {}..{}", addrs[0], addrs[addrs.len() - 1]);
    let (feed, sampler) = smon_sim::spawn_sampler(source, &config, shutdown.clone());
    let instances = listeners
        .into_iter()
        .map(|listener| serve_feed(listener, feed.clone(), config.clone(), shutdown.clone()));
    let result = sim_common::run_instances(instances, &shutdown).await;
    sampler.abort();
    Ok(result?)
}
