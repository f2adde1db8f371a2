//! What every fake peer in `sims/` shares, written once.
//!
//! * [`init_tracing`]: one logging set-up for every sim binary (`RUST_LOG`, stderr).
//! * [`Shutdown`]: a cancellation token; [`shutdown_on_ctrl_c`] wires it to SIGINT/SIGTERM.
//! * [`Accept`] and [`accept_loop`]: one accept loop for TCP and Unix listeners that spawns a task per
//!   client, keeps accepting when a handler fails, and stops on shutdown.
//! * [`ClientWriter`]: a bounded per-client output queue drained by its own task, so that a client which
//!   stops reading never stalls the sim or its other clients: once the queue is full the client is
//!   reported as lagging and its connection is cut.
//! * [`bind_unix_replacing_stale`]: create `DIR/.sockets/NAME` (folder mode 0700), replacing a stale socket.
//! * [`Running`]: a sim started in-process on a background task (tests, `telemon` tests, benches), stopped
//!   with [`Running::stop`] or cancelled when dropped; [`Running::spawn_tcp`] binds `127.0.0.1:0` first.
//! * [`recorded_peer`]: `--replay FILE` (serving a recording back as the peer), shared by every sim.
//! * `--instances N` (one process serving N independent targets, for fleet benchmarks):
//!   [`raise_open_file_limit`], [`consecutive_addrs`] and [`bind_consecutive`] for N listeners on consecutive
//!   ports, [`run_instances`] to run them as tasks of one runtime, and [`free_consecutive_ports`] for tests.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use sim_common::{accept_loop, ClientWriter, Shutdown};
//! use tokio::net::TcpListener;
//!
//! let listener = TcpListener::bind("127.0.0.1:0").await?;
//! let shutdown = Shutdown::new();
//! let server = tokio::spawn(accept_loop(listener, shutdown.clone(), |stream, peer| async move {
//!     let (_read, write) = stream.into_split();
//!     let writer = ClientWriter::spawn(write, 64, peer);
//!     writer.send(bytes::Bytes::from_static(b"hello\n"))?;
//!     Ok::<(), sim_common::SendError>(())
//! }));
//! shutdown.cancel();
//! server.await.unwrap()?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod recorded_peer;

use std::fmt::Display;
use std::future::Future;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;
pub use tokio_util::sync::CancellationToken as Shutdown;

/// Installs a `tracing` subscriber writing to stderr, filtered by `RUST_LOG` (default `info`).
///
/// Safe to call more than once (later calls do nothing), so tests may call it too.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // No colour codes when stderr is a pipe (`cargo xtask sim` relays it, CI logs it).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .try_init();
}

/// Returns a [`Shutdown`] token that is cancelled on Ctrl-C (SIGINT) or SIGTERM.
pub fn shutdown_on_ctrl_c() -> Shutdown {
    let token = Shutdown::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
        }
        tracing::info!("shutting down");
        trigger.cancel();
    });
    token
}

/// A listener the [`accept_loop`] can drive: TCP or Unix.
pub trait Accept: Send + 'static {
    /// The accepted stream.
    type Stream: Send + 'static;
    /// A printable peer name for logs.
    type Peer: Display + Send + 'static;
    /// Accepts one connection.
    fn accept_one(&self) -> impl Future<Output = io::Result<(Self::Stream, Self::Peer)>> + Send;
}

impl Accept for TcpListener {
    type Stream = TcpStream;
    type Peer = std::net::SocketAddr;
    async fn accept_one(&self) -> io::Result<(TcpStream, std::net::SocketAddr)> {
        let (stream, peer) = self.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, peer))
    }
}

/// A Unix peer, named by its connection number (Unix peers are usually unnamed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnixPeer(pub u64);

impl Display for UnixPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unix#{}", self.0)
    }
}

/// A [`UnixListener`] that numbers its peers for the logs.
#[derive(Debug)]
pub struct NumberedUnixListener {
    listener: UnixListener,
    next: std::sync::atomic::AtomicU64,
}

impl NumberedUnixListener {
    /// Wraps a bound listener.
    pub fn new(listener: UnixListener) -> Self {
        Self { listener, next: std::sync::atomic::AtomicU64::new(1) }
    }

    /// The wrapped listener.
    pub fn get_ref(&self) -> &UnixListener {
        &self.listener
    }
}

