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
//! * Framing ([`decode_frame`], [`encode_frame`]) and [`Codec`] are sans-IO: bytes in, [`Payload`]s out, with the
//!   frame length checked on the 4-byte header against a maximum (16 MiB by default) before anything is buffered.
//! * [`proto`] is the protocol's state, sans-IO: the handshake in both orders for either side, UID correlation
//!   with deadlines, and the standing poll and subscription.
//! * [`Request`] and [`Response`] are the typed messages; every object keeps unknown fields in `extra`,
//!   unknown message names decode to `Unknown`, unknown fact IDs to [`FactValue::Raw`].
//! * `Client` connects to an interpreter (SERVE mode) and `Listener` accepts interpreters (POLL mode), with the
//!   feature `client`; requests with a reply are correlated by UID, everything else arrives on an `Events`
//!   stream.
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
//!
//! ## Features
//!
//! | feature | what it adds | needs |
//! |---|---|---|
//! | `codec` | tokio-util `Decoder`/`Encoder` impls of [`Codec`] | tokio-util |
//! | `client` (default) | `Client` (SERVE) and `Listener` (POLL), with UID correlation, events and reconnect; implies `codec` | tokio, futures, tracing |
//! | `serde` | nothing more: the messages always (de)serialize, as HMON's wire is JSON | |
//!
//! With `default-features = false` the crate is the sans-IO core: framing, messages, facts, timestamps and
//! the protocol state ([`proto`]), on `bytes`, `serde`, `serde_json` and `thiserror` alone.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

#[cfg(feature = "client")]
mod client;
mod codec;
mod config;
mod error;
mod facts;
mod frame;
mod ids;
mod message;
mod payload;
mod poll;
pub mod proto;
mod time;
#[cfg(feature = "codec")]
mod tokio_codec;
mod wire;

#[cfg(feature = "client")]
pub use client::{handshake, Client, ClientConfig, Connection, Event, Events, Incoming, Listener, Reconnect};
pub use codec::{ClientCodec, Codec, ServerCodec};
pub use config::{ConfigAddress, ConfigError, InterfaceConfig, Mode};
#[allow(deprecated)]
pub use error::{ClientError, Error, FrameError, HandshakeError, PayloadError};
pub use facts::{
    AccountInformation, CommsLayer, Dmx, Exception, Fact, FactValue, Host, Interpreter, Machine, Ride,
    StackEntry, Thread, ThreadCount, Workspace,
};
pub use frame::{check_len, decode_frame, encode_frame, sniff, DEFAULT_MAX_FRAME_LEN, HEADER_LEN, MAGIC};
pub use ids::{EventKind, FactKind, IdOrName};
pub use message::*;
pub use payload::{
    decode_message, decode_payload, encode_payload, frame_bytes, Handshake, Payload, MAX_SUPPORTED_PROTOCOLS,
    PROTOCOL_VERSION, SUPPORTED_PROTOCOLS, USING_PROTOCOL,
};
pub use poll::{effective_interval, PollTimer};
pub use proto::HandshakeOrder;
pub use time::{Timestamp, TimestampError};
pub use wire::Extra;

/// The TCP port of the interface configuration in Dyalog's documentation (`HMON_INIT="SERVE:localhost:4512"`), which
/// `dyalog-sim --serve` takes by default: what an address without a port means to telemon.
pub const DEFAULT_PORT: u16 = 4512;

/// Fuzz-target bodies, shared by `fuzz/` (cargo-fuzz and `cargo xtask fuzz --replay` build it with
/// `--cfg fuzzing`) and the corpus replays of this crate's unit tests. Not part of the API: it exists only
/// under `cfg(fuzzing)`.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzz;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
