//! Sans-IO line codecs for both directions.
//!
//! * [`ClientCodec`]: what a client uses. Decodes server lines into [`ServerMessage`]s and encodes
//!   [`ClientMessage`]s.
//! * [`ServerCodec`]: what a server uses. Decodes client commands with sys161's exact rules (128-byte
//!   input buffer, 8 words, `strtoul` base 0, interval range) and encodes [`ServerMessage`]s.
//!
//! Both recover from a bad line at the next LF, so their [`Decoder`] impls yield per-line errors as
//! items (`Item = Result<Message, Error>`) rather than as the stream's error, which would end a
//! `FramedRead`. Only I/O errors end the stream.

use std::fmt::Write as _;

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::error::{CommandError, DecodeError, EncodeError};
use crate::message::{
    ClientMessage, ServerMessage, DEFAULT_MAX_FIELDS, DEFAULT_MAX_LINE, MAX_COMMAND_WORDS, MAX_INTERVAL_NS,
    MIN_INTERVAL_NS, SERVER_INPUT_BUFSIZE, SPEC_MIN_INTERVAL_NS,
};

/// Bytes that separate words on a server line (LF ends the line; CR counts as a blank anywhere).
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r')
}

/// The words of a line: runs of non-blank bytes.
fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| is_blank(b)).filter(|w| !w.is_empty())
}

/// Parses a plain unsigned decimal (digits only; leading zeros allowed) that fits in `max`.
fn parse_decimal(word: &[u8], max: u64) -> Option<u64> {
    if word.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &b in word {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    (value <= max).then_some(value)
}

fn lossy(word: &[u8]) -> String {
    String::from_utf8_lossy(word).into_owned()
}

/// Joins the remaining words with single spaces, or `None` when there are none.
fn text(words: impl Iterator<Item = impl AsRef<[u8]>>) -> Option<String> {
    let mut out = Vec::new();
    for w in words {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(w.as_ref());
    }
    (!out.is_empty()).then(|| lossy(&out))
}

// DATA first: it is nearly every line.
const KEYWORDS: [&str; 7] = ["DATA", "HELLO", "HEAD", "WIDTH", "OK", "BAD", "ERROR"];

fn known_keyword(word: &[u8]) -> Option<&'static str> {
    KEYWORDS.into_iter().find(|k| k.len() == word.len() && k.as_bytes().eq_ignore_ascii_case(word))
}

/// Parses the words in `rest` as unsigned decimals of at most `max`, word by word (the reference for
/// [`numbers`], and its path for lines with an error or too long for the fast path).
fn numbers_plain(
    rest: &[u8],
    keyword: &'static str,
    max_fields: usize,
    max: u64,
) -> Result<Vec<u64>, DecodeError> {
    let bits = if max == u64::MAX { 64 } else { 32 };
    let mut values = Vec::new();
    for (index, word) in words(rest).enumerate() {
        if index >= max_fields {
            return Err(DecodeError::TooManyFields { keyword, max: max_fields });
        }
        let value = parse_decimal(word, max).ok_or_else(|| DecodeError::InvalidNumber {
            keyword,
            index,
            word: lossy(word),
            bits,
        })?;
        values.push(value);
    }
    Ok(values)
}

/// Parses the words in `rest` as unsigned decimals of at most `max`: [`numbers_fast`], or where it
/// gives up, [`numbers_plain`].
fn numbers(rest: &[u8], keyword: &'static str, max_fields: usize, max: u64) -> Result<Vec<u64>, DecodeError> {
    match numbers_fast(rest, false, max_fields, max) {
        // (An LF in `rest` would end the line early: that is for `numbers_plain` too.)
        Some((len, values)) if len == rest.len() => Ok(values.into_vec()),
        _ => numbers_plain(rest, keyword, max_fields, max),
    }
}

/// Parses the words of the line at the start of `bytes` (up to the first LF, or all of `bytes`) as
/// unsigned decimals of at most `max`, and returns them with the line's length (this is the hot
/// path: nearly every line is `DATA`). Gives up (`None`) on a line with an error, more than
/// `max_fields` words, or more than [`FAST_BLOCKS`] blocks, and if `lf_needed`, on one without an
/// LF.
///
/// Walking the bytes word after word makes one long dependency chain (each word's length decides
/// where the next one starts), so instead: first the bounds of every word at once, as bitmasks
/// ([`word_edges`]), then each word parsed from its own bounds, independently of the others, so that
/// the CPU overlaps them.
///
/// A boxed slice rather than a `Vec`: it comes back in two registers, where a `Vec` (a word more)
/// comes back through memory, and copying it on from there stalls (a store-forwarding failure).
/// Its capacity is exact either way, so converting costs nothing.
fn numbers_fast(bytes: &[u8], lf_needed: bool, max_fields: usize, max: u64) -> Option<(usize, Box<[u64]>)> {
    let mut edges = [0; FAST_BLOCKS + 1];
    let (rest, words) = match word_edges(bytes, &mut edges)? {
        (len, words, false) if words <= max_fields && (len < bytes.len() || !lf_needed) => {
            (&bytes[..len], words)
        }
        _ => return None,
    };
    let mut walk = WordWalk::new(&edges);
    let mut values = Vec::with_capacity(words);
    for _ in 0..words {
        let value = parse_digits(rest, walk.next_word(), max)?;
        // Never true (the capacity is the word count), but with it `push` has no growing to do:
        // that keeps the vector in registers.
        if values.len() == values.capacity() {
            return None;
        }
        values.push(value);
    }
    Some((rest.len(), values.into_boxed_slice()))
}

/// Lines of up to this many 64-byte blocks after the keyword take [`numbers_fast`]: any
/// sys161 line does (11 fields of at most 20 digits), and most lines anyone would send.
const FAST_BLOCKS: usize = 8;

/// Where the words of a line start and end, as bitmasks: bit `i` of `edges[k]` is byte `64 * k + i`,
/// set where a word starts or where the blanks after a word start, or the line ends after a word (so
/// starts and ends alternate, and every start has its end). One block more than the line's bytes
/// fill, for the end of a line that ends a block.
type Edges = [u64; FAST_BLOCKS + 1];

