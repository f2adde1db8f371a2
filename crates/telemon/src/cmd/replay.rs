//! `telemon replay FILE`: plays a recording's inbound bytes back through the same decoders and one-target
//! views as the live subcommands (`--view`, `--json`, `--count`), at the recorded pace or faster.

use std::path::PathBuf;
use std::pin::Pin;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use telemon_capture::{
    link_type, Capture, Connection, Direction, Limits, ReadError, ReplayStream, Speed, Warning,
};

use crate::output::{CliError, CliResult, OutputArgs};

/// Play a recording (pcapng, from `--record`) back through the decoders and show it like the live view.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recording: a file, or a directory of rotated recordings (`telemon record --out DIR`).
    file: PathBuf,
    /// How fast: `max` (no pauses), or a factor of the recorded pace (`1x`, `10x`, `0.5x`).
    #[arg(long, default_value = "max")]
    speed: Speed,
    /// Which target of the recording (needed when it holds several).
    #[arg(long, value_name = "NAME")]
    target: Option<String>,
    /// Which view (default: the target's protocol): meter161, hmon, mono, smon or sysinfo.
    #[arg(long, value_parser = view_by_name)]
    view: Option<&'static View>,
    #[command(flatten)]
    output: OutputArgs,
}

/// Reads a recording, a file or a directory of rotated files, for the subcommand `command`: each
/// damaged file's warning goes to stderr, the records up to the damage are kept.
pub fn open(file: &std::path::Path, command: &str) -> Result<Capture, CliError> {
    let failed = |e: std::io::Error| CliError::Peer(format!("{}: {e}", file.display()));
    let (capture, warnings) = if file.is_dir() {
        Capture::from_dir(file, Limits::default()).map_err(failed)?
    } else {
        let capture = Capture::from_file(file, Limits::default()).map_err(failed)?;
        // A file that is no recording at all (`/etc/hostname`) is an error of its own, not damage.
        if let Some(Warning::Damaged { offset: 0, error: error @ ReadError::NotPcapng { .. } }) =
            &capture.warning
        {
            return Err(CliError::Peer(format!("{}: {error}", file.display())));
        }
        let warnings = capture.warning.iter().map(|w| (file.to_path_buf(), w.clone())).collect();
        (capture, warnings)
    };
    for (file, warning) in &warnings {
        eprintln!("telemon: {command}: {}: {warning}", file.display());
    }
    Ok(capture)
}

/// Runs the subcommand.
pub async fn run(args: Args) -> CliResult {
    let capture = open(&args.file, "replay")?;
    let targets = capture.targets();
    let name = match (&args.target, targets.as_slice()) {
        (Some(name), _) => name.clone(),
        (None, [one]) => one.name.clone(),
        (None, []) => {
            return Err(CliError::Peer(format!("{}: the recording holds no target", args.file.display())))
        }
        (None, many) => {
            let names: Vec<&str> = many.iter().map(|t| t.name.as_str()).collect();
            return Err(CliError::Usage(format!(
                "the recording holds {} targets; pick one with --target: {}",
                many.len(),
                names.join(", ")
            )));
        }
    };
    let connections = capture.connections(Some(&name));
    let Some(first) = connections.first() else {
        return Err(CliError::Usage(format!("the recording has no target named {name:?}")));
    };
    let link = first.target.link_type;
    let view = match args.view {
        Some(view) => view,
        None => VIEWS.iter().find(|v| v.link_type == link).ok_or_else(|| {
            CliError::Usage(format!("no view plays linktype {link} recordings; pick one with --view"))
        })?,
    };
    let peer_closed = connections.last().is_some_and(|c| c.peer_closed);
    let result = match view.play {
        Play::Connections(play) => {
            play(&connections, args.speed, &args.output).await.map(|to_the_end| (to_the_end, None))
        }
        Play::Streams(play) => {
            let streams: Vec<ReplayStream> =
                connections.iter().map(|c| ReplayStream::new(c, args.speed)).collect();
            // The views play the connections in order: the last one's clock says whether the recording's end
            // was reached.
            let end = streams.last().map(ReplayStream::clock).unwrap_or_default();
            match play(streams, &args.output).await {
                Ok(()) => Ok((end.played_out(), None)),
                // The recording stops where the live run stopped: the "closed connection" a view sees there is
                // the recording's end, not the peer's doing.
                Err(e) if end.at_end() && !matches!(e, CliError::Usage(_)) && !e.is_broken_pipe() => {
                    Ok((true, Some(e)))
                }
                Err(e) => Err(e),
            }
        }
    };
    let (to_the_end, error) = result?;
    // A replay that reaches the recording's end has done its job (exit 0); stderr says how it ended.
    match (to_the_end, peer_closed, error) {
        (false, ..) => {}
        (true, false, error) => {
            if let Some(e) = error {
                tracing::debug!(error = %e, "the recording ends here");
            }
            eprintln!("telemon: replay: end of recording");
        }
        (true, true, None) => {
            eprintln!("telemon: replay: end of recording, where the peer closed the connection")
        }
        (true, true, Some(e)) => {
            eprintln!("telemon: replay: end of recording, where the peer closed the connection: {e}")
        }
    }
    Ok(())
}

