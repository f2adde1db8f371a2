//! The subset of `rvos-wire` that sysinfo needs, byte for byte.
//!
//! Fixed-width little-endian integers (`usize`/`isize` are always 8 bytes), `bool` as one byte (0 or 1),
//! `Option<T>` as a `u8` tag (0 None, 1 Some) then `T`, strings and byte slices as a `u16` length then
//! the bytes, enums as a one-byte tag then their fields, structs as their fields in order. There are no
//! varints, no padding and no framing: [`from_bytes`] ignores bytes after a complete value, exactly as
//! `rvos_wire::from_bytes` does.

#[allow(unused_imports)]
use crate::prelude::*;
/// The largest data payload of one rvOS message, and so of one encoded value (`MAX_MSG_SIZE`).
pub const MAX_MSG_SIZE: usize = 1024;

/// An encoding or decoding failure; the variants match `rvos_wire::WireError`, plus one for long strings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The encoded value would not fit in the output buffer (at most [`MAX_MSG_SIZE`] bytes).
    #[error("buffer overflow: value needs more than {max} bytes")]
    BufferOverflow {
        /// The buffer's size.
        max: usize,
    },
    /// The input ended in the middle of a value.
    #[error("buffer underflow: needed {needed} more bytes at offset {offset}")]
    BufferUnderflow {
        /// Where the missing bytes should have started.
        offset: usize,
        /// How many bytes were missing.
        needed: usize,
    },
    /// An enum or `Option` tag that names no variant.
    #[error("invalid tag {0} (0x{0:02x})")]
    InvalidTag(u8),
    /// A string that is not UTF-8.
    #[error("invalid UTF-8 in a string at offset {offset}")]
    InvalidUtf8 {
        /// Where the string's bytes start.
        offset: usize,
    },
    /// A `bool` byte that is neither 0 nor 1.
    #[error("invalid bool byte {0} (0x{0:02x})")]
    InvalidBool(u8),
    /// More than [`crate::MAX_CAPS`] capabilities in one message.
    #[error("capability overflow: at most {max} caps per message")]
    CapOverflow {
        /// The limit.
        max: usize,
    },
    /// A string or byte slice longer than a `u16` length can say (`rvos-wire` would silently truncate it).
    #[error("string of {len} bytes is longer than the wire's u16 length allows")]
    StringTooLong {
        /// The string's length.
        len: usize,
    },
}

/// Writes values into a buffer of at most [`MAX_MSG_SIZE`] bytes (or a chosen limit).
#[derive(Debug)]
pub struct Writer {
    buf: Vec<u8>,
    max: usize,
}

impl Writer {
    /// A writer bounded by [`MAX_MSG_SIZE`], like an rvOS message's data.
    pub fn new() -> Self {
        Self::with_limit(MAX_MSG_SIZE)
    }

    /// A writer bounded by `max` bytes.
    pub fn with_limit(max: usize) -> Self {
        Writer { buf: Vec::new(), max }
    }

