//! `Trace`: the kernel trace ring, oldest first, from `kernel/src/trace.rs` `trace_read()`.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt::Write as _;

use super::{TraceLabel, UnknownLine};

/// The whole reply for an empty ring.
pub const NO_TRACE_ENTRIES: &str = "(no trace entries)\n";

/// The kernel keeps at most this many label bytes per entry.
pub const TRACE_LABEL_MAX: usize = 32;

/// One `{timestamp}: pid {pid} hit {label}` line.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// Raw `rdtime` (10 MHz ticks).
    pub timestamp: u64,
    /// The pid that recorded it (0 for the kernel).
    pub pid: u64,
    /// The label (at most 32 bytes from the kernel, kept inline); `???` when the kernel found invalid UTF-8.
    pub label: TraceLabel,
}

/// The `Trace` report.
///
/// The kernel's text is ambiguous for some labels: a label may hold any 1..32 bytes, `\r` and `\n` included.
/// A label's trailing `\r` is kept (lines are split on `\n` alone), but a `\n` inside a label splits its entry
/// in two lines, the second of which is kept as an [`UnknownLine`] in its place: [`Trace::render`] prints every
/// unknown line back where it was, so the text prints back exactly as the kernel wrote it, and in JSON each
/// unknown line carries its line number.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    /// The entries, oldest first (none for `(no trace entries)`).
    pub entries: Vec<TraceEntry>,
    /// Lines that matched nothing.
    pub unknown: Vec<UnknownLine>,
}

/// Parses `{u64}: pid {u64} hit {label}` by hand: this runs for every line of a 16384-entry ring.
fn parse_entry(line: &str) -> Option<TraceEntry> {
    let b = line.as_bytes();
    let mut i = 0;
    let num = |i: &mut usize| -> Option<u64> {
        let start = *i;
        let mut n: u64 = 0;
        while let Some(d) = b.get(*i).filter(|d| d.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            *i += 1;
        }
        (*i > start).then_some(n)
    };
    let timestamp = num(&mut i)?;
    if !b[i..].starts_with(b": pid ") {
        return None;
    }
    i += 6;
    let pid = num(&mut i)?;
    if !b[i..].starts_with(b" hit ") {
        return None;
    }
    Some(TraceEntry { timestamp, pid, label: TraceLabel::new(&line[i + 5..]) })
}

impl Trace {
    /// Parses Trace text.
    pub fn parse(text: &str) -> Self {
        let mut t = Trace::default();
        if text == NO_TRACE_ENTRIES {
            return t;
        }
        // Kernel lines are 30 to 70 bytes; reserving up front avoids regrowing a 16384-entry vector.
        t.entries.reserve(text.len() / 30);
        // Split on `\n` alone: a `\r` at the end of a line is the end of a label.
        for (i, line) in text.split_terminator('\n').enumerate() {
            match parse_entry(line) {
                Some(e) => t.entries.push(e),
                None => t.unknown.push(UnknownLine::new(i + 1, line)),
            }
        }
        t
    }

    /// Formats as the kernel does.
    pub fn render(&self) -> String {
        if self.entries.is_empty() && self.unknown.is_empty() {
            return NO_TRACE_ENTRIES.to_owned();
        }
        let mut out = String::with_capacity(self.entries.len() * 40);
        // Entries fill the lines that no unknown line holds, in order.
        let mut unknown = self.unknown.iter().peekable();
        let mut entries = self.entries.iter();
        let mut line = 1;
        loop {
            if let Some(u) = unknown.next_if(|u| u.line <= line) {
                let _ = writeln!(out, "{}", u.text);
            } else if let Some(e) = entries.next() {
                let _ = writeln!(out, "{}: pid {} hit {}", e.timestamp, e.pid, e.label);
            } else {
                break;
            }
            line += 1;
        }
        for u in unknown {
            let _ = writeln!(out, "{}", u.text);
        }
        out
    }
}
