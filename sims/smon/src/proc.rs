//! Real figures from `/proc` (and interface numbers from `/sys`), as smon samples.
//!
//! Every parser is a pure function of the file's text, so the tests feed them fixtures; [`ProcSource`]
//! reads the files from a configurable root (a fake `/proc` in tests, the real one by default).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use smon_codec::Sample;

use crate::Source;

/// `/proc/stat` per-CPU columns, in file order, as `linux.cpu.<field>` (USER_HZ ticks).
pub const CPU_FIELDS: [&str; 8] = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];
/// `/proc/meminfo` keys and the names they are sent under (bytes).
pub const MEM_FIELDS: [(&str, &str); 7] = [
    ("MemTotal", "linux.mem.total"),
    ("MemFree", "linux.mem.free"),
    ("MemAvailable", "linux.mem.available"),
    ("Buffers", "linux.mem.buffers"),
    ("Cached", "linux.mem.cached"),
    ("SwapTotal", "linux.mem.swap_total"),
    ("SwapFree", "linux.mem.swap_free"),
];
/// `/proc/net/dev` columns, in file order, as `linux.net.<field>`.
pub const NET_FIELDS: [&str; 16] = [
    "rx_bytes",
    "rx_packets",
    "rx_errs",
    "rx_drop",
    "rx_fifo",
    "rx_frame",
    "rx_compressed",
    "rx_multicast",
    "tx_bytes",
    "tx_packets",
    "tx_errs",
    "tx_drop",
    "tx_fifo",
    "tx_colls",
    "tx_carrier",
    "tx_compressed",
];
/// `/proc/diskstats` columns after the device name, in file order, as `linux.disk.<field>`.
pub const DISK_FIELDS: [&str; 10] = [
    "reads",
    "reads_merged",
    "sectors_read",
    "read_ms",
    "writes",
    "writes_merged",
    "sectors_written",
    "write_ms",
    "in_flight",
    "io_ms",
];

fn num(s: &str) -> Option<u64> {
    s.parse().ok()
}

/// Per-CPU times, indexed by CPU number, plus context switches, forks and process counts.
pub fn parse_stat(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let Some(key) = parts.next() else { continue };
        if let Some(cpu) = key.strip_prefix("cpu").and_then(num) {
            for (field, value) in CPU_FIELDS.iter().zip(parts.filter_map(num)) {
                out.push(Sample::new(format!("linux.cpu.{field}"), [cpu], value));
            }
            continue;
        }
        let name = match key {
            "ctxt" => "linux.stat.ctxt",
            "processes" => "linux.stat.forks",
            "procs_running" => "linux.stat.procs_running",
            "procs_blocked" => "linux.stat.procs_blocked",
            "intr" => "linux.stat.intr",
            _ => continue,
        };
        if let Some(v) = parts.next().and_then(num) {
            out.push(Sample::new(name, [], v));
        }
    }
    out
}

/// Memory figures in bytes.
pub fn parse_meminfo(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for (key, name) in MEM_FIELDS {
        let value = text.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            let mut parts = rest.split_whitespace();
            let v = num(parts.next()?)?;
            Some(if parts.next() == Some("kB") { v.saturating_mul(1024) } else { v })
        });
        if let Some(v) = value {
            out.push(Sample::new(name, [], v));
        }
    }
    out
}

/// Parses "0.52" as hundredths (52): smon has no floats (A12).
fn hundredths(s: &str) -> Option<u64> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let frac: String = frac.chars().chain("00".chars()).take(2).collect();
    num(whole)?.checked_mul(100)?.checked_add(num(&frac)?)
}

/// Load averages in hundredths, and running/total scheduling entities.
pub fn parse_loadavg(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    let parts: Vec<&str> = text.split_whitespace().collect();
    for (i, name) in
        ["linux.load.avg1_x100", "linux.load.avg5_x100", "linux.load.avg15_x100"].iter().enumerate()
    {
        if let Some(v) = parts.get(i).and_then(|s| hundredths(s)) {
            out.push(Sample::new(*name, [], v));
        }
    }
    if let Some((running, total)) = parts.get(3).and_then(|s| s.split_once('/')) {
        if let (Some(r), Some(t)) = (num(running), num(total)) {
            out.push(Sample::new("linux.load.running", [], r));
            out.push(Sample::new("linux.load.threads", [], t));
        }
    }
    out
}

