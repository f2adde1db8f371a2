//! Decoding: a sans-IO [`Reader`] that takes the bytes it has and says how many it used, a
//! [`FileReader`] over any `std::io::Read`, and [`Capture`], a whole recording in memory with the warning
//! that ended it early, if any.

use std::io::Read;
use std::path::Path;

use byteorder::{BigEndian, ByteOrder, LittleEndian};

use crate::format::*;

/// Bounds on what a recording may make the reader hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest block accepted (checked on its length field, before waiting for its body).
    pub max_block: u32,
    /// The most interfaces in one section.
    pub max_interfaces: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // A record holds at most 64 KiB of data (the writer splits longer reads); other tools' blocks may be
        // larger, up to 1 MiB.
        Limits { max_block: 1 << 20, max_interfaces: 65_536 }
    }
}

/// Why a recording cannot be read further. Offsets are from the start of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The input does not start with a pcapng Section Header Block (decided on its first byte that differs
    /// from one, so a file shorter than a block header is told apart from a cut recording).
    #[error("not a pcapng file: it starts with \"{}\", not a section header", .first.escape_ascii())]
    NotPcapng {
        /// Its first bytes (at most [`NOT_PCAPNG_SHOWN`]).
        first: Vec<u8>,
    },
    /// A section header's byte-order magic is neither order of 0x1A2B3C4D.
    #[error("section header at byte {offset}: bad byte-order magic {magic:#010x}")]
    BadMagic {
        /// Where the block starts.
        offset: u64,
        /// The magic found.
        magic: u32,
    },
    /// A section of a major version other than 1.
    #[error("section header at byte {offset}: unsupported pcapng version {major}.{minor}")]
    UnsupportedVersion {
        /// Where the block starts.
        offset: u64,
        /// Major version.
        major: u16,
        /// Minor version.
        minor: u16,
    },
    /// A block length that is not a multiple of 4, or too short for its block type.
    #[error("block at byte {offset}: bad length {len}")]
    BadLength {
        /// Where the block starts.
        offset: u64,
        /// The length field.
        len: u32,
    },
    /// A block longer than [`Limits::max_block`].
    #[error("block at byte {offset}: {len} bytes, more than the limit of {max}")]
    BlockTooLarge {
        /// Where the block starts.
        offset: u64,
        /// The length field.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The length at the end of a block differs from the one at its start.
    #[error("block at byte {offset}: length {len} at its start but {trailer} at its end")]
    TrailerMismatch {
        /// Where the block starts.
        offset: u64,
        /// The leading length.
        len: u32,
        /// The trailing length.
        trailer: u32,
    },
    /// A block whose fields or options run past its end.
    #[error("block at byte {offset}: {what}")]
    Malformed {
        /// Where the block starts.
        offset: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// A packet on an interface the section has not described.
    #[error("packet at byte {offset}: interface {id} is not described in its section")]
    UnknownInterface {
        /// Where the block starts.
        offset: u64,
        /// The interface id.
        id: u32,
    },
    /// More interfaces in one section than [`Limits::max_interfaces`].
    #[error("interface at byte {offset}: more than {max} interfaces in one section")]
    TooManyInterfaces {
        /// Where the block starts.
        offset: u64,
        /// The limit.
        max: usize,
    },
    /// Reading the input failed.
    #[error("reading the recording: {0}")]
    Io(String),
}

/// What one block of a recording says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new section starts: the interfaces of the previous one are forgotten.
    Section {
        /// `shb_userappl`: what wrote it (`telemon 0.1.0`).
        application: Option<String>,
    },
    /// An interface of the current section: one target.
    Interface {
        /// Its id, counting from 0 in its section.
        id: u32,
        /// What it is.
        target: Target,
    },
    /// A packet.
    Record(Record),
    /// A block this crate does not use (statistics, name resolution, ...), skipped.
    Skipped {
        /// Its block type.
        block_type: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Little,
    Big,
}

/// A section's byte order, chosen at run time: each read is byteorder's for that order. The callers have
/// checked the lengths (a block's fixed fields against its minimum length, an option's value against its
/// size), so these never see a slice too short.
impl Order {
    fn u16(self, b: &[u8]) -> u16 {
        match self {
            Order::Little => LittleEndian::read_u16(b),
            Order::Big => BigEndian::read_u16(b),
        }
    }

    fn u32(self, b: &[u8]) -> u32 {
        match self {
            Order::Little => LittleEndian::read_u32(b),
            Order::Big => BigEndian::read_u32(b),
        }
    }

    fn u64(self, b: &[u8]) -> u64 {
        match self {
            Order::Little => LittleEndian::read_u64(b),
            Order::Big => BigEndian::read_u64(b),
        }
    }
}

/// An interface as the reader keeps it: the target and its timestamp resolution.
#[derive(Debug, Clone)]
struct Interface {
    target: Target,
    /// `if_tsresol`: bit 7 clear, 10^-n s; set, 2^-n s.
    tsresol: u8,
}

/// The sans-IO pcapng reader: give it the unread bytes, it returns the next event and how many bytes that
/// used, or `Ok(None)` when it needs more. A block's length is checked against [`Limits`] as soon as its
/// 12 first bytes are there, so a caller buffers at most `max_block` bytes.
#[derive(Debug, Clone)]
pub struct Reader {
    limits: Limits,
    order: Option<Order>,
    interfaces: Vec<Interface>,
    offset: u64,
}

impl Reader {
    /// A reader at the start of a file.
    pub fn new(limits: Limits) -> Self {
        Reader { limits, order: None, interfaces: Vec::new(), offset: 0 }
    }

    /// Bytes used so far: where the next block starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The target of interface `id` in the current section.
    pub fn target(&self, id: u32) -> Option<&Target> {
        self.interfaces.get(id as usize).map(|i| &i.target)
    }

    /// The next event from `buf` (the bytes not used yet): `Ok(Some((used, event)))`, or `Ok(None)` when
    /// `buf` holds no whole block yet. After an error the reader stays where it was.
    pub fn read(&mut self, buf: &[u8]) -> Result<Option<(usize, Event)>, ReadError> {
        let offset = self.offset;
        if self.order.is_none() {
            // Before the first section header: bytes that cannot start one are another kind of file, however
            // few of them there are.
            let head = &buf[..buf.len().min(4)];
            if head != &SECTION_HEADER_TYPE[..head.len()] {
                return Err(ReadError::NotPcapng { first: buf[..buf.len().min(NOT_PCAPNG_SHOWN)].to_vec() });
            }
        }
        if buf.len() < 12 {
            return Ok(None);
        }
        let order = if is_section_header(&buf[..4]) {
            match LittleEndian::read_u32(&buf[8..12]) {
                BYTE_ORDER_MAGIC => Order::Little,
                m if m.swap_bytes() == BYTE_ORDER_MAGIC => Order::Big,
                magic => return Err(ReadError::BadMagic { offset, magic }),
            }
        } else {
            // Checked above: a file starts with a section header, so the order is known here.
            self.order
                .ok_or(ReadError::Malformed { offset, what: "a block before the first section header" })?
        };
        let block_type = order.u32(&buf[0..4]);
        let len = order.u32(&buf[4..8]);
        let min = match block_type {
            BLOCK_SECTION_HEADER => 28,
            BLOCK_INTERFACE => 20,
            BLOCK_ENHANCED_PACKET => 32,
            _ => 12,
        };
        if len % 4 != 0 || len < min {
            return Err(ReadError::BadLength { offset, len });
        }
        if len > self.limits.max_block {
            return Err(ReadError::BlockTooLarge { offset, len, max: self.limits.max_block });
        }
        let len_usize = len as usize;
        if buf.len() < len_usize {
            return Ok(None);
        }
        let trailer = order.u32(&buf[len_usize - 4..len_usize]);
        if trailer != len {
            return Err(ReadError::TrailerMismatch { offset, len, trailer });
        }
        let body = &buf[8..len_usize - 4];
        let event = match block_type {
            BLOCK_SECTION_HEADER => self.section(order, body, offset)?,
            BLOCK_INTERFACE => self.interface(order, body, offset)?,
            BLOCK_ENHANCED_PACKET => self.packet(order, body, offset)?,
            _ => Event::Skipped { block_type },
        };
        self.offset += u64::from(len);
        Ok(Some((len_usize, event)))
    }

    fn section(&mut self, order: Order, body: &[u8], offset: u64) -> Result<Event, ReadError> {
        let (major, minor) = (order.u16(&body[4..6]), order.u16(&body[6..8]));
        if major != 1 {
            return Err(ReadError::UnsupportedVersion { offset, major, minor });
        }
        let mut application = None;
        options(order, &body[16..], offset, |code, value| {
            if code == OPT_SHB_USERAPPL {
                application = Some(String::from_utf8_lossy(value).into_owned());
            }
        })?;
        self.order = Some(order);
        self.interfaces.clear();
        Ok(Event::Section { application })
    }

    fn interface(&mut self, order: Order, body: &[u8], offset: u64) -> Result<Event, ReadError> {
        if self.interfaces.len() >= self.limits.max_interfaces {
            return Err(ReadError::TooManyInterfaces { offset, max: self.limits.max_interfaces });
        }
        let link_type = order.u16(&body[0..2]);
        let (mut name, mut address, mut tsresol) = (String::new(), String::new(), 6u8);
        options(order, &body[8..], offset, |code, value| match code {
            OPT_IF_NAME => name = String::from_utf8_lossy(value).into_owned(),
            OPT_IF_DESCRIPTION => address = String::from_utf8_lossy(value).into_owned(),
            OPT_IF_TSRESOL if value.len() == 1 => tsresol = value[0],
            _ => {}
        })?;
        let target = Target { name, link_type, address };
        self.interfaces.push(Interface { target: target.clone(), tsresol });
        Ok(Event::Interface { id: (self.interfaces.len() - 1) as u32, target })
    }

    fn packet(&mut self, order: Order, body: &[u8], offset: u64) -> Result<Event, ReadError> {
        let interface = order.u32(&body[0..4]);
        let Some(iface) = self.interfaces.get(interface as usize) else {
            return Err(ReadError::UnknownInterface { offset, id: interface });
        };
        let ticks = (u64::from(order.u32(&body[4..8])) << 32) | u64::from(order.u32(&body[8..12]));
        let captured = order.u32(&body[12..16]) as usize;
        let rest = &body[20..];
        let padded = captured.next_multiple_of(4);
        if padded > rest.len() {
            return Err(ReadError::Malformed { offset, what: "packet data runs past the block" });
        }
        let data = &rest[..captured];
        let (mut flags, mut comment, mut dropped) = (None, None, 0u64);
        options(order, &rest[padded..], offset, |code, value| match code {
            OPT_EPB_FLAGS if value.len() == 4 => flags = Some(order.u32(value)),
            OPT_EPB_DROPCOUNT if value.len() == 8 => dropped = order.u64(value),
            OPT_COMMENT => comment = Some(value),
            _ => {}
        })?;
        let kind = match (flags.map(|f| f & 3), comment) {
            (Some(1), _) => RecordKind::Data { direction: Direction::Inbound, bytes: data.to_vec() },
            (Some(2), _) => RecordKind::Data { direction: Direction::Outbound, bytes: data.to_vec() },
            (_, Some(c)) if data.is_empty() && c == MARK_OPEN.as_bytes() => RecordKind::Open,
            (_, Some(c)) if data.is_empty() && c == MARK_CLOSE.as_bytes() => RecordKind::Close,
            (_, Some(c)) if data.is_empty() && c == MARK_PEER_CLOSED.as_bytes() => RecordKind::PeerClosed,
            _ => RecordKind::Other(data.to_vec()),
        };
        let time_ns = ticks_to_ns(ticks, iface.tsresol);
        Ok(Event::Record(Record { interface, time_ns, dropped, kind }))
    }
}

/// The first four bytes of every pcapng file: the Section Header Block's type, 0x0A0D0D0A, which reads the
/// same in both byte orders.
const SECTION_HEADER_TYPE: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];

