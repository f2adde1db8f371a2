//! The sans-IO decoder: bytes in any chunking in, [`Update`]s out.
//!
//! The decoder parses one *item* at a time from the front of a `BytesMut` (an index op, or a whole
//! pair with its definition if it has one) and consumes it only when it is complete, so the result
//! never depends on how the input was split. State changes are applied only for complete items.

#[allow(unused_imports)]
use crate::prelude::*;
#[cfg(feature = "std")]
use core::hash::Hasher;

mod fast;

use bytes::{Buf, Bytes, BytesMut};

use crate::error::DecodeError;
use crate::message::{Kind, Update, Value};
use crate::wire::{
    self, Limits, Number, ABSOLUTE_FIRST, DEFINITION_MIN_LEN, DEFINITION_TOKEN, FF, FF_STUFF_AFTER,
    INDEX_ADD, INDEX_PREVIOUS, INDEX_RESET, INDEX_SAME, NEGATIVE_FIRST, RESERVED_12_BYTE, RESERVED_16_BYTE,
    RESYNC_FF_COUNT, STUFFING,
};

/// How many of a foreign stream's first bytes [`DecodeError::OtherProtocol`] keeps.
const FIRST_BYTES_KEPT: usize = 24;

/// How a [`StreamDecoder`] treats input that the format allows but a careful reader may refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecoderConfig {
    /// Size bounds, checked before allocating.
    pub limits: Limits,
    /// Reject deltas that leave the u64 range (an `E7` delta past u64::MAX, a negative delta below 0)
    /// instead of wrapping them modulo 2^64 (A2, A3).
    pub strict: bool,
}

/// Where the decoder stands with respect to synchronisation (A10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncState {
    /// Decoding pairs.
    Synced,
    /// 17 or more FFs were read; further FFs are eaten and an FE completes the resync.
    InResync,
    /// An error was reported; input is skipped up to the next resync sequence.
    Lost,
}

/// What the decoder knows about one defined token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The base name.
    pub name: Arc<str>,
    /// The type.
    pub kind: Kind,
    /// For an indexed token (A13), the first index level it is bound to.
    pub bound_index: Option<u64>,
    /// The token's last value, shared by every index it is used under (A12).
    pub last: Value,
}

/// 48 bytes: a stream has a token per series (A13 gives each index its own).
#[derive(Debug, Clone)]
struct Token {
    name: Arc<str>,
    last: Last,
    /// The first index level it is bound to, when `bounded`.
    bound: u64,
    kind: Kind,
    bounded: bool,
}

impl Token {
    fn new(name: Arc<str>, kind: Kind, bound: Option<u64>) -> Token {
        let last = match kind {
            Kind::Unsigned => Last::Unsigned(0),
            Kind::Text => Last::Text(Box::default()),
        };
        Token { name, last, bound: bound.unwrap_or(0), kind, bounded: bound.is_some() }
    }

    /// The first index level it is bound to, for an indexed token (A13).
    fn bound(&self) -> Option<u64> {
        self.bounded.then_some(self.bound)
    }
}

/// A token's last value. Few tokens are strings: theirs is boxed, so that a number's is 16 bytes.
#[derive(Debug, Clone)]
#[allow(clippy::box_collection)]
enum Last {
    Unsigned(u64),
    Text(Box<Vec<u8>>),
}

/// A multiplicative hash for token numbers (small dense integers) and the encoder's own names: SipHash's
/// flood resistance is not needed for either.
#[cfg(feature = "std")]
#[derive(Default)]
pub(crate) struct TokenHasher(u64);

#[cfg(feature = "std")]
impl Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Tokens outside the dense range: a hash map with [`TokenHasher`], or an ordered map without `std`.
#[cfg(feature = "std")]
pub(crate) type TokenMap<V> = std::collections::HashMap<u64, V, core::hash::BuildHasherDefault<TokenHasher>>;
/// Tokens outside the dense range: a hash map with [`TokenHasher`], or an ordered map without `std`.
#[cfg(not(feature = "std"))]
pub(crate) type TokenMap<V> = alloc::collections::BTreeMap<u64, V>;

/// Token numbers below this live in a vector (the encoder numbers tokens 1, 2, 3, ...); others in a map.
const DENSE_TOKENS: u64 = 4096;

/// The token table: dense for small numbers, a map for the rest (A7 allows any unused number).
#[derive(Debug, Clone, Default)]
struct TokenTable {
    dense: Vec<Option<Token>>,
    sparse: TokenMap<Token>,
    len: usize,
}

impl TokenTable {
    #[inline]
    fn get(&self, n: u64) -> Option<&Token> {
        if n < DENSE_TOKENS {
            self.dense.get(n as usize).and_then(Option::as_ref)
        } else {
            self.sparse.get(&n)
        }
    }

    #[inline]
    fn get_mut(&mut self, n: u64) -> Option<&mut Token> {
        if n < DENSE_TOKENS {
            self.dense.get_mut(n as usize).and_then(Option::as_mut)
        } else {
            self.sparse.get_mut(&n)
        }
    }

    fn insert(&mut self, n: u64, token: Token) {
        let fresh = if n < DENSE_TOKENS {
            let i = n as usize;
            if self.dense.len() <= i {
                self.dense.resize_with(i + 1, || None);
            }
            self.dense[i].replace(token).is_none()
        } else {
            self.sparse.insert(n, token).is_none()
        };
        if fresh {
            self.len += 1;
        }
    }

