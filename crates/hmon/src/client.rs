//! The async client: SERVE mode ([`Client::connect`], [`Connection::connect`]) and POLL mode ([`Listener`]).
//!
//! Two ways to hold a connection: a [`Connection`] is driven by its owner (no task of its own: the owner
//! sends requests and awaits [`Connection::next`] in its own loop, so a monitor costs one task per
//! interpreter); a [`Client`] is a cheap-to-clone handle on a background task that drives a `Connection`,
//! reconnects, and answers each request's future. With a `Client`, requests that have a reply (`GetFacts`, `GetLastKnownState`,
//! `Subscribe`, `ConnectRide`) carry a fresh UID and wait for the response echoing it, with a timeout.
//! Everything else the interpreter sends (polled `Facts`, `Notification`s, `UserMessage`s, error
//! responses that match no waiting request, unknown messages) arrives on the [`Events`] stream.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{SinkExt, Stream, StreamExt};
#[cfg(test)]
use tokio::io::AsyncWriteExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;

use crate::codec::ClientCodec;
use crate::error::{ClientError, HandshakeError, PayloadError};
use crate::frame::{sniff, DEFAULT_MAX_FRAME_LEN};
use crate::ids::IdOrName;
use crate::message::{
    BumpFacts, ConnectRide, Facts, GetFacts, GetLastKnownState, LastKnownState, Message, PollFacts, Request,
    Response, RideConnection, StopFacts, Subscribe, Subscribed,
};
use crate::payload::{Handshake, Payload};
use crate::proto::{self, HandshakeOrder, Requests, Role, Standing};

/// The initial size of a connection's read and write buffers: a reply of a few KiB fits, larger ones grow
/// them (a fleet holds a thousand connections, so 8 KiB each by default would be most of its memory).
const IO_BUFFER: usize = 2048;

/// Reconnecting with exponential backoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconnect {
    /// The first delay.
    pub initial_delay: Duration,
    /// The longest delay.
    pub max_delay: Duration,
    /// Give up after this many failed attempts in a row (`None`: never).
    pub max_attempts: Option<u32>,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            max_attempts: None,
        }
    }
}

impl Reconnect {
    /// The delay before attempt `n` (0-based): doubling from `initial_delay` up to `max_delay`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX);
        self.initial_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The largest frame accepted, in bytes (default 16 MiB).
    pub max_frame_len: u32,
    /// The handshake order.
    pub handshake: HandshakeOrder,
    /// How long the handshake may take.
    pub handshake_timeout: Duration,
    /// How long a request waits for its reply.
    pub request_timeout: Duration,
    /// Reconnect (SERVE mode only). When set, the first connection is retried too, and a standing
    /// `PollFacts` and `Subscribe` are sent again after each reconnection.
    pub reconnect: Option<Reconnect>,
    /// The prefix of the UIDs the client generates (`<prefix><n>`).
    pub uid_prefix: String,
    /// How many events may wait unread before newer ones are dropped (and counted in [`Event::Lagged`]).
    pub event_capacity: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            handshake: HandshakeOrder::default(),
            handshake_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            reconnect: None,
            uid_prefix: "hmon-".to_owned(),
            event_capacity: 1024,
        }
    }
}

/// Something the interpreter sent that no request was waiting for, or a change of connection state.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A response: polled `Facts`, `Notification`, `UserMessage`, an uncorrelated error response, ...
    Message(Response),
    /// A frame whose payload was not a valid message (the connection goes on).
    InvalidPayload(PayloadError),
    /// The connection was lost; with reconnect on, the client is trying again.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// The client reconnected (and re-sent its standing poll and subscription).
    Reconnected,
    /// Events were dropped because the stream was not read fast enough.
    Lagged {
        /// How many.
        dropped: u64,
    },
}

/// The stream of [`Event`]s of one connection; it ends when the connection ends for good.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::Receiver<Event>,
}

impl Stream for Events {
    type Item = Event;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.rx.poll_recv(cx)
    }
}

type ReplyTx = oneshot::Sender<Result<Response, ClientError>>;

enum Command {
    Send { request: Request, reply: Option<(String, ReplyTx)> },
}

/// A handle to one interpreter connection. Cheap to clone; the connection closes when the last handle
/// is dropped.
#[derive(Debug, Clone)]
pub struct Client {
    commands: mpsc::Sender<Command>,
    config: Arc<ClientConfig>,
    next_uid: Arc<AtomicU64>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Send { request, .. } => {
                f.debug_struct("Send").field("request", &request.name()).finish()
            }
        }
    }
}

impl Client {
    /// Connects to an interpreter in SERVE mode and completes the handshake.
    pub async fn connect(
        addr: impl Into<String>,
        config: ClientConfig,
    ) -> Result<(Client, Events), ClientError> {
        let addr = addr.into();
        let framed = match &config.reconnect {
            None => open(&addr, &config).await?,
            Some(policy) => {
                let mut attempt = 0;
                loop {
                    match open(&addr, &config).await {
                        Ok(framed) => break framed,
                        Err(e) if policy.max_attempts.is_some_and(|max| attempt + 1 >= max) => return Err(e),
                        Err(e) => {
                            let delay = policy.delay(attempt);
                            tracing::info!(%addr, error = %e, ?delay, "connect failed; retrying");
                            tokio::time::sleep(delay).await;
                            attempt += 1;
                        }
                    }
                }
            }
        };
        Ok(Self::spawn(framed, Some(addr), config))
    }

