//! The bodies of telemon's own fuzz targets (`fuzz/fuzz_targets/telemon_*.rs`), also replayed over
//! their seed corpora by the unit tests (`fuzz/tests.rs`) on stable. Built only under `cfg(fuzzing)`
//! and in tests.

use std::path::Path;

use crate::http::{WebConfig, ALLOWED_HEADERS};

/// Where the fuzzed web config file claims to be: a directory that does not exist, so that the
/// relative certificate names in it resolve to nothing.
const FUZZ_PATH: &str = "/nonexistent/telemon-fuzz/web.yml";

/// The longest error [`web_config`] accepts beyond the file's name: `:LINE: KEY: why`, the key and
/// the reason each cut by the reader (160 and 800 bytes, plus the `… (N bytes)` marks).
pub const MAX_WEB_CONFIG_ERROR: usize = 1100;

/// `telemon_web_config`: the bytes (as UTF-8, lossily) as a web configuration file, whole and cut at
/// a point the data picks (a half-written file), read to a config or a typed error, never a panic;
/// every error reads `FILE:LINE: ...` with a line of the file and stays under
/// [`MAX_WEB_CONFIG_ERROR`] bytes beyond the file name; a config has only the allowed headers and
/// bcrypt-looking hashes; and a second read gives the same answer.
pub fn web_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let first = web_config_text(&text);
    assert_eq!(web_config_text(&text), first, "a second read of the same text answered otherwise");
    if let Some(&pick) = data.first() {
        let mut cut = usize::from(pick) * text.len() / 256;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        web_config_text(&text[..cut]);
    }
}

/// Reads `text` as a web configuration file and checks what came back as [`web_config`] does; the
/// answer as text (the config's `Debug` or the error), for comparisons.
pub fn web_config_text(text: &str) -> String {
    let path = Path::new(FUZZ_PATH);
    match WebConfig::parse(path, text) {
        Ok(config) => {
            for (name, _) in &config.headers {
                assert!(
                    ALLOWED_HEADERS.iter().any(|(h, _)| h.eq_ignore_ascii_case(name.as_str())),
                    "header {name} is not one of the allowed"
                );
            }
            let names = config.user_names();
            assert_eq!(names.len(), config.basic_auth_users().len());
            for (user, hash) in config.basic_auth_users() {
                assert!(names.contains(&user.as_str()));
                assert!(hash.starts_with("$2"), "{user}'s hash {hash:?} is not bcrypt");
            }
            if let Some(tls) = &config.tls {
                assert!(tls.min_version <= tls.max_version);
                assert!(tls.client_ca.is_none() || tls.client_auth != crate::http::ClientAuth::NoClientCert);
            }
            format!("{config:?}")
        }
        Err(e) => {
            let e = e.to_string();
            let rest = e.strip_prefix(FUZZ_PATH).and_then(|r| r.strip_prefix(':'));
            let rest = rest.unwrap_or_else(|| panic!("the error does not start with the file's name: {e:?}"));
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let line: usize = rest[..digits].parse().unwrap_or_else(|_| panic!("no line number in {e:?}"));
            // YAML's line breaks: LF, CRLF and a lone CR.
            let lines = text.replace("\r\n", "\n").split(['\n', '\r']).count() + 1;
            assert!((1..=lines).contains(&line), "line {line} of a text of {lines} lines: {e:?}");
            assert!(rest[digits..].starts_with(": "), "no `: KEY` after the line: {e:?}");
            assert!(
                rest.len() <= MAX_WEB_CONFIG_ERROR,
                "an error of {} bytes: {}",
                rest.len(),
                e.chars().take(300).collect::<String>()
            );
            e
        }
    }
}

/// `telemon_probe_allow`: a `probe_allow` entry, and a `/probe` target. An entry that parses prints as
/// one that parses back to it; a target passes `check_host_port` or says why. Never a panic.
pub fn probe_allow(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(rule) = crate::http::probe_allow::ProbeAllow::parse(&text) {
        let again =
            crate::http::probe_allow::ProbeAllow::parse(&rule.to_string()).expect("a printed entry parses");
        assert_eq!(again, rule, "{text:?} printed as {rule}");
    }
    if let Err(why) = telemon_fleet::config::check_host_port(&text) {
        assert!(why.contains("HOST:PORT"), "{why}");
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod web_config_props;
