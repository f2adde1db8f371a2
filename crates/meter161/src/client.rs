//! The async client: one connection ([`Client`]) or a watch that waits for the socket and reconnects,
//! as stat161 does ([`watch`]).

use std::collections::VecDeque;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use futures::{SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio_util::codec::Framed;

use crate::batched::BatchedStream;
use crate::codec::ClientCodec;
use crate::error::{ClientError, DecodeError, ProtocolError};
use crate::message::{interval_ns, socket_path, ClientMessage, DEFAULT_MAX_FIELDS, DEFAULT_MAX_LINE};
use crate::session::{Header, Sample, Session, Update};

/// The initial size of the read buffer (the write buffer starts empty).
const IO_BUFFER: usize = 512;

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The interval to ask for right after connecting (before `HELLO`, like stat161); `None` keeps the
    /// server's default (0.2 s).
    pub interval: Option<Duration>,
    /// How long to wait for `HELLO`/`HEAD` (and the `WIDTH` that sys161 sends right after) after
    /// connecting.
    pub handshake_timeout: Duration,
    /// The longest line accepted, in bytes before the LF.
    pub max_line: usize,
    /// The most words accepted after a line's keyword.
    pub max_fields: usize,
    /// For [`watch`]: wait for the socket and reconnect after a disconnect.
    pub reconnect: bool,
    /// For [`watch`]: the pause before trying again when no simulator is there (stat161: 1 s).
    pub retry_delay: Duration,
    /// For [`watch`]: the pause after any other failure (stat161: 5 s).
    pub error_retry_delay: Duration,
    /// Batch reads while lines come this close together (`None`, the default: read each line as soon
    /// as it arrives). sys161 writes every line on its own, so a client that keeps up with a 10 us
    /// interval pays a wake-up and a read per line; with a window, a read that follows the previous
    /// one within it takes the socket out of the reactor, and the socket is then read once per
    /// window until a window goes by without a byte. The first line after a quiet period is read at
    /// once, so a 1 s interval is never delayed; a busy stream is read at most one window late, and
    /// sooner when a window of its lines would fill the socket (sys161 waits for its reader then).
    pub read_batching: Option<Duration>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            interval: None,
            handshake_timeout: Duration::from_secs(5),
            max_line: DEFAULT_MAX_LINE,
            max_fields: DEFAULT_MAX_FIELDS,
            reconnect: true,
            retry_delay: Duration::from_secs(1),
            error_retry_delay: Duration::from_secs(5),
            read_batching: None,
        }
    }
}

impl ClientConfig {
    /// Asks for `interval` (10 us to 2 s) right after connecting.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Whether [`watch`] waits for the socket and reconnects (default `true`).
    pub fn reconnect(mut self, reconnect: bool) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// How long to wait for the greeting after connecting.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Batches reads while lines come closer together than `window` (see
    /// [`ClientConfig::read_batching`]); 5 ms suits a one-target viewer at small intervals.
    pub fn read_batching(mut self, window: Duration) -> Self {
        self.read_batching = Some(window);
        self
    }

    /// The bounds on what the simulator may send.
    pub fn limits(mut self, max_line: usize, max_fields: usize) -> Self {
        self.max_line = max_line;
        self.max_fields = max_fields;
        self
    }
}

fn interval_ns_of(config: &ClientConfig) -> Result<Option<u64>, ClientError> {
    config.interval.map(interval_ns).transpose()
}

/// The name this type had before 0.2.
#[deprecated(note = "renamed ClientConfig")]
pub type Config = ClientConfig;

/// One connection to the meter socket: the handshake's header, then a [`Stream`] of [`Sample`]s.
///
/// Per-line problems (a `DATA` row with the wrong field count, an unknown line, a `BAD` reply) are
/// `Err` items and the stream goes on; after a fatal one ([`ClientError::is_fatal`]) or at EOF it
/// ends. Keep polling it: a reader that stalls freezes the real sys161 for every client.
///
/// `S` is the connection: the meter socket by default, or any stream given to [`Client::over`] (a recording
/// tap, a replayed recording, an in-memory pipe in tests).
#[derive(Debug)]
pub struct Client<S = BatchedStream> {
    framed: Framed<S, ClientCodec>,
    session: Session,
    header: Arc<Header>,
    pending: VecDeque<Result<Sample, ClientError>>,
    done: bool,
}

impl Client {
    /// Connects to the simulator running in `dir` (its socket `dir/.sockets/meter`).
    pub async fn connect(dir: impl AsRef<Path>, config: &ClientConfig) -> Result<Client, ClientError> {
        Self::connect_path(socket_path(dir), config).await
    }

