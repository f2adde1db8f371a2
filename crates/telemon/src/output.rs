//! What every subcommand shares: exit codes, errors, JSON lines, duration parsing and table helpers.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Everything went well.
pub const EXIT_OK: u8 = 0;
/// The peer or the protocol failed (connection refused, bad frame, error reply, ...).
pub const EXIT_PEER: u8 = 1;
/// The command line was wrong (clap exits with 2 itself for parse errors).
pub const EXIT_USAGE: u8 = 2;

/// A subcommand failure, mapped to an exit code by [`CliError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Wrong arguments that clap could not catch (e.g. two options that exclude each other at run time).
    #[error("usage: {0}")]
    Usage(String),
    /// A config that cannot be used (exit code 2, like a usage error): `FILE:LINE: KEY: why` of the
    /// config file, the web config, a file either names, or a flag that stands for a config key.
    #[error("bad config: {0}")]
    Config(#[from] telemon::http::check::BadConfig),
    /// The peer, the protocol or the input failed.
    #[error("{0}")]
    Peer(String),
    /// Writing our own output failed; a closed stdout (`telemon ... | head`) is not an error.
    #[error("output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// Wraps any displayable protocol or I/O error as a peer error.
    pub fn peer(e: impl std::fmt::Display) -> Self {
        CliError::Peer(e.to_string())
    }

    /// Whether stdout's reader went away (`telemon ... | head`): a normal end, exit 0 and no message.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            _ if self.is_broken_pipe() => ExitCode::from(EXIT_OK),
            CliError::Usage(_) | CliError::Config(_) => ExitCode::from(EXIT_USAGE),
            CliError::Peer(_) | CliError::Output(_) => ExitCode::from(EXIT_PEER),
        }
    }
}

impl From<telemon_fleet::config::ConfigError> for CliError {
    fn from(e: telemon_fleet::config::ConfigError) -> Self {
        CliError::Config(e.into())
    }
}

/// The result of a subcommand.
pub type CliResult = Result<(), CliError>;

/// The message of a peer's error; when the peer spoke another protocol (`first`: the bytes it began with, which
/// the error shows), also what those bytes look like, when telemon knows: `not an HMON peer: it began with
/// "\xff\xff...", which looks like an smon stream`.
pub fn peer_message(error: &impl std::fmt::Display, first: Option<&[u8]>) -> String {
    match first.and_then(looks_like) {
        Some(what) => format!("{error}, which looks like {what}"),
        None => error.to_string(),
    }
}

/// What `first`, the first bytes a peer sent, look like: one of the protocols telemon speaks (each crate says
/// whether bytes start its own), HTTP or TLS. `None` when nothing fits.
pub fn looks_like(first: &[u8]) -> Option<&'static str> {
    // A request line: a method, a blank, then a target (`HEAD nsec` is a meter161 line, `HEAD /` HTTP).
    const METHODS: [&str; 9] =
        ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE"];
    let request = METHODS.iter().any(|m| {
        first.strip_prefix(m.as_bytes()).is_some_and(|rest| matches!(rest, [b' ', b'/' | b'*' | b'h', ..]))
    });
    if first.starts_with(b"HTTP/") || request {
        return Some("HTTP");
    }
    // A TLS record: a handshake or an alert, version 3.x.
    if matches!(first, [0x15 | 0x16, 0x03, ..]) {
        return Some("TLS");
    }
    // The protocols' own: each component asks its crate.
    telemon_fleet::protocol::Protocols::built_in()
        .iter()
        .find(|c| c.sniff(first) == Some(true))
        .map(|c| c.peer())
}

