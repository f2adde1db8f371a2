//! The tokio-util `Decoder`/`Encoder` of [`Codec`] (feature `codec`): a payload that is not a valid message is an
//! item (`Ok(Err(PayloadError))`) and the `Framed` goes on; a framing error ends it.

use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use crate::codec::Codec;
use crate::error::{FrameError, PayloadError};
use crate::message::Message;
use crate::payload::Payload;

impl<In: Message, Out> Decoder for Codec<In, Out> {
    type Item = Result<Payload<In>, PayloadError>;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, FrameError> {
        Codec::decode(self, buf)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, FrameError> {
        Codec::decode_eof(self, buf)
    }
}

impl<In, Out: Message> Encoder<Payload<Out>> for Codec<In, Out> {
    type Error = FrameError;

    fn encode(&mut self, item: Payload<Out>, buf: &mut BytesMut) -> Result<(), FrameError> {
        Codec::encode(self, item, buf)
    }
}
