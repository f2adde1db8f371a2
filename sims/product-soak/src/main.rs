//! `product-soak`: the whole product at once for `--minutes`, with faults on a seeded schedule; prints the
//! schedule and one table, and exits 1 when a check failed (see the library's documentation).
//! `cargo xtask soak --all` builds telemon and this binary (release) and runs it.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use product_soak::{run, Components, Options};

#[derive(Debug, Parser)]
#[command(
    about = "telemon, Prometheus, VictoriaMetrics, an OTLP receiver and Chromium together, with faults"
)]
struct Args {
    /// The telemon binary (release build).
    #[arg(long)]
    telemon: PathBuf,
    /// The workspace root (rules, test certificates, the OTLP receiver's script).
    #[arg(long)]
    root: PathBuf,
    /// Minutes of the run, after every target is up (the warm-up is the first 10 minutes, or a third).
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// The schedule's seed (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Sims of each of the five kinds in the config file.
    #[arg(long, default_value_t = 90)]
    per_kind: usize,
    /// smon targets in the file_sd file at once.
    #[arg(long, default_value_t = 60)]
    file_sd: usize,
    /// The push virtualenv (with opentelemetry-proto), made by .ci/push-receivers.sh.
    #[arg(long, env = "TELEMON_PUSH_VENV")]
    venv: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let venv = args.venv.clone().unwrap_or_else(|| args.root.join("target/push-venv"));
    let components = match Components::find(&venv) {
        Ok(c) => c,
        Err(missing) => {
            let list: Vec<String> = missing.iter().map(|(what, hint)| format!("{what} ({hint})")).collect();
            bail!("missing: {}", list.join("; "));
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut options = Options::full(args.telemon, args.root, components, args.minutes, seed);
    options.per_kind = args.per_kind;
    options.file_sd = args.file_sd;
    let report = run(options).await?;
    print!("{}", report.text);
    if !report.passed {
        std::process::exit(1);
    }
    Ok(())
}