/// A one-target view that plays a recording: each protocol's subcommand has one (`cmd/<protocol>.rs`).
#[derive(Debug)]
pub struct View {
    /// The protocol's name, which `--view` takes.
    name: &'static str,
    /// The link type of the recordings it plays by default.
    link_type: u16,
    play: Play,
}

/// A view of inbound byte streams (see [`Play::Streams`]).
type PlayStreams = for<'a> fn(Vec<ReplayStream>, &'a OutputArgs) -> BoxFuture<'a, CliResult>;

/// A view of whole connections (see [`Play::Connections`]).
type PlayConnections =
    for<'a> fn(&'a [Connection], Speed, &'a OutputArgs) -> BoxFuture<'a, Result<bool, CliError>>;

/// How a view plays a recorded target's connections.
#[derive(Debug, Clone, Copy)]
enum Play {
    /// Their inbound bytes, one stream per connection in order, at the recorded pace.
    Streams(PlayStreams),
    /// The connections themselves (both directions: what was asked says what each reply is); `Ok(true)` when
    /// played to the recording's end.
    Connections(PlayConnections),
}

/// The one-target views, one line each.
static VIEWS: [View; 5] = [
    View { name: "meter161", link_type: link_type::METER161, play: Play::Streams(meter161_view) },
    View { name: "hmon", link_type: link_type::HMON, play: Play::Streams(hmon_view) },
    View { name: "mono", link_type: link_type::MONO, play: Play::Streams(mono_view) },
    View { name: "smon", link_type: link_type::SMON, play: Play::Streams(smon_view) },
    View { name: "sysinfo", link_type: link_type::SYSINFO, play: Play::Connections(sysinfo_view) },
];

/// `--view NAME`.
fn view_by_name(name: &str) -> Result<&'static View, String> {
    VIEWS.iter().find(|v| v.name.eq_ignore_ascii_case(name)).ok_or_else(|| {
        let names: Vec<&str> = VIEWS.iter().map(|v| v.name).collect();
        format!("unknown view {name:?} ({})", names.join(", "))
    })
}

fn meter161_view(streams: Vec<ReplayStream>, output: &OutputArgs) -> BoxFuture<'_, CliResult> {
    Box::pin(crate::cmd::meter161::show(meter161_events(streams), output))
}

fn hmon_view(streams: Vec<ReplayStream>, output: &OutputArgs) -> BoxFuture<'_, CliResult> {
    Box::pin(crate::cmd::hmon::replay(streams, output))
}

fn mono_view(streams: Vec<ReplayStream>, output: &OutputArgs) -> BoxFuture<'_, CliResult> {
    Box::pin(crate::cmd::mono::replay(streams, output.clone()))
}

fn smon_view(streams: Vec<ReplayStream>, output: &OutputArgs) -> BoxFuture<'_, CliResult> {
    Box::pin(async move {
        for stream in streams {
            crate::cmd::smon::replay(stream, output.clone()).await?;
        }
        Ok(())
    })
}

