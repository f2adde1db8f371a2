//! `telemon replay FILE`: plays a recording's inbound bytes back through the same decoders and one-target
//! views as the live subcommands (`--view`, `--json`, `--count`), at the recorded pace or faster.

use std::path::PathBuf;
use std::pin::Pin;

use futures::{Stream, StreamExt};
use telemon_capture::{Capture, Connection, Direction, Limits, Protocol, ReplayStream, Speed};

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
    #[arg(long)]
    view: Option<Protocol>,
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
    let view = args.view.unwrap_or(first.target.protocol);
    match view {
        Protocol::Meter161 => {
            crate::meter161::show(meter161_events(connections, args.speed), &args.output).await
        }
        Protocol::Smon => {
            // One stream: the decoder carries its token table across reconnects as `smon read` of
            // appended runs does.
            for connection in &connections {
                crate::smon::replay(ReplayStream::new(connection, args.speed), args.output.clone()).await?;
            }
            Ok(())
        }
        Protocol::Hmon => {
            let streams = connections.iter().map(|c| ReplayStream::new(c, args.speed)).collect();
            crate::hmon::replay(streams, &args.output).await
        }
        Protocol::Mono => {
            let streams = connections.iter().map(|c| ReplayStream::new(c, args.speed)).collect();
            crate::mono::replay(streams, args.output.clone()).await
        }
        Protocol::Sysinfo => {
            let mut countdown = args.output.countdown();
            for connection in &connections {
                // The requests telemon sent, in order, say which report each recorded reply is.
                let commands = sysinfo_commands(&connection.bytes(Direction::Outbound));
                let stream = ReplayStream::new(connection, args.speed);
                let mut client = sysinfo_wire::Client::new(stream, sysinfo_wire::ClientConfig::default());
                for command in commands {
                    let response = client.request(command).await.map_err(CliError::peer)?;
                    crate::sysinfo::show(&response, args.output.json)?;
                    if countdown.tick() {
                        return Ok(());
                    }
                }
            }
            Ok(())
        }
        other => {
            Err(CliError::Usage(format!("replay --view {other}: this view cannot replay recordings yet")))
        }
    }
}

/// The sysinfo commands in the bytes a client sent: each message on a channel other than the boot channel.
fn sysinfo_commands(outbound: &[u8]) -> Vec<sysinfo_wire::SysinfoCommand> {
    let mut buf = bytes::BytesMut::from(outbound);
    let mut commands = Vec::new();
    while let Ok(Some(frame)) = sysinfo_wire::decode_frame(&mut buf) {
        if let sysinfo_wire::Frame::Message { channel, message } = frame {
            if channel != sysinfo_wire::ChannelId::BOOT {
                if let Ok(command) = sysinfo_wire::wire::from_bytes(message.data()) {
                    commands.push(command);
                }
            }
        }
    }
    commands
}

type Meter161Events = Pin<Box<dyn Stream<Item = Result<meter161::Event, meter161::ClientError>> + Send>>;

/// The events `meter161::watch` would have given: per recorded connection, the handshake, the samples, the
/// disconnect.
fn meter161_events(connections: Vec<Connection>, speed: Speed) -> Meter161Events {
    let per_connection = futures::stream::iter(connections).then(move |c| async move {
        let config = meter161::ClientConfig::default().reconnect(false);
        match meter161::Client::over(ReplayStream::new(&c, speed), &config).await {
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