impl Accept for NumberedUnixListener {
    type Stream = UnixStream;
    type Peer = UnixPeer;
    async fn accept_one(&self) -> io::Result<(UnixStream, UnixPeer)> {
        let (stream, _) = self.listener.accept().await?;
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok((stream, UnixPeer(n)))
    }
}

/// Accepts connections until `shutdown` is cancelled, spawning `handler` for each one.
///
/// A handler error is logged with the peer's name and never stops the loop; neither does a failed
/// `accept` (for example EMFILE), after which the loop pauses briefly instead of spinning. When the loop
/// stops, handlers still running are cancelled with it (they run under a child token they can watch via
/// the shutdown they captured, and are aborted when the loop returns).
pub async fn accept_loop<L, H, F, E>(listener: L, shutdown: Shutdown, handler: H) -> io::Result<()>
where
    L: Accept,
    H: Fn(L::Stream, L::Peer) -> F + Send + 'static,
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept_one() => match accepted {
                Ok((stream, peer)) => {
                    tracing::info!(%peer, "client connected");
                    let name = peer.to_string();
                    let fut = handler(stream, peer);
                    tasks.spawn(async move {
                        match fut.await {
                            Ok(()) => tracing::info!(peer = %name, "client finished"),
                            Err(e) => tracing::warn!(peer = %name, error = %e, "client dropped"),
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    tasks.shutdown().await;
    Ok(())
}

/// The client did not keep up: its bounded queue was full (or its writer has stopped).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    /// The queue was full (in messages or in bytes): the client stopped reading or reads too slowly.
    #[error("client {peer} lagged: {capacity} messages or {max_bytes} bytes queued and unread")]
    Lagged {
        /// The client's name.
        peer: String,
        /// The queue's capacity in messages.
        capacity: usize,
        /// The queue's capacity in bytes.
        max_bytes: usize,
    },
    /// The writer task has ended (the client went away or a write failed).
    #[error("client {peer} is gone")]
    Closed {
        /// The client's name.
        peer: String,
    },
}

/// How long a dropped [`ClientWriter`] keeps trying to flush what is queued before it gives up and
/// closes the connection (a client that stopped reading must not pin the task and its socket forever).
pub const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// The bytes a [`ClientWriter`] holds for one client by default: a client that stops reading pins at most this
/// much (plus one message larger than it) before it is cut, however large the messages are.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 1 << 20;

/// A bounded output queue for one client, drained by its own writer task.
///
/// The queue is bounded twice: by messages (`capacity`) and by bytes ([`DEFAULT_MAX_QUEUED_BYTES`], or
/// [`ClientWriter::with_max_bytes`]), so that a sim that wakes late and batches thousands of lines into one
/// message cannot pin megabytes for each stalled client.
///
/// [`ClientWriter::send`] never waits: when the queue is full the client is lagging,
/// the send fails with [`SendError::Lagged`] and the connection is cut at once (even a write blocked on
/// the full socket is abandoned), so the caller only has to log it and carry on with the others.
/// [`ClientWriter::sever`] cuts the connection on purpose. Dropping every handle lets the task flush
/// what is queued, for at most [`LINGER`], and then shut the stream down.
#[derive(Clone)]
pub struct ClientWriter {
    tx: mpsc::Sender<(Bytes, tokio::sync::OwnedSemaphorePermit)>,
    /// One permit per byte queued and not yet written (a message larger than the budget takes all of it).
    budget: std::sync::Arc<tokio::sync::Semaphore>,
    max_bytes: usize,
    peer: String,
    cut: Shutdown,
    _closing: std::sync::Arc<tokio_util::sync::DropGuard>,
}

impl std::fmt::Debug for ClientWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientWriter")
            .field("peer", &self.peer)
            .field("queued", &(self.tx.max_capacity() - self.tx.capacity()))
            .field("queued_bytes", &(self.max_bytes - self.budget.available_permits()))
            .field("cut", &self.cut.is_cancelled())
            .finish()
    }
}

/// The most bytes one coalescing write gathers (see [`ClientWriter::spawn_coalescing`]).
pub const COALESCE_BYTES: usize = 64 * 1024;

impl ClientWriter {
    /// Spawns the writer task for `stream`, with room for `capacity` unsent messages and at most
    /// [`DEFAULT_MAX_QUEUED_BYTES`] unsent bytes.
    pub fn spawn<W>(stream: W, capacity: usize, peer: impl Display) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::spawn_with(stream, capacity, peer, false)
    }

    /// Like [`ClientWriter::spawn`], but the messages queued at the moment a write starts go out in
    /// that one write (up to [`COALESCE_BYTES`]): for a peer whose messages are framed on one stream
    /// (rvOS's host transport), not for one that writes each line by itself (sys161).
    pub fn spawn_coalescing<W>(stream: W, capacity: usize, peer: impl Display) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::spawn_with(stream, capacity, peer, true)
    }

    fn spawn_with<W>(mut stream: W, capacity: usize, peer: impl Display, coalesce: bool) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel::<(Bytes, tokio::sync::OwnedSemaphorePermit)>(capacity.max(1));
        let peer = peer.to_string();
        let cut = Shutdown::new();
        let closing = Shutdown::new();
        let (name, task_cut, task_closing) = (peer.clone(), cut.clone(), closing.clone());
        tokio::spawn(async move {
            let gave_up = async {
                task_closing.cancelled().await;
                tokio::time::sleep(LINGER).await;
            };
            tokio::pin!(gave_up);
            loop {
                let next = tokio::select! {
                    biased;
                    _ = task_cut.cancelled() => return,
                    next = rx.recv() => next,
                };
                // The permits go back to the budget once the bytes are written (or the task ends).
                let Some((mut buf, permit)) = next else { break };
                let mut permits = vec![permit];
                if coalesce {
                    let mut batch: Option<bytes::BytesMut> = None;
                    while batch.as_ref().map_or(buf.len(), |b| b.len()) < COALESCE_BYTES {
                        let Ok((more, permit)) = rx.try_recv() else { break };
                        batch.get_or_insert_with(|| bytes::BytesMut::from(&buf[..])).extend_from_slice(&more);
                        permits.push(permit);
                    }
                    if let Some(batch) = batch {
                        buf = batch.freeze();
                    }
                }
                tokio::select! {
                    biased;
                    _ = task_cut.cancelled() => return,
                    _ = &mut gave_up => {
                        tracing::debug!(peer = %name, "gave up flushing to a client that does not read");
                        return;
                    }
                    written = stream.write_all(&buf) => if let Err(e) = written {
                        tracing::debug!(peer = %name, error = %e, "write failed");
                        return;
                    }
                }
            }
            tokio::select! {
                _ = stream.shutdown() => {}
                _ = &mut gave_up => {}
            }
        });
        let max_bytes = DEFAULT_MAX_QUEUED_BYTES;
        let budget = std::sync::Arc::new(tokio::sync::Semaphore::new(max_bytes));
        Self { tx, budget, max_bytes, peer, cut, _closing: std::sync::Arc::new(closing.drop_guard()) }
    }

    /// Bounds the bytes queued for this client to `max_bytes` instead of [`DEFAULT_MAX_QUEUED_BYTES`]
    /// (call it before the first send).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        let max_bytes = max_bytes.clamp(1, tokio::sync::Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        self.budget = std::sync::Arc::new(tokio::sync::Semaphore::new(max_bytes));
        self.max_bytes = max_bytes;
        self
    }

    /// The permits `buf` takes from the byte budget: its length, or the whole budget for a larger message.
    fn cost(&self, buf: &Bytes) -> u32 {
        buf.len().clamp(1, self.max_bytes) as u32
    }

    fn lagged(&self) -> SendError {
        self.sever();
        SendError::Lagged {
            peer: self.peer.clone(),
            capacity: self.tx.max_capacity(),
            max_bytes: self.max_bytes,
        }
    }

    /// Queues `buf` for the client without waiting. A full queue cuts the connection (see the type's doc).
    pub fn send(&self, buf: Bytes) -> Result<(), SendError> {
        let permit = match self.budget.clone().try_acquire_many_owned(self.cost(&buf)) {
            Ok(permit) => permit,
            Err(tokio::sync::TryAcquireError::NoPermits) => return Err(self.lagged()),
            Err(tokio::sync::TryAcquireError::Closed) => {
                return Err(SendError::Closed { peer: self.peer.clone() })
            }
        };
        self.tx.try_send((buf, permit)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => self.lagged(),
            mpsc::error::TrySendError::Closed(_) => SendError::Closed { peer: self.peer.clone() },
        })
    }

    /// Queues `buf`, waiting for room in messages and bytes (for replies that must not be lost, from a task
    /// that may wait).
    pub async fn send_wait(&self, buf: Bytes) -> Result<(), SendError> {
        let closed = || SendError::Closed { peer: self.peer.clone() };
        let permit = tokio::select! {
            permit = self.budget.clone().acquire_many_owned(self.cost(&buf)) => permit.map_err(|_| closed())?,
            _ = self.tx.closed() => return Err(closed()),
        };
        self.tx.send((buf, permit)).await.map_err(|_| closed())
    }

    /// Cuts the connection now: what is queued is discarded and the stream is dropped, even if a write
    /// is blocked on a client that stopped reading.
    pub fn sever(&self) {
        self.cut.cancel();
    }

    /// Resolves when the writer task has ended (the client is gone, a write failed, or it was cut).
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// The client's name, as given to [`ClientWriter::spawn`].
    pub fn peer(&self) -> &str {
        &self.peer
    }
}

