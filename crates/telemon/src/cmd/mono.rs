//! `telemon mono`: be the inspector for Mono counters agents (`listen`), or read an agent's counters
//! file (`read`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use mono_counters::{
    AddResponse, ClientConfig, ClientError as MonoError, CounterFile, CounterName, CounterTable,
    CounterValue, DecodeError, Limits, Reading, RequestOpcodes, SampleUpdate, Session, Status, Unit,
    ValueData,
};

use crate::cmd::record::{self, RecordArgs};
use crate::output::{self, CliError, CliResult, Countdown, OutputArgs};

/// Mono counters: listen for an agent (`mono --profile=countersagent:address=…`) or read its file.
#[derive(Debug, ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    command: MonoCommand,
}

#[derive(Debug, Subcommand)]
enum MonoCommand {
    /// Listen on ADDR for Mono agents and show their counters; waits for the next agent when one leaves.
    Listen(ListenArgs),
    /// Read a file written by an agent in file mode (address=file://PATH).
    Read(ReadArgs),
}

#[derive(Debug, ClapArgs)]
struct ListenArgs {
    /// Address to listen on, e.g. 127.0.0.1:8888 (port 0 picks a free one; the address is printed).
    addr: SocketAddr,
    /// Ask each agent to sample this counter too ("Category/Name"); repeatable.
    #[arg(long = "add", value_name = "CATEGORY/NAME", value_parser = parse_counter)]
    add: Vec<CounterName>,
    /// Ask each agent to stop sampling this index (-1: all of them; removes run before adds); repeatable.
    #[arg(long = "remove", value_name = "INDEX", allow_negative_numbers = true)]
    remove: Vec<i16>,
    /// Print every counter the agent can sample.
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// How long to wait for each response.
    #[arg(long, default_value = "5s", value_parser = output::parse_duration)]
    timeout: Duration,
    /// Send the gist's request opcodes (List 1, Add 2, Remove 3) for agents built from the gist.
    #[arg(long)]
    gist_opcodes: bool,
    #[command(flatten)]
    record: RecordArgs,
}

#[derive(Debug, ClapArgs)]
struct ReadArgs {
    /// The counters file.
    file: std::path::PathBuf,
    #[command(flatten)]
    output: OutputArgs,
}

fn parse_counter(s: &str) -> Result<CounterName, String> {
    CounterName::parse(s).ok_or_else(|| format!("expected Category/Name, got {s:?}"))
}

/// An agent's (or a file's) error, and for a peer of another protocol what it looks like.
fn peer_error(e: MonoError) -> CliError {
    let first = match &e {
        MonoError::OtherProtocol { first } => Some(&first[..]),
        _ => None,
    };
    CliError::Peer(output::peer_message(&e, first))
}

/// Runs `telemon mono ...` (`listen` until `--count` is reached, or Ctrl-C or SIGTERM).
pub async fn run(args: Args) -> CliResult {
    match args.command {
        MonoCommand::Listen(args) => record::until_stopped(listen(args)).await,
        MonoCommand::Read(args) => read(args).await,
    }
}

async fn listen(args: ListenArgs) -> CliResult {
    let config = ClientConfig {
        request_timeout: args.timeout,
        opcodes: if args.gist_opcodes { RequestOpcodes::Gist } else { RequestOpcodes::Agent },
        ..ClientConfig::default()
    };
    let listener = tokio::net::TcpListener::bind(args.addr).await.map_err(CliError::peer)?;
    eprintln!("telemon: listening for Mono agents on {}", listener.local_addr()?);
    let recording = args.record.start(
        &args.addr.to_string(),
        telemon_capture::link_type::MONO,
        &args.addr.to_string(),
    )?;
    // As `Inspector::accept`, each connection through a recording tap with `--record`.
    let accept = || async {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let stream = match &recording {
            Some(rec) => rec.tap(stream),
            None => telemon_capture::Tap::off(stream),
        };
        Ok::<_, mono_counters::ClientError>((Session::start(stream, config.clone()).await?, peer))
    };
    let mut countdown = args.output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    let mut printer = Printer::new(args.output.json);
    loop {
        let (mut session, peer) = match accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("telemon: agent rejected: {}", peer_error(e));
                continue;
            }
        };
        eprintln!(
            "telemon: agent {peer} connected (protocol 0.{}, {} counters)",
            session.hello().version,
            session.hello().headers.len()
        );
        match watch(&mut session, &args, &mut printer, &mut countdown).await {
            Ok(true) => {
                let _ = session.goodbye().await;
                return Ok(());
            }
            Ok(false) => eprintln!("telemon: agent {peer} disconnected; waiting for the next one"),
            Err(e) => eprintln!("telemon: agent {peer}: {e}; waiting for the next one"),
        }
    }
}

