//! The typed messages: sysinfo commands, the boot channel's requests and replies, and rvOS's `Message`.

#[allow(unused_imports)]
use crate::prelude::*;
use crate::wire::{Reader, Wire, WireBytes, WireError, Writer, MAX_MSG_SIZE};
use bytes::Bytes;

/// At most this many capabilities travel in one message (`MAX_CAPS`).
pub const MAX_CAPS: usize = 4;

/// The name the init server knows the sysinfo service by.
pub const SYSINFO_SERVICE: &str = "sysinfo";

/// The exact reply to any request that does not decode (raw text, not wire format).
pub const UNKNOWN_COMMAND_TEXT: &str = "Unknown command\n";

/// One command to the sysinfo service (`rvos_proto::sysinfo::SysinfoCommand`): a one-byte tag, no fields.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SysinfoCommand {
    /// The process table.
    Ps = 0,
    /// Kernel heap and per-process memory.
    Memstat = 1,
    /// The trace ring, oldest first.
    Trace = 2,
    /// Clears the trace ring; replies `ok`.
    TraceClear = 3,
    /// The 18 kernel counters.
    Kstat = 4,
    /// Per-channel statistics.
    Channels = 5,
    /// The scheduler run-queue latency histogram.
    SchedLatency = 6,
    /// The IPC delivery latency histogram.
    IpcLatency = 7,
    /// The watchdog's status (the ninth command, missing from the spec text).
    Watchdog = 8,
}

impl SysinfoCommand {
    /// Every command, in tag order.
    pub const ALL: [SysinfoCommand; 9] = [
        SysinfoCommand::Ps,
        SysinfoCommand::Memstat,
        SysinfoCommand::Trace,
        SysinfoCommand::TraceClear,
        SysinfoCommand::Kstat,
        SysinfoCommand::Channels,
        SysinfoCommand::SchedLatency,
        SysinfoCommand::IpcLatency,
        SysinfoCommand::Watchdog,
    ];

    /// The wire tag.
    pub fn tag(self) -> u8 {
        self as u8
    }

    /// The command's wire encoding (its tag alone), as the data of a request: what
    /// `Message::encode(&command)` carries, with nothing made.
    pub fn request(self) -> &'static [u8] {
        const TAGS: [u8; 9] = [0, 1, 2, 3, 4, 5, 6, 7, 8];
        core::slice::from_ref(&TAGS[usize::from(self.tag())])
    }

    /// The command with this tag.
    pub fn from_tag(tag: u8) -> Result<Self, WireError> {
        Self::ALL.get(usize::from(tag)).copied().ok_or(WireError::InvalidTag(tag))
    }
}

impl Wire for SysinfoCommand {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        w.put(&[self.tag()])
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Self::from_tag(u8::decode(r)?)
    }
}

/// A request on the boot channel, handle 0 (`rvos_proto::boot::BootRequest`).
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootRequest {
    /// Tag 0: connect to a named service; the reply carries a new channel in `caps[0]`.
    ConnectService {
        /// The service's name, e.g. [`SYSINFO_SERVICE`].
        name: String,
    },
    /// Tag 1: spawn a program.
    Spawn {
        /// The program's path.
        path: String,
        /// Its arguments, as bytes.
        args: WireBytes,
        /// Namespace overrides, as bytes.
        ns_overrides: WireBytes,
        /// Start suspended.
        suspended: bool,
    },
    /// Tag 2: ask for this process's arguments.
    GetArgs,
}

impl Wire for BootRequest {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        match self {
            BootRequest::ConnectService { name } => {
                w.put(&[0])?;
                name.encode(w)
            }
            BootRequest::Spawn { path, args, ns_overrides, suspended } => {
                w.put(&[1])?;
                path.encode(w)?;
                args.encode(w)?;
                ns_overrides.encode(w)?;
                suspended.encode(w)
            }
            BootRequest::GetArgs => w.put(&[2]),
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        match u8::decode(r)? {
            0 => Ok(BootRequest::ConnectService { name: String::decode(r)? }),
            1 => Ok(BootRequest::Spawn {
                path: String::decode(r)?,
                args: WireBytes::decode(r)?,
                ns_overrides: WireBytes::decode(r)?,
                suspended: bool::decode(r)?,
            }),
            2 => Ok(BootRequest::GetArgs),
            t => Err(WireError::InvalidTag(t)),
        }
    }
}

/// A reply on the boot channel (`rvos_proto::boot::BootResponse`).
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootResponse {
    /// Tag 0: success; for `ConnectService` the new channel travels in `caps[0]`.
    Ok,
    /// Tag 1: failure, with one of [`BOOT_ERRORS`].
    Error {
        /// What went wrong.
        message: String,
    },
    /// Tag 2: the arguments asked for by `GetArgs`.
    Args {
        /// The arguments, as bytes.
        args: WireBytes,
    },
}

/// The messages init's `BootResponse::Error` carries. The last two come from init's console paths (a program
/// that asks for its console before the console server registered, or when it has none), not from the
/// protocol text.
pub const BOOT_ERRORS: [&str; 7] = [
    "unknown service",
    "service not ready",
    "no channels",
    "bad request",
    "use stdin/stdout",
    "console not ready",
    "no console",
];

