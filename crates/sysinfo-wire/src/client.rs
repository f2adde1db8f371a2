//! The async client: `ConnectService("sysinfo")` on the boot channel, one command per new channel, and the
//! chunked reply reassembled and parsed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::Framed;

use crate::codec::{decode_frame, encode_data_frame, encode_frame, sniff, Frame, TransportError};
use crate::message::{BootRequest, BootResponse, ChannelId, Message, SysinfoCommand, SYSINFO_SERVICE};
use crate::reassembly::{Reassembler, ReassemblyError, Reply, DEFAULT_MAX_RESPONSE};
use crate::report::Report;
use crate::wire::{self, WireError};

/// The initial size of the connection's read buffer: replies grow it as they need (a fleet holds a
/// thousand connections, so 8 KiB for each of the two buffers by default would be most of its memory).
const IO_BUFFER: usize = 4096;

/// Where `rvos-sim` listens and `telemon sysinfo` connects by default (TCP, loopback).
pub const DEFAULT_ADDR: &str = "127.0.0.1:7461";

/// The default time one request may take, from asking init for a channel to the sentinel.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How many messages may wait on a channel nobody is reading (the rvOS queue depth, `MAX_QUEUE_DEPTH`).
pub const MAX_QUEUE_DEPTH: usize = 64;

/// The most channels [`Client::request_many`] holds open at once: half of rvOS's
/// `MAX_CHANNELS_PER_PROCESS` (32), so that a pipelined batch never makes init answer `"no channels"`
/// to a client that holds a few channels of its own. Longer batches go in rounds of this many.
pub const MAX_PIPELINE: usize = 16;

/// The data of `ConnectService { name: "sysinfo" }`, encoded once per process.
fn connect_service() -> Result<&'static [u8], ClientError> {
    static ASK: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    if let Some(ask) = ASK.get() {
        return Ok(ask);
    }
    let ask = wire::to_bytes(&BootRequest::ConnectService { name: SYSINFO_SERVICE.to_owned() })
        .map_err(ClientError::Encode)?;
    Ok(ASK.get_or_init(|| ask))
}

/// Where the host transport listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP address such as `127.0.0.1:7461`.
    Tcp(String),
    /// A Unix socket path.
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The longest one request may take (channel set-up included).
    pub request_timeout: Duration,
    /// The largest reassembled reply accepted.
    pub max_response: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig { request_timeout: DEFAULT_REQUEST_TIMEOUT, max_response: DEFAULT_MAX_RESPONSE }
    }
}

/// What went wrong talking to the service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The transport could not be reached.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// Where we tried.
        endpoint: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A bad frame or a socket error.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A request could not be encoded.
    #[error("encoding: {0}")]
    Encode(WireError),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    ConnectionClosed,
    /// Init refused the service (`BootResponse::Error`).
    #[error("init refused service {service:?}: {message}")]
    Boot {
        /// The service asked for.
        service: String,
        /// Init's message, e.g. `unknown service`.
        message: String,
    },
    /// Init's reply did not decode.
    #[error("init's reply does not decode: {0}")]
    BootReply(WireError),
    /// Init said Ok but sent no channel.
    #[error("init answered Ok without a channel in caps[0]")]
    BootWithoutCap,
    /// Init answered something other than Ok or Error.
    #[error("unexpected reply from init: {0:?}")]
    UnexpectedBootReply(BootResponse),
    /// Init closed the boot channel.
    #[error("init closed the boot channel")]
    BootClosed,
    /// The service closed the channel without sending anything (its request deadline passed, or it went away).
    #[error("the service closed channel {channel} without a reply")]
    NoReply {
        /// The channel.
        channel: ChannelId,
    },
    /// The reply broke a limit.
    #[error(transparent)]
    Reassembly(#[from] ReassemblyError),
    /// The request took too long.
    #[error("no complete reply within {after:?}")]
    Timeout {
        /// The configured timeout.
        after: Duration,
    },
    /// Too many messages arrived on a channel nobody was reading.
    #[error("more than {max} messages queued on channel {channel}")]
    QueueOverflow {
        /// The channel.
        channel: ChannelId,
        /// [`MAX_QUEUE_DEPTH`].
        max: usize,
    },
    /// The channel is not one this client holds.
    #[error("channel {0} is not open")]
    NotOpen(ChannelId),
}

