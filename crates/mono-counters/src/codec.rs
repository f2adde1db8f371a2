//! Sans-IO encoding and decoding for both directions (the tokio-util impls are in `tokio_codec.rs`).
//!
//! Decoders follow the `tokio_util` contract: `Ok(None)` means "need more bytes" and consumes nothing;
//! a complete message is removed from the buffer. Messages have no length prefix, so a decoder first walks
//! the message's structure as far as the bytes go and remembers where it stopped (`scan.rs`): the parser
//! runs once the whole message is there, so a message trickling in costs a small constant times its size.
//! A message longer than [`Limits::max_message_len`] is a [`DecodeError::MessageTooLarge`]. Every length
//! and count is checked against its limit before anything is allocated for it.

use byteorder::{ByteOrder, LittleEndian as LE};
use bytes::{Buf, BufMut, BytesMut};

mod fast;
mod scan;

use fast::{le, Kind, Shape};
use scan::Scan;

use crate::error::{DecodeError, EncodeError};
use crate::message::*;

/// Counts the bytes the decoders examine, in this crate's unit tests only (the linear-decoding test).
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

/// Bounds on what a decoder accepts. The defaults are generous for real agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest string, in bytes.
    pub max_string_len: usize,
    /// Most headers in one Hello.
    pub max_headers: usize,
    /// Most values in one Sampling message.
    pub max_values: usize,
    /// Most entries in one List response.
    pub max_list_entries: usize,
    /// Largest message, in bytes.
    pub max_message_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_string_len: 1024,
            max_headers: 4096,
            max_values: 4096,
            max_list_entries: 16384,
            max_message_len: 1 << 20,
        }
    }
}

/// Parsing ran out of bytes: the message is incomplete.
struct Incomplete;

enum Fail {
    Incomplete,
    Bad(DecodeError),
}

impl From<Incomplete> for Fail {
    fn from(_: Incomplete) -> Self {
        Fail::Incomplete
    }
}

impl From<DecodeError> for Fail {
    fn from(e: DecodeError) -> Self {
        Fail::Bad(e)
    }
}

type Parse<T> = Result<T, Fail>;

/// A little-endian reader over a borrowed buffer that reports running out as [`Incomplete`].
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Incomplete> {
        let end = self.pos.checked_add(n).ok_or(Incomplete)?;
        let bytes = self.buf.get(self.pos..end).ok_or(Incomplete)?;
        self.pos = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, Incomplete> {
        Ok(self.take(1)?[0])
    }

    fn i16(&mut self) -> Result<i16, Incomplete> {
        Ok(LE::read_i16(self.take(2)?))
    }

    fn i32(&mut self) -> Result<i32, Incomplete> {
        Ok(LE::read_i32(self.take(4)?))
    }

    fn i64(&mut self) -> Result<i64, Incomplete> {
        Ok(LE::read_i64(self.take(8)?))
    }

    /// `[length: int][bytes]`; `None` for the null string (-1).
    fn string(&mut self, field: &'static str, limits: &Limits) -> Parse<Option<String>> {
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(DecodeError::NegativeStringLength { field, len }.into());
        }
        if len as usize > limits.max_string_len {
            return Err(DecodeError::StringTooLong { field, len, max: limits.max_string_len }.into());
        }
        let bytes = self.take(len as usize)?;
        let s = std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8 { field })?;
        Ok(Some(s.to_owned()))
    }

    fn required_string(&mut self, field: &'static str, limits: &Limits) -> Parse<String> {
        self.string(field, limits)?.ok_or(Fail::Bad(DecodeError::NullString { field }))
    }

    fn header(&mut self, limits: &Limits) -> Parse<Header> {
        let category = Category::from_raw(self.i32()?);
        let name = self.required_string("header name", limits)?;
        let kind = CounterType::from_raw(self.i32()?);
        let unit = Unit::from_raw(self.i32()?);
        let variance = Variance::from_raw(self.i32()?);
        let index = self.i16()?;
        Ok(Header { category, name, kind, unit, variance, index })
    }
}