/// Fills `edges` for the line at the start of `bytes`, which ends at the first LF or with `bytes`,
/// and returns its length, how many words it has and whether any of them has a byte that is not an
/// ASCII digit; `None` if the line is longer than [`FAST_BLOCKS`] blocks.
///
/// Finding the LF here, in the same pass, saves [`ClientCodec::decode`] a search of its own.
///
/// (`edges` is filled in place rather than returned: moving it around costs as much as filling it.)
fn word_edges(bytes: &[u8], edges: &mut Edges) -> Option<(usize, usize, bool)> {
    let mut len = bytes.len();
    let mut words = 0;
    let mut non_digits = 0;
    // Whether the byte before the block is in a word (the one before the line is not).
    let mut carry = 0;
    for (k, edges) in edges.iter_mut().enumerate() {
        let mut in_word = 0;
        let mut j = 0;
        while j < 4 && 64 * k + 16 * j < len {
            let (w, n, lf) = chunk_masks(bytes, 64 * k + 16 * j);
            // The bytes before the first LF (all when there is none): the rest are not the line's.
            let keep = (lf & lf.wrapping_neg()).wrapping_sub(1);
            if lf != 0 {
                len = 64 * k + 16 * j + lf.trailing_zeros() as usize;
            }
            in_word |= u64::from(w & keep) << (16 * j);
            non_digits |= n & keep;
            j += 1;
        }
        // Past the end nothing is in a word, so a word that runs to the end has its edge there
        // (in the next block, when the line ends this one).
        let before = (in_word << 1) | carry;
        *edges = in_word ^ before;
        words += byte_popcounts(in_word & !before);
        carry = in_word >> 63;
        if len < 64 * (k + 1) {
            return (len <= 64 * FAST_BLOCKS).then(|| (len, sum_bytes(words), non_digits != 0));
        }
    }
    None
}

/// The number of set bits of each byte of `x`, in that byte: the counts of up to 31 words add up
/// without carries, and [`sum_bytes`] of the sum is their total. (Without the `popcnt`
/// instruction, which x86_64 need not have, `count_ones` costs this and more for every block.)
fn byte_popcounts(x: u64) -> u64 {
    let pairs = x - ((x >> 1) & 0x5555_5555_5555_5555);
    let nibbles = (pairs & 0x3333_3333_3333_3333) + ((pairs >> 2) & 0x3333_3333_3333_3333);
    (nibbles + (nibbles >> 4)) & 0x0F0F_0F0F_0F0F_0F0F
}

/// The sum of the bytes of `x`.
fn sum_bytes(x: u64) -> usize {
    // In 16-bit lanes first: the sum can pass 255 (a 512-byte line has up to 256 words).
    let pairs = (x & 0x00FF_00FF_00FF_00FF) + ((x >> 8) & 0x00FF_00FF_00FF_00FF);
    (pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48) as usize
}

/// Walks the [`word_edges`] of a line, word by word.
struct WordWalk<'a> {
    edges: &'a Edges,
    block: usize,
    /// The edges of `edges[block]` not yet taken.
    bits: u64,
}

impl<'a> WordWalk<'a> {
    fn new(edges: &'a Edges) -> Self {
        Self { edges, block: 0, bits: edges[0] }
    }

    /// The byte range of the next word. Call it at most as many times as there are words.
    #[inline(always)]
    fn next_word(&mut self) -> std::ops::Range<usize> {
        let start = self.next_edge();
        start..self.next_edge()
    }

    #[inline(always)]
    fn next_edge(&mut self) -> usize {
        while self.bits == 0 {
            self.block += 1;
            self.bits = self.edges[self.block];
        }
        let at = 64 * self.block + self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        at
    }
}

/// For the 16 bytes of `line` from `at` (which is less than its length): bit `i` of the first mask
/// is set when byte `at + i` is in a word (not a blank), of the second when it is in a word but not
/// an ASCII digit, of the third when it is an LF. Bytes past the end are none of these.
fn chunk_masks(line: &[u8], at: usize) -> (u16, u16, u16) {
    if let Some(chunk) = line.get(at..at + 16) {
        classify(chunk.try_into().expect("16 bytes"))
    } else if line.len() >= 16 {
        // Near the end: the line's last 16 bytes, shifted so that bit 0 is byte `at`.
        let (w, n, lf) = classify(line[line.len() - 16..].try_into().expect("16 bytes"));
        let shift = at + 16 - line.len();
        (w >> shift, n >> shift, lf >> shift)
    } else {
        let mut chunk = [b' '; 16];
        chunk[..line.len() - at].copy_from_slice(&line[at..]);
        classify(chunk)
    }
}

/// [`chunk_masks`] of 16 bytes. SSE2 (always there on x86_64) compares the 16 bytes at once; a byte
/// at a time ([`classify_portable`]) doubles the time to decode a sys161 line.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn classify(chunk: [u8; 16]) -> (u16, u16, u16) {
    // SAFETY: `classify_sse2` needs nothing but SSE2, which the `cfg` above guarantees.
    unsafe { classify_sse2(chunk) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn classify_sse2(chunk: [u8; 16]) -> (u16, u16, u16) {
    use std::arch::x86_64::{
        _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_set_epi64x,
    };
    let [lo, hi] =
        [&chunk[..8], &chunk[8..]].map(|half| i64::from_le_bytes(half.try_into().expect("8 bytes")));
    let v = _mm_set_epi64x(hi, lo);
    let is = |b: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8));
    let blank = _mm_or_si128(_mm_or_si128(is(b' '), is(b'\t')), is(b'\r'));
    // Signed compares: bytes from 0x80 up are negative, so below b'0' too.
    let digit = _mm_and_si128(
        _mm_cmpgt_epi8(v, _mm_set1_epi8(b'0' as i8 - 1)),
        _mm_cmplt_epi8(v, _mm_set1_epi8(b'9' as i8 + 1)),
    );
    let blank = _mm_movemask_epi8(blank) as u16;
    (!blank, !(blank | _mm_movemask_epi8(digit) as u16), _mm_movemask_epi8(is(b'\n')) as u16)
}

