//! `telemon generate-docs DIR` (hidden): the man pages and shell completions of this very command line, from
//! its clap definition. `cargo xtask deb` runs the binary it packages to make them, so they cannot drift from
//! it.
//!
//! `DIR/man/`: `telemon.1` and a page per subcommand, nested ones included (`telemon-serve.1`,
//! `telemon-hmon-connect.1`, ...; clap_mangen). `DIR/completions/`: `telemon.bash`, `_telemon` (zsh) and
//! `telemon.fish` (clap_complete). Hidden subcommands (this one) are in neither.

use std::path::{Path, PathBuf};

use clap_complete::Shell;

use crate::output::{CliError, CliResult};

/// Write the man pages and shell completions of this command line.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory to write `man/` and `completions/` into (created when missing).
    dir: PathBuf,
}

/// Writes the man pages and completions of `cli` (the whole command line) under `args.dir`.
pub fn run(cli: clap::Command, args: Args) -> CliResult {
    let (man, completions) = (args.dir.join("man"), args.dir.join("completions"));
    let failed = |dir: &Path| {
        let dir = dir.display().to_string();
        move |e: std::io::Error| CliError::peer(format!("cannot write into {dir}: {e}"))
    };
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).map_err(failed(dir))?;
    }
    // The pages say the version alone (not the revision): they change with the command line, not with each
    // commit.
    clap_mangen::generate_to(cli.clone().version(telemon::build_info::VERSION), &man)
        .map_err(failed(&man))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cli.clone(), "telemon", &completions)
            .map_err(failed(&completions))?;
    }
    Ok(())
}
