//! Where a message ends, found once however its bytes are split.
//!
//! Messages carry no length, so a decoder that parses from the first byte on every read re-parses a message
//! that trickles in once per read: a 300 KB Hello sent in 20-byte writes cost seconds of CPU. A [`Scan`]
//! walks the message's structure (lengths, counts, the end-of-values marker) as far as the bytes go and
//! remembers where it stopped; the decoders run their parser only once the scan has reached the end, so every
//! byte is examined a bounded number of times. The scan checks what the parser checks, in the same order, and
//! ends where the parser would find an error: the parser then reports it, at the same point of a cut message
//! as if it had parsed from the start.

use super::{agent_op, Kind, Limits, END_OF_VALUES};
use crate::error::DecodeError;
use crate::message::{RequestOpcodes, PROTOCOL_VERSION};

/// The part of a message the scan expects next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Step {
    /// The opcode of an agent message.
    #[default]
    AgentOp,
    /// The opcode of an inspector request.
    RequestOp,
    /// Hello's version.
    HelloVersion,
    /// Hello's header count.
    HelloCount,
    /// The rest of a Hello (or an Add response): this many headers.
    Headers(u16),
    /// Add's status byte.
    AddStatus,
    /// A List entry's category (a null string ends the list), after this many entries.
    ListCategory(usize),
    /// A List entry's name, after this many entries.
    ListName(usize),
    /// Sampling's timestamp.
    Timestamp,
    /// A Sampling value, or the end marker, after this many values.
    Value(usize),
    /// An Add request's category, then (`true`) its name.
    AddString { name: bool },
    /// This many more bytes, then the end.
    Fixed(usize),
    /// The message ends at `pos`.
    Done,
}

/// How far the current message has been walked.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Scan {
    pos: usize,
    step: Step,
}

/// What a step found: go on, the bytes ran out, or the parser will report an error here.
enum Found<T> {
    Ok(T),
    More,
    Bad,
}

/// `N` bytes at `at`, if the buffer has them.
fn field<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

impl Scan {
    /// Whether nothing of the current message has been walked yet.
    pub(super) fn is_fresh(&self) -> bool {
        self.pos == 0
    }

    /// A scan of an inspector request (the agent's side).
    pub(super) fn request() -> Self {
        Scan { pos: 0, step: Step::RequestOp }
    }

    /// Walks on through `buf` (the message starts at its first byte). `Ok(true)`: the whole message is there,
    /// or the parser will find an error within what is there; `Ok(false)`: more bytes are needed (the walk so
    /// far is kept). `kinds` are the inspector's counter types by index ([`Kind`] codes), to stop at a value
    /// the parser refuses.
    pub(super) fn complete(
        &mut self,
        buf: &[u8],
        limits: &Limits,
        ops: RequestOpcodes,
        kinds: &[u8],
    ) -> Result<bool, DecodeError> {
        let start = self.pos;
        let result = self.walk(buf, limits, ops, kinds);
        super::work::examined(self.pos.min(buf.len()).saturating_sub(start));
        match result {
            // An incomplete message already longer than allowed, as the parser would say.
            Ok(false) if buf.len() > limits.max_message_len => {
                Err(DecodeError::MessageTooLarge { max: limits.max_message_len })
            }
            other => other,
        }
    }

