//! `telemon serve`: the command line of the exporter in `telemon::http`.

use std::path::PathBuf;

use telemon::config::Source;
use telemon::http::check::check;
use telemon::http::Launch;
use telemon_fleet::config::{check_listen, ConfigError, Shard};
use telemon_fleet::pace::Pace;

use super::targets::TargetArgs;

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
    /// Allow `POST /-/reload` (as Prometheus's flag of this name). SIGHUP reloads in any case.
    #[arg(long = "web.enable-lifecycle")]
    web_enable_lifecycle: bool,
}

/// Where the config comes from: the file or flags, with the flags that override [serve].
fn source_of(
    targets: &TargetArgs,
    shard: Option<Shard>,
    web_config: Option<&PathBuf>,
) -> Result<Source, CliError> {
    Ok(Source { shard, web_config: web_config.cloned(), ..targets.source()? })
}

/// `--listen ADDR`, checked as `[serve] listen` is.
fn listen_flag(listen: Option<&str>) -> Result<(), CliError> {
    let Some(listen) = listen else { return Ok(()) };
    check_listen(listen).map_err(|message| {
        CliError::from(ConfigError { file: "<flags>".into(), line: 0, key: "--listen".into(), message })
    })
}

/// Runs `telemon serve` until Ctrl-C or SIGTERM. Start-up runs one way: the config is read and checked
/// once (every layer's section, and the files they name), then `http::start_checked` starts the fleet,
/// the push senders and the HTTP server, each with its own section; a reload reads the same [`Source`].
pub async fn run(args: Args, pace: Pace) -> CliResult {
    listen_flag(args.listen.as_deref())?;
    // `--check-config FILE` reads FILE as `--config FILE` would, with the same flags.
    let targets = match &args.check_config {
        Some(file) => TargetArgs { config: Some(file.clone()), ..args.targets.clone() },
        None => args.targets.clone(),
    };
    let source = source_of(&targets, args.shard, args.web_config_file.as_ref())?;
    // The same check as at every reload.
    let checked = check(source.read()?)?;
    let config = checked.config.clone();
    if let Some(file) = &args.check_config {
        let web = match &checked.web {
            Some(w) => format!(
                "; web config {}: {}, {} basic auth users",
                w.path.display(),
                if w.is_tls() { "TLS" } else { "no TLS" },
                w.user_names().len()
            ),
            None => String::new(),
        };
        println!("{}: ok ({}{web})", file.display(), config.summary());
        return Ok(());
    }
    if targets.config.is_none() && config.blocks() == 0 {
        return Err(CliError::Usage(
            "no targets: give --config FILE (a config without targets serves /probe only) or target flags such as --hmon ADDR".into(),
        ));
    }
    let recording = args.record.map(|dir| args.rotate.start(dir)).transpose()?;
    let scheme = if checked.web.as_ref().is_some_and(|w| w.is_tls()) { "https" } else { "http" };
    let launch = Launch {
        listen: args.listen,
        recording: recording.clone(),
        source: Some(source),
        pace: Some(pace),
        lifecycle: args.web_enable_lifecycle,
    };
    let server = telemon::http::start_checked(checked, launch).await.map_err(CliError::peer)?;
    let shard = config.serve.shard.map(|s| format!(" (shard {s})")).unwrap_or_default();
    let what = if config.blocks() == 0 && config.fleet.file_sd.is_empty() {
        "no targets (/probe only)".to_owned()
    } else {
        config.summary()
    };
    // SIGHUP reloads the config, as for Prometheus and node_exporter (handled before anyone is told we serve).
    let mut hup =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(CliError::peer)?;
    let control = server.control().clone();
    let hangups = tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let _ = control.reload().await;
        }
    });
    let threads = match server.fleet().threads() {
        1 => "1 collector thread".to_owned(),
        n => format!("{n} collector threads"),
    };
    eprintln!("telemon: serving {what}{shard} ({threads}) on {scheme}://{}/metrics", server.local_addr());
    let result = server.run_until(shutdown_signal()).await.map_err(CliError::peer);
    hangups.abort();
    if let Some(recording) = &recording {
        record::finish(recording);
    }
    result
}
