//! `telemon` as a library: the fleet core shared by `telemon serve` (a Prometheus exporter) and
//! `telemon top` (a terminal dashboard).
//!
//! The command-line tool itself lives in `main.rs`; this library holds what both long-running
//! views share.

#![warn(missing_docs)]

pub mod export;
pub mod fleet;
pub mod fuzz;
pub mod push;
pub mod record;
pub mod retry;
pub mod serve;
pub mod top;
