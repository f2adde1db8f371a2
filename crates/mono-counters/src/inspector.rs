//! The inspector: a TCP server that Mono agents connect to, one [`Session`] per agent.
//!
//! A session runs one reader task that decodes everything the agent sends. Samples update the
//! [`CounterTable`] (samples are deltas) and are handed out by [`Session::next_sample`]; responses are
//! matched to the requests waiting for them, first in first out per kind, since the protocol has no
//! request ids. Requests can be made from any task through a [`SessionHandle`].

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::oneshot;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::codec::{InspectorCodec, Limits};
use crate::error::ClientError;
use crate::message::*;
use crate::table::CounterTable;

/// How an inspector talks to its agents.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Decoder limits.
    pub limits: Limits,
    /// The request numbering to send (the real agent's by default).
    pub opcodes: RequestOpcodes,
    /// How long `list`, `add` and `remove` wait for their response.
    pub request_timeout: Duration,
    /// How long a new connection may take to send Hello.
    pub hello_timeout: Duration,
    /// Updates buffered for [`Session::next_sample`]. When the consumer falls further behind, the
    /// reader merges the samples that follow into one held update (counted in
    /// [`SampleUpdate::missed`]), queued as soon as there is room: no changed value is lost, and
    /// responses to requests are still read.
    pub sample_queue: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            limits: Limits::default(),
            opcodes: RequestOpcodes::Agent,
            request_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(10),
            sample_queue: 1024,
        }
    }
}

impl ClientConfig {
    /// Decoder limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The request numbering to send.
    pub fn opcodes(mut self, opcodes: RequestOpcodes) -> Self {
        self.opcodes = opcodes;
        self
    }

    /// How long `list`, `add` and `remove` wait for their response.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

/// The name this type had before 0.2.
#[deprecated(note = "renamed ClientConfig")]
pub type InspectorConfig = ClientConfig;

/// One decoded sample that carried values, and the full state after it.
///
/// A sample with no value (the agent without `interval=` sends one whenever nothing changed) is
/// applied and counted in the next update's [`SampleUpdate::empty`], never queued on its own.
#[derive(Debug, Clone)]
pub struct SampleUpdate {
    /// The sample's timestamp (100 ns ticks, relative).
    pub timestamp: i64,
    /// The indexes whose value this sample carried (with [`SampleUpdate::missed`] samples merged
    /// in: the indexes any of them carried).
    pub changed: Vec<i16>,
    /// Every counter with its latest value, after this sample.
    pub table: Arc<CounterTable>,
    /// Earlier samples with values merged into this update because the consumer fell behind (their
    /// values are in `table` and their indexes in `changed`).
    pub missed: u64,
    /// Samples with no value received since the previous update.
    pub empty: u64,
}

impl SampleUpdate {
    /// Folds a later update into this one (the consumer is behind): the later state, every index
    /// either carried.
    fn merge(&mut self, later: SampleUpdate) {
        self.timestamp = later.timestamp;
        for i in later.changed {
            if !self.changed.contains(&i) {
                self.changed.push(i);
            }
        }
        self.table = later.table;
        self.missed += 1 + later.missed;
        self.empty += later.empty;
    }
}

/// A TCP server for Mono agents (`address=host:port` on the agent side).
#[derive(Debug)]
pub struct Inspector {
    listener: TcpListener,
    config: ClientConfig,
}

impl Inspector {
    /// Listens on `addr`.
    pub async fn bind(addr: impl ToSocketAddrs, config: ClientConfig) -> io::Result<Self> {
        Ok(Inspector { listener: TcpListener::bind(addr).await?, config })
    }

    /// Uses a bound listener.
    pub fn from_listener(listener: TcpListener, config: ClientConfig) -> Self {
        Inspector { listener, config }
    }

