//! `rvos-sim`: a fake rvOS init server and sysinfo service, on the `sysinfo-wire` host transport.
//!
//! ```text
//!  client ──ch 0: ConnectService{"sysinfo"}──▶ init ──NewConnection{client_pid, role 0} + server end──▶ sysinfo
//!         ◀─ch 0: Ok{} caps[0]=N ───────────
//!         ──ch N: command byte ─────────────────────────────────────────────────────────────────────▶
//!         ◀─ch N: 1024-byte chunks … sentinel (len 0) … CLOSE ──────────────────────────────────────
//! ```
//!
//! Every host connection is one client process with its own boot channel. Init answers
//! `ConnectService` exactly as rvOS's does (`"unknown service"`, `"bad request"`, `"use stdin/stdout"`,
//! `"no channels"`), and hands out a new channel per request. The service reads one message before its
//! deadline (else closes silently), answers undecodable requests with `"Unknown command\n"`, sends the
//! text in 1024-byte chunks with blocking (backpressured) sends, the sentinel, then closes. Unlike the real
//! kernel task, which serves one client at a time, every channel is served concurrently, so a client that
//! never sends or never reads cannot hold up the others.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use rvos_sim::{run, Config};
//! use sysinfo_wire::{Client, ClientConfig, Endpoint, Report, SysinfoCommand};
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?.to_string();
//! let shutdown = sim_common::Shutdown::new();
//! let sim = tokio::spawn(run(listener, Config::default(), shutdown.clone()));
//!
//! let mut client = Client::connect(&Endpoint::Tcp(addr), ClientConfig::default()).await?;
//! let response = client.request(SysinfoCommand::Watchdog).await?;
//! assert!(response.reply.text.starts_with("Watchdog: enabled\n"));
//! assert!(matches!(response.report, Report::Watchdog(w) if w.enabled));
//!
//! shutdown.cancel();
//! sim.await??;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod system;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use futures::StreamExt;
use sim_common::{Accept, ClientWriter, Shutdown};
use sysinfo_wire::encode_frame;
use sysinfo_wire::{
    chunk_text, BootRequest, BootResponse, ChannelId, Frame, HostCodec, Message, NewConnection,
    SysinfoCommand, TransportError, SYSINFO_SERVICE, UNKNOWN_COMMAND_TEXT,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio_util::codec::FramedRead;

pub use system::{KernelTask, System, SystemConfig, TICKS_PER_SEC};

/// The address `rvos-sim` and `telemon sysinfo` use by default.
pub use sysinfo_wire::DEFAULT_ADDR;
/// The service's default request deadline (`pet_interval`: half the 10 s watchdog timeout).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);
/// A channel's queue depth (`MAX_QUEUE_DEPTH`): also the per-connection outgoing frame queue.
pub const QUEUE_DEPTH: usize = 64;
/// Init's pid, stamped on boot replies.
pub const INIT_PID: u64 = 1;
/// The sysinfo service's pid, stamped on every chunk and sentinel.
pub const SYSINFO_PID: u64 = 3;

/// How the sim behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long the service waits for the one request on a new channel; `None` waits forever.
    pub request_deadline: Option<Duration>,
    /// The most channels one client may hold open at once before init answers `"no channels"`.
    pub max_channels_per_client: usize,
    /// How long the service takes to answer: each reply starts this long after its request arrived (a
    /// slow or overloaded VM). The replies of a pipelined batch wait together, not one after the other.
    pub reply_delay: Duration,
    /// The simulated system.
    pub system: SystemConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            request_deadline: Some(DEFAULT_DEADLINE),
            max_channels_per_client: 32,
            reply_delay: Duration::ZERO,
            system: SystemConfig::default(),
        }
    }
}

