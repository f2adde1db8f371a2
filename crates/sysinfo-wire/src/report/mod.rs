//! Typed reports: a parser and a formatter for the text of every sysinfo command.
//!
//! Formatters reproduce the kernel's `writeln!` formats byte for byte (the fake server renders with them);
//! parsers accept that text and keep every line they do not recognise in `unknown`, with its line number,
//! instead of failing. Parsing never allocates more than the input's size in strings.

#[allow(unused_imports)]
use crate::prelude::*;
mod channels;
mod histogram;
mod kstat;
mod memstat;
mod ps;
mod short;
mod trace;
mod watchdog;

use core::fmt::Write as _;

pub use channels::{ChannelRow, Channels};
pub use histogram::{
    Histogram, HistogramBucket, HIST_BAR_WIDTH, HIST_BUCKETS, IPC_LATENCY_TITLE, SCHED_LATENCY_TITLE,
};
pub use kstat::{Counter, Kstat, KSTAT_COUNTERS};
pub use memstat::{HeapSummary, HeapTag, Memstat, ProcessMemory, HEAP_TAGS};
pub use ps::{BlockedOn, CpuShare, ProcState, Ps, PsRow};
pub use short::{ProcessName, ShortStr, TraceLabel};
pub use trace::{Trace, TraceEntry, NO_TRACE_ENTRIES, TRACE_LABEL_MAX};
pub use watchdog::{CriticalProcess, Heartbeat, Watchdog, HEARTBEAT_SLOTS};

use crate::message::{SysinfoCommand, UNKNOWN_COMMAND_TEXT};

/// A line a parser did not recognise, kept as it was.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownLine {
    /// 1-based line number in the reply.
    pub line: usize,
    /// The line, without its `\n`.
    pub text: String,
}

impl UnknownLine {
    pub(crate) fn new(line: usize, text: &str) -> Self {
        UnknownLine { line, text: text.to_owned() }
    }
}

/// `TraceClear`'s reply: `"ok\n"`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ack {
    /// Whether the `ok` line was there.
    pub ok: bool,
    /// Lines that were not `ok`.
    pub unknown: Vec<UnknownLine>,
}

impl Ack {
    /// Parses `"ok\n"`.
    pub fn parse(text: &str) -> Self {
        let mut ack = Ack::default();
        for (i, line) in lines(text).enumerate() {
            if line == "ok" && !ack.ok {
                ack.ok = true;
            } else {
                ack.unknown.push(UnknownLine::new(i + 1, line));
            }
        }
        ack
    }

    /// Formats as the kernel does.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.ok {
            out.push_str("ok\n");
        }
        push_unknown(&mut out, &self.unknown);
        out
    }
}

/// Any command's parsed reply.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", serde(tag = "report", rename_all = "snake_case"))]
pub enum Report {
    /// `Ps`.
    Ps(Ps),
    /// `Memstat`.
    Memstat(Memstat),
    /// `Trace`.
    Trace(Trace),
    /// `TraceClear`.
    TraceClear(Ack),
    /// `Kstat`.
    Kstat(Kstat),
    /// `Channels`.
    Channels(Channels),
    /// `SchedLatency`.
    SchedLatency(Histogram),
    /// `IpcLatency`.
    IpcLatency(Histogram),
    /// `Watchdog`.
    Watchdog(Watchdog),
    /// The service did not understand the request: the text was exactly `"Unknown command\n"`.
    UnknownCommand,
}

impl Report {
    /// Parses the reply to `command`.
    pub fn parse(command: SysinfoCommand, text: &str) -> Report {
        if text == UNKNOWN_COMMAND_TEXT {
            return Report::UnknownCommand;
        }
        match command {
            SysinfoCommand::Ps => Report::Ps(Ps::parse(text)),
            SysinfoCommand::Memstat => Report::Memstat(Memstat::parse(text)),
            SysinfoCommand::Trace => Report::Trace(Trace::parse(text)),
            SysinfoCommand::TraceClear => Report::TraceClear(Ack::parse(text)),
            SysinfoCommand::Kstat => Report::Kstat(Kstat::parse(text)),
            SysinfoCommand::Channels => Report::Channels(Channels::parse(text)),
            SysinfoCommand::SchedLatency => Report::SchedLatency(Histogram::parse(text)),
            SysinfoCommand::IpcLatency => Report::IpcLatency(Histogram::parse(text)),
            SysinfoCommand::Watchdog => Report::Watchdog(Watchdog::parse(text)),
        }
    }

    /// Formats the report as the kernel would.
    pub fn render(&self) -> String {
        match self {
            Report::Ps(r) => r.render(),
            Report::Memstat(r) => r.render(),
            Report::Trace(r) => r.render(),
            Report::TraceClear(r) => r.render(),
            Report::Kstat(r) => r.render(),
            Report::Channels(r) => r.render(),
            Report::SchedLatency(r) | Report::IpcLatency(r) => r.render(),
            Report::Watchdog(r) => r.render(),
            Report::UnknownCommand => UNKNOWN_COMMAND_TEXT.to_owned(),
        }
    }

