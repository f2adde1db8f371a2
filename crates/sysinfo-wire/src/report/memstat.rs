//! `Memstat`: kernel heap tags and per-process memory, from `kernel/src/services/sysinfo.rs`
//! `format_memstat()` and `kernel/src/task/scheduler.rs` `process_mem_list()`.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt::Write as _;

use super::{push_unknown, Cursor, ProcessName, UnknownLine};

const TAG_HEADER: &str = "  Tag     Current    Peak  Allocs";
const TAG_DASHES: &str = "  ----  ---------  ------  ------";
const PROCESS_TITLE: &str = "Process memory:";
const PROCESS_HEADER: &str = "  PID  NAME              MEM";
const PROCESS_DASHES: &str = "  ---  ----------------  ------";

/// The heap tags the kernel uses (four ASCII bytes each).
pub const HEAP_TAGS: [&str; 8] = ["????", "IPC_", "SCHD", "PGTB", "INIT", "TRAC", "DBUG", "NETS"];

/// `Kernel heap: {}K total, {}K used ({}%), {}K free`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapSummary {
    /// Heap size in KiB (4096 on rvOS).
    pub total_kib: u64,
    /// KiB in use.
    pub used_kib: u64,
    /// `used * 100 / total`, as the kernel computes it from bytes.
    pub used_percent: u64,
    /// KiB free.
    pub free_kib: u64,
}

/// One heap tag row: `  {tag}  {:>7}K  {:>4}K  {:>6}`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapTag {
    /// The four-byte tag, e.g. `IPC_`: borrowed from [`HEAP_TAGS`] when it is one of them, owned when not.
    pub tag: Cow<'static, str>,
    /// KiB allocated now.
    pub current_kib: u64,
    /// Peak KiB.
    pub peak_kib: u64,
    /// Live allocations: the kernel counts one up on each allocation and down on each free (the column the
    /// kernel heads `allocs`).
    pub live_allocations: u64,
}

/// One process row: `  {:3}  {:<16}  {:>4}K` (Dead processes are not listed).
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessMemory {
    /// The pid.
    pub pid: u64,
    /// The name (inline: the kernel's names are at most 16 bytes).
    pub name: ProcessName,
    /// KiB owned.
    pub mem_kib: u64,
}

/// The `Memstat` report.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Memstat {
    /// The first line, when present.
    pub heap: Option<HeapSummary>,
    /// Heap tags with any activity.
    pub tags: Vec<HeapTag>,
    /// Live processes.
    pub processes: Vec<ProcessMemory>,
    /// Lines that matched nothing.
    pub unknown: Vec<UnknownLine>,
}

fn parse_heap(line: &str) -> Option<HeapSummary> {
    let mut c = Cursor::new(line);
    c.lit("Kernel heap: ")?;
    let total_kib = c.num()?;
    c.lit("K total, ")?;
    let used_kib = c.num()?;
    c.lit("K used (")?;
    let used_percent = c.num()?;
    c.lit("%), ")?;
    let free_kib = c.num()?;
    c.lit("K free")?;
    c.is_empty().then_some(HeapSummary { total_kib, used_kib, used_percent, free_kib })
}

fn parse_tag(line: &str) -> Option<HeapTag> {
    let rest = line.strip_prefix("  ")?;
    let tag = rest.get(..4)?;
    let mut c = Cursor::new(rest.get(4..)?);
    c.lit("  ")?;
    let current_kib = c.spaces().num()?;
    c.lit("K  ")?;
    let peak_kib = c.spaces().num()?;
    c.lit("K  ")?;
    let allocs = c.spaces().num()?;
    c.is_empty().then(|| HeapTag {
        tag: super::known(&HEAP_TAGS, tag),
        current_kib,
        peak_kib,
        live_allocations: allocs,
    })
}

/// The shortest process row with its newline: `  {:3}  {:<16}  {:>4}K`.
const PROCESS_ROW_LEN: usize = 2 + 3 + 2 + 16 + 2 + 4 + 1 + 1;

fn parse_process(line: &str) -> Option<ProcessMemory> {
    let mut c = Cursor::new(line);
    c.lit("  ")?;
    let pid = c.spaces().num()?;
    c.lit("  ")?;
    let rest = c.s.strip_suffix('K')?;
    let gap = rest.rfind("  ")?;
    let mut mem = Cursor::new(&rest[gap..]);
    let mem_kib = mem.spaces().num()?;
    if !mem.is_empty() {
        return None;
    }
    Some(ProcessMemory { pid, name: ProcessName::new(rest[..gap].trim_end_matches(' ')), mem_kib })
}

impl Memstat {
    /// Parses Memstat text.
    pub fn parse(text: &str) -> Self {
        let mut m = Memstat::default();
        let mut in_processes = false;
        for (i, line) in super::lines(text).enumerate() {
            let known = match line {
                TAG_HEADER | TAG_DASHES | PROCESS_HEADER | PROCESS_DASHES | "" => true,
                PROCESS_TITLE => {
                    in_processes = true;
                    // One allocation: a row is at least `PROCESS_ROW_LEN` bytes of what follows.
                    let rest = text.len() - (line.as_ptr() as usize - text.as_ptr() as usize);
                    m.processes.reserve(rest / PROCESS_ROW_LEN);
                    true
                }
                _ if m.heap.is_none() && line.starts_with("Kernel heap: ") => match parse_heap(line) {
                    Some(h) => {
                        m.heap = Some(h);
                        true
                    }
                    None => false,
                },
                _ if in_processes => parse_process(line).map(|p| m.processes.push(p)).is_some(),
                _ => parse_tag(line).map(|t| m.tags.push(t)).is_some(),
            };
            if !known {
                m.unknown.push(UnknownLine::new(i + 1, line));
            }
        }
        m
    }

    /// Formats as the kernel does.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(h) = &self.heap {
            let _ = writeln!(
                out,
                "Kernel heap: {}K total, {}K used ({}%), {}K free",
                h.total_kib, h.used_kib, h.used_percent, h.free_kib
            );
        }
        let _ = writeln!(out, "{TAG_HEADER}\n{TAG_DASHES}");
        for t in &self.tags {
            let _ = writeln!(
                out,
                "  {}  {:>7}K  {:>4}K  {:>6}",
                t.tag, t.current_kib, t.peak_kib, t.live_allocations
            );
        }
        let _ = writeln!(out, "\n{PROCESS_TITLE}\n{PROCESS_HEADER}\n{PROCESS_DASHES}");
        for p in &self.processes {
            let _ = writeln!(out, "  {:3}  {:<16}  {:>4}K", p.pid, p.name, p.mem_kib);
        }
        push_unknown(&mut out, &self.unknown);
        out
    }
}
