//! `product-soak`: the whole product at once, with faults on a seeded schedule, and a table of what held
//! (`cargo xtask soak --all [--minutes N] [--seed S]`; a 3-minute form runs in `cargo test`).
//!
//! It starts and stops everything itself:
//! - `telemon serve` behind a web config with TLS and basic auth (the test certificates of
//!   `crates/telemon/tests/data/web-tls`), `--web.enable-lifecycle`, `--record` with rotation and a total bound,
//!   over in-process sims of all five protocols (fleet-soak's [`fleet_soak::Slot`]s): sys161, Dyalog, smon and
//!   rvOS in the config file, smon targets in a `[[file_sd]]` file, Mono agents dialling a `[[mono_listen]]`
//!   and Dyalog interpreters dialling a `[[hmon_listen]]`. telemon runs in a mount namespace of its own
//!   ([`proc::Namespace`]) whose tmpfs holds both push queues, so that the full-disk fault fills only that;
//! - a real Prometheus scraping it over https every 15 s with basic_auth, with `deploy/prometheus/rules.yml`;
//! - a `[[remote_write]]` sender with `queue_dir` to a real VictoriaMetrics, and an `[[otlp]]` sender with
//!   `queue_dir` to the push tests' OTLP receiver (`crates/telemon/tests/otlp_receiver.py`, in the push
//!   virtualenv), which it counts;
//! - a headless Chromium with `/` in one tab and a second tab going from one target page to the next;
//! - the faults of [`plan::Plan`], whose schedule the report prints.
//!
//! What it checks is in [`Report`]'s table, one line a check: the figures sampled every 10 s (telemon's RSS,
//! descriptors and the web view's history bytes) flat after the warm-up and within 1.5x its value; every
//! second of every `telemon_target_up` series and of every sys161 instruction counter in VictoriaMetrics but the
//! documented losses; the OTLP receiver's count against telemon's; every restart seen as a down and an up in
//! `/metrics`, in Prometheus and in the web view's state log; reloads that keep connections; file_sd changes
//! within 5 s; Prometheus's `up`, scrape p99 and alerts; the browser tabs live at the end; the recordings'
//! bound.

pub mod analysis;
pub mod plan;
pub mod proc;
mod run;

pub use run::{run, Components, Options, Report};
