//! The hand-tuned DATA-line parser: the hot path of [`super::ClientCodec`], since nearly every line is `DATA`.
//!
//! [`numbers_fast`] must give exactly what the reference [`super::numbers_plain`] gives for every line it
//! accepts, and give up (`None`) on everything else; the property tests compare the two (and the codec
//! against [`super::decode_server_line`]) on arbitrary and mutated lines. It finds every word's bounds at once
//! with 16-byte bitmasks (SSE2 on x86_64, SWAR elsewhere), then parses the words independently (SWAR, SSE2 for
//! 9-16 digits). It buys the codec about 1.9x on DATA lines: 0.54x `LinesCodec`'s throughput against 0.29x
//! for the word-by-word path (criterion, `benches/decode.rs`).
//!
//! `--cfg telemon_portable` compiles the portable twins in place of the SSE2 code on x86_64 too, and CI runs
//! the tests once that way.

use super::{is_blank, parse_decimal};

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
pub(super) fn numbers_fast(
    bytes: &[u8],
    lf_needed: bool,
    max_fields: usize,
    max: u64,
) -> Option<(usize, Box<[u64]>)> {
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
pub(super) const FAST_BLOCKS: usize = 8;

/// The most bytes [`numbers_fast`] looks at before it gives up.
pub(super) const FAST_BYTES: usize = 64 * FAST_BLOCKS;

/// Where the words of a line start and end, as bitmasks: bit `i` of `edges[k]` is byte `64 * k + i`,
/// set where a word starts or where the blanks after a word start, or the line ends after a word (so
/// starts and ends alternate, and every start has its end). One block more than the line's bytes
/// fill, for the end of a line that ends a block.
pub(super) type Edges = [u64; FAST_BLOCKS + 1];

/// Fills `edges` for the line at the start of `bytes`, which ends at the first LF or with `bytes`,
/// and returns its length, how many words it has and whether any of them has a byte that is not an
/// ASCII digit; `None` if the line is longer than [`FAST_BLOCKS`] blocks.
///
/// Finding the LF here, in the same pass, saves [`ClientCodec::decode`] a search of its own.
///
/// (`edges` is filled in place rather than returned: moving it around costs as much as filling it.)
pub(super) fn word_edges(bytes: &[u8], edges: &mut Edges) -> Option<(usize, usize, bool)> {
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
pub(super) fn byte_popcounts(x: u64) -> u64 {
    let pairs = x - ((x >> 1) & 0x5555_5555_5555_5555);
    let nibbles = (pairs & 0x3333_3333_3333_3333) + ((pairs >> 2) & 0x3333_3333_3333_3333);
    (nibbles + (nibbles >> 4)) & 0x0F0F_0F0F_0F0F_0F0F
}

/// The sum of the bytes of `x`.
pub(super) fn sum_bytes(x: u64) -> usize {
    // In 16-bit lanes first: the sum can pass 255 (a 512-byte line has up to 256 words).
    let pairs = (x & 0x00FF_00FF_00FF_00FF) + ((x >> 8) & 0x00FF_00FF_00FF_00FF);
    (pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48) as usize
}

/// Walks the [`word_edges`] of a line, word by word.
pub(super) struct WordWalk<'a> {
    edges: &'a Edges,
    block: usize,
    /// The edges of `edges[block]` not yet taken.
    bits: u64,
}

impl<'a> WordWalk<'a> {
    pub(super) fn new(edges: &'a Edges) -> Self {
        Self { edges, block: 0, bits: edges[0] }
    }

    /// The byte range of the next word. Call it at most as many times as there are words.
    #[inline(always)]
    pub(super) fn next_word(&mut self) -> std::ops::Range<usize> {
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
pub(super) fn chunk_masks(line: &[u8], at: usize) -> (u16, u16, u16) {
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
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(telemon_portable)))]
pub(super) fn classify(chunk: [u8; 16]) -> (u16, u16, u16) {
    // SAFETY: `classify_sse2` needs nothing but SSE2, which the `cfg` above guarantees.
    unsafe { classify_sse2(chunk) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(telemon_portable)))]
#[target_feature(enable = "sse2")]
pub(super) fn classify_sse2(chunk: [u8; 16]) -> (u16, u16, u16) {
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
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2", not(telemon_portable)), allow(dead_code))]
pub(super) fn classify_portable(chunk: [u8; 16]) -> (u16, u16, u16) {
    chunk.iter().enumerate().fold((0, 0, 0), |(w, n, lf), (i, &b)| {
        let in_word = !is_blank(b);
        (
            w | u16::from(in_word) << i,
            n | u16::from(in_word && !b.is_ascii_digit()) << i,
            lf | u16::from(b == b'\n') << i,
        )
    })
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2", not(telemon_portable))))]
pub(super) use classify_portable as classify;

const ONES: u64 = 0x0101_0101_0101_0101;
pub(super) const POW10: [u64; 9] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000];

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
pub(super) fn load8_before(line: &[u8], end: usize) -> u64 {
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
pub(super) fn load8_from(line: &[u8], start: usize) -> u64 {
    u64::from_le_bytes(line[start..start + 8].try_into().expect("8 bytes"))
}

/// The top `len` (1 to 8) bytes of `bytes` (as from [`load8_before`]), which must be ASCII digits,
/// as digit values (0 to 9), with zeros before them.
#[inline(always)]
pub(super) fn digit_values(bytes: u64, len: usize) -> u64 {
    (bytes ^ (0x30 * ONES)) & KEEP[len]
}

/// The value of the top `len` (1 to 8) bytes of `bytes` (as from [`load8_before`]), which must be
/// ASCII digits.
#[inline(always)]
pub(super) fn swar_digits(bytes: u64, len: usize) -> u64 {
    eight_digits(digit_values(bytes, len))
}

/// The value of 8 digit values (0 to 9, most significant in the lowest byte), without a branch per
/// digit (SWAR: the 8 bytes at once, in two multiplications).
#[inline(always)]
pub(super) fn eight_digits(digits: u64) -> u64 {
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
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2", not(telemon_portable))))]
#[inline(always)]
pub(super) fn sixteen_digits(first: u64, last: u64) -> u64 {
    eight_digits(first) * 100_000_000 + eight_digits(last)
}

/// The value of 16 digit values: [`eight_digits`] of `first`, then of `last`. With SSE2 (always
/// there on x86_64) both halves at once, in about half the instructions.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(telemon_portable)))]
#[inline(always)]
pub(super) fn sixteen_digits(first: u64, last: u64) -> u64 {
    // SAFETY: `sixteen_digits_sse2` needs nothing but SSE2, which the `cfg` above guarantees.
    unsafe { sixteen_digits_sse2(first, last) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(telemon_portable)))]
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
pub(super) fn parse_digits(line: &[u8], word: std::ops::Range<usize>, max: u64) -> Option<u64> {
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
pub(super) fn split16(bytes: &[u8; 16]) -> [u64; 2] {
    let (first, last) = bytes.split_at(8);
    [first, last].map(|half| u64::from_le_bytes(half.try_into().expect("8 bytes")))
}
