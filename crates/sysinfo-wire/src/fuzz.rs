//! Property checks shared by the fuzz targets and the corpus replays of the unit tests (`fuzz/tests.rs`).
//! Built only under `cfg(fuzzing)` and in tests: not part of the API.

#[allow(unused_imports)]
use crate::prelude::*;

use bytes::BytesMut;

use crate::codec::{decode_frame, encode_frame, Frame};
use crate::message::{BootRequest, BootResponse, NewConnection, SysinfoCommand};
use crate::reassembly::Reassembler;
use crate::report::Report;
use crate::wire::{from_bytes, to_bytes, Wire};

fn reencodes<T: Wire + PartialEq + core::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = from_bytes::<T>(data) {
        let bytes = to_bytes(&v).expect("a decoded value re-encodes");
        assert_eq!(from_bytes::<T>(&bytes).expect("and decodes again"), v);
        assert!(data.starts_with(&bytes), "decoding read a prefix: the encoding is that prefix");
    }
}

/// Wire values and host frames: decoding never panics; what decodes re-encodes and re-decodes equal.
pub fn wire(data: &[u8]) {
    // Wire values travel in one message's data, at most MAX_MSG_SIZE bytes.
    let payload = &data[..data.len().min(crate::MAX_MSG_SIZE)];
    reencodes::<SysinfoCommand>(payload);
    reencodes::<BootRequest>(payload);
    reencodes::<BootResponse>(payload);
    reencodes::<NewConnection>(payload);
    reencodes::<Option<u32>>(payload);
    reencodes::<String>(payload);

    let mut src = BytesMut::from(data);
    let mut frames: Vec<Frame> = Vec::new();
    while let Ok(Some(f)) = decode_frame(&mut src) {
        frames.push(f);
    }
    let mut again = BytesMut::new();
    for f in &frames {
        encode_frame(f, &mut again);
    }
    // The same frames fed one byte at a time decode identically.
    let mut split = BytesMut::new();
    let mut decoded = Vec::new();
    for b in again.iter() {
        split.extend_from_slice(&[*b]);
        while let Some(f) = decode_frame(&mut split).expect("re-encoded frames are valid") {
            decoded.push(f);
        }
    }
    assert_eq!(decoded, frames);
}

/// Report text: chunked anywhere, reassembled and parsed as every command, never panics; a report with no
/// unknown lines renders to text that parses back to the same report.
pub fn reports(data: &[u8]) {
    let (cut, body) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c).max(1), rest),
        None => (1, data),
    };
    let mut r = Reassembler::new(1 << 20);
    for chunk in body.chunks(cut) {
        if r.push(chunk).is_err() {
            return;
        }
    }
    r.close();
    let reply = r.finish();
    assert_eq!(reply.text.as_bytes() == body, !reply.lossy);
    for command in SysinfoCommand::ALL {
        let report = Report::parse(command, &reply.text);
        let rendered = report.render();
        if report.unknown_lines().is_empty() {
            assert_eq!(Report::parse(command, &rendered), report, "{rendered:?}");
        }
    }
}

#[cfg(feature = "arbitrary")]
pub use structured::reassembler;

/// `sysinfo_reassembler`: an `arbitrary` sequence of chunks, sentinels, closes and finishes drives a
/// `Reassembler`, checked against a model after every step.
#[cfg(feature = "arbitrary")]
mod structured {
    #[allow(unused_imports)]
    use crate::prelude::*;

    use arbitrary::{Arbitrary, Unstructured};

    use crate::reassembly::{chunk_text, End, Reassembler, ReassemblyError, Reply, DEFAULT_MAX_RESPONSE};
    use crate::wire::MAX_MSG_SIZE;

    /// At most this many operations per input.
    const MAX_OPS: usize = 512;

    /// A reassembler's limit: small ones (so that it is reached), whole messages, or the default.
    #[derive(Debug, Arbitrary)]
    enum Limit {
        Bytes(u16),
        Messages(u8),
        Default,
    }

    impl Limit {
        fn bytes(&self) -> usize {
            match *self {
                Limit::Bytes(n) => usize::from(n),
                Limit::Messages(n) => usize::from(n % 64) * MAX_MSG_SIZE,
                Limit::Default => DEFAULT_MAX_RESPONSE,
            }
        }
    }

    /// How a chunk is handed over.
    #[derive(Debug, Arbitrary, Clone, Copy)]
    enum How {
        /// `push`: copied.
        Copied,
        /// `push_owned`: its `Vec` kept.
        Owned,
        /// `push_bytes` of a slice of a larger buffer, as a decoded message's data is.
        Shared,
    }

    #[derive(Debug, Arbitrary)]
    enum Op {
        /// Finishes the current reply and starts a new reassembler.
        Restart(Limit),
        /// A chunk, pushed `how`; an empty one is the sentinel.
        Push { data: Vec<u8>, how: How },
        /// A chunk of `len % 2048` copies of `byte` (so chunks over a message's size are cheap to make).
        Fill { len: u16, byte: u8, how: How },
        /// A whole reply as the service sends it: `chunk_text`, then the sentinel.
        Service(Vec<u8>),
        /// The channel closed.
        Close,
        /// What a finish would give now (on a clone).
        Peek,
    }

    /// What the reassembler must hold, from its documentation.
    #[derive(Debug)]
    struct Model {
        max: usize,
        bytes: Vec<u8>,
        chunks: usize,
        end: Option<End>,
    }