    /// Runs the client over a stream that is already connected (for example a Unix socket or a test
    /// pipe), doing the handshake first. There is no reconnecting.
    pub async fn over<S>(stream: S, config: ClientConfig) -> Result<(Client, Events), ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let framed = handshaken(stream, &config).await?;
        Ok(Self::spawn(framed, None, config))
    }

    fn spawn(
        framed: Framed<BoxedIo, ClientCodec>,
        addr: Option<String>,
        config: ClientConfig,
    ) -> (Client, Events) {
        let (commands, command_rx) = mpsc::channel(64);
        let (event_tx, event_rx) = mpsc::channel(config.event_capacity.max(1));
        let config = Arc::new(config);
        let task = Background {
            conn: Connection::from_framed(framed, config.clone()),
            addr,
            config: config.clone(),
            commands: command_rx,
            events: EventSender { tx: event_tx, dropped: 0 },
            waiting: std::collections::HashMap::new(),
            standing: Standing::default(),
        };
        tokio::spawn(task.run());
        (Client { commands, config, next_uid: Arc::new(AtomicU64::new(1)) }, Events { rx: event_rx })
    }

    fn fresh_uid(&self) -> String {
        format!("{}{}", self.config.uid_prefix, self.next_uid.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a request without waiting for anything (its replies, if any, arrive as events).
    ///
    /// `Ok` means the request was handed to the connection, not that the interpreter has read it.
    pub async fn send(&self, request: Request) -> Result<(), ClientError> {
        self.commands
            .send(Command::Send { request, reply: None })
            .await
            .map_err(|_| ClientError::Closed { reason: None })
    }

    /// Sends a request with a fresh UID (replacing any) and waits for the response echoing it.
    pub async fn request(&self, mut request: Request) -> Result<Response, ClientError> {
        let uid = self.fresh_uid();
        set_uid(&mut request, uid.clone());
        let name = request.name().to_owned();
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Send { request, reply: Some((uid, tx)) })
            .await
            .map_err(|_| ClientError::Closed { reason: None })?;
        // The connection answers, fails or times the request out (its deadline is in `proto::Requests`).
        let reply = rx.await.map_err(|_| ClientError::Closed { reason: None })??;
        if reply.is_error() {
            return Err(ClientError::Rejected { name: reply.name().to_owned(), request: name });
        }
        Ok(reply)
    }

    /// `GetFacts`: the facts, once.
    pub async fn get_facts<I, F>(&self, facts: I) -> Result<Facts, ClientError>
    where
        I: IntoIterator<Item = F>,
        F: Into<IdOrName>,
    {
        let request = Request::GetFacts(GetFacts {
            facts: Some(facts.into_iter().map(Into::into).collect()),
            ..Default::default()
        });
        match self.request(request).await? {
            Response::Facts(f) => Ok(f),
            other => Err(unexpected("Facts", other)),
        }
    }

    /// `GetLastKnownState`: answered even when the interpreter is busy.
    pub async fn last_known_state(&self) -> Result<LastKnownState, ClientError> {
        match self.request(Request::GetLastKnownState(GetLastKnownState::default())).await? {
            Response::LastKnownState(s) => Ok(s),
            other => Err(unexpected("LastKnownState", other)),
        }
    }

    /// `Subscribe`: replaces the subscribed events; later `Notification`s arrive as events.
    pub async fn subscribe<I, E>(&self, events: I) -> Result<Subscribed, ClientError>
    where
        I: IntoIterator<Item = E>,
        E: Into<IdOrName>,
    {
        let request = Request::Subscribe(Subscribe {
            events: Some(events.into_iter().map(Into::into).collect()),
            ..Default::default()
        });
        match self.request(request).await? {
            Response::Subscribed(s) => Ok(s),
            other => Err(unexpected("Subscribed", other)),
        }
    }

    /// `ConnectRide` (20.0): connect RIDE to `address:port`, or disconnect it with `None`.
    pub async fn connect_ride(&self, target: Option<(&str, u16)>) -> Result<RideConnection, ClientError> {
        let mut args = ConnectRide::default();
        if let Some((address, port)) = target {
            args.address = Some(address.into());
            args.port = Some(port.into());
        }
        match self.request(Request::ConnectRide(args)).await? {
            Response::RideConnection(r) => Ok(r),
            other => Err(unexpected("RideConnection", other)),
        }
    }

    /// `PollFacts`: the facts now and then every `interval` (the interpreter's default when `None`).
    /// Returns the poll's UID, which every polled `Facts` event carries.
    pub async fn poll_facts<I, F>(&self, facts: I, interval: Option<Duration>) -> Result<String, ClientError>
    where
        I: IntoIterator<Item = F>,
        F: Into<IdOrName>,
    {
        let uid = self.fresh_uid();
        self.send(poll_facts_request(uid.clone(), facts, interval)).await?;
        Ok(uid)
    }

    /// `StopFacts`: stop polling (the reply, `Facts` with `Interval` 0, arrives as an event).
    pub async fn stop_facts(&self) -> Result<(), ClientError> {
        self.send(Request::StopFacts(StopFacts::default())).await
    }

    /// `BumpFacts`: the next poll reply now.
    pub async fn bump_facts(&self) -> Result<(), ClientError> {
        self.send(Request::BumpFacts(BumpFacts::default())).await
    }

    /// The configuration in use.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }
}

