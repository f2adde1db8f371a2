//! Recording what the collectors read and write (pcapng, see docs/recordings.md and the
//! `telemon-capture` crate), for `telemon record`, `telemon serve --record` and the one-target
//! subcommands' `--record`.
//!
//! A fleet records through one [`Recording`], given to it when it starts (`Fleet::recording`). Each
//! collector wraps the stream of each connection it makes with [`tap`] (through its publisher,
//! `Publisher::tap`); without a recording the tap passes everything through.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use telemon_capture::{Recorder, RecorderStats, Tap, Target, TargetRecorder};

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

    /// `telemon_recording_bytes_total` and `telemon_recording_dropped_bytes_total` for every target
    /// recorded so far (a target that reconnected at another address is summed under its name), in the
    /// text format, or OpenMetrics when `open_metrics`.
    pub fn render(&self, open_metrics: bool) -> String {
        use std::fmt::Write as _;
        let mut by_name: std::collections::BTreeMap<&str, [u64; 2]> = Default::default();
        let targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        for (target, recorder) in targets.iter() {
            let entry = by_name.entry(target.name.as_str()).or_default();
            entry[0] += recorder.bytes_written();
            entry[1] += recorder.bytes_dropped();
        }
        let mut out = String::new();
        let families = [
            ("telemon_recording_bytes_total", "Bytes written to recordings."),
            ("telemon_recording_dropped_bytes_total", "Bytes not recorded because the disk fell behind."),
        ];
        for (i, (name, help)) in families.into_iter().enumerate() {
            let meta = if open_metrics { name.trim_end_matches("_total") } else { name };
            let _ = writeln!(out, "# HELP {meta} {help}\n# TYPE {meta} counter");
            for (target, counts) in &by_name {
                out.push_str(name);
                out.push_str("{target=\"");
                crate::series::escape_label_value(&mut out, target);
                let _ = writeln!(out, "\"}} {}", counts[i]);
            }
        }
        out
    }
}

/// Wraps a collector's connection to the target `name` at `address` in a tap that records it (as
/// `link_type`) when the fleet records, and passes it through otherwise. The bytes read are added to
/// `received` (the target's `telemon_target_received_bytes_total`).
pub fn tap<S>(
    recording: Option<&Recording>,
    stream: S,
    name: &str,
    link_type: u16,
    address: &str,
    received: Arc<AtomicU64>,
) -> Tap<S> {
    let recorder = recording.map(|r| r.target(Target::new(name, link_type, address)));
    Tap::maybe(stream, recorder).counting(received)
}
