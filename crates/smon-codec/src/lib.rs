//! A sans-IO codec for the "smon" stream of Tino's `mon` system monitor (2004): named values,
//! compressed into token numbers and deltas.
//!
//! ```text
//!  stream := { index-op | pair | resync }
//!  index-op := FA n | FB n | FC n | FD                       (A11; n is an absolute number)
//!  pair   := token-field value                               (token-field: delta from the current token, A6)
//!         |  token-field(->0) [FD index-ops] defstring new-token-field value      (definition, A7 A8 A13)
//!         |  token-field(->X) FD index-ops new-token-field value                 (indexed copy of X, A13)
//!  resync := 17×FF {FF} FE                                   (A10)
//!
//!  number (value, token field, string length, index):
//!   00..DF        direct 0..223                              A1
//!   E0..E7 p..    positive delta, x+1 bytes of (delta-0xE0)  A2   string: append
//!   E8..EF p..    negative delta, x-7 bytes of magnitude     A3   string: error
//!   F0..F7 p..    absolute, x+1 bytes                        A5   string: restart
//!   F8 F9 FE FF   rejected (FF may start a resync)           A5 A10
//!   payload bytes are big-endian                             A4 (wire::BYTE_ORDER)
//!
//!  00 0C "smon.version" 01 05 "0.0.0" F0 00 0D "smon.compiled" 02 0B "Sep 12 2004"
//!  |  |  type s + name  |  |  value   |     |                    |  |
//!  |  definition (A8)   |  append 5   token 1 -> 0 (A6 tie)      token 0+2 -> 2
//!  token 0+0 = 0        new token 0+1 = 1 (A7)
//! ```
//!
//! [`StreamDecoder`] turns bytes in any chunking into [`Update`]s; [`StreamEncoder`] turns [`Sample`]s
//! into bytes; [`SmonCodec`] adapts both to `tokio_util::codec`, and [`UpdateReader`] reads files
//! (appended across runs, or growing), stdin and sockets.
//!
//! ```
//! use bytes::BytesMut;
//! use smon_codec::{DecoderConfig, EncoderConfig, Sample, StreamDecoder, StreamEncoder, Update};
//!
//! let samples = vec![
//!     Sample::new("smon.time", [], 1_100_000_000),
//!     Sample::new("linux.cpu.idle", [0], 5_000),
//!     Sample::new("linux.cpu.idle", [1], 7_000),
//!     Sample::new("mon.version", [], "0.0.0"),
//!     Sample::new("linux.cpu.idle", [0], 5_004),
//! ];
//! let mut encoder = StreamEncoder::new(EncoderConfig::default()); // starts with a resync
//! let mut wire = BytesMut::new();
//! for s in &samples {
//!     encoder.encode(s, &mut wire).unwrap();
//! }
//! let decoded: Vec<Sample> = StreamDecoder::decode_all(&wire, DecoderConfig::default())
//!     .unwrap()
//!     .into_iter()
//!     .filter_map(Update::into_sample)
//!     .collect();
//! assert_eq!(decoded, samples);
//! ```
//!
//! # The rules this crate follows
//!
//! No implementation of the format survives; the spec text (`PROTOCOL,v 1.1`, 2004) contradicts itself
//! in places, so these resolutions are the specification here. Where they differ from the text, they win.
//!
//! * **A1 Direct range.** `00..=DF` are the direct values 0..=223 (the text's "00 to BF" is a typo: with
//!   it 192..=223 would be unencodable). `C0..=DF` are direct, not reserved.
//! * **A2 `Ex` offset.** `E0..=E7` carry `x+1` bytes of `delta − 0xE0` for every length (224 = `E0 00`,
//!   480 = `E1 01 00`). Non-shortest encodings are accepted. An `E7` delta can exceed u64: it wraps
//!   modulo 2^64 unless [`DecoderConfig::strict`] rejects it.
//! * **A3 Negative deltas.** `E8..=EF` carry `x−7` bytes of magnitude, no offset: new = prev − N. `E8 00`
//!   is no change and never emitted. Below 0 wraps (or is rejected in strict mode).
//! * **A4 Byte order.** Payloads are big-endian, set once in [`wire::BYTE_ORDER`].
//! * **A5 `Fx`.** `F0..=F7` carry `x+1` bytes of an absolute value (`F0 00` = 0, `F1 03 E8` = 1000).
//!   `F8`/`F9` ("future use") and `FE`/`FF` in a number position are errors, except FF in a resync run.
//! * **A6 Token field.** Each pair's token field is a delta from the current token (the previous pair's),
//!   starting at 0. The encoder writes the shortest form; ties go direct < `E0..E7` < `F0..F7` <
//!   `E8..EF` (so 1 → 0 is `F0 00`, not `E8 01`). The same rule applies to values and string lengths.
//! * **A7 The new token.** After a definition, the next token field (a delta from the current token, 0)
//!   names the new token: it must be unused; it binds the definition and carries the first value. The
//!   encoder numbers tokens max+1; the decoder accepts any unused number.
//! * **A8 Definition strings.** The length counts every byte including the type byte: `0D
//!   "smon.compiled"` is type `s`, name `mon.compiled` (the text's `0B "smon.version"` must be `0C`;
//!   literally it leads to the undefined token 158). A definition is at least 4 bytes (type + a 3-byte
//!   name) and its type is `u` or `s`; anything else is an error.
//! * **A9 String deltas.** A string's length field is a number against its previous value: direct and
//!   `E0..E7` append n bytes (`00` = unchanged), `F0..F7` restart with n bytes, `E8..EF` are an error.
//!   Token 0 has no memory (its base is always ""). The encoder appends when the new value starts with
//!   the old one and restarts otherwise.
//! * **A10 FF stuffing and resync.** Inside string data an FE follows every 16 consecutive FFs (and is
//!   dropped by the decoder), even after the string's last byte; the run is counted over the raw stream,
//!   length payload included (`F0 FF` + 16×FF data is `F0 FF 15×FF FE FF`). 17 or more FFs then FE is a
//!   resync: all state is reset. The encoder emits it at the start of every run
//!   ([`EncoderConfig::resync_at_start`]); after an error the decoder skips to the next one.
//! * **A11 Index ops.** In token position, `FA n` pushes a level, `FB n` sets the innermost, `FC n` the
//!   one above it (depth >= 2), `FD` clears; index numbers are absolute. The index vector stays in force
//!   until changed. The encoder emits the fewest ops (`FB`, `FC`, `FA` pushes when only deeper levels are
//!   missing, else `FD` and `FA`s).
//! * **A12 Values.** A `u` value is a delta from its token's last value whatever index that was sent
//!   under; a string appends to or restarts from its token's last string. No negative numbers or floats.
//! * **A13 Indexed tokens.** Right after a token field, `FD` + index ops (`FA f` first) defines a new
//!   token bound to `f`: after token 0 the definition string follows, after a defined token X the new
//!   token copies X's name and type; then the new token field and the first value. An indexed token's
//!   effective index is the current index vector with level 0 replaced by `f` (`[f]` when empty). The
//!   encoder uses one indexed token per (name, first index).
//!
//! Bounds ([`Limits`]) on string length, token count and index depth are checked before allocating.

