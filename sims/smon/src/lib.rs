//! `smon-sim`: a monitor in the spirit of Tino's `mon` (2004). Every interval it samples real figures
//! from `/proc` and writes them as an smon stream: to stdout, appended to a file (`mon >>mon.out`), or to
//! every TCP client.
//!
//! ```text
//!  run / client:  17×FF FE                          resync (A10): every run and every client starts here
//!                 mon.version "0.1.0"  mon.compiled "Nov 22 2026"   (definitions + first values)
//!  per sample:    smon.time  linux.uptime  linux.load.*  linux.mem.*
//!                 linux.cpu.*[cpu]  linux.net.*[ifindex]  linux.disk.*[major, minor]   (indexed tokens, A13)
//! ```
//!
//! A TCP client gets a resync, the version strings, the latest sample as full definitions, then the
//! live stream. A client that stops reading is dropped once its bounded queue
//! ([`sim_common::ClientWriter`]) is full, so it never holds up the sim or the other clients.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use smon_codec::{DecoderConfig, Sample, StreamDecoder, Update};
//! use smon_sim::{write_stream, Config};
//!
//! struct Counter(u64);
//! impl smon_sim::Source for Counter {
//!     fn sample(&mut self) -> Vec<Sample> {
//!         self.0 += 5;
//!         vec![Sample::new("smon.time", [], self.0)]
//!     }
//! }
//!
//! let config = Config { count: Some(2), interval: smon_sim::MIN_INTERVAL, ..Config::default() };
//! let mut out = Vec::new();
//! write_stream(&mut out, Counter(1000), &config, sim_common::Shutdown::new()).await?;
//! let updates = StreamDecoder::decode_all(&out, DecoderConfig::default()).unwrap();
//! assert_eq!(updates[0], Update::Resync);
//! let times: Vec<Sample> = updates.into_iter().filter_map(Update::into_sample).collect();
//! assert_eq!(times.last(), Some(&Sample::new("smon.time", [], 1010)));
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod proc;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sim_common::{accept_loop, ClientWriter, SendError, Shutdown};
use smon_codec::{EncoderConfig, Sample, StreamEncoder};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

pub use proc::ProcSource;

/// `mon`'s default interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The shortest interval allowed.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// The default address of `--listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7399";
/// Samples queued for one TCP client before it counts as lagging and is dropped.
pub const DEFAULT_CLIENT_QUEUE: usize = 64;
/// The version string sent as `mon.version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The build date sent as `mon.compiled`, in C's `__DATE__` form.
pub const COMPILED: &str = env!("SMON_COMPILED");

/// Where the samples come from: [`ProcSource`] for real figures, anything else in tests.
pub trait Source: Send + 'static {
    /// One sample: every figure, in a stable order (so token deltas stay one byte).
    fn sample(&mut self) -> Vec<Sample>;
}

/// What a TCP server reports about its clients (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A client connected.
    Connected(SocketAddr),
    /// A client was dropped because it did not keep up (or went away mid-write).
    Dropped(SocketAddr, SendError),
    /// A client left (it closed the connection, or the stream ended).
    Finished(SocketAddr),
}

/// How the monitor runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Time between samples (at least [`MIN_INTERVAL`]).
    pub interval: Duration,
    /// Stop after this many samples (`None`: run until shut down).
    pub count: Option<u64>,
    /// Per-client queue, in samples, before a slow client is dropped.
    pub client_queue: usize,
    /// Where a server reports [`ServerEvent`]s, if anywhere.
    pub events: Option<mpsc::UnboundedSender<ServerEvent>>,
}

impl Default for Config {
    fn default() -> Self {
        Config { interval: DEFAULT_INTERVAL, count: None, client_queue: DEFAULT_CLIENT_QUEUE, events: None }
    }
}

/// `mon.version` and `mon.compiled`, sent first by every run and to every client.
pub fn header() -> Vec<Sample> {
    vec![Sample::new("mon.version", [], VERSION), Sample::new("mon.compiled", [], COMPILED)]
}

fn encode_all(enc: &mut StreamEncoder, samples: &[Sample], out: &mut BytesMut) {
    for s in samples {
        if let Err(e) = enc.encode(s, out) {
            tracing::warn!(name = %s.name, error = %e, "sample not sent");
        }
    }
}