/// What [`Connection::next`] yields.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Incoming {
    /// The response echoing the UID of a request made with [`Connection::request`] (an error response
    /// such as `MalformedCommand` included: see [`Response::is_error`]).
    Reply {
        /// The request's UID.
        uid: String,
        /// The response.
        response: Response,
    },
    /// No response to the request with this UID came within the request timeout; a late one arrives
    /// as an [`Event::Message`].
    Timeout {
        /// The request's UID.
        uid: String,
    },
    /// Anything else: polled `Facts`, `Notification`s, `UserMessage`s, uncorrelated error responses,
    /// unknown messages ([`Event::Message`]), or a payload that did not decode ([`Event::InvalidPayload`]).
    Event(Event),
}

/// One interpreter connection, driven by its owner: no background task and no channels.
///
/// Requests are written when they are made; responses, timeouts and everything else the interpreter
/// sends come out of [`Connection::next`], which the owner awaits in its own loop (it is cancel safe, so
/// it can sit in a `select!` beside the owner's timers). There is no reconnecting: when `next` fails
/// the connection is over.
pub struct Connection {
    conn: Conn,
    config: Arc<ClientConfig>,
    /// Requests waiting for the response that echoes their UID, until their deadline.
    pending: Requests<()>,
    /// Requests whose deadline passed, not yet reported by `next`.
    expired: std::collections::VecDeque<String>,
    next_uid: u64,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("pending", &self.pending.len()).finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to an interpreter in SERVE mode and completes the handshake (`config.reconnect` is
    /// not used: a `Connection` never reconnects).
    pub async fn connect(addr: &str, config: ClientConfig) -> Result<Connection, ClientError> {
        let framed = open(addr, &config).await?;
        Ok(Connection::from_framed(framed, Arc::new(config)))
    }

    /// Runs over a stream that is already connected, doing the handshake first.
    pub async fn over<S>(stream: S, config: ClientConfig) -> Result<Connection, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let framed = handshaken(stream, &config).await?;
        Ok(Connection::from_framed(framed, Arc::new(config)))
    }

    fn from_framed(framed: Framed<BoxedIo, ClientCodec>, config: Arc<ClientConfig>) -> Connection {
        Connection {
            conn: Conn(framed),
            config,
            pending: Requests::default(),
            expired: std::collections::VecDeque::new(),
            next_uid: 1,
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    fn fresh_uid(&mut self) -> String {
        let uid = format!("{}{}", self.config.uid_prefix, self.next_uid);
        self.next_uid += 1;
        uid
    }

    /// Sends a request that waits for nothing (`PollFacts`, `StopFacts`, `BumpFacts`, ...): what it
    /// causes arrives from [`Connection::next`] as events.
    pub async fn send(&mut self, request: Request) -> Result<(), ClientError> {
        self.conn.0.send(Payload::Message(request)).await?;
        Ok(())
    }

    /// Sends `request` with a fresh UID (replacing any) and returns the UID; its response (or its
    /// timeout) comes from [`Connection::next`] as [`Incoming::Reply`] (or [`Incoming::Timeout`]).
    pub async fn request(&mut self, mut request: Request) -> Result<String, ClientError> {
        let uid = self.fresh_uid();
        set_uid(&mut request, uid.clone());
        self.send_tracked(request, uid.clone()).await?;
        Ok(uid)
    }

    /// Sends `request`, which carries `uid`, and waits for the response echoing it.
    async fn send_tracked(&mut self, request: Request, uid: String) -> Result<(), ClientError> {
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        self.pending.insert(uid, deadline.into_std(), ());
        self.send(request).await
    }

    /// `PollFacts` for `facts` every `interval` (the interpreter's default when `None`); returns the
    /// poll's UID, which every polled `Facts` event carries.
    pub async fn poll_facts<I, F>(
        &mut self,
        facts: I,
        interval: Option<Duration>,
    ) -> Result<String, ClientError>
    where
        I: IntoIterator<Item = F>,
        F: Into<IdOrName>,
    {
        let uid = self.fresh_uid();
        self.send(poll_facts_request(uid.clone(), facts, interval)).await?;
        Ok(uid)
    }

    /// The next response, timeout or event. An `Err` ends the connection: the peer closed it
    /// ([`ClientError::Closed`]) or broke the framing.
    ///
    /// Cancel safe: dropping the future loses nothing.
    pub async fn next(&mut self) -> Result<Incoming, ClientError> {
        loop {
            if let Some(uid) = self.expired.pop_front() {
                return Ok(Incoming::Timeout { uid });
            }
            let deadline = self.pending.next_deadline().map(tokio::time::Instant::from_std);
            tokio::select! {
                () = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)), if deadline.is_some() => {
                    let now = tokio::time::Instant::now().into_std();
                    self.expired.extend(self.pending.expire(now).into_iter().map(|(uid, ())| uid));
                }
                item = std::future::poll_fn(|cx| self.conn.poll_frame(cx)) => match item {
                    None => {
                        return Err(ClientError::Closed { reason: Some("closed by the interpreter".into()) })
                    }
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(Err(e))) => return Ok(Incoming::Event(Event::InvalidPayload(e))),
                    Some(Ok(Ok(Payload::Handshake(h)))) => tracing::debug!(%h, "late handshake frame ignored"),
                    Some(Ok(Ok(Payload::Message(response)))) => {
                        // `InvalidSyntax` never carries a UID, so it can never complete a request (notes, rule 22).
                        let uid = response.uid().filter(|uid| self.pending.complete(uid).is_some());
                        return Ok(match uid.map(str::to_owned) {
                            Some(uid) => Incoming::Reply { uid, response },
                            None => Incoming::Event(Event::Message(response)),
                        });
                    }
                },
            }
        }
    }
}

