//! `telemon smon`: read, watch and write Tino's smon monitor stream (`smon-codec`).
//!
//! * `telemon smon read FILE|- [--json] [--follow]`: a file (several runs appended read as one), or stdin.
//! * `telemon smon connect ADDR [--json] [--count N]`: a TCP stream such as `smon-sim --listen`.
//! * `telemon smon encode [--resync] < updates.jsonl > stream.smon`: the inverse of `--json`.
//!
//! The human view is a table of the latest value per name and index (redrawn in place on a terminal;
//! elsewhere the changed rows of each update burst). `--json` prints one object per value update:
//! `{"name":"linux.cpu.idle","index":[0],"value":123}` (a number for `u` tokens, a string for `s`).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::Subcommand;
use smon_codec::{
    BytesMut, DecodeError, DecoderConfig, EncoderConfig, Sample, StreamEncoder, Update, UpdateReader, Value,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cmd::record::{self, RecordArgs};
use crate::output::{self, CliError, CliResult, Countdown, OutputArgs};
use telemon_capture::link_type;
use telemon_fleet::retry;

/// Arguments of `telemon smon`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SmonCommand,
}

#[derive(Debug, Subcommand)]
enum SmonCommand {
    /// Read a stream from FILE, or from stdin with `-` (runs appended to one file read as one stream).
    Read {
        /// The file, or `-` for stdin.
        path: String,
        #[command(flatten)]
        view: ViewArgs,
        /// Keep reading as the file grows (like `tail -f`).
        #[arg(long)]
        follow: bool,
        /// How often to look for new data with --follow.
        #[arg(long, default_value = "250ms", value_parser = output::parse_duration)]
        poll: Duration,
    },
    /// Connect to a TCP stream (e.g. `smon-sim --listen 127.0.0.1:7399`).
    Connect {
        /// HOST:PORT to connect to.
        addr: String,
        #[command(flatten)]
        view: ViewArgs,
        /// Keep retrying this long while nothing listens yet (0 to fail at once).
        #[arg(long, default_value = "10s", value_parser = output::parse_duration)]
        wait: Duration,
        /// Connect again (waiting up to --wait) when the stream ends.
        #[arg(long)]
        reconnect: bool,
    },
    /// Encode JSON lines from stdin (the `--json` format) into a stream on stdout.
    Encode {
        /// Start with the resync sequence (17×FF FE), as every `mon` run does.
        #[arg(long)]
        resync: bool,
    },
}

#[derive(Debug, clap::Args)]
struct ViewArgs {
    #[command(flatten)]
    output: OutputArgs,
    /// Reject deltas that leave the u64 range instead of wrapping them.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    record: RecordArgs,
}

/// Runs `telemon smon ...`.
pub async fn run(args: Args) -> CliResult {
    match args.command {
        SmonCommand::Read { path, view, follow, poll } => {
            record::until_stopped(read(&path, view, follow, poll)).await
        }
        SmonCommand::Connect { addr, view, wait, reconnect } => {
            record::until_stopped(connect(&addr, view, wait, reconnect)).await
        }
        SmonCommand::Encode { resync } => encode(resync).await,
    }
}

fn decoder_config(view: &ViewArgs) -> DecoderConfig {
    DecoderConfig { strict: view.strict, ..Default::default() }
}

async fn read(path: &str, args: ViewArgs, follow: bool, poll: Duration) -> CliResult {
    // A file read once is shown once, as a whole table at the end; a followed one live.
    let mut view = View::new(&args, follow);
    let config = decoder_config(&args);
    let recording = args.record.start(path, link_type::SMON, path)?;
    let input: Box<dyn AsyncRead + Unpin + Send> = if path == "-" {
        Box::new(tokio::io::stdin())
    } else {
        Box::new(tokio::fs::File::open(path).await.map_err(|e| CliError::Peer(format!("{path}: {e}")))?)
    };
    let input: Box<dyn AsyncRead + Unpin + Send> = match &recording {
        Some(rec) => Box::new(rec.tap(input)),
        None => input,
    };
    let reader = UpdateReader::new(input, config);
    let end = view.consume(if follow && path != "-" { reader.follow(poll) } else { reader }).await?;
    view.finish(end)
}

/// Shows a replayed stream as `telemon smon read` shows a file (`telemon replay --view smon`).
pub async fn replay(input: impl AsyncRead + Unpin, output: OutputArgs) -> CliResult {
    let args = ViewArgs { output, strict: false, record: RecordArgs::default() };
    let mut view = View::new(&args, true);
    let end = view.consume(UpdateReader::new(input, decoder_config(&args))).await?;
    view.finish(end)
}