/// [`classify`] without SSE2: a byte at a time.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn classify_portable(chunk: [u8; 16]) -> (u16, u16, u16) {
    chunk.iter().enumerate().fold((0, 0, 0), |(w, n, lf), (i, &b)| {
        let in_word = !is_blank(b);
        (
            w | u16::from(in_word) << i,
            n | u16::from(in_word && !b.is_ascii_digit()) << i,
            lf | u16::from(b == b'\n') << i,
        )
    })
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
use classify_portable as classify;

const ONES: u64 = 0x0101_0101_0101_0101;
const POW10: [u64; 9] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000];

/// `KEEP[n]`: the top `n` bytes of a u64.
const KEEP: [u64; 9] = {
    let mut keep = [0; 9];
    let mut n = 1;
    while n <= 8 {
        keep[n] = u64::MAX << (8 * (8 - n));
        n += 1;
    }
    keep
};

/// The 8 bytes of `line` before `end` (at most its length), little-endian, so that byte `end - 1`
/// is the top one; before the line's start, zeros.
///
/// Words are loaded so that they end at the top: then the digits are where [`swar_digits`] wants
/// them, without a shift by their length.
#[inline(always)]
fn load8_before(line: &[u8], end: usize) -> u64 {
    if let Some(bytes) = line[..end].last_chunk::<8>() {
        u64::from_le_bytes(*bytes)
    } else if let Some(first) = line.first_chunk::<8>() {
        // Near the start (`end` < 8): the first 8 bytes, shifted up.
        (u64::from_le_bytes(*first) << 8) << (8 * (7 - end))
    } else {
        let mut bytes = [0; 8];
        bytes[8 - end..].copy_from_slice(&line[..end]);
        u64::from_le_bytes(bytes)
    }
}

/// The 8 bytes of `line` from `start` (which must leave at least 8), little-endian.
#[inline(always)]
fn load8_from(line: &[u8], start: usize) -> u64 {
    u64::from_le_bytes(line[start..start + 8].try_into().expect("8 bytes"))
}

/// The top `len` (1 to 8) bytes of `bytes` (as from [`load8_before`]), which must be ASCII digits,
/// as digit values (0 to 9), with zeros before them.
#[inline(always)]
fn digit_values(bytes: u64, len: usize) -> u64 {
    (bytes ^ (0x30 * ONES)) & KEEP[len]
}

/// The value of the top `len` (1 to 8) bytes of `bytes` (as from [`load8_before`]), which must be
/// ASCII digits.
#[inline(always)]
fn swar_digits(bytes: u64, len: usize) -> u64 {
    eight_digits(digit_values(bytes, len))
}

/// The value of 8 digit values (0 to 9, most significant in the lowest byte), without a branch per
/// digit (SWAR: the 8 bytes at once, in two multiplications).
#[inline(always)]
fn eight_digits(digits: u64) -> u64 {
    // Even bytes: the pairs p0..p3 = 10 * d(2i) + d(2i+1) (at most 99: no carry between bytes).
    let pairs = digits.wrapping_mul(10).wrapping_add(digits >> 8);
    // The value is p0 * 10^6 + p1 * 10^4 + p2 * 100 + p3. Both products leave their part of it in
    // the high half: p0 * 10^6 + p2 * 100 from p0 (bits 0..8) and p2 (bits 32..40), p1 * 10^4 + p3
    // likewise. What the low halves get stays below 2^32, so never carries into it.
    const EVEN: u64 = 0x0000_00FF_0000_00FF;
    let high = (pairs & EVEN).wrapping_mul(100 + (1_000_000 << 32));
    let low = ((pairs >> 16) & EVEN).wrapping_mul(1 + (10_000 << 32));
    high.wrapping_add(low) >> 32
}

/// The value of 16 digit values: [`eight_digits`] of `first`, then of `last`.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn sixteen_digits(first: u64, last: u64) -> u64 {
    eight_digits(first) * 100_000_000 + eight_digits(last)
}