/// Counts of what the sim has done, published on a `watch` channel so tests can wait for events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Host connections accepted.
    pub connections: u64,
    /// Channels handed out by init.
    pub channels_opened: u64,
    /// Boot requests refused.
    pub boot_errors: u64,
    /// Replies completed with the sentinel (unknown commands included).
    pub replies: u64,
    /// Requests answered with "Unknown command".
    pub unknown_commands: u64,
    /// Channels closed because no request came before the deadline.
    pub deadlines_expired: u64,
    /// Channels the client closed before sending a request.
    pub closed_before_request: u64,
    /// Replies cut short because the client closed the channel or went away.
    pub replies_abandoned: u64,
    /// Connections dropped for breaking the transport's rules.
    pub protocol_errors: u64,
    /// Bytes of rendered reply text held now, waiting for their clients to drain them.
    pub reply_bytes_held: u64,
    /// The most reply text ever held at once: one reply per connection at most, however many channels a
    /// client opens and leaves unread.
    pub peak_reply_bytes_held: u64,
}

/// A handle on a running sim: its stats, and what a test changes in its system while it runs.
#[derive(Clone)]
pub struct SimHandle {
    stats: watch::Receiver<Stats>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SimHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHandle").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

impl SimHandle {
    /// Hangs the kernel task `task` (`hung`: it stops petting the watchdog, and its heartbeat in the
    /// Watchdog report grows older from now on) or lets it pet again. The system is first brought up to
    /// now, so the change takes effect at this moment, not at the next request.
    pub fn hang(&self, task: KernelTask, hung: bool) {
        let now = self.shared.now_ticks();
        let mut system = self.shared.system.lock().expect("system lock");
        system.advance_to(now);
        system.set_hung(task, hung);
    }

    /// The stats now.
    pub fn stats(&self) -> Stats {
        *self.stats.borrow()
    }

    /// Waits until `pred` holds for the stats.
    pub async fn wait_for(&mut self, pred: impl FnMut(&Stats) -> bool) -> Stats {
        *self.stats.wait_for(pred).await.expect("the sim's stats outlive its handle")
    }
}

struct Shared {
    config: Config,
    system: Mutex<System>,
    started: tokio::time::Instant,
    stats: watch::Sender<Stats>,
    next_pid: Mutex<u64>,
}

impl Shared {
    fn now_ticks(&self) -> u64 {
        // rvOS boots long before anyone asks; start the clock at 1 s so timestamps look lived-in.
        TICKS_PER_SEC + (self.started.elapsed().as_nanos() / 100) as u64
    }

    fn count(&self, f: impl FnOnce(&mut Stats)) {
        self.stats.send_modify(f);
    }
}

/// Why a connection was dropped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The client broke the transport's framing.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Serves the host transport on `listener` (TCP or Unix) until `shutdown` is cancelled.
pub async fn run<L: Accept>(listener: L, config: Config, shutdown: Shutdown) -> std::io::Result<()>
where
    L::Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sim, _) = start(config);
    serve(listener, sim, shutdown).await
}

/// The sim's state, before serving: lets tests hold a [`SimHandle`] before [`serve`] runs.
pub struct Sim(Arc<Shared>);

/// Creates a sim and a handle on its stats.
pub fn start(config: Config) -> (Sim, SimHandle) {
    let (stats, rx) = watch::channel(Stats::default());
    let started = tokio::time::Instant::now();
    let system = System::new(config.system.clone(), TICKS_PER_SEC);
    let shared = Shared { config, system: Mutex::new(system), started, stats, next_pid: Mutex::new(100) };
    let shared = Arc::new(shared);
    (Sim(shared.clone()), SimHandle { stats: rx, shared })
}

/// Serves `sim` on `listener` until `shutdown` is cancelled.
pub async fn serve<L: Accept>(listener: L, sim: Sim, shutdown: Shutdown) -> std::io::Result<()>
where
    L::Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let shared = sim.0;
    sim_common::accept_loop(listener, shutdown, move |stream, peer| {
        let shared = shared.clone();
        async move { serve_connection(stream, peer.to_string(), shared).await }
    })
    .await
}

fn frame_bytes(frame: &Frame) -> bytes::Bytes {
    let mut b = BytesMut::new();
    encode_frame(frame, &mut b);
    b.freeze()
}

