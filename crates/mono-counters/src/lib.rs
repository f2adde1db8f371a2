//! The Mono counters agent/inspector protocol: Mono runtime performance counters streamed as binary
//! messages over TCP (the agent inside the VM connects to the inspector) or into a file.
//!
//! Everything is little-endian; strings are `[len: i32][UTF-8 bytes]` with `len = -1` for null.
//!
//! ```text
//! agent -> inspector                               inspector -> agent (real agent's numbering)
//! Hello     [0][version=1: i16][count: i16][header]*     List    [0]
//! List      [1]([category: str][name: str])* [ff ff ff ff]  Add  [1][category: str][name: str]
//! Add       [2][status: u8]([header] if status = OK)       Remove  [2][index: i16]   (-1: all)
//! Remove    [3][status: u8]                                GoodBye [7f]
//! Sampling  [4][timestamp: i64]([index: i16][size: i16][bytes])* [ff ff]   (changed values only)
//!
//! header = [category: i32][name: str][type: i32][unit: i32][variance: i32][index: i16]
//! status = 0 OK, 1 NOK, 2 NOTFOUND, 3 EXISTING
//! ```
//!
//! The crate has a sans-IO codec for both directions ([`InspectorCodec`], [`AgentCodec`]), the
//! inspector's counter state ([`CounterTable`]), an async TCP [`Inspector`] with one [`Session`] per
//! agent, and a reader for the agent's file mode ([`CounterFile`]).
//!
//! ```
//! use bytes::BytesMut;
//! use mono_counters::{AgentMessage, CounterValue, InspectorCodec};
//!
//! // A Hello announcing "Mono JIT/Compiled methods" (INT) as index 0, then a sample of it.
//! let mut wire = BytesMut::from(&[
//!     0x00, 0x01, 0x00, 0x01, 0x00, // Hello, version 1, one header
//!     0, 0, 0, 0, 16, 0, 0, 0, // category 0 (Mono JIT), name of 16 bytes
//! ][..]);
//! wire.extend_from_slice(b"Compiled methods");
//! wire.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0]); // INT, NONE, VARIABLE, index 0
//! wire.extend_from_slice(&[4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0xd2, 0x04, 0, 0, 0xff, 0xff]);
//!
//! let mut codec = InspectorCodec::default();
//! let Some(AgentMessage::Hello(hello)) = codec.decode_message(&mut wire)? else { panic!() };
//! assert_eq!(hello.headers[0].full_name(), "Mono JIT/Compiled methods");
//! let Some(AgentMessage::Sampling(sample)) = codec.decode_message(&mut wire)? else { panic!() };
//! assert_eq!(sample.values[0].data.typed(), Some(CounterValue::Int(1234)));
//! # Ok::<(), mono_counters::DecodeError>(())
//! ```
#![warn(missing_docs)]

pub mod codec;
pub mod error;
pub mod file;
pub mod inspector;
pub mod message;
pub mod table;

pub use codec::{
    encode_agent_message, encode_inspector_message, encode_sample, AgentCodec, InspectorCodec, Limits,
};
pub use error::{DecodeError, EncodeError, Error};
pub use file::CounterFile;
pub use inspector::{Inspector, InspectorConfig, SampleUpdate, Session, SessionHandle};
pub use message::*;
pub use table::{CounterTable, Reading};

/// Fuzz target bodies, shared by `fuzz/` and the corpus replay test.
#[doc(hidden)]
pub mod fuzz {
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
        assert_eq!(
            (pieces_consumed, &pieces_err),
            (consumed, &err),
            "split at {} changed the outcome",
            a.len()
        );
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
            let codec = AgentCodec::new(Limits::default(), opcodes);
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
}
