//! The bytes of the format: prefix ranges, index ops, limits, the byte order, and the number forms.
//!
//! Every other module takes its facts from here (one source of truth per fact).

#[allow(unused_imports)]
use crate::prelude::*;
use bytes::{BufMut, BytesMut};

/// The order of multi-byte payloads (A4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// Most significant byte first.
    BigEndian,
    /// Least significant byte first.
    LittleEndian,
}

/// The byte order of every multi-byte payload (A4): **big-endian**. This is the one place it is set;
/// the decoder, the encoder and the tests all read it from here.
pub const BYTE_ORDER: ByteOrder = ByteOrder::BigEndian;

impl ByteOrder {
    /// Reads an unsigned number from 1..=8 payload bytes.
    pub fn read(self, payload: &[u8]) -> u64 {
        debug_assert!((1..=8).contains(&payload.len()));
        match self {
            ByteOrder::BigEndian => payload.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
            ByteOrder::LittleEndian => payload.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
        }
    }

    /// Writes the low `len` (1..=8) bytes of `value`.
    pub fn write(self, value: u64, len: usize, dst: &mut BytesMut) {
        debug_assert!((1..=8).contains(&len));
        let be = value.to_be_bytes();
        match self {
            ByteOrder::BigEndian => dst.put_slice(&be[8 - len..]),
            ByteOrder::LittleEndian => dst.put_slice(&value.to_le_bytes()[..len]),
        }
    }
}

/// The largest direct value: `00..=DF` stand for 0..=223 (A1; the spec's "BF" is a typo).
pub const DIRECT_MAX: u8 = 0xDF;
/// `E0..=E7`: a positive delta (or a string append), `x+1` payload bytes holding `delta - 0xE0` (A2).
pub const POSITIVE_FIRST: u8 = 0xE0;
/// The last positive-delta prefix.
pub const POSITIVE_LAST: u8 = 0xE7;
/// What the `E0..=E7` payload is offset by: the first value that does not fit a direct byte (A2).
pub const POSITIVE_OFFSET: u64 = 0xE0;
/// `E8..=EF`: a negative delta, `x-7` payload bytes of magnitude, no offset (A3).
pub const NEGATIVE_FIRST: u8 = 0xE8;
/// The last negative-delta prefix.
pub const NEGATIVE_LAST: u8 = 0xEF;
/// `F0..=F7`: an absolute value (or a string restart), `x+1` payload bytes, no offset (A5).
pub const ABSOLUTE_FIRST: u8 = 0xF0;
/// The last absolute prefix.
pub const ABSOLUTE_LAST: u8 = 0xF7;
/// `F8`: a 12-byte number, "future use": rejected (A5).
pub const RESERVED_12_BYTE: u8 = 0xF8;
/// `F9`: a 16-byte number, "future use": rejected (A5).
pub const RESERVED_16_BYTE: u8 = 0xF9;
/// `FA n`: push an additional index level (A11).
pub const INDEX_ADD: u8 = 0xFA;
/// `FB n`: set the innermost index level (A11).
pub const INDEX_SAME: u8 = 0xFB;
/// `FC n`: set the level above the innermost (A11).
pub const INDEX_PREVIOUS: u8 = 0xFC;
/// `FD`: reset to no indexes (A11); in value position it starts an indexed-token definition (A13).
pub const INDEX_RESET: u8 = 0xFD;
/// `FE`: the stuffing byte after 16 FFs, and the end of a resync sequence (A10).
pub const STUFFING: u8 = 0xFE;
/// `FF`: never a prefix; runs of it are counted over the raw stream (A10).
pub const FF: u8 = 0xFF;
/// After this many consecutive FFs inside string data an FE is stuffed (A10).
pub const FF_STUFF_AFTER: u32 = 16;
/// This many consecutive FFs (then any further FFs, then FE) resynchronise the stream (A10).
pub const RESYNC_FF_COUNT: u32 = 17;
/// The resync sequence the encoder emits: 17×FF then FE (A10).
pub const RESYNC: [u8; 18] = {
    let mut seq = [FF; 18];
    seq[17] = STUFFING;
    seq
};
/// Token 0 is preset at the start and after a resync; its string values are definitions (A7, A8).
pub const DEFINITION_TOKEN: u64 = 0;
/// A definition string is at least this long: the type byte plus a name of at least 3 bytes (A8).
pub const DEFINITION_MIN_LEN: usize = 4;
/// The smallest name a definition can carry.
pub const NAME_MIN_LEN: usize = DEFINITION_MIN_LEN - 1;
/// The type byte of an unsigned-number token.
pub const TYPE_UNSIGNED: u8 = b'u';
/// The type byte of a string token.
pub const TYPE_STRING: u8 = b's';