async fn serve_connection<S>(stream: S, peer: String, shared: Arc<Shared>) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(stream);
    // A reply's frames, queued together, go out in one write, as one would send them over a socket.
    let writer = ClientWriter::spawn_coalescing(write, QUEUE_DEPTH, &peer);
    // One reply in flight per connection (the real service serves one client at a time): a client that asks
    // on many channels and reads none pins one rendered reply, not one per channel.
    let reply_slot = Arc::new(tokio::sync::Semaphore::new(1));
    let mut frames = FramedRead::new(read, HostCodec);
    let client_pid = {
        let mut next = shared.next_pid.lock().expect("pid lock");
        *next += 1;
        *next - 1
    };
    shared.count(|s| s.connections += 1);
    let mut channels: HashMap<ChannelId, mpsc::Sender<Message>> = HashMap::new();
    let mut services = tokio::task::JoinSet::new();
    let mut next_channel = 1u32;
    let result = loop {
        let frame = tokio::select! {
            Some(_) = services.join_next(), if !services.is_empty() => continue,
            frame = frames.next() => frame,
        };
        match frame {
            None => break Ok(()),
            // A client that hangs up with our last frames unread resets the connection: that is leaving.
            Some(Err(TransportError::Io(e)))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                tracing::debug!(%peer, error = %e, "client hung up");
                break Ok(());
            }
            Some(Err(e)) => {
                shared.count(|s| s.protocol_errors += 1);
                break Err(e.into());
            }
            Some(Ok(Frame::Message { channel: ChannelId::BOOT, message })) => {
                channels.retain(|_, tx| !tx.is_closed());
                let reply = boot(&shared, &message, channels.len(), next_channel).map(|service| {
                    let id = ChannelId(next_channel);
                    next_channel += 1;
                    let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
                    channels.insert(id, tx);
                    // What init sends the service's control endpoint, with the server end of the channel.
                    let hello =
                        Message::encode(&NewConnection { client_pid: client_pid as u32, channel_role: 0 })
                            .expect("five bytes fit");
                    services.spawn(service(
                        id,
                        hello,
                        rx,
                        writer.clone(),
                        reply_slot.clone(),
                        shared.clone(),
                    ));
                    id
                });
                let mut out = match reply {
                    Ok(id) => {
                        let mut m = Message::encode(&BootResponse::Ok).expect("one byte fits");
                        m.push_cap(id).expect("one cap fits");
                        m
                    }
                    Err(message) => {
                        shared.count(|s| s.boot_errors += 1);
                        Message::encode(&BootResponse::Error { message: message.to_owned() }).expect("short")
                    }
                };
                out = out.with_sender(INIT_PID);
                let frame = Frame::Message { channel: ChannelId::BOOT, message: out };
                if writer.send_wait(frame_bytes(&frame)).await.is_err() {
                    break Ok(());
                }
            }
            Some(Ok(Frame::Message { channel, message })) => {
                // Caps sent to the service are handed over and dropped unused, which closes them.
                for cap in message.caps() {
                    channels.remove(cap);
                }
                if let Some(tx) = channels.get(&channel) {
                    let message = message.with_sender(client_pid);
                    if tx.send(message).await.is_err() {
                        channels.remove(&channel);
                    }
                } else {
                    tracing::debug!(%peer, %channel, "message for a channel that is gone: dropped");
                }
            }
            Some(Ok(Frame::Close { channel })) => {
                channels.remove(&channel);
            }
        }
    };
    // The connection is gone: so is every channel on it. Services see their request channel close.
    drop(channels);
    while services.join_next().await.is_some() {}
    result
}

type Service = fn(
    ChannelId,
    Message,
    mpsc::Receiver<Message>,
    ClientWriter,
    Arc<tokio::sync::Semaphore>,
    Arc<Shared>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Init's side of a boot request: the service to connect, or the error text.
fn boot(shared: &Shared, message: &Message, open: usize, next: u32) -> Result<Service, &'static str> {
    match message.decode::<BootRequest>() {
        Ok(BootRequest::ConnectService { name }) if name == SYSINFO_SERVICE => {
            // Ids are never reused on a connection, so after 2^32 - 1 channels there are none left.
            if open >= shared.config.max_channels_per_client || next == u32::MAX {
                return Err("no channels");
            }
            shared.count(|s| s.channels_opened += 1);
            shared.system.lock().expect("system lock").note_channel_opened();
            Ok(|ch, hello, rx, writer, slot, shared| {
                Box::pin(sysinfo_service(ch, hello, rx, writer, slot, shared))
            })
        }
        Ok(BootRequest::ConnectService { name }) if name == "stdio" => Err("use stdin/stdout"),
        Ok(BootRequest::ConnectService { .. }) => Err("unknown service"),
        // The sim runs no programs and keeps no arguments for host clients.
        Ok(BootRequest::Spawn { .. } | BootRequest::GetArgs) | Err(_) => Err("bad request"),
    }
}

