//! `Ps`: the process table, from `kernel/src/task/scheduler.rs` `process_list()`.

#[allow(unused_imports)]
use crate::prelude::*;

mod fast;

use core::fmt::{self, Write as _};
use fast::FixedRow;

use super::{push_unknown, Cursor, ProcessName, UnknownLine};

const HEADER: &str = "  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME";
const DASHES: &str = "  ---  --------  -----  -----  ------  -------------  ----------------";

/// A process's scheduler state.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
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

#[cfg(feature = "serde")]
impl serde::Serialize for CpuShare {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.fraction())
    }
}

/// What a blocked process waits for.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case", tag = "kind"))]
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
    /// Parses the column's text (dispatching on its first byte: it runs for every Ps row).
    #[inline]
    fn parse(s: &str) -> Self {
        // `{prefix}{digits}{suffix}`, the digits a u64.
        let inner = |prefix: &str, suffix: &str| -> Option<u64> {
            let digits = s.strip_prefix(prefix)?.strip_suffix(suffix)?.as_bytes();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            digits.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
        };
        let known = match s.as_bytes().first() {
            None => return BlockedOn::Nothing,
            Some(b'r') => inner("recv(ep ", ")").map(|ep| BlockedOn::Recv { ep }),
            Some(b's') if s == "spawn-susp" => Some(BlockedOn::SpawnSuspended),
            Some(b's') => inner("send(ep ", ")").map(|ep| BlockedOn::Send { ep }),
            Some(b't') => inner("timer(+", "ms)").map(|ms| BlockedOn::Timer { ms }),
            Some(b'p') => (s == "poll").then_some(BlockedOn::Poll),
            Some(b'd') => (s == "debug").then_some(BlockedOn::Debug),
            Some(_) => None,
        };
        known.unwrap_or_else(|| BlockedOn::Other { text: s.to_owned() })
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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Parses one row: the fixed-column fast path, then the general path for anything it does not take.
    #[cfg(test)]
    fn parse(line: &str) -> Option<Self> {
        match FixedRow::parse_at(line, 0).filter(|_| fast::ENABLED) {
            Some((f, _)) => Some(f.into_row()),
            None => PsRow::parse_general(line),
        }
    }

    /// The general row parser: columns may widen (`100.0%`, pids and memory beyond their widths) and the
    /// spacing may differ from the kernel's (saved or hand-edited reports).
    pub(super) fn parse_general(line: &str) -> Option<Self> {
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
        let (blocked, name) = split_tail(c.s)?;
        Some(PsRow {
            pid,
            state,
            cpu_1s,
            cpu_1m,
            mem_kib,
            blocked_on: BlockedOn::parse(blocked),
            name: ProcessName::new(name),
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

/// Splits what follows `K  ` into the blocked-on column and the name (both row parsers use it).
///
/// `{:<13}  {}`: the blocked-on column is padded to 13 (wider when longer), then two spaces, then the name.
#[inline]
fn split_tail(rest: &str) -> Option<(&str, &str)> {
    let b = rest.as_bytes();
    let (blocked, name) = if b.len() >= 15 && b[..15] == [b' '; 15] {
        ("", &rest[15..])
    } else if let Some(gap) = (1..b.len()).find(|&i| b[i - 1] == b' ' && b[i] == b' ').map(|i| i - 1) {
        // `{:<13}` pads to 13 characters, not bytes: a multi-byte blocked-on text takes more bytes.
        let name_at = (gap + 13usize.saturating_sub(rest[..gap].chars().count()) + 2).min(rest.len());
        if !b[gap..name_at].iter().all(|&b| b == b' ') {
            return None;
        }
        (&rest[..gap], &rest[name_at..])
    } else if rest.starts_with(' ') {
        ("", rest.trim_start_matches(' '))
    } else {
        (rest.trim_end_matches(' '), "")
    };
    // A name may start with spaces: rvOS names a process after the last `/` of its path, so `/bin/ lead`
    // runs as ` lead` (the kernel pads names on the right only). They are kept, so the row prints back as it was.
    Some((blocked, name))
}

/// The index of the first `\n` in `bytes` from `from`, or `bytes.len()`.
#[inline(always)]
pub(super) fn find_newline(bytes: &[u8], from: usize) -> usize {
    let from = from.min(bytes.len());
    memchr::memchr(b'\n', &bytes[from..]).map_or(bytes.len(), |p| from + p)
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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
        // Kernel rows are at least 54 bytes with their `\n`: this is enough for all of them, so the vector of
        // rows never regrows.
        ps.processes.reserve(text.len() / 54);
        let bytes = text.as_bytes();
        // The lines of `super::lines`, numbered from 1, with their offsets.
        let mut start = 0;
        let mut number = 0;
        while start < bytes.len() {
            number += 1;
            if let Some((row, next)) = FixedRow::parse_at(text, start).filter(|_| fast::ENABLED) {
                ps.processes.push(row.into_row());
                start = next;
                continue;
            }
            let newline = find_newline(bytes, start);
            let line = text[start..newline].trim_end_matches('\r');
            start = newline + 1;
            // Rows have a digit or a space where the header and dashes have `P` and `-`.
            if matches!(line.as_bytes().get(2), Some(b'P' | b'-')) && (line == HEADER || line == DASHES) {
                continue;
            }
            match PsRow::parse_general(line) {
                Some(row) => ps.processes.push(row),
                None => ps.unknown.push(UnknownLine::new(number, line)),
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
    use super::fast::*;
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

    /// `Ps::parse` before the fixed-column path: `lines()` and the general row parser only.
    fn reference_parse(text: &str) -> Ps {
        let mut ps = Ps::default();
        for (i, line) in crate::report::lines(text).enumerate() {
            if line == HEADER || line == DASHES {
                continue;
            }
            match PsRow::parse_general(line) {
                Some(row) => ps.processes.push(row),
                None => ps.unknown.push(UnknownLine::new(i + 1, line)),
            }
        }
        ps
    }

    #[test]
    fn blocked_on_matches_the_string_matches() {
        fn by_strings(s: &str) -> BlockedOn {
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
        let mut cases = vec![];
        for (prefix, suffix) in
            [("recv(ep ", ")"), ("send(ep ", ")"), ("timer(+", "ms)"), ("recv(ep", ")"), ("", "")]
        {
            for digits in [
                "",
                "0",
                "4",
                "007",
                "18446744073709551615",
                "18446744073709551616",
                "99999999999999999999",
                "1a",
                " 1",
                "+1",
                "-1",
            ] {
                cases.push(format!("{prefix}{digits}{suffix}"));
                cases.push(format!("{prefix}{digits}"));
                cases.push(format!("{prefix}{digits}{suffix}x"));
            }
        }
        cases.extend(
            ["poll", "debug", "spawn-susp", "polls", "Poll", "spawn", "d", "s", "t", "r", "p", "é", "x y"]
                .map(str::to_owned),
        );
        for s in cases {
            assert_eq!(BlockedOn::parse(&s), by_strings(&s), "{s:?}");
        }
    }

    #[test]
    fn find_newline_matches_position() {
        let text = "a\nbc\n\n0123456789abcdef\n\u{e9}xyz0123456789abcdefghij\n0123456\n01234567\nend";
        let bytes = text.as_bytes();
        for from in 0..=bytes.len() {
            let want = bytes[from..].iter().position(|&c| c == b'\n').map_or(bytes.len(), |p| from + p);
            assert_eq!(find_newline(bytes, from), want, "{from}");
        }
        assert_eq!(find_newline(b"", 0), 0);
        assert_eq!(find_newline(&[0x8a, 0x0b, 0xff, 0x0a], 0), 3);
        assert_eq!(find_newline(&[0x0b; 20], 0), 20);
    }

    #[test]
    fn right_aligned_matches_a_byte_loop() {
        fn by_bytes(f: [u8; 4], may_be_space: u32) -> Option<u64> {
            let spaces = f.iter().take_while(|&&c| c == b' ').count();
            if (0..spaces).any(|i| may_be_space >> (8 * i + 7) & 1 == 0) {
                return None;
            }
            let digits = &f[spaces..];
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some(digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
        }
        let alphabet = [
            b' ', b'0', b'1', b'5', b'9', b'/', b':', b'!', b')', b'\0', b'\n', b'P', 0x10, 0x7f, 0x80, 0x8a,
            0xb0, 0xff,
        ];
        let mut accepted = 0;
        for a in alphabet {
            for b in alphabet {
                for c in alphabet {
                    for d in alphabet {
                        for mask in [NUMBER, SHARE] {
                            let f = [a, b, c, d];
                            assert_eq!(right_aligned(f, mask), by_bytes(f, mask), "{f:?} {mask:x}");
                            accepted += usize::from(by_bytes(f, mask).is_some());
                        }
                    }
                }
            }
        }
        assert!(accepted > 500, "{accepted}");
    }

    /// Lines of every shape: as the kernel prints them (fixed columns), widened, and hand-made.
    fn sample_lines() -> Vec<String> {
        let blocked = [
            BlockedOn::Nothing,
            BlockedOn::Recv { ep: 4 },
            BlockedOn::Send { ep: 12345 },
            BlockedOn::Timer { ms: 12 },
            BlockedOn::Timer { ms: 1234567890 },
            BlockedOn::Poll,
            BlockedOn::Debug,
            BlockedOn::SpawnSuspended,
            BlockedOn::Other { text: "wait x y".into() },
            BlockedOn::Other { text: "wait  double".into() },
            BlockedOn::Other { text: "thirteen-byte".into() },
            BlockedOn::Other { text: "fourteen-bytes".into() },
            BlockedOn::Other { text: "é-wait".into() },
        ];
        let names = [
            "",
            "idle",
            "serial-con",
            "sixteen-bytes-xx",
            "seventeen-bytes-x",
            "a b",
            " lead",
            "trail ",
            "né",
        ];
        let mut lines = Vec::new();
        for (i, blocked_on) in blocked.iter().enumerate() {
            for (j, name) in names.iter().enumerate() {
                let k = (i * names.len() + j) as u64;
                let row = PsRow {
                    pid: [0, 7, 42, 999, 1000, 123456][(k % 6) as usize],
                    state: [ProcState::Ready, ProcState::Running, ProcState::Blocked, ProcState::Dead]
                        [(k % 4) as usize],
                    cpu_1s: CpuShare { tenths: [0, 5, 99, 999, 1000, 10000][(k % 6) as usize] },
                    cpu_1m: CpuShare { tenths: [1, 100, 998, 1000][(k % 4) as usize] },
                    mem_kib: [0, 16, 9999, 10000, u64::MAX][(k % 5) as usize],
                    blocked_on: blocked_on.clone(),
                    name: (*name).into(),
                };
                let mut s = String::new();
                row.render(&mut s);
                lines.push(s.trim_end_matches('\n').to_owned());
                // The same row with every field in its fixed column.
                let fixed = PsRow {
                    pid: k % 1000,
                    cpu_1s: CpuShare { tenths: k as u32 * 7 % 1000 },
                    mem_kib: k * 13 % 10000,
                    ..row
                };
                let mut s = String::new();
                fixed.render(&mut s);
                lines.push(s.trim_end_matches('\n').to_owned());
            }
        }
        lines.extend(
            [
                "    2  Blocked    0.0%   0.1%    16K  recv(ep 4)     serial-con",
                "    0  Ready      0.0%   0.0%     0K                 idle",
                "    0  Ready      0.0%   0.0%     0K                  idle",
                "    1  Running   12.3%   4.5%    64K                 init",
                "    1  Running   12.3%   4.5%    64K                 ",
                "    1  Running   12.3%   4.5%    64K               ",
                "    1  Running   12.3%   4.5%    64K  x",
                "  001  Ready     01.0%  00.0%  0000K                 zeros",
                "    1  Ready      1.0%   0.0%     0K  a b c d e f g  name",
                "    1  Ready      1.0%   0.0%     0K   b             name",
                "    1  Ready      1.0%   0.0%     0K  ab            name",
                "    1  Ready      1.0%   0.0%     0K  ab\t           name",
                "    1  Ready      1.0%   0.0%     0K  ab\r           name",
                "    1  Ready      1.0%   0.0%     0K                 name\r\r",
                "    1  Ready      1.0%   0.0%     0K                 \r",
                "    1  Ready      1.0%   0.0%     0K                   \r",
                "    1  Ready   1.0%   0.0%     0K                 short-state",
                "    1  Ready      1.0%   0.0%     0K                 name with spaces  and more",
            ]
            .map(str::to_owned),
        );
        lines
    }

    #[test]
    fn fixed_rows_match_the_general_parser() {
        let lines = sample_lines();
        let mut fixed = 0;
        for line in &lines {
            // As `lines()` gives it.
            let general = PsRow::parse_general(line.trim_end_matches('\r'));
            if let Some((row, next)) = FixedRow::parse_at(line, 0) {
                fixed += 1;
                assert_eq!(next, line.len() + 1, "{line:?}");
                assert_eq!(Some(row.into_row()), general, "{line:?}");
            }
            assert_eq!(PsRow::parse(line.trim_end_matches('\r')), general, "{line:?}");
        }
        assert!(fixed > lines.len() / 3, "{fixed} of {}", lines.len());
        // The kernel's own examples take the fixed path.
        for line in &lines[lines.len() - 18..lines.len() - 15] {
            assert!(FixedRow::parse_at(line, 0).is_some(), "{line:?}");
        }
    }

    #[test]
    fn fixed_rows_match_the_general_parser_after_any_one_byte_change() {
        let replacements = [" ", "0", "9", "x", ".", "%", "K", "\r", "\n", "\t", "é", ""];
        for line in sample_lines() {
            for at in (0..line.len()).filter(|&i| line.is_char_boundary(i)) {
                let end = (at + 1..=line.len()).find(|&i| line.is_char_boundary(i)).unwrap_or(line.len());
                for r in replacements {
                    let changed = format!("{}{r}{}", &line[..at], &line[end..]);
                    for text in [
                        changed.clone(),
                        format!("{changed}\n"),
                        format!("{HEADER}\n{changed}\r\n{line}\n\n"),
                    ] {
                        assert_eq!(Ps::parse(&text), reference_parse(&text), "{text:?}");
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// Rows in and near the fixed columns, with a few bytes overwritten anywhere.
        #[test]
        fn mutated_rows_match_the_general_parser(
            rows in proptest::collection::vec(
                (0u64..1200, 0usize..4, 0u32..1100, 0u32..1100, 0u64..12000, 0usize..5, "[a-z -]{0,18}"),
                1..6,
            ),
            edits in proptest::collection::vec((0usize..400, proptest::sample::select(
                vec![" ", "  ", "0", "9", "a", ".", "%", "K", "\r", "\n", "\t", "é", "", "(", ")"],
            )), 0..4),
        ) {
            let mut text = String::new();
            for (pid, state, a, b, mem_kib, blocked, name) in rows {
                let row = PsRow {
                    pid,
                    state: [ProcState::Ready, ProcState::Running, ProcState::Blocked, ProcState::Dead][state],
                    cpu_1s: CpuShare { tenths: a },
                    cpu_1m: CpuShare { tenths: b },
                    mem_kib,
                    blocked_on: [
                        BlockedOn::Nothing,
                        BlockedOn::Recv { ep: pid },
                        BlockedOn::Timer { ms: mem_kib },
                        BlockedOn::SpawnSuspended,
                        BlockedOn::Other { text: "x y".into() },
                    ][blocked].clone(),
                    name: name.as_str().into(),
                };
                row.render(&mut text);
            }
            for (at, with) in edits {
                let at = at % (text.len() + 1);
                if let (true, Some(end)) = (text.is_char_boundary(at), (at + 1..=text.len()).find(|&i| text.is_char_boundary(i))) {
                    text.replace_range(at..end, with);
                }
            }
            proptest::prop_assert_eq!(Ps::parse(&text), reference_parse(&text), "{:?}", text);
        }
    }

    #[test]
    fn whole_reports_match_the_general_parser() {
        let lines = sample_lines();
        let body = lines.join("\n");
        for text in [
            String::new(),
            "\n".into(),
            "\n\n".into(),
            format!("{HEADER}\n{DASHES}\n{body}\n"),
            format!("{HEADER}\r\n{DASHES}\r\n{}\r\n", lines.join("\r\n")),
            format!("{HEADER}\n{DASHES}\n{body}"),
            format!("\n{body}\n\n"),
        ] {
            let ps = Ps::parse(&text);
            assert_eq!(ps, reference_parse(&text), "{text:?}");
            // And every truncation (rows cut short, names at the very end of the text).
            for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)).step_by(7) {
                assert_eq!(Ps::parse(&text[..cut]), reference_parse(&text[..cut]), "{:?}", &text[..cut]);
            }
        }
    }
}
