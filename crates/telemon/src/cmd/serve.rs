//! `telemon serve`: the command line of the exporter in `telemon::http`.

use std::path::PathBuf;

use telemon_fleet::config::{FleetConfig, Shard, TargetArgs};

use super::record::{self, RotateArgs};
use super::shutdown_signal;
use crate::output::{CliError, CliResult};

/// Export many targets to Prometheus: `--config FILE` and/or shorthand target flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    targets: TargetArgs,
    /// HTTP listen address (default: `listen` of the config's [serve], else 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Take only this share of the targets, e.g. `2/4` (overrides `shard` of the config's [serve]).
    #[arg(long, value_name = "I/N", value_parser = Shard::parse)]
    shard: Option<Shard>,
    /// Only check this config file: print what is wrong (file, line, key) and exit 2, or a summary and 0.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// Record every target's connections (raw bytes, pcapng) into files in DIR; see docs/recordings.md.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    #[command(flatten)]
    rotate: RotateArgs,
    /// The web configuration file (TLS, basic auth, headers; the format node_exporter and other Prometheus
    /// exporters read, see docs/security.md). Overrides `web_config` of the config's [serve].
    #[arg(long = "web.config.file", value_name = "FILE")]
    web_config_file: Option<PathBuf>,
}

/// Runs `telemon serve` until Ctrl-C or SIGTERM.
pub async fn run(args: Args) -> CliResult {
    if let Some(file) = &args.check_config {
        let config = FleetConfig::load(file)?;
        println!("{}: ok ({})", file.display(), config.summary());
        return Ok(());
    }
    let mut config = args.targets.to_config()?;
    if args.shard.is_some() {
        config.serve.shard = args.shard;
    }
    if args.web_config_file.is_some() {
        config.serve.web_config = args.web_config_file.clone();
    }
    if config.blocks() == 0 {
        return Err(CliError::Usage(
            "no targets: give --config FILE or target flags such as --hmon ADDR".into(),
        ));
    }
    let recording = args.record.map(|dir| args.rotate.start(dir)).transpose()?;
    telemon_fleet::pace::set_wakeup_slack(config.serve.wakeup_slack);
    // A bad web config is a usage error (exit 2, FILE:LINE: KEY: why), like a bad --config.
    if let Some(web) = &config.serve.web_config {
        telemon::http::WebConfig::load(web).map_err(|e| CliError::Usage(e.to_string()))?;
    }
    let server = telemon::http::start(&config, args.listen.as_deref()).await.map_err(CliError::peer)?;
    let shard = config.serve.shard.map(|s| format!(" (shard {s})")).unwrap_or_default();
    eprintln!("telemon: serving {}{shard} on http://{}/metrics", config.summary(), server.local_addr());
    let result = server.run_until(shutdown_signal()).await.map_err(CliError::peer);
    if let Some(recording) = &recording {
        record::finish(recording);
    }
    result
}
