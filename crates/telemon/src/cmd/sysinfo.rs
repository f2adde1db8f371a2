//! `telemon sysinfo`: ask an rvOS sysinfo service (over the host transport, e.g. `rvos-sim`) for a report.
//!
//! Each command opens a new channel through init, sends one command and reassembles the chunked reply.
//! By default the text is printed exactly as the kernel formats it; `--json` prints the parsed report
//! as one JSON document per request. `--watch DURATION` repeats the request (reconnecting after errors,
//! which then go to stderr) until `--count N` requests have been shown or Ctrl-C.
//! `telemon sysinfo parse KIND < report.txt` parses saved text instead.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use sysinfo_wire::{
    Client, ClientConfig, End, Endpoint, Report, Response, SysinfoCommand, TransportError,
    DEFAULT_MAX_RESPONSE,
};

use crate::cmd::record::{self, OneTarget, RecordArgs};
use crate::output::{self, CliError, CliResult, OutputArgs};
use telemon_fleet::retry;

/// Ask an rvOS sysinfo service for a report, or parse a saved one.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The host transport's Unix socket.
    #[arg(long, conflicts_with = "connect")]
    socket: Option<PathBuf>,
    /// The host transport's TCP address.
    #[arg(long, default_value = sysinfo_wire::DEFAULT_ADDR)]
    connect: String,
    #[command(flatten)]
    output: OutputArgs,
    /// Repeat the request at this interval (e.g. 2s, 500ms), for a live view.
    #[arg(long, global = true, value_parser = output::parse_duration)]
    watch: Option<Duration>,
    /// The longest one request may take.
    #[arg(long, global = true, default_value = "10s", value_parser = output::parse_duration)]
    timeout: Duration,
    /// The report (ps, memstat, trace, trace-clear, kstat, channels, schedlat, ipclat, watchdog), or `parse`
    /// to parse a saved report from stdin.
    #[arg(value_name = "REPORT|parse")]
    what: String,
    /// With `parse`: which report's text it is.
    #[arg(value_name = "KIND")]
    kind: Option<SysinfoCommand>,
    #[command(flatten)]
    record: RecordArgs,
}

/// Runs the subcommand (with `--watch`, until `--count` is reached, or Ctrl-C or SIGTERM).
pub async fn run(args: Args) -> CliResult {
    // The report names are the crate's own (`SysinfoCommand: FromStr`), not a list of our own.
    let command = match (args.what.as_str(), args.kind) {
        ("parse", Some(kind)) => return parse(kind, args.output.json),
        ("parse", None) => return Err(CliError::Usage("parse needs the KIND of report on stdin".into())),
        (what, None) => what.parse::<SysinfoCommand>().map_err(CliError::Usage)?,
        (what, Some(_)) => return Err(CliError::Usage(format!("{what} takes no further argument"))),
    };
    if args.output.count.is_some() && args.watch.is_none() {
        return Err(CliError::Usage("--count only applies with --watch".into()));
    }
    record::until_stopped(ask(args, command)).await
}

/// Asks for `command` once, or every `--watch` until `--count` reports were shown.
async fn ask(args: Args, command: SysinfoCommand) -> CliResult {
    let endpoint = match args.socket {
        Some(path) => Endpoint::Unix(path),
        None => Endpoint::Tcp(args.connect),
    };
    let config = ClientConfig { request_timeout: args.timeout, ..ClientConfig::default() };
    let address = endpoint.to_string();
    let recording = args.record.start(&address, telemon_capture::link_type::SYSINFO, &address)?;
    let recording = recording.as_ref();
    let Some(every) = args.watch else {
        let mut client = connect(&endpoint, config, recording).await.map_err(peer_error)?;
        let response = client.request(command).await.map_err(peer_error)?;
        return show(&response, args.output.json);
    };

    let mut countdown = args.output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client: Option<Client> = None;
    let mut shown = 0u64;
    loop {
        ticker.tick().await;
        let c = match client.as_mut() {
            Some(c) => c,
            None => client.insert(
                retry::retry("sysinfo", None, || connect(&endpoint, config.clone(), recording))
                    .await
                    .map_err(peer_error)?,
            ),
        };
        match c.request(command).await {
            Ok(response) => {
                if shown > 0 && !args.output.json {
                    output::print_line("")?;
                }
                show(&response, args.output.json)?;
                shown += 1;
                if countdown.tick() {
                    return Ok(());
                }
            }
            // Another protocol on that port: reconnecting would meet it again.
            Err(e @ sysinfo_wire::ClientError::Transport(TransportError::OtherProtocol { .. })) => {
                return Err(peer_error(e))
            }
            Err(e) => {
                eprintln!("telemon: sysinfo: {e} (reconnecting)");
                client = None;
            }
        }
    }
}

