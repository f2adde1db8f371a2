//! [`tokio_util::codec`] adapters: [`SmonCodec`] decodes [`Update`]s and encodes [`Sample`]s.

use bytes::BytesMut;

use crate::codec::{DecoderConfig, EncoderConfig, StreamDecoder, StreamEncoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{Sample, Update};

/// A [`tokio_util::codec::Decoder`] and [`tokio_util::codec::Encoder`] for smon streams, for use with
/// `FramedRead`/`FramedWrite`.
///
/// A decode error is an item (`Item = Result<Update, DecodeError>`), not the stream's error: the decoder
/// skips to the next resync sequence and the `FramedRead` goes on, as `mon`'s readers do. Only I/O errors
/// end the stream. [`crate::UpdateReader`] adds what `FramedRead` cannot do: following a file as it grows.
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
    type Item = Result<Update, DecodeError>;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, std::io::Error> {
        Ok(self.decoder.decode(src).transpose())
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, std::io::Error> {
        Ok(self.decoder.decode_eof(src).transpose())
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