/// Binds a Unix socket at `dir/.sockets/name`, as sys161 does: the `.sockets` folder is created with
/// mode 0700 if missing, and a stale socket left by an earlier run is unlinked first. Anything at that
/// path that is not a socket is left alone and reported as an error.
pub fn bind_unix_replacing_stale(dir: &Path, name: &str) -> io::Result<(UnixListener, PathBuf)> {
    let sockets = dir.join(".sockets");
    if !sockets.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&sockets)?;
    }
    // DirBuilder's mode is subject to the umask; make it exact, as sys161's mkdir(0700) intends.
    std::fs::set_permissions(&sockets, std::fs::Permissions::from_mode(0o700))?;
    let path = sockets.join(name);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(&path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok((UnixListener::bind(&path)?, path))
}

/// Raises the soft limit on open files to the hard limit, for a process serving many instances
/// (`--instances N`); returns the limit now in force.
///
/// When the hard limit is below `wanted`, the descriptors the caller expects to hold, both limits are
/// raised to `wanted` if the process may (root, up to the kernel's `fs.nr_open`); if it may not, a
/// warning is logged and the process runs anyway (accepts then fail with EMFILE once the limit is reached).
pub fn raise_open_file_limit(wanted: u64) -> io::Result<u64> {
    let mut limit = rlimit::increase_nofile_limit(u64::MAX)?;
    if limit < wanted && rlimit::Resource::NOFILE.set(wanted, wanted).is_ok() {
        limit = wanted;
    }
    if limit < wanted {
        tracing::warn!(limit, wanted, "the open-file limit is lower than the instances need");
    } else {
        tracing::debug!(limit, "open-file limit");
    }
    Ok(limit)
}

