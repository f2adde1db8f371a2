//! `telemon top`: the command line of the dashboard in `telemon::top`.

use std::time::Duration;

use super::targets::TargetArgs;
use telemon::top::{render_text, App};
use telemon_fleet::pace::Pace;
use telemon_fleet::Fleet;

use crate::output::{self, CliError, CliResult};

/// A live dashboard over many targets: `--config FILE` and/or shorthand target flags, as `telemon serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    targets: TargetArgs,
    /// Render one frame as plain text to stdout and exit (for bug reports and documentation).
    #[arg(long)]
    pub once: bool,
    /// With --once: the frame's width.
    #[arg(long, default_value_t = 100, requires = "once")]
    width: u16,
    /// With --once: the frame's height.
    #[arg(long, default_value_t = 30, requires = "once")]
    height: u16,
    /// Select this target first (its name, or the start of it).
    #[arg(long, value_name = "NAME")]
    select: Option<String>,
    /// Append the log here (the dashboard owns the terminal; without it, the log is dropped).
    #[arg(long, value_name = "FILE")]
    log: Option<std::path::PathBuf>,
    /// With --once: how long to collect before rendering (e.g. 5s).
    #[arg(long, default_value = "3s", value_parser = output::parse_duration, requires = "once")]
    wait: Duration,
    /// Show a recording (a file or a directory of them) instead of live targets, its time running at --speed.
    #[arg(long, value_name = "FILE")]
    replay: Option<std::path::PathBuf>,
    /// With --replay: `1x` (the recorded pace), `10x`, `0.5x`, or `max`.
    #[arg(long, default_value = "1x", requires = "replay")]
    speed: telemon_capture::Speed,
    /// Also serve the web view of these targets (`/`, `/target/NAME`, `/api/v1/...`) on ADDR, e.g.
    /// 127.0.0.1:9465: the same pages as `telemon serve`, without its authentication (keep it on loopback).
    #[arg(long, value_name = "ADDR")]
    web: Option<String>,
}

/// Where the log goes while the dashboard runs: `--log FILE`, or nowhere.
pub fn log_writer(args: &Args) -> Result<tracing_subscriber::fmt::writer::BoxMakeWriter, CliError> {
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    match &args.log {
        None => Ok(BoxMakeWriter::new(std::io::sink)),
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| CliError::Usage(format!("--log {}: {e}", path.display())))?;
            Ok(BoxMakeWriter::new(std::sync::Mutex::new(file)))
        }
    }
}

/// Runs `telemon top`.
pub async fn run(args: Args, pace: Pace) -> CliResult {
    let fleet = match &args.replay {
        Some(file) => replay(file, args.speed)?,
        None => {
            let config = args.targets.to_config()?;
            if config.blocks() == 0 {
                return Err(CliError::Usage(
                    "no targets: give --config FILE or target flags such as --hmon ADDR".into(),
                ));
            }
            pace.set(config.serve.wakeup_slack);
            Fleet::start(&config.fleet).await.map_err(CliError::peer)?
        }
    };
    let fleet = std::sync::Arc::new(fleet);
    let _web = match &args.web {
        Some(addr) => Some(serve_web(&fleet, addr).await?),
        None => None,
    };
    let result = if args.once {
        once(&fleet, &args).await
    } else if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        Err(CliError::Usage("stdout is not a terminal: use --once for a plain-text frame".into()))
    } else {
        let web = _web.as_ref().map(|(addr, _)| addr.to_string());
        telemon::top::run(&fleet, args.select.as_deref(), web.as_deref()).await.map_err(CliError::Output)
    };
    fleet.shutdown().await;
    result
}

/// Serves the web view of `fleet` on `addr` until the guard is dropped; returns the address bound.
async fn serve_web(
    fleet: &std::sync::Arc<Fleet>,
    addr: &str,
) -> Result<(std::net::SocketAddr, telemon_fleet::collect::AbortOnDrop), CliError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Usage(format!("--web {addr}: cannot listen: {e}")))?;
    let bound = listener.local_addr().map_err(CliError::peer)?;
    let app = telemon::web::routes(fleet.clone());
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("the web view stopped: {e}");
        }
    });
    Ok((bound, telemon_fleet::collect::AbortOnDrop(task)))
}

/// A fleet whose targets are the recording's, played back at `speed`.
fn replay(file: &std::path::Path, speed: telemon_capture::Speed) -> Result<Fleet, CliError> {
    use telemon_capture::{Capture, Limits};
    let failed = |e: std::io::Error| CliError::Peer(format!("{}: {e}", file.display()));
    let capture = if file.is_dir() {
        Capture::from_dir(file, Limits::default()).map_err(failed)?.0
    } else {
        Capture::from_file(file, Limits::default()).map_err(failed)?
    };
    let connections = capture.connections(None);
    if connections.is_empty() {
        return Err(CliError::Peer(format!("{}: the recording holds no connection", file.display())));
    }
    let fleet = Fleet::new();
    let fleet_registry = fleet.registry().clone();
    let protocols = telemon_fleet::Protocols::built_in();
    fleet.spawn(
        async move { telemon_fleet::rerun::play(fleet_registry, &protocols, connections, speed).await },
    );
    Ok(fleet)
}

/// Collects for `--wait`, sampling once a second, then prints one frame.
async fn once(fleet: &Fleet, args: &Args) -> CliResult {
    if args.width < 20 || args.height < 5 {
        return Err(CliError::Usage("--width must be at least 20 and --height at least 5".into()));
    }
    let mut app = App::new();
    let started = tokio::time::Instant::now();
    let mut second = 0u32;
    loop {
        app.update(fleet.snapshot());
        app.sample_at(second);
        let next = started + Duration::from_secs(u64::from(second) + 1);
        if next > started + args.wait {
            break;
        }
        tokio::time::sleep_until(next).await;
        second += 1;
    }
    tokio::time::sleep_until(started + args.wait).await;
    app.update(fleet.snapshot());
    if let Some(name) = &args.select {
        if !app.select_name(name) {
            return Err(CliError::Usage(format!("--select {name}: no such target")));
        }
    }
    print!("{}", render_text(&mut app, args.width, args.height));
    Ok(())
}