/// How many of a file's first bytes [`ReadError::NotPcapng`] keeps, to show what the file is.
pub const NOT_PCAPNG_SHOWN: usize = 16;

fn is_section_header(first4: &[u8]) -> bool {
    first4 == SECTION_HEADER_TYPE
}

/// Converts timestamp ticks of resolution `tsresol` to nanoseconds (saturating).
fn ticks_to_ns(ticks: u64, tsresol: u8) -> u64 {
    let exp = u32::from(tsresol & 0x7F);
    let ns = if tsresol & 0x80 == 0 {
        if exp <= 9 {
            u128::from(ticks) * 10u128.pow(9 - exp)
        } else {
            u128::from(ticks) / 10u128.checked_pow(exp - 9).unwrap_or(u128::MAX)
        }
    } else {
        // 2^-exp seconds per tick.
        let scaled = u128::from(ticks) * 1_000_000_000;
        if exp >= 128 {
            0
        } else {
            scaled >> exp
        }
    };
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Calls `f(code, value)` for each option in `opts`, up to `opt_endofopt` or the end.
fn options<'a>(
    order: Order,
    mut opts: &'a [u8],
    offset: u64,
    mut f: impl FnMut(u16, &'a [u8]),
) -> Result<(), ReadError> {
    while opts.len() >= 4 {
        let code = order.u16(&opts[0..2]);
        let len = usize::from(order.u16(&opts[2..4]));
        if code == OPT_END {
            return Ok(());
        }
        let padded = len.next_multiple_of(4);
        if 4 + padded > opts.len() {
            return Err(ReadError::Malformed { offset, what: "an option runs past the block" });
        }
        f(code, &opts[4..4 + len]);
        opts = &opts[4 + padded..];
    }
    Ok(())
}

/// Why reading stopped before the end of the input: the recording is good up to `offset`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Warning {
    /// The input ends inside a block (a file cut by a crash, or still being written).
    #[error(
        "the recording is cut at byte {offset}: {bytes} trailing bytes of an unfinished block were ignored"
    )]
    Truncated {
        /// Where the unfinished block starts.
        offset: u64,
        /// How many bytes of it there are.
        bytes: u64,
    },
    /// A block cannot be read: everything from it on is ignored.
    #[error("the recording is damaged; read up to byte {offset}: {error}")]
    Damaged {
        /// Where the bad block starts.
        offset: u64,
        /// What is wrong with it.
        error: ReadError,
    },
}

