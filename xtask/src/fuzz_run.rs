//! `cargo xtask fuzz --seconds N [--jobs J] [--minimize]`: a fuzzing campaign over every target, J at a time,
//! with a summary table (executions, coverage, corpus, crashes) and, with `--minimize`, the seed corpora grown by
//! what the run found and minimised with `cargo fuzz cmin`, keeping every named seed (the inputs the tests read
//! by name).
//!
//! Coverage is libFuzzer's `cov:` (edges) and `ft:` (features) of the seed corpus alone, replayed once with
//! `-runs=0` before the run and, with `--minimize`, again after: what the committed corpus covers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

/// libFuzzer's coverage figures: edges (`cov:`) and features (`ft:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Coverage {
    edges: u64,
    features: u64,
}

impl std::fmt::Display for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.edges, self.features)
    }
}

/// How `--minimize` changed the seed corpus: its inputs with the run's finds merged in, the inputs `cargo fuzz
/// cmin` kept besides the named seeds, the named seeds (always kept), and what the result covers.
struct Minimized {
    merged: usize,
    kept: usize,
    named: usize,
    coverage: Coverage,
}

/// What one target's run gave.
struct Outcome {
    target: String,
    runs: u64,
    seconds: u64,
    corpus: usize,
    crashes: usize,
    seeds_before: usize,
    coverage_before: Coverage,
    coverage_done: Coverage,
    minimized: Option<Minimized>,
}

fn files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default()
}

fn count_files(dir: &Path) -> usize {
    files(dir).len()
}