/// Runs `parse` on `buf`; on success removes the consumed bytes. Enforces the message size limit.
fn decode_with<T>(
    buf: &mut BytesMut,
    limits: &Limits,
    parse: impl FnOnce(&mut Cursor<'_>) -> Parse<T>,
) -> Result<Option<T>, DecodeError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut cursor = Cursor::new(buf);
    match parse(&mut cursor) {
        Ok(msg) => {
            let used = cursor.pos;
            buf.advance(used);
            Ok(Some(msg))
        }
        Err(Fail::Bad(e)) => Err(e),
        Err(Fail::Incomplete) if buf.len() > limits.max_message_len => {
            Err(DecodeError::MessageTooLarge { max: limits.max_message_len })
        }
        Err(Fail::Incomplete) => Ok(None),
    }
}

fn kind_name(kind: CounterType) -> &'static str {
    kind.label().unwrap_or("raw")
}

/// `N` bytes at `at` as an array, for std's `from_le_bytes`: the Sampling loops ([`parse_values`] and
/// `fast.rs`) keep std's conversions, which cost fewer instructions there than `byteorder`'s slice reads
/// (`cargo xtask bench --table`, the `mono sampling` rows).
fn fixed<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], Incomplete> {
    let bytes = buf.get(at..at + N).ok_or(Incomplete)?;
    let mut out = [0; N];
    out.copy_from_slice(bytes);
    Ok(out)
}

/// The `[index][size][bytes]* [ff ff]` list of a Sampling message. This is the hot loop of a busy
/// inspector, so it reads straight from the slice; each value's size is checked against its counter's
/// type (INT 4, LONG/DOUBLE 8, WORD 4 or 8, unknown types any size kept raw) before its bytes are read.
fn parse_values(
    c: &mut Cursor<'_>,
    limits: &Limits,
    types: &[Option<CounterType>],
) -> Parse<Vec<SampleValue>> {
    let buf = c.buf;
    let mut pos = c.pos;
    let mut values = Vec::with_capacity(types.len().min(64));
    loop {
        let index = i16::from_le_bytes(fixed(buf, pos)?);
        if index == END_OF_VALUES {
            c.pos = pos + 2;
            return Ok(values);
        }
        if index < 0 {
            return Err(DecodeError::InvalidIndex(index).into());
        }
        if values.len() == limits.max_values {
            return Err(DecodeError::TooManyValues { max: limits.max_values }.into());
        }
        let kind = types.get(index as usize).copied().flatten().ok_or(DecodeError::UnknownIndex(index))?;
        let size = i16::from_le_bytes(fixed(buf, pos + 2)?);
        let at = pos + 4;
        let bad = || Fail::Bad(DecodeError::BadValueSize { index, size, kind: kind_name(kind) });
        let value = match kind {
            CounterType::Int if size == 4 => CounterValue::Int(i32::from_le_bytes(fixed(buf, at)?)),
            CounterType::Long if size == 8 => CounterValue::Long(i64::from_le_bytes(fixed(buf, at)?)),
            CounterType::Double if size == 8 => CounterValue::Double(f64::from_le_bytes(fixed(buf, at)?)),
            CounterType::Word if size == 8 => CounterValue::Word64(i64::from_le_bytes(fixed(buf, at)?)),
            CounterType::Word if size == 4 => CounterValue::Word32(i32::from_le_bytes(fixed(buf, at)?)),
            CounterType::Unknown(_) if size >= 0 => {
                let raw = buf.get(at..at + size as usize).ok_or(Incomplete)?.to_vec();
                pos = at + size as usize;
                values.push(SampleValue { index, data: ValueData::Raw(raw) });
                continue;
            }
            _ => return Err(bad()),
        };
        pos = at + size as usize;
        values.push(SampleValue { index, data: ValueData::Typed(value) });
    }
}

/// The inspector's decoder for what the agent sends, and its encoder for requests.
///
/// It remembers each counter's type, announced by Hello and by Add responses, because a Sampling value
/// is `[index][size][bytes]` and only the type says how to read the bytes. Indexes are never reused by
/// an agent, so announced types are kept for the whole connection.
#[derive(Debug, Clone, Default)]
pub struct InspectorCodec {
    limits: Limits,
    pub(crate) opcodes: RequestOpcodes,
    /// Counter types by index (indexes are small and dense: agents count them up from 0).
    types: Vec<Option<CounterType>>,
    /// The same types as [`Kind`] codes (`Kind::NONE` for an index never announced), for the
    /// Sampling hot loop.
    kinds: Vec<u8>,
    /// The layout of the last Sampling message, see [`Shape`].
    shape: Shape,
    /// How far the message at the front of the buffer has been walked.
    scan: Scan,
}

