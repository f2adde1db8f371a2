//! `cargo xtask deb [--test]`: the Debian package of telemon, `target/debian/telemon_VERSION-1_ARCH.deb`.
//!
//! 1. `cargo build --release -p telemon`, with the git revision and branch passed to its build script
//!    (`TELEMON_GIT_REVISION`, `TELEMON_GIT_BRANCH`), so that the package's `telemon --version` is exact even when
//!    the tree changed since the script last ran;
//! 2. that binary writes its own man pages and completions (`telemon generate-docs`, hidden) into
//!    `target/release/telemon-docs/`: they come from the clap definition of the binary packaged; the man pages
//!    are gzipped (`gzip -9n`, Debian's policy);
//! 3. `cargo deb --no-build` (cargo-deb, installed at [`CARGO_DEB_VERSION`] when missing) packs what
//!    `[package.metadata.deb]` of `crates/telemon/Cargo.toml` lists, with `deploy/debian/`'s conffile, changelog,
//!    copyright and `postrm`, and `deploy/systemd/telemon.service` with its maintainer-script snippets.
//!
//! With `--test` it then runs `crates/telemon/tests/package.rs` on the package (lintian, install, upgrade,
//! purge: it installs into this machine, as root).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::{binary, cargo, run};

/// telemon's build script, for [`telemon_build::describe`]: the same reading of git as a build makes.
#[allow(dead_code)]
#[path = "../../crates/telemon/build.rs"]
mod telemon_build;

/// The cargo-deb this packaging is written for (its `[package.metadata.deb]` keys, its `target/release/` rule for
/// generated assets): installed when `cargo deb` is missing or another version.
pub const CARGO_DEB_VERSION: &str = "3.8.0";

/// Builds the package and returns its path.
pub fn deb(root: &Path) -> Result<PathBuf> {
    install_cargo_deb()?;
    let tree = telemon_build::describe(root);
    eprintln!("[xtask] building telemon (release) at {} on {}", tree.revision, tree.branch);
    run(Command::new(cargo())
        .args(["build", "--release", "--package", "telemon", "--bin", "telemon"])
        .env("TELEMON_GIT_REVISION", &tree.revision)
        .env("TELEMON_GIT_BRANCH", &tree.branch))?;
    let target = binary(root, "telemon").parent().and_then(Path::parent).expect("target dir").to_path_buf();
    let docs = target.join("release/telemon-docs");
    if docs.exists() {
        std::fs::remove_dir_all(&docs).with_context(|| format!("removing {}", docs.display()))?;
    }
    run(Command::new(target.join("release/telemon")).arg("generate-docs").arg(&docs))?;
    // Debian's policy: man pages gzipped at the best ratio, without a name or time in the header (-n), so that
    // a rebuild is identical.
    for page in std::fs::read_dir(docs.join("man")).context("reading the man pages written")? {
        run(Command::new("gzip").args(["-9", "-n", "-f"]).arg(page?.path()))?;
    }
    let out_dir = target.join("debian");
    let out = Command::new(cargo())
        .args(["deb", "--package", "telemon", "--no-build", "--output"])
        .arg(&out_dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo deb")?;
    if !out.status.success() {
        bail!("cargo deb failed: {}", out.status);
    }
    // cargo deb prints the package's path last.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(deb) = stdout.lines().rev().map(str::trim).find(|l| l.ends_with(".deb")) else {
        bail!("cargo deb did not name the package it wrote: {stdout:?}");
    };
    let deb = root.join(deb);
    eprintln!("[xtask] {}", deb.display());
    Ok(deb)
}

/// `cargo deb` at [`CARGO_DEB_VERSION`], installed when missing or another version.
fn install_cargo_deb() -> Result<()> {
    let found = Command::new(cargo()).args(["deb", "--version"]).output();
    let version =
        found.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    if version.as_deref().map(str::trim) == Some(&format!("cargo-deb {CARGO_DEB_VERSION}")) {
        return Ok(());
    }
    eprintln!("[xtask] installing cargo-deb {CARGO_DEB_VERSION} (a few minutes on 2 cores)");
    run(Command::new(cargo()).args(["install", "cargo-deb", "--locked", "--version", CARGO_DEB_VERSION]))
}

/// Runs the package test (`crates/telemon/tests/package.rs`, ignored in a plain `cargo test`) on `deb`.
pub fn test(deb: &Path) -> Result<()> {
    run(Command::new(cargo())
        .args(["test", "--package", "telemon", "--test", "package", "--", "--ignored", "--nocapture"])
        .env("TELEMON_DEB", deb))
}