fn ticker(interval: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(interval.max(MIN_INTERVAL));
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

/// Writes the stream to `out` (stdout, or a file opened for appending): a resync, the header, then one
/// sample per interval, until `config.count` samples or `shutdown`. Returns the samples written.
pub async fn write_stream<W, S>(
    mut out: W,
    mut source: S,
    config: &Config,
    shutdown: Shutdown,
) -> std::io::Result<u64>
where
    W: AsyncWrite + Unpin,
    S: Source,
{
    let mut enc = StreamEncoder::new(EncoderConfig { resync_at_start: true, ..Default::default() });
    let mut buf = BytesMut::new();
    enc.resync(&mut buf);
    encode_all(&mut enc, &header(), &mut buf);
    let mut ticks = ticker(config.interval);
    let mut written = 0;
    while config.count.is_none_or(|n| written < n) {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticks.tick() => {}
        }
        encode_all(&mut enc, &source.sample(), &mut buf);
        out.write_all(&buf).await?;
        out.flush().await?;
        buf.clear();
        written += 1;
    }
    out.flush().await?;
    Ok(written)
}

/// The latest sample, as a server's clients see it: `None` until the first one; the feed ends when its
/// sampler has taken its last sample.
pub type Feed = watch::Receiver<Option<Arc<Vec<Sample>>>>;

/// Samples `source` on a new task every `config.interval`, at most `config.count` times and until
/// `shutdown`, publishing each sample on the returned [`Feed`]. [`serve`] runs one per server; several
/// servers may share one through [`serve_feed`] (`smon-sim --instances N`: N servers, one `/proc` reader).
pub fn spawn_sampler<S: Source>(
    mut source: S,
    config: &Config,
    shutdown: Shutdown,
) -> (Feed, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel::<Option<Arc<Vec<Sample>>>>(None);
    let (interval, count) = (config.interval, config.count);
    let sampler = tokio::spawn(async move {
        let mut ticks = ticker(interval);
        let mut taken = 0u64;
        while count.is_none_or(|n| taken < n) {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticks.tick() => {}
            }
            tx.send_replace(Some(Arc::new(source.sample())));
            taken += 1;
        }
    });
    (rx, sampler)
}

/// Serves the stream to every TCP client of `listener` until `shutdown`.
pub async fn serve<S: Source>(
    listener: TcpListener,
    source: S,
    config: Config,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let (feed, sampler) = spawn_sampler(source, &config, shutdown.clone());
    let result = serve_feed(listener, feed, config, shutdown).await;
    sampler.abort();
    result
}

/// Serves the samples of `feed` (from [`spawn_sampler`]) to every TCP client of `listener` until
/// `shutdown`; `config.interval` and `config.count` are the sampler's business.
pub async fn serve_feed(
    listener: TcpListener,
    rx: Feed,
    config: Config,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let config = Arc::new(config);
    accept_loop(listener, shutdown, move |stream: TcpStream, peer: SocketAddr| {
        let rx = rx.clone();
        let config = Arc::clone(&config);
        async move {
            let events = config.events.clone();
            let report = |e: ServerEvent| {
                if let Some(tx) = &events {
                    let _ = tx.send(e);
                }
            };
            report(ServerEvent::Connected(peer));
            match client(stream, peer, rx, &config).await {
                Ok(()) => {
                    report(ServerEvent::Finished(peer));
                    Ok(())
                }
                Err(e) => {
                    report(ServerEvent::Dropped(peer, e.clone()));
                    Err(e)
                }
            }
        }
    })
    .await
}

/// One client: resync, header, the latest sample as definitions, then every new sample.
async fn client(stream: TcpStream, peer: SocketAddr, mut rx: Feed, config: &Config) -> Result<(), SendError> {
    let (mut read, write) = stream.into_split();
    let writer = ClientWriter::spawn(write, config.client_queue, peer);
    let mut enc = StreamEncoder::new(EncoderConfig::default());
    let mut buf = BytesMut::new();
    enc.resync(&mut buf);
    encode_all(&mut enc, &header(), &mut buf);
    let latest = rx.borrow_and_update().clone();
    if let Some(batch) = latest {
        encode_all(&mut enc, &batch, &mut buf);
    }
    writer.send(buf.split().freeze())?;
    let mut scratch = [0u8; 256];
    loop {
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return Ok(()); // the sampler has finished
                }
                let batch = rx.borrow_and_update().clone();
                if let Some(batch) = batch {
                    encode_all(&mut enc, &batch, &mut buf);
                    writer.send(buf.split().freeze())?;
                }
            }
            n = read.read(&mut scratch) => {
                // Clients have nothing to say; EOF or an error means they left.
                if matches!(n, Ok(0) | Err(_)) {
                    return Ok(());
                }
            }
            _ = writer.closed() => return Err(SendError::Closed { peer: peer.to_string() }),
        }
    }
}