/// Default maximum length of one string value (and of a definition string), in bytes.
pub const DEFAULT_MAX_STRING_LEN: usize = 64 * 1024;
/// Default maximum number of tokens defined at once (between resyncs).
pub const DEFAULT_MAX_TOKENS: usize = 65_536;
/// Default maximum depth of the index vector.
pub const DEFAULT_MAX_INDEX_DEPTH: usize = 16;

/// Whether `first`, the first bytes of a stream, can start an smon stream: a resync (17 FF, then FE), a
/// definition of token 1 (token field `00` or `F0 00`, then a definition string of at least
/// [`DEFINITION_MIN_LEN`] bytes whose type byte is `u` or `s`, or `FD FA` for an indexed token's), or an index
/// op that needs no index set (`FA`, `FD`). `None` while the bytes seen fit one but are too few to tell. It looks at 18 bytes at most.
///
/// ```
/// assert_eq!(smon_codec::sniff(&smon_codec::RESYNC), Some(true));
/// assert_eq!(smon_codec::sniff(b"\x00\x0csmon.version"), Some(true));
/// assert_eq!(smon_codec::sniff(b"\0\0\0\x1bHMONSupportedProtocols=2"), Some(false));
/// ```
pub fn sniff(first: &[u8]) -> Option<bool> {
    let definition = |rest: &[u8]| match rest {
        [] => None,
        [len @ 0..=DIRECT_MAX, rest @ ..] if usize::from(*len) >= DEFINITION_MIN_LEN => {
            rest.first().map(|&kind| kind == TYPE_UNSIGNED || kind == TYPE_STRING)
        }
        // A definition string of 224 bytes or more.
        [POSITIVE_FIRST..=POSITIVE_LAST, ..] => Some(true),
        // An indexed token's definition (A13): `FD`, then its first index `FA n`.
        [INDEX_RESET] => None,
        [INDEX_RESET, next, ..] => Some(*next == INDEX_ADD),
        _ => Some(false),
    };
    match first {
        [] => None,
        [FF, ..] => match first.iter().take(RESYNC_FF_COUNT as usize).position(|&b| b != FF) {
            Some(_) => Some(false),
            None if first.len() >= RESYNC_FF_COUNT as usize => Some(true),
            None => None,
        },
        [0x00, rest @ ..] => definition(rest),
        [ABSOLUTE_FIRST] => None,
        [ABSOLUTE_FIRST, 0x00, rest @ ..] => definition(rest),
        [INDEX_ADD | INDEX_RESET, ..] => Some(true),
        _ => Some(false),
    }
}

/// The bounds a decoder or encoder enforces, checked before anything is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest string value or definition string, in bytes (FE stuffing not counted).
    pub max_string_len: usize,
    /// Most tokens defined at once (token 0 not counted).
    pub max_tokens: usize,
    /// Deepest index vector.
    pub max_index_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_string_len: DEFAULT_MAX_STRING_LEN,
            max_tokens: DEFAULT_MAX_TOKENS,
            max_index_depth: DEFAULT_MAX_INDEX_DEPTH,
        }
    }
}