async fn connect(addr: &str, args: ViewArgs, wait: Duration, reconnect: bool) -> CliResult {
    let mut view = View::new(&args, true);
    let recording = args.record.start(addr, link_type::SMON, addr)?;
    loop {
        let stream = connect_with_retry(addr, wait).await?;
        let end = match &recording {
            Some(rec) => view.consume(UpdateReader::new(rec.tap(stream), decoder_config(&args))).await?,
            None => view.consume(UpdateReader::new(stream, decoder_config(&args))).await?,
        };
        if end == End::Count || !reconnect {
            if end == End::Input && view.countdown_pending() {
                view.finish(end)?;
                return Err(CliError::Peer(format!("{addr} closed the stream after {} values", view.values)));
            }
            return view.finish(end);
        }
        tracing::info!(%addr, "stream ended; reconnecting");
    }
}

/// Connects to `addr`, retrying refused connections until `wait` has passed (a sim may be starting).
async fn connect_with_retry(addr: &str, wait: Duration) -> Result<TcpStream, CliError> {
    let targets: Vec<std::net::SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| CliError::Usage(format!("bad address {addr:?}: {e}")))?
        .collect();
    retry::retry(addr, Some(wait), || TcpStream::connect(&targets[..]))
        .await
        .map_err(|e| CliError::Peer(format!("connecting to {addr}: {e}")))
}

/// A decode error that ends the view, and for a peer of another protocol what it looks like.
fn peer_error(e: &DecodeError) -> CliError {
    let first = match e {
        DecodeError::OtherProtocol { first } => Some(&first[..]),
        _ => None,
    };
    CliError::Peer(output::peer_message(e, first))
}

/// Why a stream stopped being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The input ended.
    Input,
    /// `--count` values were shown.
    Count,
}

/// One `--json` line: `{"name":"linux.cpu.idle","index":[0],"value":123}`.
#[derive(serde::Serialize)]
struct JsonUpdate<'a> {
    name: &'a str,
    index: &'a [u64],
    value: JsonValue<'a>,
}

/// A number for `u` tokens, a string (lossy UTF-8) for `s` tokens.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum JsonValue<'a> {
    Number(u64),
    Text(std::borrow::Cow<'a, str>),
}

/// The latest value per (name, index), and how it is shown.
struct View {
    json: bool,
    terminal: bool,
    /// Show the table as updates come (else once, at the end).
    live: bool,
    countdown: Countdown,
    limit: Option<u64>,
    table: BTreeMap<(String, Vec<u64>), String>,
    changed: Vec<(String, Vec<u64>)>,
    values: u64,
    errors: u64,
}

impl View {
    fn new(args: &ViewArgs, live: bool) -> Self {
        View {
            json: args.output.json,
            live,
            terminal: std::io::stdout().is_terminal(),
            countdown: args.output.countdown(),
            limit: args.output.count,
            table: BTreeMap::new(),
            changed: Vec::new(),
            values: 0,
            errors: 0,
        }
    }

    /// Whether `--count` asked for more values than were shown.
    fn countdown_pending(&self) -> bool {
        self.limit.is_some_and(|n| self.values < n)
    }

    /// Reads updates until the input ends or `--count` is reached; decode errors are reported and
    /// skipped (the decoder resumes at the next resync).
    async fn consume<R: AsyncRead + Unpin>(&mut self, mut reader: UpdateReader<R>) -> Result<End, CliError> {
        if self.countdown.is_done() {
            return Ok(End::Count);
        }
        while let Some(first) = reader.next().await {
            let mut item = Some(first);
            while let Some(result) = item {
                match result {
                    Ok(update) => {
                        if self.show(update)? {
                            self.render()?;
                            return Ok(End::Count);
                        }
                    }
                    Err(DecodeError::Io(e)) => return Err(CliError::Peer(format!("read failed: {e}"))),
                    // Not smon at all: no resync to skip to will come.
                    Err(e @ DecodeError::OtherProtocol { .. }) => return Err(peer_error(&e)),
                    Err(e) => {
                        self.errors += 1;
                        eprintln!("telemon: smon: {e}; skipping to the next resync");
                    }
                }
                item = reader.next_buffered();
            }
            self.render()?;
        }
        Ok(End::Input)
    }

