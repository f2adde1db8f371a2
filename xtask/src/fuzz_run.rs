//! `cargo xtask fuzz --seconds N [--jobs J] [--minimize]`: a fuzzing campaign over every target, J at a time,
//! with a summary table (executions, corpus, crashes) and, with `--minimize`, the seed corpora grown by what
//! the run found and minimised with `cargo fuzz cmin`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

/// What one target's run gave.
struct Outcome {
    target: String,
    runs: u64,
    seconds: u64,
    corpus: usize,
    crashes: usize,
    seeds: Option<(usize, usize)>,
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).filter(|e| e.path().is_file()).count())
        .unwrap_or(0)
}

/// libFuzzer's last "Done N runs in S second(s)" line.
fn done_line(log: &str) -> (u64, u64) {
    log.lines()
        .rev()
        .find_map(|l| {
            let rest = l.strip_prefix("Done ")?;
            let mut w = rest.split_whitespace();
            let runs = w.next()?.parse().ok()?;
            let secs = w.nth(2)?.parse().ok()?;
            Some((runs, secs))
        })
        .unwrap_or((0, 0))
}

fn fuzz_one(root: &Path, target: &str, seconds: u64, minimize: bool) -> Result<Outcome> {
    let fuzz_dir = root.join("fuzz");
    let out_dir = fuzz_dir.join("artifacts").join(target);
    let work = out_dir.join("corpus");
    std::fs::create_dir_all(&work)?;
    let seeds = fuzz_dir.join("corpus").join(target);
    let log_path = out_dir.join("fuzz.log");
    let log = std::fs::File::create(&log_path)?;
    let status = Command::new(super::cargo())
        .current_dir(&fuzz_dir)
        .args(["fuzz", "run", target, "-s", "none"])
        .arg(&work)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", out_dir.display()))
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .with_context(|| format!("running cargo fuzz on {target}"))?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let (runs, secs) = done_line(&text);
    let crashes = std::fs::read_dir(&out_dir)?
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("crash-")
                || n.starts_with("oom-")
                || n.starts_with("timeout-")
                || n.starts_with("leak-")
        })
        .count();
    if !status.success() && crashes == 0 {
        bail!("cargo fuzz run {target} failed ({status}); see {}", log_path.display());
    }
    let mut seeds_change = None;
    if minimize && crashes == 0 {
        // The seeds and what the run found, minimised together into the seed directory.
        let before = count_files(&seeds);
        let merged = out_dir.join("merged");
        let _ = std::fs::remove_dir_all(&merged);
        std::fs::create_dir_all(&merged)?;
        for dir in [&seeds, &work] {
            for e in std::fs::read_dir(dir)?.filter_map(Result::ok) {
                if e.path().is_file() {
                    std::fs::copy(e.path(), merged.join(e.file_name()))?;
                }
            }
        }
        let status = Command::new(super::cargo())
            .current_dir(&fuzz_dir)
            .args(["fuzz", "cmin", target, "-s", "none"])
            .arg(&merged)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("cargo fuzz cmin {target} failed ({status})");
        }
        std::fs::remove_dir_all(&seeds)?;
        std::fs::rename(&merged, &seeds)?;
        seeds_change = Some((before, count_files(&seeds)));
    }
    Ok(Outcome {
        target: target.to_owned(),
        runs,
        seconds: secs,
        corpus: count_files(&work),
        crashes,
        seeds: seeds_change,
    })
}

/// Fuzzes `targets` for `seconds` each, `jobs` at a time, and prints one table.
pub fn campaign(root: &Path, targets: &[String], seconds: u64, jobs: usize, minimize: bool) -> Result<()> {
    // One build first, so that parallel runs do not fight over the build directory.
    super::run(
        Command::new(super::cargo()).current_dir(root.join("fuzz")).args(["fuzz", "build", "-s", "none"]),
    )?;
    let queue: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(targets.iter().rev().cloned().collect()));
    let results: Arc<Mutex<Vec<Result<Outcome>>>> = Arc::default();
    let root: PathBuf = root.to_owned();
    let workers: Vec<_> = (0..jobs.max(1))
        .map(|_| {
            let (queue, results, root) = (queue.clone(), results.clone(), root.clone());
            std::thread::spawn(move || loop {
                let Some(target) = queue.lock().unwrap().pop() else { return };
                eprintln!("[xtask] fuzzing {target} for {seconds}s");
                let outcome = fuzz_one(&root, &target, seconds, minimize);
                results.lock().unwrap().push(outcome);
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let mut results = std::mem::take(&mut *results.lock().unwrap());
    results.sort_by(|a, b| match (a, b) {
        (Ok(a), Ok(b)) => a.target.cmp(&b.target),
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Less,
    });
    let mut table = String::from(
        "| target | executions | seconds | execs/s | new corpus inputs | crashes | seed corpus (before → after cmin) |\n\
         |---|---:|---:|---:|---:|---:|---|\n",
    );
    let mut failed = false;
    for r in &results {
        match r {
            Ok(o) => {
                let rate = o.runs.checked_div(o.seconds).unwrap_or(0);
                let seeds = o.seeds.map_or("-".to_owned(), |(b, a)| format!("{b} → {a}"));
                table.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    o.target, o.runs, o.seconds, rate, o.corpus, o.crashes, seeds
                ));
                failed |= o.crashes > 0;
            }
            Err(e) => {
                table.push_str(&format!("| error: {e:#} |||||||\n"));
                failed = true;
            }
        }
    }
    println!("{table}");
    let out = root.join("target/fuzz-campaign.md");
    std::fs::write(&out, &table)?;
    eprintln!("[xtask] written to {}", out.display());
    if failed {
        bail!("a target crashed or failed: see fuzz/artifacts/");
    }
    Ok(())
}