/// The addresses of `n` instances listening on consecutive ports from `addr`'s (`HOST:PORT`, `HOST` as
/// given: a name, an IPv4 address or a bracketed IPv6 one).
///
/// Port 0 with `n > 1` is an error (N ports picked by the system would not be consecutive and nobody
/// could know them), as is a range running past port 65535. `n == 1` returns `addr` unchanged.
pub fn consecutive_addrs(addr: &str, n: u32) -> Result<Vec<String>, String> {
    if n <= 1 {
        return Ok(vec![addr.to_owned()]);
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(format!("{addr:?} is not HOST:PORT"));
    };
    let first: u16 = port.parse().map_err(|_| format!("bad port in {addr:?}"))?;
    if first == 0 {
        return Err(format!(
            "port 0 cannot serve {n} instances: give the first of {n} consecutive free ports"
        ));
    }
    let last = u32::from(first) + (n - 1);
    if last > u32::from(u16::MAX) {
        return Err(format!("{n} instances from port {first} would need ports up to {last}, past 65535"));
    }
    Ok((u32::from(first)..=last).map(|port| format!("{host}:{port}")).collect())
}

/// Binds every address of `addrs` (from [`consecutive_addrs`]); the first that fails is named in the error.
pub async fn bind_consecutive(addrs: &[String]) -> io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let listener = TcpListener::bind(addr.as_str())
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Runs each of `instances` as a task of the current runtime (no thread of its own), in a span
/// `instance{n=…}` that names it in the logs, until every one has ended.
///
/// The first error cancels `shutdown`, so that the others stop too, and is returned once they have (later
/// errors are logged). A panicking instance panics the caller.
pub async fn run_instances<F, E>(instances: impl IntoIterator<Item = F>, shutdown: &Shutdown) -> Result<(), E>
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    use tracing::Instrument;
    let mut tasks = tokio::task::JoinSet::new();
    for (n, instance) in instances.into_iter().enumerate() {
        tasks.spawn(instance.instrument(tracing::info_span!("instance", n)));
    }
    let mut first = Ok(());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) if first.is_ok() => {
                tracing::error!(error = %e, "an instance failed; stopping the others");
                shutdown.cancel();
                first = Err(e);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "an instance failed"),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    first
}

