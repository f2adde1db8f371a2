//! `cargo xtask bench --table`: every codec against its baseline in one run, in one table.
//!
//! Each protocol crate's criterion bench has a count mode (the `bench-harness` crate):
//! `TELEMON_COUNT_LIST=1` lists its cases (crate, group, name, baseline, throughput, iterations), and
//! `TELEMON_COUNT_CASE=group/name` runs one case's set-up and, inside `telemon_counted`, its routine. The table
//! puts criterion's time (mean, `target/criterion/**/new/estimates.json`) next to the instructions callgrind
//! counts inside `telemon_counted` (Ir per iteration): instruction counts do not move with the neighbours'
//! load, so they are the figures to quote. Each ratio is the case's cost divided by its baseline's, the case
//! of the same group named in the `vs` column; the `trickle_*` groups compare a largest legal message fed a
//! byte per read (or call) with the same message whole.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};

/// Criterion settings when the arguments do not name them: enough for stable means, short enough for one run.
const DEFAULT_TIMES: [(&str, &str); 2] = [("--warm-up-time", "1"), ("--measurement-time", "2")];

/// One case, as its bench binary lists it.
#[derive(Debug, Clone)]
struct Case {
    bin: PathBuf,
    dir: PathBuf,
    krate: String,
    group: String,
    name: String,
    baseline: Option<String>,
    /// `bytes` or `elements`, and how many per iteration.
    unit: String,
    per_iter: u64,
    count_iters: u64,
}

impl Case {
    fn id(&self) -> String {
        format!("{}/{}", self.group, self.name)
    }
}

/// A case's measurements.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    /// Criterion's mean, in ns per iteration.
    ns: Option<f64>,
    /// Instructions per iteration, under callgrind.
    ir: Option<f64>,
}

pub fn bench_table(root: &Path, args: &[String]) -> Result<()> {
    let valgrind = Command::new("valgrind").arg("--version").output();
    if !valgrind.as_ref().is_ok_and(|o| o.status.success()) {
        bail!("`cargo xtask bench --table` counts instructions with valgrind's callgrind: install valgrind");
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));

    let benches = build_benches()?;
    let mut cases = Vec::new();
    for bench in &benches {
        let listed = list_cases(bench)?;
        if listed.is_empty() {
            eprintln!("[xtask] {} has no count mode; left out of the table", bench.bin.display());
        }
        cases.extend(listed);
    }
    if cases.is_empty() {
        bail!("no bench listed any case");
    }

    // Criterion, one binary at a time and nothing else running: the time column.
    let criterion_home = target.join("criterion");
    let started = SystemTime::now();
    let mut criterion_args: Vec<String> = vec!["--bench".into(), "--noplot".into()];
    for (flag, value) in DEFAULT_TIMES {
        if !args.iter().any(|a| a == flag || a.starts_with(&format!("{flag}="))) {
            criterion_args.extend([flag.to_string(), value.to_string()]);
        }
    }
    criterion_args.extend(args.iter().cloned());
    for bench in benches.iter().filter(|b| cases.iter().any(|c| c.bin == b.bin)) {
        eprintln!("[xtask] criterion: {}", bench.src.display());
        // Criterion's report goes to stderr with its progress: stdout is the table's.
        let status = Command::new(&bench.bin)
            .args(&criterion_args)
            .current_dir(&bench.dir)
            .env("CRITERION_HOME", &criterion_home)
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("running {}", bench.bin.display()))?;
        if !status.success() {
            bail!("{} failed: {status}", bench.bin.display());
        }
    }
    let times = read_estimates(&criterion_home, started)?;
    let mut figures: HashMap<(String, String), Figures> = HashMap::new();
    for case in &cases {
        if let Some(&ns) = times.get(&(case.group.clone(), case.name.clone())) {
            figures.insert((case.krate.clone(), case.id()), Figures { ns: Some(ns), ir: None });
        }
    }
    // The cases criterion skipped (a filter in the arguments) are left out.
    cases.retain(|c| figures.contains_key(&(c.krate.clone(), c.id())));
    if cases.is_empty() {
        bail!("criterion measured no case (is a filter or --test among the arguments?)");
    }

    // Callgrind, in parallel: instruction counts do not depend on the load.
    let out_dir = target.join("bench-table");
    std::fs::create_dir_all(&out_dir)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(cases.len());
    eprintln!("[xtask] callgrind: {} cases, {threads} at a time", cases.len());
    let next = AtomicUsize::new(0);
    let counted: Mutex<Vec<(usize, Result<f64>)>> = Mutex::default();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let result = count(case, &out_dir.join(format!("callgrind.{i}.out")));
                match &result {
                    Ok(ir) => eprintln!("[xtask]   {} {}: {} Ir/iter", case.krate, case.id(), thousands(*ir)),
                    Err(e) => eprintln!("[xtask]   {} {}: {e:#}", case.krate, case.id()),
                }
                counted.lock().unwrap().push((i, result));
            });
        }
    });
    let mut failed = Vec::new();
    for (i, result) in counted.into_inner().unwrap() {
        let case = &cases[i];
        match result {
            Ok(ir) => figures.get_mut(&(case.krate.clone(), case.id())).expect("timed").ir = Some(ir),
            Err(_) => failed.push(format!("{} {}", case.krate, case.id())),
        }
    }

    let table = table(&cases, &figures, &criterion_args[2..]);
    println!("{table}");
    let out = target.join("bench-table.md");
    std::fs::write(&out, &table).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("[xtask] written to {}", out.display());
    if !failed.is_empty() {
        bail!("callgrind failed for {}", failed.join(", "));
    }
    Ok(())
}

