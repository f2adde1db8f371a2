//! `telemon` as a library: the fleet core shared by `telemon serve` (a Prometheus exporter) and
//! `telemon top` (a terminal dashboard).
//!
//! The command-line tool itself lives in `main.rs`; this library holds what both long-running
//! views share.

#![warn(missing_docs)]

pub mod fleet;
/// Exponential backoff with jitter, shared by the one-target subcommands and the fleet.
pub mod retry;
/// `telemon serve`: the Prometheus exporter view on the fleet.
pub mod serve;
/// `telemon top`: the terminal dashboard view on the fleet.
pub mod top;
