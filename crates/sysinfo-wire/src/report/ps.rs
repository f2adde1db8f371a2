//! `Ps`: the process table, from `kernel/src/task/scheduler.rs` `process_list()`.

use std::fmt::{self, Write as _};

use super::{push_unknown, Cursor, ProcessName, UnknownLine};

const HEADER: &str = "  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME";
const DASHES: &str = "  ---  --------  -----  -----  ------  -------------  ----------------";

/// A process's scheduler state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcState {
    /// Runnable.
    Ready,
    /// On the CPU.
    Running,
    /// Waiting (see [`BlockedOn`]).
    Blocked,
    /// Exited; still listed by Ps until its slot is reused.
    Dead,
}

impl ProcState {
    /// The state as Ps prints it, padded to 8 columns.
    pub fn padded(self) -> &'static str {
        match self {
            ProcState::Ready => "Ready   ",
            ProcState::Running => "Running ",
            ProcState::Blocked => "Blocked ",
            ProcState::Dead => "Dead    ",
        }
    }

    fn from_word(w: &str) -> Option<Self> {
        Some(match w {
            "Ready" => ProcState::Ready,
            "Running" => ProcState::Running,
            "Blocked" => ProcState::Blocked,
            "Dead" => ProcState::Dead,
            _ => return None,
        })
    }
}

/// A CPU share as Ps prints it: tenths of a percent (the kernel's EWMA, 10000 = 100%, shown to 0.1%).
///
/// Serialised to JSON as a fraction of one CPU (`12.3%` is `0.123`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct CpuShare {
    /// Tenths of a percent: `123` is `12.3%`, `1000` is `100.0%`.
    pub tenths: u32,
}

impl CpuShare {
    /// The share printed for a kernel EWMA value (0..=10000).
    pub fn from_ewma(ewma: u32) -> Self {
        CpuShare { tenths: ewma / 10 }
    }

    /// The share as a fraction of one CPU (`1.0` = 100%).
    pub fn fraction(self) -> f64 {
        f64::from(self.tenths) / 1000.0
    }
}

impl fmt::Display for CpuShare {
    /// `{:2}.{:<1}%` as the kernel prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:2}.{}%", self.tenths / 10, self.tenths % 10)
    }
}

impl serde::Serialize for CpuShare {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.fraction())
    }
}

/// What a blocked process waits for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum BlockedOn {
    /// Not blocked (an empty column).
    Nothing,
    /// `recv(ep N)`.
    Recv {
        /// The endpoint.
        ep: u64,
    },
    /// `send(ep N)`.
    Send {
        /// The endpoint.
        ep: u64,
    },
    /// `timer(+Nms)`.
    Timer {
        /// Milliseconds left.
        ms: u64,
    },
    /// `poll`.
    Poll,
    /// `debug`: suspended by the debugger.
    Debug,
    /// `spawn-susp`: spawned suspended.
    SpawnSuspended,
    /// Anything else, kept as printed.
    Other {
        /// The column's text.
        text: String,
    },
}

impl BlockedOn {
    fn parse(s: &str) -> Self {
        let inner = |prefix: &str, suffix: &str| -> Option<u64> {
            let mut c = Cursor::new(s.strip_prefix(prefix)?.strip_suffix(suffix)?);
            let n = c.num()?;
            c.is_empty().then_some(n)
        };
        match s {
            "" => return BlockedOn::Nothing,
            "poll" => return BlockedOn::Poll,
            "debug" => return BlockedOn::Debug,
            "spawn-susp" => return BlockedOn::SpawnSuspended,
            _ => {}
        }
        if let Some(ep) = inner("recv(ep ", ")") {
            BlockedOn::Recv { ep }
        } else if let Some(ep) = inner("send(ep ", ")") {
            BlockedOn::Send { ep }
        } else if let Some(ms) = inner("timer(+", "ms)") {
            BlockedOn::Timer { ms }
        } else {
            BlockedOn::Other { text: s.to_owned() }
        }
    }
}

impl fmt::Display for BlockedOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockedOn::Nothing => Ok(()),
            BlockedOn::Recv { ep } => write!(f, "recv(ep {ep})"),
            BlockedOn::Send { ep } => write!(f, "send(ep {ep})"),
            BlockedOn::Timer { ms } => write!(f, "timer(+{ms}ms)"),
            BlockedOn::Poll => f.write_str("poll"),
            BlockedOn::Debug => f.write_str("debug"),
            BlockedOn::SpawnSuspended => f.write_str("spawn-susp"),
            BlockedOn::Other { text } => f.write_str(text),
        }
    }
}

/// One process-table slot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PsRow {
    /// The pid (the slot index; 0 is idle).
    pub pid: u64,
    /// The state.
    pub state: ProcState,
    /// CPU share over the 1-second EWMA.
    pub cpu_1s: CpuShare,
    /// CPU share over the 1-minute EWMA.
    pub cpu_1m: CpuShare,
    /// Physical memory owned, in KiB (pages × 4).
    pub mem_kib: u64,
    /// What it waits for.
    pub blocked_on: BlockedOn,
    /// The name (at most 16 bytes in rvOS, kept inline).
    pub name: ProcessName,
}

