//! `telemon serve`: the command line of the exporter in `telemon::serve`.

use std::path::PathBuf;

use telemon::fleet::config::{FleetConfig, TargetArgs};

use crate::output::{CliError, CliResult};

/// Export many targets to Prometheus: `--config FILE` and/or shorthand target flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    targets: TargetArgs,
    /// HTTP listen address (default: `listen` of the config's [serve], else 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Only check this config file: print what is wrong (file, line, key) and exit 2, or a summary and 0.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
}

/// Runs `telemon serve` until Ctrl-C or SIGTERM.
pub async fn run(args: Args) -> CliResult {
    if let Some(file) = &args.check_config {
        let config = FleetConfig::load(file)?;
        println!("{}: ok ({})", file.display(), config.summary());
        return Ok(());
    }
    let config = args.targets.to_config()?;
    if config.blocks() == 0 {
        return Err(CliError::Usage(
            "no targets: give --config FILE or target flags such as --hmon ADDR".into(),
        ));
    }
    let server = telemon::serve::start(&config, args.listen.as_deref()).await.map_err(CliError::peer)?;
    eprintln!("telemon: serving {} on http://{}/metrics", config.summary(), server.local_addr());
    server.run_until(shutdown_signal()).await.map_err(CliError::peer)
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