/// A complete answer to one command.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The command sent.
    pub command: SysinfoCommand,
    /// The reassembled text and how it ended.
    pub reply: Reply,
    /// The parsed text.
    pub report: Report,
}

/// The client's side of the transport: [`crate::HostCodec`], and before the first frame a check that the server
/// speaks the host transport at all ([`sniff`]), so that a client pointed at another protocol's port says so.
#[derive(Debug, Default)]
struct ClientCodec {
    started: bool,
}

/// How many of a foreign server's first bytes [`TransportError::OtherProtocol`] keeps.
const FIRST_BYTES_KEPT: usize = 24;

impl tokio_util::codec::Decoder for ClientCodec {
    type Item = Frame;
    type Error = TransportError;

    fn decode(&mut self, src: &mut bytes::BytesMut) -> Result<Option<Frame>, TransportError> {
        if !self.started {
            match sniff(src) {
                Some(false) => {
                    return Err(TransportError::OtherProtocol {
                        first: src[..src.len().min(FIRST_BYTES_KEPT)].to_vec(),
                    })
                }
                Some(true) => self.started = true,
                None => {}
            }
        }
        decode_frame(src)
    }

    fn decode_eof(&mut self, src: &mut bytes::BytesMut) -> Result<Option<Frame>, TransportError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(TransportError::Truncated { buffered: src.len() }),
        }
    }
}

impl tokio_util::codec::Encoder<Frame> for ClientCodec {
    type Error = TransportError;

    fn encode(&mut self, frame: Frame, dst: &mut bytes::BytesMut) -> Result<(), TransportError> {
        encode_frame(&frame, dst);
        Ok(())
    }
}

/// A byte stream the transport runs on (TCP or Unix).
pub trait HostStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> HostStream for T {}

/// One host-transport connection, i.e. one rvOS process with its boot channel.
pub struct Client {
    framed: Framed<Box<dyn HostStream>, ClientCodec>,
    config: ClientConfig,
    open: HashSet<ChannelId>,
    queued: HashMap<ChannelId, VecDeque<Message>>,
    peer_closed: HashSet<ChannelId>,
    /// Channels whose replies have ended and whose `CLOSE` goes out with the next write.
    owed_closes: Vec<ChannelId>,
    /// The room of a batch's list of open channels, kept between batches.
    opened: Vec<ChannelId>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Runs the transport over an already connected stream.
    pub fn new(stream: impl HostStream + 'static, config: ClientConfig) -> Self {
        let stream: Box<dyn HostStream> = Box::new(stream);
        Client {
            framed: {
                // Requests are a few dozen bytes: the write buffer grows to a batch's size, no more.
                // (`Framed::from_parts` would reserve tokio-util's 8 KiB for each buffer.)
                let mut framed = Framed::with_capacity(stream, ClientCodec::default(), IO_BUFFER);
                *framed.write_buffer_mut() = bytes::BytesMut::new();
                framed
            },
            config,
            open: HashSet::from([ChannelId::BOOT]),
            queued: HashMap::new(),
            peer_closed: HashSet::new(),
            owed_closes: Vec::new(),
            opened: Vec::new(),
        }
    }

    /// Connects to `endpoint` (within the request timeout).
    pub async fn connect(endpoint: &Endpoint, config: ClientConfig) -> Result<Self, ClientError> {
        Client::connect_with(endpoint, config, |stream| stream).await
    }

