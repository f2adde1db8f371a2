//! Addresses in the config: a target's `HOST:PORT` (a missing port is the protocol's default, as
//! Prometheus applies the scheme's), and a listener's `HOST:PORT` (port 0: any free port).

use std::borrow::Cow;

/// Checks that `target` is `HOST:PORT` (a name or an address, IPv6 in brackets, port 1..=65535).
pub fn check_host_port(target: &str) -> Result<(), String> {
    host_port(target, false)
}

/// Checks that `addr` is an address to listen on: `HOST:PORT` as [`check_host_port`], but port 0 (a
/// free port chosen by the system) is allowed.
pub fn check_listen(addr: &str) -> Result<(), String> {
    host_port(addr, true)
}

/// `target` with `port` added when it has none (`my.domain` -> `my.domain:4512`, `[::1]` ->
/// `[::1]:4512`); an address that has a port is returned as it is, checked.
pub fn with_default_port(target: &str, port: u16) -> Result<Cow<'_, str>, String> {
    if has_port(target) {
        return check_host_port(target).map(|()| Cow::Borrowed(target));
    }
    if target.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(format!("{target:?} is not HOST:PORT: put an IPv6 address in brackets, [{target}]"));
    }
    let with = format!("{target}:{port}");
    match host_port(&with, false) {
        Ok(()) => Ok(Cow::Owned(with)),
        // The reason is the host's: say it of what was written.
        Err(why) => Err(why.replacen(&format!("{with:?}"), &format!("{target:?}"), 1)),
    }
}

/// Whether `target` ends in `:PORT` (of a name, an IPv4 address or a bracketed IPv6 address).
fn has_port(target: &str) -> bool {
    match target.rsplit_once(':') {
        None => false,
        Some((host, _)) if host.starts_with('[') => host.ends_with(']'),
        // `::1` is an IPv6 address without a port, `a:b:1` no name at all: both are errors, not a port.
        Some((host, _)) => !host.contains(':') || !target.contains("::") && host.contains(':'),
    }
}

fn host_port(target: &str, zero_port: bool) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{target:?} is not HOST:PORT: {why}"));
    let Some((host, port)) = target.rsplit_once(':') else {
        return bad("no port");
    };
    if !port.parse::<u16>().is_ok_and(|p| p != 0 || zero_port) {
        return bad(if zero_port { "the port must be 0 to 65535" } else { "the port must be 1 to 65535" });
    }
    if let Some(v6) = host.strip_prefix('[') {
        return match v6.strip_suffix(']').map(str::parse::<std::net::Ipv6Addr>) {
            Some(Ok(_)) => Ok(()),
            _ => bad("a bracketed host must be an IPv6 address"),
        };
    }
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !l.starts_with('-')
        });
    if !name_ok {
        return bad("the host must be a name or an address (IPv6 in brackets)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port() {
        for ok in ["a:1", "10.0.0.1:4502", "[::1]:80", "host.example.org:65535", "x_y:9"] {
            check_host_port(ok).unwrap();
        }
        for bad in ["", "a", "a:", "a:0", "a:65536", "[::1]:99999", "::1:80", "[x]:1", ":80", "a b:1", "-a:1"]
        {
            assert!(check_host_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses_may_take_port_0() {
        for ok in ["127.0.0.1:0", "0.0.0.0:9464", "[::]:0", "localhost:9464"] {
            check_listen(ok).unwrap();
        }
        for bad in ["notanaddr", ":9464", "127.0.0.1:", "127.0.0.1:99999", "[::1]"] {
            assert!(check_listen(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_missing_port_is_the_default_one() {
        let cases = [
            ("my.domain", "my.domain:4512"),
            ("10.0.0.1", "10.0.0.1:4512"),
            ("[::1]", "[::1]:4512"),
            ("my.domain:80", "my.domain:80"),
            ("[::1]:80", "[::1]:80"),
        ];
        for (given, want) in cases {
            assert_eq!(with_default_port(given, 4512).unwrap(), want, "{given}");
        }
        for bad in ["", "nohost:", "127.0.0.1:99999", "a b", "::1", ":80", "a:0"] {
            let e = with_default_port(bad, 4512).unwrap_err();
            assert!(e.contains("is not HOST:PORT"), "{bad}: {e}");
        }
        assert!(with_default_port("::1", 1).unwrap_err().contains("[::1]"));
    }
}