    /// Appends raw bytes.
    pub fn put(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        if self.buf.len() + bytes.len() > self.max {
            return Err(WireError::BufferOverflow { max: self.max });
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// Appends a `u16` length and the bytes.
    pub fn put_len_prefixed(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        let len = u16::try_from(bytes.len()).map_err(|_| WireError::StringTooLong { len: bytes.len() })?;
        self.put(&len.to_le_bytes())?;
        self.put(bytes)
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads values from a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// How many bytes have been read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes exactly `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let rest = &self.buf[self.pos..];
        if rest.len() < n {
            return Err(WireError::BufferUnderflow { offset: self.pos, needed: n - rest.len() });
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// Takes a `u16` length and that many bytes.
    pub fn take_len_prefixed(&mut self) -> Result<&'a [u8], WireError> {
        let len = u16::decode(self)?;
        self.take(usize::from(len))
    }

    /// Takes a `u16` length and that many bytes of UTF-8.
    pub fn take_str(&mut self) -> Result<&'a str, WireError> {
        let bytes = self.take_len_prefixed()?;
        core::str::from_utf8(bytes).map_err(|_| WireError::InvalidUtf8 { offset: self.pos - bytes.len() })
    }
}

/// A value with an `rvos-wire` encoding.
pub trait Wire: Sized {
    /// Appends the encoding of `self`.
    fn encode(&self, w: &mut Writer) -> Result<(), WireError>;
    /// Reads one value.
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError>;
}

/// Encodes `value` into at most [`MAX_MSG_SIZE`] bytes.
pub fn to_bytes<T: Wire>(value: &T) -> Result<Vec<u8>, WireError> {
    let mut w = Writer::new();
    value.encode(&mut w)?;
    Ok(w.into_bytes())
}

/// Decodes one value from the start of `bytes`, ignoring anything after it (as `rvos-wire` does).
pub fn from_bytes<T: Wire>(bytes: &[u8]) -> Result<T, WireError> {
    T::decode(&mut Reader::new(bytes))
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
                w.put(&self.to_le_bytes())
            }
            fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
                let bytes = r.take(core::mem::size_of::<$t>())?;
                Ok(<$t>::from_le_bytes(bytes.try_into().expect("take returned the asked length")))
            }
        }
    )*};
}
wire_int!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

impl Wire for usize {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        (*self as u64).encode(w)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        // rvOS is 64-bit; on a 32-bit host a too-large value saturates instead of wrapping.
        Ok(usize::try_from(u64::decode(r)?).unwrap_or(usize::MAX))
    }
}

impl Wire for isize {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        (*self as i64).encode(w)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let v = i64::decode(r)?;
        Ok(isize::try_from(v).unwrap_or(if v < 0 { isize::MIN } else { isize::MAX }))
    }
}

impl Wire for bool {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        w.put(&[u8::from(*self)])
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        match u8::decode(r)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(WireError::InvalidBool(b)),
        }
    }
}

impl<T: Wire> Wire for Option<T> {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        match self {
            None => w.put(&[0]),
            Some(v) => {
                w.put(&[1])?;
                v.encode(w)
            }
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        match u8::decode(r)? {
            0 => Ok(None),
            1 => Ok(Some(T::decode(r)?)),
            t => Err(WireError::InvalidTag(t)),
        }
    }
}

impl Wire for String {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        w.put_len_prefixed(self.as_bytes())
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(r.take_str()?.to_owned())
    }
}

/// A byte slice on the wire (`&[u8]` in rvos-wire): a `u16` length then the bytes.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireBytes(pub Vec<u8>);

impl Wire for WireBytes {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        w.put_len_prefixed(&self.0)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(WireBytes(r.take_len_prefixed()?.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_underflows() {
        assert!(matches!(from_bytes::<u8>(&[]), Err(WireError::BufferUnderflow { offset: 0, needed: 1 })));
        assert!(matches!(
            from_bytes::<u32>(&[1, 2]),
            Err(WireError::BufferUnderflow { offset: 0, needed: 2 })
        ));
    }

    #[test]
    fn bools_and_options_reject_other_bytes() {
        assert_eq!(from_bytes::<bool>(&[2]), Err(WireError::InvalidBool(2)));
        assert_eq!(from_bytes::<Option<u8>>(&[7]), Err(WireError::InvalidTag(7)));
    }

    #[test]
    fn overlong_strings_are_refused_not_truncated() {
        let mut w = Writer::with_limit(usize::MAX);
        let long = "x".repeat(70_000);
        assert_eq!(long.encode(&mut w), Err(WireError::StringTooLong { len: 70_000 }));
        assert!(matches!(to_bytes(&"y".repeat(2000)), Err(WireError::BufferOverflow { max: 1024 })));
    }

    #[test]
    fn bad_utf8_is_typed() {
        assert_eq!(from_bytes::<String>(&[2, 0, 0xff, 0xfe]), Err(WireError::InvalidUtf8 { offset: 2 }));
    }
}