/// A criterion bench executable, its package directory and its source file.
struct Bench {
    bin: PathBuf,
    dir: PathBuf,
    src: PathBuf,
}

/// Builds every criterion bench of the workspace (release, as `cargo bench` does) and returns them.
fn build_benches() -> Result<Vec<Bench>> {
    let out = Command::new(super::cargo())
        .args([
            "bench",
            "--no-run",
            "--workspace",
            "--bench",
            "*",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo bench --no-run")?;
    if !out.status.success() {
        bail!("building the benches failed: {}", out.status);
    }
    let mut benches = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = json::parse(line) else { continue };
        if msg.get("reason").and_then(json::Value::as_str) != Some("compiler-artifact") {
            continue;
        }
        let Some(target) = msg.get("target") else { continue };
        let is_bench = target
            .get("kind")
            .and_then(json::Value::as_array)
            .is_some_and(|kinds| kinds.iter().any(|k| k.as_str() == Some("bench")));
        let (Some(bin), Some(manifest), Some(src)) = (
            msg.get("executable").and_then(json::Value::as_str),
            msg.get("manifest_path").and_then(json::Value::as_str),
            target.get("src_path").and_then(json::Value::as_str),
        ) else {
            continue;
        };
        if is_bench && !benches.iter().any(|b: &Bench| b.bin == Path::new(bin)) {
            let dir = Path::new(manifest).parent().context("manifest path")?.to_path_buf();
            benches.push(Bench { bin: bin.into(), dir, src: src.into() });
        }
    }
    if benches.is_empty() {
        bail!("cargo built no bench executable");
    }
    Ok(benches)
}

/// The cases a bench binary lists in count mode (none for a bench without one: `--list` makes a plain
/// criterion bench list its benchmarks and exit).
fn list_cases(bench: &Bench) -> Result<Vec<Case>> {
    let out = Command::new(&bench.bin)
        .arg("--list")
        .current_dir(&bench.dir)
        .env("TELEMON_COUNT_LIST", "1")
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("listing the cases of {}", bench.bin.display()))?;
    if !out.status.success() {
        bail!("listing the cases of {} failed: {}", bench.bin.display(), out.status);
    }
    let mut cases = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rest) = line.strip_prefix("case\t") else { continue };
        let fields: Vec<&str> = rest.split('\t').collect();
        let [krate, group, name, baseline, unit, per_iter, count_iters] = fields[..] else {
            bail!("{}: a case line with {} fields: {line:?}", bench.bin.display(), fields.len());
        };
        cases.push(Case {
            bin: bench.bin.clone(),
            dir: bench.dir.clone(),
            krate: krate.into(),
            group: group.into(),
            name: name.into(),
            baseline: (!baseline.is_empty()).then(|| baseline.into()),
            unit: unit.into(),
            per_iter: per_iter.parse().with_context(|| format!("throughput in {line:?}"))?,
            count_iters: count_iters.parse().with_context(|| format!("iterations in {line:?}"))?,
        });
    }
    Ok(cases)
}

