//! `--record FILE` of the one-target subcommands: one recorder, one target, a tap on each connection.

use std::path::PathBuf;
use std::sync::Arc;

use telemon_capture::{Destination, Protocol, Recorder, RecorderConfig, Tap, Target, TargetRecorder};

use crate::output::CliError;

/// The `--record` option every one-target subcommand shares (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RecordArgs {
    /// Record the session's raw bytes, both ways, to FILE (pcapng; appended to if it exists). See
    /// docs/recordings.md; `telemon replay FILE` plays it back.
    #[arg(long, value_name = "FILE", global = true)]
    pub record: Option<PathBuf>,
}

impl RecordArgs {
    /// Starts recording `target` if `--record` was given.
    pub fn start(
        &self,
        name: &str,
        protocol: Protocol,
        address: &str,
    ) -> Result<Option<OneTarget>, CliError> {
        let Some(path) = &self.record else { return Ok(None) };
        let config = RecorderConfig::new(Destination::File(path.clone()), telemon::record::application());
        let recorder = Recorder::start(config)
            .map_err(|e| CliError::Usage(format!("cannot record to {}: {e}", path.display())))?;
        let target = recorder.target(Target::new(name, protocol, address));
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