/// A decoded number field, before it is applied to a previous value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Number {
    /// `00..=DF` or `E0..=E7`: a positive delta (string: append). Up to 2^64 + 223, hence `u128` (A2).
    Positive(u128),
    /// `E8..=EF`: a negative delta (A3).
    Negative(u64),
    /// `F0..=F7`: an absolute value (string: restart) (A5).
    Absolute(u64),
}

/// The payload length of a prefix byte in `E0..=F7`, or `None` for a direct byte or a non-number byte.
pub(crate) fn payload_len(prefix: u8) -> Option<usize> {
    match prefix {
        POSITIVE_FIRST..=POSITIVE_LAST => Some(usize::from(prefix - POSITIVE_FIRST) + 1),
        NEGATIVE_FIRST..=NEGATIVE_LAST => Some(usize::from(prefix - NEGATIVE_FIRST) + 1),
        ABSOLUTE_FIRST..=ABSOLUTE_LAST => Some(usize::from(prefix - ABSOLUTE_FIRST) + 1),
        _ => None,
    }
}

/// The number a prefix and its payload stand for.
pub(crate) fn number(prefix: u8, payload: u64) -> Number {
    match prefix {
        0..=DIRECT_MAX => Number::Positive(u128::from(prefix)),
        POSITIVE_FIRST..=POSITIVE_LAST => Number::Positive(u128::from(payload) + u128::from(POSITIVE_OFFSET)),
        NEGATIVE_FIRST..=NEGATIVE_LAST => Number::Negative(payload),
        _ => Number::Absolute(payload),
    }
}

/// One way to write a number on the wire (what the encoder chooses between, A6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// One byte, `00..=DF`.
    Direct(u8),
    /// `E0..=E7` + `len` bytes of `delta - 0xE0`.
    Positive { payload: u64, len: u8 },
    /// `F0..=F7` + `len` bytes.
    Absolute { value: u64, len: u8 },
    /// `E8..=EF` + `len` bytes of magnitude.
    Negative { magnitude: u64, len: u8 },
}

/// The fewest bytes (at least 1) that hold `v`.
pub(crate) fn byte_len(v: u64) -> u8 {
    let bits = 64 - v.leading_zeros();
    (bits.div_ceil(8)).max(1) as u8
}

impl Form {
    /// Bytes on the wire, prefix included.
    pub(crate) fn size(self) -> usize {
        match self {
            Form::Direct(_) => 1,
            Form::Positive { len, .. } | Form::Absolute { len, .. } | Form::Negative { len, .. } => {
                1 + usize::from(len)
            }
        }
    }

    /// The shortest positive-delta (append) form of `delta`: direct or `E0..=E7`.
    pub(crate) fn positive(delta: u64) -> Form {
        if delta <= u64::from(DIRECT_MAX) {
            Form::Direct(delta as u8)
        } else {
            let payload = delta - POSITIVE_OFFSET;
            Form::Positive { payload, len: byte_len(payload) }
        }
    }

    /// The shortest absolute (restart) form of `value`.
    pub(crate) fn absolute(value: u64) -> Form {
        Form::Absolute { value, len: byte_len(value) }
    }

    /// The form the encoder writes to go from `prev` to `new` (A6): the shortest of positive delta,
    /// absolute and negative delta, ties broken direct < `E0..E7` < `F0..F7` < `E8..EF`. Never wraps.
    pub(crate) fn unsigned(prev: u64, new: u64) -> Form {
        let absolute = Form::absolute(new);
        if new >= prev {
            let positive = Form::positive(new - prev);
            if positive.size() <= absolute.size() {
                positive
            } else {
                absolute
            }
        } else {
            let magnitude = prev - new;
            let negative = Form::Negative { magnitude, len: byte_len(magnitude) };
            if absolute.size() <= negative.size() {
                absolute
            } else {
                negative
            }
        }
    }