    fn walk(
        &mut self,
        buf: &[u8],
        limits: &Limits,
        ops: RequestOpcodes,
        kinds: &[u8],
    ) -> Result<bool, DecodeError> {
        loop {
            let at = self.pos;
            self.step = match self.step {
                Step::Done => return Ok(true),
                Step::Fixed(n) => {
                    if buf.len() < at + n {
                        return Ok(false);
                    }
                    self.pos += n;
                    Step::Done
                }
                Step::AgentOp => {
                    let Some([op]) = field(buf, at) else { return Ok(false) };
                    self.pos += 1;
                    match op {
                        agent_op::HELLO => Step::HelloVersion,
                        agent_op::LIST => Step::ListCategory(0),
                        agent_op::ADD => Step::AddStatus,
                        agent_op::REMOVE => Step::Fixed(1),
                        agent_op::SAMPLING => Step::Timestamp,
                        _ => Step::Done,
                    }
                }
                Step::RequestOp => {
                    let Some([op]) = field(buf, at) else { return Ok(false) };
                    self.pos += 1;
                    if op == ops.add() {
                        Step::AddString { name: false }
                    } else if op == ops.remove() {
                        Step::Fixed(2)
                    } else {
                        Step::Done
                    }
                }
                Step::HelloVersion => {
                    let Some(version) = field(buf, at).map(i16::from_le_bytes) else { return Ok(false) };
                    self.pos += 2;
                    if version == PROTOCOL_VERSION {
                        Step::HelloCount
                    } else {
                        Step::Done
                    }
                }
                Step::HelloCount => {
                    let Some(count) = field(buf, at).map(i16::from_le_bytes) else { return Ok(false) };
                    self.pos += 2;
                    match u16::try_from(count) {
                        Ok(count) if usize::from(count) <= limits.max_headers => Step::Headers(count),
                        _ => Step::Done,
                    }
                }
                Step::Headers(0) => Step::Done,
                Step::Headers(left) => match self.header(buf, limits) {
                    Found::Ok(()) => Step::Headers(left - 1),
                    Found::More => return Ok(false),
                    Found::Bad => Step::Done,
                },
                Step::AddStatus => {
                    let Some([status]) = field(buf, at) else { return Ok(false) };
                    self.pos += 1;
                    if status == 0 {
                        Step::Headers(1)
                    } else {
                        Step::Done
                    }
                }
                Step::ListCategory(entries) => match self.string(buf, limits) {
                    Found::More => return Ok(false),
                    // A null category ends the list.
                    Found::Ok(false) | Found::Bad => Step::Done,
                    Found::Ok(true) if entries == limits.max_list_entries => Step::Done,
                    Found::Ok(true) => Step::ListName(entries),
                },
                Step::ListName(entries) => match self.string(buf, limits) {
                    Found::More => return Ok(false),
                    Found::Ok(true) => Step::ListCategory(entries + 1),
                    Found::Ok(false) | Found::Bad => Step::Done,
                },
                Step::AddString { name } => match self.string(buf, limits) {
                    Found::More => return Ok(false),
                    Found::Ok(true) if !name => Step::AddString { name: true },
                    Found::Ok(_) | Found::Bad => Step::Done,
                },
                Step::Timestamp => {
                    if buf.len() < at + 8 {
                        return Ok(false);
                    }
                    self.pos += 8;
                    Step::Value(0)
                }
                Step::Value(values) => match Self::value(buf, at, values, limits, kinds) {
                    Found::Ok(Some(len)) => {
                        self.pos += len;
                        Step::Value(values + 1)
                    }
                    Found::Ok(None) => {
                        self.pos += 2;
                        Step::Done
                    }
                    Found::More => return Ok(false),
                    Found::Bad => Step::Done,
                },
            };
        }
    }

    /// One Sampling value at `at`, checked as the parser checks it: its length, or `None` for the end marker.
    fn value(buf: &[u8], at: usize, values: usize, limits: &Limits, kinds: &[u8]) -> Found<Option<usize>> {
        let Some(index) = field(buf, at).map(i16::from_le_bytes) else { return Found::More };
        if index == END_OF_VALUES {
            return Found::Ok(None);
        }
        let kind = usize::try_from(index).ok().and_then(|i| kinds.get(i).copied()).unwrap_or(Kind::NONE);
        if values == limits.max_values || kind == Kind::NONE {
            return Found::Bad;
        }
        let Some(size) = field(buf, at + 2).map(i16::from_le_bytes) else { return Found::More };
        let fits = match kind {
            Kind::INT => size == 4,
            Kind::LONG | Kind::DOUBLE => size == 8,
            Kind::WORD => size == 4 || size == 8,
            _ => size >= 0,
        };
        if !fits {
            return Found::Bad;
        }
        let len = 4 + size as usize;
        if buf.len() < at + len {
            return Found::More;
        }
        Found::Ok(Some(len))
    }

    /// Steps over a string: `Ok(false)` for the null string, `Ok(true)` for a string; `Bad` for a bad length
    /// or bytes that are not UTF-8.
    fn string(&mut self, buf: &[u8], limits: &Limits) -> Found<bool> {
        let Some(len) = field(buf, self.pos).map(i32::from_le_bytes) else { return Found::More };
        if len == -1 {
            self.pos += 4;
            return Found::Ok(false);
        }
        let len = match usize::try_from(len) {
            Ok(len) if len <= limits.max_string_len => len,
            _ => return Found::Bad,
        };
        let Some(bytes) = buf.get(self.pos + 4..self.pos + 4 + len) else { return Found::More };
        if std::str::from_utf8(bytes).is_err() {
            return Found::Bad;
        }
        self.pos += 4 + len;
        Found::Ok(true)
    }

    /// Steps over a counter header (category, name, type, unit, variance, index).
    fn header(&mut self, buf: &[u8], limits: &Limits) -> Found<()> {
        let start = self.pos;
        if buf.len() < start + 4 {
            return Found::More;
        }
        self.pos += 4;
        match self.string(buf, limits) {
            Found::Ok(true) => {}
            Found::More => {
                self.pos = start;
                return Found::More;
            }
            // A null name is an error too.
            Found::Ok(false) | Found::Bad => return Found::Bad,
        }
        if buf.len() < self.pos + 14 {
            self.pos = start;
            return Found::More;
        }
        self.pos += 14;
        Found::Ok(())
    }
}