/// Uptime in whole seconds.
pub fn parse_uptime(text: &str) -> Vec<Sample> {
    let secs = text.split_whitespace().next().and_then(|s| num(s.split('.').next()?));
    secs.map(|s| vec![Sample::new("linux.uptime", [], s)]).unwrap_or_default()
}

/// Per-interface counters, indexed by `ifindex(name, position)`, plus the interface's name.
pub fn parse_net_dev(text: &str, mut ifindex: impl FnMut(&str, u64) -> u64) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut position = 0;
    for line in text.lines() {
        let Some((name, counters)) = line.split_once(':') else { continue };
        let name = name.trim();
        if name.is_empty() || name.contains('|') {
            continue;
        }
        position += 1;
        let index = ifindex(name, position);
        out.push(Sample::new("linux.net.name", [index], name));
        for (field, value) in NET_FIELDS.iter().zip(counters.split_whitespace().filter_map(num)) {
            out.push(Sample::new(format!("linux.net.{field}"), [index], value));
        }
    }
    out
}

/// Per-disk I/O counters, indexed by `[major, minor]`, plus the device name. Devices that never did
/// any I/O (unused loop and ram devices) are left out.
pub fn parse_diskstats(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (Some(major), Some(minor), Some(name)) =
            (parts.first().and_then(|s| num(s)), parts.get(1).and_then(|s| num(s)), parts.get(2))
        else {
            continue;
        };
        let values: Vec<u64> = parts[3..].iter().filter_map(|s| num(s)).collect();
        if values.len() < DISK_FIELDS.len() || (values[0] == 0 && values[4] == 0) {
            continue;
        }
        out.push(Sample::new("linux.disk.name", [major, minor], *name));
        for (field, value) in DISK_FIELDS.iter().zip(values) {
            out.push(Sample::new(format!("linux.disk.{field}"), [major, minor], value));
        }
    }
    out
}

/// A clock for `smon.time`: seconds since the Unix epoch.
pub type Clock = Box<dyn FnMut() -> u64 + Send>;

/// The system clock, in whole seconds since the Unix epoch.
pub fn system_clock() -> Clock {
    Box::new(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0))
}

/// Samples `smon.time`, uptime, load, memory, per-CPU, per-interface and per-disk figures from `/proc`.
///
/// A file that cannot be read is skipped (with one warning), so the monitor runs on systems without,
/// say, `/proc/diskstats`.
pub struct ProcSource {
    proc_root: PathBuf,
    sys_root: PathBuf,
    clock: Clock,
    warned: Vec<String>,
}

impl std::fmt::Debug for ProcSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcSource")
            .field("proc_root", &self.proc_root)
            .field("sys_root", &self.sys_root)
            .finish()
    }
}

impl ProcSource {
    /// Reads `proc_root` (normally `/proc`) and interface numbers from `sys_root` (normally `/sys`).
    pub fn new(proc_root: impl Into<PathBuf>, sys_root: impl Into<PathBuf>) -> Self {
        ProcSource {
            proc_root: proc_root.into(),
            sys_root: sys_root.into(),
            clock: system_clock(),
            warned: Vec::new(),
        }
    }

    /// Uses `clock` for `smon.time` (tests pass a fixed one, for byte-exact output).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    fn read(&mut self, rel: &str) -> Option<String> {
        let path = self.proc_root.join(rel);
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) => {
                if !self.warned.iter().any(|w| w == rel) {
                    tracing::warn!(path = %path.display(), error = %e, "skipping");
                    self.warned.push(rel.to_string());
                }
                None
            }
        }
    }
}

fn sys_ifindex(sys_root: &Path, name: &str, position: u64) -> u64 {
    std::fs::read_to_string(sys_root.join("class/net").join(name).join("ifindex"))
        .ok()
        .and_then(|s| num(s.trim()))
        .unwrap_or(position)
}

