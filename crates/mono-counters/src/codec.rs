//! Sans-IO encoding and decoding for both directions, plus thin `tokio_util::codec` impls.
//!
//! Decoders follow the `tokio_util` contract: `Ok(None)` means "need more bytes" and consumes nothing;
//! a complete message is removed from the buffer. Messages have no length prefix, so a decoder parses
//! from the start of the buffer each time and gives up with [`DecodeError::MessageTooLarge`] once an
//! incomplete message exceeds [`Limits::max_message_len`]. Every length and count is checked against
//! its limit before anything is allocated for it.

use bytes::{Buf, BufMut, BytesMut};

use crate::error::{DecodeError, EncodeError, Error};
use crate::message::*;

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

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Incomplete> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, Incomplete> {
        Ok(self.array::<1>()?[0])
    }

    fn i16(&mut self) -> Result<i16, Incomplete> {
        Ok(i16::from_le_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, Incomplete> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, Incomplete> {
        Ok(i64::from_le_bytes(self.array()?))
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
    opcodes: RequestOpcodes,
    /// Counter types by index (indexes are small and dense: agents count them up from 0).
    types: Vec<Option<CounterType>>,
    /// The layout of the last Sampling message, see [`Shape`].
    shape: Shape,
}

/// The `[index][size]` layout of the last Sampling message.
///
/// Walking `[index][size][bytes]` values is a chain of dependent loads (each value's position comes
/// from the previous size), which makes it slow. Consecutive samples usually have the same layout, so
/// the decoder first decodes the next message as if it had the last layout, reading at known offsets,
/// and gives up at the first `[index][size]` (or terminator) that does not match; then it walks the
/// chain. Both paths accept exactly the same messages and decode them to the same values; the
/// layout is forgotten whenever a type is learnt.
#[derive(Debug, Clone, Default)]
struct Shape {
    /// Per value: the expected `[index][size]` as one little-endian u32, and how to read the bytes.
    entries: Vec<(u32, Slot)>,
    /// The whole message's length: opcode, timestamp, values, terminator.
    len: usize,
}

#[derive(Debug, Clone, Copy)]
#[repr(u8)]
enum Slot {
    Int,
    Long,
    Double,
    Word32,
    Word64,
    /// The size is the high half of the entry's `[index][size]`.
    Raw,
}

impl Shape {
    fn record(&mut self, values: &[SampleValue]) {
        self.entries.clear();
        self.len = 9 + 2;
        for v in values {
            let slot = match &v.data {
                ValueData::Typed(CounterValue::Int(_)) => Slot::Int,
                ValueData::Typed(CounterValue::Long(_)) => Slot::Long,
                ValueData::Typed(CounterValue::Double(_)) => Slot::Double,
                ValueData::Typed(CounterValue::Word32(_)) => Slot::Word32,
                ValueData::Typed(CounterValue::Word64(_)) => Slot::Word64,
                ValueData::Raw(_) => Slot::Raw,
            };
            let size = v.data.size();
            self.entries.push((u32::from(v.index as u16) | (u32::from(size as u16) << 16), slot));
            self.len += 4 + size;
        }
    }

    /// The sample at the front of `buf` if it has exactly this layout.
    fn decode(&self, buf: &[u8]) -> Option<(Sample, usize)> {
        if self.entries.is_empty() {
            return None;
        }
        let bytes = buf.get(..self.len)?;
        if bytes.first() != Some(&agent_op::SAMPLING) {
            return None;
        }
        let mut values = Vec::with_capacity(self.entries.len());
        let mut at = 9;
        for &(head, slot) in &self.entries {
            if u32::from_le_bytes(array(bytes, at)?) != head {
                return None;
            }
            at += 4;
            let (value, size) = match slot {
                Slot::Int => (CounterValue::Int(i32::from_le_bytes(array(bytes, at)?)), 4),
                Slot::Long => (CounterValue::Long(i64::from_le_bytes(array(bytes, at)?)), 8),
                Slot::Double => (CounterValue::Double(f64::from_le_bytes(array(bytes, at)?)), 8),
                Slot::Word32 => (CounterValue::Word32(i32::from_le_bytes(array(bytes, at)?)), 4),
                Slot::Word64 => (CounterValue::Word64(i64::from_le_bytes(array(bytes, at)?)), 8),
                Slot::Raw => {
                    let size = (head >> 16) as usize;
                    let raw = bytes.get(at..at + size)?.to_vec();
                    values.push(SampleValue { index: head as u16 as i16, data: ValueData::Raw(raw) });
                    at += size;
                    continue;
                }
            };
            values.push(SampleValue { index: head as u16 as i16, data: ValueData::Typed(value) });
            at += size;
        }
        if array(bytes, at)? != [0xff, 0xff] {
            return None;
        }
        let timestamp = i64::from_le_bytes(array(bytes, 1)?);
        Some((Sample { timestamp, values }, self.len))
    }
}

fn array<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at + N)?.try_into().ok()
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
            }
            self.types[i] = Some(header.kind);
        }
        self.shape = Shape::default();
    }

    /// Decodes one agent message from the front of `buf`; `Ok(None)` means more bytes are needed.
    pub fn decode_message(&mut self, buf: &mut BytesMut) -> Result<Option<AgentMessage>, DecodeError> {
        if let Some((sample, len)) = self.shape.decode(buf) {
            buf.advance(len);
            return Ok(Some(AgentMessage::Sampling(sample)));
        }
        let limits = self.limits;
        let types = &self.types;
        let msg = decode_with(buf, &limits, |c| parse_agent_message(c, &limits, types))?;
        match &msg {
            Some(AgentMessage::Hello(hello)) => {
                self.types.clear();
                hello.headers.iter().for_each(|h| self.learn(h));
            }
            Some(AgentMessage::Add(AddResponse::Ok(h))) => self.learn(h),
            Some(AgentMessage::Sampling(sample)) => self.shape.record(&sample.values),
            _ => {}
        }
        Ok(msg)
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
    opcodes: RequestOpcodes,
}