/// Shows recorded agent connections (`telemon replay --view mono`) as `listen` shows live ones: each stream
/// is one connection, its Hello first.
pub async fn replay<S>(streams: Vec<S>, output: OutputArgs) -> CliResult
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let args = ListenArgs {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        add: Vec::new(),
        remove: Vec::new(),
        list: false,
        output,
        timeout: Duration::from_secs(5),
        gist_opcodes: false,
        record: RecordArgs::default(),
    };
    let mut countdown = args.output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    let mut printer = Printer::new(args.output.json);
    let config = ClientConfig { request_timeout: args.timeout, ..ClientConfig::default() };
    for stream in streams {
        let mut session = Session::start(stream, config.clone()).await.map_err(CliError::peer)?;
        if watch(&mut session, &args, &mut printer, &mut countdown).await? {
            break;
        }
    }
    Ok(())
}

/// Runs the requested commands, then prints samples. `Ok(true)` when the count is reached.
async fn watch(
    session: &mut Session,
    args: &ListenArgs,
    printer: &mut Printer,
    countdown: &mut Countdown,
) -> Result<bool, CliError> {
    if args.list {
        let counters = session.list().await.map_err(CliError::peer)?;
        printer.list(&counters)?;
    }
    // Removes first, so that `--remove -1 --add X` means "sample only X".
    for &index in &args.remove {
        match session.remove(index).await.map_err(CliError::peer)? {
            Status::Ok if index < 0 => eprintln!("telemon: removed every counter"),
            Status::Ok => eprintln!("telemon: removed index {index}"),
            Status::NotFound => eprintln!("telemon: remove {index}: no such index"),
            other => eprintln!("telemon: remove {index}: {other}"),
        }
    }
    for name in &args.add {
        match session.add_counter(name.clone()).await {
            Ok(AddResponse::Ok(h)) => eprintln!("telemon: added {name} as index {}", h.index),
            Ok(AddResponse::NotFound) => eprintln!("telemon: add {name}: the agent has no such counter"),
            Ok(AddResponse::Existing) => eprintln!("telemon: add {name}: already sampled"),
            Ok(other) => eprintln!("telemon: add {name}: {}", other.status()),
            Err(MonoError::Closed { .. }) => {
                return Err(CliError::Peer(format!(
                    "the agent closed the connection on add {name} (one possible cause: the real agent drops \
                     the connection when asked to add a counter it already samples; it may also have crashed)"
                )))
            }
            Err(e) => return Err(CliError::peer(e)),
        }
    }
    while let Some(update) = session.next_sample().await.map_err(CliError::peer)? {
        if update.missed > 0 {
            eprintln!("telemon: {} samples merged into the next row (output too slow)", update.missed);
        }
        if printer.sample(&update)? && countdown.tick() {
            printer.finish();
            return Ok(true);
        }
    }
    printer.finish();
    Ok(false)
}

async fn read(args: ReadArgs) -> CliResult {
    let mut file = CounterFile::open(&args.file, Limits::default()).await.map_err(peer_error)?;
    if !args.output.json {
        eprintln!("telemon: {}: {} counters", args.file.display(), file.hello().headers.len());
    }
    let mut printer = Printer::new(args.output.json);
    let mut countdown = args.output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    loop {
        match file.next_sample().await {
            Ok(Some(update)) => {
                if printer.sample(&update)? && countdown.tick() {
                    break;
                }
            }
            Ok(None) => break,
            // The Mono process was killed while writing: what came before the cut is good.
            Err(MonoError::Decode(e @ DecodeError::Truncated { .. })) => {
                printer.finish();
                eprintln!(
                    "telemon: warning: {}: {e}; showing the complete samples before it",
                    args.file.display()
                );
                return Ok(());
            }
            Err(e) => return Err(CliError::peer(e)),
        }
    }
    printer.finish();
    Ok(())
}

/// Prints samples as a table (a header row whenever the counter set changes) or as JSON lines.
///
/// A sample that changed no value is not shown and does not count towards `--count`: the real agent without
/// `interval=` sends about 100,000 a second. They are coalesced into the next row shown (`"coalesced": N` in
/// JSON, `(+N empty samples)` after a table row), and a count still pending at the end goes to stderr.
struct Printer {
    json: bool,
    first_timestamp: Option<i64>,
    columns: Option<BTreeSet<i16>>,
    widths: Vec<usize>,
    /// Samples with no changed value since the last row shown.
    coalesced: u64,
}

impl Printer {
    fn new(json: bool) -> Self {
        Printer { json, first_timestamp: None, columns: None, widths: Vec::new(), coalesced: 0 }
    }

    /// Says how many empty samples came after the last row shown, if any.
    fn finish(&mut self) {
        if self.coalesced > 0 {
            eprintln!("telemon: {} samples with no changed value since the last row", self.coalesced);
            self.coalesced = 0;
        }
    }

    fn list(&self, counters: &[CounterName]) -> CliResult {
        if self.json {
            let names: Vec<String> = counters.iter().map(|c| c.to_string()).collect();
            output::print_json_line(&serde_json::json!({ "counters": names }))
        } else {
            counters.iter().try_for_each(output::print_line)
        }
    }

