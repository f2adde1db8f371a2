//! `--replay FILE`: a sim serves a recording (pcapng, `telemon ... --record`) back as the peer, byte for byte,
//! with the recorded pacing or faster.
//!
//! Each client gets the next recorded connection of the target (the first client the first connection, and so
//! on, starting over after the last). What the recorded peer sent is written back at its recorded time
//! (scaled by the speed). In [`Mode::Stream`] (meter161, smon) what the client writes is read and ignored.
//! In [`Mode::Conversation`] (hmon, sysinfo, mono) the recording is followed in order: before sending an
//! answer the sim waits for the client to send the recorded request, byte for byte; a request the
//! recording does not hold (different bytes, or more requests than recorded) is logged as an error naming
//! the bytes, and the connection is closed, so the client sees the end instead of waiting forever.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use telemon_capture::{link_type, Connection, Direction, Speed};
use telemon_capture::{Capture, Limits};

/// The `--replay FILE`, `--speed` and `--target` options every sim shares (`#[command(flatten)]`).
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Serve this recording (pcapng from `telemon ... --record`) instead of simulating.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// With --replay: `1x` keeps the recorded pacing, `10x` is ten times faster, `max` does not wait.
    #[arg(
        id = "replay_speed",
        long = "replay-speed",
        value_name = "SPEED",
        default_value = "1x",
        requires = "replay"
    )]
    pub speed: Speed,
    /// With --replay: the target of the recording to serve (needed when it holds several of this protocol).
    #[arg(id = "replay_target", long = "replay-target", value_name = "NAME", requires = "replay")]
    pub target: Option<String>,
}

impl ReplayArgs {
    /// Loads the recording if `--replay` was given.
    pub fn load(&self, link_type: u16, mode: Mode) -> io::Result<Option<Arc<Replay>>> {
        match &self.replay {
            None => Ok(None),
            Some(file) => Replay::load(file, link_type, self.target.as_deref(), mode, self.speed).map(Some),
        }
    }
}

/// How a peer talks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The peer streams; what the client writes does not change it.
    Stream,
    /// The peer answers requests: each recorded answer waits for its recorded request.
    Conversation,
}

/// Why a replayed connection ended early.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The client asked for something the recording does not hold.
    #[error("the recording holds no answer to this request: expected {expected}, got {got}")]
    UnknownRequest {
        /// The recorded request (a preview).
        expected: String,
        /// What the client sent (a preview).
        got: String,
    },
    /// The connection failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A recording loaded for serving.
#[derive(Debug)]
pub struct Replay {
    connections: Vec<Connection>,
    next: AtomicUsize,
    mode: Mode,
    speed: Speed,
}

impl Replay {
    /// Loads the connections of `link_type` (of the target named `target`, or of the only target of that
    /// link type) from the recording at `path` (a file or a directory of rotated files).
    pub fn load(
        path: &Path,
        link_type: u16,
        target: Option<&str>,
        mode: Mode,
        speed: Speed,
    ) -> io::Result<Arc<Replay>> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("--replay {}: {e}", path.display()));
        let capture = if path.is_dir() {
            let (capture, warnings) = Capture::from_dir(path, Limits::default()).map_err(named)?;
            for (file, w) in warnings {
                tracing::warn!(file = %file.display(), "{w}");
            }
            capture
        } else {
            let capture = Capture::from_file(path, Limits::default()).map_err(named)?;
            if let Some(w) = &capture.warning {
                tracing::warn!(file = %path.display(), "{w}");
            }
            capture
        };
        let names: Vec<String> = capture
            .targets()
            .into_iter()
            .filter(|t| t.link_type == link_type && target.is_none_or(|n| n == t.name))
            .map(|t| t.name.clone())
            .collect();
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        let name = match names.as_slice() {
            [] => {
                return Err(invalid(format!(
                    "{}: no target of linktype {link_type} to replay",
                    path.display()
                )))
            }
            [one] => one.clone(),
            many if many.iter().all(|n| n == &many[0]) => many[0].clone(),
            many => {
                return Err(invalid(format!(
                    "{}: several targets of linktype {link_type} ({}); pick one with --replay-target",
                    path.display(),
                    many.join(", ")
                )))
            }
        };
        let connections: Vec<Connection> = capture
            .connections(Some(&name))
            .into_iter()
            .filter(|c| c.target.link_type == link_type && !c.chunks.is_empty())
            .collect();
        if connections.is_empty() {
            return Err(invalid(format!("{}: {name} has no recorded bytes", path.display())));
        }
        tracing::info!(target = %name, connections = connections.len(), ?speed, "replaying a recording");
        Ok(Arc::new(Replay { connections, next: AtomicUsize::new(0), mode, speed }))
    }

    /// The recorded connections.
    pub fn connections(&self) -> &[Connection] {
        &self.connections
    }

    /// Serves the next recorded connection on `stream`; returns when it is played out (the stream is then
    /// shut down) or fails.
    pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(&self, stream: S) -> Result<(), ReplayError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        play(&self.connections[i], self.mode, self.speed, stream).await
    }
}

