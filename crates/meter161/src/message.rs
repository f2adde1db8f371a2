//! The typed messages of both directions, and the protocol's constants (one source of truth for the
//! codec, the client, the fake server and the tests).

use std::time::Duration;

/// The protocol version this crate speaks (`HELLO 2`).
pub const PROTOCOL_VERSION: u32 = 2;

/// The socket's path relative to the directory the simulator runs in.
pub const SOCKET_PATH: &str = ".sockets/meter";

/// The fields sys161 2.x sends, in order (`HEAD nsec kinsns ...`).
pub const SYS161_FIELDS: [&str; 11] =
    ["nsec", "kinsns", "uinsns", "udud", "idle", "irqs", "exns", "disk", "con", "emu", "net"];

/// The suggested column widths sys161 2.x sends (`WIDTH 11 9 9 4 9 4 4 4 5 4 4`).
pub const SYS161_WIDTHS: [u32; 11] = [11, 9, 9, 4, 9, 4, 4, 4, 5, 4, 4];

/// Fields that sys161 computes as sums of `uint32_t` counters in 32-bit arithmetic, so they wrap at 2^32.
pub const U32_FIELDS: [&str; 6] = ["irqs", "exns", "disk", "con", "emu", "net"];

/// The smallest interval sys161 accepts, in nanoseconds (`MIN_METER_NSECS`, 10 us).
pub const MIN_INTERVAL_NS: u64 = 10_000;
/// The smallest interval the protocol text allows (100 ns); only the fake server's spec-text mode uses it.
pub const SPEC_MIN_INTERVAL_NS: u64 = 100;
/// The largest interval sys161 accepts, in nanoseconds (2 s).
pub const MAX_INTERVAL_NS: u64 = 2_000_000_000;
/// The interval a new connection starts with, in nanoseconds (0.2 s).
pub const DEFAULT_INTERVAL_NS: u64 = 200_000_000;

/// The default maximum length of a line the client accepts, like stat161's 4096-byte buffer.
pub const DEFAULT_MAX_LINE: usize = 4096;
/// The default maximum number of words after the keyword of a server line.
pub const DEFAULT_MAX_FIELDS: usize = 256;
/// sys161's per-connection input buffer (`METER_BUFSIZE`): a command line needs its LF within it.
pub const SERVER_INPUT_BUFSIZE: usize = 128;
/// sys161's word limit per command (`MAXWORDS`).
pub const MAX_COMMAND_WORDS: usize = 8;

/// Converts a [`Duration`] to whole nanoseconds, saturating at `u64::MAX`.
pub fn duration_to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A line from the server (sys161) to a client.
///
/// Decoding is liberal (any case, LF or CRLF, runs of blanks); [`encode_server`](crate::encode_server)
/// writes the exact form sys161 sends: uppercase keyword, single spaces, CRLF.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerMessage {
    /// `HELLO version`: the first line on every connection.
    Hello(u32),
    /// `HEAD name...`: the field names of the following `DATA` lines, kept as received.
    Head(Vec<String>),
    /// `WIDTH n...`: a suggested print width per field.
    Width(Vec<u32>),
    /// `DATA n...`: one row of cumulative counter values.
    Data(Vec<u64>),
    /// `OK`: success of a command. The protocol text has it; sys161 never sends it.
    Ok,
    /// `BAD [text]`: the server rejected a command. The text is normalised to single spaces.
    Bad(Option<String>),
    /// `ERROR [text]`: the server failed and is closing the connection.
    Error(Option<String>),
    /// A line with an unknown keyword, kept as its words joined by single spaces.
    Unknown(String),
}

impl ServerMessage {
    /// `BAD text` as sys161 sends it.
    pub fn bad(text: impl Into<String>) -> Self {
        ServerMessage::Bad(Some(text.into()))
    }

    /// The greeting sys161 sends on accept, before its first `DATA`: `HELLO 2`, `HEAD ...`, `WIDTH ...`.
    pub fn sys161_greeting() -> [ServerMessage; 3] {
        [
            ServerMessage::Hello(PROTOCOL_VERSION),
            ServerMessage::Head(SYS161_FIELDS.iter().map(|s| s.to_string()).collect()),
            ServerMessage::Width(SYS161_WIDTHS.to_vec()),
        ]
    }

    /// The keyword as it is sent (uppercase), or `None` for [`ServerMessage::Unknown`].
    pub fn keyword(&self) -> Option<&'static str> {
        Some(match self {
            ServerMessage::Hello(_) => "HELLO",
            ServerMessage::Head(_) => "HEAD",
            ServerMessage::Width(_) => "WIDTH",
            ServerMessage::Data(_) => "DATA",
            ServerMessage::Ok => "OK",
            ServerMessage::Bad(_) => "BAD",
            ServerMessage::Error(_) => "ERROR",
            ServerMessage::Unknown(_) => return None,
        })
    }
}

/// A line from a client to the server.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientMessage {
    /// `INTERVAL nsecs`: report every `nsecs` nanoseconds of simulated time.
    Interval(u64),
}

/// Why sys161 rejects a command: each maps to one exact `BAD` text.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BadReason {
    /// `BAD Interval too small`
    IntervalTooSmall,
    /// `BAD Interval too large`
    IntervalTooLarge,
    /// `BAD Invalid number`
    InvalidNumber,
    /// `BAD Invalid command`
    InvalidCommand,
    /// `BAD Too many words in command`
    TooManyWords,
    /// `BAD Input overflow`
    InputOverflow,
}

impl BadReason {
    /// Every reason, in the order of sys161's source.
    pub const ALL: [BadReason; 6] = [
        BadReason::IntervalTooSmall,
        BadReason::IntervalTooLarge,
        BadReason::InvalidNumber,
        BadReason::InvalidCommand,
        BadReason::TooManyWords,
        BadReason::InputOverflow,
    ];

    /// The text after `BAD `, byte for byte as sys161 sends it.
    pub fn text(self) -> &'static str {
        match self {
            BadReason::IntervalTooSmall => "Interval too small",
            BadReason::IntervalTooLarge => "Interval too large",
            BadReason::InvalidNumber => "Invalid number",
            BadReason::InvalidCommand => "Invalid command",
            BadReason::TooManyWords => "Too many words in command",
            BadReason::InputOverflow => "Input overflow",
        }
    }

    /// The reason whose text is `text`, if it is one of sys161's.
    pub fn from_text(text: &str) -> Option<BadReason> {
        BadReason::ALL.into_iter().find(|r| r.text() == text)
    }

    /// The `BAD` reply for this reason.
    pub fn reply(self) -> ServerMessage {
        ServerMessage::bad(self.text())
    }
}

impl std::fmt::Display for BadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// The meter socket of a simulator running in `dir`: `dir/.sockets/meter`.
pub fn socket_path(dir: impl AsRef<std::path::Path>) -> std::path::PathBuf {
    dir.as_ref().join(SOCKET_PATH)
}

/// Checks an interval against sys161's range and converts it to nanoseconds.
pub fn interval_ns(interval: std::time::Duration) -> Result<u64, crate::ClientError> {
    let ns = duration_to_ns(interval);
    let range = crate::IntervalRange::SYS161;
    if !range.contains(ns) {
        return Err(crate::ClientError::IntervalOutOfRange { ns, min: range.min, max: range.max });
    }
    Ok(ns)
}
