//! The hot path of `Ps::parse`: rows in the kernel's fixed columns, read by position.
//!
//! Reference: [`PsRow::parse_general`]. [`FixedRow::parse_at`] accepts a subset of what it accepts and must give
//! the same row; the property tests (`fixed_rows_match_the_general_parser`, its one-byte-change and mutated-row
//! twins, `whole_reports_match_the_general_parser`) compare the two. It buys the Ps parse 2.6x: reassemble and
//! parse of a 200-process Ps at 0.39x `lines().count()`'s throughput, against 0.15x for the general parser
//! alone (criterion, `benches/reassemble_parse.rs`).
//!
//! `--cfg telemon_portable` turns it off ([`ENABLED`]): every row goes through the general parser; CI runs
//! the tests once that way.

#[allow(unused_imports)]
use crate::prelude::*;

use super::{find_newline, BlockedOn, CpuShare, ProcState, ProcessName, PsRow};

/// Whether the fixed-column path is on (off in the portable build, which tests the reference alone).
pub(super) const ENABLED: bool = !cfg!(telemon_portable);

/// A row whose columns sit where the kernel's format puts them when nothing widens: pid below 1000, both
/// shares below 100%, memory below 10000K, a blocked-on column of at most 13 bytes. Columns are read by
/// position, without scanning:
///
/// ```text
/// 0 2   5 7       15 17   22 24   29 31  35   38             51 53
/// "    2  Blocked    0.0%   0.1%    16K  recv(ep 4)     serial-con"
/// ```
///
/// It accepts a subset of what [`PsRow::parse_general`] accepts (after [`super::lines`]) and gives the same
/// row; anything else (`None`) goes to the general path.
pub(super) struct FixedRow<'a> {
    pid: u64,
    state: ProcState,
    cpu_1s: CpuShare,
    cpu_1m: CpuShare,
    mem_kib: u64,
    blocked: &'a str,
    /// The reply's text; the name is `text[name..name_end]`.
    text: &'a str,
    name: usize,
    name_end: usize,
}

impl<'a> FixedRow<'a> {
    const READY: u64 = u64::from_le_bytes(*b"Ready   ");
    const RUNNING: u64 = u64::from_le_bytes(*b"Running ");
    const BLOCKED: u64 = u64::from_le_bytes(*b"Blocked ");
    const DEAD: u64 = u64::from_le_bytes(*b"Dead    ");

    /// The row of the line starting at `text[start..]`, and where the next line starts.
    ///
    /// The first 53 bytes are checked by position and can hold neither `\n` nor `\r`, so the line's end is
    /// looked for only in the name.
    #[inline(always)]
    pub(super) fn parse_at(text: &'a str, start: usize) -> Option<(Self, usize)> {
        let bytes = text.as_bytes();
        let b: &[u8; 53] = bytes.get(start..start + 53)?.try_into().ok()?;
        let word = |i: usize| {
            u64::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5], b[i + 6], b[i + 7]])
        };
        // Every separator at once (no short circuit: one branch for all of them).
        let seps = SEPS.iter().fold(true, |ok, &(at, mask, want)| ok & (word(at) & mask == want));
        if !seps {
            return None;
        }
        let state = match word(7) {
            Self::READY => ProcState::Ready,
            Self::RUNNING => ProcState::Running,
            Self::BLOCKED => ProcState::Blocked,
            Self::DEAD => ProcState::Dead,
            _ => return None,
        };
        // b[1] is a space: the pid is a 4-byte field like the memory.
        let pid = right_aligned([b[1], b[2], b[3], b[4]], NUMBER)?;
        let cpu_1s = right_aligned([b' ', b[17], b[18], b[20]], SHARE)?;
        let cpu_1m = right_aligned([b' ', b[24], b[25], b[27]], SHARE)?;
        let mem_kib = right_aligned([b[31], b[32], b[33], b[34]], NUMBER)?;
        let (cpu_1s, cpu_1m) = (CpuShare { tenths: cpu_1s as u32 }, CpuShare { tenths: cpu_1m as u32 });
        // The blocked-on column, 38..51: all spaces, or text (no control bytes, no double space) then spaces.
        let col: &[u8; 13] = b[38..51].try_into().ok()?;
        let blocked = if col[0] == b' ' {
            if *col != [b' '; 13] {
                return None;
            }
            ""
        } else {
            let mut len = 0;
            let mut ok = true;
            for (i, &c) in col.iter().enumerate() {
                // ASCII only: the kernel pads the column to 13 characters, so a multi-byte character moves
                // the name off its byte column (the general parser counts characters).
                ok &= (b' '..0x80).contains(&c);
                len = if c == b' ' { len } else { i + 1 };
            }
            ok &= !col[..len].windows(2).any(|w| w == b"  ");
            if !ok {
                return None;
            }
            text.get(start + 38..start + 38 + len)?
        };
        // The name runs to the end of the line, without trailing `\r`s (leading spaces are the name's own).
        let name = start + 53;
        let newline = find_newline(bytes, name);
        let mut name_end = newline;
        while name_end > name && bytes[name_end - 1] == b'\r' {
            name_end -= 1;
        }
        let row = FixedRow { pid, state, cpu_1s, cpu_1m, mem_kib, blocked, text, name, name_end };
        Some((row, newline + 1))
    }

    #[inline(always)]
    pub(super) fn into_row(self) -> PsRow {
        PsRow {
            pid: self.pid,
            state: self.state,
            cpu_1s: self.cpu_1s,
            cpu_1m: self.cpu_1m,
            mem_kib: self.mem_kib,
            blocked_on: if self.blocked.is_empty() {
                BlockedOn::Nothing
            } else {
                BlockedOn::parse(self.blocked)
            },
            name: ProcessName::new_at(self.text, self.name, self.name_end),
        }
    }
}