/// The value of 16 digit values: [`eight_digits`] of `first`, then of `last`. With SSE2 (always
/// there on x86_64) both halves at once, in about half the instructions.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn sixteen_digits(first: u64, last: u64) -> u64 {
    // SAFETY: `sixteen_digits_sse2` needs nothing but SSE2, which the `cfg` above guarantees.
    unsafe { sixteen_digits_sse2(first, last) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn sixteen_digits_sse2(first: u64, last: u64) -> u64 {
    use std::arch::x86_64::{
        _mm_add_epi16, _mm_and_si128, _mm_cvtsi128_si64, _mm_madd_epi16, _mm_mullo_epi16, _mm_packs_epi32,
        _mm_set1_epi16, _mm_set1_epi32, _mm_set_epi64x, _mm_srli_epi16,
    };
    let digits = _mm_set_epi64x(last as i64, first as i64);
    // 16-bit lanes: 10 * the low byte (the more significant digit) + the high byte.
    let pairs = _mm_add_epi16(
        _mm_mullo_epi16(_mm_and_si128(digits, _mm_set1_epi16(0xFF)), _mm_set1_epi16(10)),
        _mm_srli_epi16(digits, 8),
    );
    // 32-bit lanes: 100 * the low pair + the high one (fours: at most 9999).
    let fours = _mm_madd_epi16(pairs, _mm_set1_epi32(100 | (1 << 16)));
    // Back to 16-bit lanes (they fit), then the same again: 32-bit lanes of 8 digits, `first`'s value
    // in the lowest, `last`'s in the next.
    let eights = _mm_madd_epi16(_mm_packs_epi32(fours, fours), _mm_set1_epi32(10_000 | (1 << 16)));
    let both = _mm_cvtsi128_si64(eights) as u64;
    (both & 0xFFFF_FFFF) * 100_000_000 + (both >> 32)
}

/// The value of `line[word]`, a non-empty run of ASCII digits, if it is at most `max` (which is at
/// least `u32::MAX`).
#[inline(always)]
fn parse_digits(line: &[u8], word: std::ops::Range<usize>, max: u64) -> Option<u64> {
    debug_assert!(max >= u64::from(u32::MAX));
    let len = word.end - word.start;
    let value = match len {
        // At most 8 digits: below `u32::MAX`, so no need to compare.
        1..=8 => return Some(swar_digits(load8_before(line, word.end), len)),
        // At most 16 digits: no overflow. The 16 bytes that end the word, when the line has them...
        9..=16 if word.end >= 16 => {
            let [first, last] = split16(line[..word.end].last_chunk().expect("16 bytes"));
            sixteen_digits(digit_values(first, len - 8), digit_values(last, 8))
        }
        // ...else the first 8 digits, then the rest (so that neither load runs past the word).
        9..=16 => {
            let high = swar_digits(load8_from(line, word.start), 8);
            high * POW10[len - 8] + swar_digits(load8_before(line, word.end), len - 8)
        }
        _ => return parse_decimal(&line[word], max),
    };
    (value <= max).then_some(value)
}

/// 16 bytes as two little-endian u64s.
#[inline(always)]
fn split16(bytes: &[u8; 16]) -> [u64; 2] {
    let (first, last) = bytes.split_at(8);
    [first, last].map(|half| u64::from_le_bytes(half.try_into().expect("8 bytes")))
}

/// What follows the keyword of a line that starts `DATA` and a blank, as nearly every line does
/// (exactly as sys161 writes it).
fn data_fields(line: &[u8]) -> Option<&[u8]> {
    match line {
        [d, a, t, a2, blank, ..] if [*d, *a, *t, *a2].eq_ignore_ascii_case(b"DATA") && is_blank(*blank) => {
            Some(&line[4..])
        }
        _ => None,
    }
}

/// Decodes one server line (without its LF). Blank lines give `Ok(None)`.
pub fn decode_server_line(line: &[u8], max_fields: usize) -> Result<Option<ServerMessage>, DecodeError> {
    if let Some(rest) = data_fields(line) {
        return Ok(Some(ServerMessage::Data(numbers(rest, "DATA", max_fields, u64::MAX)?)));
    }
    let Some(start) = line.iter().position(|&b| !is_blank(b)) else { return Ok(None) };
    let line = &line[start..];
    let end = line.iter().position(|&b| is_blank(b)).unwrap_or(line.len());
    let (first, after) = line.split_at(end);
    let Some(keyword) = known_keyword(first) else {
        return Ok(Some(ServerMessage::Unknown(text(words(line)).unwrap_or_default())));
    };
    let rest = words(after);
    let msg = match keyword {
        "DATA" => ServerMessage::Data(numbers(after, keyword, max_fields, u64::MAX)?),
        "WIDTH" => ServerMessage::Width(
            numbers(after, keyword, max_fields, u32::MAX.into())?.into_iter().map(|v| v as u32).collect(),
        ),
        "HELLO" => match numbers(after, keyword, max_fields, u32::MAX.into())?.as_slice() {
            &[version] => ServerMessage::Hello(version as u32),
            other => return Err(DecodeError::WrongArity { keyword, expected: 1, got: other.len() }),
        },
        "HEAD" => {
            let mut names = Vec::new();
            for word in rest {
                if names.len() >= max_fields {
                    return Err(DecodeError::TooManyFields { keyword, max: max_fields });
                }
                names.push(lossy(word));
            }
            ServerMessage::Head(names)
        }
        "OK" => match rest.count() {
            0 => ServerMessage::Ok,
            got => return Err(DecodeError::WrongArity { keyword, expected: 0, got }),
        },
        "BAD" => ServerMessage::Bad(text(rest)),
        "ERROR" => ServerMessage::Error(text(rest)),
        _ => unreachable!("every keyword in KEYWORDS is matched"),
    };
    Ok(Some(msg))
}

fn check_word(what: &'static str, value: &str) -> Result<(), EncodeError> {
    if value.is_empty() || value.bytes().any(|b| is_blank(b) || b == b'\n') {
        return Err(EncodeError::NotAWord { what, value: value.to_string() });
    }
    Ok(())
}

fn check_text(what: &'static str, value: &str) -> Result<(), EncodeError> {
    if value.split(' ').any(|w| check_word(what, w).is_err()) {
        return Err(EncodeError::NotNormalText { what, value: value.to_string() });
    }
    Ok(())
}

/// Writes `msg` exactly as sys161 would: uppercase keyword, single spaces, CRLF.
///
/// Fails, writing nothing, for a message that would not decode back to itself (a name with a blank, a
/// text with a line break, an unknown line starting with a known keyword).
pub fn encode_server(msg: &ServerMessage, dst: &mut BytesMut) -> Result<(), EncodeError> {
    match msg {
        ServerMessage::Head(names) => names.iter().try_for_each(|n| check_word("HEAD name", n))?,
        ServerMessage::Bad(Some(t)) => check_text("BAD text", t)?,
        ServerMessage::Error(Some(t)) => check_text("ERROR text", t)?,
        ServerMessage::Unknown(line) => {
            check_text("unknown line", line)?;
            if known_keyword(line.split(' ').next().unwrap_or_default().as_bytes()).is_some() {
                return Err(EncodeError::KnownKeyword { line: line.clone() });
            }
        }
        _ => {}
    }
    fn join<T: std::fmt::Display>(dst: &mut BytesMut, items: &[T]) {
        for item in items {
            // Writing to a BytesMut cannot fail.
            let _ = write!(dst, " {item}");
        }
    }
    match msg {
        ServerMessage::Unknown(line) => dst.put_slice(line.as_bytes()),
        other => dst.put_slice(other.keyword().unwrap_or_default().as_bytes()),
    }
    match msg {
        ServerMessage::Hello(v) => join(dst, &[v]),
        ServerMessage::Head(names) => join(dst, names),
        ServerMessage::Width(widths) => join(dst, widths),
        ServerMessage::Data(values) => join(dst, values),
        ServerMessage::Bad(Some(t)) | ServerMessage::Error(Some(t)) => join(dst, &[t]),
        ServerMessage::Ok
        | ServerMessage::Bad(None)
        | ServerMessage::Error(None)
        | ServerMessage::Unknown(_) => {}
    }
    dst.put_slice(b"\r\n");
    Ok(())
}

/// Writes a client command: `INTERVAL nsecs\r\n`.
pub fn encode_client(msg: &ClientMessage, dst: &mut BytesMut) {
    match msg {
        ClientMessage::Interval(ns) => {
            let _ = write!(dst, "INTERVAL {ns}\r\n");
        }
    }
}

/// Parses a number the way C's `strtoul(word, &end, 0)` does on a 64-bit system, requiring the whole
/// word to be consumed: `0x`/`0X` hex, a leading `0` octal, else decimal; an optional `+` or `-` (a
/// minus negates modulo 2^64). `None` where sys161 says `BAD Invalid number` (no digits, trailing
/// bytes, or out of range).
pub fn strtoul(word: &[u8]) -> Option<u64> {
    let (negative, rest) = match word.split_first() {
        Some((b'+', rest)) => (false, rest),
        Some((b'-', rest)) => (true, rest),
        _ => (false, word),
    };
    let (radix, digits) = match rest {
        [b'0', x, digits @ ..] if x.eq_ignore_ascii_case(&b'x') => (16, digits),
        [b'0', ..] => (8, rest),
        _ => (10, rest),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        let digit = char::from(b).to_digit(radix)?;
        value = value.checked_mul(u64::from(radix))?.checked_add(u64::from(digit))?;
    }
    Some(if negative { value.wrapping_neg() } else { value })
}

/// The interval range a server accepts, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalRange {
    /// The smallest accepted interval.
    pub min: u64,
    /// The largest accepted interval.
    pub max: u64,
}