/// Criterion's mean time (ns) per (group, function), for the benchmarks measured since `since`.
fn read_estimates(home: &Path, since: SystemTime) -> Result<HashMap<(String, String), f64>> {
    let mut found = HashMap::new();
    let mut dirs = vec![home.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.file_name().is_none_or(|n| n != "benchmark.json")
                || path.parent().and_then(Path::file_name).is_none_or(|n| n != "new")
            {
                continue;
            }
            let estimates = path.with_file_name("estimates.json");
            let fresh = std::fs::metadata(&estimates).and_then(|m| m.modified()).is_ok_and(|t| t >= since);
            if !fresh {
                continue;
            }
            let id = json::parse(&std::fs::read_to_string(&path)?)
                .with_context(|| format!("parsing {}", path.display()))?;
            let est = json::parse(&std::fs::read_to_string(&estimates)?)
                .with_context(|| format!("parsing {}", estimates.display()))?;
            let (Some(group), Some(function), Some(mean)) = (
                id.get("group_id").and_then(json::Value::as_str),
                id.get("function_id").and_then(json::Value::as_str),
                est.get("mean").and_then(|m| m.get("point_estimate")).and_then(json::Value::as_f64),
            ) else {
                bail!("unexpected contents in {}", path.parent().unwrap().display());
            };
            found.insert((group.to_owned(), function.to_owned()), mean);
        }
    }
    Ok(found)
}

/// Runs one case under callgrind and returns its instructions per iteration.
fn count(case: &Case, out_file: &Path) -> Result<f64> {
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "-q", "--toggle-collect=*telemon_counted*"])
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(&case.bin)
        .current_dir(&case.dir)
        .env("TELEMON_COUNT_CASE", case.id())
        .stdin(Stdio::null())
        .output()
        .context("running valgrind")?;
    if !out.status.success() {
        bail!("valgrind failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let text =
        std::fs::read_to_string(out_file).with_context(|| format!("reading {}", out_file.display()))?;
    let total = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    let ir = total("totals:").or_else(|| total("summary:")).context("no totals in the callgrind output")?;
    if ir == 0 {
        bail!("callgrind counted nothing: is `telemon_counted` in the bench?");
    }
    Ok(ir as f64 / case.count_iters as f64)
}

fn table(cases: &[Case], figures: &HashMap<(String, String), Figures>, criterion_args: &[String]) -> String {
    let mut rows: Vec<[String; 10]> = vec![[
        "crate",
        "group",
        "case",
        "vs",
        "time/iter",
        "throughput",
        "time ÷ vs",
        "Ir/iter",
        "Ir/unit",
        "Ir ÷ vs",
    ]
    .map(String::from)];
    let mut sorted: Vec<&Case> = cases.iter().collect();
    // By crate, then as each bench lists its cases.
    sorted.sort_by(|a, b| a.krate.cmp(&b.krate));
    for case in sorted {
        let f = figures[&(case.krate.clone(), case.id())];
        let base = case
            .baseline
            .as_ref()
            .and_then(|b| figures.get(&(case.krate.clone(), format!("{}/{b}", case.group))));
        let ratio = |of: Option<f64>, to: Option<f64>| match (&case.baseline, of, to) {
            (None, ..) => "—".to_owned(),
            (Some(_), Some(of), Some(to)) if to > 0.0 => format!("{}×", significant(of / to)),
            (Some(_), ..) => "n/a".to_owned(),
        };
        let (unit, per) = if case.unit == "bytes" { ("B", "MiB/s") } else { ("elem", "Melem/s") };
        let throughput = f.ns.map_or("n/a".into(), |ns| {
            let per_s = case.per_iter as f64 / (ns * 1e-9);
            let per_s = if case.unit == "bytes" { per_s / (1024.0 * 1024.0) } else { per_s / 1e6 };
            format!("{} {per}", significant(per_s))
        });
        rows.push([
            case.krate.clone(),
            case.group.clone(),
            case.name.clone(),
            case.baseline.clone().unwrap_or_else(|| "(baseline)".into()),
            f.ns.map_or("n/a".into(), duration),
            throughput,
            ratio(f.ns, base.and_then(|b| b.ns)),
            f.ir.map_or("n/a".into(), thousands),
            f.ir.map_or("n/a".into(), |ir| format!("{}/{unit}", significant(ir / case.per_iter as f64))),
            ratio(f.ir, base.and_then(|b| b.ir)),
        ]);
    }
    let widths: Vec<usize> =
        (0..10).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let numeric = |i: usize| i >= 4;
    let mut t = String::new();
    for (n, row) in rows.iter().enumerate() {
        t.push('|');
        for (i, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[i] - cell.chars().count());
            if numeric(i) && n > 0 {
                let _ = write!(t, " {pad}{cell} |");
            } else {
                let _ = write!(t, " {cell}{pad} |");
            }
        }
        t.push('\n');
        if n == 0 {
            t.push('|');
            for (i, w) in widths.iter().enumerate() {
                let dashes = "-".repeat(w.saturating_sub(1).max(2));
                t.push_str(&if numeric(i) { format!(" {dashes}: |") } else { format!(" {dashes}- |") });
            }
            t.push('\n');
        }
    }
    let _ = write!(
        t,
        "\ntime: criterion's mean ({}); Ir: instructions per iteration counted by valgrind's callgrind inside \
         `telemon_counted` (set-up excluded, as from criterion's timing), the figures to quote. \
         `x ÷ vs`: the case's cost over its baseline's (below 1: cheaper than the baseline). \
         `trickle_*` groups: a largest legal message fed a byte per read (or call) against the same message whole.\n",
        criterion_args.join(" ")
    );
    t
}

