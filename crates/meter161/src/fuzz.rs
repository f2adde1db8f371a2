//! Fuzz target bodies, shared by `fuzz/fuzz_targets/` and the corpus replays of the unit tests
//! (`fuzz/tests.rs`). Built only under `cfg(fuzzing)` and in tests: not part of the API.

use bytes::BytesMut;

use crate::codec::{ClientCodec, ServerCodec};
use crate::message::ServerMessage;

/// Every result of decoding `chunks` in order with a fresh codec, then EOF.
fn client_results(chunks: &[&[u8]], max_line: usize) -> Vec<Result<ServerMessage, crate::DecodeError>> {
    let mut codec = ClientCodec::new(max_line, 16);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some(item) = codec.decode(&mut buf).transpose() {
            out.push(item);
        }
    }
    while let Some(item) = codec.decode_eof(&mut buf).transpose() {
        out.push(item);
    }
    assert!(buf.is_empty(), "EOF leaves nothing buffered");
    out
}

fn server_results(chunks: &[&[u8]]) -> Vec<Result<crate::ClientMessage, crate::CommandError>> {
    let mut codec = ServerCodec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some(item) = codec.decode(&mut buf).transpose() {
            out.push(item);
        }
        assert!(buf.len() < crate::SERVER_INPUT_BUFSIZE, "the command buffer stays bounded");
    }
    out
}

/// Decodes `data` in both directions, whole and split at a point taken from the data, and checks:
/// no panic; the same results whatever the split; every decoded message re-encodes to a line that
/// decodes to the same message; the session accepts whatever the codec yields.
pub fn decode(data: &[u8]) {
    let split = data.first().map_or(0, |&b| usize::from(b)) % (data.len() + 1);
    let (a, b) = data.split_at(split);
    let max_line = 64;

    let whole = client_results(&[data], max_line);
    assert_eq!(whole, client_results(&[a, b], max_line), "split at {split}");
    let bytewise: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(whole, client_results(&bytewise, max_line), "byte by byte");

    let mut session = crate::Session::new();
    for msg in whole.into_iter().flatten() {
        let mut line = BytesMut::new();
        crate::encode_server(&msg, &mut line).expect("a decoded message is encodable");
        let again = client_results(&[&line], usize::MAX);
        assert_eq!(again, vec![Ok(msg.clone())], "re-decoding {line:?}");
        let _ = session.handle(msg);
    }

    let commands = server_results(&[data]);
    assert_eq!(commands, server_results(&[a, b]), "commands split at {split}");
    for cmd in commands.into_iter().flatten() {
        let mut line = BytesMut::new();
        crate::encode_client(&cmd, &mut line);
        assert_eq!(server_results(&[&line]), vec![Ok(cmd)]);
    }
}

#[cfg(feature = "arbitrary")]
pub use structured::session;

/// `meter161_session`: an `arbitrary` sequence of server messages (and raw lines through the codec) drives a
/// `Session`, checked against a model after every step.
#[cfg(feature = "arbitrary")]
mod structured {
    use std::sync::Arc;

    use arbitrary::{Arbitrary, Unstructured};
    use bytes::BytesMut;

    use crate::codec::ClientCodec;
    use crate::error::ProtocolError;
    use crate::message::{ServerMessage, PROTOCOL_VERSION, SYS161_FIELDS, U32_FIELDS};
    use crate::session::{Session, Update};

    /// The line limit of the codec the `Line` operations go through (small, so overlong lines are cheap).
    const MAX_LINE: usize = 96;
    /// The word limit of that codec.
    const MAX_FIELDS: usize = 16;
    /// At most this many operations per input.
    const MAX_OPS: usize = 512;

    /// A field name: mostly sys161's (six of them wrap at 2^32), so that names repeat; sometimes anything.
    #[derive(Debug)]
    struct Name(String);

