//! Build information for `telemon --version` and `telemon_build_info` (the labels every Prometheus exporter has):
//! the git revision (with `-dirty` when the work tree differs from it), the branch, and the Rust version, as
//! `TELEMON_BUILD_REVISION`, `TELEMON_BUILD_BRANCH` and `TELEMON_BUILD_RUSTVERSION` (`1.85.0`) for `env!`.
//!
//! A build outside git (a source tarball, git missing) still builds and says `unknown`, unless
//! `TELEMON_GIT_REVISION` and `TELEMON_GIT_BRANCH` give the values (a packager who knows them; `cargo xtask deb`
//! sets them from `describe`, so that a package's `-dirty` is exact).
//!
//! The script runs again when `HEAD` moves (a commit, a checkout: `.git/HEAD`, the branch's ref and
//! `packed-refs`), when those variables change, and when the compiler does; an edit of a clean tree alone does
//! not make it run (that would rebuild telemon and all its tests on every edit), so a debug build may say
//! clean until the next commit.
//!
//! `xtask` and `tests/build_info.rs` include this file as a module (`#[path]`) to call `describe`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What is printed when a value cannot be known.
const UNKNOWN: &str = "unknown";

/// Overrides of what git says, for a build from a tarball whose revision is known.
const REVISION_OVERRIDE: &str = "TELEMON_GIT_REVISION";
const BRANCH_OVERRIDE: &str = "TELEMON_GIT_BRANCH";

#[allow(dead_code)]
fn main() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_default();
    let tree = describe(&manifest_dir);
    for path in &tree.watched {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    // With no path at all (outside git), cargo's default would rerun the script on every change of the package.
    println!("cargo:rerun-if-changed=build.rs");
    for name in [REVISION_OVERRIDE, BRANCH_OVERRIDE] {
        println!("cargo:rerun-if-env-changed={name}");
    }
    let revision = std::env::var(REVISION_OVERRIDE).ok().filter(|v| !v.is_empty()).unwrap_or(tree.revision);
    let branch = std::env::var(BRANCH_OVERRIDE).ok().filter(|v| !v.is_empty()).unwrap_or(tree.branch);
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let rust = rust_version(Command::new(rustc).arg("--version").output().ok().as_ref());
    println!("cargo:rustc-env=TELEMON_BUILD_REVISION={revision}");
    println!("cargo:rustc-env=TELEMON_BUILD_BRANCH={branch}");
    println!("cargo:rustc-env=TELEMON_BUILD_RUSTVERSION={rust}");
}

/// What git says of the work tree that holds a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// The commit `HEAD` names (40 hex digits), with `-dirty` when a tracked file differs from it or an
    /// untracked one is there (`git status --porcelain`); `unknown` outside git.
    pub revision: String,
    /// The branch `HEAD` is on; `HEAD` when detached (as `git rev-parse --abbrev-ref HEAD` says it, and as
    /// Prometheus's builds label it); `unknown` outside git.
    pub branch: String,
    /// The files whose change moves `HEAD`: `.git/HEAD`, the branch's ref and `packed-refs` (those that exist:
    /// cargo reruns a script on every build while a watched file is missing).
    pub watched: Vec<PathBuf>,
}

/// Asks git about the work tree holding `dir`. Never fails: what git cannot say is `unknown`.
pub fn describe(dir: &Path) -> Tree {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            // `git status` would otherwise refresh the index, a write into the work tree during a build.
            .env("GIT_OPTIONAL_LOCKS", "0")
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
    };
    let Some(commit) = git(&["rev-parse", "--verify", "--quiet", "HEAD"]).filter(|c| !c.is_empty()) else {
        return Tree { revision: UNKNOWN.into(), branch: UNKNOWN.into(), watched: Vec::new() };
    };
    let dirty = git(&["status", "--porcelain"]).is_none_or(|status| !status.is_empty());
    let branch = git(&["rev-parse", "--abbrev-ref", "HEAD"]).filter(|b| !b.is_empty());
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "--quiet", "HEAD"]));
    let watched = watched
        .iter()
        .filter_map(|name| git(&["rev-parse", "--git-path", name]))
        .map(|path| dir.join(path))
        .filter(|path| path.is_file())
        .collect();
    Tree {
        revision: if dirty { format!("{commit}-dirty") } else { commit },
        branch: branch.unwrap_or_else(|| UNKNOWN.into()),
        watched,
    }
}

/// The version in `rustc --version`'s answer (`rustc 1.85.0 (4d91de4e4 2025-02-17)` -> `1.85.0`), or `unknown`.
pub fn rust_version(answer: Option<&std::process::Output>) -> String {
    answer
        .filter(|out| out.status.success())
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout);
            let version = text.split_whitespace().nth(1)?;
            version.starts_with(|c: char| c.is_ascii_digit()).then(|| version.to_owned())
        })
        .unwrap_or_else(|| UNKNOWN.into())
}