    /// Appends the form's bytes to `dst`.
    pub(crate) fn put(self, dst: &mut BytesMut) {
        match self {
            Form::Direct(b) => dst.put_u8(b),
            Form::Positive { payload, len } => {
                dst.put_u8(POSITIVE_FIRST + len - 1);
                BYTE_ORDER.write(payload, usize::from(len), dst);
            }
            Form::Absolute { value, len } => {
                dst.put_u8(ABSOLUTE_FIRST + len - 1);
                BYTE_ORDER.write(value, usize::from(len), dst);
            }
            Form::Negative { magnitude, len } => {
                dst.put_u8(NEGATIVE_FIRST + len - 1);
                BYTE_ORDER.write(magnitude, usize::from(len), dst);
            }
        }
    }

    /// How many FF bytes the form ends with (for the raw-stream FF run, A10).
    pub(crate) fn trailing_ff(self) -> u32 {
        let (value, len) = match self {
            Form::Direct(_) => return 0,
            Form::Positive { payload, len } => (payload, len),
            Form::Absolute { value, len } => (value, len),
            Form::Negative { magnitude, len } => (magnitude, len),
        };
        let mut tmp = BytesMut::with_capacity(8);
        BYTE_ORDER.write(value, usize::from(len), &mut tmp);
        tmp.iter().rev().take_while(|&&b| b == FF).count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(form: Form) -> Vec<u8> {
        let mut b = BytesMut::new();
        form.put(&mut b);
        b.to_vec()
    }

    #[test]
    fn the_first_bytes_of_other_protocols_are_not_smon() {
        let ours: [&[u8]; 6] = [
            &RESYNC,
            b"\x00\x0csmon.version",
            b"\xf0\x00\x0ausmon.time",
            &[FF; 20],
            b"\xfa\x01",
            b"\x00\xfd\xfa\x01",
        ];
        for first in ours {
            assert_eq!(sniff(first), Some(true), "{:?}", first.escape_ascii().to_string());
        }
        for unsure in [&b""[..], &[FF; 16], b"\x00", b"\x00\x0c", b"\xf0", b"\xf0\x00", b"\x00\xfd"] {
            assert_eq!(sniff(unsure), None, "{:?}", unsure.escape_ascii().to_string());
        }
        let others: [&[u8]; 7] = [
            b"\0\0\0\x1bHMONSupportedProtocols=2", // an HMON frame: a definition of 0 bytes
            b"HELLO 2\r\n",                        // sys161: token 72, never defined
            b"\x01\0\0\0\0",                       // an rvOS host-transport frame
            b"\0\x01\0\x02\0",                     // a Mono agent's Hello: a definition of 1 byte
            b"HTTP/1.1 400 Bad Request\r\n",
            b"\x00\x05xname", // a definition of an unknown type
            b"\xff\xff\xfe",  // a run too short to resync
        ];
        for other in others {
            assert_eq!(sniff(other), Some(false), "{:?}", other.escape_ascii().to_string());
        }
    }

    #[test]
    fn byte_order_round_trips_and_is_big_endian() {
        let mut b = BytesMut::new();
        BYTE_ORDER.write(0x01_02_03, 3, &mut b);
        assert_eq!(&b[..], [1, 2, 3]);
        assert_eq!(BYTE_ORDER.read(&b), 0x01_02_03);
        let mut le = BytesMut::new();
        ByteOrder::LittleEndian.write(0x01_02_03, 3, &mut le);
        assert_eq!(&le[..], [3, 2, 1]);
        assert_eq!(ByteOrder::LittleEndian.read(&le), 0x01_02_03);
    }

    #[test]
    fn tie_order_prefers_positive_then_absolute_then_negative() {
        assert_eq!(bytes(Form::unsigned(0, 224)), [0xE0, 0x00]);
        assert_eq!(bytes(Form::unsigned(1, 0)), [0xF0, 0x00]);
        assert_eq!(
            bytes(Form::unsigned(0, u64::MAX)),
            [0xE7, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F]
        );
        assert_eq!(bytes(Form::unsigned(1000, 999)), [0xE8, 0x01]);
        assert_eq!(Form::Positive { payload: 0x1FF, len: 2 }.trailing_ff(), 1);
    }
}
