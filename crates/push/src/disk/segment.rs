//! Segment files: their names, and reading one whole at open (records, damage, the torn tail).
//!
//! A segment is named after the global position of its first byte, `segment-<16 hex digits>.log`;
//! positions grow across segments and are never reused, so a name says where its bytes belong.

use std::io;

use super::frame::{decode, decode_header, Decoded, Header, HEADER_LEN};
use super::fs::FsFile;

/// A failed read of the same record this many times in a row drops it (`disk_error`), so that
/// one unreadable record never stops the queue.
pub const READ_TRIES: u32 = 3;

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".log";

/// The file name of the segment starting at `start`.
pub fn file_name(start: u64) -> String {
    format!("{PREFIX}{start:016x}{SUFFIX}")
}

/// The start of the segment named `name`, or `None` for any other name.
pub fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The bytes read at a time.
const CHUNK: usize = 1 << 20;

/// A run of bytes in which no valid record starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    /// Its offset in the segment.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// The header, when only the payload was damaged.
    pub header: Option<Header>,
}

/// What a segment holds, from where a scan started to where it stopped.
#[derive(Debug, Default)]
pub struct Scan {
    /// Valid records: their offsets and headers.
    pub records: Vec<(u64, Header)>,
    /// Damage followed by a valid record (skipped and counted).
    pub damaged: Vec<Damage>,
    /// Damage after the last valid record: the torn tail (cut back).
    pub tail: Vec<Damage>,
    /// The end of the last valid record (or where the scan started).
    pub good_end: u64,
    /// Where the scan stopped: the limit, or where a read failed.
    pub end: u64,
    /// The read that failed, if one did.
    pub error: Option<io::Error>,
}

impl Scan {
    fn damage(&mut self, offset: u64, len: u64, header: Option<Header>) {
        // Headerless damage next to headerless damage is one region.
        if let Some(last) = self.tail.last_mut() {
            if header.is_none() && last.header.is_none() && last.offset + last.len == offset {
                last.len += len;
                return;
            }
        }
        self.tail.push(Damage { offset, len, header });
    }
}

/// Bytes of a file read ahead, from offset `at`.
struct Window<'f, File> {
    file: &'f File,
    buf: Vec<u8>,
    at: u64,
    eof: bool,
}

impl<File: FsFile> Window<'_, File> {
    /// Makes the buffer hold `[pos, pos + n)` unless the file ends first.
    fn fill(&mut self, pos: u64, n: usize) -> io::Result<()> {
        let end = self.at + self.buf.len() as u64;
        if pos < self.at || pos > end {
            self.buf.clear();
            self.at = pos;
            self.eof = false;
        } else if pos - self.at > CHUNK as u64 {
            // Drop what was decoded, so the buffer stays about a chunk (or a record) long.
            self.buf.drain(..(pos - self.at) as usize);
            self.at = pos;
        }
        let have = self.buf.len() - (pos - self.at) as usize;
        if have >= n || self.eof {
            return Ok(());
        }
        let old = self.buf.len();
        self.buf.resize(old + (n - have), 0);
        let got = read_some(self.file, &mut self.buf[old..], self.at + old as u64);
        let n_read = *got.as_ref().unwrap_or(&0);
        self.buf.truncate(old + n_read);
        self.eof = n_read < n - have;
        got.map(drop)
    }

    /// The bytes buffered from `pos`, at most `max`.
    fn bytes(&self, pos: u64, max: u64) -> &[u8] {
        let rel = (pos - self.at) as usize;
        let len = (self.buf.len() - rel).min(usize::try_from(max).unwrap_or(usize::MAX));
        &self.buf[rel..rel + len]
    }
}

/// Reads `file` from offset `from` to offset `limit` (or its end, when sooner), record by record.
/// Never allocates more than a chunk or one record whose header checked.
pub fn scan<File: FsFile>(file: &File, from: u64, limit: u64) -> Scan {
    let mut out = Scan { good_end: from, end: from, ..Scan::default() };
    let mut w = Window { file, buf: Vec::new(), at: from, eof: false };
    let mut pos = from;
    let mut want = CHUNK;
    let mut torn = None;
    while pos < limit {
        let left = limit - pos;
        if let Err(e) = w.fill(pos, usize::try_from(left).unwrap_or(usize::MAX).min(want)) {
            out.error = Some(e);
            break;
        }
        let bytes = w.bytes(pos, left);
        if bytes.is_empty() {
            break;
        }
        let available = bytes.len();
        match decode(bytes) {
            Decoded::Record { header, .. } => {
                out.records.push((pos, header));
                pos += header.record_len() as u64;
                out.good_end = pos;
                out.damaged.append(&mut out.tail);
                want = CHUNK;
            }
            Decoded::Damaged { header, skip } => {
                out.damage(pos, skip as u64, header);
                pos += skip as u64;
                want = CHUNK;
            }
            Decoded::NeedMore { needed } => {
                if needed as u64 > left || w.eof || needed <= available {
                    // The file ends inside what may be a record: a torn tail, whose header
                    // (when whole) says what was lost.
                    torn = bytes.first_chunk::<HEADER_LEN>().and_then(decode_header);
                    break;
                }
                want = needed;
            }
        }
    }
    out.end = if out.error.is_some() { pos } else { pos.max(w.at + w.buf.len() as u64).min(limit) };
    if out.error.is_none() && out.end > out.good_end {
        // After the last record: damage found by the decoder, then bytes too few to be a record.
        let covered = out.tail.last().map_or(out.good_end, |d| d.offset + d.len);
        if out.end > covered {
            out.damage(covered, out.end - covered, torn.filter(|_| covered == pos));
        }
    }
    out
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns the bytes read. A
/// failed read is tried [`READ_TRIES`] times.
fn read_some<File: FsFile>(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let (mut n, mut failed) = (0, 0);
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if failed + 1 < READ_TRIES => failed += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(file_name(0x1f), "segment-000000000000001f.log");
        assert_eq!(parse_name(&file_name(u64::MAX)), Some(u64::MAX));
        for bad in
            ["segment-1f.log", "segment-000000000000001g.log", "cursor", "segment-000000000000001f.log.tmp"]
        {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