impl InspectorCodec {
    /// A codec with the given limits, sending the real agent's request opcodes.
    pub fn new(limits: Limits) -> Self {
        InspectorCodec { limits, ..Self::default() }
    }

    /// Sends the gist's request opcodes (List 1, Add 2, Remove 3) instead.
    pub fn with_opcodes(mut self, opcodes: RequestOpcodes) -> Self {
        self.opcodes = opcodes;
        self
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Teaches the decoder a counter's type (as a Hello or an Add response does).
    pub fn learn(&mut self, header: &Header) {
        if let Ok(i) = usize::try_from(header.index) {
            if self.types.len() <= i {
                self.types.resize(i + 1, None);
                self.kinds.resize(i + 1, Kind::NONE);
            }
            self.types[i] = Some(header.kind);
            self.kinds[i] = Kind::of(header.kind);
        }
        self.shape = Shape::default();
    }

    /// Decodes one agent message from the front of `buf`; `Ok(None)` means more bytes are needed.
    pub fn decode_message(&mut self, buf: &mut BytesMut) -> Result<Option<AgentMessage>, DecodeError> {
        // A message is usually whole when its first bytes arrive: parse it at once. Only when it is not does the
        // scan take over, walking each byte once as more arrive, until the parser can run once more. So a message
        // costs one parse when whole, and at most three walks of it however it trickles in.
        if self.scan.is_fresh() {
            let before = buf.len();
            let decoded = self.decode_whole(buf);
            work::examined(before);
            if !matches!(decoded, Ok(None)) {
                return decoded;
            }
        }
        match self.scan.complete(buf, &self.limits, self.opcodes, &self.kinds) {
            Ok(false) => return Ok(None),
            Ok(true) => self.scan = Scan::default(),
            Err(e) => {
                self.scan = Scan::default();
                return Err(e);
            }
        }
        let before = buf.len();
        let decoded = self.decode_whole(buf);
        work::examined(before - buf.len());
        debug_assert!(!matches!(decoded, Ok(None)), "the scan saw a whole message the parser did not");
        decoded
    }

    /// Decodes the message at the front of `buf`, which the scan saw whole.
    fn decode_whole(&mut self, buf: &mut BytesMut) -> Result<Option<AgentMessage>, DecodeError> {
        // The hand-tuned Sampling path (`fast.rs`), unless the portable build asks for the reference.
        if buf.first() == Some(&agent_op::SAMPLING) && fast::ENABLED {
            return self.decode_sampling(buf);
        }
        let limits = self.limits;
        let types = &self.types;
        let msg = decode_with(buf, &limits, |c| parse_agent_message(c, &limits, types))?;
        match &msg {
            Some(AgentMessage::Hello(hello)) => {
                self.types.clear();
                self.kinds.clear();
                hello.headers.iter().for_each(|h| self.learn(h));
            }
            Some(AgentMessage::Add(AddResponse::Ok(h))) => self.learn(h),
            _ => {}
        }
        Ok(msg)
    }

    /// A Sampling message (the opcode is at the front of `buf`): the same result as
    /// `decode_with(parse_agent_message)`, through [`Shape`].
    fn decode_sampling(&mut self, buf: &mut BytesMut) -> Result<Option<AgentMessage>, DecodeError> {
        let sample = if self.shape.matches(buf) {
            self.shape.sample(buf)
        } else {
            let walked = if buf.len() < 9 {
                Err(Fail::Incomplete)
            } else {
                self.shape.walk(buf, &self.limits, &self.kinds)
            };
            match walked {
                Ok(values) => Sample { timestamp: i64::from_le_bytes(le(buf, 1)), values },
                Err(Fail::Bad(e)) => return Err(e),
                Err(Fail::Incomplete) if buf.len() > self.limits.max_message_len => {
                    return Err(DecodeError::MessageTooLarge { max: self.limits.max_message_len })
                }
                Err(Fail::Incomplete) => return Ok(None),
            }
        };
        buf.advance(self.shape.len);
        Ok(Some(AgentMessage::Sampling(sample)))
    }

    /// Like [`InspectorCodec::decode_message`] at the end of the stream: leftover bytes are a
    /// [`DecodeError::Truncated`] message.
    pub fn decode_message_eof(&mut self, buf: &mut BytesMut) -> Result<Option<AgentMessage>, DecodeError> {
        match self.decode_message(buf)? {
            Some(msg) => Ok(Some(msg)),
            None if buf.is_empty() => Ok(None),
            None => Err(DecodeError::Truncated { buffered: buf.len() }),
        }
    }
}

fn parse_agent_message(
    c: &mut Cursor<'_>,
    limits: &Limits,
    types: &[Option<CounterType>],
) -> Parse<AgentMessage> {
    let op = c.u8()?;
    Ok(match op {
        agent_op::HELLO => {
            let version = c.i16()?;
            if version != PROTOCOL_VERSION {
                return Err(DecodeError::UnsupportedVersion(version).into());
            }
            let count = c.i16()?;
            if count < 0 {
                return Err(DecodeError::NegativeCount(count).into());
            }
            if count as usize > limits.max_headers {
                return Err(DecodeError::TooManyHeaders { count, max: limits.max_headers }.into());
            }
            let mut headers = Vec::with_capacity(count as usize);
            for _ in 0..count {
                headers.push(c.header(limits)?);
            }
            AgentMessage::Hello(Hello { version, headers })
        }
        agent_op::LIST => {
            let mut entries = Vec::new();
            while let Some(category) = c.string("list category", limits)? {
                if entries.len() == limits.max_list_entries {
                    return Err(DecodeError::TooManyListEntries { max: limits.max_list_entries }.into());
                }
                let name = c.required_string("list name", limits)?;
                entries.push(CounterName { category, name });
            }
            AgentMessage::List(entries)
        }
        agent_op::ADD => {
            let status = c.u8()?;
            AgentMessage::Add(match Status::from_byte(status) {
                Some(Status::Ok) => AddResponse::Ok(c.header(limits)?),
                Some(Status::Nok) => AddResponse::Nok,
                Some(Status::NotFound) => AddResponse::NotFound,
                Some(Status::Existing) => AddResponse::Existing,
                None => return Err(DecodeError::UnknownStatus { response: "add", status }.into()),
            })
        }
        agent_op::REMOVE => {
            let status = c.u8()?;
            match Status::from_byte(status) {
                Some(s) => AgentMessage::Remove(s),
                None => return Err(DecodeError::UnknownStatus { response: "remove", status }.into()),
            }
        }
        agent_op::SAMPLING => {
            let timestamp = c.i64()?;
            AgentMessage::Sampling(Sample { timestamp, values: parse_values(c, limits, types)? })
        }
        other => return Err(DecodeError::UnknownAgentOpcode(other).into()),
    })
}

/// The agent's decoder for inspector requests, and its encoder for what it sends.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentCodec {
    limits: Limits,
    pub(crate) opcodes: RequestOpcodes,
    /// How far the request at the front of the buffer has been walked (`None`: not started).
    scan: Option<Scan>,
}

