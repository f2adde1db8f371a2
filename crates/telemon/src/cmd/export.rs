//! `telemon export FILE --format openmetrics|csv`: a recording turned into the series `telemon serve` would
//! have exported, with their recorded timestamps (for `promtool tsdb create-blocks-from openmetrics`).

use std::io::Write;
use std::path::PathBuf;

use crate::output::{CliError, CliResult};

/// The output formats of `telemon export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// OpenMetrics text with timestamps in seconds, each series in time order, ending with `# EOF`.
    Openmetrics,
    /// CSV: a `time` column (seconds since the epoch) and one column per series.
    Csv,
}

/// Turn a recording into timestamped series: what `telemon serve` would have exported while it was made.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recording: a file, or a directory of rotated recordings.
    file: PathBuf,
    /// The output format.
    #[arg(long, value_enum, default_value = "openmetrics")]
    format: ExportFormat,
    /// Only this target of the recording.
    #[arg(long, value_name = "NAME")]
    target: Option<String>,
}

/// Runs the subcommand.
pub async fn run(args: Args) -> CliResult {
    let capture = crate::cmd::replay::open(&args.file, "export")?;
    let connections = capture.connections(args.target.as_deref());
    if connections.is_empty() {
        return Err(CliError::Peer(format!("{}: nothing to export", args.file.display())));
    }
    let scrapes = tokio::task::spawn_blocking(move || {
        telemon_fleet::rerun::replay(&telemon_fleet::Protocols::built_in(), connections)
    })
    .await
    .map_err(CliError::peer)?
    .map_err(CliError::peer)?;
    let text = match args.format {
        ExportFormat::Openmetrics => telemon_fleet::rerun::openmetrics(&scrapes),
        ExportFormat::Csv => telemon_fleet::rerun::csv(&scrapes),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
