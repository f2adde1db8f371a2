//! Payloads (handshake text or a JSON message) on top of the framing, and the tokio codec.

use std::fmt;
use std::marker::PhantomData;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;

use crate::error::{FrameError, PayloadError};
use crate::frame::{decode_frame, DEFAULT_MAX_FRAME_LEN, MAGIC};
use crate::message::{Message, Request, Response};

/// The only protocol version HMON has.
pub const PROTOCOL_VERSION: u32 = 2;
/// The handshake key listing the versions a side supports.
pub const SUPPORTED_PROTOCOLS: &str = "SupportedProtocols=";
/// The handshake key naming the version a side uses.
pub const USING_PROTOCOL: &str = "UsingProtocol=";
/// The most versions a `SupportedProtocols` list may hold.
pub const MAX_SUPPORTED_PROTOCOLS: usize = 64;

/// One of the two handshake payloads each side sends first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handshake {
    /// `SupportedProtocols=2` (a comma-separated list).
    SupportedProtocols(Vec<u32>),
    /// `UsingProtocol=2`.
    UsingProtocol(u32),
}

impl Handshake {
    /// `SupportedProtocols=2`.
    pub fn supported() -> Self {
        Handshake::SupportedProtocols(vec![PROTOCOL_VERSION])
    }

    /// `UsingProtocol=2`.
    pub fn using() -> Self {
        Handshake::UsingProtocol(PROTOCOL_VERSION)
    }

    /// Parses a handshake payload, or returns `None` when the payload is not one (then it is JSON).
    pub fn parse(payload: &[u8]) -> Option<Result<Handshake, PayloadError>> {
        let bad = || PayloadError::Handshake {
            text: String::from_utf8_lossy(&payload[..payload.len().min(64)]).into(),
        };
        if let Some(list) = payload.strip_prefix(SUPPORTED_PROTOCOLS.as_bytes()) {
            let parsed = std::str::from_utf8(list).ok().and_then(|list| {
                let items: Vec<&str> = list.split(',').collect();
                if items.len() > MAX_SUPPORTED_PROTOCOLS {
                    return None;
                }
                items.iter().map(|v| v.trim().parse::<u32>().ok()).collect::<Option<Vec<u32>>>()
            });
            return Some(parsed.map(Handshake::SupportedProtocols).ok_or_else(bad));
        }
        if let Some(n) = payload.strip_prefix(USING_PROTOCOL.as_bytes()) {
            let parsed = std::str::from_utf8(n).ok().and_then(|n| n.trim().parse::<u32>().ok());
            return Some(parsed.map(Handshake::UsingProtocol).ok_or_else(bad));
        }
        None
    }
}

impl fmt::Display for Handshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Handshake::SupportedProtocols(list) => {
                f.write_str(SUPPORTED_PROTOCOLS)?;
                for (i, v) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                Ok(())
            }
            Handshake::UsingProtocol(v) => write!(f, "{USING_PROTOCOL}{v}"),
        }
    }
}

/// What one frame carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload<M> {
    /// A handshake text.
    Handshake(Handshake),
    /// A JSON message.
    Message(M),
}

/// Decodes a frame's payload: a handshake text, or a JSON `[name, {arguments}]` message.
pub fn decode_payload<M: Message>(payload: &[u8]) -> Result<Payload<M>, PayloadError> {
    if let Some(handshake) = Handshake::parse(payload) {
        return handshake.map(Payload::Handshake);
    }
    decode_message(payload).map(Payload::Message)
}

/// Decodes a JSON message, classifying failures as the interpreter does (`InvalidSyntax` for anything
/// that is not a `[string, object]` pair, `MalformedCommand` for arguments that do not fit).
pub fn decode_message<M: Message>(json: &[u8]) -> Result<M, PayloadError> {
    serde_json::from_slice(json).map_err(|e| classify(json, e))
}

/// The slow path, taken only on error: find out whether the shape or the arguments were wrong.
fn classify(json: &[u8], err: serde_json::Error) -> PayloadError {
    match serde_json::from_slice::<Value>(json) {
        Ok(Value::Array(pair)) if pair.len() == 2 && pair[0].is_string() && pair[1].is_object() => {
            PayloadError::Malformed {
                name: pair[0].as_str().unwrap_or_default().to_owned(),
                uid: pair[1].get("UID").and_then(Value::as_str).map(str::to_owned),
                reason: err.to_string(),
            }
        }
        Ok(_) => PayloadError::InvalidSyntax { reason: format!("not a [name, {{arguments}}] pair: {err}") },
        Err(_) => PayloadError::InvalidSyntax { reason: err.to_string() },
    }
}

