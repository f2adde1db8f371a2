//! The agent's configuration: the real option string (`address=…,counters=…,interval=…`) plus knobs.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use mono_counters::{CounterName, RequestOpcodes};

use crate::counters::ValueMode;

/// The real agent's fallback when `address=` is missing or not understood.
pub const DEFAULT_ADDRESS: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8888);

/// Where the agent sends its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// Connect to an inspector.
    Tcp(SocketAddr),
    /// Write Hello and samples to a file (truncated on open).
    File(PathBuf),
}

/// What the agent does when asked to Add a counter it already samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DuplicateAdd {
    /// Answer `[2][3]`, the gist's EXISTING (this project's default).
    #[default]
    AnswerExisting,
    /// Close the connection without a response, as the real agent does.
    DropConnection,
}

/// Reconnection delays: doubling from `initial` up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(5) }
    }
}

/// A bad configuration the agent refuses to run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The host is not a numeric IPv4 address (the real agent does no DNS lookup).
    #[error("host {0:?} is not a numeric IPv4 address (no DNS lookups, like the real agent)")]
    HostNotNumeric(String),
    /// `interval=` is not a number of milliseconds.
    #[error("interval {0:?} is not a number of milliseconds")]
    BadInterval(String),
}

/// The fake agent's full configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// `address=`.
    pub destination: Destination,
    /// `counters=`: sampled from the start, indexes from 0 in this order (unknown ones skipped).
    pub counters: Vec<CounterName>,
    /// `interval=`: time between samples; zero samples continuously.
    pub interval: Duration,
    /// WORD counters' size: 4 or 8 bytes (a 32- or 64-bit agent).
    pub word_size: u8,
    /// The request numbering the agent understands.
    pub opcodes: RequestOpcodes,
    /// What a duplicate Add does.
    pub duplicate_add: DuplicateAdd,
    /// Live or fixed values.
    pub values: ValueMode,
    /// Stop after this many samples per connection (or file); `None` runs until stopped.
    pub max_samples: Option<u64>,
    /// Reconnect after a connection ends (the real agent stops instead).
    pub reconnect: bool,
    /// Delays between connection attempts.
    pub backoff: Backoff,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            destination: Destination::Tcp(SocketAddr::V4(DEFAULT_ADDRESS)),
            counters: Vec::new(),
            interval: Duration::ZERO,
            word_size: 8,
            opcodes: RequestOpcodes::Agent,
            duplicate_add: DuplicateAdd::AnswerExisting,
            values: ValueMode::Live,
            max_samples: None,
            reconnect: true,
            backoff: Backoff::default(),
        }
    }
}

impl AgentConfig {
    /// Parses the real agent's option string: `,`-separated `address=`, `counters=`, `interval=`;
    /// anything else is ignored with a warning. A missing `interval=` is 0 (continuous sampling).
    pub fn from_options(options: &str) -> Result<AgentConfig, ConfigError> {
        let mut config = AgentConfig::default();
        for option in options.split(',').filter(|o| !o.is_empty()) {
            if let Some(address) = option.strip_prefix("address=") {
                config.destination = parse_address(address)?;
            } else if let Some(counters) = option.strip_prefix("counters=") {
                config.counters = parse_counters(counters);
            } else if let Some(interval) = option.strip_prefix("interval=") {
                config.interval = parse_interval(interval)?;
            } else {
                tracing::warn!(option, "unknown countersagent option, ignored");
            }
        }
        Ok(config)
    }
}

/// Parses `interval=` milliseconds.
pub(crate) fn parse_interval(s: &str) -> Result<Duration, ConfigError> {
    s.trim().parse::<u64>().map(Duration::from_millis).map_err(|_| ConfigError::BadInterval(s.to_string()))
}

/// Parses `counters=`: `;`-separated `Category/Name`; malformed entries are skipped with a warning.
pub(crate) fn parse_counters(s: &str) -> Vec<CounterName> {
    s.split(';')
        .filter(|e| !e.trim().is_empty())
        .filter_map(|entry| {
            let parsed = CounterName::parse(entry.trim());
            if parsed.is_none() {
                tracing::warn!(entry, "malformed counter (expected Category/Name), skipped");
            }
            parsed
        })
        .collect()
}

/// Parses `address=`: `host:port`, `tcp://host:port` or `file://path`. Any other form falls back to
/// 127.0.0.1:8888 with a warning, like the real agent; a host that is not numeric IPv4 is an error.
pub fn parse_address(s: &str) -> Result<Destination, ConfigError> {
    if let Some(path) = s.strip_prefix("file://") {
        return Ok(Destination::File(PathBuf::from(path)));
    }
    let hostport = s.strip_prefix("tcp://").unwrap_or(s);
    let fallback = || {
        tracing::warn!(address = s, "unsupported address, using {DEFAULT_ADDRESS}");
        Ok(Destination::Tcp(SocketAddr::V4(DEFAULT_ADDRESS)))
    };
    if hostport.contains("://") {
        return fallback();
    }
    let Some((host, port)) = hostport.rsplit_once(':') else { return fallback() };
    let Ok(port) = port.parse::<u16>() else { return fallback() };
    let ip: Ipv4Addr = host.parse().map_err(|_| ConfigError::HostNotNumeric(host.to_string()))?;
    Ok(Destination::Tcp(SocketAddr::V4(SocketAddrV4::new(ip, port))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(s: &str) -> Destination {
        Destination::Tcp(s.parse().unwrap())
    }

    #[test]
    fn address_forms() {
        assert_eq!(parse_address("127.0.0.1:9000").unwrap(), tcp("127.0.0.1:9000"));
        assert_eq!(parse_address("tcp://127.0.0.1:9000").unwrap(), tcp("127.0.0.1:9000"));
        assert_eq!(parse_address("file://counters.bin").unwrap(), Destination::File("counters.bin".into()));
    }

    #[test]
    fn bad_scheme_falls_back_to_the_default() {
        assert_eq!(parse_address("udp://127.0.0.1:9000").unwrap(), tcp("127.0.0.1:8888"));
        assert_eq!(parse_address("nonsense").unwrap(), tcp("127.0.0.1:8888"));
    }

    #[test]
    fn dns_names_are_rejected() {
        assert_eq!(parse_address("localhost:9000"), Err(ConfigError::HostNotNumeric("localhost".into())));
        assert!(parse_address("tcp://[::1]:9000").is_err());
    }

    #[test]
    fn option_string_like_the_real_agent() {
        let c = AgentConfig::from_options(
            "address=tcp://127.0.0.1:9000,counters=Mono JIT/Compiled methods;bogus;Mono System/Working Set,interval=250",
        )
        .unwrap();
        assert_eq!(c.destination, tcp("127.0.0.1:9000"));
        assert_eq!(
            c.counters,
            vec![
                CounterName::new("Mono JIT", "Compiled methods"),
                CounterName::new("Mono System", "Working Set")
            ]
        );
        assert_eq!(c.interval, Duration::from_millis(250));
    }

    #[test]
    fn missing_interval_samples_continuously() {
        let c = AgentConfig::from_options("address=127.0.0.1:9000").unwrap();
        assert_eq!(c.interval, Duration::ZERO);
        assert!(c.counters.is_empty());
        assert!(AgentConfig::from_options("interval=soon").is_err());
    }
}
