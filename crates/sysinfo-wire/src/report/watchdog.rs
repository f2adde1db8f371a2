//! `Watchdog`: the watchdog's status, from `kernel/src/watchdog.rs` `status()`.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt::Write as _;

use super::{push_unknown, Cursor, ProcessName, UnknownLine};

const KERNEL_TITLE: &str = "  Kernel task heartbeats:";
const CRITICAL_TITLE: &str = "  Critical user processes:";
const NONE_LINE: &str = "    (none or scheduler locked)";
const LAST: &str = " last heartbeat ";

/// The kernel's heartbeat slots (`kernel/src/watchdog.rs`).
pub const HEARTBEAT_SLOTS: [&str; 4] = ["init", "console", "timer", "sysinfo"];

/// A kernel task's heartbeat: `    {:<12} last heartbeat {}ms ago`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The slot name: one of [`HEARTBEAT_SLOTS`] (borrowed), or another (owned).
    pub name: Cow<'static, str>,
    /// Milliseconds since its last heartbeat.
    pub ago_ms: u64,
}

/// A critical user process: `    PID {:3} {:<16} last heartbeat {}ms ago`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriticalProcess {
    /// The pid.
    pub pid: u64,
    /// The name (inline: the kernel's names are at most 16 bytes).
    pub name: ProcessName,
    /// Milliseconds since its last heartbeat.
    pub ago_ms: u64,
}

/// The `Watchdog` report.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Watchdog {
    /// `Watchdog: enabled` or `Watchdog: disabled` (nothing else follows the latter).
    pub enabled: bool,
    /// The timeout in whole seconds.
    pub timeout_secs: Option<u64>,
    /// The timeout in 10 MHz ticks.
    pub timeout_ticks: Option<u64>,
    /// Watched kernel tasks.
    pub kernel_tasks: Vec<Heartbeat>,
    /// Critical user processes (empty when the kernel printed `(none or scheduler locked)`).
    pub critical_processes: Vec<CriticalProcess>,
    /// Lines that matched nothing.
    pub unknown: Vec<UnknownLine>,
}

fn ago(s: &str) -> Option<u64> {
    let mut c = Cursor::new(s);
    let ms = c.num()?;
    c.lit("ms ago")?;
    c.is_empty().then_some(ms)
}

fn parse_timeout(line: &str) -> Option<(u64, u64)> {
    let mut c = Cursor::new(line);
    c.lit("  Timeout: ")?;
    let secs = c.num()?;
    c.lit("s (")?;
    let ticks = c.num()?;
    c.lit(" ticks)")?;
    c.is_empty().then_some((secs, ticks))
}

fn parse_heartbeat(line: &str) -> Option<Heartbeat> {
    let rest = line.strip_prefix("    ")?;
    let at = rest.rfind(LAST)?;
    let name = rest[..at].trim_end_matches(' ');
    if name.is_empty() || name.starts_with(' ') || name.starts_with("PID ") {
        return None;
    }
    Some(Heartbeat { name: super::known(&HEARTBEAT_SLOTS, name), ago_ms: ago(&rest[at + LAST.len()..])? })
}

fn parse_critical(line: &str) -> Option<CriticalProcess> {
    let mut c = Cursor::new(line);
    c.lit("    PID ")?;
    let pid = c.spaces().num()?;
    c.lit(" ")?;
    let rest = c.s;
    let at = rest.rfind(LAST)?;
    Some(CriticalProcess {
        pid,
        name: ProcessName::new(rest[..at].trim_end_matches(' ')),
        ago_ms: ago(&rest[at + LAST.len()..])?,
    })
}

#[derive(PartialEq)]
enum Section {
    Top,
    Kernel,
    Critical,
}

impl Watchdog {
    /// Parses Watchdog text.
    pub fn parse(text: &str) -> Self {
        let mut w = Watchdog::default();
        let mut section = Section::Top;
        for (i, line) in super::lines(text).enumerate() {
            let known = match line {
                "Watchdog: enabled" => {
                    w.enabled = true;
                    true
                }
                "Watchdog: disabled" => true,
                KERNEL_TITLE => {
                    section = Section::Kernel;
                    true
                }
                CRITICAL_TITLE => {
                    section = Section::Critical;
                    true
                }
                NONE_LINE if section == Section::Critical => true,
                _ => match section {
                    Section::Top => parse_timeout(line)
                        .map(|(s, t)| {
                            w.timeout_secs = Some(s);
                            w.timeout_ticks = Some(t);
                        })
                        .is_some(),
                    Section::Kernel => parse_heartbeat(line).map(|h| w.kernel_tasks.push(h)).is_some(),
                    Section::Critical => parse_critical(line).map(|p| w.critical_processes.push(p)).is_some(),
                },
            };
            if !known {
                w.unknown.push(UnknownLine::new(i + 1, line));
            }
        }
        w
    }

    /// Formats as the kernel does.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(if self.enabled { "Watchdog: enabled\n" } else { "Watchdog: disabled\n" });
        // The kernel prints nothing more when disabled; a parsed report keeps whatever it had.
        if let (Some(s), Some(t)) = (self.timeout_secs, self.timeout_ticks) {
            let _ = writeln!(out, "  Timeout: {s}s ({t} ticks)");
        }
        if self.enabled || !self.kernel_tasks.is_empty() {
            let _ = writeln!(out, "{KERNEL_TITLE}");
            for h in &self.kernel_tasks {
                let _ = writeln!(out, "    {:<12} last heartbeat {}ms ago", h.name, h.ago_ms);
            }
        }
        if self.enabled || !self.critical_processes.is_empty() {
            let _ = writeln!(out, "{CRITICAL_TITLE}");
            if self.critical_processes.is_empty() {
                let _ = writeln!(out, "{NONE_LINE}");
            }
            for p in &self.critical_processes {
                let _ = writeln!(out, "    PID {:3} {:<16} last heartbeat {}ms ago", p.pid, p.name, p.ago_ms);
            }
        }
        push_unknown(&mut out, &self.unknown);
        out
    }
}
