//! Typed errors: per line ([`DecodeError`], [`CommandError`]), per session ([`ProtocolError`]) and per
//! connection ([`ClientError`]).

use std::path::PathBuf;

use crate::message::BadReason;

/// A server line the client could not decode. The line is consumed, so decoding goes on with the next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// No LF within `max` bytes. The decoder skips to the next LF.
    #[error("line longer than {max} bytes")]
    LineTooLong {
        /// The limit that was exceeded.
        max: usize,
    },
    /// More words after the keyword than allowed.
    #[error("{keyword} line has more than {max} fields")]
    TooManyFields {
        /// The line's keyword.
        keyword: &'static str,
        /// The limit that was exceeded.
        max: usize,
    },
    /// A word that should be a plain decimal number is not one (or does not fit).
    #[error("{keyword} field {index}: {word:?} is not a decimal number that fits in {bits} bits")]
    InvalidNumber {
        /// The line's keyword.
        keyword: &'static str,
        /// The 0-based position of the word after the keyword.
        index: usize,
        /// The word, lossily converted to UTF-8.
        word: String,
        /// The width of the expected unsigned integer.
        bits: u32,
    },
    /// A keyword followed by the wrong number of words (`HELLO` takes one, `OK` none).
    #[error("{keyword} takes {expected} word(s), got {got}")]
    WrongArity {
        /// The line's keyword.
        keyword: &'static str,
        /// How many words it takes.
        expected: usize,
        /// How many it had.
        got: usize,
    },
    /// The server's first bytes are no meter161 line (see [`crate::sniff`]): it speaks another protocol.
    /// Only from a codec [`checking_greeting`](crate::ClientCodec::checking_greeting); fatal for a client.
    #[error("not a System/161 meter socket: the peer began with \"{}\"", .first.escape_ascii())]
    OtherProtocol {
        /// The first bytes it sent (at most 24: enough for any protocol's signature).
        first: Vec<u8>,
    },
}

/// A message that cannot be written as one protocol line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A `HEAD` name or an unknown line's keyword that is empty or contains a blank or line break.
    #[error("{what} {value:?} is not a single word")]
    NotAWord {
        /// What the value is.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// A text that is not in normal form: words separated by single spaces, no line breaks or tabs.
    #[error("{what} {value:?} is not words separated by single spaces")]
    NotNormalText {
        /// What the value is.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// An unknown line whose keyword is a known one (it would decode as that message instead).
    #[error("unknown line {line:?} starts with a known keyword")]
    KnownKeyword {
        /// The line.
        line: String,
    },
}

/// A client command the server rejects; [`CommandError::reason`] gives the exact `BAD` reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// 128 bytes or more without an LF; those bytes are discarded.
    #[error("no LF within {max} bytes")]
    InputOverflow {
        /// The server's input buffer size.
        max: usize,
    },
    /// More than 8 words.
    #[error("more than {max} words in command")]
    TooManyWords {
        /// The word limit.
        max: usize,
    },
    /// Not `INTERVAL n` (any case).
    #[error("invalid command {line:?}")]
    InvalidCommand {
        /// The line, lossily converted to UTF-8, blanks normalised.
        line: String,
    },
    /// The interval is not a number `strtoul(s, &end, 0)` accepts whole, or it overflows.
    #[error("invalid number {word:?}")]
    InvalidNumber {
        /// The word, lossily converted to UTF-8.
        word: String,
    },
    /// The interval is below the server's minimum.
    #[error("interval {ns} ns is below the minimum {min} ns")]
    IntervalTooSmall {
        /// The parsed interval.
        ns: u64,
        /// The minimum.
        min: u64,
    },
    /// The interval is above the server's maximum.
    #[error("interval {ns} ns is above the maximum {max} ns")]
    IntervalTooLarge {
        /// The parsed interval.
        ns: u64,
        /// The maximum.
        max: u64,
    },
}

