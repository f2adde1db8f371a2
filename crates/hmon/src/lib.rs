//! Dyalog APL Health Monitor (HMON): a framing codec, typed messages and an async client.
//!
//! ```text
//!  0        4        8
//! +--------+--------+----------------------------------------------+
//! | length | "HMON" | payload (UTF-8, length - 8 bytes)            |
//! | u32 BE | 48 4D  | handshake: SupportedProtocols=2, UsingProtocol=2
//! | total  | 4F 4E  | then JSON: ["Name",{"UID":"..","Key":..}]    |
//! +--------+--------+----------------------------------------------+
//!
//! monitor                                   interpreter (SERVE: it listens; POLL: it dials the monitor)
//!    |  <-- SupportedProtocols=2, UsingProtocol=2 (the interpreter speaks first)
//!    |  --> SupportedProtocols=2, UsingProtocol=2
//!    |  --> ["GetFacts",{"UID":"1","Facts":["Host"]}]
//!    |  <-- ["Facts",{"UID":"1","Facts":[{"ID":1,"Name":"Host","Value":{..}}]}]
//!    |  <-- ["Notification",{..}], ["UserMessage",{..}], polled ["Facts",{..}] at any time
//! ```
//!
//! * [`frame`] and [`codec`] are sans-IO: bytes in, [`Payload`]s out, with the frame length checked on
//!   the 4-byte header against a maximum (16 MiB by default) before anything is buffered.
//! * [`Request`] and [`Response`] are the typed messages; every object keeps unknown fields in `extra`,
//!   unknown message names decode to `Unknown`, unknown fact IDs to [`FactValue::Raw`].
//! * [`Client`] connects to an interpreter (SERVE mode) and [`Listener`] accepts interpreters (POLL
//!   mode); requests with a reply are correlated by UID, everything else arrives on an [`Events`] stream.
//!
//! ```
//! use bytes::BytesMut;
//! use hmon::{decode_frame, decode_payload, FactValue, Payload, Response, DEFAULT_MAX_FRAME_LEN};
//!
//! let json = br#"["Facts",{"UID":"xx","Interval":5000,"Facts":[{"ID":6,"Name":"ThreadCount","Value":{"Total":1,"Suspended":0}}]}]"#;
//! let mut wire = BytesMut::new();
//! wire.extend_from_slice(&(json.len() as u32 + 8).to_be_bytes());
//! wire.extend_from_slice(b"HMON");
//! wire.extend_from_slice(json);
//!
//! let payload = decode_frame(&mut wire, DEFAULT_MAX_FRAME_LEN).unwrap().expect("a whole frame");
//! let Payload::Message(Response::Facts(facts)) = decode_payload::<Response>(&payload).unwrap() else {
//!     panic!("not Facts")
//! };
//! assert_eq!(facts.interval, Some(5000));
//! let FactValue::ThreadCount(count) = &facts.facts.as_ref().unwrap()[0].value else { panic!() };
//! assert_eq!((count.total, count.suspended), (Some(1), Some(0)));
//! ```
#![warn(missing_docs)]

pub mod client;
pub mod codec;
pub mod config;
pub mod error;
pub mod facts;
pub mod frame;
pub mod ids;
pub mod message;
pub mod poll;
pub mod time;
#[doc(hidden)]
pub mod wire;

pub use client::{Client, ClientConfig, Event, Events, HandshakeOrder, Listener, Reconnect};
pub use codec::{
    decode_message, decode_payload, encode_payload, frame_bytes, ClientCodec, Codec, Handshake, Payload,
    ServerCodec, PROTOCOL_VERSION,
};
pub use config::{ConfigAddress, ConfigError, InterfaceConfig, Mode};
pub use error::{Error, FrameError, HandshakeError, PayloadError};
pub use facts::{
    AccountInformation, CommsLayer, Dmx, Exception, Fact, FactValue, Host, Interpreter, Machine, Ride,
    StackEntry, Thread, ThreadCount, Workspace,
};
pub use frame::{decode_frame, encode_frame, DEFAULT_MAX_FRAME_LEN, MAGIC};
pub use ids::{EventKind, FactKind, IdOrName};
pub use message::*;
pub use time::{Timestamp, TimestampError};
pub use wire::Extra;

#[doc(hidden)]
pub mod fuzz;
