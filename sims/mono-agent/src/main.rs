//! `mono-agent-sim`: a fake Mono counters agent (see the library docs).

use std::time::Duration;

use clap::Parser;
use mono_agent_sim::{parse_address, AgentConfig, Destination, DuplicateAdd, ValueMode};
use mono_counters::{CounterName, CounterValue, RequestOpcodes};

/// A fake Mono counters agent: connects to an inspector (or writes a file) and streams counters.
#[derive(Debug, Parser)]
#[command(name = "mono-agent-sim", version)]
struct Args {
    /// The real agent's option string, e.g. "address=127.0.0.1:8888,counters=Mono JIT/Compiled methods,interval=1000"
    /// (without interval= the agent samples continuously, like the real one). Flags below override it.
    #[arg(long)]
    options: Option<String>,
    /// HOST:PORT, tcp://HOST:PORT or file://PATH (numeric IPv4 only).
    #[arg(long)]
    address: Option<String>,
    /// Counters sampled from the start: "Category/Name;Category/Name".
    #[arg(long)]
    counters: Option<String>,
    /// Milliseconds between samples (0: continuously). Default 1000, or the --options value.
    #[arg(long)]
    interval: Option<u64>,
    /// WORD counter size: 4 (32-bit agent) or 8.
    #[arg(long, default_value_t = 8, value_parser = parse_word_size)]
    word_size: u8,
    /// Understand the gist's request opcodes (List 1, Add 2, Remove 3).
    #[arg(long)]
    gist_opcodes: bool,
    /// Close the connection on a duplicate Add, like the real agent (default: answer EXISTING).
    #[arg(long)]
    drop_on_duplicate_add: bool,
    /// Constant values instead of live /proc/self figures.
    #[arg(long)]
    fixed_values: bool,
    /// Force a counter's value: "Category/Name=VALUE" (repeatable; sent in the counter's own type).
    #[arg(long = "set", value_name = "CATEGORY/NAME=VALUE", value_parser = parse_set)]
    set: Vec<(String, CounterValue)>,
    /// Stop after N samples per connection (or file).
    #[arg(long)]
    samples: Option<u64>,
    /// Stop when the connection ends instead of reconnecting (the real agent's behaviour).
    #[arg(long)]
    no_reconnect: bool,
    /// Run N independent agents in this one process, all dialling the same inspector (TCP only).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    instances: u32,
    #[command(flatten)]
    replay: sim_common::recorded_peer::ReplayArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    sim_common::init_tracing();
    let args = Args::parse();
    let overrides = mono_agent_sim::ValueOverrides::default();
    for (name, value) in &args.set {
        overrides.set(name, *value);
    }
    let instances = args.instances;
    if args.replay.replay.is_some() {
        return replay(&args).await;
    }
    match configure(args) {
        Ok(config) if instances > 1 => run_instances(config, overrides, instances).await,
        Ok(config) => {
            tracing::info!(destination = ?config.destination, interval = ?config.interval, "mono agent starting");
            match mono_agent_sim::run_with_overrides(config, overrides, sim_common::shutdown_on_ctrl_c())
                .await
            {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mono-agent-sim: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("mono-agent-sim: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// `--replay FILE`: dials the inspector and serves the recorded agent's connections, one after the other.
async fn replay(args: &Args) -> std::process::ExitCode {
    let conversation = sim_common::recorded_peer::Mode::Conversation;
    let replay = match args.replay.load(sim_common::recorded_peer::link_type::MONO, conversation) {
        Ok(Some(r)) => r,
        Ok(None) => return std::process::ExitCode::from(2),
        Err(e) => {
            eprintln!("mono-agent-sim: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let addr = match args.address.as_deref().map(|a| a.strip_prefix("tcp://").unwrap_or(a)) {
        Some(addr) => addr.to_owned(),
        None => {
            eprintln!("mono-agent-sim: --replay needs --address HOST:PORT (the inspector to dial)");
            return std::process::ExitCode::from(2);
        }
    };
    match sim_common::recorded_peer::dial(&addr, replay, sim_common::shutdown_on_ctrl_c()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mono-agent-sim: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `--instances N`: N agents, each with its own connection, counters and schedule, as tasks of this one
/// runtime. They share the `--set` values.
async fn run_instances(
    config: AgentConfig,
    overrides: mono_agent_sim::ValueOverrides,
    n: u32,
) -> std::process::ExitCode {
    let Destination::Tcp(addr) = config.destination else {
        use clap::CommandFactory;
        Args::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--instances N > 1 needs a TCP address: N agents cannot write one file",
            )
            .exit()
    };
    // A socket per agent.
    if let Err(e) = sim_common::raise_open_file_limit(u64::from(n) + 64) {
        tracing::warn!(error = %e, "cannot raise the open-file limit");
    }
    let shutdown = sim_common::shutdown_on_ctrl_c();
    // On stderr whatever RUST_LOG says.
    eprintln!("mono-agent-sim: {n} instances dialling {addr}");
    tracing::info!(instances = n, interval = ?config.interval, "mono agents starting");
    let agents = (0..n)
        .map(|_| mono_agent_sim::run_with_overrides(config.clone(), overrides.clone(), shutdown.clone()));
    match sim_common::run_instances(agents, &shutdown).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mono-agent-sim: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn configure(args: Args) -> Result<AgentConfig, mono_agent_sim::ConfigError> {
    let mut config = match &args.options {
        Some(options) => AgentConfig::from_options(options)?,
        None => AgentConfig { interval: Duration::from_millis(1000), ..AgentConfig::default() },
    };
    if let Some(address) = &args.address {
        config.destination = parse_address(address)?;
    }
    if let Some(counters) = &args.counters {
        config.counters = counters.split(';').filter_map(|c| CounterName::parse(c.trim())).collect();
    }
    if let Some(ms) = args.interval {
        config.interval = Duration::from_millis(ms);
    }
    config.word_size = args.word_size;
    if args.gist_opcodes {
        config.opcodes = RequestOpcodes::Gist;
    }
    if args.drop_on_duplicate_add {
        config.duplicate_add = DuplicateAdd::DropConnection;
    }
    if args.fixed_values {
        config.values = ValueMode::Fixed;
    }
    config.max_samples = args.samples;
    config.reconnect = !args.no_reconnect;
    Ok(config)
}

fn parse_word_size(s: &str) -> Result<u8, String> {
    match s {
        "4" => Ok(4),
        "8" => Ok(8),
        _ => Err(format!("word size must be 4 or 8, not {s:?}")),
    }
}

fn parse_set(s: &str) -> Result<(String, CounterValue), String> {
    let (name, value) =
        s.rsplit_once('=').ok_or_else(|| format!("expected Category/Name=VALUE, got {s:?}"))?;
    let counter =
        CounterName::parse(name.trim()).ok_or_else(|| format!("expected Category/Name, got {name:?}"))?;
    let value = value.trim();
    let value = match value.parse::<i64>() {
        Ok(n) => CounterValue::Long(n),
        Err(_) => {
            CounterValue::Double(value.parse::<f64>().map_err(|_| format!("{value:?} is not a number"))?)
        }
    };
    Ok((counter.to_string(), value))
}