/// Plays `connection` as the peer on `stream`.
pub async fn play<S: AsyncRead + AsyncWrite + Unpin>(
    connection: &Connection,
    mode: Mode,
    speed: Speed,
    stream: S,
) -> Result<(), ReplayError> {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let start = tokio::time::Instant::now();
    match mode {
        Mode::Stream => {
            let drain = async {
                let mut sink = vec![0u8; 4096];
                while matches!(reader.read(&mut sink).await, Ok(n) if n > 0) {}
                std::future::pending::<()>().await
            };
            let play = async {
                for (at, direction, bytes) in &connection.chunks {
                    if *direction == Direction::Inbound {
                        tokio::time::sleep_until(start + speed.scale(*at)).await;
                        writer.write_all(bytes).await?;
                    }
                }
                writer.shutdown().await?;
                Ok::<(), ReplayError>(())
            };
            tokio::select! {
                r = play => r,
                () = drain => Ok(()),
            }
        }
        Mode::Conversation => {
            let mut pending: Vec<u8> = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            for (at, direction, bytes) in &connection.chunks {
                match direction {
                    Direction::Inbound => {
                        tokio::time::sleep_until(start + speed.scale(*at)).await;
                        writer.write_all(bytes).await?;
                    }
                    Direction::Outbound => expect(&mut reader, &mut pending, &mut buf, bytes).await?,
                }
            }
            writer.flush().await?;
            // Played out: anything more the client asks is not in the recording.
            if pending.is_empty() {
                let n = reader.read(&mut buf).await?;
                pending.extend_from_slice(&buf[..n]);
            }
            if !pending.is_empty() {
                let got = preview(&pending);
                return Err(ReplayError::UnknownRequest { expected: "the end of the recording".into(), got });
            }
            writer.shutdown().await?;
            Ok(())
        }
    }
}

/// Reads from the client until it has sent `request` (byte for byte), keeping what follows it.
async fn expect<R: AsyncRead + Unpin>(
    reader: &mut R,
    pending: &mut Vec<u8>,
    buf: &mut [u8],
    request: &[u8],
) -> Result<(), ReplayError> {
    loop {
        let n = pending.len().min(request.len());
        if pending[..n] != request[..n] {
            return Err(ReplayError::UnknownRequest { expected: preview(request), got: preview(pending) });
        }
        if n == request.len() {
            pending.drain(..n);
            return Ok(());
        }
        let read = reader.read(buf).await?;
        if read == 0 {
            return Err(
                io::Error::new(io::ErrorKind::UnexpectedEof, "the client left mid-conversation").into()
            );
        }
        pending.extend_from_slice(&buf[..read]);
    }
}

/// At most 64 bytes, as text where printable.
fn preview(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(64)];
    let text = shown.escape_ascii().to_string();
    if bytes.len() > shown.len() {
        format!("\"{text}\"... ({} bytes)", bytes.len())
    } else {
        format!("\"{text}\"")
    }
}

/// Serves `replay` to every client of `listener` (each gets the next recorded connection) until shutdown.
pub async fn serve<L>(listener: L, replay: Arc<Replay>, shutdown: crate::Shutdown) -> io::Result<()>
where
    L: crate::Accept,
    L::Stream: AsyncRead + AsyncWrite + Unpin,
{
    crate::accept_loop(listener, shutdown, move |stream, _peer| {
        let replay = Arc::clone(&replay);
        async move { replay.serve(stream).await }
    })
    .await
}

/// For peers that dial the client (a Mono agent, an interpreter in POLL mode): connects to `addr` (retrying
/// while nothing listens), serves the next recorded connection, and dials again, until shutdown.
pub async fn dial(addr: &str, replay: Arc<Replay>, shutdown: crate::Shutdown) -> io::Result<()> {
    let pause = Duration::from_millis(200);
    loop {
        let connected = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            c = tokio::net::TcpStream::connect(addr) => c,
        };
        match connected {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    r = replay.serve(stream) => match r {
                        Ok(()) => tracing::info!(%addr, "recorded connection played out"),
                        Err(e) => tracing::warn!(%addr, error = %e, "replay ended"),
                    },
                }
            }
            Err(e) => tracing::debug!(%addr, error = %e, "cannot connect yet"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(chunks: &[(u64, Direction, &[u8])]) -> Connection {
        Connection {
            target: telemon_capture::Target::new("t", link_type::HMON, "-"),
            start_ns: 0,
            chunks: chunks.iter().map(|(ms, d, b)| (Duration::from_millis(*ms), *d, b.to_vec())).collect(),
            peer_closed: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_conversation_answers_each_recorded_request_and_refuses_others() {
        let c = conn(&[
            (0, Direction::Inbound, b"hello\n"),
            (10, Direction::Outbound, b"ask 1\n"),
            (20, Direction::Inbound, b"answer 1\n"),
            (30, Direction::Outbound, b"ask 2\n"),
            (40, Direction::Inbound, b"answer 2\n"),
        ]);
        let (client, server) = tokio::io::duplex(1024);
        let sim = tokio::spawn(async move { play(&c, Mode::Conversation, Speed::Max, server).await });
        let (mut r, mut w) = tokio::io::split(client);
        let mut got = vec![0u8; 6];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"hello\n");
        w.write_all(b"ask 1\n").await.unwrap();
        let mut got = vec![0u8; 9];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"answer 1\n");
        w.write_all(b"ask 3\n").await.unwrap();
        let err = sim.await.unwrap().unwrap_err();
        assert!(matches!(err, ReplayError::UnknownRequest { .. }), "{err}");
        assert!(err.to_string().contains("ask 3"), "{err}");
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "the connection ends: no hang");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_keeps_the_pacing_and_ignores_the_client() {
        let c = conn(&[
            (0, Direction::Inbound, b"a"),
            (1000, Direction::Outbound, b"x"),
            (2000, Direction::Inbound, b"b"),
        ]);
        let (mut client, server) = tokio::io::duplex(1024);
        let sim = tokio::spawn(async move { play(&c, Mode::Stream, Speed::Times(2.0), server).await });
        let started = tokio::time::Instant::now();
        client.write_all(b"anything").await.unwrap();
        let mut all = Vec::new();
        client.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"ab");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        sim.await.unwrap().unwrap();
    }
}
