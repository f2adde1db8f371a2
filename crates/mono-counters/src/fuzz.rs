//! Fuzz target bodies, shared by `fuzz/fuzz_targets/` and the corpus replay in `cargo test`. Not a stable API.

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