fn poll_facts_request<I, F>(uid: String, facts: I, interval: Option<Duration>) -> Request
where
    I: IntoIterator<Item = F>,
    F: Into<IdOrName>,
{
    Request::PollFacts(PollFacts {
        uid: Some(uid),
        facts: Some(facts.into_iter().map(Into::into).collect()),
        interval: interval.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        ..Default::default()
    })
}

fn unexpected(expected: &'static str, got: Response) -> ClientError {
    ClientError::UnexpectedReply {
        expected,
        got: got.name().to_owned(),
        uid: got.uid().unwrap_or_default().to_owned(),
    }
}

fn set_uid(request: &mut Request, uid: String) {
    match request {
        Request::GetFacts(a) => a.uid = Some(uid),
        Request::PollFacts(a) => a.uid = Some(uid),
        Request::StopFacts(a) => a.uid = Some(uid),
        Request::BumpFacts(a) => a.uid = Some(uid),
        Request::Subscribe(a) => a.uid = Some(uid),
        Request::GetLastKnownState(a) => a.uid = Some(uid),
        Request::ConnectRide(a) => a.uid = Some(uid),
        Request::Unknown { args, .. } => {
            args.insert("UID".into(), uid.into());
        }
    }
}

/// A boxed transport, so one connection task serves TCP and anything else.
type BoxedIo = Pin<Box<dyn AsyncReadWrite>>;
trait AsyncReadWrite: AsyncRead + AsyncWrite + Send {}
impl<T: AsyncRead + AsyncWrite + Send> AsyncReadWrite for T {}

/// A framed connection over a boxed transport.
struct Conn(Framed<BoxedIo, ClientCodec>);

impl Conn {
    /// The next frame. The read buffer is held only while there is something to read: waiting for
    /// the next message a connection holds none (a fleet polls hundreds of interpreters, each a
    /// message or two a second). It is taken back at [`IO_BUFFER`] bytes here (tokio-util would grow
    /// an empty one a few bytes a read).
    fn poll_frame(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<<Framed<BoxedIo, ClientCodec> as futures::Stream>::Item>> {
        if self.0.read_buffer().capacity() == 0 {
            self.0.read_buffer_mut().reserve(IO_BUFFER);
        }
        let polled = self.0.poll_next_unpin(cx);
        if polled.is_pending() && self.0.read_buffer().is_empty() {
            *self.0.read_buffer_mut() = bytes::BytesMut::new();
        }
        polled
    }
}

async fn open(addr: &str, config: &ClientConfig) -> Result<Framed<BoxedIo, ClientCodec>, ClientError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect { addr: addr.to_owned(), source })?;
    let _ = stream.set_nodelay(true);
    handshaken(stream, config).await
}

/// `stream`, boxed and framed with [`IO_BUFFER`]-sized buffers, after the handshake. It is boxed
/// before it is framed: framing it again afterwards would go through `Framed::from_parts`, which
/// gives each buffer tokio-util's 8 KiB.
async fn handshaken<S>(stream: S, config: &ClientConfig) -> Result<Framed<BoxedIo, ClientCodec>, ClientError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let io: BoxedIo = Box::pin(stream);
    let mut framed = Framed::with_capacity(io, ClientCodec::new(config.max_frame_len), IO_BUFFER);
    // Requests are a few hundred bytes at most: the write buffer grows to the largest, no more.
    *framed.write_buffer_mut() = bytes::BytesMut::new();
    handshake(&mut framed, config).await?;
    Ok(framed)
}

