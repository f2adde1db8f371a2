//! [`tokio_util::codec`] adapters: [`SmonCodec`] decodes [`Update`]s and encodes [`Sample`]s.

use bytes::BytesMut;

use crate::decoder::{DecoderConfig, StreamDecoder};
use crate::encoder::{EncoderConfig, StreamEncoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{Sample, Update};

/// A [`tokio_util::codec::Decoder`] and [`tokio_util::codec::Encoder`] for smon streams, for use with
/// `FramedRead`/`FramedWrite`.
///
/// Note that `FramedRead` ends the stream after the first error; to keep reading past errors (skipping
/// to the next resync) use [`crate::UpdateReader`].
#[derive(Debug, Clone, Default)]
pub struct SmonCodec {
    decoder: StreamDecoder,
    encoder: StreamEncoder,
}

impl SmonCodec {
    /// A codec with the given decoder and encoder settings.
    pub fn new(decoder: DecoderConfig, encoder: EncoderConfig) -> Self {
        SmonCodec { decoder: StreamDecoder::new(decoder), encoder: StreamEncoder::new(encoder) }
    }

    /// The decoder half.
    pub fn decoder(&self) -> &StreamDecoder {
        &self.decoder
    }

    /// The encoder half.
    pub fn encoder_mut(&mut self) -> &mut StreamEncoder {
        &mut self.encoder
    }
}

impl tokio_util::codec::Decoder for SmonCodec {
    type Item = Update;
    type Error = DecodeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Update>, DecodeError> {
        self.decoder.decode(src)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Update>, DecodeError> {
        self.decoder.decode_eof(src)
    }
}

impl tokio_util::codec::Encoder<&Sample> for SmonCodec {
    type Error = EncodeError;

    fn encode(&mut self, sample: &Sample, dst: &mut BytesMut) -> Result<(), EncodeError> {
        self.encoder.encode(sample, dst)
    }
}

impl tokio_util::codec::Encoder<Sample> for SmonCodec {
    type Error = EncodeError;

    fn encode(&mut self, sample: Sample, dst: &mut BytesMut) -> Result<(), EncodeError> {
        self.encoder.encode(&sample, dst)
    }
}