impl IntervalRange {
    /// What sys161 accepts: 10 us to 2 s.
    pub const SYS161: IntervalRange = IntervalRange { min: MIN_INTERVAL_NS, max: MAX_INTERVAL_NS };
    /// What the protocol text says: 100 ns to 2 s.
    pub const SPEC_TEXT: IntervalRange = IntervalRange { min: SPEC_MIN_INTERVAL_NS, max: MAX_INTERVAL_NS };

    /// Whether `ns` is in the range.
    pub fn contains(&self, ns: u64) -> bool {
        (self.min..=self.max).contains(&ns)
    }
}

/// Decodes one client command line (without its LF) by sys161's rules. Blank lines give `Ok(None)`.
pub fn decode_command_line(line: &[u8], range: IntervalRange) -> Result<Option<ClientMessage>, CommandError> {
    // sys161 splits on " \t\r\n" with strtok_r and refuses the 9th word.
    let mut first_two: [&[u8]; 2] = [&[], &[]];
    let mut count = 0;
    for word in line.split(|&b| is_blank(b) || b == b'\n').filter(|w| !w.is_empty()) {
        if count >= MAX_COMMAND_WORDS {
            return Err(CommandError::TooManyWords { max: MAX_COMMAND_WORDS });
        }
        if count < 2 {
            first_two[count] = word;
        }
        count += 1;
    }
    if count == 0 {
        return Ok(None);
    }
    if count != 2 || !first_two[0].eq_ignore_ascii_case(b"interval") {
        return Err(CommandError::InvalidCommand { line: text(words(line)).unwrap_or_default() });
    }
    let ns =
        strtoul(first_two[1]).ok_or_else(|| CommandError::InvalidNumber { word: lossy(first_two[1]) })?;
    if ns < range.min {
        return Err(CommandError::IntervalTooSmall { ns, min: range.min });
    }
    if ns > range.max {
        return Err(CommandError::IntervalTooLarge { ns, max: range.max });
    }
    Ok(Some(ClientMessage::Interval(ns)))
}

/// The client side: decodes [`ServerMessage`]s, encodes [`ClientMessage`]s.
#[derive(Debug, Clone)]
pub struct ClientCodec {
    max_line: usize,
    max_fields: usize,
    /// How far the buffer has been searched for an LF (so that a long partial line is scanned once).
    scanned: usize,
    /// Skipping the rest of an overlong line.
    discarding: bool,
}

impl Default for ClientCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_LINE, DEFAULT_MAX_FIELDS)
    }
}

impl ClientCodec {
    /// A codec accepting lines of up to `max_line` bytes before the LF and `max_fields` words after
    /// the keyword.
    pub fn new(max_line: usize, max_fields: usize) -> Self {
        Self { max_line: max_line.max(1), max_fields, scanned: 0, discarding: false }
    }

    /// Decodes the next message from `buf`, consuming what it used.
    ///
    /// `Ok(None)`: no complete line yet. `Err`: this line was bad (it is consumed, or skipped up to the
    /// next LF when overlong); call again to go on with the next one.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<ServerMessage>, DecodeError> {
        loop {
            if self.discarding {
                match memchr::memchr(b'\n', buf) {
                    Some(lf) => {
                        buf.advance(lf + 1);
                        self.discarding = false;
                    }
                    None => {
                        buf.clear();
                        return Ok(None);
                    }
                }
            }
            let window = buf.len().min(self.max_line.saturating_add(1));
            // A DATA line, found and parsed in one pass (its LF within the window, so not too long).
            if let Some((len, values)) = data_fields(&buf[..window])
                .and_then(|rest| numbers_fast(rest, true, self.max_fields, u64::MAX))
            {
                self.scanned = 0;
                buf.advance(4 + len + 1);
                return Ok(Some(ServerMessage::Data(values.into_vec())));
            }
            match memchr::memchr(b'\n', &buf[self.scanned..window]) {
                Some(offset) => {
                    let lf = self.scanned + offset;
                    self.scanned = 0;
                    let decoded = decode_server_line(&buf[..lf], self.max_fields);
                    buf.advance(lf + 1);
                    if let Some(msg) = decoded? {
                        return Ok(Some(msg));
                    }
                }
                None if buf.len() > self.max_line => {
                    self.scanned = 0;
                    self.discarding = true;
                    return Err(DecodeError::LineTooLong { max: self.max_line });
                }
                None => {
                    self.scanned = window;
                    return Ok(None);
                }
            }
        }
    }

    /// Like [`ClientCodec::decode`] at end of input: bytes after the last LF are discarded (stat161
    /// does the same).
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<ServerMessage>, DecodeError> {
        let decoded = self.decode(buf);
        if let Ok(None) = decoded {
            buf.clear();
            self.scanned = 0;
            self.discarding = false;
        }
        decoded
    }
}

