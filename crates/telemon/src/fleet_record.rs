//! The recording options of `telemon serve --record DIR` and `telemon record --out DIR`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use telemon::record::{self, Recording};
use telemon_capture::{Destination, Recorder, RecorderConfig};

use crate::output::{self, CliError};

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
    /// Starts recording every collector's connections into `dir` and installs the recording for the fleet.
    pub fn start(&self, dir: PathBuf) -> Result<Arc<Recording>, CliError> {
        let config = RecorderConfig {
            max_file_bytes: Some(self.record_max_bytes),
            max_file_age: Some(self.record_max_age),
            max_total_bytes: Some(self.record_max_total),
            ..RecorderConfig::new(Destination::Dir(dir.clone()), record::application())
        };
        let recorder = Recorder::start(config)
            .map_err(|e| CliError::Usage(format!("cannot record to {}: {e}", dir.display())))?;
        let recording = Arc::new(Recording::new(recorder));
        record::install(Arc::clone(&recording))
            .map_err(|_| CliError::Usage("a recording is already running in this process".into()))?;
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
