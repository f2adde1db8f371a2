//! The rvOS sysinfo service on the wire: `rvos-wire` commands, 1024-byte chunked text replies, typed
//! report parsers, and a host transport that carries rvOS channels over a Unix socket or TCP.
//!
//! ```text
//!  client process                       init (boot channel 0)              sysinfo service
//!  ── ch 0: BootRequest::ConnectService{"sysinfo"}  00 07 00 73 79 73 69 6e 66 6f ──▶
//!  ◀── ch 0: BootResponse::Ok{}  00   caps[0] = NEW channel N, cap_count 1 ──
//!  ── ch N: SysinfoCommand  one tag byte 00..08 (Ps .. Watchdog) ─────────────────────────────▶
//!  ◀── ch N: text[0..1024] ◀── ch N: text[1024..2048] … ◀── last, shorter chunk ──────────────
//!  ◀── ch N: sentinel, len 0 ─────────────── ◀── ch N: CLOSE (the service closes after the sentinel)
//!  anything undecodable (empty, tag ≥ 9) gets the raw text "Unknown command\n" + sentinel;
//!  no request within the deadline (5 s) gets a silent CLOSE.
//!
//!  host framing of every channel message (see [`decode_frame`]):
//!  kind:u8=1 channel:u32le sender_pid:u64le cap_count:u8 caps:u32le×n len:u16le data[len ≤ 1024]
//!  kind:u8=2 channel:u32le                                      CLOSE: one side dropped its end
//! ```
//!
//! * [`wire`]: the `rvos-wire` subset (integers, bool, `Option`, strings, bytes) with its errors.
//! * Messages: [`SysinfoCommand`], [`BootRequest`], [`BootResponse`], [`NewConnection`], [`Message`].
//! * Reassembly: [`chunk_text`] (the service side) and [`Reassembler`] (the client side).
//! * [`report`]: a parser and an exact formatter for every command's text.
//! * The host transport ([`Frame`], [`HostCodec`]), the stand-in for rvOS channels, and an async `Client`
//!   (feature `client`).
//!
//! Sans-IO, from the command bytes to a parsed report:
//!
//! ```
//! use sysinfo_wire::{chunk_text, wire, Reassembler, Report, SysinfoCommand};
//!
//! assert_eq!(wire::to_bytes(&SysinfoCommand::Watchdog).unwrap(), [0x08]);
//! assert_eq!(wire::from_bytes::<SysinfoCommand>(&[0x00, 0xff, 0xff]).unwrap(), SysinfoCommand::Ps);
//!
//! let text = "  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\n\
//!             \x20 ---  --------  -----  -----  ------  -------------  ----------------\n\
//!             \x20   2  Blocked    0.0%   0.1%    16K  recv(ep 4)     serial-con\n";
//! let mut reassembler = Reassembler::default();
//! for chunk in chunk_text(text.as_bytes()) {
//!     reassembler.push(chunk).unwrap();
//! }
//! assert!(reassembler.push(&[]).unwrap()); // the zero-length sentinel
//! let reply = reassembler.finish();
//! let Report::Ps(ps) = Report::parse(SysinfoCommand::Ps, &reply.text) else { unreachable!() };
//! assert_eq!(ps.processes[0].name, "serial-con");
//! assert_eq!(ps.processes[0].cpu_1m.fraction(), 0.001);
//! assert_eq!(Report::Ps(ps).render(), text);
//! ```
//!
//! Against a server (`rvos-sim`, or anything speaking the host transport):
//!
//! ```no_run
//! # async fn demo() -> Result<(), sysinfo_wire::ClientError> {
//! use sysinfo_wire::{Client, ClientConfig, Endpoint, SysinfoCommand};
//!
//! let mut client = Client::connect(&Endpoint::Tcp("127.0.0.1:7461".into()), ClientConfig::default()).await?;
//! let response = client.request(SysinfoCommand::Kstat).await?; // a new channel per request
//! print!("{}", response.reply.text);
//! # Ok(()) }
//! ```

