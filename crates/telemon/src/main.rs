//! `telemon`: one command-line tool with a subcommand per monitoring protocol.
//!
//! Output is a human table by default and one JSON object per line with `--json`.
//! Exit codes: 0 ok, 1 protocol or peer error, 2 usage.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod output;
// protocol modules: one line each

/// Watch running systems over their monitoring wire protocols.
#[derive(Debug, Parser)]
#[command(name = "telemon", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    // protocol subcommands: one variant each
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result: output::CliResult = match cli.command {
        // protocol dispatch: one arm each
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("telemon: {e}");
            e.exit_code()
        }
    }
}