impl AgentCodec {
    /// A codec with the given limits and request numbering.
    pub fn new(limits: Limits, opcodes: RequestOpcodes) -> Self {
        AgentCodec { limits, opcodes, scan: None }
    }

    /// Decodes one request from the front of `buf`; `Ok(None)` means more bytes are needed.
    ///
    /// An unknown command byte decodes as [`InspectorMessage::Unknown`] and consumes only that byte,
    /// as the real agent does.
    pub fn decode_message(&mut self, buf: &mut BytesMut) -> Result<Option<InspectorMessage>, DecodeError> {
        let (limits, ops) = (self.limits, self.opcodes);
        let scan = self.scan.get_or_insert_with(Scan::request);
        let whole = scan.complete(buf, &limits, ops, &[]);
        if !matches!(whole, Ok(false)) {
            self.scan = None;
        }
        if !whole? {
            return Ok(None);
        }
        decode_with(buf, &limits, |c| {
            let op = c.u8()?;
            Ok(if op == ops.list() {
                InspectorMessage::List
            } else if op == ops.add() {
                let category = c.required_string("add category", &limits)?;
                let name = c.required_string("add name", &limits)?;
                InspectorMessage::Add(CounterName { category, name })
            } else if op == ops.remove() {
                InspectorMessage::Remove(c.i16()?)
            } else if op == GOOD_BYE {
                InspectorMessage::GoodBye
            } else {
                InspectorMessage::Unknown(op)
            })
        })
    }
}

