//! `dyalog-sim`: a fake Dyalog APL interpreter speaking the Health Monitor (HMON) protocol.
//!
//! It behaves as `shared/specs/hmon-notes.md` describes: it sends its handshake first (or, as a knob,
//! in lock-step), answers every request in order with the documented replies and error responses,
//! polls with a 1000 ms default and a 500 ms floor, sends `Notification`s for subscribed events of a
//! workspace that really changes, redacts at access level 1, answers only `GetLastKnownState` when busy,
//! and keeps serving other monitors when one misbehaves.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?.to_string();
//! let sim = dyalog_sim::Sim::new(dyalog_sim::Config::default());
//! let shutdown = sim_common::Shutdown::new();
//! tokio::spawn(sim.clone().serve(listener, shutdown.clone()));
//!
//! let (client, mut events) = hmon::Client::connect(addr, hmon::ClientConfig::default()).await?;
//! let facts = client.get_facts([hmon::FactKind::Workspace]).await?;
//! assert_eq!(facts.facts.unwrap().len(), 1);
//! sim.world().user_message(None, "hello"); // what 111⌶ does in APL
//! assert!(matches!(events.next().await, Some(hmon::Event::Message(hmon::Response::UserMessage(_)))));
//! shutdown.cancel();
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod session;
pub mod world;

use std::io;
use std::time::Duration;

use hmon::DEFAULT_MAX_FRAME_LEN;
use sim_common::Shutdown;
use tokio::net::{TcpListener, TcpStream};

pub use world::{World, WorldEvent};

/// The interpreter version being imitated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Version {
    /// 19.0: `Desc` is a string, no `SessionUUID`, no access level 3, no `ConnectRide`.
    #[default]
    #[value(name = "19")]
    V19,
    /// 20.0: `SessionUUID`, `Desc` may be any JSON value, access level 3 and `ConnectRide`.
    #[value(name = "20")]
    V20,
}

/// How the sim does its side of the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HandshakeStyle {
    /// Send both frames at once, then read the monitor's (what the interpreter does).
    #[default]
    Eager,
    /// Send `SupportedProtocols`, wait for the monitor's, send `UsingProtocol`, wait for the monitor's.
    Lockstep,
}

/// The sim's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The version imitated.
    pub version: Version,
    /// 0 refuses connections, 1 redacts, 2 full information, 3 (20.0) full permissions.
    pub access_level: u8,
    /// Start busy: only `GetLastKnownState` is answered.
    pub unresponsive: bool,
    /// The handshake order.
    pub handshake: HandshakeStyle,
    /// The largest frame accepted from a monitor.
    pub max_frame_len: u32,
    /// How often the world changes (`None`: only when [`World::step`] is called).
    pub tick: Option<Duration>,
    /// Send a `UserMessage` this often (`None`: only when [`World::user_message`] is called).
    pub user_message_every: Option<Duration>,
    /// How many outgoing messages may queue for a monitor that does not read before it is dropped.
    pub client_queue: usize,
    /// The workspace name.
    pub wsid: String,
    /// `110⌶`: the description (`None`: `""`, or in 20.0 a small object).
    pub desc: Option<serde_json::Value>,
    /// How long a monitor may take to send its handshake.
    pub handshake_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: Version::V19,
            access_level: 2,
            unresponsive: false,
            handshake: HandshakeStyle::Eager,
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            tick: Some(Duration::from_secs(1)),
            user_message_every: None,
            client_queue: 256,
            wsid: "CLEAR WS".to_owned(),
            desc: None,
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

/// A configuration the sim cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Access level above 3, or 3 with version 19.
    #[error("access level {level} is not available in version {version:?} (19: 0-2, 20: 0-3)")]
    AccessLevel {
        /// The level asked for.
        level: u8,
        /// The version.
        version: Version,
    },
}

impl Config {
    /// Checks the combination of knobs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let max = match self.version {
            Version::V19 => 2,
            Version::V20 => 3,
        };
        if self.access_level > max {
            return Err(ConfigError::AccessLevel { level: self.access_level, version: self.version });
        }
        Ok(())
    }
}

/// A running fake interpreter: its configuration and its world, shared by every connection.
#[derive(Debug, Clone)]
pub struct Sim {
    config: std::sync::Arc<Config>,
    world: World,
}

impl Sim {
    /// A fresh interpreter.
    pub fn new(config: Config) -> Sim {
        let world = World::new(&config.wsid, config.unresponsive);
        Sim { config: std::sync::Arc::new(config), world }
    }

    /// The simulated interpreter state (to inject `UserMessage`s, events, or busy periods).
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Drives the world's clock and the periodic `UserMessage`s until `shutdown`.
    async fn drive(self, shutdown: Shutdown) {
        let mut tick = self.config.tick.map(tokio::time::interval);
        let mut user = self.config.user_message_every.map(tokio::time::interval);
        for i in [&mut tick, &mut user].into_iter().flatten() {
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i.reset(); // the first tick one period from now, not at once
        }
        let mut n = 0u64;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = async { tick.as_mut().unwrap().tick().await }, if tick.is_some() => self.world.step(),
                _ = async { user.as_mut().unwrap().tick().await }, if user.is_some() => {
                    n += 1;
                    self.world.user_message(Some(format!("sim-{n}")), format!("Hello from the application ({n})"));
                }
            }
        }
    }

    /// SERVE mode: answers monitors connecting to `listener` until `shutdown`.
    ///
    /// At access level 0 the listener is closed at once, so connections are refused.
    pub async fn serve(self, listener: TcpListener, shutdown: Shutdown) -> io::Result<()> {
        self.config.validate().map_err(io::Error::other)?;
        if self.config.access_level == 0 {
            tracing::info!("access level 0: not listening");
            drop(listener);
            shutdown.cancelled().await;
            return Ok(());
        }
        tokio::spawn(self.clone().drive(shutdown.clone()));
        let sim = self;
        sim_common::accept_loop(listener, shutdown.clone(), move |stream: TcpStream, peer| {
            let sim = sim.clone();
            let shutdown = shutdown.clone();
            async move { session::run(sim, stream, peer.to_string(), shutdown).await }
        })
        .await
    }

    /// POLL mode: dials the monitor at `addr`, retrying while it is absent, and dials again after each
    /// session ends, until `shutdown`.
    pub async fn poll(self, addr: String, shutdown: Shutdown) -> io::Result<()> {
        self.config.validate().map_err(io::Error::other)?;
        if self.config.access_level == 0 {
            tracing::info!("access level 0: not connecting");
            shutdown.cancelled().await;
            return Ok(());
        }
        tokio::spawn(self.clone().drive(shutdown.clone()));
        let mut delay = Duration::from_millis(100);
        loop {
            let connected = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                c = TcpStream::connect(&addr) => c,
            };
            match connected {
                Ok(stream) => {
                    delay = Duration::from_millis(100);
                    let _ = stream.set_nodelay(true);
                    tracing::info!(%addr, "connected to the monitor");
                    if let Err(e) = session::run(self.clone(), stream, addr.clone(), shutdown.clone()).await {
                        tracing::warn!(%addr, error = %e, "session ended");
                    }
                }
                Err(e) => tracing::debug!(%addr, error = %e, "monitor not listening yet"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }
}

/// SERVE mode with a fresh interpreter: `Sim::new(config).serve(listener, shutdown)`.
pub async fn run(listener: TcpListener, config: Config, shutdown: Shutdown) -> io::Result<()> {
    Sim::new(config).serve(listener, shutdown).await
}