/// Appends one frame holding `payload` to `buf`.
pub fn encode_payload<M: Message>(payload: &Payload<M>, buf: &mut BytesMut) -> Result<(), FrameError> {
    let start = buf.len();
    buf.put_u32(0);
    buf.put_slice(&MAGIC);
    match payload {
        Payload::Handshake(h) => {
            use std::fmt::Write;
            let mut text = String::new();
            let _ = write!(text, "{h}");
            buf.put_slice(text.as_bytes());
        }
        Payload::Message(m) => {
            if let Err(e) = serde_json::to_writer(buf.writer(), m) {
                buf.truncate(start);
                return Err(FrameError::Io(std::io::Error::other(e)));
            }
        }
    }
    let total = buf.len() - start;
    let Ok(total32) = u32::try_from(total) else {
        buf.truncate(start);
        return Err(FrameError::TooLarge { len: u32::MAX, max: u32::MAX });
    };
    buf[start..start + 4].copy_from_slice(&total32.to_be_bytes());
    Ok(())
}

/// Encodes a whole frame into new bytes (handy for tests and sims).
pub fn frame_bytes<M: Message>(payload: &Payload<M>) -> Result<Bytes, FrameError> {
    let mut buf = BytesMut::new();
    encode_payload(payload, &mut buf)?;
    Ok(buf.freeze())
}

/// A sans-IO codec that decodes `In` messages and encodes `Out` messages (and, with the feature `codec`, a
/// tokio-util `Decoder`/`Encoder`).
///
/// Framing errors end the stream (the byte stream is out of step); a payload that is not a valid
/// handshake or message is yielded as `Ok(Err(PayloadError))` so the connection can go on.
pub struct Codec<In, Out> {
    max_frame_len: u32,
    _messages: PhantomData<fn(Out) -> In>,
}

/// The monitor's side: decodes [`Response`]s and encodes [`Request`]s.
pub type ClientCodec = Codec<Response, Request>;
/// The interpreter's side: decodes [`Request`]s and encodes [`Response`]s.
pub type ServerCodec = Codec<Request, Response>;

impl<In, Out> Codec<In, Out> {
    /// A codec refusing frames longer than `max_frame_len` bytes in total.
    pub fn new(max_frame_len: u32) -> Self {
        Codec { max_frame_len, _messages: PhantomData }
    }

    /// The configured maximum total frame length.
    pub fn max_frame_len(&self) -> u32 {
        self.max_frame_len
    }
}

impl<In, Out> Default for Codec<In, Out> {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl<In, Out> fmt::Debug for Codec<In, Out> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codec").field("max_frame_len", &self.max_frame_len).finish()
    }
}

impl<In: Message, Out> Codec<In, Out> {
    /// Decodes the next frame's payload from `buf`: `Ok(None)` when the frame is not whole yet (its length is
    /// checked on the 4-byte header, before buffering), `Ok(Some(Err(_)))` for a payload that is neither a
    /// handshake nor a valid message (the connection goes on), `Err` for a framing error (it does not).
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<Option<Result<Payload<In>, PayloadError>>, FrameError> {
        Ok(decode_frame(buf, self.max_frame_len)?.map(|payload| decode_payload(&payload)))
    }

    /// [`Codec::decode`] at the end of the stream: a partial frame is [`FrameError::Truncated`].
    pub fn decode_eof(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<Option<Result<Payload<In>, PayloadError>>, FrameError> {
        match self.decode(buf)? {
            Some(item) => Ok(Some(item)),
            None if buf.is_empty() => Ok(None),
            None => Err(FrameError::Truncated { buffered: buf.len() }),
        }
    }
}

impl<In, Out: Message> Codec<In, Out> {
    /// Appends `item` as one frame; a frame over this codec's limit is refused and nothing is written.
    pub fn encode(&mut self, item: Payload<Out>, buf: &mut BytesMut) -> Result<(), FrameError> {
        let start = buf.len();
        encode_payload(&item, buf)?;
        let len = u32::try_from(buf.len() - start).unwrap_or(u32::MAX);
        // Never send what our own limit would refuse (the peer's default limit is the same).
        if len > self.max_frame_len {
            buf.truncate(start);
            return Err(FrameError::TooLarge { len, max: self.max_frame_len });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoder_refuses_frames_over_its_limit() {
        let mut codec = ClientCodec::new(64);
        let mut buf = BytesMut::from(&b"kept"[..]);
        let big = Request::Unknown { name: "X".repeat(100), args: Default::default() };
        let err = codec.encode(Payload::Message(big), &mut buf).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { max: 64, .. }), "{err}");
        assert_eq!(&buf[..], b"kept", "nothing half-written");
        codec.encode(Payload::Handshake(Handshake::supported()), &mut buf).unwrap();
    }

    #[test]
    fn handshake_lists_are_parsed() {
        assert_eq!(
            Handshake::parse(b"SupportedProtocols=1, 2").unwrap().unwrap(),
            Handshake::SupportedProtocols(vec![1, 2])
        );
        assert_eq!(Handshake::parse(b"UsingProtocol=2").unwrap().unwrap(), Handshake::using());
        assert!(Handshake::parse(b"UsingProtocol=two").unwrap().is_err());
        assert!(Handshake::parse(b"SupportedProtocols=").unwrap().is_err());
        assert!(Handshake::parse(b"[\"X\",{}]").is_none());
        let long = format!("SupportedProtocols={}", vec!["2"; 65].join(","));
        assert!(Handshake::parse(long.as_bytes()).unwrap().is_err());
    }
}