fn put_string(dst: &mut BytesMut, s: Option<&str>) -> Result<(), EncodeError> {
    match s {
        None => dst.put_i32_le(-1),
        Some(s) => {
            let len = i32::try_from(s.len()).map_err(|_| EncodeError::StringTooLong(s.len()))?;
            dst.put_i32_le(len);
            dst.put_slice(s.as_bytes());
        }
    }
    Ok(())
}

fn put_header(dst: &mut BytesMut, h: &Header) -> Result<(), EncodeError> {
    dst.put_i32_le(h.category.raw());
    put_string(dst, Some(&h.name))?;
    dst.put_i32_le(h.kind.raw());
    dst.put_i32_le(h.unit.raw());
    dst.put_i32_le(h.variance.raw());
    dst.put_i16_le(h.index);
    Ok(())
}

/// Appends the wire form of an agent message to `dst`. On error `dst` may hold part of the message.
pub fn encode_agent_message(msg: &AgentMessage, dst: &mut BytesMut) -> Result<(), EncodeError> {
    match msg {
        AgentMessage::Hello(hello) => {
            let count = i16::try_from(hello.headers.len())
                .map_err(|_| EncodeError::TooManyHeaders(hello.headers.len()))?;
            dst.put_u8(agent_op::HELLO);
            dst.put_i16_le(hello.version);
            dst.put_i16_le(count);
            for h in &hello.headers {
                put_header(dst, h)?;
            }
        }
        AgentMessage::List(entries) => {
            dst.put_u8(agent_op::LIST);
            for e in entries {
                put_string(dst, Some(&e.category))?;
                put_string(dst, Some(&e.name))?;
            }
            put_string(dst, None)?;
        }
        AgentMessage::Add(resp) => {
            dst.put_u8(agent_op::ADD);
            dst.put_u8(resp.status().byte());
            if let AddResponse::Ok(h) = resp {
                put_header(dst, h)?;
            }
        }
        AgentMessage::Remove(status) => {
            dst.put_u8(agent_op::REMOVE);
            dst.put_u8(status.byte());
        }
        AgentMessage::Sampling(sample) => encode_sample(sample, dst)?,
    }
    Ok(())
}

/// Appends a Sampling message to `dst`.
pub fn encode_sample(sample: &Sample, dst: &mut BytesMut) -> Result<(), EncodeError> {
    dst.reserve(11 + sample.values.len() * 12);
    dst.put_u8(agent_op::SAMPLING);
    dst.put_i64_le(sample.timestamp);
    for v in &sample.values {
        if v.index < 0 {
            return Err(EncodeError::InvalidIndex(v.index));
        }
        dst.put_i16_le(v.index);
        match &v.data {
            ValueData::Typed(t) => {
                dst.put_i16_le(t.size() as i16);
                match *t {
                    CounterValue::Int(x) | CounterValue::Word32(x) => dst.put_i32_le(x),
                    CounterValue::Long(x) | CounterValue::Word64(x) => dst.put_i64_le(x),
                    CounterValue::Double(x) => dst.put_f64_le(x),
                }
            }
            ValueData::Raw(bytes) => {
                let size = i16::try_from(bytes.len()).map_err(|_| EncodeError::ValueTooLong(bytes.len()))?;
                dst.put_i16_le(size);
                dst.put_slice(bytes);
            }
        }
    }
    dst.put_i16_le(END_OF_VALUES);
    Ok(())
}