/// A time in ns with three significant digits and a unit.
fn duration(ns: f64) -> String {
    let (v, unit) = match ns {
        ns if ns < 1e3 => (ns, "ns"),
        ns if ns < 1e6 => (ns / 1e3, "µs"),
        ns if ns < 1e9 => (ns / 1e6, "ms"),
        ns => (ns / 1e9, "s"),
    };
    format!("{} {unit}", significant(v))
}

/// Three significant digits (more for large numbers, which keep their integer part).
fn significant(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// A count rounded to an integer, with thousands separators.
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.round());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Just enough JSON for cargo's messages and criterion's files.
mod json {
    use anyhow::{bail, Context, Result};

    #[derive(Debug, Clone, PartialEq)]
    pub enum Value {
        Null,
        Bool(bool),
        Number(f64),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }

        pub fn as_str(&self) -> Option<&str> {
            match self {
                Value::String(s) => Some(s),
                _ => None,
            }
        }

        pub fn as_f64(&self) -> Option<f64> {
            match self {
                Value::Number(n) => Some(*n),
                _ => None,
            }
        }

        pub fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(a) => Some(a),
                _ => None,
            }
        }
    }

    pub fn parse(text: &str) -> Result<Value> {
        let mut p = Parser { s: text.as_bytes(), i: 0 };
        let v = p.value()?;
        p.ws();
        if p.i != p.s.len() {
            bail!("trailing characters at {}", p.i);
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
                self.i += 1;
            }
        }

        fn eat(&mut self, c: u8) -> Result<()> {
            self.ws();
            if self.s.get(self.i) != Some(&c) {
                bail!("expected {:?} at {}", c as char, self.i);
            }
            self.i += 1;
            Ok(())
        }

        fn value(&mut self) -> Result<Value> {
            self.ws();
            let Some(&c) = self.s.get(self.i) else { bail!("unexpected end") };
            match c {
                b'{' => {
                    self.i += 1;
                    let mut fields = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(Value::Object(fields));
                    }
                    loop {
                        self.ws();
                        let key = self.string()?;
                        self.eat(b':')?;
                        fields.push((key, self.value()?));
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(Value::Object(fields));
                            }
                            _ => bail!("expected , or }} at {}", self.i),
                        }
                    }
                }
                b'[' => {
                    self.i += 1;
                    let mut items = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(Value::Array(items));
                    }
                    loop {
                        items.push(self.value()?);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(Value::Array(items));
                            }
                            _ => bail!("expected , or ] at {}", self.i),
                        }
                    }
                }
                b'"' => Ok(Value::String(self.string()?)),
                b't' => self.word("true", Value::Bool(true)),
                b'f' => self.word("false", Value::Bool(false)),
                b'n' => self.word("null", Value::Null),
                _ => {
                    let start = self.i;
                    while self.s.get(self.i).is_some_and(|c| b"+-.eE0123456789".contains(c)) {
                        self.i += 1;
                    }
                    let text = std::str::from_utf8(&self.s[start..self.i])?;
                    Ok(Value::Number(text.parse().with_context(|| format!("a number at {start}"))?))
                }
            }
        }

        fn word(&mut self, word: &str, v: Value) -> Result<Value> {
            if !self.s[self.i..].starts_with(word.as_bytes()) {
                bail!("expected {word} at {}", self.i);
            }
            self.i += word.len();
            Ok(v)
        }

        fn string(&mut self) -> Result<String> {
            if self.s.get(self.i) != Some(&b'"') {
                bail!("expected a string at {}", self.i);
            }
            self.i += 1;
            let mut out = Vec::new();
            loop {
                let Some(&c) = self.s.get(self.i) else { bail!("unterminated string") };
                self.i += 1;
                match c {
                    b'"' => return Ok(String::from_utf8(out)?),
                    b'\\' => {
                        let Some(&e) = self.s.get(self.i) else { bail!("unterminated string") };
                        self.i += 1;
                        let ch = match e {
                            b'"' => '"',
                            b'\\' => '\\',
                            b'/' => '/',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'n' => '\n',
                            b'r' => '\r',
                            b't' => '\t',
                            b'u' => {
                                let hi = self.hex4()?;
                                if (0xd800..0xdc00).contains(&hi) && self.s[self.i..].starts_with(b"\\u") {
                                    self.i += 2;
                                    let lo = self.hex4()?;
                                    let c =
                                        0x10000 + ((hi - 0xd800) << 10) + (lo.wrapping_sub(0xdc00) & 0x3ff);
                                    char::from_u32(c).unwrap_or('\u{fffd}')
                                } else {
                                    char::from_u32(hi).unwrap_or('\u{fffd}')
                                }
                            }
                            _ => bail!("bad escape at {}", self.i),
                        };
                        out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                    _ => out.push(c),
                }
            }
        }

        fn hex4(&mut self) -> Result<u32> {
            let digits = self.s.get(self.i..self.i + 4).context("short \\u escape")?;
            self.i += 4;
            Ok(u32::from_str_radix(std::str::from_utf8(digits)?, 16)?)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_cargo_and_criterion_shapes() {
            let v = parse(r#"{"reason":"compiler-artifact","target":{"kind":["bench"],"src_path":"/a/b.rs"},"executable":"/t/x","fresh":true,"n":null}"#).unwrap();
            assert_eq!(v.get("reason").and_then(Value::as_str), Some("compiler-artifact"));
            assert_eq!(
                v.get("target").and_then(|t| t.get("kind")).and_then(Value::as_array).unwrap().len(),
                1
            );
            let e =
                parse(r#"{"mean":{"confidence_interval":{"lower_bound":1.5e3},"point_estimate":1234.5}}"#)
                    .unwrap();
            assert_eq!(
                e.get("mean").and_then(|m| m.get("point_estimate")).and_then(Value::as_f64),
                Some(1234.5)
            );
            let s = parse(r#""a\"b\\c\u00e9\ud83d\ude00 ⍵""#).unwrap();
            assert_eq!(s.as_str(), Some("a\"b\\cé😀 ⍵"));
            assert!(parse("{\"a\":1,}").is_err());
        }
    }
}