/// An error of the client, and for a peer of another protocol what it looks like.
fn peer_error(e: sysinfo_wire::ClientError) -> CliError {
    let first = match &e {
        sysinfo_wire::ClientError::Transport(TransportError::OtherProtocol { first }) => Some(&first[..]),
        _ => None,
    };
    CliError::Peer(output::peer_message(&e, first))
}

/// Connects to `endpoint`, through a recording tap with `--record`.
async fn connect(
    endpoint: &Endpoint,
    config: ClientConfig,
    recording: Option<&OneTarget>,
) -> Result<Client, sysinfo_wire::ClientError> {
    match recording {
        Some(recording) => Client::connect_with(endpoint, config, |stream| recording.tap(stream)).await,
        None => Client::connect(endpoint, config).await,
    }
}

/// What `--json` prints for one request.
#[derive(serde::Serialize)]
struct JsonReply<'a> {
    command: &'static str,
    /// How the reply ended (absent for `parse`).
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<End>,
    /// How many chunks it came in (absent for `parse`).
    #[serde(skip_serializing_if = "Option::is_none")]
    chunks: Option<usize>,
    bytes: usize,
    report: &'a Report,
}

/// Shows one reply: the text as the kernel formatted it, or one JSON line with `--json`.
pub fn show(response: &Response, json: bool) -> CliResult {
    let reply = &response.reply;
    if reply.end == End::Closed {
        eprintln!("telemon: sysinfo: the service closed the channel before the end-of-reply sentinel");
    }
    if json {
        output::print_json_line(&JsonReply {
            command: response.command.name(),
            end: Some(reply.end),
            chunks: Some(reply.chunks),
            bytes: reply.text.len(),
            report: &response.report,
        })?;
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(reply.text.as_bytes())?;
        out.flush()?;
    }
    if response.report == Report::UnknownCommand {
        return Err(CliError::Peer(format!("the service did not understand {}", response.command.name())));
    }
    Ok(())
}

fn parse(kind: SysinfoCommand, json: bool) -> CliResult {
    let mut input = Vec::new();
    let read = std::io::stdin().lock().take(DEFAULT_MAX_RESPONSE as u64 + 1).read_to_end(&mut input)?;
    if read > DEFAULT_MAX_RESPONSE {
        return Err(CliError::Peer(format!("input is larger than {DEFAULT_MAX_RESPONSE} bytes")));
    }
    let text = String::from_utf8(input).map_err(|e| {
        CliError::Peer(format!("input is not UTF-8 (at byte {})", e.utf8_error().valid_up_to()))
    })?;
    let report = Report::parse(kind, &text);
    let unknown = report.unknown_lines().len();
    if unknown > 0 {
        eprintln!("telemon: sysinfo: {unknown} line(s) not recognised as {} (kept as unknown)", kind.name());
    }
    if json {
        output::print_json_line(&JsonReply {
            command: kind.name(),
            end: None,
            chunks: None,
            bytes: text.len(),
            report: &report,
        })
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(report.render().as_bytes())?;
        out.flush()?;
        Ok(())
    }
}
