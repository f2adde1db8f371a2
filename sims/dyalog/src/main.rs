//! `dyalog-sim`: a fake Dyalog interpreter for HMON monitors. See `--help`.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use dyalog_sim::{Config, HandshakeStyle, Sim, Version};
use hmon::{ConfigAddress, InterfaceConfig, Mode};

/// A fake Dyalog APL interpreter speaking the Health Monitor (HMON) protocol.
#[derive(Debug, Parser)]
/// (`--version` picks the interpreter version to imitate, as the issue asks, so there is no version flag.)
#[command(name = "dyalog-sim", about, disable_version_flag = true)]
struct Args {
    /// SERVE mode: listen on HOST:PORT (loopback by default; `*:PORT` listens on every interface).
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["poll", "hmon_init"])]
    serve: Option<String>,
    /// POLL mode: dial the monitor listening at HOST:PORT, retrying until it listens.
    #[arg(long, value_name = "ADDR", conflicts_with = "hmon_init")]
    poll: Option<String>,
    /// An interface configuration string, as HMON_INIT: SERVE:address:port or POLL:address:port.
    #[arg(long, env = "HMON_INIT", value_name = "MODE:ADDRESS:PORT")]
    hmon_init: Option<String>,
    /// 0 refuses connections, 1 restricts (no stacks, DMX or Exception), 2 full, 3 full permissions (20 only).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=3))]
    access_level: u8,
    /// The interpreter version to imitate.
    #[arg(long, value_enum, default_value = "19")]
    version: Version,
    /// Be busy: answer only GetLastKnownState.
    #[arg(long)]
    unresponsive: bool,
    /// The handshake order.
    #[arg(long, value_enum, default_value = "eager")]
    handshake: HandshakeStyle,
    /// How often the workspace changes (e.g. 1s, 250ms).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// Send a UserMessage this often (e.g. 5s).
    #[arg(long, value_parser = humantime::parse_duration)]
    user_message_every: Option<Duration>,
    /// The largest frame accepted from a monitor, in bytes.
    #[arg(long, default_value_t = hmon::DEFAULT_MAX_FRAME_LEN)]
    max_frame_len: u32,
    /// The workspace name.
    #[arg(long, default_value = "CLEAR WS")]
    wsid: String,
    /// Run N independent interpreters in this one process: in SERVE mode on N consecutive ports from the
    /// given one (which must not be 0), in POLL mode N interpreters dialling the same monitor.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    instances: u32,
    #[command(flatten)]
    replay: sim_common::recorded_peer::ReplayArgs,
}

/// Turns `--serve`'s `HOST:PORT` into a bind address: `*` is every interface, an empty host loopback.
fn serve_address(addr: &str) -> anyhow::Result<String> {
    let Some((host, port)) = addr.rsplit_once(':') else { bail!("--serve wants HOST:PORT, got {addr:?}") };
    port.parse::<u16>().with_context(|| format!("bad port in {addr:?}"))?;
    Ok(match host {
        "" => format!("127.0.0.1:{port}"),
        "*" => format!("0.0.0.0:{port}"),
        _ => addr.to_owned(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    sim_common::init_tracing();
    let args = Args::parse();
    let config = Config {
        version: args.version,
        access_level: args.access_level,
        unresponsive: args.unresponsive,
        handshake: args.handshake,
        max_frame_len: args.max_frame_len,
        tick: Some(args.tick),
        user_message_every: args.user_message_every,
        wsid: args.wsid,
        ..Config::default()
    };
    config.validate()?;
    let (mode, addr) = match (&args.serve, &args.poll, &args.hmon_init) {
        (Some(serve), _, _) => (Mode::Serve, serve_address(serve)?),
        (None, Some(poll), _) => (Mode::Poll, poll.clone()),
        (None, None, Some(init)) => {
            let init: InterfaceConfig = init.parse()?;
            if init.mode == Mode::Poll && init.address == ConfigAddress::Local {
                (Mode::Poll, format!("127.0.0.1:{}", init.port))
            } else {
                (init.mode, init.socket_address())
            }
        }
        (None, None, None) => (Mode::Serve, "127.0.0.1:4512".to_owned()),
    };
    if args.instances > 1 {
        return run_instances(mode, &addr, args.instances, config).await;
    }
    let shutdown = sim_common::shutdown_on_ctrl_c();
    let conversation = sim_common::recorded_peer::Mode::Conversation;
    if let Some(replay) = args.replay.load(sim_common::recorded_peer::link_type::HMON, conversation)? {
        match mode {
            Mode::Serve => {
                let listener = tokio::net::TcpListener::bind(&addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))?;
                tracing::info!(addr = %listener.local_addr()?, "dyalog-sim serving a recording");
                sim_common::recorded_peer::serve(listener, replay, shutdown).await?;
            }
            Mode::Poll => sim_common::recorded_peer::dial(&addr, replay, shutdown).await?,
        }
        return Ok(());
    }
    let sim = Sim::new(config);
    match mode {
        Mode::Serve => {
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            tracing::info!(addr = %listener.local_addr()?, access_level = args.access_level, "dyalog-sim serving");
            sim.serve(listener, shutdown).await?;
        }
        Mode::Poll => {
            tracing::info!(%addr, "dyalog-sim polling the monitor");
            sim.poll(addr, shutdown).await?;
        }
    }
    Ok(())
}

/// `--instances N`: N interpreters, each with its own world, as tasks of this one runtime.
async fn run_instances(mode: Mode, addr: &str, n: u32, config: Config) -> anyhow::Result<()> {
    // A listener per instance and a socket per monitor (or one socket per interpreter dialling out).
    if let Err(e) = sim_common::raise_open_file_limit(2 * u64::from(n) + 64) {
        tracing::warn!(error = %e, "cannot raise the open-file limit");
    }
    let shutdown = sim_common::shutdown_on_ctrl_c();
    match mode {
        Mode::Serve => {
            let addrs = sim_common::consecutive_addrs(addr, n).unwrap_or_else(|e| {
                use clap::CommandFactory;
                Args::command()
                    .error(clap::error::ErrorKind::ValueValidation, format!("--instances: {e}"))
                    .exit()
            });
            let listeners = sim_common::bind_consecutive(&addrs).await?;
            // On stderr whatever RUST_LOG says: the line a benchmark waits for.
            eprintln!("dyalog-sim: serving {n} instances on {}..{}", addrs[0], addrs[addrs.len() - 1]);
            let instances = listeners
                .into_iter()
                .map(|listener| Sim::new(config.clone()).serve(listener, shutdown.clone()));
            sim_common::run_instances(instances, &shutdown).await?;
        }
        Mode::Poll => {
            eprintln!("dyalog-sim: {n} instances polling the monitor at {addr}");
            let instances = (0..n).map(|_| Sim::new(config.clone()).poll(addr.to_owned(), shutdown.clone()));
            sim_common::run_instances(instances, &shutdown).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_is_well_formed() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        let args = Args::try_parse_from(["dyalog-sim", "--version", "20", "--access-level", "3"]).unwrap();
        assert_eq!((args.version, args.access_level), (Version::V20, 3));
        assert!(Args::try_parse_from(["dyalog-sim", "--access-level", "4"]).is_err());
    }

    #[test]
    fn serve_addresses() {
        assert_eq!(serve_address("127.0.0.1:4512").unwrap(), "127.0.0.1:4512");
        assert_eq!(serve_address(":4512").unwrap(), "127.0.0.1:4512");
        assert_eq!(serve_address("*:4512").unwrap(), "0.0.0.0:4512");
        assert!(serve_address("4512").is_err());
        assert!(serve_address("host:x").is_err());
    }
}
