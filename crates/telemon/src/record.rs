//! Recording what the collectors read and write (pcapng, see docs/recordings.md and the
//! `telemon-capture` crate), for `telemon record`, `telemon serve --record` and the one-target
//! subcommands' `--record`.
//!
//! A fleet records through one process-wide [`Recording`], installed once ([`install`]) before the fleet
//! starts. Each collector wraps the stream of each connection it makes with [`tap`]; without an
//! installed recording the tap passes everything through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use telemon_capture::{Recorder, RecorderStats, Tap, Target, TargetRecorder};

pub use telemon_capture::Protocol;

/// `shb_userappl` of telemon's recordings: `telemon <version>`.
pub fn application() -> String {
    format!("telemon {}", env!("CARGO_PKG_VERSION"))
}

/// A recorder and the targets registered with it (one interface per target, however often it reconnects).
#[derive(Debug)]
pub struct Recording {
    recorder: Recorder,
    targets: Mutex<HashMap<Target, Arc<TargetRecorder>>>,
}

impl Recording {
    /// Records through `recorder`.
    pub fn new(recorder: Recorder) -> Self {
        Recording { recorder, targets: Mutex::new(HashMap::new()) }
    }

    /// The handle of a target, registered on first use.
    pub fn target(&self, target: Target) -> Arc<TargetRecorder> {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = targets.get(&target) {
            return Arc::clone(t);
        }
        let t = self.recorder.target(target.clone());
        targets.insert(target, Arc::clone(&t));
        t
    }

    /// What the recorder did so far.
    pub fn stats(&self) -> RecorderStats {
        self.recorder.stats()
    }

    /// Writes what is queued and stops the writer.
    pub fn finish(&self) -> RecorderStats {
        self.recorder.finish()
    }
}

static RECORDING: OnceLock<Arc<Recording>> = OnceLock::new();

/// Makes `recording` the process's fleet recording; fails if one is installed already.
pub fn install(recording: Arc<Recording>) -> Result<(), Arc<Recording>> {
    RECORDING.set(recording)
}

/// The process's fleet recording, if one is installed.
pub fn installed() -> Option<&'static Arc<Recording>> {
    RECORDING.get()
}

/// Wraps a collector's connection to the target `name` (speaking `protocol` at `address`) in a tap that
/// records it when a fleet recording is installed, and passes it through otherwise.
pub fn tap<S>(stream: S, name: &str, protocol: Protocol, address: &str) -> Tap<S> {
    Tap::maybe(stream, installed().map(|r| r.target(Target::new(name, protocol, address))))
}
