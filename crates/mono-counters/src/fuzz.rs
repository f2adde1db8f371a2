//! Fuzz target bodies, shared by `fuzz/fuzz_targets/` and the corpus replays of the unit tests
//! (`fuzz/tests.rs`). Built only under `cfg(fuzzing)` and in tests: not part of the API.

use bytes::BytesMut;

use crate::codec::*;
use crate::message::*;

/// Bytes from an agent, decoded by the inspector: never panics; every message re-encodes to the
/// exact bytes it came from; feeding the bytes in two pieces (split where the last byte says)
/// gives the same messages.
pub fn agent_stream(data: &[u8]) {
    let split = data.last().map_or(0, |&b| b as usize % (data.len() + 1));
    agent_stream_split(data, split);
}

/// [`agent_stream`] with an explicit split point (at most `data.len()`).
///
/// Messages are compared by their encoding, because a NaN double is not equal to itself.
pub fn agent_stream_split(data: &[u8], split: usize) {
    let (messages, consumed, err) = decode_agent(&[data]);
    let (a, b) = data.split_at(split.min(data.len()));
    let (pieces, pieces_consumed, pieces_err) = decode_agent(&[a, b]);
    assert_eq!(wire(&pieces), wire(&messages), "split at {} changed the messages", a.len());
    assert_eq!((pieces_consumed, &pieces_err), (consumed, &err), "split at {} changed the outcome", a.len());
    let again = wire(&messages);
    assert_eq!(&again[..], &data[..consumed], "re-encoding differs");
    let (redecoded, _, err) = decode_agent(&[&again]);
    assert_eq!(wire(&redecoded), again);
    assert_eq!(err, None);
}

fn wire(messages: &[AgentMessage]) -> BytesMut {
    let mut out = BytesMut::new();
    for m in messages {
        encode_agent_message(m, &mut out).expect("decoded messages encode");
    }
    out
}

type AgentDecoded = (Vec<AgentMessage>, usize, Option<crate::DecodeError>);

fn decode_agent(pieces: &[&[u8]]) -> AgentDecoded {
    let mut codec = InspectorCodec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut consumed = 0;
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match codec.decode_message(&mut buf) {
                Ok(Some(m)) => {
                    consumed += before - buf.len();
                    out.push(m);
                }
                Ok(None) => break,
                Err(e) => return (out, consumed, Some(e)),
            }
        }
    }
    (out, consumed, None)
}

/// Bytes from an inspector, decoded by the agent under both numberings: never panics; every
/// request re-encodes to the exact bytes it came from.
pub fn inspector_stream(data: &[u8]) {
    for opcodes in [RequestOpcodes::Agent, RequestOpcodes::Gist] {
        let mut codec = AgentCodec::new(Limits::default(), opcodes);
        let mut buf = BytesMut::from(data);
        let mut again = BytesMut::new();
        let mut consumed = 0;
        while let Ok(Some(m)) = codec.decode_message(&mut buf) {
            consumed = data.len() - buf.len();
            encode_inspector_message(&m, opcodes, &mut again).expect("decoded requests encode");
        }
        assert_eq!(&again[..], &data[..consumed], "re-encoding differs");
    }
}

#[cfg(feature = "arbitrary")]
pub use structured::counter_table;

/// `mono_counter_table`: an `arbitrary` sequence of Hellos, adds, removes and samples, applied directly or
/// through the wire and an `InspectorCodec`, drives a `CounterTable` checked against a model after every step.
#[cfg(feature = "arbitrary")]
mod structured {
    use std::collections::BTreeMap;

    use arbitrary::{Arbitrary, Unstructured};
    use bytes::BytesMut;

    use crate::codec::{encode_agent_message, InspectorCodec};
    use crate::message::*;
    use crate::table::CounterTable;

    /// At most this many operations per input.
    const MAX_OPS: usize = 512;
    /// At most this many names are looked up with `find` per check.
    const MAX_FINDS: usize = 8;

