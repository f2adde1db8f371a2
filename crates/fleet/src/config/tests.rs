//! The fleet's sections of the config, read by each protocol's component: every error at its
//! `FILE:LINE: KEY`.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::collect::dialin::{DEFAULT_HELLO_TIMEOUT, DEFAULT_MAX_TARGETS};
use crate::protocol::hmon::{HmonBlock, HmonListen};
use crate::protocol::mono::MonoBlock;
use crate::protocol::smon::SmonBlock;
use crate::protocol::sysinfo::SysinfoBlock;

/// The blocks of type `T` of a config, in its order.
fn blocks<T: 'static>(c: &FleetConfig) -> Vec<&T> {
    c.targets.iter().filter_map(|t| t.unit.as_any().downcast_ref::<T>()).collect()
}

#[test]
fn unknown_facts_events_reports_and_bad_globs_are_rejected() {
    // Each error is at its key's line, not at the block's name.
    let cases = [
        ("[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nfacts = [\"Workspace\", \"Weather\"]\n", 4, "facts"),
        ("[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nsubscribe = [\"Lunch\"]\n", 4, "subscribe"),
        ("[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\nreports = [\"trace_clear\"]\n", 4, "reports"),
        ("[[meter161]]\nname = \"a\"\ndir_glob = \"/home/[x\"\n", 3, "dir_glob"),
        ("[[meter161]]\nname = \"a\"\ndir = \"/x\"\ninterval = \"5s\"\n", 4, "interval"),
        ("[[mono_listen]]\nname = \"a\"\nlisten = \"x:1\"\nadd = [\"NoSlash\"]\n", 4, "add"),
    ];
    for (text, line, key) in cases {
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
    }
    let ok = "[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\nfacts = [\"3\", \"Host\"]\nsubscribe = [\"1\"]\n";
    FleetConfig::parse("f.toml", ok).unwrap();
}

#[test]
fn listener_bounds_parse_and_bad_ones_are_rejected_at_their_line() {
    let text = "[[mono_listen]]\nname = \"m\"\nlisten = \"x:1\"\nmax_targets = 5\n\
                allow = [\"10.0.0.0/8\", \"127.0.0.1\", \"::1\"]\nhello_timeout = \"2s\"\n";
    let c = FleetConfig::parse("f.toml", text).unwrap();
    let l = blocks::<MonoBlock>(&c)[0].listener_limits();
    assert_eq!((l.max_targets, l.hello_timeout, l.allow.len()), (5, Duration::from_secs(2), 3));
    assert!(l.allow[1].contains(&"127.0.0.1".parse::<std::net::IpAddr>().unwrap()));
    let defaults = FleetConfig::parse("f.toml", "[[hmon_listen]]\nname = \"h\"\nlisten = \"x:1\"\n").unwrap();
    let l = blocks::<HmonListen>(&defaults)[0].0.listener_limits();
    assert_eq!(
        (l.max_targets, l.hello_timeout, l.allow.len()),
        (DEFAULT_MAX_TARGETS, DEFAULT_HELLO_TIMEOUT, 0)
    );
    let cases = [
        ("[[mono_listen]]\nname = \"m\"\nlisten = \"x:1\"\n\nallow = [\"10.0.0.0/33\"]\n", 5, "allow"),
        ("[[hmon_listen]]\nname = \"h\"\nlisten = \"x:1\"\nmax_targets = 0\n", 4, "max_targets"),
        ("[[hmon_listen]]\nname = \"h\"\nlisten = \"x:1\"\nhello_timeout = \"0s\"\n", 4, "hello_timeout"),
        ("[[hmon]]\nname = \"h\"\nconnect = \"x:1\"\nallow = [\"::1\"]\n", 4, "allow"),
    ];
    for (text, line, key) in cases {
        let e = FleetConfig::parse("f.toml", text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
    }
}

#[test]
fn bad_label_names_are_rejected_at_their_line() {
    let head = "[[smon]]\nname = \"box\"\nfile = \"/x\"\n";
    let cases = [
        ("labels = { \"my-label\" = \"x\" }\n", 4, "my-label", "[a-zA-Z_]"),
        ("labels = { ok = \"1\", target = \"evil\" }\n", 4, "target", "set by telemon"),
        ("labels = { le = \"1\" }\n", 4, "le", "set by telemon"),
        ("labels = { quantile = \"1\" }\n", 4, "quantile", "set by telemon"),
        ("labels = { __meta = \"1\" }\n", 4, "__meta", "__"),
        ("labels = { \"1x\" = \"1\" }\n", 4, "1x", "[a-zA-Z_]"),
        ("labels = { \"\" = \"1\" }\n", 4, "", "[a-zA-Z_]"),
        ("[smon.labels]\nok = \"1\"\n\"a.b\" = \"x\"\n", 6, "a.b", "[a-zA-Z_]"),
    ];
    for (tail, line, key, why) in cases {
        let text = format!("{head}{tail}");
        let e = FleetConfig::parse("f.toml", &text).unwrap_err();
        assert_eq!((e.line, e.key.clone()), (line, format!("labels.{key}")), "{e}");
        assert!(e.message.contains(why), "{e}");
        assert!(e.to_string().starts_with(&format!("f.toml:{line}: labels.{key}: ")), "{e}");
    }
    let ok = format!("{head}labels = {{ course = \"cs161 \\\"x\\\" é\", _x = \"\", Env2 = \"a\\nb\" }}\n");
    FleetConfig::parse("f.toml", &ok).unwrap();
}

#[test]
fn every_label_metrics_md_names_is_reserved() {
    let doc = include_str!("../../../../docs/metrics.md");
    let mut named = std::collections::BTreeSet::new();
    let pieces: Vec<&str> = doc.split('{').collect();
    for (before, block) in pieces.iter().zip(&pieces[1..]) {
        // telemon_build_info's labels (branch, revision, ...) are on a family of no target: no clash.
        if before.ends_with("telemon_build_info") {
            continue;
        }
        let Some(inner) = block.split('}').next() else { continue };
        for part in inner.split(',') {
            let name = part.split('=').next().unwrap_or("").trim();
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                named.insert(name.to_owned());
            }
        }
    }
    assert!(named.contains("target") && named.contains("category"), "{named:?}");
    for name in named {
        assert!(RESERVED_LABELS.contains(&name.as_str()), "{name} is in metrics.md but not reserved");
        assert!(check_label_name(&name).is_err());
    }
}

