//! The sans-IO encoder: [`Sample`]s in, bytes out. The same input always gives the same bytes.

#[allow(unused_imports)]
use crate::prelude::*;
use bytes::{BufMut, BytesMut};

use super::decoder::TokenMap;

/// The encoder's names: a hash map with the token hasher, or an ordered map without `std`.
#[cfg(feature = "std")]
type NameMap<V> =
    std::collections::HashMap<Arc<str>, V, core::hash::BuildHasherDefault<super::decoder::TokenHasher>>;
/// The encoder's names: a hash map with the token hasher, or an ordered map without `std`.
#[cfg(not(feature = "std"))]
type NameMap<V> = alloc::collections::BTreeMap<Arc<str>, V>;
use crate::error::EncodeError;
use crate::message::{Kind, Sample, Value};
use crate::wire::{
    Form, Limits, DEFINITION_TOKEN, FF, FF_STUFF_AFTER, INDEX_ADD, INDEX_PREVIOUS, INDEX_RESET, INDEX_SAME,
    NAME_MIN_LEN, RESYNC, STUFFING,
};

/// How a [`StreamEncoder`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderConfig {
    /// Size bounds (the same defaults as the decoder's, so whatever is encoded decodes).
    pub limits: Limits,
    /// Emit the resync sequence (17×FF FE) before the first sample, as every `mon` run should, since
    /// its output file is appended across runs (A10).
    pub resync_at_start: bool,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig { limits: Limits::default(), resync_at_start: true }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    token: u64,
    last: Last,
}

#[derive(Debug, Clone)]
enum Last {
    Unsigned(u64),
    Text(Vec<u8>),
}

#[derive(Debug, Clone)]
struct NameEntry {
    kind: Kind,
    /// The unindexed token of this name.
    plain: Option<Slot>,
    /// The indexed tokens of this name, by bound (first) index (A13).
    indexed: TokenMap<Slot>,
    /// The first token defined for this name: what indexed copies are made from.
    first_token: Option<u64>,
}

/// The sans-IO smon encoder.
///
/// It defines tokens on first use (numbered max+1, A7), an indexed token per (name, first index) of
/// an indexed series (A13), picks the shortest number form with the A6 tie order, appends to or
/// restarts strings (A9), stuffs FF runs (A10) and emits the fewest index ops (A11).
///
/// ```
/// use bytes::BytesMut;
/// use smon_codec::{EncoderConfig, Sample, StreamEncoder};
///
/// let mut enc = StreamEncoder::new(EncoderConfig { resync_at_start: false, ..Default::default() });
/// let mut out = BytesMut::new();
/// enc.encode(&Sample::new("count", [], 7), &mut out).unwrap();
/// enc.encode(&Sample::new("count", [], 12), &mut out).unwrap();
/// assert_eq!(&out[..], b"\x00\x06ucount\x01\x07\x00\x05");
/// ```
#[derive(Debug, Clone)]
pub struct StreamEncoder {
    config: EncoderConfig,
    /// Names are the caller's own, so a fast non-keyed hash is fine here.
    names: NameMap<NameEntry>,
    tokens: usize,
    next_token: u64,
    current: u64,
    ix: Vec<u64>,
    started: bool,
}

impl Default for StreamEncoder {
    fn default() -> Self {
        StreamEncoder::new(EncoderConfig::default())
    }
}

