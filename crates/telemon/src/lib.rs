//! `telemon`'s library half: the two long-running views of a fleet that the binary serves, the HTTP server of
//! `telemon serve` ([`http`]: `/metrics`, `/probe`, `/targets`; [`web`]: the page at `/`) and the terminal dashboard of `telemon top`
//! ([`top`]). It sits at the top of the layers, over the fleet core (`telemon-fleet`) and the push senders
//! (`telemon-push`); the commands themselves live in the binary (`src/cmd/`).

#![warn(missing_docs)]

pub mod build_info;
pub mod config;
pub mod exposition;
/// Fuzz-target bodies, shared by `fuzz/` (cargo-fuzz and `cargo xtask fuzz --replay` build it with
/// `--cfg fuzzing`) and the corpus replays of this crate's unit tests. Not part of the API: it exists only
/// under `cfg(fuzzing)`.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzz;
pub mod history;
pub mod http;
pub mod top;
pub mod web;