impl Decoder for ClientCodec {
    type Item = Result<ServerMessage, DecodeError>;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Ok(ClientCodec::decode(self, buf).transpose())
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Ok(ClientCodec::decode_eof(self, buf).transpose())
    }
}

impl Encoder<ClientMessage> for ClientCodec {
    type Error = std::io::Error;

    fn encode(&mut self, msg: ClientMessage, dst: &mut BytesMut) -> Result<(), Self::Error> {
        encode_client(&msg, dst);
        Ok(())
    }
}

/// The server side: decodes client commands by sys161's rules, encodes [`ServerMessage`]s.
#[derive(Debug, Clone)]
pub struct ServerCodec {
    range: IntervalRange,
}

impl Default for ServerCodec {
    fn default() -> Self {
        Self::new(IntervalRange::SYS161)
    }
}

impl ServerCodec {
    /// A codec accepting intervals in `range`.
    pub fn new(range: IntervalRange) -> Self {
        Self { range }
    }

    /// Decodes the next command from `buf`, consuming what it used.
    ///
    /// Like sys161, a command must have its LF within [`SERVER_INPUT_BUFSIZE`] bytes; otherwise those
    /// bytes are discarded and [`CommandError::InputOverflow`] returned. Call again after an error.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<ClientMessage>, CommandError> {
        loop {
            let window = buf.len().min(SERVER_INPUT_BUFSIZE);
            match memchr::memchr(b'\n', &buf[..window]) {
                Some(lf) => {
                    let decoded = decode_command_line(&buf[..lf], self.range);
                    buf.advance(lf + 1);
                    if let Some(cmd) = decoded? {
                        return Ok(Some(cmd));
                    }
                }
                None if buf.len() >= SERVER_INPUT_BUFSIZE => {
                    buf.advance(SERVER_INPUT_BUFSIZE);
                    return Err(CommandError::InputOverflow { max: SERVER_INPUT_BUFSIZE });
                }
                None => return Ok(None),
            }
        }
    }
}

impl Decoder for ServerCodec {
    type Item = Result<ClientMessage, CommandError>;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Ok(ServerCodec::decode(self, buf).transpose())
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        let decoded = ServerCodec::decode(self, buf).transpose();
        if decoded.is_none() {
            buf.clear();
        }
        Ok(decoded)
    }
}

impl Encoder<&ServerMessage> for ServerCodec {
    type Error = std::io::Error;

