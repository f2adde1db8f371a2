//! The Sampling hot path: a Sampling message decoded through its `[index][size]` layout.
//!
//! Reference: [`super::parse_values`] (through `parse_agent_message`). [`Shape::walk`] and [`Shape::sample`]
//! must accept exactly the messages it accepts, decode them to the same values and fail with the same errors;
//! `layout_path_and_walk_agree_with_the_reference` checks that on valid, bad and cut messages. It buys the
//! inspector 2.2x on samples that repeat the last layout (0.6x `LengthDelimitedCodec`'s throughput against
//! 0.27x) and 1.5x when the layout changes every message (criterion, `benches/sampling.rs`).
//!
//! `--cfg telemon_portable` decodes every Sampling message with the reference instead; CI runs the tests once
//! that way.

use super::{fixed, kind_name, Fail, Incomplete, Limits, Parse};

/// Whether the layout path is on (off in the portable build, which tests the reference alone).
pub(super) const ENABLED: bool = !cfg!(telemon_portable);
use crate::error::DecodeError;
use crate::message::*;

/// A counter type as a small code indexing [`SLOTS`]: the type's ordinal plus one for the known
/// types, so that `code - 1` gives the type back for error messages.
pub(super) struct Kind;

impl Kind {
    pub(super) const NONE: u8 = 0;
    pub(super) const INT: u8 = 1;
    pub(super) const LONG: u8 = 2;
    pub(super) const WORD: u8 = 3;
    pub(super) const DOUBLE: u8 = 4;
    pub(super) const RAW: u8 = 5;

    pub(super) fn of(kind: CounterType) -> u8 {
        match kind {
            CounterType::Int => Kind::INT,
            CounterType::Long => Kind::LONG,
            CounterType::Double => Kind::DOUBLE,
            CounterType::Word => Kind::WORD,
            _ => Kind::RAW,
        }
    }
}

/// `SLOTS[kind][size]` for sizes 0..=8: how to read a value of that size, or `BAD` if the size does
/// not fit the type (raw values of any non-negative size are handled outside the table).
pub(super) const BAD: u8 = 0xff;
pub(super) const SLOTS: [[u8; 9]; 6] = {
    let mut t = [[BAD; 9]; 6];
    t[Kind::INT as usize][4] = Slot::Int as u8;
    t[Kind::LONG as usize][8] = Slot::Long as u8;
    t[Kind::DOUBLE as usize][8] = Slot::Double as u8;
    t[Kind::WORD as usize][4] = Slot::Word32 as u8;
    t[Kind::WORD as usize][8] = Slot::Word64 as u8;
    let mut size = 0;
    while size < 9 {
        t[Kind::RAW as usize][size] = Slot::Raw as u8;
        size += 1;
    }
    t
};

/// The `[index][size]` layout of a Sampling message.
///
/// Walking `[index][size][bytes]` values is a chain of dependent loads (each value's position comes
/// from the previous size). [`Shape::walk`] does that walk once, in a tight loop: each `[index][size]`
/// is read as one u32, its counter's type comes from a byte table indexed by counter index, and
/// type x size is checked with one lookup in [`SLOTS`]; it decodes the values and records the layout
/// here as it goes. Consecutive samples often have the same layout, so the next message is first
/// compared with the last layout ([`Shape::matches`], independent loads at known offsets) and, when
/// it matches, its values are read at those offsets into a `Vec` of the exact size
/// ([`Shape::sample`]). Both paths accept exactly the messages [`parse_values`] accepts, decode them
/// to the same values and fail with the same errors; the layout is forgotten whenever a type is
/// learnt.
#[derive(Debug, Clone, Default)]
pub(super) struct Shape {
    /// Per value: where its bytes start, its `[index][size]` and how to read the bytes.
    entries: Vec<Entry>,
    /// The whole message's length: opcode, timestamp, values, terminator; 0 when there is no layout.
    pub(super) len: usize,
}

/// One value of a [`Shape`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// The `[index][size]` as one little-endian u32.
    head: u32,
    /// The offset of the value's bytes in the message (its `[index][size]` is the 4 bytes before).
    at: u32,
    /// How to read the bytes.
    slot: Slot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Slot {
    // In the order of `CounterValue`'s variants, so that picking the variant is cheap.
    Int,
    Long,
    Word32,
    Word64,
    Double,
    /// The size is the high half of the entry's `[index][size]`.
    Raw,
}

impl Slot {
    pub(super) fn from_code(code: u8) -> Slot {
        match code {
            0 => Slot::Int,
            1 => Slot::Long,
            2 => Slot::Word32,
            3 => Slot::Word64,
            4 => Slot::Double,
            _ => Slot::Raw,
        }
    }
}

impl Shape {
    /// Whether the message at the front of `buf` (a Sampling opcode already seen) has this layout.
    pub(super) fn matches(&self, buf: &[u8]) -> bool {
        if self.len == 0 {
            return false;
        }
        let Some(bytes) = buf.get(..self.len) else { return false };
        for e in &self.entries {
            if array(bytes, e.at as usize - 4).map(u32::from_le_bytes) != Some(e.head) {
                return false;
            }
        }
        array(bytes, self.len - 2) == Some([0xff, 0xff])
    }

