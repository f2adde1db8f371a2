//! What telemon's end-to-end tests share, in one place instead of a copy per test file: a loud `SKIPPED`
//! (or, under `CI=true`, a failure) when a real component such as Prometheus is missing, a 60 s safety net
//! for every wait, a plain HTTP/1.1 GET, free loopback addresses, a real component (Prometheus,
//! VictoriaMetrics, Alertmanager) started on a free port with its log in a temporary directory and waited for
//! until it is ready, an Alertmanager webhook receiver, the five protocol sims started in-process, and a
//! headless Chromium over WebDriver ([`browser`]). It sits beside the test layer and is used only as a
//! dev-dependency: nothing in a shipped crate depends on it. What needs the `telemon` binary itself
//! (`env!("CARGO_BIN_EXE_telemon")` only works inside that package's tests) stays in
//! `crates/telemon/tests/support/mod.rs`, which re-exports this crate.
#![warn(missing_docs)]

pub mod browser;
mod component;
mod net;
mod receiver;
mod sims;
mod skip;
mod webhook;

pub use component::{Alertmanager, Component, Launch, Prometheus, VictoriaMetrics};
pub use net::{free_addr, free_port, http_get, listener, until, urlencode, within, DEADLINE};
pub use receiver::{http, Kind, Labels, Receiver};
pub use sims::{Cpus, SimOptions, Sims};
pub use skip::{alertmanager, in_ci, need, need_on_path, on_path, prometheus_and_promtool};
pub use webhook::{Alert, Notification, Webhook};
