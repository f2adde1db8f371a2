//! `telemon`: one command-line tool with a subcommand per monitoring protocol.
//!
//! Output is a human table by default and one JSON object per line with `--json`.
//! Exit codes: 0 ok, 1 protocol or peer error, 2 usage.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tracing_subscriber::fmt::writer::BoxMakeWriter;

mod cmd;
mod generate_docs;
mod output;

/// Watch running systems over their monitoring wire protocols.
#[derive(Debug, Parser)]
#[command(name = "telemon", version = telemon::build_info::LONG_VERSION, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// System/161 metering (.sockets/meter): a stat161-like table of per-interval deltas, or JSON.
    Meter161(cmd::meter161::Args),
    /// Dyalog APL Health Monitor: facts, polling, events and last known state (SERVE or POLL mode).
    Hmon(cmd::hmon::Args),
    /// Mono counters: listen for a Mono agent, or read its counters file.
    Mono(cmd::mono::Args),
    /// Tino's smon monitor stream: read a file or stdin, connect to a stream, or encode JSON lines.
    Smon(cmd::smon::Args),
    /// rvOS sysinfo service (host transport): ps, memstat, trace, kstat, ...; or parse saved report text.
    Sysinfo(cmd::sysinfo::Args),
    /// Export a whole fleet of targets of all five protocols to Prometheus (/metrics, /probe, /targets).
    Serve(cmd::serve::Args),
    /// A live terminal dashboard over the same targets as `serve` (ratatui); `--once` prints one frame.
    Top(cmd::top::Args),
    /// Collect every target of a config as `serve` does, without serving, and record their connections.
    Record(cmd::record::Args),
    /// Turn a recording into the timestamped series `serve` would have exported (OpenMetrics or CSV).
    Export(cmd::export::Args),
    /// Play a recording (`--record`) back through the decoders into a one-target view.
    Replay(cmd::replay::Args),
    /// Print the bcrypt hash of a password for the web config's basic_auth_users (prompted without echo, or stdin).
    HashPassword(cmd::hash_password::Args),
    /// Write the man pages and shell completions of this command line (for packaging: `cargo xtask deb`).
    #[command(hide = true)]
    GenerateDocs(generate_docs::Args),
}

fn main() -> ExitCode {
    // The collectors run on this thread; `[serve] wakeup_slack` paces its wake-ups (see
    // telemon_fleet::pace), and serving HTTP has a thread of its own.
    let pace = telemon_fleet::pace::Pace::new();
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().on_thread_park(pace.hook()).build();
    match runtime {
        Ok(runtime) => runtime.block_on(run(pace)),
        Err(e) => {
            eprintln!("telemon: cannot start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(pace: telemon_fleet::pace::Pace) -> ExitCode {
    let cli = Cli::parse();
    // The dashboard owns the terminal: its log goes to --log FILE, or nowhere.
    let writer = match &cli.command {
        Command::Top(args) if !args.once => match cmd::top::log_writer(args) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("telemon: {e}");
                return e.exit_code();
            }
        },
        _ => BoxMakeWriter::new(std::io::stderr),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(writer)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr()) && !matches!(cli.command, Command::Top(_)),
        )
        .init();
    if matches!(cli.command, Command::Serve(_) | Command::Top(_) | Command::Record(_)) {
        // What a fleet frees while it starts or its targets reconnect would stay resident (see
        // telemon_fleet::heap).
        tokio::spawn(telemon_fleet::heap::keeper());
    }
    let result: output::CliResult = match cli.command {
        Command::Meter161(args) => cmd::meter161::run(args).await,
        Command::Hmon(args) => cmd::hmon::run(args).await,
        Command::Mono(args) => cmd::mono::run(args).await,
        Command::Smon(args) => cmd::smon::run(args).await,
        Command::Sysinfo(args) => cmd::sysinfo::run(args).await,
        Command::Serve(args) => cmd::serve::run(args, pace).await,
        Command::Top(args) => cmd::top::run(args, pace).await,
        Command::Replay(args) => cmd::replay::run(args).await,
        Command::Record(args) => cmd::record::run(args, pace).await,
        Command::Export(args) => cmd::export::run(args).await,
        Command::HashPassword(args) => cmd::hash_password::run(args).await,
        Command::GenerateDocs(args) => generate_docs::run(Cli::command(), args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`telemon ... | head`) is a normal end, not worth a message.
        Err(e) if e.is_broken_pipe() => e.exit_code(),
        Err(e) => {
            eprintln!("telemon: {e}");
            e.exit_code()
        }
    }
}