/// Waits until the client has closed its end (any further messages on the channel are never read).
async fn closed(rx: &mut mpsc::Receiver<Message>) {
    while rx.recv().await.is_some() {}
}

/// One sysinfo client: one request, the chunked reply, the sentinel, close.
async fn sysinfo_service(
    channel: ChannelId,
    hello: Message,
    mut rx: mpsc::Receiver<Message>,
    writer: ClientWriter,
    reply_slot: Arc<tokio::sync::Semaphore>,
    shared: Arc<Shared>,
) {
    let client_pid = hello.decode::<NewConnection>().map(|c| c.client_pid).unwrap_or(0);
    let first = match shared.config.request_deadline {
        Some(deadline) => tokio::time::timeout(deadline, rx.recv()).await,
        None => Ok(rx.recv().await),
    };
    let request = match first {
        Ok(Some(request)) => request,
        Ok(None) => {
            tracing::debug!(client_pid, %channel, "client closed before sending a request");
            shared.count(|s| s.closed_before_request += 1);
            shared.system.lock().expect("system lock").note_channel_closed();
            return;
        }
        Err(_) => {
            tracing::info!(client_pid, %channel, "no request before the deadline: closing");
            shared.count(|s| s.deadlines_expired += 1);
            shared.system.lock().expect("system lock").note_channel_closed();
            let _ = writer.send_wait(frame_bytes(&Frame::Close { channel })).await;
            return;
        }
    };
    let abandoned = |shared: &Shared| {
        tracing::debug!(client_pid, %channel, "client went away mid-reply");
        shared.count(|s| s.replies_abandoned += 1);
        shared.system.lock().expect("system lock").note_channel_closed();
    };
    if !shared.config.reply_delay.is_zero() {
        tokio::select! {
            biased;
            _ = closed(&mut rx) => return abandoned(&shared),
            () = tokio::time::sleep(shared.config.reply_delay) => {}
        }
    }
    let _slot = tokio::select! {
        biased;
        _ = closed(&mut rx) => return abandoned(&shared),
        slot = reply_slot.acquire_owned() => slot.expect("the slot is never closed"),
    };
    let text = match request.decode::<SysinfoCommand>() {
        Ok(command) => {
            tracing::debug!(client_pid, %channel, ?command, "request");
            let now = shared.now_ticks();
            let reply = shared.system.lock().expect("system lock").take_reply(command, now);
            reply.into_text()
        }
        Err(e) => {
            tracing::debug!(client_pid, %channel, error = %e, "undecodable request");
            shared.count(|s| s.unknown_commands += 1);
            UNKNOWN_COMMAND_TEXT.to_owned()
        }
    };
    let held = text.len() as u64;
    shared.count(|s| {
        s.reply_bytes_held += held;
        s.peak_reply_bytes_held = s.peak_reply_bytes_held.max(s.reply_bytes_held);
    });
    let chunks = chunk_text(text.as_bytes()).map(|c| Message::with_data(c).expect("chunks fit"));
    let mut sent = true;
    for message in chunks.chain(std::iter::once(Message::new())) {
        let frame = Frame::Message { channel, message: message.with_sender(SYSINFO_PID) };
        sent = tokio::select! {
            biased;
            _ = closed(&mut rx) => false,
            sent = writer.send_wait(frame_bytes(&frame)) => sent.is_ok(),
        };
        if !sent {
            break;
        }
    }
    drop(text);
    shared.count(|s| s.reply_bytes_held -= held);
    if !sent {
        return abandoned(&shared);
    }
    let _ = writer.send_wait(frame_bytes(&Frame::Close { channel })).await;
    shared.system.lock().expect("system lock").note_channel_closed();
    shared.count(|s| s.replies += 1);
}