    /// Lines no parser recognised.
    pub fn unknown_lines(&self) -> &[UnknownLine] {
        match self {
            Report::Ps(r) => &r.unknown,
            Report::Memstat(r) => &r.unknown,
            Report::Trace(r) => &r.unknown,
            Report::TraceClear(r) => &r.unknown,
            Report::Kstat(r) => &r.unknown,
            Report::Channels(r) => &r.unknown,
            Report::SchedLatency(r) | Report::IpcLatency(r) => &r.unknown,
            Report::Watchdog(r) => &r.unknown,
            Report::UnknownCommand => &[],
        }
    }
}

/// `name` as the entry of `known` it equals (borrowed, nothing allocated), or owned when none does.
pub(crate) fn known(known: &[&'static str], name: &str) -> Cow<'static, str> {
    match known.iter().find(|k| **k == name) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(name.to_owned()),
    }
}

/// The lines of a reply: split at `\n`, with any trailing `\r`s dropped (saved reports may have CRLF endings;
/// the kernel never prints `\r`).
pub(crate) fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_terminator('\n').map(|line| line.trim_end_matches('\r'))
}

/// Appends unknown lines back (for formatters, so that parse-then-render keeps everything).
pub(crate) fn push_unknown(out: &mut String, unknown: &[UnknownLine]) {
    for u in unknown {
        let _ = writeln!(out, "{}", u.text);
    }
}

/// A cursor over one ASCII-structured line. Every split happens at an ASCII byte, so slicing is safe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    pub(crate) s: &'a str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        Cursor { s }
    }

    /// Skips spaces.
    #[inline]
    pub(crate) fn spaces(&mut self) -> &mut Self {
        let n = self.s.bytes().take_while(|&b| b == b' ').count();
        self.s = &self.s[n..];
        self
    }

    /// Takes `lit` or fails.
    #[inline]
    pub(crate) fn lit(&mut self, lit: &str) -> Option<()> {
        self.s = self.s.strip_prefix(lit)?;
        Some(())
    }

    /// Takes a run of ASCII digits as a `u64` (at least one digit, no overflow).
    #[inline]
    pub(crate) fn num(&mut self) -> Option<u64> {
        let bytes = self.s.as_bytes();
        let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let n = if digits <= 19 {
            // Nineteen digits always fit in a u64: no overflow checks on the common path.
            bytes[..digits].iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'))
        } else {
            bytes[..digits]
                .iter()
                .try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))?
        };
        self.s = &self.s[digits..];
        Some(n)
    }

    /// Takes everything up to the next space (or the end).
    #[inline]
    pub(crate) fn word(&mut self) -> &'a str {
        // Words here are a few bytes long: a plain scan beats setting up memchr.
        let end = self.s.bytes().position(|b| b == b' ').unwrap_or(self.s.len());
        let (w, rest) = self.s.split_at(end);
        self.s = rest;
        w
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.s.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_own_counter_tag_and_slot_names_are_borrowed_and_others_owned() {
        let k = kstat::Kstat::parse("  SCHED_SWITCHES           12\n  NEW_COUNTER              3\n");
        assert!(matches!(k.counters[0].name, Cow::Borrowed("SCHED_SWITCHES")), "{k:?}");
        assert!(matches!(&k.counters[1].name, Cow::Owned(n) if n == "NEW_COUNTER"), "{k:?}");
        let text = "  IPC_       12K    16K       3\n  ZZZZ        1K     1K       1\n";
        let m = memstat::Memstat::parse(text);
        assert!(matches!(m.tags[0].tag, Cow::Borrowed("IPC_")), "{m:?}");
        assert!(matches!(&m.tags[1].tag, Cow::Owned(t) if t == "ZZZZ"), "{m:?}");
        let beat = |name: &str| watchdog::Heartbeat { name: name.to_owned().into(), ago_ms: 5 };
        let w = watchdog::Watchdog {
            enabled: true,
            timeout_secs: Some(10),
            timeout_ticks: Some(100),
            kernel_tasks: vec![beat("timer"), beat("extra")],
            critical_processes: vec![watchdog::CriticalProcess { pid: 3, name: "shell".into(), ago_ms: 7 }],
            ..Default::default()
        };
        let parsed = watchdog::Watchdog::parse(&w.render());
        assert_eq!(parsed, w);
        assert!(matches!(parsed.kernel_tasks[0].name, Cow::Borrowed("timer")), "{parsed:?}");
        assert!(matches!(&parsed.kernel_tasks[1].name, Cow::Owned(n) if n == "extra"), "{parsed:?}");
    }

    #[test]
    fn unknown_command_is_its_own_report() {
        for c in SysinfoCommand::ALL {
            assert_eq!(Report::parse(c, "Unknown command\n"), Report::UnknownCommand);
        }
        assert_eq!(Report::UnknownCommand.render(), "Unknown command\n");
    }

    #[test]
    fn cursor_numbers_do_not_overflow() {
        assert_eq!(Cursor::new("18446744073709551615x").num(), Some(u64::MAX));
        assert_eq!(Cursor::new("18446744073709551616").num(), None);
        assert_eq!(Cursor::new("x").num(), None);
    }
}