    fn contains(&self, n: u64) -> bool {
        self.get(n).is_some()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn clear(&mut self) {
        self.dense.clear();
        self.sparse.clear();
        self.len = 0;
    }

    fn numbers(&self) -> Vec<u64> {
        let mut v: Vec<u64> = (0..self.dense.len() as u64).filter(|&n| self.contains(n)).collect();
        let mut sparse: Vec<u64> = self.sparse.keys().copied().collect();
        sparse.sort_unstable();
        v.extend(sparse);
        v
    }
}

/// What one decoding step produced; the update itself is read from the decoder's state.
#[derive(Debug, Clone, Copy)]
enum Event {
    Define(u64),
    Value(u64),
    Resync,
}

/// A borrowed view of an update, from [`StreamDecoder::decode_ref`]: no allocation, no reference
/// counting. Valid until the next call on the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateRef<'a> {
    /// See [`Update::Define`].
    Define {
        /// The new token's number.
        token: u64,
        /// The name.
        name: &'a str,
        /// The type.
        kind: Kind,
        /// For an indexed token, its bound index.
        bound_index: Option<u64>,
    },
    /// See [`Update::Value`].
    Value {
        /// The token that carried it.
        token: u64,
        /// The token's base name.
        name: &'a str,
        /// The effective index vector.
        index: &'a [u64],
        /// The new value.
        value: ValueRef<'a>,
    },
    /// See [`Update::Resync`].
    Resync,
}

impl UpdateRef<'_> {
    /// An owned copy (allocates the name; prefer [`StreamDecoder::decode`] when you want owned updates).
    pub fn to_update(&self) -> Update {
        match *self {
            UpdateRef::Define { token, name, kind, bound_index } => {
                Update::Define { token, name: name.into(), kind, bound_index }
            }
            UpdateRef::Value { token, name, index, value } => {
                Update::Value { token, name: name.into(), index: index.to_vec(), value: value.to_value() }
            }
            UpdateRef::Resync => Update::Resync,
        }
    }
}

/// A borrowed [`Value`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// A `u` token's value.
    Unsigned(u64),
    /// An `s` token's whole value.
    Text(&'a [u8]),
}

impl ValueRef<'_> {
    /// An owned copy.
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Unsigned(v) => Value::Unsigned(v),
            ValueRef::Text(s) => Value::Text(Bytes::copy_from_slice(s)),
        }
    }
}

/// The sans-IO smon decoder. Feed it bytes in any chunking with [`StreamDecoder::decode`].
///
/// It keeps the token table (each indexed token with its bound index), the index vector, the current
/// token and each token's last value. After an error it is [`SyncState::Lost`]: further calls skip input
/// up to the next resync sequence (17×FF FE), yield [`Update::Resync`] and go on.
///
/// ```
/// use bytes::BytesMut;
/// use smon_codec::{StreamDecoder, Update, Value};
///
/// // token 0, definition "ucount" (u), new token 1, value 7; then token 1 again, +5
/// let mut buf = BytesMut::from(&b"\x00\x06ucount\x01\x07\x00\x05"[..]);
/// let mut dec = StreamDecoder::default();
/// assert!(matches!(dec.decode(&mut buf).unwrap(), Some(Update::Define { token: 1, .. })));
/// assert!(matches!(dec.decode(&mut buf).unwrap(), Some(Update::Value { value: Value::Unsigned(7), .. })));
/// assert!(matches!(dec.decode(&mut buf).unwrap(), Some(Update::Value { value: Value::Unsigned(12), .. })));
/// assert!(dec.decode(&mut buf).unwrap().is_none());
/// ```
#[derive(Debug, Clone)]
pub struct StreamDecoder {
    config: DecoderConfig,
    tokens: TokenTable,
    current: u64,
    ix: Vec<u64>,
    state: SyncState,
    /// Consecutive FFs ending at the last consumed byte (A10: counted over the raw stream).
    ff_run: u32,
    /// Absolute offset of the first unconsumed byte.
    consumed: u64,
    /// The token whose first value follows a definition, yielded on the next call.
    pending: Option<u64>,
    /// Room for an indexed token's effective index (borrowed by [`UpdateRef::Value`]).
    scratch: Vec<u64>,
    /// Do not re-parse before the buffer holds this many bytes (a lower bound for the current item).
    need: usize,
    /// The current item's string, decoded as far as the bytes went.
    partial: Option<PartialString>,
    /// Whether the stream was seen to start like smon (or said not to): see [`StreamDecoder::check_start`].
    start_checked: bool,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        StreamDecoder::new(DecoderConfig::default())
    }
}

/// Counts the bytes item parses walk, in this crate's unit tests only (the linear-decoding test).
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

/// Why parsing an item stopped before it completed.
enum Stop {
    /// Need at least this many buffered bytes to go on.
    Incomplete(usize),
    /// A run of 17 FFs ends after this many bytes: drop the partial item and resync (A10).
    Resync(usize),
    /// Malformed input (boxed: errors are rare, and small results keep the hot path fast).
    Error(Box<DecodeError>),
}

impl From<DecodeError> for Stop {
    fn from(e: DecodeError) -> Self {
        Stop::Error(Box::new(e))
    }
}

type Parse<T> = Result<T, Stop>;