/// Finds `n` consecutive ports on 127.0.0.1 that are free now (each bound, then released), for tests and
/// benches that start a sim with `--instances n` on them. Another process may take one of them before
/// the sim binds it: callers retry with a new range when the sim fails to start.
pub fn free_consecutive_ports(n: u16) -> io::Result<u16> {
    let n = n.max(1);
    for _ in 0..100 {
        let first = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let Some(last) = first.checked_add(n - 1) else { continue };
        let held: Result<Vec<_>, _> =
            (first..=last).map(|port| std::net::TcpListener::bind(("127.0.0.1", port))).collect();
        if held.is_ok() {
            return Ok(first);
        }
    }
    Err(io::Error::new(io::ErrorKind::AddrInUse, format!("no {n} consecutive free ports found")))
}

/// SplitMix64: a tiny, well-known generator, enough for the sims' made-up activity and the soaks' random
/// choices (reproducible from its seed, no dependency).
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n` is 0 or 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True one time in `one_in`.
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// A safety net for tests of the sim binaries, so that a broken test fails instead of hanging (30 s); never a
/// timing assertion.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(30), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} took too long"))
}

/// Starts the sim binary `bin` with `args` (`RUST_LOG=warn`, killed when dropped) and waits for the start-up
/// line on stderr that contains `ready`; if the binary exits first, returns what it wrote to stderr. Stderr
/// is drained afterwards, so that the sim never blocks on a full pipe. For the tests of `--instances`.
pub async fn start_binary(bin: &str, args: &[&str], ready: &str) -> Result<tokio::process::Child, String> {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut seen = String::new();
    let started = within("the start-up line", async {
        while let Some(line) = lines.next_line().await.expect("stderr is readable") {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(ready) {
                return true;
            }
        }
        false
    })
    .await;
    if !started {
        return Err(seen);
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(child)
}

/// A sim running in-process on a background task: what every sim's tests, telemon's tests and the benches
/// start. [`Running::stop`] cancels its [`Shutdown`] and returns how the sim ended; dropping it only cancels.
#[derive(Debug)]
pub struct Running {
    shutdown: Shutdown,
    task: Option<tokio::task::JoinHandle<io::Result<()>>>,
}

impl Running {
    /// Starts `serve(shutdown)` on a new task; the sim ends when the token is cancelled.
    pub fn spawn<F>(serve: impl FnOnce(Shutdown) -> F) -> Running
    where
        F: Future<Output = io::Result<()>> + Send + 'static,
    {
        let shutdown = Shutdown::new();
        let task = tokio::spawn(serve(shutdown.clone()));
        Running { shutdown, task: Some(task) }
    }

    /// Binds `127.0.0.1:0`, then starts `serve(listener, shutdown)` on a new task; returns the bound address.
    pub async fn spawn_tcp<F>(
        serve: impl FnOnce(TcpListener, Shutdown) -> F,
    ) -> io::Result<(Running, std::net::SocketAddr)>
    where
        F: Future<Output = io::Result<()>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        Ok((Running::spawn(|shutdown| serve(listener, shutdown)), addr))
    }

    /// The sim's shutdown token (cancel it to stop the sim without waiting).
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Stops the sim (its clients see the end of their streams) and returns how it ended.
    pub async fn stop(mut self) -> io::Result<()> {
        self.shutdown.cancel();
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Records each write it is given.
    struct Writes(std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.lock().unwrap().push(buf.to_vec());
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_coalescing_writer_writes_what_is_queued_at_once_and_a_plain_one_each_message() {
        for coalesce in [false, true] {
            let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let w = Writes(writes.clone());
            let writer = if coalesce {
                ClientWriter::spawn_coalescing(w, 8, "c")
            } else {
                ClientWriter::spawn(w, 8, "p")
            };
            // Queued before the writer task first runs (a current-thread runtime): all there at once.
            for m in [&b"one"[..], b"two", b"three"] {
                writer.send(Bytes::from_static(m)).unwrap();
            }
            drop(writer);
            tokio::time::timeout(std::time::Duration::from_secs(10), async {
                while writes.lock().unwrap().concat().len() < 11 {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .expect("the writer writes");
            let got = writes.lock().unwrap().clone();
            if coalesce {
                assert_eq!(got, [b"onetwothree".to_vec()]);
            } else {
                assert_eq!(got, [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
            }
        }
    }

    #[tokio::test]
    async fn running_serves_until_stopped_and_reports_how_it_ended() {
        let (sim, addr) = Running::spawn_tcp(|listener, shutdown| {
            accept_loop(listener, shutdown, |stream: TcpStream, _| async move {
                let (_r, w) = stream.into_split();
                ClientWriter::spawn(w, 4, "t").send(Bytes::from_static(b"up"))?;
                Ok::<_, SendError>(())
            })
        })
        .await
        .unwrap();
        let mut c = TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).await.unwrap();
        assert_eq!(buf, b"up");
        sim.stop().await.unwrap();
        assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed once the sim stopped");

        let failing = Running::spawn(|_| async { Err(io::Error::other("boom")) });
        assert_eq!(failing.stop().await.unwrap_err().to_string(), "boom");
    }

    #[test]
    fn consecutive_addresses_for_instances() {
        assert_eq!(consecutive_addrs("127.0.0.1:0", 1).unwrap(), ["127.0.0.1:0"]);
        assert_eq!(
            consecutive_addrs("127.0.0.1:4512", 3).unwrap(),
            ["127.0.0.1:4512", "127.0.0.1:4513", "127.0.0.1:4514"]
        );
        assert_eq!(consecutive_addrs("[::1]:7399", 2).unwrap(), ["[::1]:7399", "[::1]:7400"]);
        assert_eq!(consecutive_addrs("localhost:65534", 2).unwrap(), ["localhost:65534", "localhost:65535"]);
        assert!(consecutive_addrs("127.0.0.1:0", 2).unwrap_err().contains("port 0"));
        assert!(consecutive_addrs("127.0.0.1:65535", 2).unwrap_err().contains("65536"));
        assert!(consecutive_addrs("4512", 2).is_err());
        assert!(consecutive_addrs("host:x", 2).is_err());
    }

    #[tokio::test]
    async fn instances_run_as_tasks_and_the_first_error_stops_the_others() {
        let first = free_consecutive_ports(3).unwrap();
        let addrs = consecutive_addrs(&format!("127.0.0.1:{first}"), 3).unwrap();
        let listeners = bind_consecutive(&addrs).await.unwrap();
        let ports: Vec<u16> = listeners.iter().map(|l| l.local_addr().unwrap().port()).collect();
        assert_eq!(ports, [first, first + 1, first + 2]);
        let err = bind_consecutive(&addrs).await.unwrap_err();
        assert!(err.to_string().contains(&addrs[0]), "{err}");

        let shutdown = Shutdown::new();
        let instances = (0..3).map(|i| {
            let shutdown = shutdown.clone();
            async move {
                if i == 1 {
                    return Err(format!("instance {i} failed"));
                }
                shutdown.cancelled().await;
                Ok(())
            }
        });
        let result =
            tokio::time::timeout(std::time::Duration::from_secs(10), run_instances(instances, &shutdown))
                .await
                .expect("the others stop once one fails");
        assert_eq!(result, Err("instance 1 failed".to_owned()));
        assert!(shutdown.is_cancelled());
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        let limit = raise_open_file_limit(0).unwrap();
        let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap();
        assert_eq!(limit, soft);
        #[cfg(target_os = "linux")]
        assert_eq!(soft, hard);
        assert!(soft <= hard);
        // Above the hard limit: raised where the process may (root), left as it was where it may not.
        let more = raise_open_file_limit(hard + 16).unwrap();
        assert!(more == hard || more == hard + 16, "{more} (hard limit was {hard})");
        assert_eq!(rlimit::Resource::NOFILE.get().unwrap().0, more);
    }

    #[tokio::test]
    async fn stale_socket_is_replaced_and_folder_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let (first, path) = bind_unix_replacing_stale(dir.path(), "meter").unwrap();
        drop(first); // leaves the socket file behind, like a killed sys161
        assert!(path.exists());
        let (_second, again) = bind_unix_replacing_stale(dir.path(), "meter").unwrap();
        assert_eq!(path, again);
        let mode = std::fs::metadata(dir.path().join(".sockets")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[tokio::test]
    async fn a_regular_file_is_not_clobbered() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".sockets")).unwrap();
        std::fs::write(dir.path().join(".sockets/meter"), b"keep").unwrap();
        let err = bind_unix_replacing_stale(dir.path(), "meter").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(dir.path().join(".sockets/meter")).unwrap(), b"keep");
    }

    /// Fills the queue of a writer whose peer never reads, until a send reports the lag.
    async fn fill_until_lagged(writer: &ClientWriter) -> SendError {
        loop {
            if let Err(e) = writer.send(Bytes::from_static(b"0123456789")) {
                return e;
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_client_that_never_reads_lags_and_is_cut_instead_of_blocking() {
        let (a, mut b) = tokio::io::duplex(16);
        let writer = ClientWriter::spawn(a, 2, "slow");
        let e = fill_until_lagged(&writer).await;
        assert!(matches!(e, SendError::Lagged { capacity: 2, .. }), "{e}");
        // The writer task let go of the stream although its last write was blocked: the peer reads what
        // had fitted in the pipe and then sees the end, and the handle sees the task gone.
        writer.closed().await;
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert!(got.len() <= 16 + 2 * 10, "{} bytes", got.len());
        assert!(matches!(writer.send(Bytes::from_static(b"x")), Err(SendError::Closed { .. })));
    }

    #[tokio::test]
    async fn the_byte_budget_cuts_a_client_that_never_reads_however_few_messages_it_holds() {
        let (a, _b) = tokio::io::duplex(16);
        let writer = ClientWriter::spawn(a, 1024, "big").with_max_bytes(100);
        let mut sent = 0usize;
        let e = loop {
            match writer.send(Bytes::from(vec![b'x'; 30])) {
                Ok(()) => sent += 30,
                Err(e) => break e,
            }
            tokio::task::yield_now().await;
        };
        assert!(matches!(e, SendError::Lagged { max_bytes: 100, .. }), "{e}");
        // What the stalled client pinned: the pipe's 16 bytes, one message in the writer's hands and the budget.
        assert!(sent <= 16 + 30 + 100, "{sent} bytes accepted for a client that never reads");
        writer.closed().await;
    }

    #[tokio::test]
    async fn send_wait_waits_for_bytes_to_drain_and_a_message_over_the_budget_still_goes() {
        let (a, mut b) = tokio::io::duplex(8);
        let writer = ClientWriter::spawn(a, 64, "reader").with_max_bytes(10);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            got
        });
        for _ in 0..20 {
            writer.send_wait(Bytes::from_static(b"0123456")).await.unwrap();
        }
        writer.send_wait(Bytes::from(vec![b'y'; 50])).await.unwrap();
        drop(writer);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), 20 * 7 + 50);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_writer_flushes_but_gives_up_on_a_client_that_never_reads() {
        let (a, mut b) = tokio::io::duplex(4);
        let writer = ClientWriter::spawn(a, 8, "stuck");
        writer.send(Bytes::from_static(b"0123456789")).unwrap();
        drop(writer);
        // Nothing reads for longer than LINGER (the paused clock jumps ahead): the task must give up
        // and drop the stream, so the reader then sees the end of the stream.
        tokio::time::sleep(LINGER * 2).await;
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"0123");
    }

    #[tokio::test]
    async fn a_dropped_writer_flushes_what_is_queued() {
        let (a, mut b) = tokio::io::duplex(4);
        let writer = ClientWriter::spawn(a, 8, "ok");
        writer.send(Bytes::from_static(b"0123456789")).unwrap();
        writer.send(Bytes::from_static(b"abc")).unwrap();
        drop(writer);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"0123456789abc");
    }

    #[tokio::test]
    async fn accept_loop_serves_clients_and_stops_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let server =
            tokio::spawn(accept_loop(listener, shutdown.clone(), |stream: TcpStream, _| async move {
                let (_r, w) = stream.into_split();
                let writer = ClientWriter::spawn(w, 4, "t");
                writer.send(Bytes::from_static(b"hi"))?;
                Ok::<_, SendError>(())
            }));
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            let mut buf = Vec::new();
            c.read_to_end(&mut buf).await.unwrap();
            assert_eq!(buf, b"hi");
        }
        shutdown.cancel();
        server.await.unwrap().unwrap();
    }
}
