//! Errors: framing (fatal for the connection), payloads (one bad message), and the client's.

use std::io;
use std::time::Duration;

/// A framing error: the byte stream cannot be trusted any more and the connection must close.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The total length is below 8, so it cannot even cover itself and the magic.
    #[error("frame total length {len} is below 8 (4-byte length + \"HMON\")")]
    TooShort {
        /// The total length read.
        len: u32,
    },
    /// The total length is exactly 8: an empty payload, which no peer sends.
    #[error("frame has an empty payload (total length 8)")]
    EmptyPayload,
    /// The total length exceeds the configured maximum; nothing was buffered or allocated for it.
    #[error("frame total length {len} exceeds the maximum of {max} bytes")]
    TooLarge {
        /// The total length read.
        len: u32,
        /// The configured maximum.
        max: u32,
    },
    /// The 4 bytes after the length are not `HMON` (for example `RIDE`).
    #[error("bad magic {found:?} (want \"HMON\")", found = String::from_utf8_lossy(.found))]
    BadMagic {
        /// The 4 bytes found.
        found: [u8; 4],
    },
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame ({buffered} bytes buffered)")]
    Truncated {
        /// How many bytes of the partial frame had arrived.
        buffered: usize,
    },
    /// Reading or writing the socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

/// One payload that is not a valid handshake or message. The stream itself is still in step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// A handshake payload with a bad value (`SupportedProtocols=x`, `UsingProtocol=`).
    #[error("bad handshake payload {text:?}")]
    Handshake {
        /// The payload text (at most 64 characters of it).
        text: String,
    },
    /// Not JSON, or not a `[string, object]` pair: the interpreter answers `InvalidSyntax`.
    #[error("invalid syntax: {reason}")]
    InvalidSyntax {
        /// What was wrong.
        reason: String,
    },
    /// A `[name, {arguments}]` pair whose arguments do not fit the message (e.g. a numeric `UID`):
    /// the interpreter answers `MalformedCommand`.
    #[error("malformed {name} message: {reason}")]
    Malformed {
        /// The message name.
        name: String,
        /// The `UID`, if it was a string.
        uid: Option<String>,
        /// What was wrong.
        reason: String,
    },
}

/// A handshake that did not agree on protocol 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The peer does not support protocol 2.
    #[error("peer supports protocols {offered:?}, not 2")]
    Unsupported {
        /// What it offered.
        offered: Vec<u32>,
    },
    /// The peer chose another protocol.
    #[error("peer uses protocol {0}, not 2")]
    WrongProtocol(u32),
    /// A JSON message arrived before the handshake was complete.
    #[error("peer sent {0:?} before completing the handshake")]
    MessageBeforeHandshake(String),
    /// The same handshake frame arrived twice, or in the wrong order for a strict handshake.
    #[error("unexpected handshake frame {0:?}")]
    Unexpected(String),
    /// A payload could not be read as a handshake.
    #[error(transparent)]
    Payload(#[from] PayloadError),
}

/// A client failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Connecting failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// The byte stream broke.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The handshake failed.
    #[error("handshake: {0}")]
    Handshake(#[from] HandshakeError),
    /// Nothing (or not enough) arrived in time.
    #[error("no {what} within {after:?}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// The interpreter answered the request with `UnknownCommand`, `MalformedCommand` or `DisallowedUID`.
    #[error("interpreter answered {name} to {request}")]
    Rejected {
        /// The error response's name.
        name: String,
        /// The request's name.
        request: String,
    },
    /// The interpreter sent a reply of the wrong type for the request's UID.
    #[error("expected {expected} for UID {uid:?}, got {got}")]
    UnexpectedReply {
        /// What was expected.
        expected: &'static str,
        /// What came.
        got: String,
        /// The UID.
        uid: String,
    },
    /// A message could not be encoded (only for hand-built `Value`s that JSON cannot hold).
    #[error("cannot encode message: {0}")]
    Encode(String),
    /// The peer's first bytes are not HMON's (see [`crate::sniff`]): it speaks another protocol. Checked while
    /// no frame has been read from the connection, when the handshake fails.
    #[error("not an HMON peer: it began with \"{}\"", .first.escape_ascii())]
    OtherProtocol {
        /// The first bytes it sent (at most 24: enough for any protocol's signature).
        first: Vec<u8>,
    },
    /// The connection is closed (and reconnecting is off or gave up).
    #[error("connection closed{}", .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Closed {
        /// Why, if known.
        reason: Option<String>,
    },
}

/// The name [`ClientError`] had before 0.2.
#[deprecated(note = "renamed ClientError, as in the other protocol crates")]
pub type Error = ClientError;
