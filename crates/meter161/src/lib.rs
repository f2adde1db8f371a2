//! The System/161 metering protocol: a sans-IO codec for both directions and an async client.
//!
//! sys161 serves ASCII lines on the Unix stream socket `.sockets/meter` in the directory it runs in:
//!
//! ```text
//! client                                          sys161 (.sockets/meter)
//!   | ---- connect ----------------------------------> |
//!   | ---- INTERVAL 1000000000\r\n  (optional, one write) -> |
//!   | <--- HELLO 2\r\n --------------------------------- |
//!   | <--- HEAD nsec kinsns uinsns udud idle irqs exns disk con emu net\r\n
//!   | <--- WIDTH 11 9 9 4 9 4 4 4 5 4 4\r\n ------------ |
//!   | <--- DATA 5968289383 149100000 0 0 0 0 0 0 0 0 0\r\n   (at once)
//!   | <--- DATA ... every interval of simulated time --- |
//!   | <--- BAD Interval too small\r\n  (a rejected command; success is silent)
//!   | <--- EOF (the simulator exited; no goodbye) ------ |
//! ```
//!
//! Values are cumulative u64; `irqs` to `net` are 32-bit sums that wrap at 2^32. This crate follows the
//! real sys161 where it differs from the protocol text: intervals are 10 us to 2 s, no `OK` is sent.
//!
//! * Codecs: [`ClientCodec`] and [`ServerCodec`], liberal decoders (any case, LF or CRLF, any
//!   blanks, bounded line length, recovery at the next LF) and exact encoders (uppercase, CRLF).
//! * [`Session`]: the sans-IO state machine that turns messages into a [`Header`] and [`Sample`]s
//!   with per-field wrapping deltas.
//! * [`Client`] (one connection, `set_interval`) and [`watch`] (waits for the socket and reconnects,
//!   like stat161).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! use tokio::io::AsyncWriteExt;
//!
//! // A stand-in simulator that sends the greeting and two rows captured from the real sys161.
//! let dir = tempfile::tempdir()?;
//! std::fs::create_dir(dir.path().join(".sockets"))?;
//! let listener = tokio::net::UnixListener::bind(meter161::socket_path(dir.path()))?;
//! tokio::spawn(async move {
//!     let (mut peer, _) = listener.accept().await.unwrap();
//!     peer.write_all(b"HELLO 2\r\nHEAD nsec kinsns uinsns udud idle irqs exns disk con emu net\r\n\
//!         WIDTH 11 9 9 4 9 4 4 4 5 4 4\r\nDATA 5968289383 149100000 0 0 0 0 0 0 0 0 0\r\n\
//!         DATA 6168380263 154102272 0 0 0 0 0 0 0 0 0\r\n").await.unwrap();
//! });
//!
//! let mut client = meter161::Client::connect(dir.path(), &meter161::ClientConfig::default()).await?;
//! assert_eq!(client.header().names()[1], "kinsns");
//! let first = client.next().await.unwrap()?;
//! assert_eq!(first.get("nsec"), Some(5968289383));
//! assert_eq!(first.deltas(), None);
//! let second = client.next().await.unwrap()?;
//! assert_eq!(second.delta("kinsns"), Some(5002272));
//! assert!(client.next().await.is_none(), "EOF ends the stream");
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature | what it adds | needs |
//! |---|---|---|
//! | `codec` | tokio-util `Decoder`/`Encoder` impls of [`ClientCodec`] and [`ServerCodec`] | tokio-util |
//! | `client` (default) | [`Client`] and [`watch`]; implies `codec` | tokio, futures, tracing |
//! | `serde` | `Serialize`/`Deserialize` on the messages | serde |
//!
//! With `default-features = false` the crate is the sans-IO core: codecs, messages and [`Session`], on
//! `bytes`, `memchr` and `thiserror` alone.
#![warn(missing_docs, unreachable_pub)]

#[cfg(feature = "client")]
mod batched;
#[cfg(feature = "client")]
mod client;
mod codec;
mod error;
mod message;
mod session;
#[cfg(feature = "codec")]
mod tokio_codec;

#[cfg(feature = "client")]
pub use batched::BatchedStream;
#[cfg(feature = "client")]
#[allow(deprecated)]
pub use client::{no_simulator, watch, watch_with, Client, ClientConfig, Config, Event};
pub use codec::{
    decode_command_line, decode_server_line, encode_client, encode_server, sniff, strtoul, ClientCodec,
    IntervalRange, ServerCodec,
};
pub use error::{ClientError, CommandError, DecodeError, EncodeError, ProtocolError};
pub use message::*;
pub use session::{Header, Sample, Session, Update};

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