    fn encode(&mut self, msg: &ServerMessage, dst: &mut BytesMut) -> Result<(), Self::Error> {
        encode_server(msg, dst).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn decode_all(input: &[u8]) -> Vec<Result<ServerMessage, DecodeError>> {
        let mut codec = ClientCodec::default();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        loop {
            match codec.decode_eof(&mut buf) {
                Ok(None) => return out,
                other => out.push(other.map(Option::unwrap)),
            }
        }
    }

    #[test]
    fn numbers_are_plain_decimal() {
        assert_eq!(parse_decimal(b"0", u64::MAX), Some(0));
        assert_eq!(parse_decimal(b"007", u64::MAX), Some(7));
        assert_eq!(parse_decimal(b"18446744073709551615", u64::MAX), Some(u64::MAX));
        assert_eq!(parse_decimal(b"18446744073709551616", u64::MAX), None);
        assert_eq!(parse_decimal(b"+1", u64::MAX), None);
        assert_eq!(parse_decimal(b"12abc", u64::MAX), None);
        assert_eq!(parse_decimal(b"4294967296", u64::from(u32::MAX)), None);
    }

    #[test]
    fn swar_digits_of_every_length() {
        for (bytes, len, expected) in [
            (b"12345678", 8, 12_345_678),
            (b"99999999", 8, 99_999_999),
            (b"00000000", 8, 0),
            (b" 1234567", 7, 1_234_567),
            (b"123456 7", 1, 7),
            (b"45678:12", 2, 12),
            (b"45678\xb012", 2, 12),
            (b"\x000000007", 7, 7),
        ] {
            assert_eq!(swar_digits(u64::from_le_bytes(*bytes), len), expected, "{bytes:?}");
        }
        // Whatever comes before the digits does not count.
        for len in 1..=8 {
            for junk in 0..=255u8 {
                let mut bytes = *b"31415926";
                bytes[..8 - len].fill(junk);
                let expected = parse_decimal(&bytes[8 - len..], u64::MAX).unwrap();
                assert_eq!(swar_digits(u64::from_le_bytes(bytes), len), expected, "{bytes:?}");
            }
        }
    }

    #[test]
    fn sixteen_digits_of_every_length() {
        let digits = b"9876543210123456";
        for len in 9..=16 {
            for junk in [b'0', b' ', b'9', 0, 0xFF] {
                let mut bytes = *digits;
                bytes[..16 - len].fill(junk);
                let [first, last] =
                    [&bytes[..8], &bytes[8..]].map(|h| u64::from_le_bytes(h.try_into().unwrap()));
                let value = sixteen_digits(digit_values(first, len - 8), digit_values(last, 8));
                assert_eq!(value, parse_decimal(&digits[16 - len..], u64::MAX).unwrap(), "{len}");
            }
        }
        assert_eq!(
            sixteen_digits(digit_values(u64::from_le_bytes(*b"99999999"), 8), 0x0909_0909_0909_0909),
            9_999_999_999_999_999
        );
        assert_eq!(sixteen_digits(0, 0), 0);
    }

    #[test]
    fn load8_before_pads_before_the_start_with_zeros() {
        let line = b"0123456789";
        for end in 0..=line.len() {
            let mut expected = [0; 8];
            let n = end.min(8);
            expected[8 - n..].copy_from_slice(&line[end - n..end]);
            assert_eq!(load8_before(line, end), u64::from_le_bytes(expected), "end {end}");
            let short = &line[..end.max(1) - 1];
            let n = short.len();
            let mut expected = [0; 8];
            expected[8 - n.min(8)..].copy_from_slice(&short[n - n.min(8)..]);
            assert_eq!(load8_before(short, n), u64::from_le_bytes(expected), "short {n}");
        }
        assert_eq!(load8_from(line, 2), u64::from_le_bytes(*b"23456789"));
    }

    #[test]
    fn popcounts_add_up() {
        assert_eq!(sum_bytes(byte_popcounts(u64::MAX) * 9), 576);
        assert_eq!(sum_bytes(byte_popcounts(0x5555_5555_5555_5555) * 8), 256);
        assert_eq!(sum_bytes(byte_popcounts(0x8000_0000_0000_0001)), 2);
        assert_eq!(sum_bytes(0), 0);
    }

    #[test]
    fn the_longest_fast_lines() {
        // 256 words in 512 bytes, and one byte more.
        for (line, words) in
            [(" 7".repeat(256), 256), (" 7".repeat(255) + "  ", 255), (" 7".repeat(256) + " ", 256)]
        {
            let mut edges = [0; FAST_BLOCKS + 1];
            let found = word_edges(line.as_bytes(), &mut edges);
            assert_eq!(found, (line.len() <= 512).then_some((line.len(), words, false)));
            for max_fields in [255, 256] {
                let expected = numbers_plain(line.as_bytes(), "DATA", max_fields, u64::MAX);
                assert_eq!(numbers(line.as_bytes(), "DATA", max_fields, u64::MAX), expected);
            }
            assert_eq!(numbers(line.as_bytes(), "DATA", 256, u64::MAX), Ok(vec![7; words]));
        }
    }

    #[test]
    fn classify_matches_the_portable_version() {
        for b in 0..=255u8 {
            for at in 0..16 {
                let mut chunk = *b"0 9\t\r/:a\xb0 12 x\r\t";
                chunk[at] = b;
                let expected = classify_portable(chunk);
                assert_eq!(classify(chunk), expected, "{chunk:?}");
                assert_eq!(expected.0 >> at & 1 == 1, !is_blank(b));
                assert_eq!(expected.1 >> at & 1 == 1, !is_blank(b) && !b.is_ascii_digit());
                assert_eq!(expected.2 >> at & 1 == 1, b == b'\n');
            }
        }
    }

    /// The byte ranges of the words of `line`, a byte at a time.
    fn naive_ranges(line: &[u8]) -> Vec<std::ops::Range<usize>> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, &b) in line.iter().chain([&b' ']).enumerate() {
            match (start, is_blank(b)) {
                (None, false) => start = Some(i),
                (Some(s), true) => {
                    out.push(s..i);
                    start = None;
                }
                _ => {}
            }
        }
        out
    }

    /// Lines of blanks, digits and other bytes, with runs of digits around 8, 16 and 20 long.
    fn line() -> impl Strategy<Value = Vec<u8>> {
        let word = prop_oneof![
            4 => "[0-9]{1,22}",
            1 => "[0-9a:/\u{b0}]{1,20}",
            1 => "4294967[0-9]{3}|1844674407370955[0-9]{4}|0{0,5}[0-9]{1,20}",
        ];
        let blanks = "[ \t\r]{0,3}";
        let line = prop::collection::vec((blanks, word), 0..60)
            .prop_map(|parts| parts.into_iter().flat_map(|(b, w)| [b, w]).collect::<String>().into_bytes());
        prop_oneof![
            line,
            prop::collection::vec(prop::sample::select(b" \t\r0123456789x\xb0".to_vec()), 0..600),
            // and some LFs, which end the line for `word_edges`
            prop::collection::vec(prop::sample::select(b" 0123456789\n".to_vec()), 0..600),
        ]
    }

    proptest::proptest! {
        #[test]
        fn word_masks_match_a_naive_split(line in line(), cut in 0..600usize) {
            for bytes in [&line[..], &line[..cut.min(line.len())]] {
                let line = &bytes[..bytes.iter().position(|&b| b == b'\n').unwrap_or(bytes.len())];
                let expected = naive_ranges(line);
                let mut edges = [0; FAST_BLOCKS + 1];
                match word_edges(bytes, &mut edges) {
                    None => prop_assert!(line.len() > 64 * FAST_BLOCKS),
                    Some((len, words, non_digits)) => {
                        prop_assert_eq!(len, line.len());
                        let mut walk = WordWalk::new(&edges);
                        let ranges: Vec<_> = (0..words).map(|_| walk.next_word()).collect();
                        prop_assert_eq!(ranges, expected.clone());
                        prop_assert_eq!(words, expected.len());
                        let expected_non_digits =
                            expected.iter().any(|w| !line[w.clone()].iter().all(u8::is_ascii_digit));
                        prop_assert_eq!(non_digits, expected_non_digits);
                    }
                }
            }
        }

        #[test]
        fn data_lines_decode_as_decode_server_line_does(
            lines in prop::collection::vec(line(), 1..6),
            max_fields in 0..70usize,
            split in any::<usize>(),
        ) {
            // Each line (without LFs of its own) as a DATA line: the codec finds its LF while
            // parsing it, then the next line is what follows in the same chunks.
            let lines: Vec<Vec<u8>> = lines
                .into_iter()
                .map(|l| [&b"DATA "[..], &l].concat().into_iter().filter(|&b| b != b'\n').collect())
                .collect();
            let expected: Vec<_> = lines
                .iter()
                .filter_map(|l| decode_server_line(l, max_fields).transpose())
                .collect();
            let bytes = lines.join(&b'\n').into_iter().chain([b'\n']).collect::<Vec<u8>>();
            let split = split % (bytes.len() + 1);
            let mut codec = ClientCodec::new(DEFAULT_MAX_LINE, max_fields);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for chunk in [&bytes[..split], &bytes[split..]] {
                buf.extend_from_slice(chunk);
                while let Some(item) = codec.decode(&mut buf).transpose() {
                    got.push(item);
                }
            }
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn numbers_match_the_plain_parse(line in line(), max_fields in 0..70usize, wide in proptest::bool::ANY) {
            let max = if wide { u64::MAX } else { u32::MAX.into() };
            prop_assert_eq!(
                numbers(&line, "DATA", max_fields, max),
                numbers_plain(&line, "DATA", max_fields, max)
            );
        }
    }

    #[test]
    fn strtoul_matches_c() {
        assert_eq!(strtoul(b"10000"), Some(10_000));
        assert_eq!(strtoul(b"0x10000"), Some(65_536));
        assert_eq!(strtoul(b"0X1f"), Some(31));
        assert_eq!(strtoul(b"010000"), Some(4096));
        assert_eq!(strtoul(b"+5"), Some(5));
        assert_eq!(strtoul(b"-5"), Some(5u64.wrapping_neg()));
        assert_eq!(strtoul(b"0"), Some(0));
        assert_eq!(strtoul(b"08"), None);
        assert_eq!(strtoul(b"0x"), None);
        assert_eq!(strtoul(b"1e6"), None);
        assert_eq!(strtoul(b"+"), None);
        assert_eq!(strtoul(b"18446744073709551616"), None);
        assert_eq!(strtoul(b"18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn overlong_line_recovers_at_next_lf() {
        let mut codec = ClientCodec::new(8, 16);
        let mut buf = BytesMut::from(&b"DATA 1234567890\nDATA 1\n"[..]);
        assert_eq!(codec.decode(&mut buf), Err(DecodeError::LineTooLong { max: 8 }));
        assert_eq!(codec.decode(&mut buf), Ok(Some(ServerMessage::Data(vec![1]))));
        assert_eq!(codec.decode(&mut buf), Ok(None));
    }

    #[test]
    fn a_line_of_exactly_max_bytes_is_accepted() {
        let mut codec = ClientCodec::new(8, 16);
        let mut buf = BytesMut::from(&b"DATA 123\n"[..]);
        assert_eq!(codec.decode(&mut buf), Ok(Some(ServerMessage::Data(vec![123]))));
    }

    #[test]
    fn overlong_line_is_reported_before_its_lf_arrives() {
        let mut codec = ClientCodec::new(8, 16);
        let mut buf = BytesMut::from(&b"DATA 12345"[..]);
        assert_eq!(codec.decode(&mut buf), Err(DecodeError::LineTooLong { max: 8 }));
        assert_eq!(codec.decode(&mut buf), Ok(None));
        assert!(buf.is_empty(), "discarded bytes are not kept");
        buf.extend_from_slice(b"67890\nOK\n");
        assert_eq!(codec.decode(&mut buf), Ok(Some(ServerMessage::Ok)));
    }

    #[test]
    fn field_count_is_bounded() {
        let mut codec = ClientCodec::new(4096, 3);
        let mut buf = BytesMut::from(&b"DATA 1 2 3 4\nHEAD a b c d\nDATA 1 2 3\n"[..]);
        let too_many = |keyword| Err(DecodeError::TooManyFields { keyword, max: 3 });
        assert_eq!(codec.decode(&mut buf), too_many("DATA"));
        assert_eq!(codec.decode(&mut buf), too_many("HEAD"));
        assert_eq!(codec.decode(&mut buf), Ok(Some(ServerMessage::Data(vec![1, 2, 3]))));
    }

    #[test]
    fn hello_and_ok_arity() {
        assert_eq!(
            decode_all(b"HELLO\nHELLO 2 3\nOK then\nHELLO x\n"),
            vec![
                Err(DecodeError::WrongArity { keyword: "HELLO", expected: 1, got: 0 }),
                Err(DecodeError::WrongArity { keyword: "HELLO", expected: 1, got: 2 }),
                Err(DecodeError::WrongArity { keyword: "OK", expected: 0, got: 1 }),
                Err(DecodeError::InvalidNumber { keyword: "HELLO", index: 0, word: "x".into(), bits: 32 }),
            ]
        );
    }

    #[test]
    fn encode_refuses_what_would_not_decode_back() {
        let mut dst = BytesMut::new();
        assert!(encode_server(&ServerMessage::Head(vec!["a b".into()]), &mut dst).is_err());
        assert!(encode_server(&ServerMessage::Head(vec![String::new()]), &mut dst).is_err());
        assert!(encode_server(&ServerMessage::bad("two  spaces"), &mut dst).is_err());
        assert!(encode_server(&ServerMessage::Error(Some("line\r\nbreak".into())), &mut dst).is_err());
        assert!(encode_server(&ServerMessage::Unknown("data 1".into()), &mut dst).is_err());
        assert!(encode_server(&ServerMessage::Unknown(String::new()), &mut dst).is_err());
        assert!(dst.is_empty());
        encode_server(&ServerMessage::Unknown("FOO bar".into()), &mut dst).unwrap();
        assert_eq!(&dst[..], b"FOO bar\r\n");
    }

    #[test]
    fn command_buffer_overflow_discards_128_bytes() {
        let mut codec = ServerCodec::default();
        let mut buf = BytesMut::from(&[b'x'; 127][..]);
        assert_eq!(codec.decode(&mut buf), Ok(None));
        buf.put_u8(b'y');
        assert_eq!(codec.decode(&mut buf), Err(CommandError::InputOverflow { max: 128 }));
        assert!(buf.is_empty());
        let mut exact = BytesMut::from(&b"INTERVAL 10000"[..]);
        exact.resize(127, b' ');
        exact.put_u8(b'\n');
        assert_eq!(codec.decode(&mut exact), Ok(Some(ClientMessage::Interval(10_000))));
    }
}