impl StreamEncoder {
    /// An encoder at the start of a stream.
    pub fn new(config: EncoderConfig) -> Self {
        StreamEncoder {
            config,
            names: NameMap::default(),
            tokens: 0,
            next_token: 1,
            current: DEFINITION_TOKEN,
            ix: Vec::new(),
            started: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// How many tokens are defined.
    pub fn token_count(&self) -> usize {
        self.tokens
    }

    /// Writes the resync sequence (17×FF FE) and forgets every token, value and index (A10).
    pub fn resync(&mut self, dst: &mut BytesMut) {
        dst.put_slice(&RESYNC);
        self.names.clear();
        self.tokens = 0;
        self.next_token = 1;
        self.current = DEFINITION_TOKEN;
        self.ix.clear();
        self.started = true;
    }

    /// Encodes one sample. On error nothing is written and the state is unchanged.
    pub fn encode(&mut self, sample: &Sample, dst: &mut BytesMut) -> Result<(), EncodeError> {
        self.encode_parts(&sample.name, &sample.index, &sample.value, dst)
    }

    /// Encodes one sample given by its parts (saves building a [`Sample`]).
    pub fn encode_parts(
        &mut self,
        name: &str,
        index: &[u64],
        value: &Value,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        // The common case first: a name and series already defined (one hash lookup).
        if let Some(entry) = self.names.get_mut(name) {
            if entry.kind == value.kind() && index.len() <= self.config.limits.max_index_depth {
                let slot = match index.first() {
                    None => entry.plain.as_mut(),
                    Some(f) => entry.indexed.get_mut(f),
                };
                if let Some(slot) = slot {
                    if let Value::Text(s) = value {
                        let max = self.config.limits.max_string_len;
                        if s.len() > max {
                            return Err(EncodeError::StringTooLong { len: s.len(), max });
                        }
                    }
                    reach_index(&mut self.ix, index, dst);
                    Form::unsigned(self.current, slot.token).put(dst);
                    self.current = slot.token;
                    put_value(&mut slot.last, value, dst);
                    return Ok(());
                }
            }
        }
        self.check(name, index, value)?;
        if !self.started {
            self.started = true;
            if self.config.resync_at_start {
                dst.put_slice(&RESYNC);
            }
        }
        if !self.names.contains_key(name) {
            let kind = value.kind();
            let entry = NameEntry { kind, plain: None, indexed: TokenMap::default(), first_token: None };
            self.names.insert(Arc::from(name), entry);
        }
        self.define(name, index, value, dst);
        Ok(())
    }

    /// Everything that can fail, checked before a byte is written.
    fn check(&self, name: &str, index: &[u64], value: &Value) -> Result<(), EncodeError> {
        let limits = &self.config.limits;
        if let Value::Text(s) = value {
            if s.len() > limits.max_string_len {
                return Err(EncodeError::StringTooLong { len: s.len(), max: limits.max_string_len });
            }
        }
        if index.len() > limits.max_index_depth {
            return Err(EncodeError::IndexTooDeep { depth: index.len(), max: limits.max_index_depth });
        }
        let defines = match self.names.get(name) {
            Some(entry) => {
                if entry.kind != value.kind() {
                    return Err(EncodeError::KindMismatch {
                        name: name.to_string(),
                        defined: entry.kind,
                        got: value.kind(),
                    });
                }
                match index.first() {
                    None => entry.plain.is_none(),
                    Some(f) => !entry.indexed.contains_key(f),
                }
            }
            None => {
                if name.len() < NAME_MIN_LEN {
                    return Err(EncodeError::NameTooShort { name: name.to_string() });
                }
                if name.len() + 1 > limits.max_string_len {
                    return Err(EncodeError::NameTooLong { len: name.len(), max: limits.max_string_len - 1 });
                }
                true
            }
        };
        if defines && self.tokens >= limits.max_tokens {
            return Err(EncodeError::TooManyTokens { max: limits.max_tokens });
        }
        Ok(())
    }

    /// Defines a token for `(name, index[0])` and sends its first value (A7, A8, A13).
    fn define(&mut self, name: &str, index: &[u64], value: &Value, dst: &mut BytesMut) {
        let new = self.next_token;
        self.next_token += 1;
        self.tokens += 1;
        let entry = self.names.get(name).expect("present");
        let kind = entry.kind;
        let copy_from = entry.first_token.filter(|_| !index.is_empty());
        match (index.is_empty(), copy_from) {
            (true, _) => {
                // A plain definition reports the current indexes: clear them first.
                if !self.ix.is_empty() {
                    dst.put_u8(INDEX_RESET);
                    self.ix.clear();
                }
                Form::unsigned(self.current, DEFINITION_TOKEN).put(dst);
                put_definition(kind, name, dst);
                Form::unsigned(DEFINITION_TOKEN, new).put(dst);
            }
            (false, Some(from)) => {
                // An indexed copy of an existing token of this name (A13).
                Form::unsigned(self.current, from).put(dst);
                self.put_indexed_ops(index, dst);
                Form::unsigned(from, new).put(dst);
            }
            (false, None) => {
                Form::unsigned(self.current, DEFINITION_TOKEN).put(dst);
                self.put_indexed_ops(index, dst);
                put_definition(kind, name, dst);
                Form::unsigned(DEFINITION_TOKEN, new).put(dst);
            }
        }
        self.current = new;
        let mut slot = Slot {
            token: new,
            last: match kind {
                Kind::Unsigned => Last::Unsigned(0),
                Kind::Text => Last::Text(Vec::new()),
            },
        };
        put_value(&mut slot.last, value, dst);
        let entry = self.names.get_mut(name).expect("present");
        entry.first_token.get_or_insert(new);
        match index.first() {
            None => entry.plain = Some(slot),
            Some(&f) => {
                entry.indexed.insert(f, slot);
            }
        }
    }

    /// `FD`, then `FA` for every level: the start of an indexed-token definition (A13).
    fn put_indexed_ops(&mut self, index: &[u64], dst: &mut BytesMut) {
        dst.put_u8(INDEX_RESET);
        for &n in index {
            dst.put_u8(INDEX_ADD);
            Form::positive(n).put(dst);
        }
        self.ix.clear();
        self.ix.extend_from_slice(index);
    }
}

/// The fewest index ops (A11) after which the effective index of the target token is `index`:
/// for an unindexed token (`index` empty) that is no indexes; for an indexed token bound to
/// `index[0]`, any vector of the same depth agreeing on levels 1.. (level 0 is replaced, A13), or
/// no indexes when `index` has one level.
fn reach_index(ix: &mut Vec<u64>, index: &[u64], dst: &mut BytesMut) {
    let (have, want) = (ix.len(), index.len());
    if want == 0 {
        if have > 0 {
            dst.put_u8(INDEX_RESET);
            ix.clear();
        }
        return;
    }
    if want == 1 && have <= 1 {
        return;
    }
    // Which level below 0 differs (level 0 is the token's own, A13): none, one (its number), or
    // several (usize::MAX).
    let mut differing = (1..want).filter(|&l| have == want && ix[l] != index[l]);
    let differs = match (differing.next(), differing.next()) {
        (None, _) => None,
        (Some(l), None) => Some(l),
        (Some(_), Some(_)) => Some(usize::MAX),
    };
    if have == want && differs.is_none() {
        return;
    }
    if have == want && differs == Some(want - 1) {
        dst.put_u8(INDEX_SAME);
        Form::positive(index[want - 1]).put(dst);
        ix[want - 1] = index[want - 1];
        return;
    }
    if have == want && want >= 3 && differs == Some(want - 2) {
        dst.put_u8(INDEX_PREVIOUS);
        Form::positive(index[want - 2]).put(dst);
        ix[want - 2] = index[want - 2];
        return;
    }
    if have >= 1 && have < want && ix[1..] == index[1..have] {
        // Only deeper levels are missing: push them.
        for &n in &index[have..] {
            dst.put_u8(INDEX_ADD);
            Form::positive(n).put(dst);
        }
        ix.extend_from_slice(&index[have..]);
        return;
    }
    dst.put_u8(INDEX_RESET);
    if want > 1 {
        for &n in index {
            dst.put_u8(INDEX_ADD);
            Form::positive(n).put(dst);
        }
    }
    ix.clear();
    if want > 1 {
        ix.extend_from_slice(index);
    }
}

/// A definition string: type byte + name, appended to token 0's empty value (A8, A9).
fn put_definition(kind: Kind, name: &str, dst: &mut BytesMut) {
    let len = name.len() + 1;
    let form = Form::positive(len as u64);
    form.put(dst);
    let mut data = Vec::with_capacity(len);
    data.push(kind.type_byte());
    data.extend_from_slice(name.as_bytes());
    put_string_data(&data, form.trailing_ff(), dst);
}

/// A value against the slot's last one (A6, A9, A12), updating it.
fn put_value(last: &mut Last, value: &Value, dst: &mut BytesMut) {
    match (last, value) {
        (Last::Unsigned(prev), Value::Unsigned(v)) => {
            Form::unsigned(*prev, *v).put(dst);
            *prev = *v;
        }
        (Last::Text(prev), Value::Text(s)) => {
            let (form, data) = if s.starts_with(prev.as_slice()) {
                (Form::positive((s.len() - prev.len()) as u64), &s[prev.len()..])
            } else {
                (Form::absolute(s.len() as u64), &s[..])
            };
            form.put(dst);
            put_string_data(data, form.trailing_ff(), dst);
            prev.clear();
            prev.extend_from_slice(s);
        }
        (last, value) => unreachable!("kinds are checked before encoding: {last:?} vs {value:?}"),
    }
}

/// String data with an FE stuffed after every 16 consecutive FFs, counting from the FFs that ended
/// the length field (A10: the run is counted over the raw stream).
fn put_string_data(data: &[u8], mut run: u32, dst: &mut BytesMut) {
    let mut rest = data;
    while !rest.is_empty() {
        let clean = rest.iter().position(|&b| b == FF).unwrap_or(rest.len());
        if clean > 0 {
            dst.put_slice(&rest[..clean]);
            rest = &rest[clean..];
            run = 0;
            continue;
        }
        dst.put_u8(FF);
        rest = &rest[1..];
        run += 1;
        if run == FF_STUFF_AFTER {
            dst.put_u8(STUFFING);
            run = 0;
        }
    }
}