#[test]
fn an_error_is_at_its_own_key_and_in_the_users_units() {
    // Out of sys161's range, in the units written.
    let text = "[[meter161]]\nname = \"a\"\ndir = \"/x\"\ninterval = \"2500ms\" # too slow\n";
    let e = FleetConfig::parse("f.toml", text).unwrap_err();
    assert_eq!(e.to_string(), "f.toml:4: interval: 2500ms is outside 10us..2s (what sys161 takes)");
    let e = FleetConfig::parse("f.toml", "[[meter161]]\nname = \"a\"\ndir = \"/x\"\ninterval = \"5us\"\n")
        .unwrap_err();
    assert!(e.to_string().starts_with("f.toml:4: interval: 5us is outside 10us..2s"), "{e}");
    // A key a block does not write is not looked for in the next block: the block's name line.
    let text = "[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\npoll = \"0s\"\n\
                [[hmon]]\nname = \"b\"\nconnect = \"x:2\"\npoll = \"1s\"\n";
    assert_eq!(FleetConfig::parse("f.toml", text).unwrap_err().line, 4);
    let text = "[[hmon]]\nname = \"a\"\nconnect = \"x:1\"\n[[hmon]]\nname = \"b\"\n";
    assert_eq!(FleetConfig::parse("f.toml", text).unwrap_err().line, 5, "b lacks connect: its name");
    // The whole file: no line 0, no key `-`.
    let e = Document::load(Path::new("/nonexistent/t.toml")).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/t.toml: cannot read the config file: "), "{e}");
}