impl Wire for BootResponse {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        match self {
            BootResponse::Ok => w.put(&[0]),
            BootResponse::Error { message } => {
                w.put(&[1])?;
                message.encode(w)
            }
            BootResponse::Args { args } => {
                w.put(&[2])?;
                args.encode(w)
            }
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        match u8::decode(r)? {
            0 => Ok(BootResponse::Ok),
            1 => Ok(BootResponse::Error { message: String::decode(r)? }),
            2 => Ok(BootResponse::Args { args: WireBytes::decode(r)? }),
            t => Err(WireError::InvalidTag(t)),
        }
    }
}

/// What init sends a service's control endpoint with the server end of a new client channel in `caps[0]`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewConnection {
    /// The client's pid.
    pub client_pid: u32,
    /// The role of the channel (0 for a plain service connection).
    pub channel_role: u8,
}

impl Wire for NewConnection {
    fn encode(&self, w: &mut Writer) -> Result<(), WireError> {
        self.client_pid.encode(w)?;
        self.channel_role.encode(w)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(NewConnection { client_pid: u32::decode(r)?, channel_role: u8::decode(r)? })
    }
}

/// A channel handle on the host transport (rvOS's handle numbers). Handle 0 is the boot channel.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u32);

impl ChannelId {
    /// The boot channel every process starts with, to the init server.
    pub const BOOT: ChannelId = ChannelId(0);
}

impl core::fmt::Display for ChannelId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// One rvOS IPC message: up to [`MAX_MSG_SIZE`] data bytes, the sender's pid and up to [`MAX_CAPS`] caps.
///
/// The kernel overwrites `sender_pid` on send; on the host transport the server does the same. A
/// zero-length message is the end-of-response sentinel of the sysinfo service.
///
/// A decoded message's data shares the connection's read buffer (no copy and no allocation per
/// message) and its caps are held inline: keep [`Message::data`] only as long as needed, or copy
/// it out ([`Message::into_data`] does when the buffer is shared).
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    data: Bytes,
    sender_pid: u64,
    /// `caps[..cap_count]`; the rest are `ChannelId(0)`, so the derived comparisons hold.
    caps: [ChannelId; MAX_CAPS],
    cap_count: u8,
}

impl Default for Message {
    fn default() -> Self {
        Message { data: Bytes::new(), sender_pid: 0, caps: [ChannelId(0); MAX_CAPS], cap_count: 0 }
    }
}

impl core::fmt::Debug for Message {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Message")
            .field("data", &self.data)
            .field("sender_pid", &self.sender_pid)
            .field("caps", &self.caps())
            .finish()
    }
}

impl Message {
    /// An empty message: len 0, pid 0, no caps (`Message::new()`; a sentinel once the pid is set).
    pub fn new() -> Self {
        Self::default()
    }

    /// A message carrying `data`, refused when longer than [`MAX_MSG_SIZE`].
    pub fn with_data(data: impl Into<Vec<u8>>) -> Result<Self, WireError> {
        Self::with_bytes(Bytes::from(data.into()))
    }

    /// [`Message::with_data`] for data already in a [`Bytes`] (kept, not copied).
    pub fn with_bytes(data: Bytes) -> Result<Self, WireError> {
        if data.len() > MAX_MSG_SIZE {
            return Err(WireError::BufferOverflow { max: MAX_MSG_SIZE });
        }
        Ok(Message { data, ..Self::default() })
    }

    /// Gives the data an allocation of its own: a message kept for later must not hold on to the
    /// whole read buffer it was decoded from.
    #[cfg(feature = "client")]
    pub(crate) fn detach(&mut self) {
        if !self.data.is_empty() {
            self.data = Bytes::copy_from_slice(&self.data);
        }
    }

    /// A message carrying the wire encoding of `value`.
    pub fn encode<T: Wire>(value: &T) -> Result<Self, WireError> {
        Self::with_data(crate::wire::to_bytes(value)?)
    }

    /// Decodes the data as `T` (trailing bytes ignored, as rvOS does).
    pub fn decode<T: Wire>(&self) -> Result<T, WireError> {
        crate::wire::from_bytes(&self.data)
    }

    /// Sets the sender's pid.
    pub fn with_sender(mut self, pid: u64) -> Self {
        self.sender_pid = pid;
        self
    }

    /// Adds a capability; more than [`MAX_CAPS`] is [`WireError::CapOverflow`].
    pub fn push_cap(&mut self, cap: ChannelId) -> Result<(), WireError> {
        let Some(slot) = self.caps.get_mut(usize::from(self.cap_count)) else {
            return Err(WireError::CapOverflow { max: MAX_CAPS });
        };
        *slot = cap;
        self.cap_count += 1;
        Ok(())
    }

    /// The data bytes (`data[..len]`).
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// `len`: how many data bytes there are.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether this is a zero-length message (the sysinfo sentinel).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The sender's pid, as the kernel (or host server) stamped it.
    pub fn sender_pid(&self) -> u64 {
        self.sender_pid
    }

    /// The capabilities (`caps[..cap_count]`).
    pub fn caps(&self) -> &[ChannelId] {
        &self.caps[..usize::from(self.cap_count)]
    }

    /// Takes the data out (copied when it shares a buffer, see [`Message`]).
    pub fn into_data(self) -> Vec<u8> {
        self.data.into()
    }

    /// The data as [`Bytes`] (no copy).
    pub fn into_bytes(self) -> Bytes {
        self.data
    }
}
