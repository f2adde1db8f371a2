//! `SchedLatency` / `IpcLatency`: log2 latency histograms, from `kernel/src/kstat.rs` `Log2Hist::format()`.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt::Write as _;

use super::{push_unknown, Cursor, UnknownLine};

/// The kernel's bucket count: bucket `i` holds values in `[2^i, 2^(i+1))` ticks (0 goes to bucket 0).
pub const HIST_BUCKETS: usize = 32;
/// The width of the `#` bar.
pub const HIST_BAR_WIDTH: usize = 30;
/// SchedLatency's title.
pub const SCHED_LATENCY_TITLE: &str = "Scheduler run-queue latency";
/// IpcLatency's title.
pub const IPC_LATENCY_TITLE: &str = "IPC delivery latency";
/// Ticks per microsecond at rvOS's 10 MHz timebase.
const TICKS_PER_US: u64 = 10;
const NO_DATA: &str = "  (no data)";

/// One printed bucket: `  {lo:>12} -> {hi:<12} {count:>8}  |{bar}|`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramBucket {
    /// The bucket's low bound in the unit (µs), rounded down.
    pub lo: u64,
    /// The bucket's high bound in the unit (µs), rounded down.
    pub hi: u64,
    /// Samples in the bucket.
    pub count: u64,
}

/// A latency histogram report.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Histogram {
    /// The title line, e.g. [`SCHED_LATENCY_TITLE`].
    pub title: String,
    /// The unit of the bounds (`us`), from the header; empty for `(no data)`.
    pub unit: String,
    /// Buckets from the first to the last non-zero one (zero buckets between included); empty for `(no data)`.
    pub buckets: Vec<HistogramBucket>,
    /// The `total:` line (`None` for `(no data)`).
    pub total: Option<u64>,
    /// Lines that matched nothing.
    pub unknown: Vec<UnknownLine>,
}

fn bucket_bounds(i: usize) -> (u64, u64) {
    let lo = (1u64 << i) / TICKS_PER_US;
    let hi = ((1u64 << (i + 1)) - 1) / TICKS_PER_US;
    (lo, hi)
}

fn parse_bucket(line: &str) -> Option<HistogramBucket> {
    let mut c = Cursor::new(line);
    let lo = c.spaces().num()?;
    c.lit(" -> ")?;
    let hi = c.num()?;
    let count = c.spaces().num()?;
    c.lit("  |")?;
    let bar = c.s.strip_suffix('|')?;
    bar.bytes().all(|b| b == b'#' || b == b' ').then_some(HistogramBucket { lo, hi, count })
}

impl Histogram {
    /// The report the kernel prints for these 32 bucket counts (in µs at 10 MHz).
    pub fn from_buckets(title: &str, counts: &[u64; HIST_BUCKETS]) -> Self {
        let mut h = Histogram { title: title.to_owned(), ..Histogram::default() };
        let first = counts.iter().position(|&c| c > 0);
        let last = counts.iter().rposition(|&c| c > 0);
        if let (Some(first), Some(last)) = (first, last) {
            h.unit = "us".to_owned();
            h.buckets = (first..=last)
                .map(|i| {
                    let (lo, hi) = bucket_bounds(i);
                    HistogramBucket { lo, hi, count: counts[i] }
                })
                .collect();
            h.total = Some(counts.iter().fold(0u64, |a, &c| a.wrapping_add(c)));
        }
        h
    }

    /// The bucket index a latency of `ticks` falls in.
    pub fn bucket_of(ticks: u64) -> usize {
        if ticks == 0 {
            0
        } else {
            ((63 - ticks.leading_zeros()) as usize).min(HIST_BUCKETS - 1)
        }
    }

    /// Parses histogram text.
    pub fn parse(text: &str) -> Self {
        let mut h = Histogram::default();
        for (i, line) in super::lines(text).enumerate() {
            let known = if i == 0 && line.starts_with("  ") {
                h.title = line[2..].to_owned();
                true
            } else if line == NO_DATA && h.buckets.is_empty() {
                true
            } else if let Some(total) = line.strip_prefix("  total: ") {
                let mut c = Cursor::new(total);
                match (c.num(), c.is_empty()) {
                    (Some(t), true) if h.total.is_none() => {
                        h.total = Some(t);
                        true
                    }
                    _ => false,
                }
            } else if line.ends_with("  distribution") && h.unit.is_empty() {
                let mut words = line.split_whitespace();
                match (words.next(), words.next(), words.next(), words.next()) {
                    (Some(unit), Some("count"), Some("distribution"), None) => {
                        h.unit = unit.to_owned();
                        true
                    }
                    // An empty unit (only from a rendered report that had no header) leaves it empty.
                    (Some("count"), Some("distribution"), None, None) => true,
                    _ => false,
                }
            } else {
                parse_bucket(line)
                    .map(|b| {
                        if h.buckets.capacity() == 0 {
                            // One allocation for the buckets the kernel can print.
                            h.buckets.reserve_exact(HIST_BUCKETS);
                        }
                        h.buckets.push(b)
                    })
                    .is_some()
            };
            if !known {
                h.unknown.push(UnknownLine::new(i + 1, line));
            }
        }
        h
    }

    /// Formats as the kernel does (bars scaled to the largest count).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "  {}", self.title);
        if self.buckets.is_empty() && self.unit.is_empty() {
            out.push_str(NO_DATA);
            out.push('\n');
        } else {
            let _ = writeln!(out, "  {:>12} {:>12}  {:>8}  distribution", self.unit, "", "count");
            let max = self.buckets.iter().map(|b| b.count).max().unwrap_or(0);
            for b in &self.buckets {
                let len = if max > 0 {
                    (u128::from(b.count) * HIST_BAR_WIDTH as u128 / u128::from(max)) as usize
                } else {
                    0
                };
                let _ = writeln!(
                    out,
                    "  {:>12} -> {:<12} {:>8}  |{}{}|",
                    b.lo,
                    b.hi,
                    b.count,
                    "#".repeat(len),
                    " ".repeat(HIST_BAR_WIDTH - len)
                );
            }
        }
        // The kernel prints a total exactly when there are buckets; a parsed report keeps what it had.
        if let Some(total) = self.total {
            let _ = writeln!(out, "  total: {total}");
        }
        push_unknown(&mut out, &self.unknown);
        out
    }
}
