//! The tokio-util `Decoder`/`Encoder` of the host transport (feature `codec`): [`HostCodec`], over the sans-IO
//! [`decode_frame`] and [`encode_frame`].

use bytes::BytesMut;

use crate::codec::{decode_frame, encode_frame, Frame, TransportError};

/// The `tokio_util::codec` face of [`encode_frame`] / [`decode_frame`] (feature `codec`).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostCodec;

impl tokio_util::codec::Decoder for HostCodec {
    type Item = Frame;
    type Error = TransportError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, TransportError> {
        decode_frame(src)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, TransportError> {
        match decode_frame(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(TransportError::Truncated { buffered: src.len() }),
        }
    }
}

impl tokio_util::codec::Encoder<Frame> for HostCodec {
    type Error = TransportError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), TransportError> {
        encode_frame(&frame, dst);
        Ok(())
    }
}

impl tokio_util::codec::Encoder<&Frame> for HostCodec {
    type Error = TransportError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), TransportError> {
        encode_frame(frame, dst);
        Ok(())
    }
}