fn sysinfo_view<'a>(
    connections: &'a [Connection],
    speed: Speed,
    output: &'a OutputArgs,
) -> BoxFuture<'a, Result<bool, CliError>> {
    Box::pin(sysinfo_replay(connections, speed, output))
}

/// Plays recorded sysinfo connections into the one-target view: what the client sent says which report
/// each channel's reply is (read in recorded order, so that a channel used again for another report is
/// told apart), and replies are reassembled per channel in the order they arrived, pipelined or not. A
/// reply the recording cuts (telemon stopped before its end) is no report. `Ok(true)` when the recording
/// was played to its end, `Ok(false)` when `--count` stopped it first.
async fn sysinfo_replay(
    connections: &[Connection],
    speed: Speed,
    output: &OutputArgs,
) -> Result<bool, CliError> {
    use sysinfo_wire::{ChannelId, Frame, Reassembler, Report, Response, SysinfoCommand};
    let mut countdown = output.countdown();
    if countdown.is_done() {
        return Ok(false);
    }
    let max = sysinfo_wire::ClientConfig::default().max_response;
    for connection in connections {
        let start = tokio::time::Instant::now();
        let mut asked: std::collections::HashMap<ChannelId, (SysinfoCommand, Reassembler)> =
            Default::default();
        let (mut sent, mut received) = (bytes::BytesMut::new(), bytes::BytesMut::new());
        for (at, direction, bytes) in &connection.chunks {
            if *direction == Direction::Outbound {
                sent.extend_from_slice(bytes);
                while let Ok(Some(frame)) = sysinfo_wire::decode_frame(&mut sent) {
                    if let Frame::Message { channel, message } = frame {
                        if channel != ChannelId::BOOT {
                            if let Ok(command) = message.decode::<SysinfoCommand>() {
                                asked.insert(channel, (command, Reassembler::new(max)));
                            }
                        }
                    }
                }
                continue;
            }
            if let Speed::Times(_) = speed {
                tokio::time::sleep_until(start + speed.scale(*at)).await;
            }
            received.extend_from_slice(bytes);
            while let Some(frame) = sysinfo_wire::decode_frame(&mut received).map_err(CliError::peer)? {
                let (channel, message) = match frame {
                    Frame::Message { channel, message } => (channel, Some(message)),
                    Frame::Close { channel } => (channel, None),
                };
                let Some((_, reply)) = asked.get_mut(&channel) else { continue };
                let done = match message {
                    Some(message) => reply.push_bytes(message.into_bytes()),
                    // A close before the sentinel ends the reply, as the live client has it.
                    None => {
                        reply.close();
                        Ok(true)
                    }
                };
                match done {
                    Ok(false) => continue,
                    Ok(true) => {}
                    // One reply too large: the live client failed that request only.
                    Err(e) => {
                        eprintln!("telemon: sysinfo: channel {channel}: {e}");
                        asked.remove(&channel);
                        continue;
                    }
                }
                let Some((command, reply)) = asked.remove(&channel) else { continue };
                let reply = reply.finish();
                let report = Report::parse(command, &reply.text);
                crate::cmd::sysinfo::show(&Response { command, reply, report }, output.json)?;
                if countdown.tick() {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

type Meter161Events = Pin<Box<dyn Stream<Item = Result<meter161::Event, meter161::ClientError>> + Send>>;

/// The events `meter161::watch` would have given: per recorded connection, the handshake, the samples, the
/// disconnect.
fn meter161_events(streams: Vec<ReplayStream>) -> Meter161Events {
    let per_connection = futures::stream::iter(streams).then(|stream| async move {
        let config = meter161::ClientConfig::default().reconnect(false);
        match meter161::Client::over(stream, &config).await {
            Ok(client) => {
                let connected = meter161::Event::Connected(client.header().clone());
                let samples = client.map(|item| item.map(meter161::Event::Sample));
                futures::stream::once(async { Ok(connected) })
                    .chain(samples)
                    .chain(futures::stream::once(async { Ok(meter161::Event::Disconnected) }))
                    .boxed()
            }
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    });
    Box::pin(per_connection.flatten())
}