impl PsRow {
    fn parse(line: &str) -> Option<Self> {
        let mut c = Cursor::new(line);
        c.lit("  ")?;
        let pid = c.spaces().num()?;
        c.lit("  ")?;
        // The state is padded to 8 columns; the four padded forms are tried first, as the kernel prints them.
        let state = match c.s.get(..8) {
            Some("Ready   ") => Some(ProcState::Ready),
            Some("Running ") => Some(ProcState::Running),
            Some("Blocked ") => Some(ProcState::Blocked),
            Some("Dead    ") => Some(ProcState::Dead),
            _ => None,
        };
        let state = match state {
            Some(state) => {
                c.s = &c.s[8..];
                state
            }
            None => ProcState::from_word(c.word())?,
        };
        let cpu_1s = parse_share(&mut c)?;
        let cpu_1m = parse_share(&mut c)?;
        let mem_kib = c.spaces().num()?;
        c.lit("K  ")?;
        // `{:<13}  {}`: the blocked-on column is padded to 13 (wider when longer), then two spaces, then the name.
        let rest = c.s;
        let (blocked, name) = if rest.len() >= 15 && rest.as_bytes()[..15].iter().all(|&b| b == b' ') {
            ("", &rest[15..])
        } else if let Some(gap) = rest.as_bytes().windows(2).position(|w| w == b"  ") {
            let name_at = (gap.max(13) + 2).min(rest.len());
            if !rest.as_bytes()[gap..name_at].iter().all(|&b| b == b' ') {
                return None;
            }
            (&rest[..gap], &rest[name_at..])
        } else if rest.starts_with(' ') {
            ("", rest.trim_start_matches(' '))
        } else {
            (rest.trim_end_matches(' '), "")
        };
        Some(PsRow {
            pid,
            state,
            cpu_1s,
            cpu_1m,
            mem_kib,
            blocked_on: BlockedOn::parse(blocked),
            // The spec's examples put one space too many before the name; rvOS names never start with one.
            name: ProcessName::new(&name[name.bytes().take_while(|&b| b == b' ').count()..]),
        })
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  {:3}  {}  {}  {}  {:>4}K  {:<13}  {}",
            self.pid,
            self.state.padded(),
            self.cpu_1s,
            self.cpu_1m,
            self.mem_kib,
            self.blocked_on.to_string(),
            self.name
        );
    }
}

/// Parses `{:2}.{}%` (spaces, digits, a dot, one digit, `%`) by hand: it runs twice per Ps row.
#[inline]
fn parse_share(c: &mut Cursor<'_>) -> Option<CpuShare> {
    let b = c.s.as_bytes();
    let mut i = 0;
    while b.get(i) == Some(&b' ') {
        i += 1;
    }
    let start = i;
    let mut whole: u32 = 0;
    while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
        whole = whole.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
        i += 1;
    }
    if i == start || b.get(i) != Some(&b'.') || b.get(i + 2) != Some(&b'%') {
        return None;
    }
    let tenth = b.get(i + 1).filter(|d| d.is_ascii_digit())? - b'0';
    c.s = &c.s[i + 3..];
    Some(CpuShare { tenths: whole.checked_mul(10)?.checked_add(u32::from(tenth))? })
}

/// The `Ps` report: every process-table slot, Dead ones included.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Ps {
    /// The rows, in slot order.
    pub processes: Vec<PsRow>,
    /// Lines that were neither the header nor a row.
    pub unknown: Vec<UnknownLine>,
}

impl Ps {
    /// Parses Ps text.
    pub fn parse(text: &str) -> Self {
        let mut ps = Ps::default();
        ps.processes.reserve(text.len() / 64);
        for (i, line) in super::lines(text).enumerate() {
            // Rows have a digit or a space where the header and dashes have `P` and `-`.
            if matches!(line.as_bytes().get(2), Some(b'P' | b'-')) && (line == HEADER || line == DASHES) {
                continue;
            }
            match PsRow::parse(line) {
                Some(row) => ps.processes.push(row),
                None => ps.unknown.push(UnknownLine::new(i + 1, line)),
            }
        }
        ps
    }

    /// Formats as the kernel does.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(140 + 72 * self.processes.len());
        out.push_str(HEADER);
        out.push('\n');
        out.push_str(DASHES);
        out.push('\n');
        for row in &self.processes {
            row.render(&mut out);
        }
        push_unknown(&mut out, &self.unknown);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_blocked_on_and_full_cpu() {
        let row = PsRow {
            pid: 12,
            state: ProcState::Blocked,
            cpu_1s: CpuShare { tenths: 1000 },
            cpu_1m: CpuShare { tenths: 5 },
            mem_kib: 123456,
            blocked_on: BlockedOn::Timer { ms: 1234567890 },
            name: "a b".into(),
        };
        let mut s = String::new();
        row.render(&mut s);
        assert_eq!(s, "   12  Blocked   100.0%   0.5%  123456K  timer(+1234567890ms)  a b\n");
        assert_eq!(PsRow::parse(s.trim_end_matches('\n')), Some(row));
    }
}