    /// Shows `update`, unless it changed nothing; returns whether it was shown.
    fn sample(&mut self, update: &SampleUpdate) -> Result<bool, CliError> {
        // The inspector counts empty samples in `empty`; a file yields them one by one.
        self.coalesced += update.empty;
        if update.changed.is_empty() {
            self.coalesced += 1;
            return Ok(false);
        }
        let coalesced = std::mem::take(&mut self.coalesced);
        if self.json {
            let mut line = json_sample(update.timestamp, &update.table);
            if coalesced > 0 {
                line["coalesced"] = coalesced.into();
            }
            output::print_json_line(&line)?;
            return Ok(true);
        }
        let first = *self.first_timestamp.get_or_insert(update.timestamp);
        let indexes: BTreeSet<i16> = update.table.readings().map(|r| r.header.index).collect();
        if self.columns.as_ref() != Some(&indexes) {
            let mut names = vec!["time".to_string()];
            names.extend(update.table.readings().map(column_title));
            self.widths = names.iter().map(|n| n.len().max(10)).collect();
            output::print_line(row(&names, &self.widths))?;
            self.columns = Some(indexes);
        }
        let elapsed = (update.timestamp - first) as f64 / 1e7;
        let mut cells = vec![format!("{elapsed:.1}s")];
        cells.extend(update.table.readings().map(format_reading));
        let mut line = row(&cells, &self.widths);
        if coalesced > 0 {
            line.push_str(&format!("  (+{coalesced} empty samples)"));
        }
        output::print_line(line)?;
        Ok(true)
    }
}

fn row(cells: &[String], widths: &[usize]) -> String {
    let padded: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:>w$}")).collect();
    padded.join("  ").trim_end().to_string()
}

fn column_title(r: &Reading) -> String {
    let unit = match r.header.unit {
        Unit::Bytes => " [bytes]",
        Unit::Time => " [time]",
        Unit::Percentage => " [%]",
        Unit::Events => " [events]",
        _ => "",
    };
    format!("{}{unit}", r.header.full_name())
}

/// A value for people: bytes humanised, 100 ns ticks as time.
fn format_reading(r: &Reading) -> String {
    let Some(data) = &r.value else { return "-".into() };
    let v = match data {
        ValueData::Typed(v) => *v,
        ValueData::Raw(bytes) => return bytes.iter().map(|b| format!("{b:02x}")).collect(),
    };
    match r.header.unit {
        Unit::Bytes => output::human_bytes(v.as_f64()),
        Unit::Time => format_ticks(v.as_f64()),
        Unit::Percentage => format!("{}%", v),
        _ => v.to_string(),
    }
}

fn format_ticks(ticks: f64) -> String {
    let secs = ticks / 1e7;
    if secs.abs() >= 1.0 {
        format!("{secs:.3} s")
    } else {
        format!("{:.3} ms", secs * 1e3)
    }
}

/// `{"timestamp":..,"values":{"Category/Name":value,...}}` with every counter's current value.
fn json_sample(timestamp: i64, table: &CounterTable) -> serde_json::Value {
    let values: serde_json::Map<String, serde_json::Value> = table
        .readings()
        .map(|r| {
            let value = match &r.value {
                None => serde_json::Value::Null,
                Some(ValueData::Typed(CounterValue::Double(d))) => serde_json::json!(d),
                Some(ValueData::Typed(CounterValue::Int(v) | CounterValue::Word32(v))) => {
                    serde_json::json!(v)
                }
                Some(ValueData::Typed(CounterValue::Long(v) | CounterValue::Word64(v))) => {
                    serde_json::json!(v)
                }
                Some(ValueData::Raw(bytes)) => {
                    serde_json::json!(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
                }
            };
            (r.header.full_name(), value)
        })
        .collect();
    serde_json::json!({ "timestamp": timestamp, "values": values })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mono_counters::{Category, Header, Variance};

    fn reading(unit: Unit, value: CounterValue) -> Reading {
        Reading {
            header: Header {
                category: Category::System,
                name: "x".into(),
                kind: value.kind(),
                unit,
                variance: Variance::Variable,
                index: 0,
            },
            value: Some(value.into()),
        }
    }

    #[test]
    fn units_for_people() {
        assert_eq!(format_reading(&reading(Unit::Bytes, CounterValue::Long(52_428_800))), "50.0 MiB");
        assert_eq!(format_reading(&reading(Unit::Time, CounterValue::Long(15_000_000))), "1.500 s");
        assert_eq!(format_reading(&reading(Unit::Time, CounterValue::Long(25_000))), "2.500 ms");
        assert_eq!(format_reading(&reading(Unit::None, CounterValue::Int(1234))), "1234");
    }

    #[test]
    fn json_holds_the_full_state() {
        let mut table = CounterTable::default();
        table.insert(reading(Unit::None, CounterValue::Int(1)).header);
        let mut h = reading(Unit::Bytes, CounterValue::Long(2)).header;
        h.index = 1;
        h.name = "y".into();
        table.insert(h);
        table.apply(&mono_counters::Sample {
            timestamp: 5,
            values: vec![mono_counters::SampleValue { index: 0, data: CounterValue::Int(7).into() }],
        });
        assert_eq!(
            json_sample(5, &table),
            serde_json::json!({"timestamp": 5, "values": {"Mono System/x": 7, "Mono System/y": null}})
        );
    }
}