/// Where the fixed-column row has fixed bytes: `(at, mask, want)` for the 8 bytes from `at`.
const SEPS: [(usize, u64, u64); 5] = [
    pattern(0, b"  ???  ?"),
    pattern(15, b"  ??.?% "),
    pattern(23, b" ??.?%  "),
    pattern(31, b"????K  ?"),
    pattern(45, b"??????  "),
];

/// The mask and value of the 8 bytes at `at` that `p` fixes (`?` is any byte).
const fn pattern(at: usize, p: &[u8; 8]) -> (usize, u64, u64) {
    let (mut mask, mut want, mut i) = (0, 0, 0);
    while i < 8 {
        if p[i] != b'?' {
            mask |= 0xff << (8 * i);
            want |= (p[i] as u64) << (8 * i);
        }
        i += 1;
    }
    (at, mask, want)
}

/// [`right_aligned`]: a pid or a memory size may have spaces in its first three bytes.
pub(super) const NUMBER: u32 = 0x0080_8080;
/// [`right_aligned`]: a share `{:2}.{}` read as `' '`, two whole digits (the first may be a space), the tenth.
pub(super) const SHARE: u32 = 0x0000_8080;

/// A right-aligned number in 4 bytes: spaces (only where `may_be_space` has `0x80` in the byte), then
/// digits to the end; at least one digit. All 4 bytes at once (SWAR), without a branch per byte.
#[inline(always)]
pub(super) fn right_aligned(f: [u8; 4], may_be_space: u32) -> Option<u64> {
    const LO: u32 = 0x0101_0101;
    const HI: u32 = 0x8080_8080;
    let w = u32::from_le_bytes(f);
    // Digits to 0..=9, then 0x80 in each byte below 10. A byte of 0x8a and up carries into the next one,
    // which can then only look like a non-digit: never a false digit.
    let x = w ^ (0x30 * LO);
    let digits = !(x.wrapping_add(0x76 * LO) | x) & HI;
    // Spaces to 0, then 0x80 in each zero byte, exactly.
    let y = w ^ (0x20 * LO);
    let spaces = !(((y & !HI) + (0x7f * LO)) | y) & HI;
    let ok = (digits | spaces) == HI // only digits and spaces
        && spaces & !may_be_space == 0
        && digits != 0
        && spaces < (digits & digits.wrapping_neg()); // every space before the first digit
                                                      // The bytes' digits (spaces count as 0), most significant first: d0 d1 d2 d3.
    let v = x & !(spaces >> 3);
    // (Wrapping: when `ok` is false the bytes are anything.)
    let v = v.wrapping_mul(10).wrapping_add(v >> 8); // byte 0: d0 d1, byte 2: d2 d3
    ok.then_some(u64::from((v & 0xff) * 100 + ((v >> 16) & 0xff)))
}