    /// Takes one update; returns whether `--count` is reached.
    fn show(&mut self, update: Update) -> Result<bool, CliError> {
        let Update::Value { name, index, value, .. } = update else { return Ok(false) };
        self.values += 1;
        if self.json {
            let value = match &value {
                Value::Unsigned(v) => JsonValue::Number(*v),
                Value::Text(s) => JsonValue::Text(String::from_utf8_lossy(s)),
            };
            output::print_json_line(&JsonUpdate { name: &name, index: &index, value })?;
        } else {
            let shown = match &value {
                Value::Unsigned(v) => v.to_string(),
                Value::Text(s) => format!("{:?}", String::from_utf8_lossy(s)),
            };
            let key = (name.to_string(), index);
            if self.table.get(&key) != Some(&shown) {
                self.changed.push(key.clone());
            }
            self.table.insert(key, shown);
        }
        Ok(self.countdown.tick())
    }

    fn row(out: &mut impl Write, name: &str, index: &[u64], value: &str) -> std::io::Result<()> {
        let index = index.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        writeln!(out, "{name:<28} {index:>8}  {value}")
    }

    /// Shows what changed: on a terminal the whole table in place, elsewhere the changed rows.
    fn render(&mut self) -> CliResult {
        if self.json || self.changed.is_empty() || !self.live {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        if self.terminal {
            write!(out, "\x1b[H\x1b[2J")?;
            Self::row(&mut out, "NAME", &[], "VALUE")?;
            for ((name, index), value) in &self.table {
                Self::row(&mut out, name, index, value)?;
            }
        } else {
            self.changed.sort();
            self.changed.dedup();
            for key in &self.changed {
                Self::row(&mut out, &key.0, &key.1, &self.table[key])?;
            }
            writeln!(out)?;
        }
        out.flush()?;
        self.changed.clear();
        Ok(())
    }

    fn finish(&mut self, _end: End) -> CliResult {
        if self.live {
            self.render()?;
        } else if !self.json {
            let mut out = std::io::stdout().lock();
            Self::row(&mut out, "NAME", &[], "VALUE")?;
            for ((name, index), value) in &self.table {
                Self::row(&mut out, name, index, value)?;
            }
            out.flush()?;
        }
        if self.errors > 0 {
            return Err(CliError::Peer(format!("{} decode error(s) in the stream", self.errors)));
        }
        Ok(())
    }
}

/// Parses one JSON line of the `--json` format into a sample.
fn parse_line(line: &str) -> Result<Sample, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let name = v.get("name").and_then(|n| n.as_str()).ok_or("\"name\" must be a string")?;
    let index = match v.get("index") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|i| i.as_u64().ok_or("\"index\" must hold non-negative integers"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("\"index\" must be an array".into()),
    };
    let value = match v.get("value") {
        Some(serde_json::Value::String(s)) => Value::from(s.as_str()),
        Some(n) if n.as_u64().is_some() => Value::Unsigned(n.as_u64().unwrap_or_default()),
        _ => return Err("\"value\" must be a non-negative integer or a string".into()),
    };
    Ok(Sample::new(name, index, value))
}

async fn encode(resync: bool) -> CliResult {
    let mut encoder = StreamEncoder::new(EncoderConfig { resync_at_start: resync, ..Default::default() });
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    let mut buf = BytesMut::new();
    if resync {
        encoder.resync(&mut buf);
    }
    let mut number = 0u64;
    while let Some(line) = lines.next_line().await.map_err(|e| CliError::Peer(format!("stdin: {e}")))? {
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        let sample = parse_line(&line).map_err(|e| CliError::Peer(format!("line {number}: {e}")))?;
        encoder.encode(&sample, &mut buf).map_err(|e| CliError::Peer(format!("line {number}: {e}")))?;
        stdout.write_all(&buf).await?;
        stdout.flush().await?;
        buf.clear();
    }
    stdout.write_all(&buf).await?;
    stdout.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_parse_into_samples() {
        assert_eq!(
            parse_line(r#"{"name":"linux.cpu.idle","index":[0],"value":123}"#).unwrap(),
            Sample::new("linux.cpu.idle", [0], 123)
        );
        assert_eq!(
            parse_line(r#"{"name":"mon.version","value":"0.0.0"}"#).unwrap(),
            Sample::new("mon.version", [], "0.0.0")
        );
        assert!(parse_line(r#"{"name":"a.b","value":-1}"#).unwrap_err().contains("value"));
        assert!(parse_line(r#"{"name":"a.b","index":[-1],"value":1}"#).unwrap_err().contains("index"));
        assert!(parse_line(r#"{"value":1}"#).unwrap_err().contains("name"));
        assert!(parse_line("not json").is_err());
    }
}
