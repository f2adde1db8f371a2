//! The bodies of the cargo-fuzz targets, here so the seed corpora replay on stable in `cargo test`.

use bytes::BytesMut;

use crate::codec::{decode_payload, encode_payload, Payload};
use crate::frame::decode_frame;
use crate::message::{Request, Response};

/// The frame limit the fuzz targets use (small, so huge lengths are exercised cheaply).
pub const FUZZ_MAX_FRAME_LEN: u32 = 1 << 20;

/// `hmon_frame`: the first byte picks a split point, the rest is a byte stream. Fed whole and in two
/// parts split there, it must decode to the same frames (or the same error) without panicking; each
/// decoded payload that decodes as a message re-encodes and re-decodes equal.
pub fn frame(data: &[u8]) {
    let Some((&selector, stream)) = data.split_first() else { return };
    let whole = frames_of(&[stream]);
    let split = selector as usize % (stream.len() + 1);
    let parts = frames_of(&[&stream[..split], &stream[split..]]);
    assert_eq!(whole, parts, "splitting the input at {split} changed the result");
    for payload in whole.0 {
        check_payload::<Response>(&payload);
        check_payload::<Request>(&payload);
    }
}

fn frames_of(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<String>) {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match decode_frame(&mut buf, FUZZ_MAX_FRAME_LEN) {
                Ok(Some(payload)) => frames.push(payload.to_vec()),
                Ok(None) => break,
                Err(e) => return (frames, Some(e.to_string())),
            }
        }
    }
    (frames, None)
}

/// `hmon_message`: arbitrary bytes as a payload decode as a handshake or a request or response without
/// panicking, and whatever decodes re-encodes and re-decodes equal.
pub fn message(data: &[u8]) {
    check_payload::<Response>(data);
    check_payload::<Request>(data);
}

fn check_payload<M: crate::message::Message>(payload: &[u8]) {
    if let Ok(decoded) = decode_payload::<M>(payload) {
        let mut buf = BytesMut::new();
        encode_payload(&decoded, &mut buf).expect("a decoded message encodes");
        let again = decode_frame(&mut buf, u32::MAX).expect("our frame decodes").expect("whole frame");
        let redecoded = decode_payload::<M>(&again).expect("our payload decodes");
        match (&decoded, &redecoded) {
            // NaN-free JSON numbers compare equal; floats in extras round-trip through serde_json.
            (Payload::Message(a), Payload::Message(b)) => assert_eq!(a, b),
            (a, b) => assert_eq!(a, b),
        }
    }
}
