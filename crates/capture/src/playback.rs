//! Serving a recording back: its connections, and [`ReplayStream`], an `AsyncRead + AsyncWrite` that
//! yields one connection's inbound bytes with the recorded pacing (or faster) and swallows what is
//! written to it.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::format::{Direction, RecordKind, Target};
use crate::read::Capture;

/// How fast a recording plays back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// As fast as the reader takes it: no pauses.
    Max,
    /// This many times the recorded pace (`1x` is the original pacing).
    Times(f64),
}

impl Speed {
    /// The pause before something recorded `offset` after the start.
    pub fn scale(self, offset: Duration) -> Duration {
        match self {
            Speed::Max => Duration::ZERO,
            Speed::Times(f) => offset.div_f64(f),
        }
    }
}

impl FromStr for Speed {
    type Err = String;

    /// `max`, `10x`, `0.5x` or `10`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("max") {
            return Ok(Speed::Max);
        }
        let n = s.strip_suffix(['x', 'X']).unwrap_or(s);
        match n.parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 => Ok(Speed::Times(f)),
            _ => Err(format!("invalid speed {s:?}: use max, or a factor like 1x, 10x, 0.5x")),
        }
    }
}

/// One connection of a recording: what crossed it, in order, with times relative to its first record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// Which target.
    pub target: Target,
    /// Wall-clock time (ns since the epoch) of its first record.
    pub start_ns: u64,
    /// Each read or write: offset from `start_ns`, direction, bytes.
    pub chunks: Vec<(Duration, Direction, Vec<u8>)>,
    /// Whether the recording holds the peer's close ([`RecordKind::PeerClosed`]): the connection ended
    /// there because the peer closed it, not because the recording stopped.
    pub peer_closed: bool,
}

impl Connection {
    /// The inbound bytes (what the peer sent), concatenated.
    pub fn inbound(&self) -> Vec<u8> {
        self.bytes(Direction::Inbound)
    }

    /// The bytes going `direction`, concatenated.
    pub fn bytes(&self, direction: Direction) -> Vec<u8> {
        self.chunks.iter().filter(|c| c.1 == direction).flat_map(|c| c.2.iter().copied()).collect()
    }
}

impl Capture {
    /// The recording's connections, in the order they started, optionally only those of the target named
    /// `target`. A connection runs from an open mark to a close mark, across sections (a file rotated or
    /// appended to continues the target's connection); records outside any form connections of their own.
    pub fn connections(&self, target: Option<&str>) -> Vec<Connection> {
        let mut done = Vec::new();
        let mut open: HashMap<&Target, Connection> = HashMap::new();
        for section in &self.sections {
            for record in &section.records {
                let Some(t) = section.targets.get(record.interface as usize) else { continue };
                if target.is_some_and(|name| name != t.name) {
                    continue;
                }
                let new = || Connection {
                    target: t.clone(),
                    start_ns: record.time_ns,
                    chunks: Vec::new(),
                    peer_closed: false,
                };
                match &record.kind {
                    RecordKind::Open => {
                        if let Some(c) = open.insert(t, new()) {
                            done.push(c);
                        }
                    }
                    RecordKind::PeerClosed => open.entry(t).or_insert_with(new).peer_closed = true,
                    RecordKind::Close => {
                        if let Some(c) = open.remove(t) {
                            done.push(c);
                        }
                    }
                    RecordKind::Data { direction, bytes } => {
                        let c = open.entry(t).or_insert_with(new);
                        let offset = Duration::from_nanos(record.time_ns.saturating_sub(c.start_ns));
                        c.chunks.push((offset, *direction, bytes.clone()));
                    }
                    RecordKind::Other(_) => {}
                }
            }
        }
        done.extend(open.into_values());
        done.sort_by_key(|c| c.start_ns);
        done
    }
}

/// Plays one connection's inbound bytes as a stream: each read returns the next recorded chunk once its
/// time has come (at [`Speed`]); writes are accepted and counted, not checked. After the last chunk, reads
/// end (EOF), or stay pending with [`ReplayStream::hold_open`].
#[derive(Debug)]
pub struct ReplayStream {
    chunks: VecDeque<(Duration, Vec<u8>)>,
    /// How much of the front chunk was read.
    pos: usize,
    speed: Speed,
    start: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
    hold_open: bool,
    written: u64,
    clock: ReplayClock,
}

