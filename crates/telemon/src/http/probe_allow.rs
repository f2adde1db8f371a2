//! `[serve] probe_allow`: the networks, and optionally the ports, that `/probe` may connect to.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer};

/// One entry of `probe_allow`: a network (`10.0.0.0/8`, `2001:db8::/32`, or one address such as
/// `192.0.2.7`) and, optionally, a port (`192.0.2.7:4512`, `[2001:db8::/32]:4512`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeAllow {
    /// The network; a single address is a /32 (or /128).
    pub net: ipnet::IpNet,
    /// The one port allowed, or every port when `None`.
    pub port: Option<u16>,
}

impl ProbeAllow {
    /// Parses `NET`, `NET:PORT` or `[NET]:PORT` (IPv6 with a port needs the brackets).
    pub fn parse(s: &str) -> Result<ProbeAllow, String> {
        let bad = |why: &str| {
            format!("{s:?}: {why} (expected a network such as \"10.0.0.0/8\" or \"192.0.2.7:4512\")")
        };
        let net = |t: &str| -> Result<ipnet::IpNet, String> {
            t.parse::<ipnet::IpNet>()
                .or_else(|_| t.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| bad("not an address or network"))
        };
        let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("bad port"));
        let s = s.trim();
        if let Some(rest) = s.strip_prefix('[') {
            let (inner, tail) = rest.split_once(']').ok_or_else(|| bad("missing ']'"))?;
            let port = match tail {
                "" => None,
                t => Some(port(t.strip_prefix(':').ok_or_else(|| bad("expected ':' after ']'"))?)?),
            };
            return Ok(ProbeAllow { net: net(inner)?.trunc(), port });
        }
        // Exactly one ':' is IPv4 (or an IPv4 network) with a port; more is IPv6 without one.
        match s.matches(':').count() {
            1 => {
                let (n, p) = s.split_once(':').expect("one ':'");
                Ok(ProbeAllow { net: net(n)?.trunc(), port: Some(port(p)?) })
            }
            _ => Ok(ProbeAllow { net: net(s)?.trunc(), port: None }),
        }
    }

    /// Whether this entry allows connecting to `addr`. An IPv4-mapped IPv6 address is taken as
    /// the IPv4 address it maps.
    pub fn allows(&self, addr: SocketAddr) -> bool {
        let ip = match addr.ip() {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(std::net::IpAddr::V6(v6), Into::into),
            v4 => v4,
        };
        self.net.contains(&ip) && self.port.is_none_or(|p| p == addr.port())
    }
}

impl std::fmt::Display for ProbeAllow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.port, self.net) {
            (None, n) => write!(f, "{n}"),
            (Some(p), ipnet::IpNet::V4(n)) => write!(f, "{n}:{p}"),
            (Some(p), ipnet::IpNet::V6(n)) => write!(f, "[{n}]:{p}"),
        }
    }
}

/// Deserializes `probe_allow`: a list of entries, each checked.
pub fn probe_allow<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ProbeAllow>, D::Error> {
    let entries = Vec::<String>::deserialize(d)?;
    entries.iter().map(|e| ProbeAllow::parse(e).map_err(serde::de::Error::custom)).collect()
}

#[cfg(test)]
mod tests {
    use super::ProbeAllow;

    fn allows(rule: &str, addr: &str) -> bool {
        ProbeAllow::parse(rule).unwrap().allows(addr.parse().unwrap())
    }

    #[test]
    fn networks_addresses_and_ports() {
        assert!(allows("10.0.0.0/8", "10.1.2.3:4512"));
        assert!(!allows("10.0.0.0/8", "11.1.2.3:4512"));
        assert!(allows("192.0.2.7:4512", "192.0.2.7:4512"));
        assert!(!allows("192.0.2.7:4512", "192.0.2.7:4513"));
        assert!(allows("192.0.2.7", "192.0.2.7:1"));
        assert!(allows("2001:db8::/32", "[2001:db8::1]:80"));
        assert!(allows("[2001:db8::/32]:80", "[2001:db8::1]:80"));
        assert!(!allows("[2001:db8::/32]:80", "[2001:db8::1]:81"));
        assert!(allows("::1", "[::1]:9"));
        assert!(allows("10.0.0.0/8", "[::ffff:10.0.0.1]:9"), "IPv4-mapped counts as IPv4");
        assert!(allows("10.1.2.3/8", "10.200.0.1:9"), "host bits are dropped");
        assert_eq!(ProbeAllow::parse("[2001:db8::/32]:80").unwrap().to_string(), "[2001:db8::/32]:80");
    }

    #[test]
    fn bad_entries_say_why() {
        for bad in ["", "10.0.0.0/33", "host.example:80", "10.0.0.1:0", "10.0.0.1:99999", "[::1", "[::1]x"] {
            let e = ProbeAllow::parse(bad).unwrap_err();
            assert!(e.contains("expected a network"), "{bad}: {e}");
        }
    }
}
