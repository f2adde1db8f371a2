//! `Kstat`: the kernel's 18 monotonic counters, from `kernel/src/kstat.rs` `format_counters()`.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt::Write as _;

use super::{push_unknown, Cursor, UnknownLine};

/// The counters, in the order the kernel prints them.
pub const KSTAT_COUNTERS: [&str; 18] = [
    "SCHED_SWITCHES",
    "SCHED_PREEMPTS",
    "SCHED_YIELDS",
    "IPC_SENDS",
    "IPC_RECVS",
    "IPC_SEND_BLOCKS",
    "IPC_RECV_BLOCKS",
    "CHANNELS_CREATED",
    "CHANNELS_CLOSED",
    "PAGES_ALLOCATED",
    "PAGES_FREED",
    "IRQ_TIMER",
    "IRQ_UART",
    "IRQ_VIRTIO_KBD",
    "IRQ_VIRTIO_NET",
    "IRQ_VIRTIO_GPU",
    "IRQ_VIRTIO_BLK",
    "IRQ_PLIC_OTHER",
];

/// One `  {:<24} {}` line.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The counter's name, e.g. `SCHED_SWITCHES`: borrowed from [`KSTAT_COUNTERS`] when it is one of them
    /// (nothing is allocated for the kernel's own counters), owned when not.
    pub name: Cow<'static, str>,
    /// Its value.
    pub value: u64,
}

/// The `Kstat` report.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Kstat {
    /// The counters in the order printed.
    pub counters: Vec<Counter>,
    /// Lines that matched nothing.
    pub unknown: Vec<UnknownLine>,
}

fn parse_counter(line: &str) -> Option<Counter> {
    let mut c = Cursor::new(line);
    c.lit("  ")?;
    let name = c.word();
    let valid =
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return None;
    }
    let value = c.spaces().num()?;
    c.is_empty().then(|| Counter { name: super::known(&KSTAT_COUNTERS, name), value })
}

impl Kstat {
    /// Parses Kstat text.
    pub fn parse(text: &str) -> Self {
        let mut k = Kstat::default();
        // One allocation for the kernel's counters.
        k.counters.reserve_exact(KSTAT_COUNTERS.len());
        for (i, line) in super::lines(text).enumerate() {
            match parse_counter(line) {
                Some(c) => k.counters.push(c),
                None => k.unknown.push(UnknownLine::new(i + 1, line)),
            }
        }
        k
    }

    /// A counter's value by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters.iter().find(|c| c.name == name).map(|c| c.value)
    }

    /// The kernel's 18 counters with these values, in order.
    pub fn from_values(values: &[u64; 18]) -> Self {
        let counters = KSTAT_COUNTERS
            .iter()
            .zip(values)
            .map(|(n, &v)| Counter { name: Cow::Borrowed(*n), value: v })
            .collect();
        Kstat { counters, unknown: Vec::new() }
    }

    /// Formats as the kernel does.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.counters {
            let _ = writeln!(out, "  {:<24} {}", c.name, c.value);
        }
        push_unknown(&mut out, &self.unknown);
        out
    }
}
