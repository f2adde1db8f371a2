//! The tokio-util `Decoder`/`Encoder` impls of the sans-IO codecs (feature `codec`).
//!
//! A decode error ends the stream: the protocol has no lengths and no markers to find the next message by,
//! so after a bad one nothing that follows can be trusted (the real agent stops reading too).

use bytes::BytesMut;

use crate::codec::{
    encode_agent_message, encode_inspector_message, encode_sample, AgentCodec, InspectorCodec,
};
use crate::error::{ClientError, DecodeError};
use crate::message::*;

impl tokio_util::codec::Decoder for InspectorCodec {
    type Item = AgentMessage;
    type Error = ClientError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<AgentMessage>, ClientError> {
        Ok(self.decode_message(src)?)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<AgentMessage>, ClientError> {
        Ok(self.decode_message_eof(src)?)
    }
}

impl tokio_util::codec::Encoder<InspectorMessage> for InspectorCodec {
    type Error = ClientError;

    fn encode(&mut self, item: InspectorMessage, dst: &mut BytesMut) -> Result<(), ClientError> {
        Ok(encode_inspector_message(&item, self.opcodes, dst)?)
    }
}

impl tokio_util::codec::Decoder for AgentCodec {
    type Item = InspectorMessage;
    type Error = ClientError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<InspectorMessage>, ClientError> {
        Ok(self.decode_message(src)?)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<InspectorMessage>, ClientError> {
        match self.decode_message(src)? {
            None if !src.is_empty() => Err(DecodeError::Truncated { buffered: src.len() }.into()),
            other => Ok(other),
        }
    }
}

impl tokio_util::codec::Encoder<AgentMessage> for AgentCodec {
    type Error = ClientError;

    fn encode(&mut self, item: AgentMessage, dst: &mut BytesMut) -> Result<(), ClientError> {
        Ok(encode_agent_message(&item, dst)?)
    }
}

impl tokio_util::codec::Encoder<&Sample> for AgentCodec {
    type Error = ClientError;

    fn encode(&mut self, item: &Sample, dst: &mut BytesMut) -> Result<(), ClientError> {
        Ok(encode_sample(item, dst)?)
    }
}