impl AgentCodec {
    /// A codec with the given limits and request numbering.
    pub fn new(limits: Limits, opcodes: RequestOpcodes) -> Self {
        AgentCodec { limits, opcodes }
    }

    /// Decodes one request from the front of `buf`; `Ok(None)` means more bytes are needed.
    ///
    /// An unknown command byte decodes as [`InspectorMessage::Unknown`] and consumes only that byte,
    /// as the real agent does.
    pub fn decode_message(&self, buf: &mut BytesMut) -> Result<Option<InspectorMessage>, DecodeError> {
        let (limits, ops) = (self.limits, self.opcodes);
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

impl tokio_util::codec::Decoder for InspectorCodec {
    type Item = AgentMessage;
    type Error = Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<AgentMessage>, Error> {
        Ok(self.decode_message(src)?)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<AgentMessage>, Error> {
        Ok(self.decode_message_eof(src)?)
    }
}

impl tokio_util::codec::Encoder<InspectorMessage> for InspectorCodec {
    type Error = Error;

    fn encode(&mut self, item: InspectorMessage, dst: &mut BytesMut) -> Result<(), Error> {
        Ok(encode_inspector_message(&item, self.opcodes, dst)?)
    }
}

impl tokio_util::codec::Decoder for AgentCodec {
    type Item = InspectorMessage;
    type Error = Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<InspectorMessage>, Error> {
        Ok(self.decode_message(src)?)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<InspectorMessage>, Error> {
        match self.decode_message(src)? {
            None if !src.is_empty() => Err(DecodeError::Truncated { buffered: src.len() }.into()),
            other => Ok(other),
        }
    }
}

impl tokio_util::codec::Encoder<AgentMessage> for AgentCodec {
    type Error = Error;

    fn encode(&mut self, item: AgentMessage, dst: &mut BytesMut) -> Result<(), Error> {
        Ok(encode_agent_message(&item, dst)?)
    }
}

impl tokio_util::codec::Encoder<&Sample> for AgentCodec {
    type Error = Error;

    fn encode(&mut self, item: &Sample, dst: &mut BytesMut) -> Result<(), Error> {
        Ok(encode_sample(item, dst)?)
    }
}
