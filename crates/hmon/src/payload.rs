//! Payloads, the layer on top of the framing: what one frame carries (a handshake text or a JSON message),
//! decoded and encoded.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;

use crate::error::{FrameError, PayloadError};
use crate::frame::MAGIC;
use crate::message::Message;

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

#[cfg(test)]
mod tests {
    use super::*;

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