/// A complete, validated item, ready to apply.
enum Item {
    IndexAdd(u64),
    IndexSame(u64),
    IndexPrevious(u64),
    IndexReset,
    Value { token: u64, value: NewValue },
    Define(Box<Definition>),
}

struct Definition {
    token: u64,
    name: Arc<str>,
    kind: Kind,
    indexed: Option<(u64, Vec<u64>)>,
    value: NewValue,
}

enum NewValue {
    Unsigned(u64),
    Append(Vec<u8>),
    Restart(Vec<u8>),
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
    ff_run: u32,
    /// The string that ran out of bytes on the last call, to resume instead of decoding it again.
    partial: Option<PartialString>,
    /// Bytes stepped over by resuming that string (for the work count of the linear-decoding test).
    resumed: usize,
}

/// A string whose data ran out of buffered bytes: what was decoded of it, so that the next call resumes
/// there. Without it, a long string of FFs trickling in (each 16 FFs carry a stuffed FE, so its raw length is
/// unknown until it ends) was decoded again from its start on every read: quadratic.
#[derive(Debug, Clone)]
struct PartialString {
    /// The absolute stream offset of the string's first data byte.
    at: u64,
    /// Raw bytes of it consumed (data and stuffing).
    raw: usize,
    /// The data decoded so far.
    out: Vec<u8>,
    /// The FF run at the end of what was consumed.
    ff_run: u32,
}

impl Cursor<'_> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn peek(&self) -> Parse<u8> {
        self.buf.get(self.pos).copied().ok_or(Stop::Incomplete(self.pos + 1))
    }

    fn bump(&mut self) -> u8 {
        let b = self.buf[self.pos];
        self.pos += 1;
        if b == FF {
            self.ff_run = self.ff_run.saturating_add(1);
        } else {
            self.ff_run = 0;
        }
        b
    }

    /// A number field at a prefix position (A1-A5). FF may start a resync run (A10).
    fn number(&mut self) -> Parse<(Number, u8, u64)> {
        let offset = self.offset();
        let prefix = self.peek()?;
        match prefix {
            0..=wire::DIRECT_MAX => {
                self.bump();
                Ok((wire::number(prefix, 0), prefix, offset))
            }
            wire::POSITIVE_FIRST..=wire::ABSOLUTE_LAST => {
                let len = wire::payload_len(prefix).unwrap_or(1);
                let end = self.pos + 1 + len;
                if self.buf.len() < end {
                    return Err(Stop::Incomplete(end));
                }
                self.bump();
                let payload = wire::BYTE_ORDER.read(&self.buf[self.pos..end]);
                for _ in 0..len {
                    self.bump();
                }
                Ok((wire::number(prefix, payload), prefix, offset))
            }
            INDEX_ADD..=INDEX_RESET => Err(DecodeError::UnexpectedIndexOp { byte: prefix, offset }.into()),
            FF => Err(self.ff_at_prefix()),
            RESERVED_12_BYTE | RESERVED_16_BYTE | STUFFING => {
                Err(DecodeError::BadNumberPrefix { byte: prefix, offset }.into())
            }
        }
    }

    /// FF where a prefix must stand: the start (or the continuation) of a resync run, else an error.
    fn ff_at_prefix(&mut self) -> Stop {
        let first = self.offset();
        let mut run = self.ff_run;
        let mut p = self.pos;
        loop {
            match self.buf.get(p) {
                None => return Stop::Incomplete(p + 1),
                Some(&FF) => {
                    run += 1;
                    p += 1;
                    if run >= RESYNC_FF_COUNT {
                        return Stop::Resync(p);
                    }
                }
                Some(_) => return DecodeError::BadNumberPrefix { byte: FF, offset: first }.into(),
            }
        }
    }

    /// `n` bytes of string data, dropping the FE stuffed after each 16 FFs (A10). A string cut short by the
    /// end of the buffer is kept in [`Cursor::partial`] and resumed on the next call.
    fn string_data(&mut self, n: usize) -> Parse<Vec<u8>> {
        let at = self.offset();
        let data_pos = self.pos;
        let mut out = match self.partial.take() {
            Some(p) if p.at == at && p.out.len() <= n => {
                self.pos += p.raw;
                self.resumed += p.raw;
                self.ff_run = p.ff_run;
                p.out
            }
            _ => {
                if self.buf.len() < self.pos + n {
                    return Err(Stop::Incomplete(self.pos + n));
                }
                Vec::with_capacity(n)
            }
        };
        loop {
            // After 16 FFs in a row: the stuffed FE, or the 17th FF of a resync run.
            if self.ff_run == FF_STUFF_AFTER && self.pos > data_pos {
                let offset = self.offset();
                match self.buf.get(self.pos) {
                    None => return Err(self.suspend(at, data_pos, out, self.pos + 1)),
                    Some(&STUFFING) => {
                        self.bump();
                    }
                    Some(&FF) => {
                        self.bump();
                        return Err(Stop::Resync(self.pos));
                    }
                    Some(&byte) => return Err(DecodeError::MissingStuffing { byte, offset }.into()),
                }
            }
            let want = n - out.len();
            if want == 0 {
                return Ok(out);
            }
            let avail = &self.buf[self.pos..];
            if avail.is_empty() {
                return Err(self.suspend(at, data_pos, out, self.pos + want));
            }
            // Fast path: copy a stretch free of FF in one go.
            let stretch = &avail[..want.min(avail.len())];
            let clean = memchr::memchr(FF, stretch).unwrap_or(stretch.len());
            if clean > 0 {
                out.extend_from_slice(&stretch[..clean]);
                self.pos += clean;
                self.ff_run = 0;
                continue;
            }
            out.push(self.bump());
        }
    }

    /// Keeps a string cut short by the end of the buffer, and says how many bytes the item needs at least.
    fn suspend(&mut self, at: u64, data_pos: usize, out: Vec<u8>, need: usize) -> Stop {
        self.partial = Some(PartialString { at, raw: self.pos - data_pos, out, ff_run: self.ff_run });
        Stop::Incomplete(need)
    }
}