/// Does the monitor's side of the handshake on `framed` (the [`proto::Handshake`] state machine, driven).
pub async fn handshake<S>(
    framed: &mut Framed<S, ClientCodec>,
    config: &ClientConfig,
) -> Result<(), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let now = tokio::time::Instant::now();
    let after = config.handshake_timeout;
    let mut state = proto::Handshake::new(Role::Monitor(config.handshake), now.into_std(), after);
    let deadline = tokio::time::Instant::from_std(state.deadline());
    let mut frames = 0;
    let steps = async {
        loop {
            while let Some(frame) = state.poll_transmit() {
                framed.feed(Payload::Handshake(frame)).await?;
            }
            framed.flush().await?;
            if state.is_done() {
                return Ok(());
            }
            let handshake = next_handshake(framed).await?;
            frames += 1;
            state.handle(handshake)?;
        }
    };
    let result = tokio::time::timeout_at(deadline, steps)
        .await
        .unwrap_or(Err(ClientError::Timeout { what: "handshake", after }));
    match result {
        // Before the first frame, what the peer sent is still all in the read buffer: whose is it?
        Err(_) if frames == 0 && sniff(framed.read_buffer()) == Some(false) => {
            let first = framed.read_buffer();
            Err(ClientError::OtherProtocol { first: first[..first.len().min(FIRST_BYTES_KEPT)].to_vec() })
        }
        result => result,
    }
}

/// How many of a foreign peer's first bytes [`ClientError::OtherProtocol`] keeps.
const FIRST_BYTES_KEPT: usize = 24;

async fn next_handshake<S>(framed: &mut Framed<S, ClientCodec>) -> Result<Handshake, ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match framed.next().await {
        None => Err(ClientError::Closed { reason: Some("peer closed during the handshake".into()) }),
        Some(Err(e)) => Err(e.into()),
        Some(Ok(Err(e))) => Err(HandshakeError::Payload(e).into()),
        Some(Ok(Ok(Payload::Handshake(h)))) => Ok(h),
        Some(Ok(Ok(Payload::Message(m)))) => {
            Err(HandshakeError::MessageBeforeHandshake(m.name().to_owned()).into())
        }
    }
}

/// An interpreter that completed its handshake, and where it came from.
type Accepted = (Framed<BoxedIo, ClientCodec>, std::net::SocketAddr);

/// Accepts interpreters that connect in POLL mode (`POLL:address:port`), one [`Client`] per interpreter.
///
/// Handshakes run concurrently, so an interpreter that connects and says nothing does not hold up the
/// others (it fails on its own after the handshake timeout).
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    config: ClientConfig,
    handshakes: tokio::task::JoinSet<Result<Accepted, ClientError>>,
}

impl Listener {
    /// Listens on `addr`.
    pub async fn bind(addr: impl ToSocketAddrs, config: ClientConfig) -> std::io::Result<Listener> {
        Ok(Self::from_listener(TcpListener::bind(addr).await?, config))
    }

    /// Wraps a bound listener.
    pub fn from_listener(listener: TcpListener, mut config: ClientConfig) -> Listener {
        config.reconnect = None; // the interpreter dials again by itself
        Listener { listener, config, handshakes: tokio::task::JoinSet::new() }
    }

    /// The address listened on.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Waits for the next interpreter that completes its handshake (the roles are as in SERVE mode: the
    /// interpreter speaks first and the monitor sends requests). An error concerns one connection; the
    /// listener can go on accepting.
    pub async fn accept(&mut self) -> Result<(Client, Events, std::net::SocketAddr), ClientError> {
        let (framed, peer) = self.accept_framed().await?;
        let (client, events) = Client::spawn(framed, None, self.config.clone());
        Ok((client, events, peer))
    }

    /// As [`Listener::accept`], but the interpreter comes as a [`Connection`] that its owner drives
    /// (no task of its own).
    pub async fn accept_connection(&mut self) -> Result<(Connection, std::net::SocketAddr), ClientError> {
        let (framed, peer) = self.accept_framed().await?;
        Ok((Connection::from_framed(framed, Arc::new(self.config.clone())), peer))
    }

    async fn accept_framed(&mut self) -> Result<Accepted, ClientError> {
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let (stream, peer) =
                        accepted.map_err(|source| ClientError::Connect { addr: "listener".into(), source })?;
                    let _ = stream.set_nodelay(true);
                    let config = self.config.clone();
                    self.handshakes.spawn(async move { Ok((handshaken(stream, &config).await?, peer)) });
                }
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    return done.unwrap_or_else(|e| Err(ClientError::Closed { reason: Some(e.to_string()) }));
                }
            }
        }
    }
}

struct EventSender {
    tx: mpsc::Sender<Event>,
    dropped: u64,
}

