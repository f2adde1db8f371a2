//! Typed errors. Every decode error names the absolute byte offset of the offending byte.

use crate::message::Kind;
#[allow(unused_imports)]
use crate::prelude::*;

/// Why a stream could not be decoded. `offset` is the position of the offending byte counted from the
/// first byte the decoder was given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A pair named a token that is not defined (A7).
    #[error("offset {offset}: token {token} is not defined")]
    UndefinedToken {
        /// The token number the pair named.
        token: u64,
        /// Offset of the token field.
        offset: u64,
    },
    /// `F8`, `F9`, `FE` or `FF` where a number must start (A5; FF outside a resync run, A10).
    #[error("offset {offset}: byte {byte:#04X} cannot start a number")]
    BadNumberPrefix {
        /// The byte.
        byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// An index op (`FA`..`FD`) where a value, a string length or an index number must stand (A11, A13).
    #[error("offset {offset}: index op {byte:#04X} where a value must stand")]
    UnexpectedIndexOp {
        /// The op byte.
        byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// `FD` in value position (an indexed-token definition, A13) not followed by `FA`.
    #[error("offset {offset}: indexed-token definition without a first index (FD not followed by FA)")]
    IndexedDefinitionWithoutIndex {
        /// Offset of the byte after `FD`.
        offset: u64,
    },
    /// `FB`/`FC` with fewer index levels than they address (A11).
    #[error("offset {offset}: index op {op:#04X} needs {needed} index levels, {depth} are set")]
    IndexTooShallow {
        /// The op byte.
        op: u8,
        /// Levels needed.
        needed: usize,
        /// Levels set.
        depth: usize,
        /// Offset of the op.
        offset: u64,
    },
    /// `FA` beyond the configured index depth.
    #[error("offset {offset}: more than {max} index levels")]
    IndexTooDeep {
        /// The configured maximum.
        max: usize,
        /// Offset of the op.
        offset: u64,
    },
    /// A negative delta as an index number (index numbers are absolute, A11).
    #[error("offset {offset}: negative index number")]
    NegativeIndex {
        /// Offset of the number.
        offset: u64,
    },
    /// `E8..EF` as a string length: a negative string delta is not defined (A9).
    #[error("offset {offset}: negative delta {prefix:#04X} as a string length")]
    NegativeStringDelta {
        /// The prefix byte.
        prefix: u8,
        /// Its offset.
        offset: u64,
    },
    /// A string (value or definition) longer than the configured maximum; nothing was allocated.
    #[error("offset {offset}: string of {len} bytes exceeds the maximum of {max}")]
    StringTooLong {
        /// The length the stream asked for (u64::MAX when an `E7` length exceeds even that).
        len: u64,
        /// The configured maximum.
        max: usize,
        /// Offset of the length field.
        offset: u64,
    },
    /// A definition string shorter than 4 bytes (type byte plus a 3-byte name, A8).
    #[error("offset {offset}: definition string of {len} bytes, at least 4 needed")]
    DefinitionTooShort {
        /// Its length.
        len: usize,
        /// Offset of the length field.
        offset: u64,
    },
    /// A definition string whose type byte is not `u` or `s` (A8).
    #[error("offset {offset}: unknown token type {type_byte:#04X} (only 'u' and 's' are defined)")]
    UnknownType {
        /// The type byte.
        type_byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// The token field after a definition named token 0 or a token already defined (A7).
    #[error("offset {offset}: definition names token {token}, which is already defined")]
    TokenAlreadyDefined {
        /// The token number.
        token: u64,
        /// Offset of the token field.
        offset: u64,
    },
    /// More tokens than the configured maximum.
    #[error("offset {offset}: more than {max} tokens defined")]
    TooManyTokens {
        /// The configured maximum.
        max: usize,
        /// Offset of the definition's token field.
        offset: u64,
    },
    /// 16 FFs inside string data not followed by the stuffing FE (A10).
    #[error("offset {offset}: byte {byte:#04X} after 16 FFs, expected the stuffing FE")]
    MissingStuffing {
        /// The byte found instead.
        byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// A run of 17 or more FFs not ended by FE: the stream is invalid until the next resync (A10).
    #[error("offset {offset}: byte {byte:#04X} ends a run of 17+ FFs, expected FE (resync)")]
    BrokenResync {
        /// The byte found instead of FE.
        byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// In strict mode: a positive delta past u64::MAX (A2) or a negative delta below 0 (A3).
    #[error("offset {offset}: delta leaves the u64 range (strict mode)")]
    OutOfRange {
        /// Offset of the number.
        offset: u64,
    },
    /// The stream's first item does not decode and its first bytes cannot start an smon stream (see
    /// [`crate::sniff`]): the input is another protocol, or another kind of file. Reported instead of that
    /// item's error; the decoder then skips to the next resync, as after any error.
    #[error("offset 0: not an smon stream: it begins with \"{}\"", .first.escape_ascii())]
    OtherProtocol {
        /// The stream's first bytes (at most 24: enough for any protocol's signature).
        first: Vec<u8>,
    },
    /// The input ended in the middle of a pair (or of a resync sequence).
    #[error("offset {offset}: input ends mid-pair ({pending} bytes left undecoded)")]
    Truncated {
        /// Offset of the first undecoded byte.
        offset: u64,
        /// How many bytes were left.
        pending: usize,
    },
    /// Reading the input failed.
    #[error("read failed: {0}")]
    #[cfg(feature = "std")]
    Io(#[from] std::io::Error),
}

impl DecodeError {
    /// The stream offset the error names, if it names one.
    pub fn offset(&self) -> Option<u64> {
        use DecodeError::*;
        match self {
            UndefinedToken { offset, .. }
            | BadNumberPrefix { offset, .. }
            | UnexpectedIndexOp { offset, .. }
            | IndexedDefinitionWithoutIndex { offset }
            | IndexTooShallow { offset, .. }
            | IndexTooDeep { offset, .. }
            | NegativeIndex { offset }
            | NegativeStringDelta { offset, .. }
            | StringTooLong { offset, .. }
            | DefinitionTooShort { offset, .. }
            | UnknownType { offset, .. }
            | TokenAlreadyDefined { offset, .. }
            | TooManyTokens { offset, .. }
            | MissingStuffing { offset, .. }
            | BrokenResync { offset, .. }
            | OutOfRange { offset }
            | Truncated { offset, .. } => Some(*offset),
            OtherProtocol { .. } => Some(0),
            #[cfg(feature = "std")]
            Io(_) => None,
        }
    }
}

/// Why a sample could not be encoded. Nothing is written for a sample that fails.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A name shorter than 3 bytes (a definition string needs at least 4 bytes, A8).
    #[error("name {name:?} is shorter than 3 bytes")]
    NameTooShort {
        /// The name.
        name: String,
    },
    /// A name whose definition string would exceed the string limit.
    #[error("name of {len} bytes exceeds the maximum of {max}")]
    NameTooLong {
        /// The name's length.
        len: usize,
        /// The longest name allowed.
        max: usize,
    },
    /// A name used with a value of another kind than at its first use.
    #[error("{name:?} is a '{defined}' token, got a '{got}' value")]
    KindMismatch {
        /// The name.
        name: String,
        /// Its kind since its first use.
        defined: Kind,
        /// The kind of the rejected value.
        got: Kind,
    },
    /// A string value over the configured maximum.
    #[error("string of {len} bytes exceeds the maximum of {max}")]
    StringTooLong {
        /// Its length.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// An index vector deeper than the configured maximum.
    #[error("index of {depth} levels exceeds the maximum of {max}")]
    IndexTooDeep {
        /// Its depth.
        depth: usize,
        /// The configured maximum.
        max: usize,
    },
    /// Defining one more token would exceed the configured maximum (emit a resync to start over).
    #[error("more than {max} tokens")]
    TooManyTokens {
        /// The configured maximum.
        max: usize,
    },
    /// Writing the output failed.
    #[error("write failed: {0}")]
    #[cfg(feature = "std")]
    Io(#[from] std::io::Error),
}
