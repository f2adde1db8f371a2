//! `Channels`: per-channel statistics, from `kernel/src/ipc/mod.rs` `format_channel_stats()`.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt::Write as _;

use super::{push_unknown, Cursor, UnknownLine};

const HEADER: &str = "    CH   EP_A   EP_B    QA    QB  RC_A  RC_B   MSGS_A  BYTES_A   MSGS_B  BYTES_B";
const DASHES: &str = "  ----  -----  -----  ----  ----  ----  ----  -------  -------  -------  -------";
const CLOSED: &str = "  (closed)";

/// One channel slot.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelRow {
    /// The slot index.
    pub channel: u64,
    /// Endpoint A (`channel * 2`).
    pub ep_a: u64,
    /// Endpoint B (`channel * 2 + 1`).
    pub ep_b: u64,
    /// Messages queued for side A.
    pub queue_a: u64,
    /// Messages queued for side B.
    pub queue_b: u64,
    /// Handles open on side A.
    pub refs_a: u64,
    /// Handles open on side B.
    pub refs_b: u64,
    /// Messages sent by side A.
    pub msgs_a: u64,
    /// Bytes sent by side A.
    pub bytes_a: u64,
    /// Messages sent by side B.
    pub msgs_b: u64,
    /// Bytes sent by side B.
    pub bytes_b: u64,
    /// Whether the row ended in `(closed)`: the channel is inactive but a handle is still open.
    pub closed: bool,
}

impl ChannelRow {
    /// A row from its eleven numeric columns in the header's order (`CH EP_A EP_B QA QB RC_A RC_B
    /// MSGS_A BYTES_A MSGS_B BYTES_B`) and whether it ended in `(closed)`.
    pub fn from_columns(n: [u64; 11], closed: bool) -> Self {
        ChannelRow {
            channel: n[0],
            ep_a: n[1],
            ep_b: n[2],
            queue_a: n[3],
            queue_b: n[4],
            refs_a: n[5],
            refs_b: n[6],
            msgs_a: n[7],
            bytes_a: n[8],
            msgs_b: n[9],
            bytes_b: n[10],
            closed,
        }
    }
}

fn parse_row(line: &str) -> Option<ChannelRow> {
    let (body, closed) = match line.strip_suffix(CLOSED) {
        Some(body) => (body, true),
        None => (line, false),
    };
    let mut c = Cursor::new(body);
    let mut n = [0u64; 11];
    for v in &mut n {
        c.lit("  ")?;
        *v = c.spaces().num()?;
    }
    c.is_empty().then_some(ChannelRow::from_columns(n, closed))
}

/// The `Channels` report.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Channels {
    /// The rows, in slot order.
    pub channels: Vec<ChannelRow>,
    /// Lines that matched nothing.
    pub unknown: Vec<UnknownLine>,
}

impl Channels {
    /// Parses Channels text.
    pub fn parse(text: &str) -> Self {
        let mut ch = Channels::default();
        // One allocation: a row is at least as long as the dashes under the header, and its newline.
        ch.channels.reserve(text.len() / (DASHES.len() + 1));
        for (i, line) in super::lines(text).enumerate() {
            if line == HEADER || line == DASHES {
                continue;
            }
            match parse_row(line) {
                Some(row) => ch.channels.push(row),
                None => ch.unknown.push(UnknownLine::new(i + 1, line)),
            }
        }
        ch
    }

    /// Formats as the kernel does.
    pub fn render(&self) -> String {
        let mut out = format!("{HEADER}\n{DASHES}\n");
        for r in &self.channels {
            let _ = writeln!(
                out,
                "  {:>4}  {:>5}  {:>5}  {:>4}  {:>4}  {:>4}  {:>4}  {:>7}  {:>7}  {:>7}  {:>7}{}",
                r.channel,
                r.ep_a,
                r.ep_b,
                r.queue_a,
                r.queue_b,
                r.refs_a,
                r.refs_b,
                r.msgs_a,
                r.bytes_a,
                r.msgs_b,
                r.bytes_b,
                if r.closed { CLOSED } else { "" }
            );
        }
        push_unknown(&mut out, &self.unknown);
        out
    }
}