/// The recorded time of what a [`ReplayStream`] last handed out: a clock that follows the recording,
/// for stamping what was decoded from it; it also tells whether the stream reached the recording's end.
#[derive(Debug, Clone, Default)]
pub struct ReplayClock(Arc<ClockState>);

#[derive(Debug, Default)]
struct ClockState {
    last_read: AtomicU64,
    /// Every recorded chunk was handed out.
    played_out: AtomicBool,
    /// A read found nothing left: end of file, or pending forever with [`ReplayStream::hold_open`].
    at_end: AtomicBool,
}

impl ReplayClock {
    /// The offset (from the connection's start) of the chunk read last.
    pub fn last_read(&self) -> Duration {
        Duration::from_nanos(self.0.last_read.load(Ordering::Relaxed))
    }

    /// Whether every recorded chunk was handed out.
    pub fn played_out(&self) -> bool {
        self.0.played_out.load(Ordering::Relaxed)
    }

    /// Whether a read found no recorded chunk left: what went wrong after that is the recording's end,
    /// not the peer's doing (unless the recording holds the peer's close, [`Connection::peer_closed`]).
    pub fn at_end(&self) -> bool {
        self.0.at_end.load(Ordering::Relaxed)
    }
}

impl ReplayStream {
    /// Plays `connection`'s inbound bytes at `speed`; the clock starts at the first read.
    pub fn new(connection: &Connection, speed: Speed) -> Self {
        let chunks = connection
            .chunks
            .iter()
            .filter(|c| c.1 == Direction::Inbound)
            .map(|(at, _, bytes)| (*at, bytes.clone()))
            .collect();
        ReplayStream {
            chunks,
            pos: 0,
            speed,
            start: None,
            sleep: None,
            hold_open: false,
            written: 0,
            clock: ReplayClock::default(),
        }
    }

    /// Keep the stream open (reads pending) after the last chunk, as a peer that went quiet.
    pub fn hold_open(mut self) -> Self {
        self.hold_open = true;
        self
    }

    /// A clock reading the recorded time of the chunk read last.
    pub fn clock(&self) -> ReplayClock {
        self.clock.clone()
    }

    /// Bytes written to the stream so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Whether every recorded chunk was read.
    pub fn is_done(&self) -> bool {
        self.chunks.is_empty()
    }
}

impl AsyncRead for ReplayStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let start = *this.start.get_or_insert_with(Instant::now);
        loop {
            let Some((at, bytes)) = this.chunks.front() else {
                this.clock.0.played_out.store(true, Ordering::Relaxed);
                this.clock.0.at_end.store(true, Ordering::Relaxed);
                return if this.hold_open { Poll::Pending } else { Poll::Ready(Ok(())) };
            };
            let due = start + this.speed.scale(*at);
            if this.pos == 0 && Instant::now() < due {
                let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                sleep.as_mut().reset(due);
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            let rest = &bytes[this.pos..];
            if rest.is_empty() {
                this.chunks.pop_front();
                this.pos = 0;
                continue;
            }
            let n = rest.len().min(buf.remaining());
            this.clock.0.last_read.store(u64::try_from(at.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
            buf.put_slice(&rest[..n]);
            this.pos += n;
            if this.pos == bytes.len() {
                this.chunks.pop_front();
                this.pos = 0;
                if this.chunks.is_empty() {
                    this.clock.0.played_out.store(true, Ordering::Relaxed);
                }
            }
            return Poll::Ready(Ok(()));
        }
    }
}

impl AsyncWrite for ReplayStream {
    fn poll_write(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.written += buf.len() as u64;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds() {
        assert_eq!("max".parse::<Speed>(), Ok(Speed::Max));
        assert_eq!("10x".parse::<Speed>(), Ok(Speed::Times(10.0)));
        assert_eq!("0.5".parse::<Speed>(), Ok(Speed::Times(0.5)));
        assert!("0x".parse::<Speed>().is_err());
        assert!("fast".parse::<Speed>().is_err());
        assert_eq!(Speed::Times(10.0).scale(Duration::from_secs(5)), Duration::from_millis(500));
    }
}
