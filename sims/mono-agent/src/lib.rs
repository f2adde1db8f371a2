//! A fake Mono counters agent, configured like `mono --profile=countersagent:address=…,counters=…,interval=…`.
//!
//! The agent is the TCP *client*: it connects out to an inspector (retrying with backoff), sends Hello,
//! then a Sampling message every `interval` (only the values whose bytes changed) and answers List,
//! Add, Remove and Good Bye between samples. With `file://PATH` it writes Hello and samples to a file.
//!
//! ```text
//! agent ── connect ──> inspector
//!   Hello [0][1][count][headers]           ──>
//!   Sampling [4][ts]([idx][size][bytes])*[ff ff] every interval ──>
//!                                          <── List [0] / Add [1][cat][name] / Remove [2][idx] / [7f]
//!   [1]… / [2][status](header) / [3][status] ──>
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use mono_agent_sim::{AgentConfig, Destination};
//! use mono_counters::{Inspector, ClientConfig};
//!
//! let inspector = Inspector::bind("127.0.0.1:0", ClientConfig::default()).await?;
//! let mut config = AgentConfig::from_options(&format!(
//!     "address={},counters=Mono System/Working Set,interval=10",
//!     inspector.local_addr()?
//! ))?;
//! config.max_samples = Some(1);
//! let agent = tokio::spawn(mono_agent_sim::run(config, sim_common::Shutdown::new()));
//! let (mut session, _peer) = inspector.accept().await?;
//! assert_eq!(session.hello().headers[0].full_name(), "Mono System/Working Set");
//! let sample = session.next_sample().await?.expect("one sample");
//! assert_eq!(sample.changed, vec![0]);
//! # drop(agent);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod config;
mod counters;
mod session;

pub use config::{parse_address, AgentConfig, Backoff, ConfigError, Destination, DuplicateAdd};
pub use counters::{builtin_counters, dotnet_ticks_now, CounterDef, ValueMode, ValueOverrides};
pub use session::{run, run_file, run_with_overrides, serve_connection, SessionEnd, SimError};
