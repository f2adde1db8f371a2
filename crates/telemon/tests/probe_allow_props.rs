//! `[serve] probe_allow` under proptest: an entry prints as one that parses back to it. That any string, a
//! `probe_allow` entry or a `/probe` target, is taken or refused with a reason, never a panic, is the fuzz
//! target's check, under proptest in the unit tests of `src/fuzz/tests.rs`.

use proptest::prelude::*;
use telemon::http::probe_allow::ProbeAllow;

proptest! {
    #[test]
    fn a_probe_allow_entry_prints_as_itself(
        ip in any::<[u8; 16]>(), v4 in any::<bool>(), prefix in 0u8..=128, port in proptest::option::of(1u16..),
    ) {
        let net: ipnet::IpNet = if v4 {
            ipnet::Ipv4Net::new(std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]), prefix % 33).unwrap().into()
        } else {
            ipnet::Ipv6Net::new(std::net::Ipv6Addr::from(ip), prefix).unwrap().into()
        };
        let rule = ProbeAllow { net: net.trunc(), port };
        prop_assert_eq!(ProbeAllow::parse(&rule.to_string()).unwrap(), rule);
    }
}