    /// A counter index: mostly a few small ones (so that indexes collide), sometimes negative or anything.
    #[derive(Debug, Clone, Copy)]
    struct Index(i16);

    impl<'a> Arbitrary<'a> for Index {
        fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
            Ok(Index(match u.int_in_range(0..=15u8)? {
                0 => -1,
                1 => i16::arbitrary(u)?,
                n => i16::from(n % 10),
            }))
        }
    }

    /// A counter name: a few that collide (custom ones with and without a category), or anything.
    #[derive(Debug)]
    struct Name(String);

    impl<'a> Arbitrary<'a> for Name {
        fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
            const POOL: [&str; 6] = ["Methods JITted", "x", "Mono JIT:x", "a:b:c", "", "Custom"];
            Ok(Name(if u.ratio(7, 8)? {
                POOL[u.choose_index(POOL.len())?].to_string()
            } else {
                String::arbitrary(u)?
            }))
        }
    }

    #[derive(Debug, Arbitrary)]
    struct HeaderSpec {
        category: i8,
        name: Name,
        kind: i8,
        unit: i8,
        variance: i8,
        index: Index,
    }

    impl HeaderSpec {
        fn header(&self) -> Header {
            Header {
                category: Category::from_raw(i32::from(self.category % 10)),
                name: self.name.0.clone(),
                kind: CounterType::from_raw(i32::from(self.kind % 5)),
                unit: Unit::from_raw(i32::from(self.unit % 7)),
                variance: Variance::from_raw(i32::from(self.variance % 5)),
                index: self.index.0,
            }
        }
    }

    #[derive(Debug, Arbitrary)]
    enum ValueSpec {
        Int(i32),
        Long(i64),
        Word32(i32),
        Word64(i64),
        Double(f64),
        Raw(Vec<u8>),
    }

    impl ValueSpec {
        fn data(&self) -> ValueData {
            match *self {
                ValueSpec::Int(v) => CounterValue::Int(v).into(),
                ValueSpec::Long(v) => CounterValue::Long(v).into(),
                ValueSpec::Word32(v) => CounterValue::Word32(v).into(),
                ValueSpec::Word64(v) => CounterValue::Word64(v).into(),
                ValueSpec::Double(v) => CounterValue::Double(v).into(),
                ValueSpec::Raw(ref bytes) => ValueData::Raw(bytes.clone()),
            }
        }
    }

    #[derive(Debug, Arbitrary)]
    struct SampleSpec {
        timestamp: i64,
        values: Vec<(Index, ValueSpec)>,
    }

    impl SampleSpec {
        fn sample(&self) -> Sample {
            let values =
                self.values.iter().map(|(i, v)| SampleValue { index: i.0, data: v.data() }).collect();
            Sample { timestamp: self.timestamp, values }
        }
    }

    /// A message from the agent, sent over the wire.
    #[derive(Debug, Arbitrary)]
    enum Wire {
        Hello(Vec<HeaderSpec>),
        AddOk(HeaderSpec),
        /// A refused Add (NOK, NOTFOUND, EXISTING): nothing changes.
        AddRefused(u8),
        /// The Remove response to a request for `index`; only OK removes.
        Remove {
            index: Index,
            ok: bool,
        },
        Sampling(SampleSpec),
    }

    #[derive(Debug, Arbitrary)]
    enum Op {
        /// A new table from a Hello.
        Hello(Vec<HeaderSpec>),
        Insert(HeaderSpec),
        Remove(Index),
        Apply(SampleSpec),
        /// A message encoded, fed to the inspector's codec in two pieces split at `split`, and whatever decodes
        /// applied as the inspector does.
        Wire {
            msg: Wire,
            split: u16,
        },
    }

    /// What the table must hold, from its documentation.
    #[derive(Debug, Default)]
    struct Model {
        counters: BTreeMap<i16, (Header, Option<ValueData>)>,
        timestamp: Option<i64>,
        /// Inserts of an index not in the table, and removes of one that was.
        added: usize,
        removed: usize,
    }

    impl Model {
        fn insert(&mut self, header: Header) {
            if self.counters.insert(header.index, (header, None)).is_none() {
                self.added += 1;
            }
        }

        fn remove(&mut self, index: i16) {
            if index < 0 {
                self.removed += self.counters.len();
                self.counters.clear();
            } else if self.counters.remove(&index).is_some() {
                self.removed += 1;
            }
        }

        fn from_hello(hello: &Hello) -> Self {
            let mut model = Model::default();
            hello.headers.iter().for_each(|h| model.insert(h.clone()));
            model
        }

        /// The documented effect of a sample: known indexes take the value (the last one, if repeated), in order.
        fn apply(&mut self, sample: &Sample) -> Vec<i16> {
            self.timestamp = Some(sample.timestamp);
            let mut changed = Vec::new();
            for v in &sample.values {
                if let Some((_, value)) = self.counters.get_mut(&v.index) {
                    *value = Some(v.data.clone());
                    changed.push(v.index);
                }
            }
            changed
        }
    }

    /// A value as comparable bits (a NaN double is not equal to itself).
    fn bits(value: &Option<ValueData>) -> Option<(u8, Vec<u8>)> {
        value.as_ref().map(|v| match v {
            ValueData::Typed(t) => {
                let tag = match t {
                    CounterValue::Int(_) => 0,
                    CounterValue::Long(_) => 1,
                    CounterValue::Word32(_) => 2,
                    CounterValue::Word64(_) => 3,
                    CounterValue::Double(_) => 4,
                };
                (tag, t.to_le_bytes())
            }
            ValueData::Raw(bytes) => (5, bytes.clone()),
        })
    }

    struct Harness {
        table: CounterTable,
        model: Model,
        codec: InspectorCodec,
        buf: BytesMut,
    }

    /// `mono_counter_table`: operations from `data` drive a `CounterTable`. Invariants: no panic; `len()` is the
    /// number of inserts of a new index minus the removes of a known one; the readings are the model's, in index
    /// order, each under its header's index, with the last value sampled (none after a re-insert); `apply` reports
    /// exactly the known indexes of the sample, in order; `get`, `find` (the first counter with that full name,
    /// in index order) and `timestamp` agree with the model.
    pub fn counter_table(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let mut h = Harness {
            table: CounterTable::default(),
            model: Model::default(),
            codec: InspectorCodec::default(),
            buf: BytesMut::new(),
        };
        let Ok(ops) = u.arbitrary_iter::<Op>() else { return };
        for op in ops.take(MAX_OPS) {
            let Ok(op) = op else { break };
            h.run(op);
            h.check();
        }
    }

    impl Harness {
        fn hello(&mut self, hello: &Hello) {
            self.table = CounterTable::from_hello(hello);
            self.model = Model::from_hello(hello);
        }

        fn insert(&mut self, header: Header) {
            self.table.insert(header.clone());
            self.model.insert(header);
        }

        fn remove(&mut self, index: i16) {
            self.table.remove(index);
            self.model.remove(index);
        }

        fn apply(&mut self, sample: &Sample) {
            let changed = self.table.apply(sample);
            assert_eq!(changed, self.model.apply(sample), "the indexes a sample changed");
        }

        fn run(&mut self, op: Op) {
            match op {
                Op::Hello(headers) => {
                    let headers = headers.iter().map(HeaderSpec::header).collect();
                    self.hello(&Hello { version: PROTOCOL_VERSION, headers });
                }
                Op::Insert(spec) => self.insert(spec.header()),
                Op::Remove(Index(index)) => self.remove(index),
                Op::Apply(spec) => self.apply(&spec.sample()),
                Op::Wire { msg, split } => self.wire(msg, split),
            }
        }

        fn wire(&mut self, msg: Wire, split: u16) {
            let (message, removing) = match msg {
                Wire::Hello(headers) => {
                    let headers = headers.iter().map(HeaderSpec::header).collect();
                    (AgentMessage::Hello(Hello { version: PROTOCOL_VERSION, headers }), None)
                }
                Wire::AddOk(spec) => (AgentMessage::Add(AddResponse::Ok(spec.header())), None),
                Wire::AddRefused(n) => {
                    let refused = [AddResponse::Nok, AddResponse::NotFound, AddResponse::Existing];
                    (AgentMessage::Add(refused[usize::from(n) % 3].clone()), None)
                }
                Wire::Remove { index, ok } => {
                    (AgentMessage::Remove(if ok { Status::Ok } else { Status::NotFound }), Some(index.0))
                }
                Wire::Sampling(spec) => (AgentMessage::Sampling(spec.sample()), None),
            };
            let mut bytes = BytesMut::new();
            if encode_agent_message(&message, &mut bytes).is_err() {
                return;
            }
            let split = usize::from(split) % (bytes.len() + 1);
            let mut decoded = Vec::new();
            for piece in [&bytes[..split], &bytes[split..]] {
                self.buf.extend_from_slice(piece);
                loop {
                    match self.codec.decode_message(&mut self.buf) {
                        Ok(Some(m)) => decoded.push(m),
                        Ok(None) => break,
                        Err(_) => {
                            // The connection is lost; the next message starts a new one.
                            self.codec = InspectorCodec::default();
                            self.buf.clear();
                            return;
                        }
                    }
                }
            }
            assert!(self.buf.is_empty(), "a whole message leaves nothing buffered");
            assert!(decoded.len() <= 1, "one message decoded as {}", decoded.len());
            // As the inspector's read loop applies them.
            for m in decoded {
                match m {
                    AgentMessage::Hello(hello) => self.hello(&hello),
                    AgentMessage::Add(AddResponse::Ok(header)) => self.insert(header),
                    AgentMessage::Remove(Status::Ok) => self.remove(removing.expect("a Remove response")),
                    AgentMessage::Sampling(sample) => self.apply(&sample),
                    AgentMessage::Add(_) | AgentMessage::Remove(_) | AgentMessage::List(_) => {}
                }
            }
        }

        fn check(&self) {
            let (t, m) = (&self.table, &self.model);
            assert_eq!(t.len(), m.counters.len());
            assert_eq!(t.len(), m.added - m.removed, "len is inserts of new indexes minus removes");
            assert_eq!(t.is_empty(), m.counters.is_empty());
            assert_eq!(t.timestamp(), m.timestamp);
            let readings: Vec<_> = t.readings().collect();
            assert_eq!(readings.len(), m.counters.len());
            for (reading, (index, (header, value))) in readings.iter().zip(&m.counters) {
                assert_eq!(reading.header.index, *index, "a counter under another index");
                assert_eq!(&reading.header, header);
                assert_eq!(bits(&reading.value), bits(value), "the value of {index}");
                let got = t.get(*index).expect("a known index");
                assert!(std::ptr::eq(got, *reading));
            }
            assert!(readings.windows(2).all(|w| w[0].header.index < w[1].header.index), "index order");
            for probe in [-1, 10, i16::MIN, i16::MAX] {
                assert_eq!(t.get(probe).is_some(), m.counters.contains_key(&probe));
            }
            for (_, (header, _)) in m.counters.iter().take(MAX_FINDS) {
                let name = header.full_name();
                let first = m.counters.values().find(|(h, _)| h.full_name() == name).expect("itself");
                let found = t.find(&name).expect("a known name");
                assert_eq!(found.header, first.0, "find({name:?}) is the first in index order");
            }
        }
    }
}

#[cfg(test)]
mod tests;