//!
//! ## Features
//!
//! | feature | what it adds | needs |
//! |---|---|---|
//! | `std` (default) | `std::error::Error`, I/O errors; without it the crate is `#![no_std]` with `alloc` | |
//! | `codec` | [`SmonCodec`], the tokio-util `Decoder`/`Encoder` (a decode error is an item: a `FramedRead` goes on) | tokio-util |
//! | `client` (default) | [`UpdateReader`], which also follows a file as it grows; implies `codec` | tokio |
//! | `serde` | `Serialize`/`Deserialize` on [`Update`], [`Sample`] and [`Value`] | serde |
//!
//! With `default-features = false` the crate is the sans-IO core on `bytes`, `memchr` and `thiserror`
//! alone, and builds without `std`.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

extern crate alloc;

#[cfg(feature = "client")]
mod client;
mod codec;
mod error;
mod message;
#[cfg(feature = "codec")]
mod tokio_codec;
/// The wire format's constants (number prefixes, index ops, resync, limits), one source of truth for the
/// codec, the sim and the tests.
pub mod wire;

/// What every module uses from `alloc` (the std prelude has it; `no_std` does not).
mod prelude {
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::sync::Arc;
    pub(crate) use alloc::vec::Vec;
}

/// The buffer types of this crate's API, re-exported for convenience.
pub use bytes::{Bytes, BytesMut};
#[cfg(feature = "client")]
pub use client::{UpdateReader, FIRST_READ_CHUNK, READ_CHUNK};
pub use codec::{
    DecoderConfig, EncoderConfig, StreamDecoder, StreamEncoder, SyncState, TokenInfo, UpdateRef, ValueRef,
};
pub use error::{DecodeError, EncodeError};
pub use message::{Kind, Sample, Update, Value};
#[cfg(feature = "codec")]
pub use tokio_codec::SmonCodec;
pub use wire::{sniff, Limits, BYTE_ORDER, RESYNC};

/// The TCP port `smon-sim` serves a stream on by default (the 2004 protocol defines no network mode, so this is
/// the toolkit's choice): what an address without a port means to telemon.
pub const DEFAULT_PORT: u16 = 7399;

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