/// Reads events from any [`std::io::Read`], buffering at most one block (bounded by [`Limits`]).
///
/// Yields `Ok(event)` for each block; at the end, if the input stopped early, one `Err(warning)`, then
/// nothing.
#[derive(Debug)]
pub struct FileReader<R> {
    input: R,
    reader: Reader,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    done: bool,
}

impl<R: Read> FileReader<R> {
    /// Reads `input` with `limits`.
    pub fn new(input: R, limits: Limits) -> Self {
        FileReader {
            input,
            reader: Reader::new(limits),
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            done: false,
        }
    }

    /// The underlying sans-IO reader (e.g. for [`Reader::target`]).
    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    fn fill(&mut self) -> std::io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A block can be up to max_block: grow once to hold it.
            let max = self.reader.limits.max_block as usize;
            let len = self.buf.len();
            self.buf.resize(len.saturating_mul(2).min(max).max(len + 1), 0);
        }
        loop {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl<R: Read> Iterator for FileReader<R> {
    type Item = Result<Event, Warning>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            match self.reader.read(&self.buf[self.start..self.end]) {
                Ok(Some((used, event))) => {
                    self.start += used;
                    return Some(Ok(event));
                }
                Ok(None) => match self.fill() {
                    Ok(0) => {
                        self.done = true;
                        let bytes = (self.end - self.start) as u64;
                        return (bytes > 0)
                            .then_some(Err(Warning::Truncated { offset: self.reader.offset(), bytes }));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.done = true;
                        let offset = self.reader.offset();
                        return Some(Err(Warning::Damaged { offset, error: ReadError::Io(e.to_string()) }));
                    }
                },
                Err(error) => {
                    self.done = true;
                    return Some(Err(Warning::Damaged { offset: self.reader.offset(), error }));
                }
            }
        }
    }
}

