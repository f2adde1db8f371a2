//! Typed errors: what was wrong on the wire, and what went wrong in a session.

use std::time::Duration;

/// The bytes on the wire are not a valid message. The stream cannot be resynchronised after one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The agent sent an opcode this side does not know (agent opcodes are 0..=4).
    #[error("unknown agent opcode {0} (the stream cannot be resynchronised)")]
    UnknownAgentOpcode(u8),
    /// A response status byte outside OK/NOK/NOTFOUND/EXISTING.
    #[error("unknown response status {status} in a {response} response")]
    UnknownStatus {
        /// The response kind ("add" or "remove").
        response: &'static str,
        /// The status byte.
        status: u8,
    },
    /// Hello carried a protocol version other than 1 ("0.1").
    #[error("unsupported protocol version {0} (expected 1)")]
    UnsupportedVersion(i16),
    /// A string length below -1.
    #[error("invalid length {len} for string {field}")]
    NegativeStringLength {
        /// Which field.
        field: &'static str,
        /// The length read.
        len: i32,
    },
    /// A string longer than the configured maximum (checked before reading it).
    #[error("string {field} is {len} bytes, more than the maximum {max}")]
    StringTooLong {
        /// Which field.
        field: &'static str,
        /// The length read.
        len: i32,
        /// The configured maximum.
        max: usize,
    },
    /// A string that must be present was null (length -1).
    #[error("string {field} is null")]
    NullString {
        /// Which field.
        field: &'static str,
    },
    /// A string that is not UTF-8.
    #[error("string {field} is not UTF-8")]
    InvalidUtf8 {
        /// Which field.
        field: &'static str,
    },
    /// A negative Hello header count.
    #[error("negative header count {0}")]
    NegativeCount(i16),
    /// More headers than the configured maximum.
    #[error("{count} headers, more than the maximum {max}")]
    TooManyHeaders {
        /// The count read.
        count: i16,
        /// The configured maximum.
        max: usize,
    },
    /// More values in one Sampling message than the configured maximum.
    #[error("more than {max} values in one sample")]
    TooManyValues {
        /// The configured maximum.
        max: usize,
    },
    /// More List response entries than the configured maximum.
    #[error("more than {max} entries in a list response")]
    TooManyListEntries {
        /// The configured maximum.
        max: usize,
    },
    /// A Sampling value with a negative index other than the terminator -1.
    #[error("invalid sample index {0}")]
    InvalidIndex(i16),
    /// A Sampling value for an index no Hello or Add response announced.
    #[error("sample value for unknown counter index {0}")]
    UnknownIndex(i16),
    /// A value size that does not fit the counter's type (INT 4, LONG/DOUBLE 8, WORD 4 or 8).
    #[error("value of {size} bytes for index {index}, which is a {kind} counter")]
    BadValueSize {
        /// The counter index.
        index: i16,
        /// The size read.
        size: i16,
        /// The counter's type name.
        kind: &'static str,
    },
    /// A message larger than the configured maximum is still incomplete.
    #[error("message exceeds {max} bytes")]
    MessageTooLarge {
        /// The configured maximum.
        max: usize,
    },
    /// The stream ended inside a message.
    #[error("stream ended inside a message ({buffered} bytes of it received)")]
    Truncated {
        /// How many bytes of the incomplete message were received.
        buffered: usize,
    },
}

/// A message that cannot be put on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// More headers than a short can count.
    #[error("{0} headers do not fit in a short count")]
    TooManyHeaders(usize),
    /// A string longer than an int can say.
    #[error("string of {0} bytes is too long")]
    StringTooLong(usize),
    /// A value longer than a short can say.
    #[error("value of {0} bytes is too long")]
    ValueTooLong(usize),
    /// Sample indexes must not be negative (-1 is the terminator).
    #[error("invalid sample index {0}")]
    InvalidIndex(i16),
}

/// What a request or a session can run into.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Socket or file I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The agent sent bytes that are not a valid message.
    #[error("decode: {0}")]
    Decode(#[from] DecodeError),
    /// A message could not be encoded.
    #[error("encode: {0}")]
    Encode(#[from] EncodeError),
    /// The first message was not Hello.
    #[error("expected Hello first, got {0}")]
    ExpectedHello(&'static str),
    /// The peer's first bytes (or a file's) are no Mono agent's Hello (see [`crate::sniff`]): it speaks
    /// another protocol. Reported instead of the error that the first message met.
    #[error("not a Mono counters agent: it began with \"{}\"", .first.escape_ascii())]
    OtherProtocol {
        /// The first bytes it sent (at most 24: enough for any protocol's signature).
        first: Vec<u8>,
    },
    /// A message that has no place here (e.g. a response in a file, or a response nobody asked for).
    #[error("unexpected {0}")]
    Unexpected(&'static str),
    /// The connection closed before the response arrived (the real agent closes on a duplicate Add).
    #[error("the agent closed the connection before answering {request}")]
    Closed {
        /// The request kind.
        request: &'static str,
    },
    /// No response within the configured time.
    #[error("no answer to {request} within {after:?}")]
    Timeout {
        /// The request kind.
        request: &'static str,
        /// The timeout.
        after: Duration,
    },
}

impl ClientError {
    /// `error`, the failure of a stream's first message, or [`ClientError::OtherProtocol`] when the bytes the
    /// stream began with (still all unread: no message was taken out) are no Mono agent's.
    #[cfg(feature = "client")]
    pub(crate) fn at_start(error: ClientError, first: &[u8]) -> ClientError {
        match crate::sniff(first) {
            Some(false) => ClientError::OtherProtocol { first: first[..first.len().min(24)].to_vec() },
            _ => error,
        }
    }
}

/// The name [`ClientError`] had before 0.2.
#[deprecated(note = "renamed ClientError, as in the other protocol crates")]
pub type Error = ClientError;
