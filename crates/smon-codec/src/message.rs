//! The typed things a stream carries: what the decoder yields and what the encoder takes.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt;

use bytes::Bytes;

use crate::wire::{TYPE_STRING, TYPE_UNSIGNED};

/// The data type of a token, the first byte of its definition string (A8).
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `u`: an unsigned 64-bit number, sent as deltas.
    Unsigned,
    /// `s`: a byte string, sent as appends or restarts (A9).
    Text,
}

impl Kind {
    /// The type byte on the wire.
    pub fn type_byte(self) -> u8 {
        match self {
            Kind::Unsigned => TYPE_UNSIGNED,
            Kind::Text => TYPE_STRING,
        }
    }

    /// The kind a type byte stands for, if any.
    pub fn from_type_byte(b: u8) -> Option<Kind> {
        match b {
            TYPE_UNSIGNED => Some(Kind::Unsigned),
            TYPE_STRING => Some(Kind::Text),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Unsigned => "u",
            Kind::Text => "s",
        })
    }
}

/// A value: an unsigned number or a byte string (strings are bytes; show them with
/// [`String::from_utf8_lossy`]).
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// A `u` token's value.
    Unsigned(u64),
    /// An `s` token's value, whole (appends already applied).
    Text(Bytes),
}

impl Value {
    /// The kind of token that carries this value.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Unsigned(_) => Kind::Unsigned,
            Value::Text(_) => Kind::Text,
        }
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Unsigned(v)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<&[u8]> for Value {
    fn from(s: &[u8]) -> Self {
        Value::Text(Bytes::copy_from_slice(s))
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unsigned(v) => write!(f, "{v}"),
            Value::Text(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
        }
    }
}

/// What the decoder yields.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// A token was defined (by a token-0 definition string, A8, or as an indexed copy, A13).
    Define {
        /// The new token's number.
        token: u64,
        /// The name (the definition string without its type byte; non-UTF-8 bytes are replaced).
        name: Arc<str>,
        /// The token's type.
        kind: Kind,
        /// For an indexed token (A13), the first index level it is bound to.
        bound_index: Option<u64>,
    },
    /// A token got a value.
    Value {
        /// The token that carried it.
        token: u64,
        /// The token's (base) name.
        name: Arc<str>,
        /// The effective index vector: the current indexes, with level 0 replaced by an indexed token's
        /// bound index (A11, A13). Empty for an unindexed value.
        index: Vec<u64>,
        /// The new value.
        value: Value,
    },
    /// A resync sequence (17×FF FE, A10) was read: every token, value and index was forgotten.
    Resync,
}

/// One sample for the encoder: a name, an index vector (empty for none) and a value.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sample {
    /// The dotted name, such as `linux.cpu.idle` (at least 3 bytes).
    pub name: Arc<str>,
    /// The index vector, such as `[0]` for CPU 0 or `[8, 0]` for a block device.
    pub index: Vec<u64>,
    /// The value; its kind fixes the name's type on first use.
    pub value: Value,
}

impl Sample {
    /// A sample of `name` at `index` with `value`.
    pub fn new(name: impl Into<Arc<str>>, index: impl Into<Vec<u64>>, value: impl Into<Value>) -> Self {
        Sample { name: name.into(), index: index.into(), value: value.into() }
    }
}

impl Update {
    /// The sample a value update carries (`None` for a definition or a resync).
    pub fn into_sample(self) -> Option<Sample> {
        match self {
            Update::Value { name, index, value, .. } => Some(Sample { name, index, value }),
            _ => None,
        }
    }
}