/// A seed written by hand or by a test, not by libFuzzer (which names an input by the SHA-1 of its bytes):
/// tests read these by name, so minimising never drops them.
fn is_named_seed(name: &str) -> bool {
    !(name.len() == 40 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
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

/// The coverage of libFuzzer's last status line of `event` (`INITED`: the corpus loaded; `DONE`: the run's
/// end), e.g. `#1024 DONE   cov: 412 ft: 1733 corp: 181/9271b ...`.
fn status_coverage(log: &str, event: &str) -> Option<Coverage> {
    log.lines().rev().find_map(|l| {
        let mut w = l.split_whitespace();
        w.next().filter(|n| n.starts_with('#'))?;
        if w.next()? != event {
            return None;
        }
        let mut value = |key: &str| w.by_ref().skip_while(|t| *t != key).nth(1)?.parse().ok();
        Some(Coverage { edges: value("cov:")?, features: value("ft:")? })
    })
}

/// Runs `cargo fuzz run` for `target` with `args` (corpus directories, then libFuzzer's flags after `--`),
/// its output into `log_path`.
fn cargo_fuzz_run(
    fuzz_dir: &Path,
    target: &str,
    args: &[String],
    log_path: &Path,
) -> Result<std::process::ExitStatus> {
    let log = std::fs::File::create(log_path)?;
    Command::new(super::cargo())
        .current_dir(fuzz_dir)
        .args(["fuzz", "run", target, "-s", "none"])
        .args(args)
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .with_context(|| format!("running cargo fuzz on {target}"))
}

/// What the inputs of `corpus` cover together: each run once (`-runs=0`), and libFuzzer's `INITED` line.
fn corpus_coverage(fuzz_dir: &Path, target: &str, corpus: &Path, out_dir: &Path) -> Result<Coverage> {
    let log_path = out_dir.join("replay.log");
    let args = [corpus.display().to_string(), "--".into(), "-runs=0".into()];
    let status = cargo_fuzz_run(fuzz_dir, target, &args, &log_path)?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    match status_coverage(&text, "INITED") {
        Some(c) if status.success() => Ok(c),
        _ => bail!("replaying {} failed ({status}); see {}", corpus.display(), log_path.display()),
    }
}

/// Puts every named seed of `seeds` into `minimized` (what `cargo fuzz cmin` left of them and the run's finds).
/// cmin writes the inputs it keeps under their SHA-1: the copy of a named seed it kept is replaced by the named
/// file, and one it dropped is put back whatever it adds, so that the tests still find every seed they read by
/// name. Returns the inputs kept besides the named seeds, and the named seeds.
fn keep_named_seeds(seeds: &Path, minimized: &Path) -> Result<(usize, usize)> {
    let mut kept = files(minimized);
    let mut named = 0;
    for file in files(seeds) {
        let name = file.file_name().context("a file name")?;
        if !is_named_seed(&name.to_string_lossy()) {
            continue;
        }
        let bytes = std::fs::read(&file)?;
        if let Some(i) = kept.iter().position(|k| std::fs::read(k).is_ok_and(|b| b == bytes)) {
            std::fs::remove_file(kept.swap_remove(i))?;
        }
        std::fs::copy(&file, minimized.join(name))?;
        named += 1;
    }
    Ok((kept.len(), named))
}

fn fuzz_one(root: &Path, target: &str, seconds: u64, minimize: bool) -> Result<Outcome> {
    let fuzz_dir = root.join("fuzz");
    let out_dir = fuzz_dir.join("artifacts").join(target);
    let work = out_dir.join("corpus");
    std::fs::create_dir_all(&work)?;
    let seeds = fuzz_dir.join("corpus").join(target);
    let seeds_before = count_files(&seeds);
    let coverage_before = corpus_coverage(&fuzz_dir, target, &seeds, &out_dir)?;
    let log_path = out_dir.join("fuzz.log");
    let args = [
        work.display().to_string(),
        seeds.display().to_string(),
        "--".into(),
        format!("-max_total_time={seconds}"),
        format!("-artifact_prefix={}/", out_dir.display()),
    ];
    let status = cargo_fuzz_run(&fuzz_dir, target, &args, &log_path)?;
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
    let mut minimized = None;
    if minimize && crashes == 0 {
        // The seeds and what the run found, minimised together into the seed directory.
        let merged = out_dir.join("merged");
        let _ = std::fs::remove_dir_all(&merged);
        std::fs::create_dir_all(&merged)?;
        for file in files(&seeds).into_iter().chain(files(&work)) {
            std::fs::copy(&file, merged.join(file.file_name().context("a file name")?))?;
        }
        let merged_count = count_files(&merged);
        let cmin_log = out_dir.join("cmin.log");
        let log = std::fs::File::create(&cmin_log)?;
        let status = Command::new(super::cargo())
            .current_dir(&fuzz_dir)
            .args(["fuzz", "cmin", target, "-s", "none"])
            .arg(&merged)
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()?;
        if !status.success() {
            bail!("cargo fuzz cmin {target} failed ({status}); see {}", cmin_log.display());
        }
        let (kept, named) = keep_named_seeds(&seeds, &merged)?;
        std::fs::remove_dir_all(&seeds)?;
        std::fs::rename(&merged, &seeds)?;
        let coverage = corpus_coverage(&fuzz_dir, target, &seeds, &out_dir)?;
        minimized = Some(Minimized { merged: merged_count, kept, named, coverage });
    }
    Ok(Outcome {
        target: target.to_owned(),
        runs,
        seconds: secs,
        corpus: count_files(&work),
        crashes,
        seeds_before,
        coverage_before,
        coverage_done: status_coverage(&text, "DONE").unwrap_or_default(),
        minimized,
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
        "| target | executions | seconds | execs/s | crashes | seeds' coverage before (cov/ft) | run's end (cov/ft) \
         | new corpus inputs | seed corpus: before → merged → after cmin + named seeds | seeds' coverage after |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n",
    );
    let mut failed = false;
    for r in &results {
        match r {
            Ok(o) => {
                let rate = o.runs.checked_div(o.seconds).unwrap_or(0);
                let (seeds, after) = match &o.minimized {
                    Some(m) => (
                        format!("{} → {} → {} + {}", o.seeds_before, m.merged, m.kept, m.named),
                        m.coverage.to_string(),
                    ),
                    None => (o.seeds_before.to_string(), "-".to_owned()),
                };
                table.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    o.target,
                    o.runs,
                    o.seconds,
                    rate,
                    o.crashes,
                    o.coverage_before,
                    o.coverage_done,
                    o.corpus,
                    seeds,
                    after
                ));
                failed |= o.crashes > 0;
            }
            Err(e) => {
                table.push_str(&format!("| error: {e:#} |||||||||\n"));
                failed = true;
            }
        }
    }
    println!("{table}");
    // One file per campaign of one target, so that campaigns run side by side do not overwrite each other.
    let name = match targets {
        [one] => format!("fuzz-campaign-{one}.md"),
        _ => "fuzz-campaign.md".to_owned(),
    };
    let out = root.join("target").join(name);
    std::fs::write(&out, &table)?;
    eprintln!("[xtask] written to {}", out.display());
    if failed {
        bail!("a target crashed or failed: see fuzz/artifacts/");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_status_lines() {
        let log = "INFO: seed corpus: files: 12 min: 1b max: 18b total: 121b rss: 31Mb\n\
                   #13\tINITED cov: 96 ft: 97 corp: 11/110b exec/s: 0 rss: 32Mb\n\
                   #1048576\tpulse  cov: 400 ft: 1500 corp: 150/4Kb lim: 4096 exec/s: 1000 rss: 60Mb\n\
                   #2097152\tDONE   cov: 412 ft: 1733 corp: 181/9271b lim: 4096 exec/s: 3495 rss: 61Mb\n\
                   Done 2097152 runs in 600 second(s)\n";
        assert_eq!(status_coverage(log, "INITED"), Some(Coverage { edges: 96, features: 97 }));
        assert_eq!(status_coverage(log, "DONE"), Some(Coverage { edges: 412, features: 1733 }));
        assert_eq!(done_line(log), (2_097_152, 600));
        assert_eq!(status_coverage("no status here\n#5\tINITED exec/s: 0\n", "INITED"), None);
    }

    #[test]
    fn named_seeds_are_those_libfuzzer_did_not_name() {
        assert!(!is_named_seed("0a4d55a8d778e5022fab701977c5d840bbc486d0"));
        for name in
            ["empty", "bad_plain_password.yml", "seed-39255186", "0A4D55A8D778E5022FAB701977C5D840BBC486D0"]
        {
            assert!(is_named_seed(name), "{name}");
        }
    }

    #[test]
    fn minimising_keeps_every_named_seed_once() {
        let root = std::env::temp_dir().join(format!("xtask-named-seeds-{}", std::process::id()));
        let (seeds, minimized) = (root.join("seeds"), root.join("minimized"));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&seeds).unwrap();
        std::fs::create_dir_all(&minimized).unwrap();
        let hash = |c: char| c.to_string().repeat(40);
        // Before cmin: two named seeds and one libFuzzer found.
        std::fs::write(seeds.join("kept.yml"), b"kept").unwrap();
        std::fs::write(seeds.join("dropped.yml"), b"dropped").unwrap();
        std::fs::write(seeds.join(hash('a')), b"found").unwrap();
        // After cmin: the first named seed under a SHA-1 name, the second gone, a new find.
        std::fs::write(minimized.join(hash('b')), b"kept").unwrap();
        std::fs::write(minimized.join(hash('c')), b"new find").unwrap();
        assert_eq!(keep_named_seeds(&seeds, &minimized).unwrap(), (1, 2));
        let mut names: Vec<String> =
            files(&minimized).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, [hash('c'), "dropped.yml".to_owned(), "kept.yml".to_owned()]);
        assert_eq!(std::fs::read(minimized.join("dropped.yml")).unwrap(), b"dropped");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
