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

const ONES: u64 = 0x0101_0101_0101_0101;
const POW10: [u64; 9] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000];

/// The leading run of ASCII digits in 8 bytes: its value and length (0 to 8), without a branch per
/// digit (SWAR: all 8 bytes are checked at once, then combined in pairs, fours and eights).
fn digit_run(bytes: [u8; 8]) -> (u64, usize) {
    // Little-endian: the first byte is the lowest. A digit byte becomes 0..=9.
    let x = u64::from_le_bytes(bytes) ^ (0x30 * ONES);
    // High bit set in each byte that is not a digit (>= 10 after the xor); no carries between bytes.
    let non_digits = (((x & (0x7F * ONES)) + 0x76 * ONES) | x) & (0x80 * ONES);
    let len = (non_digits.trailing_zeros() / 8) as usize;
    if len == 0 {
        return (0, 0);
    }
    // Keep the run and move it to the top, so the bytes below are leading zeros.
    let digits = x << (8 * (8 - len));
    let pairs = (digits.wrapping_mul(10).wrapping_add(digits >> 8)) & 0x00FF_00FF_00FF_00FF;
    let fours = (pairs.wrapping_mul(100).wrapping_add(pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    ((fours.wrapping_mul(10_000).wrapping_add(fours >> 32)) & 0xFFFF_FFFF, len)
}

/// Parses the words in `rest` as unsigned decimals of at most `max`, in one pass over the bytes (this
/// is the hot path: nearly every line is `DATA`).
fn numbers(rest: &[u8], keyword: &'static str, max_fields: usize, max: u64) -> Result<Vec<u64>, DecodeError> {
    // 19 decimal digits always fit in a u64, so shorter words need no overflow checks.
    const SAFE_DIGITS: usize = 19;
    let bits = if max == u64::MAX { 64 } else { 32 };
    let mut values = Vec::with_capacity(16);
    let mut i = 0;
    loop {
        while i < rest.len() && is_blank(rest[i]) {
            i += 1;
        }
        if i == rest.len() {
            return Ok(values);
        }
        let start = i;
        let mut value: u64 = 0;
        while let Some(bytes) = rest.get(i..i + 8) {
            let (run, len) = digit_run(bytes.try_into().expect("8 bytes"));
            value = value.wrapping_mul(POW10[len]).wrapping_add(run);
            i += len;
            if len < 8 {
                break;
            }
        }
        if rest.len() - i < 8 {
            // The line's last bytes: one digit at a time.
            while let Some(digit) = rest.get(i).map(|b| b.wrapping_sub(b'0')).filter(|&d| d <= 9) {
                value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
                i += 1;
            }
        }
        let digits_end = i;
        while i < rest.len() && !is_blank(rest[i]) {
            i += 1;
        }
        let word = &rest[start..i];
        let index = values.len();
        if index >= max_fields {
            return Err(DecodeError::TooManyFields { keyword, max: max_fields });
        }
        let parsed = if digits_end != i {
            None
        } else if word.len() > SAFE_DIGITS {
            parse_decimal(word, max)
        } else {
            (value <= max).then_some(value)
        };
        let value =
            parsed.ok_or_else(|| DecodeError::InvalidNumber { keyword, index, word: lossy(word), bits })?;
        values.push(value);
    }
}

/// Decodes one server line (without its LF). Blank lines give `Ok(None)`.
pub fn decode_server_line(line: &[u8], max_fields: usize) -> Result<Option<ServerMessage>, DecodeError> {
    // Nearly every line is "DATA ..." exactly as sys161 writes it.
    if let [d, a, t, a2, blank, ..] = line {
        if [*d, *a, *t, *a2].eq_ignore_ascii_case(b"DATA") && is_blank(*blank) {
            return Ok(Some(ServerMessage::Data(numbers(&line[4..], "DATA", max_fields, u64::MAX)?)));
        }
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
    fn digit_runs_of_every_length() {
        assert_eq!(digit_run(*b"12345678"), (12_345_678, 8));
        assert_eq!(digit_run(*b"99999999"), (99_999_999, 8));
        assert_eq!(digit_run(*b"00000000"), (0, 8));
        assert_eq!(digit_run(*b"1234567 "), (1_234_567, 7));
        assert_eq!(digit_run(*b"7 123456"), (7, 1));
        assert_eq!(digit_run(*b" 1234567"), (0, 0));
        assert_eq!(digit_run(*b"12:45678"), (12, 2));
        assert_eq!(digit_run(*b"12/45678"), (12, 2));
        assert_eq!(digit_run(*b"12\xb045678"), (12, 2));
        for b in 0..=255u8 {
            let mut bytes = *b"55555555";
            bytes[3] = b;
            let expected =
                if b.is_ascii_digit() { (5550_5555 + u64::from(b - b'0') * 10_000, 8) } else { (555, 3) };
            assert_eq!(digit_run(bytes), expected, "{b}");
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