    impl Model {
        fn new(max: usize) -> Self {
            Model { max, bytes: Vec::new(), chunks: 0, end: None }
        }

        /// The documented outcome of a chunk: refused after the end, or over a message's size, or past the
        /// limit (and then nothing changes); the sentinel ends the reply.
        fn push(&mut self, chunk: &[u8]) -> Result<bool, ReassemblyError> {
            if self.end.is_some() {
                return Err(ReassemblyError::AfterEnd);
            }
            if chunk.is_empty() {
                self.end = Some(End::Sentinel);
                return Ok(true);
            }
            if chunk.len() > MAX_MSG_SIZE {
                return Err(ReassemblyError::ChunkTooLarge { len: chunk.len(), max: MAX_MSG_SIZE });
            }
            let len = self.bytes.len() + chunk.len();
            if len > self.max {
                return Err(ReassemblyError::TooLarge { len, max: self.max });
            }
            self.bytes.extend_from_slice(chunk);
            self.chunks += 1;
            Ok(false)
        }

        fn reply(&self) -> Reply {
            let (text, lossy) = match core::str::from_utf8(&self.bytes) {
                Ok(text) => (text.to_string(), false),
                Err(_) => (String::from_utf8_lossy(&self.bytes).into_owned(), true),
            };
            Reply { text, end: self.end.unwrap_or(End::Closed), chunks: self.chunks, lossy }
        }
    }

    struct Harness {
        r: Reassembler,
        model: Model,
    }

    /// `sysinfo_reassembler`: operations from `data` drive a `Reassembler`. Invariants: no panic; every push
    /// returns the documented result and a refused chunk changes nothing; the reassembler never holds more than
    /// its limit (`len() <= max`); nothing is accepted after the sentinel; the finished reply is the accepted bytes
    /// (lossy exactly when they are not UTF-8), with the right chunk count and end; a reply sent with
    /// `chunk_text` and the sentinel comes back whole when it fits.
    pub fn reassembler(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let mut h = Harness { r: Reassembler::default(), model: Model::new(DEFAULT_MAX_RESPONSE) };
        let Ok(ops) = u.arbitrary_iter::<Op>() else { return };
        for op in ops.take(MAX_OPS) {
            let Ok(op) = op else { break };
            h.run(op);
            h.check();
        }
        let reply = h.r.finish();
        assert_eq!(reply, h.model.reply());
    }

    impl Harness {
        fn push(&mut self, chunk: Vec<u8>, how: How) -> Result<bool, ReassemblyError> {
            let expected = self.model.push(&chunk);
            let got = match how {
                How::Copied => self.r.push(&chunk),
                How::Owned => self.r.push_owned(chunk),
                How::Shared => {
                    let mut buffer = Vec::with_capacity(chunk.len() + 2);
                    buffer.push(b'<');
                    buffer.extend_from_slice(&chunk);
                    buffer.push(b'>');
                    self.r.push_bytes(bytes::Bytes::from(buffer).slice(1..1 + chunk.len()))
                }
            };
            assert_eq!(got, expected);
            got
        }

        fn run(&mut self, op: Op) {
            match op {
                Op::Restart(limit) => {
                    let max = limit.bytes();
                    let r = core::mem::replace(&mut self.r, Reassembler::new(max));
                    assert_eq!(r.finish(), self.model.reply());
                    self.model = Model::new(max);
                }
                Op::Push { data, how } => {
                    let _ = self.push(data, how);
                }
                Op::Fill { len, byte, how } => {
                    let _ = self.push(vec![byte; usize::from(len % 2048)], how);
                }
                Op::Service(text) => {
                    let fresh = self.model.bytes.is_empty() && self.model.end.is_none();
                    let chunks: Vec<&[u8]> = chunk_text(&text).collect();
                    assert_eq!(chunks.len(), text.len().div_ceil(MAX_MSG_SIZE));
                    assert!(
                        chunks.iter().rev().skip(1).all(|c| c.len() == MAX_MSG_SIZE),
                        "only the last chunk is short"
                    );
                    let mut complete = false;
                    for chunk in chunks.into_iter().chain([&[][..]]) {
                        match self.push(chunk.to_vec(), How::Shared) {
                            Ok(done) => complete = done,
                            Err(_) => break,
                        }
                    }
                    if fresh && text.len() <= self.model.max {
                        assert!(complete, "a reply within the limit completes");
                        let reply = self.r.clone().finish();
                        assert_eq!(reply.text.as_bytes() == &text[..], !reply.lossy);
                        assert_eq!(reply.chunks, text.len().div_ceil(MAX_MSG_SIZE));
                        assert_eq!(reply.end, End::Sentinel);
                    }
                }
                Op::Close => {
                    self.r.close();
                    self.model.end.get_or_insert(End::Closed);
                }
                Op::Peek => assert_eq!(self.r.clone().finish(), self.model.reply()),
            }
        }

        fn check(&self) {
            assert!(
                self.r.len() <= self.model.max,
                "{} bytes held, the limit is {}",
                self.r.len(),
                self.model.max
            );
            assert_eq!(self.r.len(), self.model.bytes.len());
            assert_eq!(self.r.is_empty(), self.model.bytes.is_empty());
            assert_eq!(self.r.is_done(), self.model.end.is_some());
        }
    }
}

#[cfg(test)]
mod tests;