impl StreamDecoder {
    /// A decoder with `config`, at the start of a stream (token 0 current, no indexes).
    pub fn new(config: DecoderConfig) -> Self {
        StreamDecoder {
            config,
            tokens: TokenTable::default(),
            current: DEFINITION_TOKEN,
            ix: Vec::new(),
            state: SyncState::Synced,
            ff_run: 0,
            consumed: 0,
            pending: None,
            scratch: Vec::new(),
            need: 0,
            partial: None,
            start_checked: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// Whether the decoder is in sync, eating a resync run, or skipping after an error.
    pub fn sync_state(&self) -> SyncState {
        self.state
    }

    /// The stream offset of the first byte not yet consumed.
    pub fn offset(&self) -> u64 {
        self.consumed
    }

    /// The current token (the one the next token field is a delta from, A6).
    pub fn current_token(&self) -> u64 {
        self.current
    }

    /// The current index vector (A11).
    pub fn index(&self) -> &[u64] {
        &self.ix
    }

    /// What is known about token `n`, if it is defined.
    pub fn token(&self, n: u64) -> Option<TokenInfo> {
        self.tokens.get(n).map(|t| TokenInfo {
            name: t.name.clone(),
            kind: t.kind,
            bound_index: t.bound(),
            last: match &t.last {
                Last::Unsigned(v) => Value::Unsigned(*v),
                Last::Text(s) => Value::Text(Bytes::copy_from_slice(s)),
            },
        })
    }

    /// The numbers of all defined tokens, ascending.
    pub fn token_numbers(&self) -> Vec<u64> {
        self.tokens.numbers()
    }

    /// Forgets every token, value and index, as a resync does (A10).
    pub fn reset(&mut self) {
        self.tokens.clear();
        self.current = DEFINITION_TOKEN;
        self.ix.clear();
        self.pending = None;
        self.need = 0;
        self.partial = None;
        self.state = SyncState::Synced;
    }

    /// Decodes the next update from the front of `buf`, consuming what it used.
    ///
    /// `Ok(None)` means more input is needed (everything left in `buf` is an incomplete item, or was
    /// skipped while out of sync). An error leaves the decoder [`SyncState::Lost`]; call again to skip to
    /// the next resync.
    #[inline]
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Update>, DecodeError> {
        if fast::ENABLED && self.state == SyncState::Synced && self.pending.is_none() && self.need == 0 {
            if let Some(ev) = self.fast_pair(buf) {
                return Ok(Some(self.owned(ev)));
            }
        }
        Ok(self.step(buf)?.map(|ev| self.owned(ev)))
    }

    /// Like [`StreamDecoder::decode`], at the end of the input: bytes left mid-pair are reported as
    /// [`DecodeError::Truncated`] (and dropped).
    #[inline]
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Update>, DecodeError> {
        if fast::ENABLED && self.state == SyncState::Synced && self.pending.is_none() && self.need == 0 {
            if let Some(ev) = self.fast_pair(buf) {
                return Ok(Some(self.owned(ev)));
            }
        }
        Ok(self.step_eof(buf)?.map(|ev| self.owned(ev)))
    }

    /// Like [`StreamDecoder::decode`], but borrows the update from the decoder: the fast path, with
    /// no allocation or reference counting per value.
    #[inline]
    pub fn decode_ref(&mut self, buf: &mut BytesMut) -> Result<Option<UpdateRef<'_>>, DecodeError> {
        if fast::ENABLED && self.state == SyncState::Synced && self.pending.is_none() && self.need == 0 {
            if let Some(ev) = self.fast_pair(buf) {
                return Ok(Some(self.view(ev)));
            }
        }
        match self.step(buf)? {
            Some(ev) => Ok(Some(self.view(ev))),
            None => Ok(None),
        }
    }

    /// Like [`StreamDecoder::decode_eof`], borrowing the update as [`StreamDecoder::decode_ref`] does.
    #[inline]
    pub fn decode_eof_ref(&mut self, buf: &mut BytesMut) -> Result<Option<UpdateRef<'_>>, DecodeError> {
        if fast::ENABLED && self.state == SyncState::Synced && self.pending.is_none() && self.need == 0 {
            if let Some(ev) = self.fast_pair(buf) {
                return Ok(Some(self.view(ev)));
            }
        }
        match self.step_eof(buf)? {
            Some(ev) => Ok(Some(self.view(ev))),
            None => Ok(None),
        }
    }