    /// Connects to the meter socket at `path`, asks for `config.interval` and reads the handshake.
    ///
    /// Fails with [`ProtocolError::UnsupportedVersion`] for any `HELLO` other than 2.
    pub async fn connect_path(path: impl AsRef<Path>, config: &ClientConfig) -> Result<Client, ClientError> {
        // Boxed: the handshake's state is large, and a caller that keeps this future inline (a fleet
        // target's task) would otherwise carry it for as long as the connection lives.
        Box::pin(Client::connect_path_with(path, config, |stream| stream)).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// Like [`Client::connect_path`], with the socket wrapped by `wrap` first (e.g. in a recording tap).
    pub async fn connect_path_with(
        path: impl AsRef<Path>,
        config: &ClientConfig,
        wrap: impl FnOnce(BatchedStream) -> S,
    ) -> Result<Client<S>, ClientError> {
        let path = path.as_ref();
        interval_ns_of(config)?;
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| ClientError::Connect { path: path.to_path_buf(), source })?;
        Client::over(wrap(BatchedStream::new(stream, config.read_batching)), config).await
    }

    /// Runs the client over an already connected `stream`: asks for `config.interval` and reads the handshake.
    pub async fn over(stream: S, config: &ClientConfig) -> Result<Client<S>, ClientError> {
        let interval = interval_ns_of(config)?;
        // Small buffers that grow when a line needs it: a DATA line is under 256 bytes, and a fleet
        // holds one client per simulator (tokio-util's default is 8 KiB each way).
        let codec = ClientCodec::new(config.max_line, config.max_fields).checking_greeting();
        let mut framed = Framed::with_capacity(stream, codec, IO_BUFFER);
        // The client writes one short INTERVAL line at most.
        *framed.write_buffer_mut() = bytes::BytesMut::new();
        if let Some(ns) = interval {
            framed.send(ClientMessage::Interval(ns)).await?;
        }
        let mut client = Client {
            framed,
            session: Session::new(),
            header: Arc::new(Header::new(Vec::new())),
            pending: VecDeque::new(),
            done: false,
        };
        let deadline = tokio::time::Instant::now() + config.handshake_timeout;
        match tokio::time::timeout_at(deadline, client.read_head()).await {
            Ok(result) => result?,
            Err(_) => return Err(ClientError::HandshakeTimeout(config.handshake_timeout)),
        }
        // sys161 sends WIDTH right after HEAD: take it into the header if it is next. Anything else is
        // kept for the stream.
        if let Ok(Some(next)) = tokio::time::timeout_at(deadline, client.next_message()).await {
            match next {
                Ok(Some(Update::Header(header))) => client.header = header,
                Ok(Some(Update::Sample(sample))) => client.pending.push_back(Ok(sample)),
                Ok(None) => {}
                Err(e) => client.pending.push_back(Err(e)),
            }
        }
        Ok(client)
    }

    /// Reads until `HEAD`. Per-line problems before it are kept for the stream; fatal ones fail.
    async fn read_head(&mut self) -> Result<(), ClientError> {
        loop {
            match self.next_message().await {
                None => return Err(ClientError::HandshakeEof),
                Some(Ok(Some(Update::Header(header)))) => {
                    self.header = header;
                    return Ok(());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) if e.is_fatal() => return Err(e),
                Some(Err(e)) => self.pending.push_back(Err(e)),
            }
        }
    }

