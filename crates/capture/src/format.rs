//! The pcapng constants this crate writes and reads, and the typed pieces of a recording.
//!
//! Block and option codes are pcapng's (draft-ietf-opsawg-pcapng); the link types are the private-use
//! range `LINKTYPE_USER0..15` (147..162), one per protocol.

/// Section Header Block.
pub const BLOCK_SECTION_HEADER: u32 = 0x0A0D_0D0A;
/// Interface Description Block.
pub const BLOCK_INTERFACE: u32 = 0x0000_0001;
/// Enhanced Packet Block.
pub const BLOCK_ENHANCED_PACKET: u32 = 0x0000_0006;
/// The Section Header's byte-order magic, as written in the section's own byte order.
pub const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

/// `opt_endofopt`.
pub const OPT_END: u16 = 0;
/// `opt_comment` (any block).
pub const OPT_COMMENT: u16 = 1;
/// `shb_userappl`: the application that wrote the section (`telemon 0.1.0`).
pub const OPT_SHB_USERAPPL: u16 = 4;
/// `if_name`: the target's name.
pub const OPT_IF_NAME: u16 = 2;
/// `if_description`: the target's address.
pub const OPT_IF_DESCRIPTION: u16 = 3;
/// `if_tsresol`: the timestamp resolution; this crate writes 9 (nanoseconds).
pub const OPT_IF_TSRESOL: u16 = 9;
/// `epb_flags`: bits 0-1 are the direction (1 inbound, 2 outbound).
pub const OPT_EPB_FLAGS: u16 = 2;
/// `epb_dropcount`: records lost on this interface since its previous record.
pub const OPT_EPB_DROPCOUNT: u16 = 4;

/// The `opt_comment` of a zero-length packet that marks a connection's start.
pub const MARK_OPEN: &str = "telemon: connected";
/// The `opt_comment` of a zero-length packet that marks a connection's end.
pub const MARK_CLOSE: &str = "telemon: closed";
/// The `opt_comment` of a zero-length packet that marks the peer's end of the connection (a read
/// returned end of file), before the connection's own [`MARK_CLOSE`].
pub const MARK_PEER_CLOSED: &str = "telemon: peer closed";

/// The lowest private-use link type (`LINKTYPE_USER0`).
pub const LINKTYPE_USER0: u16 = 147;

/// The link types telemon assigns to its protocols, in the private-use range (`LINKTYPE_USER0..15`,
/// 147..162), as docs/recordings.md and the Wireshark dissectors list them. The crate itself gives them no
/// meaning: which protocol a link type is, and how it replays, is the reader's to know (telemon asks its
/// registry of protocols). A new protocol takes the next free one.
pub mod link_type {
    use super::LINKTYPE_USER0;

    /// System/161's meter socket.
    pub const METER161: u16 = LINKTYPE_USER0;
    /// Dyalog APL's Health Monitor.
    pub const HMON: u16 = LINKTYPE_USER0 + 1;
    /// The Mono counters agent.
    pub const MONO: u16 = LINKTYPE_USER0 + 2;
    /// Tino's smon stream.
    pub const SMON: u16 = LINKTYPE_USER0 + 3;
    /// rvOS sysinfo over the host transport.
    pub const SYSINFO: u16 = LINKTYPE_USER0 + 4;
}

/// What a recording says about one target: one pcapng interface.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The target's name (`if_name`).
    pub name: String,
    /// The interface's link type: which protocol its bytes are (see [`link_type`]).
    pub link_type: u16,
    /// Where it was reached: a socket path, `host:port`, a file (`if_description`).
    pub address: String,
}

impl Target {
    /// A target named `name` whose bytes are `link_type`, at `address`.
    pub fn new(name: impl Into<String>, link_type: u16, address: impl Into<String>) -> Self {
        Target { name: name.into(), link_type, address: address.into() }
    }
}

/// Which way recorded bytes went, seen from the recording side (telemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Read from the peer (`epb_flags` direction 1).
    Inbound,
    /// Written to the peer (`epb_flags` direction 2).
    Outbound,
}

impl Direction {
    /// The `epb_flags` word of a packet going this way.
    pub fn flags(self) -> u32 {
        match self {
            Direction::Inbound => 1,
            Direction::Outbound => 2,
        }
    }
}

/// What one Enhanced Packet Block holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKind {
    /// A connection to the target started (a zero-length packet commented [`MARK_OPEN`]).
    Open,
    /// One read (inbound) or one write (outbound): the bytes as they crossed the connection.
    Data {
        /// Which way.
        direction: Direction,
        /// The raw bytes.
        bytes: Vec<u8>,
    },
    /// The peer closed its side: a read returned end of file (a zero-length packet commented
    /// [`MARK_PEER_CLOSED`]). Recordings made before this mark existed never hold it.
    PeerClosed,
    /// The connection ended (a zero-length packet commented [`MARK_CLOSE`]).
    Close,
    /// A packet this crate did not write (no direction, or another tool's): its bytes.
    Other(Vec<u8>),
}

/// One Enhanced Packet Block: what happened on one interface, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The interface (index among the section's Interface Description Blocks).
    pub interface: u32,
    /// Nanoseconds since the Unix epoch: the section's wall-clock anchor plus a monotonic offset.
    pub time_ns: u64,
    /// Records of this interface lost (not written) since its previous record (`epb_dropcount`).
    pub dropped: u64,
    /// What it holds.
    pub kind: RecordKind,
}