/// Writes `value` as one JSON line on stdout and flushes, so that pipes see each line at once.
pub fn print_json_line(value: &impl serde::Serialize) -> CliResult {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Rows for stdout, written in batches: a burst of rows that arrived together costs one write, and a live view
/// still shows every row as soon as the source has nothing more ready ([`Rows::next`] flushes before waiting).
#[derive(Debug, Default)]
pub struct Rows {
    buf: Vec<u8>,
}

impl Rows {
    /// Flush at least this often within a long burst, so memory stays small and the pipe keeps moving.
    const FLUSH_AT: usize = 64 * 1024;

    /// The buffer to format a row into (end it with `\n`); [`Rows::row_done`] flushes a full buffer.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Flushes when the buffer has grown past its batch size.
    pub fn row_done(&mut self) -> CliResult {
        if self.buf.len() >= Self::FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Adds one line of text.
    pub fn line(&mut self, line: impl std::fmt::Display) -> CliResult {
        writeln!(self.buf, "{line}")?;
        self.row_done()
    }

    /// Writes what is buffered to stdout.
    pub fn flush(&mut self) -> CliResult {
        if !self.buf.is_empty() {
            let mut out = std::io::stdout().lock();
            out.write_all(&self.buf)?;
            out.flush()?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The stream's next item: at once if one is ready, else after flushing the rows (nothing shown waits).
    pub async fn next<S: futures::Stream + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<Option<S::Item>, CliError> {
        use futures::{FutureExt, StreamExt};
        if let Some(item) = stream.next().now_or_never() {
            return Ok(item);
        }
        self.flush()?;
        Ok(stream.next().await)
    }
}

/// Writes one line of text on stdout and flushes.
pub fn print_line(line: impl std::fmt::Display) -> CliResult {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Parses a duration for the command line: `250ms`, `1s`, `2m`, or a bare number of seconds (`1.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// Formats a byte count for people: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} {}", UNITS[0])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The output options every subcommand shares (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OutputArgs {
    /// One JSON object per line instead of the human view.
    #[arg(long, global = true)]
    pub json: bool,
    /// Stop after N samples (messages, updates or reports: what the subcommand prints).
    #[arg(long, global = true, value_name = "N")]
    pub count: Option<u64>,
}

impl OutputArgs {
    /// A [`Countdown`] for `--count`.
    pub fn countdown(&self) -> Countdown {
        Countdown::new(self.count)
    }
}

/// Counts samples for `--count N`: `None` means forever.
#[derive(Debug, Clone, Copy)]
pub struct Countdown(Option<u64>);

impl Countdown {
    /// A countdown from `count` (`None` never finishes).
    pub fn new(count: Option<u64>) -> Self {
        Countdown(count)
    }

    /// Records one item; returns `true` when the count is reached and the command should stop.
    pub fn tick(&mut self) -> bool {
        match &mut self.0 {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        }
    }

    /// Whether the count was zero to begin with (nothing at all to do).
    pub fn is_done(&self) -> bool {
        self.0 == Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_of_each_protocol_look_like_it() {
        let cases: [(&[u8], Option<&str>); 10] = [
            (b"HELLO 2\r\nHEAD nsec", Some("a System/161 meter socket")),
            (b"\0\0\0\x1bHMONSupportedProtocols=2", Some("an HMON peer (a Dyalog APL interpreter)")),
            (&[0x00, 0x01, 0x00, 0x01, 0x00, 0x00], Some("a Mono counters agent")),
            (&[0xFF; 18], Some("an smon stream")),
            (&[0x01, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0], Some("the rvOS sysinfo host transport")),
            (b"HTTP/1.1 400 Bad Request\r\n", Some("HTTP")),
            (b"HEAD / HTTP/1.1\r\n", Some("HTTP")),
            (b"HEAD nsec kinsns\r\n", Some("a System/161 meter socket")),
            (&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32], Some("TLS")),
            (b"SSH-2.0-OpenSSH_9.6\r\n", None),
        ];
        for (first, what) in cases {
            assert_eq!(looks_like(first), what, "{:?}", first.escape_ascii().to_string());
        }
        let e = "not an HMON peer: it began with \"HTTP/1.1\"";
        assert_eq!(peer_message(&e, Some(b"HTTP/1.1")), format!("{e}, which looks like HTTP"));
        assert_eq!(peer_message(&e, Some(b"SSH-2.0")), e);
        assert_eq!(peer_message(&"refused", None), "refused");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn bytes_for_people() {
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
    }

    #[test]
    fn rows_batch_until_flushed() {
        let mut rows = Rows::default();
        rows.line("a").unwrap();
        writeln!(rows.buffer(), "{:<3}|", 7).unwrap();
        rows.row_done().unwrap();
        assert_eq!(rows.buf, b"a\n7  |\n");
    }

    #[test]
    fn countdown() {
        let mut c = Countdown::new(Some(2));
        assert!(!c.tick());
        assert!(c.tick());
        let mut forever = Countdown::new(None);
        assert!(!forever.tick());
        assert!(Countdown::new(Some(0)).is_done());
    }
}
