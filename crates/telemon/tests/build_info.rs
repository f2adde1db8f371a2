//! Build information (issue 48): `telemon --version` and `telemon_build_info{branch,revision,rustversion,version}`
//! say the same git revision (with `-dirty`), branch and Rust version, and the build script that finds them says
//! `unknown` outside git instead of failing the build.
//!
//! The script's reading of git (`build.rs`, included here as a module) is tested on repositories made for the test:
//! clean, dirty, untracked, detached, packed refs, and a directory outside git. Those tests need `git`; without it
//! they fail under `CI=true` and skip loudly elsewhere.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use telemon::build_info::{BRANCH, LONG_VERSION, REVISION, RUST_VERSION, VERSION};

#[allow(dead_code)]
#[path = "../build.rs"]
mod build_script;

/// The checkout this test was built from.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

/// A repository with one commit of `file` on branch `trunk`.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "--quiet", "--initial-branch", "trunk"]);
    std::fs::write(dir.path().join("file"), "one\n").unwrap();
    git(dir.path(), &["add", "file"]);
    git(
        dir.path(),
        &["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "--quiet", "-m", "one"],
    );
    dir
}

#[test]
fn outside_git_everything_is_unknown_and_nothing_is_watched() {
    if support::need_on_path("outside_git_everything_is_unknown", "git", "apt-get install git").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tree = build_script::describe(dir.path());
    assert_eq!(
        tree,
        build_script::Tree { revision: "unknown".into(), branch: "unknown".into(), watched: vec![] }
    );
}

#[test]
fn a_repository_gives_its_commit_branch_and_dirt() {
    if support::need_on_path("a_repository_gives_its_commit_branch_and_dirt", "git", "apt-get install git")
        .is_none()
    {
        return;
    }
    let repo = repository();
    let dir = repo.path();
    let commit = git(dir, &["rev-parse", "HEAD"]);
    assert_eq!(commit.len(), 40);
    let tree = build_script::describe(dir);
    assert_eq!((tree.revision.as_str(), tree.branch.as_str()), (commit.as_str(), "trunk"));
    // HEAD, and the branch's loose ref (no packed-refs yet: a missing file would rerun the script every build).
    assert_eq!(tree.watched, vec![dir.join(".git/HEAD"), dir.join(".git/refs/heads/trunk")]);

    // A changed tracked file, then an untracked one alone.
    std::fs::write(dir.join("file"), "two\n").unwrap();
    assert_eq!(build_script::describe(dir).revision, format!("{commit}-dirty"));
    git(dir, &["checkout", "--quiet", "--", "file"]);
    assert_eq!(build_script::describe(dir).revision, commit);
    std::fs::write(dir.join("new"), "").unwrap();
    assert_eq!(build_script::describe(dir).revision, format!("{commit}-dirty"));
    std::fs::remove_file(dir.join("new")).unwrap();

    // Detached: the branch is `HEAD`, as `git rev-parse --abbrev-ref HEAD` and Prometheus's builds say.
    git(dir, &["checkout", "--quiet", "--detach"]);
    let detached = build_script::describe(dir);
    assert_eq!((detached.revision.as_str(), detached.branch.as_str()), (commit.as_str(), "HEAD"));
    assert_eq!(detached.watched, vec![dir.join(".git/HEAD")]);

    // Packed refs (after `git gc`): packed-refs is watched instead of the loose ref.
    git(dir, &["checkout", "--quiet", "trunk"]);
    git(dir, &["pack-refs", "--all"]);
    assert!(!dir.join(".git/refs/heads/trunk").exists());
    assert_eq!(
        build_script::describe(dir).watched,
        vec![dir.join(".git/HEAD"), dir.join(".git/packed-refs")]
    );
}

#[test]
fn the_rust_version_is_rustcs_number_or_unknown() {
    let answer = |code: i32, stdout: &str| Output {
        status: std::process::ExitStatus::from_raw(code << 8),
        stdout: stdout.as_bytes().to_vec(),
        stderr: Vec::new(),
    };
    let version = |out: Option<&Output>| build_script::rust_version(out);
    assert_eq!(version(Some(&answer(0, "rustc 1.85.0 (4d91de4e4 2025-02-17)\n"))), "1.85.0");
    assert_eq!(version(Some(&answer(0, "rustc 1.87.0-nightly (1b3a32958 2025-03-01)\n"))), "1.87.0-nightly");
    assert_eq!(version(Some(&answer(1, "rustc 1.85.0\n"))), "unknown");
    assert_eq!(version(Some(&answer(0, "something else\n"))), "unknown");
    assert_eq!(version(Some(&answer(0, ""))), "unknown");
    assert_eq!(version(None), "unknown");
}

/// `telemon --version`, and the values it names: a revision of this checkout (or `unknown` outside git), the
/// version of the rustc on PATH.
#[tokio::test]
async fn version_names_the_revision_branch_and_rust_version() {
    let out = support::run(&["--version"], None).await;
    assert_eq!(support::code(&out), 0);
    assert_eq!(support::stdout(&out), format!("telemon {LONG_VERSION}\n"));
    assert_eq!(VERSION, env!("CARGO_PKG_VERSION"));
    let commit = REVISION.strip_suffix("-dirty").unwrap_or(REVISION);
    if build_script::describe(root()).revision == "unknown" {
        assert_eq!((REVISION, BRANCH), ("unknown", "unknown"));
    } else {
        assert!(commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()), "{REVISION}");
        git(root(), &["cat-file", "-e", &format!("{commit}^{{commit}}")]);
        assert!(!BRANCH.is_empty() && BRANCH != "unknown", "{BRANCH}");
    }
    let rustc = Command::new("rustc").arg("--version").output().ok();
    assert_eq!(RUST_VERSION, build_script::rust_version(rustc.as_ref()));
    assert!(RUST_VERSION.starts_with(|c: char| c.is_ascii_digit()), "{RUST_VERSION}");
}

/// `/metrics` has `telemon_build_info` with the four labels (in both formats), the same values as `--version`.
#[tokio::test]
async fn metrics_have_build_info_with_the_four_labels() {
    let addr = support::free_addr();
    // A config with no target: telemon's own families alone.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("telemon.toml");
    std::fs::write(&config, format!("[serve]\nlisten = \"{addr}\"\n")).unwrap();
    let telemon = support::Telemon::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let line = format!(
        "telemon_build_info{{branch=\"{BRANCH}\",revision=\"{REVISION}\",rustversion=\"{RUST_VERSION}\",\
         version=\"{VERSION}\"}} 1\n"
    );
    let page = support::until("/metrics to answer", Duration::from_millis(20), async || {
        support::http_get(addr, "/metrics", &[]).await.ok().filter(|(status, _)| *status == 200)
    })
    .await
    .1;
    assert!(page.contains("# TYPE telemon_build_info gauge\n"), "{page}");
    assert_eq!(page.matches("telemon_build_info{").count(), 1, "{page}");
    assert!(page.contains(&line), "{line:?} in\n{page}");
    let accept = [("Accept", "application/openmetrics-text; version=1.0.0")];
    let (_, open_metrics) = support::http_get(addr, "/metrics", &accept).await.unwrap();
    assert!(open_metrics.contains("# TYPE telemon_build info\n"), "{open_metrics}");
    assert!(open_metrics.contains(&line), "{line:?} in\n{open_metrics}");
    telemon.kill().await;
}
