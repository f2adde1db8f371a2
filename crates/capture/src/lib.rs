//! Recordings of monitoring-protocol sessions, as pcapng files that Wireshark and tshark open.
//!
//! A recording keeps the raw bytes that crossed a connection in each direction, with a timestamp, and
//! enough about each target (name, protocol, address) to replay it through the same decoders later.
//!
//! ```text
//! Section Header Block    shb_userappl "telemon 0.1.0"                  (one per file, or per append)
//! Interface Description   one per target: link type LINKTYPE_USER0+n    (147 meter161, 148 hmon,
//!                         if_name = target, if_description = address     149 mono, 150 smon, 151 sysinfo)
//!                         if_tsresol = 9 (nanoseconds)
//! Enhanced Packet Block   one per read or write: epb_flags 1 inbound / 2 outbound, the raw bytes,
//!                         time = the section's wall-clock anchor + a monotonic offset;
//!                         zero-length packets commented "telemon: connected" / "telemon: closed"
//!                         mark connections; epb_dropcount counts records lost before this one
//! ```
//!
//! The reader ([`Reader`]) is sans-IO and bounded ([`Limits::max_block`] is checked on a block's length
//! field); a file cut by a crash reads up to the cut with a [`Warning`], never a panic. The writer
//! ([`Writer`]) writes each block in one `write_all`; [`prepare_append`] cuts a crash's unfinished tail
//! before a new section is appended.
//!
//! With the `tokio` feature (default): [`Tap`] records an `AsyncRead + AsyncWrite` as it is used,
//! [`Recorder`] writes what taps send from its own thread through a bounded queue (counting what it
//! had to drop, rotating files by size and age, bounding the total on disk), and [`ReplayStream`] serves
//! recorded bytes back as a stream.
//!
//! ```
//! use telemon_capture::{Capture, Direction, Limits, link_type, Record, RecordKind, Target, Writer};
//!
//! let mut w = Writer::new(Vec::new(), "example 1.0").unwrap();
//! let iface = w.interface(&Target::new("sim", link_type::METER161, "/tmp/.sockets/meter")).unwrap();
//! let bytes = b"HELLO 2\r\n".to_vec();
//! let data = RecordKind::Data { direction: Direction::Inbound, bytes };
//! w.record(&Record { interface: iface, time_ns: 1_700_000_000_000_000_000, dropped: 0, kind: data.clone() })
//!     .unwrap();
//! let file = w.into_inner();
//! let capture = Capture::from_bytes(&file, Limits::default());
//! assert!(capture.warning.is_none());
//! let (target, record) = capture.records().next().unwrap();
//! assert_eq!((target.name.as_str(), &record.kind), ("sim", &data));
//! ```

#![warn(missing_docs)]

mod format;
/// Fuzz-target bodies, shared by `fuzz/` (cargo-fuzz and `cargo xtask fuzz --replay` build it with
/// `--cfg fuzzing`) and the corpus replays of this crate's unit tests. Not part of the API: it exists only
/// under `cfg(fuzzing)`.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzz;
mod read;
mod write;

#[cfg(feature = "tokio")]
mod playback;
#[cfg(feature = "tokio")]
mod recorder;
#[cfg(feature = "tokio")]
mod tap;

pub use format::*;
pub use read::{Capture, Event, FileReader, Limits, ReadError, Reader, Section, Warning, NOT_PCAPNG_SHOWN};
pub use write::{
    encode_interface, encode_record, encode_section_header, prepare_append, AppendCheck, Writer,
    MAX_RECORD_DATA,
};

#[cfg(feature = "tokio")]
pub use playback::{Connection, ReplayClock, ReplayStream, Speed};
#[cfg(feature = "tokio")]
pub use recorder::{Destination, Recorder, RecorderConfig, RecorderStats, TargetRecorder};
#[cfg(feature = "tokio")]
pub use tap::Tap;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A wall-clock time taken once, and the monotonic instant it was taken at: times derived from it follow
/// the monotonic clock (never jump back when the wall clock is set) yet read as wall-clock times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// Nanoseconds since the Unix epoch at `at`.
    pub wall_ns: u64,
    /// The monotonic instant of `wall_ns`.
    pub at: Instant,
}

impl Anchor {
    /// Anchors to the clocks now.
    pub fn now() -> Anchor {
        let at = Instant::now();
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Anchor { wall_ns: u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX), at }
    }

    /// The wall-clock time (ns since the epoch) of `instant`; instants before the anchor map to it.
    pub fn ns_at(&self, instant: Instant) -> u64 {
        let offset = instant.saturating_duration_since(self.at).as_nanos();
        self.wall_ns.saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
    }
}

/// This crate's version, for `shb_userappl` lines of tools built on it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
