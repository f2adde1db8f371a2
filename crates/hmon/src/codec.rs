//! The sans-IO codec: [`Codec`] takes whole frames off a byte buffer (the framing, `frame.rs`) and decodes their
//! payloads (`payload.rs`), and encodes payloads as frames. With the feature `codec` it is also a tokio-util
//! `Decoder`/`Encoder` (`tokio_codec.rs`).

use std::fmt;
use std::marker::PhantomData;

use bytes::BytesMut;

use crate::error::{FrameError, PayloadError};
use crate::frame::{decode_frame, DEFAULT_MAX_FRAME_LEN};
use crate::message::{Message, Request, Response};
use crate::payload::{decode_payload, encode_payload, Payload};

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
    use crate::payload::Handshake;

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
}
