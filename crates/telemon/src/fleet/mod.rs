//! The fleet core: many monitored targets, each in its own task, each with a cache of its current
//! series that views (`serve`, `top`) read without doing any target I/O.
//!
//! [`model`] holds the snapshot types every view codes against; [`registry`] the shared table
//! of per-target caches, with a generation number bumped on every change.

pub mod config;
pub mod model;
pub mod registry;
pub mod render;
pub mod store;

pub use model::{
    ErrorCounts, ErrorKind, EventRecord, FleetSnapshot, MetricKind, Protocol, Series, TargetSnapshot,
    TargetState, Value,
};
pub use registry::Registry;