impl Source for ProcSource {
    fn sample(&mut self) -> Vec<Sample> {
        let mut out = vec![Sample::new("smon.time", [], (self.clock)())];
        if let Some(t) = self.read("uptime") {
            out.extend(parse_uptime(&t));
        }
        if let Some(t) = self.read("loadavg") {
            out.extend(parse_loadavg(&t));
        }
        if let Some(t) = self.read("meminfo") {
            out.extend(parse_meminfo(&t));
        }
        if let Some(t) = self.read("stat") {
            out.extend(parse_stat(&t));
        }
        if let Some(t) = self.read("net/dev") {
            let sys = self.sys_root.clone();
            out.extend(parse_net_dev(&t, |name, pos| sys_ifindex(&sys, name, pos)));
        }
        if let Some(t) = self.read("diskstats") {
            out.extend(parse_diskstats(&t));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smon_codec::Value;

    fn find<'a>(samples: &'a [Sample], name: &str, index: &[u64]) -> &'a Value {
        &samples
            .iter()
            .find(|s| &*s.name == name && s.index == index)
            .unwrap_or_else(|| panic!("{name}{index:?}"))
            .value
    }

    #[test]
    fn stat_gives_per_cpu_times_with_the_cpu_as_index() {
        let s = parse_stat("cpu  10 0 5 100 1 0 0 0 0 0\ncpu0 4 0 2 50 1 0 0 0 0 0\ncpu1 6 0 3 50 0 0 0 0 0 0\nctxt 999\nprocesses 42\n");
        assert_eq!(find(&s, "linux.cpu.idle", &[1]), &Value::Unsigned(50));
        assert_eq!(find(&s, "linux.cpu.user", &[0]), &Value::Unsigned(4));
        assert_eq!(find(&s, "linux.stat.ctxt", &[]), &Value::Unsigned(999));
        assert_eq!(
            s.iter().filter(|x| &*x.name == "linux.cpu.idle").count(),
            2,
            "the aggregate line is left out"
        );
    }

    #[test]
    fn meminfo_is_in_bytes() {
        let s = parse_meminfo("MemTotal:       16384 kB\nMemFree:  1024 kB\nHugePages_Total: 0\n");
        assert_eq!(find(&s, "linux.mem.total", &[]), &Value::Unsigned(16384 * 1024));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn loadavg_is_in_hundredths() {
        let s = parse_loadavg("0.52 1.5 12.07 2/1234 5678\n");
        assert_eq!(find(&s, "linux.load.avg1_x100", &[]), &Value::Unsigned(52));
        assert_eq!(find(&s, "linux.load.avg5_x100", &[]), &Value::Unsigned(150));
        assert_eq!(find(&s, "linux.load.avg15_x100", &[]), &Value::Unsigned(1207));
        assert_eq!(find(&s, "linux.load.threads", &[]), &Value::Unsigned(1234));
    }

    #[test]
    fn net_dev_is_indexed_by_interface() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n    lo: 100 2 0 0 0 0 0 0 100 2 0 0 0 0 0 0\n  eth0: 5000 7 0 0 0 0 0 0 300 3 0 0 0 0 0 0\n";
        let s = parse_net_dev(text, |name, pos| if name == "eth0" { 2 } else { pos });
        assert_eq!(find(&s, "linux.net.rx_bytes", &[2]), &Value::Unsigned(5000));
        assert_eq!(find(&s, "linux.net.tx_packets", &[1]), &Value::Unsigned(2));
        assert_eq!(find(&s, "linux.net.name", &[2]), &Value::from("eth0"));
    }

    #[test]
    fn diskstats_are_indexed_by_major_minor_and_idle_devices_are_skipped() {
        let text =
            "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0\n   8       0 sda 1234 5 6789 10 55 1 80 20 0 30 40\n";
        let s = parse_diskstats(text);
        assert_eq!(find(&s, "linux.disk.reads", &[8, 0]), &Value::Unsigned(1234));
        assert_eq!(find(&s, "linux.disk.name", &[8, 0]), &Value::from("sda"));
        assert!(s.iter().all(|x| x.index != [7, 0]));
    }

    #[test]
    fn the_real_proc_has_cpus_memory_and_a_time() {
        let mut src = ProcSource::new("/proc", "/sys");
        let s = src.sample();
        assert_eq!(&*s[0].name, "smon.time");
        assert!(s.iter().any(|x| &*x.name == "linux.cpu.idle" && x.index == [0]));
        assert!(s.iter().any(|x| &*x.name == "linux.mem.total"));
        assert!(s.iter().any(|x| &*x.name == "linux.uptime"));
    }
}