#[test]
fn addresses_without_a_port_take_the_protocols_default() {
    let text = "[[hmon]]\nname = \"h\"\nconnect = \"127.0.0.1\"\n[[smon]]\nname = \"s\"\nconnect = \"box.lan\"\n\
                [[sysinfo]]\nname = \"v\"\nconnect = \"[::1]\"\n[[sysinfo]]\nname = \"w\"\nconnect = \"[::1]:9\"\n";
    let c = FleetConfig::parse("f.toml", text).unwrap();
    assert_eq!(blocks::<HmonBlock>(&c)[0].connect.as_deref(), Some("127.0.0.1:4512"));
    assert_eq!(blocks::<SmonBlock>(&c)[0].connect.as_deref(), Some("box.lan:7399"));
    assert_eq!(blocks::<SysinfoBlock>(&c)[0].connect.as_deref(), Some("[::1]:7461"));
    assert_eq!(blocks::<SysinfoBlock>(&c)[1].connect.as_deref(), Some("[::1]:9"));
    for (bad, why) in [("nohost:", "the port"), ("127.0.0.1:99999", "the port"), ("::1", "brackets")] {
        let text = format!("[[smon]]\nname = \"s\"\n\nconnect = \"{bad}\"\n");
        let e = FleetConfig::parse("f.toml", &text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (4, "connect"), "{e}");
        assert!(e.message.contains(why), "{e}");
    }
}

#[test]
fn an_unknown_key_names_file_line_and_key() {
    let text = "[[smon]]\nname = \"a\"\nconect = \"x:1\"\n";
    let e = FleetConfig::parse("f.toml", text).unwrap_err();
    assert_eq!((e.file.as_str(), e.line, e.key.as_str()), ("f.toml", 3, "conect"), "{e}");
    assert!(e.to_string().starts_with("f.toml:3: conect: "), "{e}");
}

#[test]
fn sysinfo_reports_are_a_list_at_every_or_a_table_of_periods() {
    let list =
        "[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\nevery = \"2s\"\nreports = [\"ps\", \"kstat\"]\n";
    let c = FleetConfig::parse("f.toml", list).unwrap();
    let t = blocks::<SysinfoBlock>(&c)[0];
    assert_eq!(t.timeout, Duration::from_secs(5));
    let periods = t.reports.as_ref().unwrap().periods(t.every);
    assert_eq!(periods, [("ps", Duration::from_secs(2)), ("kstat", Duration::from_secs(2))]);
    let table = "[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\ntimeout = \"3s\"\n\
                 reports = { ps = \"1s\", memstat = \"10s\", sched_latency = \"250ms\" }\n";
    let c = FleetConfig::parse("f.toml", table).unwrap();
    let t = blocks::<SysinfoBlock>(&c)[0];
    assert_eq!(t.timeout, Duration::from_secs(3));
    assert_eq!(
        t.reports.as_ref().unwrap().periods(t.every),
        [
            ("memstat", Duration::from_secs(10)),
            ("ps", Duration::from_secs(1)),
            ("sched_latency", Duration::from_millis(250))
        ]
    );
    let cases = [
        ("reports = { ps = \"soon\" }", 4, "reports", "bad duration \"soon\""),
        ("reports = { ps = \"0s\" }", 4, "reports", "above zero"),
        ("reports = { ps = 5 }", 4, "reports", "string"),
        ("reports = \"ps\"", 4, "reports", "a list of reports, or a table"),
        ("reports = { ps = \"1s\", weather = \"1s\" }", 4, "reports", "unknown report \"weather\""),
        ("timeout = \"0s\"", 4, "timeout", "above zero"),
    ];
    for (line, at, key, message) in cases {
        let text = format!("[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\n{line}\n");
        let e = FleetConfig::parse("f.toml", &text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (at, key), "{line}: {e}");
        assert!(e.message.contains(message), "{line}: {e}");
        assert!(e.to_string().starts_with(&format!("f.toml:{at}: {key}: ")), "{e}");
    }
}

#[test]
fn a_bad_duration_names_its_key() {
    let text = "[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\nevery = \"soon\"\n";
    let e = FleetConfig::parse("f.toml", text).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (4, "every"), "{e}");
}

#[test]
fn duplicate_names_and_missing_sources_are_rejected_at_their_line() {
    let text = "[[smon]]\nname = \"a\"\nfile = \"/x\"\n[[sysinfo]]\nname = \"a\"\nconnect = \"x:1\"\n";
    let e = FleetConfig::parse("f.toml", text).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (5, "name"), "{e}");
    let text = "[[meter161]]\nname = \"m\"\n";
    let e = FleetConfig::parse("f.toml", text).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (2, "dir"), "{e}");
}