impl CommandError {
    /// The reason, whose [`BadReason::text`] is the exact reply.
    pub fn reason(&self) -> BadReason {
        match self {
            CommandError::InputOverflow { .. } => BadReason::InputOverflow,
            CommandError::TooManyWords { .. } => BadReason::TooManyWords,
            CommandError::InvalidCommand { .. } => BadReason::InvalidCommand,
            CommandError::InvalidNumber { .. } => BadReason::InvalidNumber,
            CommandError::IntervalTooSmall { .. } => BadReason::IntervalTooSmall,
            CommandError::IntervalTooLarge { .. } => BadReason::IntervalTooLarge,
        }
    }
}

/// A server message that makes no sense at this point of the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The line did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// `HELLO n` with n other than 2. Fatal: the client disconnects.
    #[error("wrong protocol version {got} (this client speaks {expected})", expected = crate::PROTOCOL_VERSION)]
    UnsupportedVersion {
        /// The version the server announced.
        got: u32,
    },
    /// `ERROR [text]`: the server failed and closes the connection. Fatal.
    #[error("sys161 error{}", text.as_deref().map(|t| format!(": {t}")).unwrap_or_default())]
    ServerError {
        /// The text, if any (sys161 sends none).
        text: Option<String>,
    },
    /// `BAD [text]`: the server rejected a command.
    #[error("sys161 rejected a command{}", text.as_deref().map(|t| format!(": {t}")).unwrap_or_default())]
    Rejected {
        /// The text, e.g. `Interval too small`; [`BadReason::from_text`] classifies sys161's.
        text: Option<String>,
    },
    /// A line with an unknown keyword.
    #[error("unknown message {line:?}")]
    UnknownMessage {
        /// The line's words joined by single spaces.
        line: String,
    },
    /// `HEAD` without any field name; the current header is kept.
    #[error("HEAD without field names")]
    EmptyHead,
    /// `WIDTH` before any `HEAD`.
    #[error("WIDTH before HEAD")]
    WidthBeforeHead,
    /// `WIDTH` with a different number of fields than `HEAD`; the widths are ignored.
    #[error("WIDTH has {got} fields, HEAD has {expected}")]
    WidthCount {
        /// The number of `HEAD` fields.
        expected: usize,
        /// The number of `WIDTH` fields.
        got: usize,
    },
    /// `DATA` before any `HEAD`.
    #[error("DATA before HEAD")]
    DataBeforeHead,
    /// `DATA` with a different number of fields than `HEAD`; the row is skipped.
    #[error("DATA has {got} fields, HEAD has {expected}")]
    FieldCount {
        /// The number of `HEAD` fields.
        expected: usize,
        /// The number of `DATA` fields.
        got: usize,
    },
}

impl ProtocolError {
    /// Whether the connection cannot go on after this error (wrong version, the server's `ERROR`, or a peer
    /// of another protocol).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            ProtocolError::UnsupportedVersion { .. }
                | ProtocolError::ServerError { .. }
                | ProtocolError::Decode(DecodeError::OtherProtocol { .. })
        )
    }

    /// For a `BAD` reply, sys161's reason if the text is one of its exact texts.
    pub fn bad_reason(&self) -> Option<BadReason> {
        match self {
            ProtocolError::Rejected { text: Some(t) } => BadReason::from_text(t),
            _ => None,
        }
    }
}

/// What can go wrong with a connection to the meter socket.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Connecting to the socket failed (`NotFound` / `ConnectionRefused` mean no simulator is there).
    #[error("cannot connect to {}: {source}", path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading or writing the connection failed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The server closed the connection before sending `HEAD`.
    #[error("connection closed during the handshake")]
    HandshakeEof,
    /// No `HEAD` arrived within the handshake timeout.
    #[error("no HEAD within {0:?}")]
    HandshakeTimeout(std::time::Duration),
    /// The server sent something wrong (per line unless [`ProtocolError::is_fatal`]).
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// An interval outside what sys161 accepts, refused before sending.
    #[error("interval {ns} ns is outside {min}..={max} ns")]
    IntervalOutOfRange {
        /// The requested interval.
        ns: u64,
        /// The minimum.
        min: u64,
        /// The maximum.
        max: u64,
    },
}

impl ClientError {
    /// Whether the connection is over after this error (as opposed to one bad line).
    pub fn is_fatal(&self) -> bool {
        match self {
            ClientError::Protocol(p) => p.is_fatal(),
            ClientError::IntervalOutOfRange { .. } => false,
            _ => true,
        }
    }
}
