//! The tokio-util [`Decoder`] and [`Encoder`] impls of the sans-IO codecs (feature `codec`).
//!
//! A bad line is an item (`Item = Result<Message, Error>`), not the stream's error, so a `FramedRead` goes on
//! with the next line, as `LinesCodec` does after an overlong line. Only I/O errors end the stream.

use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use crate::codec::{encode_client, encode_server, ClientCodec, ServerCodec};
use crate::error::{CommandError, DecodeError};
use crate::message::{ClientMessage, ServerMessage};

impl Decoder for ClientCodec {
    type Item = Result<ServerMessage, DecodeError>;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Ok(ClientCodec::decode(self, buf).transpose())
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Ok(ClientCodec::decode_eof(self, buf).transpose())
    }
}

impl Encoder<ClientMessage> for ClientCodec {
    type Error = std::io::Error;

    fn encode(&mut self, msg: ClientMessage, dst: &mut BytesMut) -> Result<(), Self::Error> {
        encode_client(&msg, dst);
        Ok(())
    }
}

impl Decoder for ServerCodec {
    type Item = Result<ClientMessage, CommandError>;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Ok(ServerCodec::decode(self, buf).transpose())
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        let decoded = ServerCodec::decode(self, buf).transpose();
        if decoded.is_none() {
            buf.clear();
        }
        Ok(decoded)
    }
}

impl Encoder<&ServerMessage> for ServerCodec {
    type Error = std::io::Error;

    fn encode(&mut self, msg: &ServerMessage, dst: &mut BytesMut) -> Result<(), Self::Error> {
        encode_server(msg, dst).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    }
}
