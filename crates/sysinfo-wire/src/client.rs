//! The async client: `ConnectService("sysinfo")` on the boot channel, one command per new channel, and the
//! chunked reply reassembled and parsed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::Framed;

use crate::message::{BootRequest, BootResponse, ChannelId, Message, SysinfoCommand, SYSINFO_SERVICE};
use crate::reassembly::{Reassembler, ReassemblyError, Reply, DEFAULT_MAX_RESPONSE};
use crate::report::Report;
use crate::transport::{Frame, HostCodec, TransportError};
use crate::wire::{self, WireError};

/// Where `rvos-sim` listens and `telemon sysinfo` connects by default (TCP, loopback).
pub const DEFAULT_ADDR: &str = "127.0.0.1:7461";

/// The default time one request may take, from asking init for a channel to the sentinel.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How many messages may wait on a channel nobody is reading (the rvOS queue depth, `MAX_QUEUE_DEPTH`).
pub const MAX_QUEUE_DEPTH: usize = 64;

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

/// A byte stream the transport runs on (TCP or Unix).
pub trait HostStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> HostStream for T {}

/// One host-transport connection, i.e. one rvOS process with its boot channel.
pub struct Client {
    framed: Framed<Box<dyn HostStream>, HostCodec>,
    config: ClientConfig,
    open: HashSet<ChannelId>,
    queued: HashMap<ChannelId, VecDeque<Message>>,
    peer_closed: HashSet<ChannelId>,
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
            framed: Framed::new(stream, HostCodec),
            config,
            open: HashSet::from([ChannelId::BOOT]),
            queued: HashMap::new(),
            peer_closed: HashSet::new(),
        }
    }

    /// Connects to `endpoint` (within the request timeout).
    pub async fn connect(endpoint: &Endpoint, config: ClientConfig) -> Result<Self, ClientError> {
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
        Ok(Client::new(stream, config))
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
        loop {
            match self.framed.next().await {
                None => return Err(ClientError::ConnectionClosed),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Frame::Message { channel: c, message })) if c == channel => return Ok(Some(message)),
                Some(Ok(Frame::Message { channel: c, message })) => {
                    if self.open.contains(&c) {
                        let q = self.queued.entry(c).or_default();
                        if q.len() >= MAX_QUEUE_DEPTH {
                            return Err(ClientError::QueueOverflow { channel: c, max: MAX_QUEUE_DEPTH });
                        }
                        q.push_back(message);
                    } else {
                        tracing::debug!(channel = %c, "dropping a message for a channel we closed");
                    }
                }
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
        if self.open.remove(&channel) {
            self.queued.remove(&channel);
            self.peer_closed.remove(&channel);
            self.framed.send(Frame::Close { channel }).await?;
        }
        Ok(())
    }

    /// Asks init (boot channel 0) for a channel to `service`; the new channel arrives in `caps[0]`.
    pub async fn connect_service(&mut self, service: &str) -> Result<ChannelId, ClientError> {
        let request = BootRequest::ConnectService { name: service.to_owned() };
        self.send(ChannelId::BOOT, Message::encode(&request).map_err(ClientError::Encode)?).await?;
        let reply = self.recv(ChannelId::BOOT).await?.ok_or(ClientError::BootClosed)?;
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

    /// Sends `command` on a new sysinfo channel and returns the reassembled, parsed reply.
    pub async fn request(&mut self, command: SysinfoCommand) -> Result<Response, ClientError> {
        let data = wire::to_bytes(&command).map_err(ClientError::Encode)?;
        let reply = self.request_raw(&data).await?;
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
        result
    }

    /// Reads chunks on `channel` until the sentinel or until the channel is closed.
    pub async fn read_reply(&mut self, channel: ChannelId) -> Result<Reply, ClientError> {
        let mut reassembler = Reassembler::new(self.config.max_response);
        loop {
            match self.recv(channel).await? {
                Some(chunk) => {
                    if reassembler.push_owned(chunk.into_data())? {
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