    impl<'a> Arbitrary<'a> for Name {
        fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
            Ok(Name(if u.ratio(7, 8)? {
                SYS161_FIELDS[u.choose_index(SYS161_FIELDS.len())?].to_string()
            } else {
                String::arbitrary(u)?
            }))
        }
    }

    /// A `HELLO` version: mostly the right one.
    #[derive(Debug)]
    struct Version(u32);

    impl<'a> Arbitrary<'a> for Version {
        fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
            Ok(Version(if u.ratio(3, 4)? { PROTOCOL_VERSION } else { u32::arbitrary(u)? }))
        }
    }

    /// One column of a `DATA` row, relative to the same column of the previous row (0 when there is none).
    #[derive(Debug, Arbitrary)]
    enum Value {
        Same,
        Up(u32),
        Down(u16),
        /// A 32-bit counter stepping past 2^32 - 1 (from wherever it is, modulo 2^32).
        Wrap32(u16),
        NearU32Max(u8),
        Max,
        Zero,
        Any(u64),
    }

    impl Value {
        fn resolve(&self, prev: u64) -> u64 {
            match *self {
                Value::Same => prev,
                Value::Up(n) => prev.wrapping_add(u64::from(n)),
                Value::Down(n) => prev.wrapping_sub(u64::from(n)),
                Value::Wrap32(n) => u64::from((prev as u32).wrapping_add(u32::MAX - u32::from(n))),
                Value::NearU32Max(n) => u64::from(u32::MAX - u32::from(n)),
                Value::Max => u64::MAX,
                Value::Zero => 0,
                Value::Any(v) => v,
            }
        }
    }

    #[derive(Debug, Arbitrary)]
    enum Op {
        Hello(Version),
        Head(Vec<Name>),
        /// sys161's own greeting: `HELLO 2`, its eleven fields, their widths.
        Greeting,
        /// `WIDTH` with as many widths as the header has fields (the first ones given, then zeros).
        WidthFit(Vec<u32>),
        /// `WIDTH` with any number of widths.
        Width(Vec<u32>),
        /// A `DATA` row with as many values as the header has fields, each relative to the previous row.
        DataFit(Vec<Value>),
        /// A `DATA` row with any number of values.
        Data(Vec<u64>),
        Ok,
        Bad(Option<String>),
        Error(Option<String>),
        Unknown(String),
        /// Raw bytes from the server, through a `ClientCodec` (lines may span operations).
        Line(Vec<u8>),
        /// The connection ends (the codec sees EOF) and a new one starts with a fresh session.
        Reconnect,
    }

    /// What the session must hold, from its documentation.
    #[derive(Debug, Default)]
    struct Model {
        version: Option<u32>,
        names: Option<Vec<String>>,
        widths: Vec<u32>,
        previous: Option<Vec<u64>>,
    }

    struct Harness {
        session: Session,
        model: Model,
        codec: ClientCodec,
        buf: BytesMut,
    }

    /// `meter161_session`: operations from `data` drive a `Session`. Invariants: no panic; every result (update or typed error) is the documented one;
    /// errors leave the session as it was; a sample's values are the row's, its header the current one, and its
    /// deltas are absent exactly on the first row after a `HEAD` (or connect) and otherwise take the previous row
    /// to this one: `prev + delta == value` modulo 2^64, or modulo 2^32 (with a delta below 2^32) for the 32-bit
    /// counters when both values fit in 32 bits; the codec never holds more than a line.
    pub fn session(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let mut h = Harness {
            session: Session::new(),
            model: Model::default(),
            codec: ClientCodec::new(MAX_LINE, MAX_FIELDS),
            buf: BytesMut::new(),
        };
        let Ok(ops) = u.arbitrary_iter::<Op>() else { return };
        for op in ops.take(MAX_OPS) {
            let Ok(op) = op else { break };
            h.run(op);
            h.check_state();
        }
    }

    impl Harness {
        fn run(&mut self, op: Op) {
            let width = self.model.names.as_ref().map_or(0, Vec::len);
            match op {
                Op::Hello(Version(v)) => self.handle(ServerMessage::Hello(v)),
                Op::Head(names) => self.handle(ServerMessage::Head(names.into_iter().map(|n| n.0).collect())),
                Op::Greeting => ServerMessage::sys161_greeting().into_iter().for_each(|m| self.handle(m)),
                Op::WidthFit(mut widths) => {
                    widths.resize(width, 0);
                    self.handle(ServerMessage::Width(widths));
                }
                Op::Width(widths) => self.handle(ServerMessage::Width(widths)),
                Op::DataFit(mut values) => {
                    values.resize_with(width, || Value::Same);
                    let prev = self.model.previous.clone().unwrap_or_else(|| vec![0; width]);
                    let row = values.iter().zip(prev).map(|(v, p)| v.resolve(p)).collect();
                    self.handle(ServerMessage::Data(row));
                }
                Op::Data(values) => self.handle(ServerMessage::Data(values)),
                Op::Ok => self.handle(ServerMessage::Ok),
                Op::Bad(text) => self.handle(ServerMessage::Bad(text)),
                Op::Error(text) => self.handle(ServerMessage::Error(text)),
                Op::Unknown(line) => self.handle(ServerMessage::Unknown(line)),
                Op::Line(bytes) => {
                    self.buf.extend_from_slice(&bytes);
                    loop {
                        match self.codec.decode(&mut self.buf) {
                            Ok(Some(msg)) => self.handle(msg),
                            Ok(None) => break,
                            // A bad line is reported and skipped; the connection goes on.
                            Err(_) => {}
                        }
                    }
                    assert!(
                        self.buf.len() <= MAX_LINE,
                        "the codec holds {} bytes, more than a line",
                        self.buf.len()
                    );
                }
                Op::Reconnect => {
                    while let Some(item) = self.codec.decode_eof(&mut self.buf).transpose() {
                        if let Ok(msg) = item {
                            self.handle(msg);
                        }
                    }
                    assert!(self.buf.is_empty(), "EOF leaves nothing buffered");
                    self.session = Session::new();
                    self.model = Model::default();
                }
            }
        }

        /// Applies `msg` to the session and the model, and checks the result.
        fn handle(&mut self, msg: ServerMessage) {
            let before = format!("{:?}", self.session);
            let result = self.session.handle(msg.clone());
            let m = &mut self.model;
            let expected_err = match &msg {
                ServerMessage::Hello(v) => {
                    m.version = Some(*v);
                    (*v != PROTOCOL_VERSION).then_some(ProtocolError::UnsupportedVersion { got: *v })
                }
                ServerMessage::Head(names) if names.is_empty() => Some(ProtocolError::EmptyHead),
                ServerMessage::Width(_) if m.names.is_none() => Some(ProtocolError::WidthBeforeHead),
                ServerMessage::Width(w) if Some(w.len()) != m.names.as_ref().map(Vec::len) => {
                    Some(ProtocolError::WidthCount { expected: m.widths.len(), got: w.len() })
                }
                ServerMessage::Data(_) if m.names.is_none() => Some(ProtocolError::DataBeforeHead),
                ServerMessage::Data(v) if Some(v.len()) != m.names.as_ref().map(Vec::len) => {
                    Some(ProtocolError::FieldCount { expected: m.widths.len(), got: v.len() })
                }
                ServerMessage::Bad(text) => Some(ProtocolError::Rejected { text: text.clone() }),
                ServerMessage::Error(text) => Some(ProtocolError::ServerError { text: text.clone() }),
                ServerMessage::Unknown(line) => Some(ProtocolError::UnknownMessage { line: line.clone() }),
                _ => None,
            };
            if let Some(expected) = expected_err {
                let fatal = matches!(msg, ServerMessage::Hello(_) | ServerMessage::Error(_));
                let err = result.expect_err("an error");
                assert_eq!(err, expected, "{msg:?}");
                assert_eq!(err.is_fatal(), fatal, "{err:?} fatal");
                if !matches!(msg, ServerMessage::Hello(_)) {
                    assert_eq!(format!("{:?}", self.session), before, "{err:?} changed the session");
                }
                return;
            }
            let update = result.unwrap_or_else(|e| panic!("{msg:?} failed: {e:?}"));
            let current = self.session.header().cloned();
            match msg {
                ServerMessage::Hello(_) | ServerMessage::Ok => assert_eq!(update, None, "{msg:?}"),
                ServerMessage::Head(names) => {
                    let Some(Update::Header(h)) = update else { panic!("HEAD gave {update:?}") };
                    assert!(
                        current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &h)),
                        "HEAD's header is the current one"
                    );
                    m.widths = names.iter().map(|n| u32::try_from(n.len()).unwrap_or(u32::MAX)).collect();
                    m.names = Some(names);
                    m.previous = None;
                }
                ServerMessage::Width(widths) => {
                    let Some(Update::Header(h)) = update else { panic!("WIDTH gave {update:?}") };
                    assert!(
                        current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &h)),
                        "WIDTH's header is the current one"
                    );
                    m.widths = widths;
                }
                ServerMessage::Data(values) => {
                    let Some(Update::Sample(s)) = update else { panic!("DATA gave {update:?}") };
                    let header = current.expect("a header");
                    assert!(Arc::ptr_eq(s.header(), &header), "a sample's header is the current one");
                    assert_eq!(s.values(), &values[..]);
                    match (&m.previous, s.deltas()) {
                        (None, None) => {}
                        (Some(prev), Some(deltas)) => {
                            assert_eq!(deltas.len(), values.len());
                            for (i, name) in header.names().iter().enumerate() {
                                check_delta(name, prev[i], values[i], deltas[i]);
                            }
                        }
                        (prev, deltas) => panic!("previous row {prev:?} but deltas {deltas:?}"),
                    }
                    for (i, name) in header.names().iter().enumerate() {
                        let first = header.index_of(name).expect("a field of the header");
                        assert!(first <= i);
                        assert_eq!(s.get(name), Some(values[first]));
                        assert_eq!(s.delta(name), s.deltas().map(|d| d[first]));
                    }
                    m.previous = Some(values);
                }
                other => panic!("{other:?} succeeded"),
            }
        }

        /// The session's state is the model's.
        fn check_state(&self) {
            let m = &self.model;
            assert_eq!(self.session.version(), m.version);
            match (self.session.header(), &m.names) {
                (None, None) => {}
                (Some(h), Some(names)) => {
                    assert_eq!(h.names(), &names[..]);
                    assert_eq!(h.widths(), &m.widths[..]);
                    assert_eq!((h.len(), h.is_empty()), (names.len(), names.is_empty()));
                    for (i, name) in names.iter().enumerate() {
                        assert_eq!(h.wraps_at_u32(i), U32_FIELDS.contains(&name.as_str()), "{name:?}");
                    }
                    assert!(!h.wraps_at_u32(names.len()), "past the last field");
                }
                (h, names) => panic!("header {h:?}, model {names:?}"),
            }
        }
    }

    /// A delta takes the previous value to the current one: modulo 2^32 for a 32-bit counter whose two values
    /// fit in 32 bits (so a wrap past 2^32 - 1 is a small step forward), modulo 2^64 otherwise.
    fn check_delta(name: &str, prev: u64, cur: u64, delta: u64) {
        let fits = |v: u64| v <= u64::from(u32::MAX);
        if U32_FIELDS.contains(&name) && fits(prev) && fits(cur) {
            assert!(fits(delta), "{name}: {prev} -> {cur} gave a 32-bit counter a delta of {delta}");
            assert_eq!(
                (prev as u32).wrapping_add(delta as u32),
                cur as u32,
                "{name}: {prev} -> {cur} by {delta}"
            );
        } else {
            assert_eq!(prev.wrapping_add(delta), cur, "{name}: {prev} -> {cur} by {delta}");
        }
    }
}

#[cfg(test)]
mod tests;
