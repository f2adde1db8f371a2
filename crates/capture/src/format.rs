//! The pcapng constants this crate writes and reads, and the typed pieces of a recording.
//!
//! Block and option codes are pcapng's (draft-ietf-opsawg-pcapng); the link types are the private-use
//! range `LINKTYPE_USER0..15` (147..162), one per protocol.

use std::fmt;

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

/// The protocol a target speaks, and so the link type of its interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// System/161's meter socket (`LINKTYPE_USER0`, 147).
    Meter161,
    /// Dyalog APL's Health Monitor (`LINKTYPE_USER1`, 148).
    Hmon,
    /// The Mono counters agent (`LINKTYPE_USER2`, 149).
    Mono,
    /// Tino's smon stream (`LINKTYPE_USER3`, 150).
    Smon,
    /// rvOS sysinfo over the host transport (`LINKTYPE_USER4`, 151).
    Sysinfo,
    /// Any other link type (a file written by another tool): kept, not understood.
    Other(u16),
}

impl Protocol {
    /// The five protocols telemon records.
    pub const ALL: [Protocol; 5] =
        [Protocol::Meter161, Protocol::Hmon, Protocol::Mono, Protocol::Smon, Protocol::Sysinfo];

    /// The pcapng link type of an interface speaking this protocol.
    pub fn link_type(self) -> u16 {
        match self {
            Protocol::Meter161 => LINKTYPE_USER0,
            Protocol::Hmon => LINKTYPE_USER0 + 1,
            Protocol::Mono => LINKTYPE_USER0 + 2,
            Protocol::Smon => LINKTYPE_USER0 + 3,
            Protocol::Sysinfo => LINKTYPE_USER0 + 4,
            Protocol::Other(link) => link,
        }
    }

    /// The protocol of a link type.
    pub fn from_link_type(link: u16) -> Protocol {
        Protocol::ALL.into_iter().find(|p| p.link_type() == link).unwrap_or(Protocol::Other(link))
    }

    /// The protocol's name as telemon's subcommands spell it (`meter161`, `hmon`, `mono`, `smon`, `sysinfo`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Meter161 => "meter161",
            Protocol::Hmon => "hmon",
            Protocol::Mono => "mono",
            Protocol::Smon => "smon",
            Protocol::Sysinfo => "sysinfo",
            Protocol::Other(_) => "other",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protocol::Other(link) => write!(f, "linktype {link}"),
            p => f.write_str(p.name()),
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown protocol {s:?} (meter161, hmon, mono, smon, sysinfo)"))
    }
}

/// What a recording says about one target: one pcapng interface.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The target's name (`if_name`).
    pub name: String,
    /// Its protocol (the interface's link type).
    pub protocol: Protocol,
    /// Where it was reached: a socket path, `host:port`, a file (`if_description`).
    pub address: String,
}

impl Target {
    /// A target named `name` speaking `protocol` at `address`.
    pub fn new(name: impl Into<String>, protocol: Protocol, address: impl Into<String>) -> Self {
        Target { name: name.into(), protocol, address: address.into() }
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