    /// Walks the `[index][size][bytes]* [ff ff]` list from offset 9, checking and decoding each value
    /// exactly as [`parse_values`] does (same errors, in the same order), and records the layout. On
    /// failure the layout is forgotten.
    pub(super) fn walk(&mut self, buf: &[u8], limits: &Limits, kinds: &[u8]) -> Parse<Vec<SampleValue>> {
        self.len = 0;
        let mut entries = std::mem::take(&mut self.entries);
        let mut values = Vec::with_capacity(entries.len().max(8));
        entries.clear();
        let walked = walk_values(buf, limits, kinds, &mut entries, &mut values);
        self.entries = entries;
        self.len = walked?;
        Ok(values)
    }
}

/// [`Shape::walk`] into local `Vec`s (kept in registers); returns the message's length.
pub(super) fn walk_values(
    buf: &[u8],
    limits: &Limits,
    kinds: &[u8],
    entries: &mut Vec<Entry>,
    values: &mut Vec<SampleValue>,
) -> Parse<usize> {
    let mut pos = 9;
    loop {
        let head = match array::<4>(buf, pos) {
            Some(head) => u32::from_le_bytes(head),
            // Fewer than 4 bytes: the terminator, or an error or truncation after the index.
            None => {
                let index = i16::from_le_bytes(fixed(buf, pos)?);
                if index == END_OF_VALUES {
                    break;
                }
                check_index(index, entries.len(), limits, kinds)?;
                return Err(Fail::Incomplete);
            }
        };
        let index = head as u16 as i16;
        if index == END_OF_VALUES {
            break;
        }
        let kind = check_index(index, entries.len(), limits, kinds)?;
        let size = (head >> 16) as u16 as i16;
        let code = match SLOTS[kind as usize].get(size as u16 as usize) {
            Some(&code) => code,
            None if kind == Kind::RAW && size >= 0 => Slot::Raw as u8,
            None => BAD,
        };
        if code == BAD {
            let kind = CounterType::from_raw(i32::from(kind) - 1);
            return Err(DecodeError::BadValueSize { index, size, kind: kind_name(kind) }.into());
        }
        let slot = Slot::from_code(code);
        let at = pos + 4;
        entries.push(Entry { head, at: at as u32, slot });
        let data = match slot {
            Slot::Int => ValueData::Typed(CounterValue::Int(i32::from_le_bytes(fixed(buf, at)?))),
            Slot::Long => ValueData::Typed(CounterValue::Long(i64::from_le_bytes(fixed(buf, at)?))),
            Slot::Word32 => ValueData::Typed(CounterValue::Word32(i32::from_le_bytes(fixed(buf, at)?))),
            Slot::Word64 => ValueData::Typed(CounterValue::Word64(i64::from_le_bytes(fixed(buf, at)?))),
            Slot::Double => ValueData::Typed(CounterValue::Double(f64::from_le_bytes(fixed(buf, at)?))),
            Slot::Raw => ValueData::Raw(buf.get(at..at + size as usize).ok_or(Incomplete)?.to_vec()),
        };
        values.push(SampleValue { index, data });
        pos = at + size as u16 as usize;
    }
    Ok(pos + 2)
}

/// The checks on a value's index, before its size is read (`count` values before it); returns its
/// counter's [`Kind`].
pub(super) fn check_index(
    index: i16,
    count: usize,
    limits: &Limits,
    kinds: &[u8],
) -> Result<u8, DecodeError> {
    if index < 0 {
        return Err(DecodeError::InvalidIndex(index));
    }
    if count == limits.max_values {
        return Err(DecodeError::TooManyValues { max: limits.max_values });
    }
    match kinds.get(index as usize) {
        Some(&kind) if kind != Kind::NONE => Ok(kind),
        _ => Err(DecodeError::UnknownIndex(index)),
    }
}

impl Shape {
    /// The sample at the front of `buf`, which has this layout (checked by [`Shape::matches`] or
    /// written by [`Shape::walk`]), so every read is in bounds; the reads still fall back to zeros
    /// rather than fail, which keeps the `Vec` filled at its exact size without per-value checks.
    #[inline(always)]
    pub(super) fn sample(&self, buf: &[u8]) -> Sample {
        let bytes = &buf[..self.len.min(buf.len())];
        let values = self
            .entries
            .iter()
            .map(|&Entry { head, at, slot }| {
                let at = at as usize;
                let data = match slot {
                    Slot::Int => ValueData::Typed(CounterValue::Int(i32::from_le_bytes(le(bytes, at)))),
                    Slot::Long => ValueData::Typed(CounterValue::Long(i64::from_le_bytes(le(bytes, at)))),
                    Slot::Double => ValueData::Typed(CounterValue::Double(f64::from_le_bytes(le(bytes, at)))),
                    Slot::Word32 => ValueData::Typed(CounterValue::Word32(i32::from_le_bytes(le(bytes, at)))),
                    Slot::Word64 => ValueData::Typed(CounterValue::Word64(i64::from_le_bytes(le(bytes, at)))),
                    Slot::Raw => ValueData::Raw(
                        bytes.get(at..at + (head >> 16) as usize).map_or_else(Vec::new, <[u8]>::to_vec),
                    ),
                };
                SampleValue { index: head as u16 as i16, data }
            })
            .collect();
        Sample { timestamp: i64::from_le_bytes(le(bytes, 1)), values }
    }
}

/// `N` bytes at `at`, zeros if out of bounds (only for offsets already checked).
pub(super) fn le<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    array(bytes, at).unwrap_or([0; N])
}

pub(super) fn array<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at + N)?.try_into().ok()
}
