//! Recording, as the commands offer it: `--record FILE` of the one-target subcommands (one recorder, one
//! target, a tap on each connection), `telemon serve --record DIR` and `telemon record --out DIR` (every
//! collector's connections, in rotated files), and `telemon record` itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use telemon_capture::{Destination, Recorder, RecorderConfig, Tap, Target, TargetRecorder};
use telemon_fleet::pace::Pace;
use telemon_fleet::recording::{self, Recording};

use super::targets::TargetArgs;

use super::shutdown_signal;
use crate::output::{self, CliError, CliResult};

/// The `--record` option every one-target subcommand shares (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RecordArgs {
    /// Record the session's raw bytes, both ways, to FILE (pcapng; appended to if it exists). See
    /// docs/recordings.md; `telemon replay FILE` plays it back.
    #[arg(long, value_name = "FILE", global = true)]
    pub record: Option<PathBuf>,
}

impl RecordArgs {
    /// Starts recording `target` (whose bytes are `link_type`) if `--record` was given.
    pub fn start(&self, name: &str, link_type: u16, address: &str) -> Result<Option<OneTarget>, CliError> {
        let Some(path) = &self.record else { return Ok(None) };
        let config = RecorderConfig::new(Destination::File(path.clone()), recording::application());
        let recorder = Recorder::start(config)
            .map_err(|e| CliError::Usage(format!("cannot record to {}: {e}", path.display())))?;
        let target = recorder.target(Target::new(name, link_type, address));
        Ok(Some(OneTarget { recorder, target, path: path.clone() }))
    }
}

/// A recording of one target; finishing (or dropping) it writes what is queued and reports losses.
#[derive(Debug)]
pub struct OneTarget {
    recorder: Recorder,
    target: Arc<TargetRecorder>,
    path: PathBuf,
}

impl OneTarget {
    /// Wraps a connection in a tap that records it.
    pub fn tap<S>(&self, stream: S) -> Tap<S> {
        Tap::new(stream, Arc::clone(&self.target))
    }

    /// The target's recorder (to build taps in a closure).
    pub fn target(&self) -> Arc<TargetRecorder> {
        Arc::clone(&self.target)
    }
}

impl Drop for OneTarget {
    fn drop(&mut self) {
        let stats = self.recorder.finish();
        if stats.lost_records > 0 {
            eprintln!(
                "telemon: recording {}: {} records ({} bytes) could not be written in time and were dropped",
                self.path.display(),
                stats.lost_records,
                stats.lost_bytes
            );
        }
    }
}

/// Runs a one-target command until it ends, or until Ctrl-C or SIGTERM stops it, which is an end like any
/// other (`Ok`, exit 0), not a kill: the command's future is dropped, and with it its connection and its
/// [`OneTarget`], whose drop writes and flushes every queued record. As a tap queues each read before its
/// bytes reach the decoder, every message the command showed is in the recording, however it stopped.
pub async fn until_stopped(command: impl std::future::Future<Output = CliResult>) -> CliResult {
    tokio::select! {
        result = command => result,
        () = shutdown_signal() => Ok(()),
    }
}

/// How a fleet recording rotates and how much it keeps.
#[derive(Debug, Clone, clap::Args)]
pub struct RotateArgs {
    /// Start a new file when the current one reaches this many bytes.
    #[arg(long, value_name = "BYTES", default_value = "64000000")]
    pub record_max_bytes: u64,
    /// Start a new file when the current one is this old (e.g. 1h, 30m).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = output::parse_duration)]
    pub record_max_age: Duration,
    /// Delete the oldest recordings (logged) while the directory's recordings take more than this.
    #[arg(long, value_name = "BYTES", default_value = "1000000000")]
    pub record_max_total: u64,
}

impl RotateArgs {
    /// Starts recording every collector's connections into `dir`: the recording to give the fleet.
    pub fn start(&self, dir: PathBuf) -> Result<Arc<Recording>, CliError> {
        let config = RecorderConfig {
            max_file_bytes: Some(self.record_max_bytes),
            max_file_age: Some(self.record_max_age),
            max_total_bytes: Some(self.record_max_total),
            ..RecorderConfig::new(Destination::Dir(dir.clone()), recording::application())
        };
        let recorder = Recorder::start(config)
            .map_err(|e| CliError::Usage(format!("cannot record to {}: {e}", dir.display())))?;
        let recording = Arc::new(Recording::new(recorder));
        eprintln!("telemon: recording every target's connections into {}", dir.display());
        Ok(recording)
    }
}

/// Writes what is queued and reports what was lost.
pub fn finish(recording: &Recording) {
    let stats = recording.finish();
    eprintln!(
        "telemon: recording: {} records, {} bytes in {} files ({} old files deleted)",
        stats.records, stats.bytes_written, stats.files, stats.files_deleted
    );
    if stats.lost_records > 0 {
        eprintln!(
            "telemon: recording: {} records ({} bytes) could not be written in time and were dropped",
            stats.lost_records, stats.lost_bytes
        );
    }
}

/// `telemon record`: collect every target of a config (as `serve` does) without serving, and record it.
///
/// Wireshark and tshark decode the recordings with the Lua dissectors of `contrib/wireshark/telemon.lua`
/// (see docs/wireshark.md).
#[derive(Debug, clap::Args)]
#[command(after_help = "Wireshark and tshark decode the recordings with the Lua dissectors of \
                        contrib/wireshark/telemon.lua: see docs/wireshark.md.")]
pub struct Args {
    #[command(flatten)]
    targets: TargetArgs,
    /// The directory of the recordings (created if needed).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    #[command(flatten)]
    rotate: RotateArgs,
}

/// Runs `telemon record` until Ctrl-C or SIGTERM.
pub async fn run(args: Args, pace: Pace) -> CliResult {
    let config = args.targets.to_config()?;
    if config.blocks() == 0 {
        return Err(CliError::Usage(
            "no targets: give --config FILE or target flags such as --hmon ADDR".into(),
        ));
    }
    let recording = args.rotate.start(args.out.clone())?;
    pace.set(config.serve.wakeup_slack);
    let fleet = telemon_fleet::Fleet::recording(Some(recording.clone()));
    fleet.apply(&config.fleet).await.map_err(CliError::peer)?;
    eprintln!("telemon: recording {}", config.summary());
    shutdown_signal().await;
    fleet.shutdown().await;
    finish(&recording);
    Ok(())
}