/// One section of a recording: what wrote it, its targets (by interface id) and its records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    /// `shb_userappl`.
    pub application: Option<String>,
    /// The section's interfaces, by id.
    pub targets: Vec<Target>,
    /// Its packets, in file order.
    pub records: Vec<Record>,
}

/// A whole recording in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capture {
    /// The sections, in file order (a file appended to has several).
    pub sections: Vec<Section>,
    /// Why reading stopped before the end, if it did: the sections hold everything before that point.
    pub warning: Option<Warning>,
}

impl Capture {
    /// Reads a recording held in memory.
    pub fn from_bytes(bytes: &[u8], limits: Limits) -> Capture {
        Capture::from_events(FileReader::new(bytes, limits))
    }

    /// Reads the recording at `path`. Fails only if the file cannot be opened; a damaged or cut file gives
    /// what precedes the damage and a [`Warning`].
    pub fn from_file(path: impl AsRef<Path>, limits: Limits) -> std::io::Result<Capture> {
        let file = std::fs::File::open(path)?;
        Ok(Capture::from_events(FileReader::new(file, limits)))
    }

    /// Reads the recordings (`telemon-*.pcapng`) of a directory written by a rotating recorder, oldest first,
    /// as one capture: a connection that spans files is one connection. The warnings of files cut or damaged
    /// (each read up to the damage) are returned beside it.
    pub fn from_dir(
        dir: impl AsRef<Path>,
        limits: Limits,
    ) -> std::io::Result<(Capture, Vec<(std::path::PathBuf, Warning)>)> {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                name.starts_with("telemon-") && name.ends_with(".pcapng")
            })
            .collect();
        files.sort();
        let mut all = Capture::default();
        let mut warnings = Vec::new();
        for file in files {
            let capture = Capture::from_file(&file, limits)?;
            all.sections.extend(capture.sections);
            if let Some(w) = capture.warning {
                warnings.push((file, w));
            }
        }
        Ok((all, warnings))
    }

    fn from_events(events: impl Iterator<Item = Result<Event, Warning>>) -> Capture {
        let mut capture = Capture::default();
        for event in events {
            match event {
                Ok(Event::Section { application }) => {
                    capture.sections.push(Section { application, ..Section::default() })
                }
                Ok(Event::Interface { target, .. }) => {
                    if let Some(s) = capture.sections.last_mut() {
                        s.targets.push(target);
                    }
                }
                Ok(Event::Record(record)) => {
                    if let Some(s) = capture.sections.last_mut() {
                        s.records.push(record);
                    }
                }
                Ok(Event::Skipped { .. }) => {}
                Err(warning) => capture.warning = Some(warning),
            }
        }
        capture
    }

    /// Every record with its target, in file order.
    pub fn records(&self) -> impl Iterator<Item = (&Target, &Record)> {
        self.sections.iter().flat_map(|s| {
            s.records.iter().filter_map(move |r| s.targets.get(r.interface as usize).map(|t| (t, r)))
        })
    }

    /// The distinct targets of the recording, in order of first appearance.
    pub fn targets(&self) -> Vec<&Target> {
        let mut out: Vec<&Target> = Vec::new();
        for t in self.sections.iter().flat_map(|s| &s.targets) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }
}