    /// The next message, applied to the session. `None` at EOF.
    async fn next_message(&mut self) -> Option<Result<Option<Update>, ClientError>> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }

    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Option<Update>, ClientError>>> {
        // The read buffer is held only while there is something to read: between two `DATA` lines a
        // client waits with none (a fleet watches hundreds of simulators, each a line a second). It is
        // taken back at IO_BUFFER bytes here (tokio-util would grow an empty one a few bytes a read).
        if self.framed.read_buffer().capacity() == 0 {
            self.framed.read_buffer_mut().reserve(IO_BUFFER);
        }
        let polled = self.framed.poll_next_unpin(cx);
        if polled.is_pending() && self.framed.read_buffer().is_empty() {
            *self.framed.read_buffer_mut() = BytesMut::new();
        }
        let item = match ready!(polled) {
            None => return Poll::Ready(None),
            Some(Err(io)) => Err(ClientError::Io(io)),
            Some(Ok(Err(decode))) => Err(ProtocolError::Decode(decode).into()),
            Some(Ok(Ok(msg))) => self.session.handle(msg).map_err(ClientError::from),
        };
        Poll::Ready(Some(item))
    }

    /// The current header: field names and suggested widths.
    pub fn header(&self) -> &Arc<Header> {
        &self.header
    }

    /// The version the server announced (`None` if it sent `HEAD` without `HELLO`, as stat161 allows).
    pub fn version(&self) -> Option<u32> {
        self.session.version()
    }

    /// Asks for a `DATA` line every `interval` of simulated time (10 us to 2 s; checked here, before
    /// sending). The command goes out in one write, because sys161 mangles a command split across reads.
    /// sys161 sends no reply on success and applies it after the next already-scheduled `DATA`.
    pub async fn set_interval(&mut self, interval: Duration) -> Result<(), ClientError> {
        let ns = interval_ns(interval)?;
        self.framed.send(ClientMessage::Interval(ns)).await?;
        Ok(())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Stream for Client<S> {
    type Item = Result<Sample, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(item) = this.pending.pop_front() {
            this.done |= item.as_ref().is_err_and(ClientError::is_fatal);
            return Poll::Ready(Some(item));
        }
        while !this.done {
            let item = match ready!(this.poll_message(cx)) {
                None => break,
                Some(Ok(None)) => continue,
                Some(Ok(Some(Update::Header(header)))) => {
                    this.header = header;
                    continue;
                }
                Some(Ok(Some(Update::Sample(sample)))) => Ok(sample),
                Some(Err(e)) => Err(e),
            };
            this.done |= item.as_ref().is_err_and(ClientError::is_fatal);
            return Poll::Ready(Some(item));
        }
        this.done = true;
        Poll::Ready(None)
    }
}

/// What a [`watch`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A connection is up and its handshake done (stat161: `Connected.`).
    Connected(Arc<Header>),
    /// A `DATA` row. The first one after each connect has no deltas.
    Sample(Sample),
    /// The connection ended (stat161: `Disconnected.`); with `reconnect` the watch waits for the next.
    Disconnected,
}

enum WatchState<S> {
    /// Pause for `delay`, then connect.
    Connecting {
        delay: Duration,
    },
    Connected(Box<Client<S>>),
    Finished,
}

/// Watches the simulator in `dir`: connects (waiting for the socket to appear unless
/// `config.reconnect` is off), streams its samples, and reconnects after a disconnect.
///
/// Connection failures are `Err` items; with `reconnect` the watch tries again after
/// `config.retry_delay` (no simulator there: `NotFound`, `ConnectionRefused`) or
/// `config.error_retry_delay` (anything else). Waiting for a simulator that is not there (yet) is
/// silent, as in stat161. A wrong protocol version ends the watch, as it ends stat161, and so does a peer
/// of another protocol ([`DecodeError::OtherProtocol`]).
pub fn watch(
    dir: impl AsRef<Path>,
    config: ClientConfig,
) -> impl Stream<Item = Result<Event, ClientError>> + Send + 'static {
    watch_with(dir, config, |stream| stream)
}

/// Like [`watch`], with each connection's socket wrapped by `wrap` first (e.g. in a recording tap).
pub fn watch_with<S, W>(
    dir: impl AsRef<Path>,
    config: ClientConfig,
    wrap: W,
) -> impl Stream<Item = Result<Event, ClientError>> + Send + 'static
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    W: Fn(BatchedStream) -> S + Send + Sync + 'static,
{
    // Shared, not cloned per item: at a 10 us interval the watch yields 100,000 items a second.
    let target = Arc::new((socket_path(dir), config, wrap));
    futures::stream::unfold(WatchState::Connecting { delay: Duration::ZERO }, move |state| {
        let target = Arc::clone(&target);
        async move {
            let (path, config, wrap) = &*target;
            match state {
                WatchState::Finished => None,
                // Boxed, so that the future made for every item stays small: the unfold moves it.
                WatchState::Connecting { delay } => Some(Box::pin(connect(path, config, wrap, delay)).await),
                WatchState::Connected(mut client) => match client.next().await {
                    Some(Ok(sample)) => Some((Ok(Event::Sample(sample)), WatchState::Connected(client))),
                    Some(Err(e)) if is_wrong_version(&e) => Some((Err(e), WatchState::Finished)),
                    Some(Err(e)) => Some((Err(e), WatchState::Connected(client))),
                    None if config.reconnect => {
                        Some((Ok(Event::Disconnected), WatchState::Connecting { delay: Duration::ZERO }))
                    }
                    None => Some((Ok(Event::Disconnected), WatchState::Finished)),
                },
            }
        }
    })
}