impl EventSender {
    fn send(&mut self, event: Event) {
        if self.dropped > 0 {
            match self.tx.try_send(Event::Lagged { dropped: self.dropped }) {
                Ok(()) => self.dropped = 0,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.dropped += 1;
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(event) {
            self.dropped += 1;
        }
    }
}

/// The task behind a [`Client`]: drives its [`Connection`], answers each request's future, and
/// reconnects.
struct Background {
    conn: Connection,
    addr: Option<String>,
    config: Arc<ClientConfig>,
    commands: mpsc::Receiver<Command>,
    events: EventSender,
    /// The callers waiting for a response, by UID (their deadlines are kept by the connection).
    waiting: std::collections::HashMap<String, ReplyTx>,
    standing: Standing,
}

enum Step {
    Continue,
    Lost(String),
    Done,
}

/// Why a connection ended, in one line.
fn lost(e: ClientError) -> Step {
    match e {
        ClientError::Closed { reason: Some(reason) } => Step::Lost(reason),
        e => Step::Lost(e.to_string()),
    }
}

impl Background {
    async fn run(mut self) {
        loop {
            let reason = loop {
                match self.step().await {
                    Step::Continue => {}
                    Step::Lost(reason) => break reason,
                    Step::Done => return,
                }
            };
            tracing::info!(%reason, "hmon connection lost");
            for (_, tx) in self.waiting.drain() {
                let _ = tx.send(Err(ClientError::Closed { reason: Some(reason.clone()) }));
            }
            self.events.send(Event::Disconnected { reason });
            if !self.reconnect().await {
                return;
            }
        }
    }

    async fn step(&mut self) -> Step {
        tokio::select! {
            command = self.commands.recv() => match command {
                None => Step::Done,
                Some(Command::Send { request, reply }) => {
                    self.waiting.retain(|_, tx| !tx.is_closed());
                    self.standing.remember(&request);
                    let sent = match reply {
                        Some((uid, tx)) => {
                            self.waiting.insert(uid.clone(), tx);
                            self.conn.send_tracked(request, uid).await
                        }
                        None => self.conn.send(request).await,
                    };
                    sent.map_or_else(lost, |()| Step::Continue)
                }
            },
            incoming = self.conn.next() => match incoming {
                Err(e) => lost(e),
                Ok(Incoming::Event(event)) => {
                    self.events.send(event);
                    Step::Continue
                }
                Ok(Incoming::Reply { uid, response }) => {
                    match self.waiting.remove(&uid) {
                        Some(tx) => {
                            if let Err(Ok(response)) = tx.send(Ok(response)) {
                                // The caller gave up; the late reply is still worth showing.
                                self.events.send(Event::Message(response));
                            }
                        }
                        None => self.events.send(Event::Message(response)),
                    }
                    Step::Continue
                }
                Ok(Incoming::Timeout { uid }) => {
                    if let Some(tx) = self.waiting.remove(&uid) {
                        let after = self.config.request_timeout;
                        let _ = tx.send(Err(ClientError::Timeout { what: "reply", after }));
                    }
                    Step::Continue
                }
            },
        }
    }

    /// Reconnects with backoff; `false` when reconnecting is off, gave up, or the client is gone.
    ///
    /// Requests made meanwhile fail at once with [`ClientError::Closed`]; a `PollFacts`, `StopFacts` or
    /// `Subscribe` sent meanwhile updates what is re-sent once connected.
    async fn reconnect(&mut self) -> bool {
        let (Some(addr), Some(policy)) = (self.addr.clone(), self.config.reconnect.clone()) else {
            return false;
        };
        let mut attempt = 0u32;
        loop {
            let sleep = tokio::time::sleep(policy.delay(attempt));
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    command = self.commands.recv() => match command {
                        None => return false,
                        Some(Command::Send { request, reply }) => {
                            self.standing.remember(&request);
                            if let Some((_, tx)) = reply {
                                let _ = tx.send(Err(ClientError::Closed { reason: Some("reconnecting".into()) }));
                            }
                        }
                    },
                }
            }
            match open(&addr, &self.config).await {
                Ok(framed) => {
                    self.conn = Connection::from_framed(framed, self.config.clone());
                    for request in self.standing.replay().cloned().collect::<Vec<_>>() {
                        if self.conn.conn.0.feed(Payload::Message(request)).await.is_err() {
                            break;
                        }
                    }
                    let _ = self.conn.conn.0.flush().await;
                    self.events.send(Event::Reconnected);
                    return true;
                }
                Err(e) => {
                    tracing::info!(%addr, error = %e, "reconnect failed");
                    attempt += 1;
                    if policy.max_attempts.is_some_and(|max| attempt >= max) {
                        return false;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::ServerCodec;
    use crate::error::FrameError;
    use crate::message::{Facts, UserMessage};

    /// The interpreter's end of a pipe, driven by hand.
    type Peer = Framed<tokio::io::DuplexStream, ServerCodec>;

    fn pipe() -> (tokio::io::DuplexStream, Peer) {
        let (a, b) = tokio::io::duplex(1 << 16);
        (a, Framed::new(b, ServerCodec::default()))
    }

    async fn peer_handshake(peer: &mut Peer, using: u32) {
        peer.feed(Payload::Handshake(Handshake::supported())).await.unwrap();
        peer.send(Payload::Handshake(Handshake::UsingProtocol(using))).await.unwrap();
    }

    /// Issue 45: a monitor pointed at another protocol's port said `frame total length 4294967295 exceeds...`.
    #[tokio::test(start_paused = true)]
    async fn a_peer_of_another_protocol_is_named_as_such() {
        let resync = [&[0xFF; 17][..], &[0xFE, 0x00, 0x0C]].concat();
        let mono_hello = [0x00, 0x01, 0x00, 0x00, 0x00]; // shorter than a frame header: the timeout tells
        for (first, timeout) in
            [(&resync[..], false), (&b"HTTP/1.1 400 Bad Request\r\n"[..], false), (&mono_hello[..], true)]
        {
            let (ours, mut theirs) = tokio::io::duplex(1 << 16);
            theirs.write_all(first).await.unwrap();
            let config =
                ClientConfig { handshake_timeout: Duration::from_secs(1), ..ClientConfig::default() };
            let err = Client::over(ours, config).await.unwrap_err();
            let ClientError::OtherProtocol { first: got } = &err else { panic!("{err}") };
            assert_eq!(got[..], first[..first.len().min(FIRST_BYTES_KEPT)], "timeout {timeout}");
            assert!(err.to_string().starts_with("not an HMON peer: it began with \""), "{err}");
        }
        // An HMON peer whose second frame is bad is an HMON peer with a bad frame.
        let (ours, mut peer) = pipe();
        peer.send(Payload::Handshake(Handshake::supported())).await.unwrap();
        peer.get_mut().write_all(b"\xff\xff\xff\xff").await.unwrap();
        let err = Client::over(ours, ClientConfig::default()).await.unwrap_err();
        assert!(matches!(err, ClientError::Frame(FrameError::TooLarge { .. })), "{err}");
    }

    #[tokio::test]
    async fn a_connection_keeps_its_small_buffers() {
        let (ours, mut peer) = pipe();
        peer_handshake(&mut peer, 2).await;
        let conn = Connection::over(ours, ClientConfig::default()).await.unwrap();
        // What the handshake frames took from the read buffer is not counted in its capacity.
        assert!(conn.conn.0.read_buffer().capacity() <= IO_BUFFER);
        let written = conn.conn.0.write_buffer().capacity();
        assert!(written <= 256, "the write buffer holds {written} bytes after the handshake");
        // Waiting for the next message, the connection holds no read buffer; a frame that comes in
        // two parts keeps it between them, and is read whole.
        let mut conn = conn;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(conn.conn.poll_frame(&mut cx).is_pending());
        assert_eq!(conn.conn.0.read_buffer().capacity(), 0);
        let mut frame = bytes::BytesMut::new();
        let m = UserMessage { message: Some("split".into()), ..Default::default() };
        peer.codec_mut().encode(Payload::Message(Response::UserMessage(m)), &mut frame).unwrap();
        let (first, rest) = frame.split_at(frame.len() / 2);
        use tokio::io::AsyncWriteExt;
        peer.get_mut().write_all(first).await.unwrap();
        assert!(conn.conn.poll_frame(&mut cx).is_pending());
        assert_eq!(conn.conn.0.read_buffer().len(), first.len(), "the first part is kept");
        peer.get_mut().write_all(rest).await.unwrap();
        let got = conn.next().await.unwrap();
        assert!(
            matches!(got, Incoming::Event(Event::Message(Response::UserMessage(m))) if m.message.as_deref() == Some("split"))
        );
        assert!(conn.conn.poll_frame(&mut cx).is_pending());
        assert_eq!(conn.conn.0.read_buffer().capacity(), 0);
    }

    #[tokio::test]
    async fn wrong_protocol_is_a_handshake_error() {
        let (ours, mut peer) = pipe();
        peer_handshake(&mut peer, 3).await;
        let err = Client::over(ours, ClientConfig::default()).await.unwrap_err();
        assert!(matches!(err, ClientError::Handshake(HandshakeError::WrongProtocol(3))), "{err}");
    }

    #[tokio::test]
    async fn json_before_the_handshake_is_an_error() {
        let (ours, mut peer) = pipe();
        peer.send(Payload::Message(Response::Facts(Facts::default()))).await.unwrap();
        let err = Client::over(ours, ClientConfig::default()).await.unwrap_err();
        assert!(
            matches!(err, ClientError::Handshake(HandshakeError::MessageBeforeHandshake(ref n)) if n == "Facts"),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_times_the_handshake_out() {
        let (ours, _peer) = pipe();
        let err = Client::over(ours, ClientConfig::default()).await.unwrap_err();
        assert!(matches!(err, ClientError::Timeout { what: "handshake", .. }), "{err}");
    }

    #[tokio::test]
    async fn bad_payloads_and_uncorrelated_messages_are_events() {
        let (ours, mut peer) = pipe();
        peer_handshake(&mut peer, 2).await;
        let (client, mut events) = Client::over(ours, ClientConfig::default()).await.unwrap();
        // The client's handshake frames, in either order.
        for _ in 0..2 {
            assert!(matches!(peer.next().await, Some(Ok(Ok(Payload::Handshake(_))))));
        }
        let mut raw = bytes::BytesMut::new();
        crate::frame::encode_frame(b"[\"Facts\",{", &mut raw).unwrap();
        peer.get_mut().write_all(&raw).await.unwrap();
        assert!(matches!(
            events.next().await,
            Some(Event::InvalidPayload(PayloadError::InvalidSyntax { .. }))
        ));
        peer.send(Payload::Message(Response::UserMessage(UserMessage {
            message: Some("hi".into()),
            ..Default::default()
        })))
        .await
        .unwrap();
        assert!(matches!(events.next().await, Some(Event::Message(Response::UserMessage(_)))));
        drop(peer);
        assert!(matches!(events.next().await, Some(Event::Disconnected { .. })));
        assert!(events.next().await.is_none());
        assert!(matches!(client.last_known_state().await, Err(ClientError::Closed { .. })));
    }

    #[tokio::test]
    async fn events_that_nobody_reads_are_counted_not_buffered() {
        let (ours, mut peer) = pipe();
        peer_handshake(&mut peer, 2).await;
        let config = ClientConfig { event_capacity: 2, ..ClientConfig::default() };
        let (client, mut events) = Client::over(ours, config).await.unwrap();
        for n in 0..5 {
            let m = UserMessage { message: Some(n.to_string()), ..Default::default() };
            peer.send(Payload::Message(Response::UserMessage(m))).await.unwrap();
        }
        // A correlated round trip proves the five were routed before we look.
        let asking = client.clone();
        let request = tokio::spawn(async move { asking.last_known_state().await });
        for _ in 0..2 {
            assert!(matches!(peer.next().await, Some(Ok(Ok(Payload::Handshake(_))))));
        }
        let Some(Ok(Ok(Payload::Message(Request::GetLastKnownState(r))))) = peer.next().await else {
            panic!()
        };
        let reply = crate::message::LastKnownState { uid: r.uid, ..Default::default() };
        peer.send(Payload::Message(Response::LastKnownState(reply))).await.unwrap();
        request.await.unwrap().unwrap();
        assert!(matches!(events.next().await, Some(Event::Message(_))));
        assert!(matches!(events.next().await, Some(Event::Message(_))));
        // The next event to fit is the count of what was dropped.
        let m = UserMessage { message: Some("late".into()), ..Default::default() };
        peer.send(Payload::Message(Response::UserMessage(m))).await.unwrap();
        assert_eq!(events.next().await, Some(Event::Lagged { dropped: 3 }));
        assert!(
            matches!(events.next().await, Some(Event::Message(Response::UserMessage(m))) if m.message.as_deref() == Some("late"))
        );
        drop(client);
        assert!(events.next().await.is_none(), "dropping the last handle closes the connection");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_driven_by_its_owner_correlates_times_out_and_passes_the_rest_on() {
        let (ours, mut peer) = pipe();
        peer_handshake(&mut peer, 2).await;
        let config = ClientConfig { request_timeout: Duration::from_secs(2), ..ClientConfig::default() };
        let mut conn = Connection::over(ours, config).await.unwrap();
        for _ in 0..2 {
            assert!(matches!(peer.next().await, Some(Ok(Ok(Payload::Handshake(_))))));
        }
        let first = conn.request(Request::GetLastKnownState(GetLastKnownState::default())).await.unwrap();
        let second = conn.request(Request::GetLastKnownState(GetLastKnownState::default())).await.unwrap();
        assert_ne!(first, second);
        let poll = conn.poll_facts([crate::FactKind::Host], None).await.unwrap();
        let mut asked = Vec::new();
        for _ in 0..3 {
            let Some(Ok(Ok(Payload::Message(request)))) = peer.next().await else { panic!() };
            asked.push(request.uid().map(str::to_owned));
        }
        assert_eq!(asked, [Some(first.clone()), Some(second.clone()), Some(poll.clone())]);
        // An uncorrelated message, then the reply to the first request; the second one never comes.
        let m = UserMessage { message: Some("hi".into()), ..Default::default() };
        peer.send(Payload::Message(Response::UserMessage(m))).await.unwrap();
        let reply = crate::message::LastKnownState { uid: Some(first.clone()), ..Default::default() };
        peer.send(Payload::Message(Response::LastKnownState(reply))).await.unwrap();
        assert!(matches!(conn.next().await, Ok(Incoming::Event(Event::Message(Response::UserMessage(_))))));
        match conn.next().await {
            Ok(Incoming::Reply { uid, response: Response::LastKnownState(_) }) => assert_eq!(uid, first),
            other => panic!("{other:?}"),
        }
        let before = tokio::time::Instant::now();
        assert_eq!(conn.next().await.unwrap(), Incoming::Timeout { uid: second.clone() });
        assert_eq!(before.elapsed(), Duration::from_secs(2));
        // A late reply is an event; polled facts are events.
        let late = crate::message::LastKnownState { uid: Some(second), ..Default::default() };
        peer.send(Payload::Message(Response::LastKnownState(late))).await.unwrap();
        assert!(matches!(
            conn.next().await,
            Ok(Incoming::Event(Event::Message(Response::LastKnownState(_))))
        ));
        drop(peer);
        assert!(matches!(conn.next().await, Err(ClientError::Closed { .. })));
    }
}
