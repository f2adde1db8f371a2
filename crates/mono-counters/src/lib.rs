//! The Mono counters agent/inspector protocol: Mono runtime performance counters streamed as binary
//! messages over TCP (the agent inside the VM connects to the inspector) or into a file.
//!
//! Everything is little-endian; strings are `[len: i32][UTF-8 bytes]` with `len = -1` for null.
//!
//! ```text
//! agent -> inspector                               inspector -> agent (real agent's numbering)
//! Hello     [0][version=1: i16][count: i16][header]*     List    [0]
//! List      [1]([category: str][name: str])* [ff ff ff ff]  Add  [1][category: str][name: str]
//! Add       [2][status: u8]([header] if status = OK)       Remove  [2][index: i16]   (-1: all)
//! Remove    [3][status: u8]                                GoodBye [7f]
//! Sampling  [4][timestamp: i64]([index: i16][size: i16][bytes])* [ff ff]   (changed values only)
//!
//! header = [category: i32][name: str][type: i32][unit: i32][variance: i32][index: i16]
//! status = 0 OK, 1 NOK, 2 NOTFOUND, 3 EXISTING
//! ```
//!
//! The crate has a sans-IO codec for both directions ([`InspectorCodec`], [`AgentCodec`]), the
//! inspector's counter state ([`CounterTable`]), an async TCP [`Inspector`] with one [`Session`] per
//! agent, and a reader for the agent's file mode ([`CounterFile`]).
//!
//! ```
//! use bytes::BytesMut;
//! use mono_counters::{AgentMessage, CounterValue, InspectorCodec};
//!
//! // A Hello announcing "Mono JIT/Compiled methods" (INT) as index 0, then a sample of it.
//! let mut wire = BytesMut::from(&[
//!     0x00, 0x01, 0x00, 0x01, 0x00, // Hello, version 1, one header
//!     0, 0, 0, 0, 16, 0, 0, 0, // category 0 (Mono JIT), name of 16 bytes
//! ][..]);
//! wire.extend_from_slice(b"Compiled methods");
//! wire.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0]); // INT, NONE, VARIABLE, index 0
//! wire.extend_from_slice(&[4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0xd2, 0x04, 0, 0, 0xff, 0xff]);
//!
//! let mut codec = InspectorCodec::default();
//! let Some(AgentMessage::Hello(hello)) = codec.decode_message(&mut wire)? else { panic!() };
//! assert_eq!(hello.headers[0].full_name(), "Mono JIT/Compiled methods");
//! let Some(AgentMessage::Sampling(sample)) = codec.decode_message(&mut wire)? else { panic!() };
//! assert_eq!(sample.values[0].data.typed(), Some(CounterValue::Int(1234)));
//! # Ok::<(), mono_counters::DecodeError>(())
//! ```
//!
//! ## Features
//!
//! | feature | what it adds | needs |
//! |---|---|---|
//! | `codec` | tokio-util `Decoder`/`Encoder` impls of [`InspectorCodec`] and [`AgentCodec`] | tokio-util |
//! | `client` (default) | the TCP `Inspector` with one `Session` per agent, and `CounterFile`; implies `codec` | tokio, futures, tracing |
//! | `serde` | `Serialize`/`Deserialize` on the messages | serde |
//!
//! With `default-features = false` the crate is the sans-IO core (codecs, messages, [`CounterTable`]) on
//! `bytes` and `thiserror` alone.
//!
//! ## What the real agent does wrong
//!
//! Found by running the Mono runtime's own agent code (`mono/profiler/counters-agent`), worth knowing when
//! an agent goes away:
//! * it closes the connection when asked to Add a counter it already samples (the sim answers EXISTING
//!   instead unless `--drop-on-duplicate-add`);
//! * started with `address=` (a TCP inspector), it aborts at disconnect: it frees a string constant;
//! * it crashes (SIGSEGV) after a Remove of index 0;
//! * without `interval=` it samples in a tight loop, about 100,000 Sampling messages a second, almost all
//!   with no changed value.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod codec;
mod error;
#[cfg(feature = "client")]
mod file;
#[cfg(feature = "client")]
mod inspector;
mod message;
mod table;
#[cfg(feature = "codec")]
mod tokio_codec;

pub use codec::{
    encode_agent_message, encode_inspector_message, encode_sample, AgentCodec, InspectorCodec, Limits,
};
#[allow(deprecated)]
pub use error::{ClientError, DecodeError, EncodeError, Error};
#[cfg(feature = "client")]
pub use file::CounterFile;
#[cfg(feature = "client")]
#[allow(deprecated)]
pub use inspector::{ClientConfig, Inspector, InspectorConfig, SampleUpdate, Session, SessionHandle};
pub use message::*;
pub use table::{CounterTable, Reading};

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