/// The watch's connecting state: waits `delay`, then connects (waiting for the simulator if
/// `config.reconnect`); returns the item to yield and the next state.
async fn connect<S, W>(
    path: &Path,
    config: &ClientConfig,
    wrap: &W,
    delay: Duration,
) -> (Result<Event, ClientError>, WatchState<S>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    W: Fn(BatchedStream) -> S,
{
    tokio::time::sleep(delay).await;
    loop {
        match Client::connect_path_with(path, config, wrap).await {
            Ok(client) => {
                let header = Arc::clone(client.header());
                return (Ok(Event::Connected(header)), WatchState::Connected(Box::new(client)));
            }
            Err(e) if !config.reconnect || is_wrong_version(&e) => return (Err(e), WatchState::Finished),
            Err(e) if no_simulator(&e) => {
                tracing::debug!(error = %e, "waiting for the meter socket");
                tokio::time::sleep(config.retry_delay).await;
            }
            Err(e) => return (Err(e), WatchState::Connecting { delay: config.error_retry_delay }),
        }
    }
}

/// A server of another version, or of another protocol: reconnecting would meet it again.
fn is_wrong_version(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Protocol(
            ProtocolError::UnsupportedVersion { .. }
                | ProtocolError::Decode(DecodeError::OtherProtocol { .. })
        )
    )
}

/// Whether connecting failed because no simulator is there (yet).
pub fn no_simulator(e: &ClientError) -> bool {
    matches!(e, ClientError::Connect { source, .. }
        if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused))
}

#[cfg(test)]
mod tests {
    /// A fleet keeps one connecting future per target inline in the target's task, for as long as
    /// the task lives: the handshake's state is boxed, so that it costs only while connecting.
    #[test]
    fn the_connect_future_is_small() {
        let config = super::ClientConfig::default();
        let connect = super::Client::connect_path("/nonexistent", &config);
        assert!(std::mem::size_of_val(&connect) <= 128, "{} bytes", std::mem::size_of_val(&connect));
    }

    /// Issue 45: a client on a socket of another protocol says so at once and does not retry.
    #[tokio::test]
    async fn a_server_of_another_protocol_is_named_as_such() {
        use tokio::io::AsyncWriteExt;
        let (ours, mut other) = tokio::io::duplex(4096);
        other.write_all(b"\x01\0\0\0\0\0\0\0\0\0\0\0\0\x01\0\0\0\0").await.unwrap();
        let config = super::ClientConfig::default();
        let err = super::Client::over(ours, &config).await.unwrap_err();
        let super::ClientError::Protocol(super::ProtocolError::Decode(super::DecodeError::OtherProtocol {
            first,
        })) = &err
        else {
            panic!("{err}")
        };
        assert_eq!(first.len(), 18, "what the peer sent");
        assert!(err.is_fatal() && super::is_wrong_version(&err), "the watch ends: {err}");
        assert!(
            err.to_string().starts_with("not a System/161 meter socket: the peer began with \"\\x01\\x00"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_client_keeps_small_buffers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, mut sim) = tokio::io::duplex(4096);
        let config = super::ClientConfig::default().interval(std::time::Duration::from_millis(500));
        let serve = async {
            let mut asked = [0u8; 20];
            sim.read_exact(&mut asked).await.unwrap();
            sim.write_all(b"HELLO 2\r\nHEAD nsec irqs\r\nWIDTH 11 4\r\n").await.unwrap();
        };
        let (client, ()) = tokio::join!(super::Client::over(ours, &config), serve);
        let mut client = client.unwrap();
        assert!(client.framed.read_buffer().capacity() <= super::IO_BUFFER);
        let written = client.framed.write_buffer().capacity();
        assert!(written <= 64, "the write buffer holds {written} bytes after the INTERVAL line");
        use futures::StreamExt;
        // Waiting for the next line, the client holds no read buffer; a line that comes in two
        // parts keeps it between them, and the line is read whole.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(client.poll_next_unpin(&mut cx).is_pending());
        assert_eq!(client.framed.read_buffer().capacity(), 0);
        sim.write_all(b"DATA 12").await.unwrap();
        assert!(client.poll_next_unpin(&mut cx).is_pending());
        assert_eq!(client.framed.read_buffer().len(), 7, "the first part is kept");
        sim.write_all(b"3 4\r\n").await.unwrap();
        let sample = client.next().await.unwrap().unwrap();
        assert_eq!(sample.values(), [123, 4]);
        assert!(client.poll_next_unpin(&mut cx).is_pending());
        assert_eq!(client.framed.read_buffer().capacity(), 0);
    }
}