    /// The address agents connect to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Waits for the next agent and its Hello.
    pub async fn accept(&self) -> Result<(Session, SocketAddr), ClientError> {
        let (stream, peer) = self.listener.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok((Session::start(stream, self.config.clone()).await?, peer))
    }
}

type Writer = FramedWrite<Pin<Box<dyn AsyncWrite + Send>>, InspectorCodec>;

/// The read buffer a session starts with: it grows to the largest message the agent sends (its Hello,
/// or a sample of every counter); tokio-util's default is 8 KiB, which a fleet of agents pays per
/// agent, and an agent sampling a few counters sends messages of a few hundred bytes.
const READ_BUFFER: usize = 512;

/// The agent's half of a session, framed, with a [`READ_BUFFER`]-sized buffer.
fn framed_read<R: AsyncRead>(read: R, codec: InspectorCodec) -> FramedRead<R, InspectorCodec> {
    FramedRead::with_capacity(read, codec, READ_BUFFER)
}

/// The agent's next message. The read buffer is held only while there is something to read:
/// waiting for the next sample a session holds none (an inspector may watch hundreds of agents, each
/// a sample a second). It is taken back at [`READ_BUFFER`] bytes here (tokio-util would grow an
/// empty one a few bytes a read).
fn poll_message<R: AsyncRead + Unpin>(
    framed: &mut FramedRead<R, InspectorCodec>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Option<<FramedRead<R, InspectorCodec> as futures::Stream>::Item>> {
    if framed.read_buffer().capacity() == 0 {
        framed.read_buffer_mut().reserve(READ_BUFFER);
    }
    let polled = framed.poll_next_unpin(cx);
    if polled.is_pending() && framed.read_buffer().is_empty() {
        *framed.read_buffer_mut() = bytes::BytesMut::new();
    }
    polled
}

/// The inspector's half, framed, with a write buffer that starts empty (requests are a few dozen
/// bytes; tokio-util reserves 8 KiB).
fn framed_write(write: Pin<Box<dyn AsyncWrite + Send>>, codec: InspectorCodec) -> Writer {
    let mut framed = FramedWrite::new(write, codec);
    *framed.write_buffer_mut() = bytes::BytesMut::new();
    framed
}

#[derive(Default)]
struct Pending {
    closed: bool,
    list: VecDeque<oneshot::Sender<Vec<CounterName>>>,
    add: VecDeque<oneshot::Sender<AddResponse>>,
    remove: VecDeque<(i16, oneshot::Sender<Status>)>,
}

struct Shared {
    pending: Mutex<Pending>,
    samples: Mutex<SampleQueue>,
    writer: tokio::sync::Mutex<Writer>,
    timeout: Duration,
}

/// What the reader task queues for [`Session::next_sample`], boxed (16 bytes an entry).
type Queued = Result<Box<SampleUpdate>, Box<ClientError>>;

/// The reader's queue of updates for [`Session::next_sample`]: one producer, one consumer, bounded
/// by [`ClientConfig::sample_queue`]. A tokio `mpsc` channel cost each agent about 1 KB (its state and
/// a first block of 32 entries) however few updates were waiting; this holds what waits, mostly
/// one update or none.
#[derive(Debug, Default)]
struct SampleQueue {
    items: VecDeque<Queued>,
    /// The most updates it holds.
    capacity: usize,
    /// The reader has queued its last update.
    done: bool,
    /// The consumer waiting for an update, and the reader waiting for room.
    consumer: Option<Waker>,
    reader: Option<Waker>,
}

/// The room a [`SampleQueue`] keeps once emptied: more is given back.
const SMALL_QUEUE: usize = 8;

/// Keeps `cx`'s waker in `slot`, to be woken once.
fn wait_in(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl Shared {
    fn new(writer: Pin<Box<dyn AsyncWrite + Send>>, codec: InspectorCodec, config: &ClientConfig) -> Shared {
        Shared {
            pending: Mutex::new(Pending::default()),
            samples: Mutex::new(SampleQueue {
                capacity: config.sample_queue.max(1),
                ..SampleQueue::default()
            }),
            writer: tokio::sync::Mutex::new(framed_write(writer, codec)),
            timeout: config.request_timeout,
        }
    }

    fn samples(&self) -> std::sync::MutexGuard<'_, SampleQueue> {
        // The queue is consistent between any two of its statements: a panic elsewhere leaves it usable.
        self.samples.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item` if there is room; gives it back if not.
    fn try_queue(&self, item: Queued) -> Result<(), Queued> {
        let mut q = self.samples();
        if q.items.len() >= q.capacity {
            return Err(item);
        }
        q.items.push_back(item);
        if let Some(w) = q.consumer.take() {
            w.wake();
        }
        Ok(())
    }

    /// Ready once the queue has room.
    fn poll_room(&self, cx: &Context<'_>) -> Poll<()> {
        let mut q = self.samples();
        if q.items.len() < q.capacity {
            return Poll::Ready(());
        }
        wait_in(&mut q.reader, cx);
        Poll::Pending
    }

    /// Queues `item` once there is room.
    async fn queue(&self, item: Queued) {
        std::future::poll_fn(|cx| self.poll_room(cx)).await;
        // Only the reader queues, so the room is still there.
        let _ = self.try_queue(item);
    }

    /// The next update; `None` once the reader is done and everything was taken.
    fn poll_next(&self, cx: &Context<'_>) -> Poll<Option<Queued>> {
        let mut q = self.samples();
        if let Some(item) = q.items.pop_front() {
            if q.items.is_empty() && q.items.capacity() > SMALL_QUEUE {
                // A burst is over: its room goes back (a thousand agents each kept theirs).
                q.items.shrink_to_fit();
            }
            if let Some(w) = q.reader.take() {
                w.wake();
            }
            return Poll::Ready(Some(item));
        }
        if q.done {
            return Poll::Ready(None);
        }
        wait_in(&mut q.consumer, cx);
        Poll::Pending
    }
}

/// One connected agent: its Hello, its samples, and requests to it.
pub struct Session {
    hello: Hello,
    handle: SessionHandle,
    reader: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("hello", &self.hello).finish_non_exhaustive()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Makes requests to an agent; cheap to clone, usable from any task while the [`Session`] lives.
#[derive(Clone)]
pub struct SessionHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle").finish_non_exhaustive()
    }
}

impl Session {
    /// Runs the inspector side over any connected stream (TCP, a pipe in tests): reads the Hello, then
    /// starts the reader task.
    pub async fn start<S>(stream: S, config: ClientConfig) -> Result<Session, ClientError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(stream);
        let codec = InspectorCodec::new(config.limits).with_opcodes(config.opcodes);
        let mut framed = framed_read(read, codec.clone());
        let first = tokio::time::timeout(config.hello_timeout, framed.next()).await;
        let hello = match first {
            Ok(Some(Ok(AgentMessage::Hello(hello)))) => hello,
            Ok(Some(Ok(other))) => return Err(ClientError::ExpectedHello(other.kind())),
            Ok(Some(Err(e))) => return Err(ClientError::at_start(e, framed.read_buffer())),
            Ok(None) => return Err(ClientError::Closed { request: "hello" }),
            Err(_) => {
                let timeout = ClientError::Timeout { request: "hello", after: config.hello_timeout };
                return Err(ClientError::at_start(timeout, framed.read_buffer()));
            }
        };
        let writer: Pin<Box<dyn AsyncWrite + Send>> = Box::pin(write);
        let shared = Arc::new(Shared::new(writer, codec, &config));
        let table = Arc::new(CounterTable::from_hello(&hello));
        let reader = tokio::spawn(read_loop(framed, Arc::clone(&shared), table));
        Ok(Session { hello, handle: SessionHandle { shared }, reader })
    }

    /// The agent's Hello.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// A handle for requests from other tasks.
    pub fn handle(&self) -> SessionHandle {
        self.handle.clone()
    }

    /// The next sample; `Ok(None)` once the agent has closed the connection.
    pub async fn next_sample(&mut self) -> Result<Option<SampleUpdate>, ClientError> {
        let shared = &self.handle.shared;
        match std::future::poll_fn(|cx| shared.poll_next(cx)).await {
            Some(Ok(update)) => Ok(Some(*update)),
            Some(Err(e)) => Err(*e),
            None => Ok(None),
        }
    }

    /// See [`SessionHandle::list`].
    pub async fn list(&self) -> Result<Vec<CounterName>, ClientError> {
        self.handle.list().await
    }

    /// See [`SessionHandle::add`].
    pub async fn add(
        &self,
        category: impl Into<String>,
        name: impl Into<String>,
    ) -> Result<AddResponse, ClientError> {
        self.handle.add(category, name).await
    }

    /// See [`SessionHandle::add_counter`].
    pub async fn add_counter(&self, counter: CounterName) -> Result<AddResponse, ClientError> {
        self.handle.add_counter(counter).await
    }

    /// See [`SessionHandle::remove`].
    pub async fn remove(&self, index: i16) -> Result<Status, ClientError> {
        self.handle.remove(index).await
    }

    /// See [`SessionHandle::goodbye`].
    pub async fn goodbye(&self) -> Result<(), ClientError> {
        self.handle.goodbye().await
    }
}

impl SessionHandle {
    /// Asks for every counter the agent can sample.
    pub async fn list(&self) -> Result<Vec<CounterName>, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.request("list", InspectorMessage::List, |p| p.list.push_back(tx), rx).await
    }

    /// Asks the agent to sample one more counter. On OK the new counter appears in later samples.
    ///
    /// A duplicate is answered [`AddResponse::Existing`] by some agents, while the real agent closes the
    /// connection instead, which this reports as [`ClientError::Closed`].
    pub async fn add(
        &self,
        category: impl Into<String>,
        name: impl Into<String>,
    ) -> Result<AddResponse, ClientError> {
        self.add_counter(CounterName::new(category, name)).await
    }

    /// [`SessionHandle::add`] with the counter's name in one value.
    pub async fn add_counter(&self, counter: CounterName) -> Result<AddResponse, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.request("add", InspectorMessage::Add(counter), |p| p.add.push_back(tx), rx).await
    }

    /// Asks the agent to stop sampling `index`; a negative index removes every counter.
    pub async fn remove(&self, index: i16) -> Result<Status, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.request("remove", InspectorMessage::Remove(index), |p| p.remove.push_back((index, tx)), rx).await
    }

    /// Sends Good Bye and closes our side; the agent closes without replying.
    pub async fn goodbye(&self) -> Result<(), ClientError> {
        let after = self.shared.timeout;
        let bye = async {
            let mut writer = self.shared.writer.lock().await;
            writer.send(InspectorMessage::GoodBye).await?;
            writer.get_mut().shutdown().await?;
            Ok(())
        };
        tokio::time::timeout(after, bye)
            .await
            .map_err(|_| ClientError::Timeout { request: "good bye", after })?
    }

    /// Sends a message that expects no response (Good Bye, or an unknown command byte in tests).
    pub async fn send(&self, msg: InspectorMessage) -> Result<(), ClientError> {
        self.shared.writer.lock().await.send(msg).await
    }

    async fn request<T>(
        &self,
        request: &'static str,
        msg: InspectorMessage,
        enqueue: impl FnOnce(&mut Pending),
        rx: oneshot::Receiver<T>,
    ) -> Result<T, ClientError> {
        let after = self.shared.timeout;
        let deadline = tokio::time::Instant::now() + after;
        let timed_out = || ClientError::Timeout { request, after };
        let send = async {
            // Holding the writer while enqueueing keeps the queue in the order requests hit the wire.
            let mut writer = self.shared.writer.lock().await;
            {
                let mut pending = self.shared.pending.lock().unwrap_or_else(|e| e.into_inner());
                if pending.closed {
                    return Err(ClientError::Closed { request });
                }
                enqueue(&mut pending);
            }
            writer.send(msg).await
        };
        // A write that cannot finish (an agent that stopped reading) times out too.
        tokio::time::timeout_at(deadline, send).await.map_err(|_| timed_out())??;
        // On timeout the queue slot stays: a late response must still line up with its request.
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(ClientError::Closed { request }),
            Err(_) => Err(timed_out()),
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut framed: FramedRead<R, InspectorCodec>,
    shared: Arc<Shared>,
    mut table: Arc<CounterTable>,
) {
    let _done = ReaderDone(Arc::clone(&shared));
    // Samples with no value since the last update.
    let mut empty = 0u64;
    // An update that did not fit in the queue; later samples merge into it until there is room.
    let mut held: Option<SampleUpdate> = None;
    let failure = loop {
        let next = tokio::select! {
            biased;
            () = std::future::poll_fn(|cx| shared.poll_room(cx)), if held.is_some() => {
                if let Some(update) = held.take() {
                    let _ = shared.try_queue(Ok(Box::new(update)));
                }
                continue;
            }
            next = std::future::poll_fn(|cx| poll_message(&mut framed, cx)) => next,
        };
        let msg = match next {
            None => break None,
            Some(Err(e)) => break Some(e),
            Some(Ok(msg)) => msg,
        };
        let mut pending = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
        match msg {
            AgentMessage::Sampling(sample) => {
                drop(pending);
                if sample.values.is_empty() {
                    empty += 1;
                    continue;
                }
                let changed = Arc::make_mut(&mut table).apply(&sample);
                let update = SampleUpdate {
                    timestamp: sample.timestamp,
                    changed,
                    table: Arc::clone(&table),
                    missed: 0,
                    empty: std::mem::take(&mut empty),
                };
                if let Some(h) = held.as_mut() {
                    h.merge(update);
                    continue;
                }
                if let Err(Ok(update)) = shared.try_queue(Ok(Box::new(update))) {
                    held = Some(*update);
                }
            }
            AgentMessage::List(entries) => match pending.list.pop_front() {
                Some(tx) => {
                    let _ = tx.send(entries);
                }
                None => tracing::warn!("list response nobody asked for"),
            },
            AgentMessage::Add(response) => {
                if let AddResponse::Ok(header) = &response {
                    Arc::make_mut(&mut table).insert(header.clone());
                }
                match pending.add.pop_front() {
                    Some(tx) => {
                        let _ = tx.send(response);
                    }
                    None => tracing::warn!("add response nobody asked for"),
                }
            }
            AgentMessage::Remove(status) => match pending.remove.pop_front() {
                Some((index, tx)) => {
                    if status == Status::Ok {
                        Arc::make_mut(&mut table).remove(index);
                    }
                    let _ = tx.send(status);
                }
                None => tracing::warn!("remove response nobody asked for"),
            },
            AgentMessage::Hello(hello) => {
                tracing::warn!("agent sent Hello again; starting over with its counters");
                table = Arc::new(CounterTable::from_hello(&hello));
            }
        }
    };
    {
        let mut pending = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
        *pending = Pending { closed: true, ..Pending::default() };
    }
    if let Some(update) = held {
        shared.queue(Ok(Box::new(update))).await;
    }
    if let Some(e) = failure {
        shared.queue(Err(Box::new(e))).await;
    }
}

/// Marks the queue done when the reader ends, however it ends (returned, aborted or panicked), so
/// that [`Session::next_sample`] answers `None` instead of waiting for ever.
struct ReaderDone(Arc<Shared>);

impl Drop for ReaderDone {
    fn drop(&mut self) {
        let mut q = self.0.samples();
        q.done = true;
        if let Some(w) = q.consumer.take() {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 45: an inspector dialled by an HMON interpreter said `unsupported protocol version 0`, and by a
    /// web browser `unknown agent opcode 71`.
    #[tokio::test(start_paused = true)]
    async fn a_peer_of_another_protocol_is_named_as_such() {
        use tokio::io::AsyncWriteExt;
        let hmon = &b"\0\0\0\x1bHMONSupportedProtocols=2"[..];
        let http = &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..];
        let short = &b"\0\0\0"[..]; // fewer bytes than a Hello: the hello timeout tells
        for first in [hmon, http, short] {
            let (ours, mut theirs) = tokio::io::duplex(4096);
            theirs.write_all(first).await.unwrap();
            let config = ClientConfig { hello_timeout: Duration::from_secs(1), ..ClientConfig::default() };
            let err = Session::start(ours, config).await.unwrap_err();
            let ClientError::OtherProtocol { first: got } = &err else { panic!("{err}") };
            assert_eq!(got[..], first[..first.len().min(24)]);
            assert!(err.to_string().starts_with("not a Mono counters agent: it began with \""), "{err}");
        }
        // A Hello of another version is a Mono agent of another version.
        let (ours, mut theirs) = tokio::io::duplex(4096);
        theirs.write_all(&[0x00, 0x02, 0x00, 0x00, 0x00]).await.unwrap();
        let err = Session::start(ours, ClientConfig::default()).await.unwrap_err();
        assert!(matches!(err, ClientError::Decode(crate::DecodeError::UnsupportedVersion(2))), "{err}");
    }

    #[tokio::test]
    async fn the_sample_queue_is_bounded_ordered_and_ends_when_the_reader_does() {
        let (a, _b) = tokio::io::duplex(64);
        let config = ClientConfig { sample_queue: 2, ..ClientConfig::default() };
        let shared = Arc::new(Shared::new(Box::pin(a), InspectorCodec::new(config.limits), &config));
        let update = |n| {
            let table = Arc::new(CounterTable::default());
            Ok(Box::new(SampleUpdate { timestamp: n, changed: Vec::new(), table, missed: 0, empty: 0 }))
        };
        let mut cx = Context::from_waker(Waker::noop());
        assert!(shared.poll_next(&cx).is_pending(), "empty");
        assert!(shared.try_queue(update(1)).is_ok() && shared.try_queue(update(2)).is_ok());
        assert!(shared.try_queue(update(3)).is_err(), "full at two");
        assert!(shared.poll_room(&cx).is_pending());
        let next = |cx: &mut Context<'_>| match shared.poll_next(cx) {
            Poll::Ready(Some(Ok(u))) => Some(u.timestamp),
            _ => None,
        };
        assert_eq!(next(&mut cx), Some(1));
        assert!(shared.poll_room(&cx).is_ready());
        for n in 3..20 {
            shared.samples().capacity = 64;
            assert!(shared.try_queue(update(n)).is_ok());
        }
        assert!((2..20).all(|n| next(&mut cx) == Some(n)), "in order");
        assert!(shared.samples().items.capacity() <= SMALL_QUEUE, "a burst's room is given back");
        assert!(shared.try_queue(update(20)).is_ok());
        shared.samples().capacity = 2;
        assert!(shared.try_queue(update(21)).is_ok());
        // A reader that ends, even aborted, leaves what it queued, then the end.
        drop(ReaderDone(Arc::clone(&shared)));
        assert_eq!((next(&mut cx), next(&mut cx)), (Some(20), Some(21)));
        assert!(matches!(shared.poll_next(&cx), Poll::Ready(None)));
    }

    #[test]
    fn a_session_starts_with_small_buffers() {
        let codec = InspectorCodec::new(Limits::default());
        let (a, b) = tokio::io::duplex(64);
        assert_eq!(framed_read(a, codec.clone()).read_buffer().capacity(), READ_BUFFER);
        assert_eq!(framed_write(Box::pin(b), codec).write_buffer().capacity(), 0);
    }

    #[tokio::test]
    async fn a_session_waits_for_the_next_message_with_no_read_buffer() {
        use tokio::io::AsyncWriteExt;
        let (ours, mut agent) = tokio::io::duplex(1 << 12);
        let mut framed = framed_read(ours, InspectorCodec::new(Limits::default()));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(poll_message(&mut framed, &mut cx).is_pending());
        assert_eq!(framed.read_buffer().capacity(), 0);
        let mut bytes = bytes::BytesMut::new();
        let sample = Sample { timestamp: 7, values: Vec::new() };
        crate::codec::encode_agent_message(&AgentMessage::Sampling(sample.clone()), &mut bytes).unwrap();
        let (first, rest) = bytes.split_at(bytes.len() / 2);
        agent.write_all(first).await.unwrap();
        assert!(poll_message(&mut framed, &mut cx).is_pending());
        assert_eq!(framed.read_buffer().len(), first.len(), "the first part is kept");
        agent.write_all(rest).await.unwrap();
        let got = std::future::poll_fn(|cx| poll_message(&mut framed, cx)).await;
        assert!(matches!(got, Some(Ok(AgentMessage::Sampling(s))) if s == sample));
        assert!(poll_message(&mut framed, &mut cx).is_pending());
        assert_eq!(framed.read_buffer().capacity(), 0);
    }
}