//!
//! ## Features
//!
//! | feature | what it adds | needs |
//! |---|---|---|
//! | `std` (default) | `std::error::Error` and I/O errors; without it the crate is `#![no_std]` with `alloc`, as rvOS programs are | |
//! | `codec` | the tokio-util `Decoder`/`Encoder` of [`HostCodec`] | tokio-util |
//! | `client` (default) | `Client` over TCP or a Unix socket; implies `codec` | tokio, futures, tracing |
//! | `serde` | `Serialize` on the messages and every report (what `telemon sysinfo --json` prints) | serde |
//!
//! With `default-features = false` the crate is the sans-IO core (wire, messages, reassembly, reports) on
//! `bytes`, `memchr` and `thiserror` alone, and builds without `std`.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

extern crate alloc;

#[cfg(feature = "client")]
mod client;
mod codec;
mod message;
mod reassembly;
pub mod report;
#[cfg(feature = "codec")]
mod tokio_codec;
pub mod wire;

/// What every module uses from `alloc` (the std prelude has it; `no_std` does not).
mod prelude {
    pub(crate) use alloc::borrow::{Cow, ToOwned};
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::format;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec::Vec;
}

#[cfg(feature = "client")]
pub use client::{
    Client, ClientConfig, ClientError, Endpoint, Response, DEFAULT_ADDR, DEFAULT_REQUEST_TIMEOUT,
    MAX_PIPELINE, MAX_QUEUE_DEPTH,
};
pub use codec::{
    decode_frame, encode_data_frame, encode_frame, sniff, Frame, TransportError, KIND_CLOSE, KIND_MESSAGE,
    MAX_FRAME_SIZE,
};
pub use message::{
    BootRequest, BootResponse, ChannelId, Message, NewConnection, SysinfoCommand, BOOT_ERRORS, MAX_CAPS,
    SYSINFO_SERVICE, UNKNOWN_COMMAND_TEXT,
};
pub use reassembly::{chunk_text, End, Reassembler, ReassemblyError, Reply, DEFAULT_MAX_RESPONSE};
pub use report::Report;
#[cfg(feature = "codec")]
pub use tokio_codec::HostCodec;
pub use wire::{WireError, MAX_MSG_SIZE};

/// The TCP port of the host transport that `rvos-sim` listens on by default (`DEFAULT_ADDR`'s port): what an
/// address without a port means to telemon.
pub const DEFAULT_PORT: u16 = 7461;

/// Names for commands on command lines: `ps memstat trace trace-clear kstat channels schedlat ipclat watchdog`.
#[allow(unused_imports)]
use prelude::*;

impl core::str::FromStr for SysinfoCommand {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "ps" => SysinfoCommand::Ps,
            "memstat" | "mem" => SysinfoCommand::Memstat,
            "trace" => SysinfoCommand::Trace,
            "trace-clear" => SysinfoCommand::TraceClear,
            "kstat" => SysinfoCommand::Kstat,
            "channels" | "chstat" => SysinfoCommand::Channels,
            "schedlat" => SysinfoCommand::SchedLatency,
            "ipclat" => SysinfoCommand::IpcLatency,
            "watchdog" => SysinfoCommand::Watchdog,
            _ => {
                return Err(format!(
                "unknown report {s:?}: expected ps, memstat, trace, trace-clear, kstat, channels, schedlat, \
                     ipclat or watchdog"
            ))
            }
        })
    }
}

impl SysinfoCommand {
    /// The command's name on the command line (the inverse of `FromStr`).
    pub fn name(self) -> &'static str {
        match self {
            SysinfoCommand::Ps => "ps",
            SysinfoCommand::Memstat => "memstat",
            SysinfoCommand::Trace => "trace",
            SysinfoCommand::TraceClear => "trace-clear",
            SysinfoCommand::Kstat => "kstat",
            SysinfoCommand::Channels => "channels",
            SysinfoCommand::SchedLatency => "schedlat",
            SysinfoCommand::IpcLatency => "ipclat",
            SysinfoCommand::Watchdog => "watchdog",
        }
    }
}

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
