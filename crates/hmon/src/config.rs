//! The interface configuration string `mode:address:port` (`HMON_INIT`, `112⌶`).

use std::fmt;
use std::str::FromStr;

/// Who listens: the interpreter (`SERVE`) or the monitor (`POLL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The interpreter listens; monitors connect to it.
    Serve,
    /// The interpreter connects out to a listening monitor (and retries while it is absent).
    Poll,
}

/// The address part of a configuration string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ConfigAddress {
    /// Empty: loopback only (SERVE) or the local machine (POLL).
    Local,
    /// `*`: every interface (SERVE only).
    AllInterfaces,
    /// A host name, an IPv4 address or an (unbracketed) IPv6 address.
    Host(String),
}

/// A parsed `mode:address:port` string, e.g. `SERVE:localhost:4512` or `POLL::7000`.
///
/// The port is taken after the **last** colon and the mode before the first, so IPv6 addresses such as
/// `SERVE:::1:4512` keep their colons.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InterfaceConfig {
    /// SERVE or POLL.
    pub mode: Mode,
    /// Where to listen or connect.
    pub address: ConfigAddress,
    /// The TCP port.
    pub port: u16,
}

/// A configuration string that does not follow `mode:address:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// There are fewer than two colons.
    #[error("{text:?} is not of the form mode:address:port")]
    Shape {
        /// The text given.
        text: String,
    },
    /// The mode is neither `SERVE` nor `POLL`.
    #[error("unknown mode {mode:?} (want SERVE or POLL)")]
    Mode {
        /// The mode given.
        mode: String,
    },
    /// The port is not a number from 0 to 65535.
    #[error("invalid port {port:?}")]
    Port {
        /// The port given.
        port: String,
    },
    /// `*` was given in POLL mode, where it means nothing.
    #[error("`*` (all interfaces) is only meaningful in SERVE mode")]
    WildcardInPollMode,
}

impl FromStr for InterfaceConfig {
    type Err = ConfigError;
    fn from_str(text: &str) -> Result<Self, ConfigError> {
        let shape = || ConfigError::Shape { text: text.to_owned() };
        let (rest, port) = text.rsplit_once(':').ok_or_else(shape)?;
        let (mode, address) = rest.split_once(':').ok_or_else(shape)?;
        let mode = match mode {
            "SERVE" => Mode::Serve,
            "POLL" => Mode::Poll,
            other => return Err(ConfigError::Mode { mode: other.to_owned() }),
        };
        let port = port.parse::<u16>().map_err(|_| ConfigError::Port { port: port.to_owned() })?;
        let address = match address {
            "" => ConfigAddress::Local,
            "*" if mode == Mode::Serve => ConfigAddress::AllInterfaces,
            "*" => return Err(ConfigError::WildcardInPollMode),
            host => ConfigAddress::Host(host.to_owned()),
        };
        Ok(InterfaceConfig { mode, address, port })
    }
}

impl fmt::Display for InterfaceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mode {
            Mode::Serve => "SERVE",
            Mode::Poll => "POLL",
        };
        let address = match &self.address {
            ConfigAddress::Local => "",
            ConfigAddress::AllInterfaces => "*",
            ConfigAddress::Host(h) => h,
        };
        write!(f, "{mode}:{address}:{}", self.port)
    }
}

impl InterfaceConfig {
    /// The `host:port` to bind (SERVE) or dial (POLL) with tokio: empty means loopback (`127.0.0.1`),
    /// `*` means `0.0.0.0`, and an IPv6 literal is bracketed.
    pub fn socket_address(&self) -> String {
        match &self.address {
            ConfigAddress::Local => format!("127.0.0.1:{}", self.port),
            ConfigAddress::AllInterfaces => format!("0.0.0.0:{}", self.port),
            ConfigAddress::Host(h) if h.contains(':') => format!("[{h}]:{}", self.port),
            ConfigAddress::Host(h) => format!("{h}:{}", self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> InterfaceConfig {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn spec_serve_localhost() {
        let c = parse("SERVE:localhost:4512");
        assert_eq!(c.mode, Mode::Serve);
        assert_eq!(c.address, ConfigAddress::Host("localhost".into()));
        assert_eq!(c.port, 4512);
        assert_eq!(c.to_string(), "SERVE:localhost:4512");
        assert_eq!(c.socket_address(), "localhost:4512");
    }

    #[test]
    fn demo_poll_localhost() {
        let c = parse("POLL:localhost:7000");
        assert_eq!((c.mode, c.port), (Mode::Poll, 7000));
    }

    #[test]
    fn empty_address_is_loopback() {
        let c = parse("SERVE::4512");
        assert_eq!(c.address, ConfigAddress::Local);
        assert_eq!(c.socket_address(), "127.0.0.1:4512");
        assert_eq!(c.to_string(), "SERVE::4512");
    }

    #[test]
    fn star_is_all_interfaces_in_serve_only() {
        let c = parse("SERVE:*:4512");
        assert_eq!(c.address, ConfigAddress::AllInterfaces);
        assert_eq!(c.socket_address(), "0.0.0.0:4512");
        assert_eq!("POLL:*:7000".parse::<InterfaceConfig>(), Err(ConfigError::WildcardInPollMode));
    }

    #[test]
    fn ipv6_is_parsed_from_the_right() {
        let c = parse("SERVE:fe80::1:4512");
        assert_eq!(c.address, ConfigAddress::Host("fe80::1".into()));
        assert_eq!(c.port, 4512);
        assert_eq!(c.socket_address(), "[fe80::1]:4512");
        let c = parse("POLL:::1:7000");
        assert_eq!(c.address, ConfigAddress::Host("::1".into()));
        assert_eq!(c.to_string(), "POLL:::1:7000");
    }

    #[test]
    fn bad_strings_are_clear_errors() {
        assert!(matches!("SERVE4512".parse::<InterfaceConfig>(), Err(ConfigError::Shape { .. })));
        assert!(matches!("SERVE:4512".parse::<InterfaceConfig>(), Err(ConfigError::Shape { .. })));
        assert!(matches!("serve::4512".parse::<InterfaceConfig>(), Err(ConfigError::Mode { .. })));
        assert!(matches!("SERVE::65536".parse::<InterfaceConfig>(), Err(ConfigError::Port { .. })));
        assert!(matches!("SERVE:host:".parse::<InterfaceConfig>(), Err(ConfigError::Port { .. })));
    }
}
