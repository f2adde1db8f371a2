//! Sans-IO line codecs for both directions.
//!
//! * [`ClientCodec`]: what a client uses. Decodes server lines into [`ServerMessage`]s and encodes
//!   [`ClientMessage`]s.
//! * [`ServerCodec`]: what a server uses. Decodes client commands with sys161's exact rules (128-byte
//!   input buffer, 8 words, `strtoul` base 0, interval range) and encodes [`ServerMessage`]s.
//!
//! Both recover from a bad line at the next LF, so their tokio-util `Decoder` impls (feature `codec`) yield
//! per-line errors as items (`Item = Result<Message, Error>`) rather than as the stream's error, which would
//! end a `FramedRead`. Only I/O errors end the stream.

use std::fmt::Write as _;

use bytes::{Buf, BufMut, BytesMut};

mod fast;

use fast::numbers_fast;

/// Counts the bytes the decoder examines, in this crate's unit tests only (the linear-decoding test).
mod work {
    #[cfg(test)]
    thread_local! {
        pub(super) static EXAMINED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[inline(always)]
    pub(super) fn examined(_bytes: usize) {
        #[cfg(test)]
        EXAMINED.with(|c| c.set(c.get() + _bytes));
    }
}

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

/// Whether `first`, the first bytes a server sent on a connection, can start a meter161 stream: after any
/// blanks and blank lines, a word that is one of the protocol's keywords, in any case (sys161 starts with
/// `HELLO`). `None` while the bytes seen are blanks or the start of a keyword. It looks at the first word only.
///
/// ```
/// assert_eq!(meter161::sniff(b"HELLO 2\r\nHEAD nsec"), Some(true));
/// assert_eq!(meter161::sniff(b"\r\nhel"), None);
/// assert_eq!(meter161::sniff(b"HTTP/1.1 400 Bad Request"), Some(false));
/// ```
pub fn sniff(first: &[u8]) -> Option<bool> {
    let start = first.iter().position(|&b| !is_blank(b) && b != b'\n')?;
    let rest = &first[start..];
    let end = rest.iter().position(|&b| is_blank(b) || b == b'\n');
    let word = &rest[..end.unwrap_or(rest.len())];
    let fits = |k: &&str| match end {
        Some(_) => k.len() == word.len() && k.as_bytes().eq_ignore_ascii_case(word),
        None => k.len() >= word.len() && k.as_bytes()[..word.len()].eq_ignore_ascii_case(word),
    };
    if !KEYWORDS.iter().any(fits) {
        return Some(false);
    }
    end.map(|_| true)
}

/// How many of a foreign server's first bytes [`DecodeError::OtherProtocol`] keeps.
const FIRST_BYTES_KEPT: usize = 24;

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
    /// Still to check that the stream starts like meter161 (see [`ClientCodec::checking_greeting`]).
    greeting: bool,
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
        Self { max_line: max_line.max(1), max_fields, scanned: 0, discarding: false, greeting: false }
    }

    /// Checks that the stream starts like meter161 ([`sniff`]): when the first word the server sends is no
    /// keyword of the protocol, the first [`ClientCodec::decode`] fails with [`DecodeError::OtherProtocol`],
    /// consuming nothing, and decoding goes on as usual after it. For a codec at the start of a connection
    /// ([`crate::Client`] checks every connection so); a codec fed lines from the middle of a stream must not.
    pub fn checking_greeting(mut self) -> Self {
        self.greeting = true;
        self
    }

    /// Decodes the next message from `buf`, consuming what it used.
    ///
    /// `Ok(None)`: no complete line yet. `Err`: this line was bad (it is consumed, or skipped up to the
    /// next LF when overlong); call again to go on with the next one.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<ServerMessage>, DecodeError> {
        if self.greeting {
            match sniff(buf) {
                None => {}
                Some(true) => self.greeting = false,
                Some(false) => {
                    self.greeting = false;
                    return Err(DecodeError::OtherProtocol {
                        first: buf[..buf.len().min(FIRST_BYTES_KEPT)].to_vec(),
                    });
                }
            }
        }
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
            // Only on the first look at a line: a line trickling in is then searched from where the
            // last look stopped, so that every byte is examined a bounded number of times.
            if let Some(rest) = data_fields(&buf[..window]).filter(|_| self.scanned == 0) {
                if let Some((len, values)) = numbers_fast(rest, true, self.max_fields, u64::MAX) {
                    work::examined(4 + len + 1);
                    buf.advance(4 + len + 1);
                    return Ok(Some(ServerMessage::Data(values.into_vec())));
                }
                work::examined(rest.len().min(fast::FAST_BYTES));
            }
            match memchr::memchr(b'\n', &buf[self.scanned..window]) {
                Some(offset) => {
                    let lf = self.scanned + offset;
                    // The search up to the LF, then the line's parse.
                    work::examined(offset + 1 + lf);
                    self.scanned = 0;
                    let decoded = decode_server_line(&buf[..lf], self.max_fields);
                    buf.advance(lf + 1);
                    if let Some(msg) = decoded? {
                        return Ok(Some(msg));
                    }
                }
                None if buf.len() > self.max_line => {
                    work::examined(window - self.scanned);
                    self.scanned = 0;
                    self.discarding = true;
                    return Err(DecodeError::LineTooLong { max: self.max_line });
                }
                None => {
                    work::examined(window - self.scanned);
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::fast::*;
    use super::*;

    /// Decodes `input` fed `step` bytes at a time; returns the messages and the bytes examined.
    fn trickle(input: &[u8], step: usize) -> (Vec<ServerMessage>, usize) {
        work::EXAMINED.with(|c| c.set(0));
        let mut codec = ClientCodec::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in input.chunks(step) {
            buf.extend_from_slice(chunk);
            while let Some(msg) = codec.decode(&mut buf).unwrap() {
                out.push(msg);
            }
        }
        (out, work::EXAMINED.with(|c| c.get()))
    }

    #[test]
    fn the_first_bytes_of_other_protocols_are_not_meter161() {
        for ours in [&b"HELLO 2\r\n"[..], b"  \r\n\thead nsec\n", b"DATA 1 2\r\n", b"ok\n"] {
            assert_eq!(sniff(ours), Some(true), "{:?}", ours.escape_ascii().to_string());
        }
        for unsure in [&b""[..], b" \r\n", b"H", b"hel", b"HELLO", b"  DAT"] {
            assert_eq!(sniff(unsure), None, "{:?}", unsure.escape_ascii().to_string());
        }
        let others: [&[u8]; 7] = [
            b"\0\0\0\x1bHMONSupportedProtocols=2", // an HMON frame
            b"\xff\xff\xff\xff\xff\xff\xff\xff",   // an smon resync
            b"\x01\0\0\0\0",                       // an rvOS host-transport frame
            b"\0\x01\0\x02\0",                     // a Mono agent's Hello
            b"HTTP/1.1 400 Bad Request\r\n",
            b"HELLOS 2\r\n",
            b"HELLO_",
        ];
        for other in others {
            assert_eq!(sniff(other), Some(false), "{:?}", other.escape_ascii().to_string());
        }
    }

    /// Issue 45: a stream that is not meter161 is said to be so once, before any line of it; a codec that does
    /// not check (or a stream that starts right) decodes as before.
    #[test]
    fn a_codec_checking_the_greeting_names_another_protocol_once() {
        let mut codec = ClientCodec::default().checking_greeting();
        let input = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n";
        let mut buf = BytesMut::from(&input[..]);
        let first = b"HTTP/1.1 400 Bad Request".to_vec();
        assert_eq!(codec.decode(&mut buf), Err(DecodeError::OtherProtocol { first }));
        assert_eq!(buf.len(), input.len(), "nothing consumed");
        assert!(
            matches!(codec.decode(&mut buf), Ok(Some(ServerMessage::Unknown { .. }))),
            "then lines as usual"
        );
        let mut plain = ClientCodec::default();
        let mut buf = BytesMut::from(&b"HTTP/1.1 400 Bad Request\r\n"[..]);
        assert!(matches!(plain.decode(&mut buf), Ok(Some(ServerMessage::Unknown { .. }))));
        // Checked once, on the first word, however it is split: a later line is a line like any other.
        let mut codec = ClientCodec::default().checking_greeting();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in [&b"\r\nHE"[..], b"LLO 2\r\n", b"HTTP/1.1\r\n"] {
            buf.extend_from_slice(piece);
            while let Some(msg) = codec.decode(&mut buf).unwrap() {
                got.push(msg);
            }
        }
        assert_eq!(got, [ServerMessage::Hello(2), ServerMessage::Unknown("HTTP/1.1".into())]);
    }

    #[test]
    fn a_longest_line_trickled_a_byte_at_a_time_costs_a_small_constant_times_the_whole() {
        // The longest line the default limits accept: DATA and 255 fields of 15 digits (4085 bytes).
        let mut line = b"DATA".to_vec();
        for i in 0..255u64 {
            line.extend_from_slice(format!(" {:015}", i * 1_000_000_007).as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        assert!(line.len() <= DEFAULT_MAX_LINE);
        for input in [line.clone(), b"HEAD nsec kinsns\r\n".repeat(200)] {
            let (whole, whole_work) = trickle(&input, input.len());
            let (trickled, trickled_work) = trickle(&input, 1);
            assert_eq!(whole, trickled);
            let ratio = trickled_work as f64 / whole_work as f64;
            eprintln!(
                "figure: {} bytes trickled a byte per read examine {ratio:.1}x the bytes of one read",
                input.len()
            );
            assert!(trickled_work <= 3 * whole_work, "{trickled_work} bytes examined against {whole_work}");
        }
    }

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