    fn owned(&self, ev: Event) -> Update {
        let (token, is_define) = match ev {
            Event::Resync => return Update::Resync,
            Event::Define(token) => (token, true),
            Event::Value(token) => (token, false),
        };
        let Some(tok) = self.tokens.get(token) else { unreachable!("events name defined tokens") };
        if is_define {
            return Update::Define {
                token,
                name: tok.name.clone(),
                kind: tok.kind,
                bound_index: tok.bound(),
            };
        }
        let index = match tok.bound() {
            None => self.ix.clone(),
            Some(f) => {
                let mut v = Vec::with_capacity(self.ix.len().max(1));
                v.push(f);
                v.extend(self.ix.iter().skip(1));
                v
            }
        };
        let value = match &tok.last {
            Last::Unsigned(v) => Value::Unsigned(*v),
            Last::Text(s) => Value::Text(Bytes::copy_from_slice(s)),
        };
        Update::Value { token, name: tok.name.clone(), index, value }
    }

    #[inline]
    fn view(&mut self, ev: Event) -> UpdateRef<'_> {
        let token = match ev {
            Event::Resync => return UpdateRef::Resync,
            Event::Define(token) | Event::Value(token) => token,
        };
        let Some(tok) = self.tokens.get(token) else { unreachable!("events name defined tokens") };
        if let Event::Define(_) = ev {
            return UpdateRef::Define { token, name: &tok.name, kind: tok.kind, bound_index: tok.bound() };
        }
        let index: &[u64] = match tok.bound() {
            None => &self.ix,
            Some(f) => {
                self.scratch.clear();
                self.scratch.push(f);
                self.scratch.extend(self.ix.iter().skip(1));
                &self.scratch
            }
        };
        let value = match &tok.last {
            Last::Unsigned(v) => ValueRef::Unsigned(*v),
            Last::Text(s) => ValueRef::Text(s),
        };
        UpdateRef::Value { token, name: &tok.name, index, value }
    }

    fn step(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, DecodeError> {
        if let Some(token) = self.pending.take() {
            return Ok(Some(Event::Value(token)));
        }
        loop {
            match self.state {
                SyncState::Lost => return Ok(self.skip_to_resync(buf).then_some(Event::Resync)),
                SyncState::InResync => {
                    let ffs = buf.iter().take_while(|&&b| b == FF).count();
                    self.advance(buf, ffs);
                    let Some(&next) = buf.first() else { return Ok(None) };
                    if next == STUFFING {
                        self.advance(buf, 1);
                        self.reset();
                        return Ok(Some(Event::Resync));
                    }
                    self.state = SyncState::Lost;
                    self.ff_run = 0;
                    return Err(DecodeError::BrokenResync { byte: next, offset: self.consumed });
                }
                SyncState::Synced => {
                    if !self.start_checked && !self.check_start(buf, false)? {
                        return Ok(None);
                    }
                    if fast::ENABLED && self.need == 0 {
                        if let Some(ev) = self.fast_pair(buf) {
                            return Ok(Some(ev));
                        }
                    }
                    if buf.is_empty() || buf.len() < self.need {
                        return Ok(None);
                    }
                    let partial = self.partial.take();
                    let mut cur =
                        Cursor { buf, pos: 0, base: self.consumed, ff_run: self.ff_run, partial, resumed: 0 };
                    let parsed = self.parse_item(&mut cur);
                    work::examined(cur.pos - cur.resumed);
                    // Only an item still incomplete keeps its string's progress.
                    self.partial = cur.partial.take().filter(|_| matches!(parsed, Err(Stop::Incomplete(_))));
                    match parsed {
                        Ok(item) => {
                            let (used, run) = (cur.pos, cur.ff_run);
                            self.advance(buf, used);
                            self.ff_run = run;
                            self.need = 0;
                            if let Some(ev) = self.apply(item) {
                                return Ok(Some(ev));
                            }
                        }
                        Err(Stop::Incomplete(need)) => {
                            self.need = need;
                            return Ok(None);
                        }
                        Err(Stop::Resync(used)) => {
                            self.advance(buf, used);
                            self.ff_run = RESYNC_FF_COUNT;
                            self.need = 0;
                            self.state = SyncState::InResync;
                        }
                        Err(Stop::Error(e)) => {
                            self.need = 0;
                            self.state = SyncState::Lost;
                            return Err(*e);
                        }
                    }
                }
            }
        }
    }

    /// At the start of the stream, before its first item: whether it starts like smon at all ([`wire::sniff`]).
    /// A stream that does not is an error once [`FIRST_BYTES_KEPT`] bytes are there or the input ended, so
    /// that the error is the same however the input was split; the decoder is then [`SyncState::Lost`], as
    /// after any error. `Ok(false)` while more bytes are needed to tell.
    fn check_start(&mut self, buf: &[u8], eof: bool) -> Result<bool, DecodeError> {
        match wire::sniff(buf) {
            Some(false) if buf.len() < FIRST_BYTES_KEPT && !eof => Ok(false),
            Some(false) => {
                self.start_checked = true;
                self.state = SyncState::Lost;
                Err(DecodeError::OtherProtocol { first: buf[..buf.len().min(FIRST_BYTES_KEPT)].to_vec() })
            }
            Some(true) => {
                self.start_checked = true;
                Ok(true)
            }
            // The start of a resync or a definition: parsing it asks for more bytes.
            None => Ok(true),
        }
    }

    fn step_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, DecodeError> {
        if let Some(ev) = self.step(buf)? {
            return Ok(Some(ev));
        }
        if !self.start_checked && self.state == SyncState::Synced {
            self.check_start(buf, true)?;
        }
        match self.state {
            SyncState::Lost => {
                let n = buf.len();
                self.advance(buf, n);
                Ok(None)
            }
            SyncState::Synced if buf.is_empty() => Ok(None),
            SyncState::Synced | SyncState::InResync => {
                let err = DecodeError::Truncated { offset: self.consumed, pending: buf.len() };
                let n = buf.len();
                self.advance(buf, n);
                self.need = 0;
                self.state = SyncState::Lost;
                Err(err)
            }
        }
    }

    /// Decodes every complete update in `buf`, handing each to `f` as a borrowed [`UpdateRef`]; returns
    /// how many there were. The fastest way through a buffer: runs of plain two-byte pairs are decoded
    /// in a tight loop. Stops at the first error (the decoder is then [`SyncState::Lost`]).
    pub fn decode_with(
        &mut self,
        buf: &mut BytesMut,
        mut f: impl FnMut(UpdateRef<'_>),
    ) -> Result<usize, DecodeError> {
        let mut count = 0;
        loop {
            if fast::ENABLED && self.state == SyncState::Synced && self.pending.is_none() && self.need == 0 {
                count += self.fast_run(buf, &mut f);
            }
            match self.step(buf)? {
                Some(ev) => {
                    count += 1;
                    f(self.view(ev));
                }
                None => return Ok(count),
            }
        }
    }

    /// Decodes every complete update in `input`, as if it were the whole stream (truncation is an
    /// error). Stops at the first error.
    pub fn decode_all(input: &[u8], config: DecoderConfig) -> Result<Vec<Update>, DecodeError> {
        let mut dec = StreamDecoder::new(config);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(u) = dec.decode_eof(&mut buf)? {
            out.push(u);
        }
        Ok(out)
    }

    fn advance(&mut self, buf: &mut BytesMut, n: usize) {
        buf.advance(n);
        self.consumed += n as u64;
    }

    fn skip_to_resync(&mut self, buf: &mut BytesMut) -> bool {
        let mut run = self.ff_run;
        for (i, &b) in buf.iter().enumerate() {
            if b == FF {
                run = run.saturating_add(1);
            } else if b == STUFFING && run >= RESYNC_FF_COUNT {
                self.advance(buf, i + 1);
                self.ff_run = 0;
                self.reset();
                return true;
            } else {
                run = 0;
            }
        }
        let n = buf.len();
        self.advance(buf, n);
        self.ff_run = run;
        false
    }

    fn unsigned(&self, prev: u64, n: Number, offset: u64) -> Result<u64, DecodeError> {
        match n {
            Number::Positive(d) => {
                let sum = u128::from(prev) + d;
                if sum > u128::from(u64::MAX) && self.config.strict {
                    return Err(DecodeError::OutOfRange { offset });
                }
                Ok(sum as u64) // modulo 2^64 (A2)
            }
            Number::Negative(m) => match prev.checked_sub(m) {
                Some(v) => Ok(v),
                None if self.config.strict => Err(DecodeError::OutOfRange { offset }),
                None => Ok(prev.wrapping_sub(m)),
            },
            Number::Absolute(v) => Ok(v),
        }
    }

    fn index_number(&self, cur: &mut Cursor<'_>) -> Parse<u64> {
        let (n, _, offset) = cur.number()?;
        match n {
            Number::Negative(0) => Ok(0),
            Number::Negative(_) => Err(DecodeError::NegativeIndex { offset }.into()),
            n => Ok(self.unsigned(0, n, offset)?),
        }
    }

    /// One index op at the cursor, checked against (and applied to) `ix` (A11).
    fn index_op(&self, cur: &mut Cursor<'_>, ix: &mut Vec<u64>) -> Parse<Item> {
        let offset = cur.offset();
        let op = cur.bump();
        if op == INDEX_RESET {
            ix.clear();
            return Ok(Item::IndexReset);
        }
        let n = self.index_number(cur)?;
        let depth = ix.len();
        let shallow = |needed| DecodeError::IndexTooShallow { op, needed, depth, offset };
        match op {
            INDEX_ADD => {
                if depth >= self.config.limits.max_index_depth {
                    return Err(DecodeError::IndexTooDeep {
                        max: self.config.limits.max_index_depth,
                        offset,
                    }
                    .into());
                }
                ix.push(n);
                Ok(Item::IndexAdd(n))
            }
            INDEX_SAME => {
                let last = ix.last_mut().ok_or_else(|| shallow(1))?;
                *last = n;
                Ok(Item::IndexSame(n))
            }
            _ => {
                if depth < 2 {
                    return Err(shallow(2).into());
                }
                ix[depth - 2] = n;
                Ok(Item::IndexPrevious(n))
            }
        }
    }

    fn parse_item(&self, cur: &mut Cursor<'_>) -> Parse<Item> {
        match cur.peek()? {
            INDEX_ADD..=INDEX_RESET => {
                let mut ix = self.ix.clone();
                self.index_op(cur, &mut ix)
            }
            _ => self.parse_pair(cur),
        }
    }

    fn parse_pair(&self, cur: &mut Cursor<'_>) -> Parse<Item> {
        let (n, _, offset) = cur.number()?;
        let token = self.unsigned(self.current, n, offset)?;
        if token == DEFINITION_TOKEN {
            let indexed = self.indexed_definition_ops(cur)?;
            let (kind, name) = self.definition_string(cur)?;
            let new = self.new_token(cur, DEFINITION_TOKEN)?;
            let value = self.value(cur, kind, None)?;
            return Ok(Item::Define(Box::new(Definition { token: new, name, kind, indexed, value })));
        }
        let Some(tok) = self.tokens.get(token) else {
            return Err(DecodeError::UndefinedToken { token, offset }.into());
        };
        if let Some(indexed) = self.indexed_definition_ops(cur)? {
            let new = self.new_token(cur, token)?;
            let value = self.value(cur, tok.kind, None)?;
            return Ok(Item::Define(Box::new(Definition {
                token: new,
                name: tok.name.clone(),
                kind: tok.kind,
                indexed: Some(indexed),
                value,
            })));
        }
        let value = self.value(cur, tok.kind, Some(&tok.last))?;
        Ok(Item::Value { token, value })
    }

    /// In value position: `FD` then index ops starting with `FA f` (A13). Returns `(f, ix)`.
    fn indexed_definition_ops(&self, cur: &mut Cursor<'_>) -> Parse<Option<(u64, Vec<u64>)>> {
        if cur.peek()? != INDEX_RESET {
            return Ok(None);
        }
        cur.bump();
        let offset = cur.offset();
        if cur.peek()? != INDEX_ADD {
            return Err(DecodeError::IndexedDefinitionWithoutIndex { offset }.into());
        }
        let mut ix = Vec::new();
        let mut first = None;
        while matches!(cur.peek()?, INDEX_ADD..=INDEX_PREVIOUS) {
            self.index_op(cur, &mut ix)?;
            first = first.or(ix.first().copied());
        }
        Ok(first.map(|f| (f, ix)))
    }

    /// A string length field: `(append?, len)` (A9), checked against the limit before any allocation.
    fn string_len(&self, cur: &mut Cursor<'_>, base_len: usize) -> Parse<(bool, usize, u64)> {
        let (n, prefix, offset) = cur.number()?;
        let max = self.config.limits.max_string_len;
        let (append, len) = match n {
            Number::Positive(n) => (true, n),
            Number::Absolute(n) => (false, u128::from(n)),
            Number::Negative(_) => {
                debug_assert!((NEGATIVE_FIRST..ABSOLUTE_FIRST).contains(&prefix));
                return Err(DecodeError::NegativeStringDelta { prefix, offset }.into());
            }
        };
        let total = if append { len + base_len as u128 } else { len };
        if total > max as u128 {
            let len = u64::try_from(total).unwrap_or(u64::MAX);
            return Err(DecodeError::StringTooLong { len, max, offset }.into());
        }
        Ok((append, len as usize, offset))
    }

    /// The definition string after token 0 (A8): type byte + name; token 0 has no memory (A9).
    fn definition_string(&self, cur: &mut Cursor<'_>) -> Parse<(Kind, Arc<str>)> {
        let (_, len, offset) = self.string_len(cur, 0)?;
        if len < DEFINITION_MIN_LEN {
            return Err(DecodeError::DefinitionTooShort { len, offset }.into());
        }
        let type_offset = cur.offset();
        let data = cur.string_data(len)?;
        let Some(kind) = Kind::from_type_byte(data[0]) else {
            return Err(DecodeError::UnknownType { type_byte: data[0], offset: type_offset }.into());
        };
        Ok((kind, String::from_utf8_lossy(&data[1..]).into()))
    }

    /// The token field naming a new token (A7): a delta from `from`, unused, within the limit.
    fn new_token(&self, cur: &mut Cursor<'_>, from: u64) -> Parse<u64> {
        let (n, _, offset) = cur.number()?;
        let token = self.unsigned(from, n, offset)?;
        if token == DEFINITION_TOKEN || self.tokens.contains(token) {
            return Err(DecodeError::TokenAlreadyDefined { token, offset }.into());
        }
        if self.tokens.len() >= self.config.limits.max_tokens {
            return Err(DecodeError::TooManyTokens { max: self.config.limits.max_tokens, offset }.into());
        }
        Ok(token)
    }

    /// A value of `kind` against `last` (`None`: a fresh token, 0 or "").
    fn value(&self, cur: &mut Cursor<'_>, kind: Kind, last: Option<&Last>) -> Parse<NewValue> {
        match kind {
            Kind::Unsigned => {
                let prev = match last {
                    Some(Last::Unsigned(v)) => *v,
                    _ => 0,
                };
                let (n, _, offset) = cur.number()?;
                Ok(NewValue::Unsigned(self.unsigned(prev, n, offset)?))
            }
            Kind::Text => {
                let base_len = match last {
                    Some(Last::Text(s)) => s.len(),
                    _ => 0,
                };
                let (append, len, _) = self.string_len(cur, base_len)?;
                let data = cur.string_data(len)?;
                Ok(if append { NewValue::Append(data) } else { NewValue::Restart(data) })
            }
        }
    }

    fn apply(&mut self, item: Item) -> Option<Event> {
        match item {
            Item::IndexAdd(n) => self.ix.push(n),
            Item::IndexSame(n) => {
                if let Some(last) = self.ix.last_mut() {
                    *last = n;
                }
            }
            Item::IndexPrevious(n) => {
                let depth = self.ix.len();
                if depth >= 2 {
                    self.ix[depth - 2] = n;
                }
            }
            Item::IndexReset => self.ix.clear(),
            Item::Value { token, value } => {
                self.apply_value(token, value);
                return Some(Event::Value(token));
            }
            Item::Define(def) => {
                let Definition { token, name, kind, indexed, value } = *def;
                let bound = indexed.as_ref().map(|(f, _)| *f);
                if let Some((_, ix)) = indexed {
                    self.ix = ix;
                }
                self.tokens.insert(token, Token::new(name, kind, bound));
                self.apply_value(token, value);
                self.pending = Some(token);
                return Some(Event::Define(token));
            }
        }
        None
    }

    fn apply_value(&mut self, token: u64, value: NewValue) {
        self.current = token;
        let Some(tok) = self.tokens.get_mut(token) else { return };
        match (&mut tok.last, value) {
            (Last::Unsigned(last), NewValue::Unsigned(v)) => *last = v,
            (Last::Text(last), NewValue::Append(data)) => last.extend_from_slice(&data),
            (Last::Text(last), NewValue::Restart(data)) => **last = data,
            // parse_pair reads values by the token's kind, so the kinds always agree.
            (Last::Unsigned(_), _) | (Last::Text(_), NewValue::Unsigned(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 45: `telemon smon connect` pointed at an HMON port said `offset 1: definition string of 0 bytes`
    /// and waited for a resync that never came.
    #[test]
    fn a_stream_of_another_protocol_is_named_as_such_on_its_first_item() {
        let hmon = b"\0\0\0\x1bHMONSupportedProtocols=2";
        let mut dec = StreamDecoder::default();
        let mut buf = BytesMut::from(&hmon[..]);
        let err = dec.decode(&mut buf).unwrap_err();
        assert!(matches!(&err, DecodeError::OtherProtocol { first } if first[..] == hmon[..24]), "{err}");
        assert_eq!(
            err.to_string(),
            r#"offset 0: not an smon stream: it begins with "\x00\x00\x00\x1bHMONSupportedProtoco""#
        );
        assert_eq!(dec.sync_state(), SyncState::Lost, "then it skips to the next resync, as after any error");
        // A stream that starts like smon keeps its own errors, and only the first item is looked at.
        // (its second pair names token 1 + 9, which is not defined)
        let undefined = b"\x00\x0csmon.version\x01\x050.0.0\x09\x00";
        let mut dec = StreamDecoder::default();
        let mut buf = BytesMut::from(&undefined[..]);
        let err = loop {
            match dec.decode(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("no error"),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, DecodeError::UndefinedToken { token: 10, .. }), "{err}");
        let spec = b"\x00\x0bsmon.version\x01\x050.0.0"; // the notes' literal example: its own error (A8)
        let err = StreamDecoder::decode_all(spec, DecoderConfig::default()).unwrap_err();
        assert!(matches!(err, DecodeError::UndefinedToken { .. }), "{err}");
        let mut dec = StreamDecoder::default();
        let mut buf = BytesMut::from(&b"\x00\x0csmon.version\x01\x050.0.0HTTP/1.1"[..]);
        while let Ok(Some(_)) = dec.decode(&mut buf) {}
        assert_ne!(dec.offset(), 0);
    }

    #[test]
    fn a_token_is_48_bytes_and_a_free_entry_costs_no_more() {
        assert_eq!(core::mem::size_of::<Token>(), 48);
        assert_eq!(core::mem::size_of::<Option<Token>>(), 48);
    }

    /// Decodes `wire`, each string's last 4 KB trickled a byte per call; returns the updates and the work.
    fn trickle(wire: &[u8], ends: &[usize]) -> (Vec<Update>, usize) {
        work::EXAMINED.with(|c| c.set(0));
        let mut dec = StreamDecoder::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut start = 0;
        for &end in ends {
            let bulk = end.saturating_sub(4096).max(start);
            for piece in std::iter::once(&wire[start..bulk]).chain(wire[bulk..end].chunks(1)) {
                buf.extend_from_slice(piece);
                while let Some(u) = dec.decode(&mut buf).unwrap() {
                    out.push(u);
                }
            }
            start = end;
        }
        (out, work::EXAMINED.with(|c| c.get()))
    }

    #[test]
    fn longest_strings_of_ffs_trickled_in_are_decoded_once() {
        // Three strings of 65,000 FF bytes (each 16 FFs carry a stuffed FE), and the same with `a`.
        for fill in [0xff, b'a'] {
            let mut enc = crate::StreamEncoder::default();
            let mut wire = BytesMut::new();
            let mut ends = Vec::new();
            for i in 0..3 {
                let text = vec![fill; 65_000];
                enc.encode(&crate::Sample::new(format!("big.s{i}"), [], &text[..]), &mut wire).unwrap();
                ends.push(wire.len());
            }
            let (whole, whole_work) = trickle(&wire, &[wire.len()]);
            let (trickled, work) = trickle(&wire, &ends);
            assert_eq!(trickled, whole);
            eprintln!(
                "figure: {fill:#04x} strings, last 4 KB a byte per call: {:.2}x the bytes walked in one call",
                work as f64 / whole_work as f64
            );
            assert!(work <= 3 * whole_work, "{work} bytes walked against {whole_work}");
        }
    }
}