    /// Like [`Client::connect`], with the connection wrapped by `wrap` first (e.g. in a recording
    /// tap or a byte counter).
    pub async fn connect_with<S: HostStream + 'static>(
        endpoint: &Endpoint,
        config: ClientConfig,
        wrap: impl FnOnce(Box<dyn HostStream>) -> S,
    ) -> Result<Self, ClientError> {
        let fail = |source| ClientError::Connect { endpoint: endpoint.to_string(), source };
        let timeout = config.request_timeout;
        let stream: Box<dyn HostStream> = tokio::time::timeout(timeout, async {
            Ok::<Box<dyn HostStream>, std::io::Error>(match endpoint {
                Endpoint::Tcp(addr) => {
                    let s = tokio::net::TcpStream::connect(addr.as_str()).await?;
                    s.set_nodelay(true)?;
                    Box::new(s)
                }
                Endpoint::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            })
        })
        .await
        .map_err(|_| ClientError::Timeout { after: timeout })?
        .map_err(fail)?;
        Ok(Client::new(wrap(stream), config))
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Sends `message` on `channel` (which must be open).
    pub async fn send(&mut self, channel: ChannelId, message: Message) -> Result<(), ClientError> {
        if !self.open.contains(&channel) {
            return Err(ClientError::NotOpen(channel));
        }
        self.feed_owed_closes().await?;
        self.framed.send(Frame::Message { channel, message }).await?;
        Ok(())
    }

    /// Receives the next message on `channel`; `None` once the peer has closed it and its queue is drained.
    ///
    /// Messages for other open channels are queued (at most [`MAX_QUEUE_DEPTH`] each); messages for
    /// channels this client has closed are dropped, as the kernel drops them with the endpoint.
    pub async fn recv(&mut self, channel: ChannelId) -> Result<Option<Message>, ClientError> {
        if !self.open.contains(&channel) {
            return Err(ClientError::NotOpen(channel));
        }
        if let Some(m) = self.queued.get_mut(&channel).and_then(VecDeque::pop_front) {
            return Ok(Some(m));
        }
        if self.peer_closed.contains(&channel) {
            return Ok(None);
        }
        self.read_buffer();
        loop {
            match self.framed.next().await {
                None => return Err(ClientError::ConnectionClosed),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Frame::Message { channel: c, message })) if c == channel => return Ok(Some(message)),
                Some(Ok(Frame::Message { channel: c, message })) => self.enqueue(c, message)?,
                Some(Ok(Frame::Close { channel: c })) => {
                    if self.open.contains(&c) {
                        self.peer_closed.insert(c);
                    }
                    if c == channel {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Drops this client's end of `channel` (the peer sees it closed). Unknown channels are ignored.
    pub async fn close(&mut self, channel: ChannelId) -> Result<(), ClientError> {
        if self.forget(channel) {
            self.feed_owed_closes().await?;
            self.framed.send(Frame::Close { channel }).await?;
        }
        Ok(())
    }

    /// Asks init (boot channel 0) for a channel to `service`; the new channel arrives in `caps[0]`.
    pub async fn connect_service(&mut self, service: &str) -> Result<ChannelId, ClientError> {
        let request = BootRequest::ConnectService { name: service.to_owned() };
        self.send(ChannelId::BOOT, Message::encode(&request).map_err(ClientError::Encode)?).await?;
        let reply = self.recv(ChannelId::BOOT).await?.ok_or(ClientError::BootClosed)?;
        self.boot_reply(&reply, service)
    }

    /// Sends `command` on a new sysinfo channel and returns the reassembled, parsed reply.
    pub async fn request(&mut self, command: SysinfoCommand) -> Result<Response, ClientError> {
        let reply = self.request_raw(command.request()).await?;
        let report = Report::parse(command, &reply.text);
        Ok(Response { command, reply, report })
    }

    /// Sends raw request bytes (anything, even undecodable ones) on a new sysinfo channel and reassembles the
    /// reply, within the request timeout. The channel is closed afterwards, as rvOS clients do.
    pub async fn request_raw(&mut self, data: &[u8]) -> Result<Reply, ClientError> {
        let after = self.config.request_timeout;
        let mut channel = None;
        let result = tokio::time::timeout(after, async {
            let ch = self.connect_service(SYSINFO_SERVICE).await?;
            channel = Some(ch);
            let message = Message::with_data(data.to_vec()).map_err(ClientError::Encode)?;
            self.send(ch, message).await?;
            self.read_reply(ch).await
        })
        .await
        .unwrap_or(Err(ClientError::Timeout { after }));
        if let Some(ch) = channel {
            // Best effort: a server that stopped reading must not make closing hang.
            let _ = tokio::time::timeout(after, self.close(ch)).await;
        }
        self.idle();
        result
    }

    /// Sends every command of `commands` on its own new channel, pipelined, and returns the parsed replies
    /// in the order of `commands`.
    ///
    /// See [`Client::request_many_raw`] for how the requests travel and what the two levels of `Result`
    /// mean.
    pub async fn request_many(
        &mut self,
        commands: &[SysinfoCommand],
    ) -> Result<Vec<Result<Response, ClientError>>, ClientError> {
        let requests: Vec<&[u8]> = commands.iter().map(|c| c.request()).collect();
        let replies = self.request_many_raw(&requests).await?;
        Ok(commands
            .iter()
            .zip(replies)
            .map(|(&command, reply)| {
                reply.map(|reply| {
                    let report = Report::parse(command, &reply.text);
                    Response { command, reply, report }
                })
            })
            .collect())
    }

    /// Sends each of `requests` (raw request bytes) on its own new sysinfo channel, pipelined, and
    /// reassembles the replies; they come back in the order of `requests`.
    ///
    /// Instead of one round trip for the channel and one for the reply per request, a batch costs two:
    /// every `ConnectService` is written at once, then, once init has answered them all, every command;
    /// the replies are then told apart by their channel (the real service answers its queued
    /// connections one after the other; a sim may interleave them). At most [`MAX_PIPELINE`] channels
    /// are open at once: longer batches go in rounds. Each channel is closed once its reply has ended,
    /// as with [`Client::request_raw`]; those `CLOSE`s go out with the client's next write (the next
    /// batch's `ConnectService`s, or any other request or close), saving a write per batch.
    ///
    /// The outer `Err` is a failure of the connection (transport, the request timeout, which covers the
    /// whole batch, or init closing the boot channel): the connection is then in an unknown state. An
    /// inner `Err` concerns one request only (init refused the channel, the service closed it without a
    /// reply, the reply was too large).
    pub async fn request_many_raw(
        &mut self,
        requests: &[&[u8]],
    ) -> Result<Vec<Result<Reply, ClientError>>, ClientError> {
        let after = self.config.request_timeout;
        let mut opened = std::mem::take(&mut self.opened);
        let result = tokio::time::timeout(after, async {
            let mut replies = Vec::with_capacity(requests.len());
            for round in requests.chunks(MAX_PIPELINE) {
                replies.extend(self.pipeline(round, &mut opened).await?);
            }
            Ok(replies)
        })
        .await
        .unwrap_or(Err(ClientError::Timeout { after }));
        if !opened.is_empty() {
            // Best effort, as in `request_raw`: one write for all the closes still owed.
            let _ = tokio::time::timeout(after, self.close_all(&opened)).await;
            opened.clear();
        }
        self.opened = opened;
        self.idle();
        result
    }

    /// Gives the read buffer back between requests when it holds nothing: a host may poll many
    /// rvOS systems, each a second or more apart, and only those with a request in flight need one.
    /// [`Client::read_buffer`] gets it back on the next read.
    fn idle(&mut self) {
        if self.framed.read_buffer().is_empty() {
            *self.framed.read_buffer_mut() = bytes::BytesMut::new();
        }
    }

    /// A read buffer of [`IO_BUFFER`] bytes before the first read after [`Client::idle`] (tokio-util
    /// would grow an empty one from a few bytes, a read each).
    fn read_buffer(&mut self) {
        if self.framed.read_buffer().capacity() == 0 {
            self.framed.read_buffer_mut().reserve(IO_BUFFER);
        }
    }

    /// One round of [`Client::request_many_raw`]; the channels it opened and has not closed are in `opened`.
    async fn pipeline(
        &mut self,
        requests: &[&[u8]],
        opened: &mut Vec<ChannelId>,
    ) -> Result<Vec<Result<Reply, ClientError>>, ClientError> {
        if requests.iter().any(|data| data.len() > crate::MAX_MSG_SIZE) {
            return Err(ClientError::Encode(WireError::BufferOverflow { max: crate::MAX_MSG_SIZE }));
        }
        let ask = connect_service()?;
        self.feed_owed_closes().await?;
        // Written straight into the write buffer: no message is made for a frame.
        let buf = self.framed.write_buffer_mut();
        for _ in requests {
            encode_data_frame(ChannelId::BOOT, ask, buf).map_err(ClientError::Encode)?;
        }
        SinkExt::<Frame>::flush(&mut self.framed).await?;
        // Init answers in order, one reply per ConnectService.
        let mut slots: Vec<Result<(ChannelId, Reassembler), ClientError>> =
            Vec::with_capacity(requests.len());
        for _ in requests {
            let reply = self.recv(ChannelId::BOOT).await?.ok_or(ClientError::BootClosed)?;
            slots.push(self.boot_reply(&reply, SYSINFO_SERVICE).map(|ch| {
                opened.push(ch);
                (ch, Reassembler::new(self.config.max_response))
            }));
        }
        let buf = self.framed.write_buffer_mut();
        for (slot, data) in slots.iter().zip(requests) {
            if let Ok((channel, _)) = slot {
                encode_data_frame(*channel, data, buf).map_err(ClientError::Encode)?;
            }
        }
        SinkExt::<Frame>::flush(&mut self.framed).await?;
        let mut waiting = slots.iter().filter(|s| s.is_ok()).count();
        while waiting > 0 {
            let (channel, message) = self.recv_any(opened).await?;
            let Some(i) = slots.iter().position(|s| matches!(s, Ok((c, _)) if *c == channel)) else {
                continue;
            };
            let Ok((_, reassembler)) = &mut slots[i] else { continue };
            let done = match message {
                Some(chunk) => match reassembler.push_bytes(chunk.into_bytes()) {
                    Ok(done) => done,
                    Err(e) => {
                        slots[i] = Err(e.into());
                        true
                    }
                },
                None if reassembler.is_empty() => {
                    slots[i] = Err(ClientError::NoReply { channel });
                    true
                }
                None => {
                    reassembler.close();
                    true
                }
            };
            if done {
                waiting -= 1;
                // Its CLOSE goes out with the next write. Chunks still queued for it are dropped with it
                // (the kernel drops them with the endpoint).
                opened.retain(|&c| c != channel);
                self.owed_closes.push(channel);
                self.forget(channel);
            }
        }
        Ok(slots.into_iter().map(|s| s.map(|(_, r)| r.finish())).collect())
    }

    /// Queues the `CLOSE`s owed for ended replies in front of the next write (not flushed).
    async fn feed_owed_closes(&mut self) -> Result<(), ClientError> {
        let mut closes = std::mem::take(&mut self.owed_closes);
        for &channel in &closes {
            self.framed.feed(Frame::Close { channel }).await?;
        }
        // Its room is kept for the next batch's.
        closes.clear();
        self.owed_closes = closes;
        Ok(())
    }

    /// Stops tracking `channel` without telling the peer yet (see [`Client::close_all`]).
    fn forget(&mut self, channel: ChannelId) -> bool {
        self.queued.remove(&channel);
        self.peer_closed.remove(&channel);
        self.open.remove(&channel)
    }

    /// Closes `channels` in one write (each one not open any more is still told to the peer, once).
    async fn close_all(&mut self, channels: &[ChannelId]) -> Result<(), ClientError> {
        self.feed_owed_closes().await?;
        for &channel in channels {
            self.forget(channel);
            self.framed.feed(Frame::Close { channel }).await?;
        }
        SinkExt::<Frame>::flush(&mut self.framed).await?;
        Ok(())
    }

    /// The next message (or `None`: closed) on any of `channels`, which must be open.
    async fn recv_any(
        &mut self,
        channels: &[ChannelId],
    ) -> Result<(ChannelId, Option<Message>), ClientError> {
        for &channel in channels {
            if !self.open.contains(&channel) {
                continue;
            }
            if let Some(m) = self.queued.get_mut(&channel).and_then(VecDeque::pop_front) {
                return Ok((channel, Some(m)));
            }
            if self.peer_closed.contains(&channel) {
                return Ok((channel, None));
            }
        }
        self.read_buffer();
        loop {
            match self.framed.next().await {
                None => return Err(ClientError::ConnectionClosed),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Frame::Message { channel, message })) => {
                    if channels.contains(&channel) && self.open.contains(&channel) {
                        return Ok((channel, Some(message)));
                    }
                    self.enqueue(channel, message)?;
                }
                Some(Ok(Frame::Close { channel })) => {
                    if self.open.contains(&channel) {
                        if channels.contains(&channel) {
                            return Ok((channel, None));
                        }
                        self.peer_closed.insert(channel);
                    }
                }
            }
        }
    }

    /// Keeps `message` for a later `recv` on its channel, or drops it if the channel is not ours.
    fn enqueue(&mut self, channel: ChannelId, mut message: Message) -> Result<(), ClientError> {
        if self.open.contains(&channel) {
            let q = self.queued.entry(channel).or_default();
            if q.len() >= MAX_QUEUE_DEPTH {
                return Err(ClientError::QueueOverflow { channel, max: MAX_QUEUE_DEPTH });
            }
            message.detach();
            q.push_back(message);
        } else {
            tracing::debug!(%channel, "dropping a message for a channel we closed");
        }
        Ok(())
    }

    /// The channel in init's reply to `ConnectService`, now open, or why there is none.
    fn boot_reply(&mut self, reply: &Message, service: &str) -> Result<ChannelId, ClientError> {
        match reply.decode::<BootResponse>().map_err(ClientError::BootReply)? {
            BootResponse::Ok => {
                let channel = *reply.caps().first().ok_or(ClientError::BootWithoutCap)?;
                self.open.insert(channel);
                Ok(channel)
            }
            BootResponse::Error { message } => {
                Err(ClientError::Boot { service: service.to_owned(), message })
            }
            other => Err(ClientError::UnexpectedBootReply(other)),
        }
    }

    /// Reads chunks on `channel` until the sentinel or until the channel is closed.
    pub async fn read_reply(&mut self, channel: ChannelId) -> Result<Reply, ClientError> {
        let mut reassembler = Reassembler::new(self.config.max_response);
        loop {
            match self.recv(channel).await? {
                Some(chunk) => {
                    if reassembler.push_bytes(chunk.into_bytes())? {
                        break;
                    }
                }
                None if reassembler.is_empty() => return Err(ClientError::NoReply { channel }),
                None => {
                    reassembler.close();
                    break;
                }
            }
        }
        Ok(reassembler.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reassembly::End;
    use crate::tokio_codec::HostCodec;
    use crate::wire::MAX_MSG_SIZE;

    /// The server's end of a pipe, driven by hand.
    type Peer = Framed<tokio::io::DuplexStream, HostCodec>;

    fn pipe() -> (Client, Peer) {
        let (a, b) = tokio::io::duplex(1 << 16);
        (Client::new(a, ClientConfig::default()), Framed::new(b, HostCodec))
    }

    /// Issue 45: a client pointed at another protocol's port said `unknown frame kind 0`.
    #[tokio::test]
    async fn a_server_of_another_protocol_is_named_as_such() {
        use tokio::io::AsyncWriteExt;
        let hmon = b"\0\0\0\x1bHMONSupportedProtocols=2";
        let (a, mut b) = tokio::io::duplex(1 << 16);
        b.write_all(hmon).await.unwrap();
        let mut client = Client::new(a, ClientConfig::default());
        let err = client.request(SysinfoCommand::Ps).await.unwrap_err();
        let ClientError::Transport(TransportError::OtherProtocol { first }) = &err else { panic!("{err}") };
        assert_eq!(first[..], hmon[..24]);
        assert_eq!(
            err.to_string(),
            r#"not an rvOS sysinfo host transport: the peer began with "\x00\x00\x00\x1bHMONSupportedProtoco""#
        );
        // Only the first frame is looked at: a bad frame later is a bad frame.
        let (mut client, mut peer) = pipe();
        let asked = tokio::spawn(async move { client.request(SysinfoCommand::Ps).await });
        let _request = peer.next().await.unwrap().unwrap();
        let mut ok = Message::encode(&BootResponse::Ok).unwrap();
        ok.push_cap(ChannelId(5)).unwrap();
        peer.send(Frame::Message { channel: ChannelId::BOOT, message: ok }).await.unwrap();
        peer.get_mut().write_all(&[9]).await.unwrap();
        let err = asked.await.unwrap().unwrap_err();
        assert!(matches!(err, ClientError::Transport(TransportError::UnknownKind(9))), "{err}");
    }

    #[tokio::test]
    async fn a_new_client_holds_a_small_read_buffer_and_no_write_buffer() {
        let (client, _peer) = pipe();
        assert_eq!(client.framed.read_buffer().capacity(), IO_BUFFER);
        assert_eq!(client.framed.write_buffer().capacity(), 0);
    }

    #[tokio::test]
    async fn an_idle_client_holds_no_read_buffer_and_reads_whole_buffers_again() {
        let (mut client, mut peer) = pipe();
        let long = vec![b'x'; MAX_MSG_SIZE];
        let server = tokio::spawn(async move {
            for n in [5u32, 6] {
                if n == 6 {
                    // The first batch's close goes out with the second batch.
                    assert!(matches!(peer.next().await, Some(Ok(Frame::Close { channel: ChannelId(5) }))));
                }
                message_on(&mut peer).await;
                let mut ok = Message::encode(&BootResponse::Ok).unwrap();
                ok.push_cap(ChannelId(n)).unwrap();
                peer.send(Frame::Message { channel: ChannelId::BOOT, message: ok }).await.unwrap();
                message_on(&mut peer).await;
                for _ in 0..3 {
                    send(&mut peer, ChannelId(n), &long).await;
                }
                send(&mut peer, ChannelId(n), b"").await;
            }
        });
        for _ in 0..2 {
            let replies = client.request_many_raw(&[&[0x04]]).await.unwrap();
            assert_eq!(replies[0].as_ref().unwrap().text.len(), 3 * MAX_MSG_SIZE);
            assert_eq!(client.framed.read_buffer().capacity(), 0, "given back after the batch");
        }
        server.await.unwrap();
        // The next read starts with a whole buffer, not tokio-util's few bytes.
        client.read_buffer();
        assert_eq!(client.framed.read_buffer().capacity(), IO_BUFFER);
    }

    async fn message_on(peer: &mut Peer) -> (ChannelId, Message) {
        match peer.next().await {
            Some(Ok(Frame::Message { channel, message })) => (channel, message),
            other => panic!("{other:?}"),
        }
    }

    async fn send(peer: &mut Peer, channel: ChannelId, data: &[u8]) {
        let message = Message::with_data(data.to_vec()).unwrap();
        peer.send(Frame::Message { channel, message }).await.unwrap();
    }

    #[tokio::test]
    async fn replies_interleaved_and_out_of_order_are_told_apart_by_channel() {
        let (mut client, mut peer) = pipe();
        let server = tokio::spawn(async move {
            // Both ConnectService requests come before any command.
            for n in [7u32, 9] {
                let (channel, m) = message_on(&mut peer).await;
                assert_eq!(channel, ChannelId::BOOT);
                assert_eq!(m.data(), b"\x00\x07\x00sysinfo");
                let mut ok = Message::encode(&BootResponse::Ok).unwrap();
                ok.push_cap(ChannelId(n)).unwrap();
                peer.send(Frame::Message { channel: ChannelId::BOOT, message: ok }).await.unwrap();
            }
            assert_eq!(message_on(&mut peer).await, (ChannelId(7), Message::with_data(vec![0x04]).unwrap()));
            assert_eq!(message_on(&mut peer).await, (ChannelId(9), Message::with_data(vec![0x08]).unwrap()));
            // The second reply starts first, the first one's chunks come in between, and the first one
            // ends with a close instead of the sentinel.
            let long = vec![b'x'; MAX_MSG_SIZE];
            send(&mut peer, ChannelId(9), b"Watchdog: ").await;
            send(&mut peer, ChannelId(7), &long).await;
            send(&mut peer, ChannelId(9), b"disabled\n").await;
            send(&mut peer, ChannelId(7), b"y\n").await;
            send(&mut peer, ChannelId(9), b"").await;
            peer.send(Frame::Close { channel: ChannelId(7) }).await.unwrap();
            // The client closes both channels once their replies have ended, with its next write.
            let mut closed = Vec::new();
            for _ in 0..2 {
                match peer.next().await {
                    Some(Ok(Frame::Close { channel })) => closed.push(channel),
                    other => panic!("{other:?}"),
                }
            }
            closed.sort_by_key(|c| c.0);
            assert_eq!(closed, [ChannelId(7), ChannelId(9)]);
            assert_eq!(message_on(&mut peer).await.0, ChannelId::BOOT, "then the next batch");
        });
        let replies = client.request_many_raw(&[&[0x04], &[0x08]]).await.unwrap();
        assert_eq!(client.owed_closes.len(), 2, "not written yet");
        let first = replies[0].as_ref().unwrap();
        assert_eq!((first.text.len(), first.end, first.chunks), (MAX_MSG_SIZE + 2, End::Closed, 2));
        let second = replies[1].as_ref().unwrap();
        assert_eq!((second.text.as_str(), second.end), ("Watchdog: disabled\n", End::Sentinel));
        assert!(client.open.len() == 1 && client.queued.is_empty(), "only the boot channel is left");
        // The next batch writes the closes first; the peer then goes away.
        assert!(client.request_many_raw(&[&[0x00]]).await.is_err());
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_channel_closed_without_a_reply_fails_alone_and_init_closing_fails_the_batch() {
        let (mut client, mut peer) = pipe();
        let server = tokio::spawn(async move {
            for n in [3u32, 4] {
                message_on(&mut peer).await;
                let mut ok = Message::encode(&BootResponse::Ok).unwrap();
                ok.push_cap(ChannelId(n)).unwrap();
                peer.send(Frame::Message { channel: ChannelId::BOOT, message: ok }).await.unwrap();
            }
            message_on(&mut peer).await;
            message_on(&mut peer).await;
            peer.send(Frame::Close { channel: ChannelId(3) }).await.unwrap();
            send(&mut peer, ChannelId(4), b"ok\n").await;
            send(&mut peer, ChannelId(4), b"").await;
            // The next batch, after the two closes: init goes away.
            for _ in 0..2 {
                assert!(matches!(peer.next().await, Some(Ok(Frame::Close { .. }))));
            }
            message_on(&mut peer).await;
            peer.send(Frame::Close { channel: ChannelId::BOOT }).await.unwrap();
            peer
        });
        let replies = client.request_many_raw(&[&[0x00], &[0x03]]).await.unwrap();
        assert!(matches!(replies[0], Err(ClientError::NoReply { channel: ChannelId(3) })), "{replies:?}");
        assert_eq!(replies[1].as_ref().unwrap().text, "ok\n");
        assert!(matches!(client.request_many_raw(&[&[0x00]]).await, Err(ClientError::BootClosed)));
        drop(server.await.unwrap());
    }
}