/// Appends the wire form of an inspector request to `dst`, with the given request numbering.
pub fn encode_inspector_message(
    msg: &InspectorMessage,
    opcodes: RequestOpcodes,
    dst: &mut BytesMut,
) -> Result<(), EncodeError> {
    match msg {
        InspectorMessage::List => dst.put_u8(opcodes.list()),
        InspectorMessage::Add(name) => {
            dst.put_u8(opcodes.add());
            put_string(dst, Some(&name.category))?;
            put_string(dst, Some(&name.name))?;
        }
        InspectorMessage::Remove(index) => {
            dst.put_u8(opcodes.remove());
            dst.put_i16_le(*index);
        }
        InspectorMessage::GoodBye => dst.put_u8(GOOD_BYE),
        InspectorMessage::Unknown(op) => dst.put_u8(*op),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `wire` fed `step` bytes at a time; returns the messages, the bytes examined and the time taken.
    fn trickle(wire: &[u8], step: usize) -> (Vec<AgentMessage>, usize, std::time::Duration) {
        work::EXAMINED.with(|c| c.set(0));
        let started = std::time::Instant::now();
        let mut codec = InspectorCodec::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in wire.chunks(step) {
            buf.extend_from_slice(chunk);
            while let Some(msg) = codec.decode_message(&mut buf).unwrap() {
                out.push(msg);
            }
        }
        (out, work::EXAMINED.with(|c| c.get()), started.elapsed())
    }

    #[test]
    fn a_largest_hello_and_sample_trickled_in_cost_a_small_constant_times_the_whole() {
        // A Hello of 4,000 counters with long names (about 1 MiB, the default message limit), and a Sampling
        // message with a value for each.
        let headers: Vec<Header> = (0..4000)
            .map(|i| Header { name: format!("{i:0>230}"), kind: CounterType::Long, ..header(i) })
            .collect();
        let mut wire = BytesMut::new();
        encode_agent_message(&AgentMessage::Hello(Hello { version: PROTOCOL_VERSION, headers }), &mut wire)
            .unwrap();
        let hello_len = wire.len();
        assert!(hello_len <= Limits::default().max_message_len && hello_len > 1_000_000, "{hello_len}");
        let values = (0..4000)
            .map(|i| SampleValue { index: i, data: ValueData::Typed(CounterValue::Long(i.into())) })
            .collect();
        encode_sample(&Sample { timestamp: 7, values }, &mut wire).unwrap();

        let (whole, whole_work, whole_time) = trickle(&wire, wire.len());
        for step in [1, 20] {
            let (trickled, work, time) = trickle(&wire, step);
            assert_eq!(trickled, whole);
            eprintln!(
                "figure: {} bytes in {step}-byte reads: {:.1}x the bytes examined, {:.1}x the time of one read",
                wire.len(),
                work as f64 / whole_work as f64,
                time.as_secs_f64() / whole_time.as_secs_f64()
            );
            assert!(work <= 3 * whole_work, "{work} bytes examined against {whole_work}");
        }
    }

    /// xorshift64, for reproducible inputs.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const KINDS: [CounterType; 6] = [
        CounterType::Int,
        CounterType::Long,
        CounterType::Word,
        CounterType::Double,
        CounterType::Unknown(7),
        CounterType::Word,
    ];

    fn header(index: i16) -> Header {
        Header {
            category: Category::Jit,
            name: format!("c{index}"),
            kind: KINDS[index as usize % KINDS.len()],
            unit: Unit::None,
            variance: Variance::Variable,
            index,
        }
    }

    /// A Sampling message: `layout` is the `(index, size)` list; sizes may not fit the type, and
    /// at most 16 bytes are written for a value (a larger size leaves it truncated).
    fn message(rng: &mut Rng, layout: &[(i16, i16)]) -> Vec<u8> {
        let mut out = vec![agent_op::SAMPLING];
        out.extend_from_slice(&(rng.next() as i64).to_le_bytes());
        for &(index, size) in layout {
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            (0..size.clamp(0, 16)).for_each(|_| out.push(rng.next() as u8));
        }
        out.extend_from_slice(&[0xff, 0xff]);
        out
    }

    fn fitting_size(rng: &mut Rng, index: i16) -> i16 {
        match KINDS[index as usize % KINDS.len()] {
            CounterType::Int => 4,
            CounterType::Long | CounterType::Double => 8,
            CounterType::Word => [4, 8][rng.below(2) as usize],
            _ => rng.below(13) as i16,
        }
    }

    fn layout(rng: &mut Rng, known: i16) -> Vec<(i16, i16)> {
        let len = rng.below(12) as usize;
        let mut layout: Vec<(i16, i16)> = (0..len)
            .map(|_| {
                let index = rng.below(known as u64) as i16;
                (index, fitting_size(rng, index))
            })
            .collect();
        // Sometimes a bad value: unknown or negative index, or a size that does not fit.
        if !layout.is_empty() && rng.below(4) == 0 {
            let at = rng.below(layout.len() as u64) as usize;
            layout[at] = match rng.below(5) {
                0 => (known + rng.below(3) as i16, 4),
                1 => (-2 - rng.below(100) as i16, 4),
                2 => (layout[at].0, -1 - rng.below(3) as i16),
                3 => (layout[at].0, [0, 1, 3, 5, 7, 9, 16][rng.below(7) as usize]),
                _ => (layout[at].0, i16::MAX),
            };
        }
        layout
    }

    /// What the reference path (`parse_agent_message`, one value after the other) gives, and the
    /// bytes it leaves.
    fn reference(codec: &InspectorCodec, bytes: &[u8]) -> (String, usize) {
        let mut buf = BytesMut::from(bytes);
        let limits = codec.limits;
        let got = decode_with(&mut buf, &limits, |c| parse_agent_message(c, &limits, &codec.types));
        (format!("{got:?}"), buf.len())
    }

    fn fast(codec: &mut InspectorCodec, bytes: &[u8]) -> (String, usize) {
        let mut buf = BytesMut::from(bytes);
        let got = codec.decode_message(&mut buf);
        // The next call brings another buffer, not more of this one: forget the walk of this one.
        codec.scan = Scan::default();
        (format!("{got:?}"), buf.len())
    }

    /// The layout path (repeated layout) and the walk (new layout) agree with the reference on
    /// valid messages, bad values (unknown or negative index, bad size), every truncation, and with
    /// small limits (values, message size), whatever layout the codec saw before.
    #[test]
    fn layout_path_and_walk_agree_with_the_reference() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let limit_sets = [
            Limits::default(),
            Limits { max_values: 3, ..Limits::default() },
            Limits { max_message_len: 40, ..Limits::default() },
        ];
        let mut checked = 0;
        for limits in limit_sets {
            let mut codec = InspectorCodec::new(limits);
            let known = 9;
            (0..known).for_each(|i| codec.learn(&header(i)));
            let mut previous = layout(&mut rng, known);
            for round in 0..600 {
                let next = if round % 3 == 0 { layout(&mut rng, known) } else { previous.clone() };
                let msg = message(&mut rng, &next);
                // Whole message, followed by other bytes, then cut at every offset (at a few of
                // them in most rounds).
                let mut followed = msg.clone();
                followed.extend_from_slice(&[agent_op::SAMPLING, 1, 2]);
                let cuts: Vec<usize> = if round % 3 == 0 {
                    (0..msg.len()).collect()
                } else {
                    (0..4).map(|_| rng.below(msg.len() as u64) as usize).collect()
                };
                for bytes in [&msg[..], &followed[..]].into_iter().chain(cuts.iter().map(|&n| &msg[..n])) {
                    // Prime the codec's layout with `previous` (when valid), then decode.
                    let primer = message(&mut rng, &previous);
                    let _ = fast(&mut codec, &primer);
                    let want = reference(&codec, bytes);
                    assert_eq!(fast(&mut codec, bytes), want, "{next:?} cut to {} bytes", bytes.len());
                    // Again, right after (the layout is now the message's own, when it decoded).
                    let want = reference(&codec, bytes);
                    assert_eq!(fast(&mut codec, bytes), want, "{next:?} again, {} bytes", bytes.len());
                    checked += 1;
                }
                previous = next;
            }
        }
        assert!(checked > 3_000, "{checked}");
    }

    /// A Hello or Add between samples changes the types: the layout must not be reused.
    #[test]
    fn learning_a_type_forgets_the_layout() {
        let mut rng = Rng(7);
        let mut codec = InspectorCodec::default();
        codec.learn(&header(0));
        let msg = message(&mut rng, &[(0, 4)]);
        assert!(matches!(codec.decode_message(&mut BytesMut::from(&msg[..])), Ok(Some(_))));
        codec.learn(&Header { kind: CounterType::Long, ..header(0) });
        let err = codec.decode_message(&mut BytesMut::from(&msg[..]));
        assert_eq!(err, Err(DecodeError::BadValueSize { index: 0, size: 4, kind: "long" }));
    }
}
