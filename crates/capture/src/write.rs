//! Encoding: each block is built in memory and written with one `write_all`, little-endian.

use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::format::*;
use crate::read::{Limits, Reader};

/// Appends an option (code, length, value padded to 4 bytes).
fn option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    // Option values longer than u16 are cut to the longest that fits (names and addresses are short).
    let value = &value[..value.len().min(usize::from(u16::MAX) & !3)];
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Wraps `body` (already padded) as a block of `kind` and appends it to `out`.
fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let len = (body.len() + 12) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&len.to_le_bytes());
}

/// Appends a Section Header Block naming `application` (`shb_userappl`), section length unknown (-1),
/// so that sections can be appended and a cut file stays valid up to the cut.
pub fn encode_section_header(out: &mut Vec<u8>, application: &str) {
    let mut body = Vec::with_capacity(32 + application.len());
    body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&(-1i64).to_le_bytes());
    option(&mut body, OPT_SHB_USERAPPL, application.as_bytes());
    option(&mut body, OPT_END, &[]);
    block(out, BLOCK_SECTION_HEADER, &body);
}

/// Appends an Interface Description Block for `target`: its protocol's link type, `if_name`,
/// `if_description` (the address), an `opt_comment` naming the link type, and nanosecond timestamps.
pub fn encode_interface(out: &mut Vec<u8>, target: &Target) {
    let mut body = Vec::with_capacity(48 + target.name.len() + target.address.len());
    body.extend_from_slice(&target.link_type.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes()); // snaplen: no limit
    option(&mut body, OPT_IF_NAME, target.name.as_bytes());
    option(&mut body, OPT_IF_DESCRIPTION, target.address.as_bytes());
    option(&mut body, OPT_COMMENT, format!("telemon target, linktype {}", target.link_type).as_bytes());
    option(&mut body, OPT_IF_TSRESOL, &[9]);
    option(&mut body, OPT_END, &[]);
    block(out, BLOCK_INTERFACE, &body);
}

/// Appends an Enhanced Packet Block for `record` (its interface must have been described in this section).
pub fn encode_record(out: &mut Vec<u8>, record: &Record) {
    let (data, flags, comment): (&[u8], Option<u32>, Option<&str>) = match &record.kind {
        RecordKind::Open => (&[], None, Some(MARK_OPEN)),
        RecordKind::Close => (&[], None, Some(MARK_CLOSE)),
        RecordKind::PeerClosed => (&[], None, Some(MARK_PEER_CLOSED)),
        RecordKind::Data { direction, bytes } => (bytes, Some(direction.flags()), None),
        RecordKind::Other(bytes) => (bytes, None, None),
    };
    let mut body = Vec::with_capacity(48 + data.len());
    body.extend_from_slice(&record.interface.to_le_bytes());
    body.extend_from_slice(&((record.time_ns >> 32) as u32).to_le_bytes());
    body.extend_from_slice(&(record.time_ns as u32).to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(data);
    pad(&mut body);
    if let Some(flags) = flags {
        option(&mut body, OPT_EPB_FLAGS, &flags.to_le_bytes());
    }
    if let Some(comment) = comment {
        option(&mut body, OPT_COMMENT, comment.as_bytes());
    }
    if record.dropped > 0 {
        option(&mut body, OPT_EPB_DROPCOUNT, &record.dropped.to_le_bytes());
    }
    if flags.is_some() || comment.is_some() || record.dropped > 0 {
        option(&mut body, OPT_END, &[]);
    }
    block(out, BLOCK_ENHANCED_PACKET, &body);
}

/// The longest data one record holds; longer reads and writes are split over several records.
pub const MAX_RECORD_DATA: usize = 64 * 1024;

/// Writes a recording: a section header, then interfaces and records, each block in one `write_all`.
///
/// Times are passed in (sans clocks): see [`crate::Anchor`] for the usual source.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    buf: Vec<u8>,
    interfaces: u32,
    bytes: u64,
}

impl<W: Write> Writer<W> {
    /// Starts a new section on `out`, naming `application` (e.g. `telemon 0.1.0`).
    pub fn new(out: W, application: &str) -> io::Result<Self> {
        let mut w = Writer { out, buf: Vec::new(), interfaces: 0, bytes: 0 };
        encode_section_header(&mut w.buf, application);
        w.emit()?;
        Ok(w)
    }

    fn emit(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Describes `target`; returns its interface id for [`Writer::record`].
    pub fn interface(&mut self, target: &Target) -> io::Result<u32> {
        encode_interface(&mut self.buf, target);
        self.emit()?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// Writes one record; data longer than [`MAX_RECORD_DATA`] goes out as several records of the same time.
    pub fn record(&mut self, record: &Record) -> io::Result<()> {
        if record.interface >= self.interfaces {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface {} was not described in this section", record.interface),
            ));
        }
        match &record.kind {
            RecordKind::Data { direction, bytes } if bytes.len() > MAX_RECORD_DATA => {
                for (i, chunk) in bytes.chunks(MAX_RECORD_DATA).enumerate() {
                    let part = Record {
                        interface: record.interface,
                        time_ns: record.time_ns,
                        dropped: if i == 0 { record.dropped } else { 0 },
                        kind: RecordKind::Data { direction: *direction, bytes: chunk.to_vec() },
                    };
                    encode_record(&mut self.buf, &part);
                }
            }
            _ => encode_record(&mut self.buf, record),
        }
        self.emit()
    }

    /// Bytes written so far (including the section header).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// What [`prepare_append`] found in an existing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendCheck {
    /// Bytes of whole, valid blocks kept.
    pub kept: u64,
    /// Bytes cut off the end: an unfinished or damaged block left by a crash (0 for a clean file).
    pub cut: u64,
}

/// Makes an existing recording ready to be appended to: reads it, truncates an unfinished or damaged tail
/// (a crash's leftovers, which would otherwise sit in the middle of the file) and seeks to the end. A new
/// [`Writer`] on the file then starts a new section. An empty file is fine; a file that is not pcapng is an
/// error and is left alone.
pub fn prepare_append(file: &mut std::fs::File) -> io::Result<AppendCheck> {
    file.seek(SeekFrom::Start(0))?;
    let total = file.metadata()?.len();
    let mut reader = Reader::new(Limits::default());
    let mut buf = vec![0u8; 64 * 1024];
    let mut filled = 0usize;
    let mut good = 0u64;
    let mut eof = false;
    loop {
        match reader.read(&buf[..filled]) {
            Ok(Some((used, _event))) => {
                buf.copy_within(used..filled, 0);
                filled -= used;
                good = reader.offset();
            }
            Ok(None) if eof => break,
            Ok(None) => {
                if filled == buf.len() {
                    let grow = (buf.len() * 2).min(Limits::default().max_block as usize + 64);
                    if grow <= buf.len() {
                        break;
                    }
                    buf.resize(grow, 0);
                }
                let n = file.read(&mut buf[filled..])?;
                eof = n == 0;
                filled += n;
            }
            Err(e) if good == 0 && matches!(e, crate::ReadError::NotPcapng { .. }) => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            Err(_) => break,
        }
    }
    if good < total {
        file.set_len(good)?;
    }
    file.seek(SeekFrom::End(0))?;
    Ok(AppendCheck { kept: good, cut: total - good })
}
