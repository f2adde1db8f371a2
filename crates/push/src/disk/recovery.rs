//! Opening a queue directory: whatever is in it, the queue opens, and says what it found.

use std::io;

use super::cursor;
use super::drops::{DropReason, Dropped};
use super::error::{DiskError, Op};
use super::fs::{Fs, FsFile, LOCK_FILE};
use super::queue::{Config, DiskQueue, Entry, Segment};
use super::segment::READ_TRIES;
use super::segment::{self, Damage};

/// Which cursor file the queue started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorFound {
    /// `cursor`, written at the last acknowledgement.
    Acked,
    /// `cursor.synced`, written at the last sync (`cursor` was missing, damaged or behind).
    Synced,
    /// Neither was valid (or there were none): from the oldest segment.
    None,
}

/// What [`DiskQueue::open`] found in the directory.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Segment files found.
    pub segments: usize,
    /// Records queued (from the cursor on).
    pub records: u64,
    /// Their samples.
    pub samples: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The cursor read, and from which file.
    pub cursor: Option<(u64, CursorFound)>,
    /// Whether the cursor pointed past the end or into a removed segment, and was moved.
    pub cursor_clamped: bool,
    /// Damaged records (or damaged regions) skipped in the middle of a segment.
    pub corrupt_records: u64,
    /// Their bytes.
    pub corrupt_bytes: u64,
    /// Bytes cut from segment ends: records torn by a crash, garbage after the last record.
    pub cut_bytes: u64,
    /// Gaps in the positions (a segment or a segment's end missing) after the cursor.
    pub missing_segments: u64,
    /// The bytes of those gaps.
    pub missing_bytes: u64,
    /// Files that are not the queue's, left alone.
    pub stray_files: u64,
    /// The records lost after the cursor (damaged, torn): count them as dropped.
    pub dropped: Vec<Dropped>,
    /// I/O errors worked around (a segment that could not be read or cut back).
    pub problems: Vec<DiskError>,
}

impl<F: Fs> DiskQueue<F> {
    /// Opens (or creates) the queue in `config.dir`, and takes the directory's lock for as long
    /// as the queue lives. Fails only when the directory cannot be created, locked or listed
    /// ([`DiskError::InUse`] when another queue holds it): a damaged, torn, missing or unreadable
    /// file is skipped, cut back or worked around, and reported in the [`Recovery`].
    ///
    /// Reads every byte from the cursor on once (checking both checksums of every record), and
    /// keeps a 32-byte index entry per record in memory. The bounds (`max_bytes`, `max_age`)
    /// apply from the first append, which reports what they drop.
    pub fn open(fs: F, config: Config) -> Result<(DiskQueue<F>, Recovery), DiskError> {
        let dir = config.dir.clone();
        fs.create_dir_all(&dir).map_err(|e| DiskError::new(Op::CreateDir, &dir, e))?;
        let lock = fs
            .try_lock_dir(&dir)
            .map_err(|e| DiskError::new(Op::Lock, dir.join(LOCK_FILE), e))?
            .ok_or_else(|| DiskError::InUse { dir: dir.clone() })?;
        let names = fs.read_dir(&dir).map_err(|e| DiskError::new(Op::ListDir, &dir, e))?;
        let mut rec = Recovery::default();
        let mut starts = Vec::new();
        for name in &names {
            match name.to_str() {
                Some(n) if segment::parse_name(n).is_some() => starts.extend(segment::parse_name(n)),
                Some(cursor::ACKED | cursor::ACKED_TMP | cursor::SYNCED | cursor::SYNCED_TMP | LOCK_FILE) => {
                }
                _ => rec.stray_files += 1,
            }
        }
        starts.sort_unstable();
        rec.segments = starts.len();

        let acked = read_cursor(&fs, &dir.join(cursor::ACKED), &mut rec.problems);
        let synced = read_cursor(&fs, &dir.join(cursor::SYNCED), &mut rec.problems);
        rec.cursor = match (acked, synced) {
            (Some(a), Some(s)) if s > a => Some((s, CursorFound::Synced)),
            (Some(a), _) => Some((a, CursorFound::Acked)),
            (None, Some(s)) => Some((s, CursorFound::Synced)),
            (None, None) => None,
        };
        let cursor = rec.cursor.map_or(starts.first().copied().unwrap_or(0), |(c, _)| c);

        // New records go after every position any cursor file holds, even a temporary one: an
        // old value that a later crash brings back (a file emptied and rewritten, then reverted)
        // can then never point past a record.
        let tmp = [cursor::ACKED_TMP, cursor::SYNCED_TMP]
            .map(|name| read_cursor(&fs, &dir.join(name), &mut Vec::new()));
        let mut q = DiskQueue::new(fs, config, synced, lock);
        q.write_pos = [Some(cursor), acked, synced, tmp[0], tmp[1]].into_iter().flatten().max().unwrap_or(0);
        q.pending.dir = true;
        let mut prev_end: Option<u64> = None;
        for (i, &start) in starts.iter().enumerate() {
            let next = starts.get(i + 1).copied();
            let last = next.is_none();
            if next.is_some_and(|n| n <= cursor) {
                // Wholly below the cursor: acknowledged, removed by the first sync.
                q.pending.retired.push(start);
                continue;
            }
            let path = dir.join(segment::file_name(start));
            let opened = retry(|| q.fs.open(&path).and_then(|f| f.size().map(|len| (f, len))));
            let (file, len) = match opened {
                Ok(ok) => ok,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "disk queue: skipping a segment it cannot open");
                    rec.problems.push(DiskError::new(Op::Open, &path, e));
                    // Never write over it: positions go on after its start.
                    q.write_pos = q.write_pos.max(start + 1);
                    continue;
                }
            };
            if let Some(gap) =
                prev_end.filter(|&p| p < start && start > cursor).map(|p| start - p.max(cursor))
            {
                tracing::warn!(path = %path.display(), bytes = gap, "disk queue: bytes missing before a segment");
                rec.missing_segments += 1;
                rec.missing_bytes += gap;
            }
            // A segment is never read past the next one's start (a failed write left there).
            let limit = next.map_or(len, |n| len.min(n - start));
            rec.cut_bytes += len - limit;
            let from = cursor.saturating_sub(start).min(limit);
            let scan = segment::scan(&file, from, limit);
            for &(offset, header) in &scan.records {
                q.index.push_back(Entry {
                    start: start + offset,
                    len: header.record_len() as u32,
                    meta: header.meta,
                });
                q.bytes += header.record_len() as u64;
            }
            for d in &scan.damaged {
                rec.corrupt_records += 1;
                rec.corrupt_bytes += d.len;
                rec.dropped.push(dropped(d));
            }
            let mut seg_len = scan.end;
            if let Some(e) = scan.error {
                // Unreadable from scan.end on: keep it (a later open may read it), write after it.
                tracing::warn!(path = %path.display(), error = %e, "disk queue: a segment is unreadable after {} bytes", scan.end);
                rec.problems.push(DiskError::new(Op::Read, &path, e));
                rec.corrupt_records += scan.tail.len() as u64;
                rec.dropped.extend(scan.tail.iter().map(dropped));
                seg_len = limit;
            } else if scan.end > scan.good_end {
                // The torn tail: records cut by a crash, garbage after the last good record.
                rec.cut_bytes += scan.end - scan.good_end;
                rec.dropped.extend(scan.tail.iter().filter(|d| d.header.is_some()).map(dropped));
                seg_len = scan.good_end;
                if last {
                    match file.set_len(scan.good_end) {
                        Ok(()) => {}
                        Err(e) => {
                            rec.problems.push(DiskError::new(Op::Truncate, &path, e));
                            q.tail_dirty = true;
                        }
                    }
                }
            }
            // After a `kill -9` the kernel may still hold its bytes unwritten: the first sync
            // makes them (and the directory's names) durable.
            q.pending.files.push(start);
            prev_end = Some(start + len.min(limit));
            q.write_pos = q.write_pos.max(start + seg_len);
            q.segments.push_back(Segment { start, len: seg_len, file: last.then_some(file) });
        }
        q.corrupt_records = rec.corrupt_records;
        let first = q.segments.front().map(|s| s.start);
        rec.cursor_clamped = rec.cursor.is_some_and(|(c, _)| c > q.segments.back().map_or(c, |s| s.end()))
            || first.is_some_and(|f| rec.cursor.is_some_and(|(c, _)| c < f));
        q.retire();
        rec.records = q.index.len() as u64;
        rec.samples = q.index.iter().map(|e| u64::from(e.meta.samples)).sum();
        rec.bytes = q.bytes;
        if rec.corrupt_records > 0
            || rec.cut_bytes > 0
            || rec.missing_segments > 0
            || !rec.problems.is_empty()
        {
            tracing::warn!(dir = %dir.display(), ?rec, "disk queue: recovered");
        }
        Ok((q, rec))
    }
}

fn dropped(d: &Damage) -> Dropped {
    match &d.header {
        Some(h) => Dropped::one(DropReason::Corrupt, &h.meta, d.len),
        None => Dropped::region(DropReason::Corrupt, d.len),
    }
}

/// `f`'s result, after up to [`READ_TRIES`] tries while it fails (but not for a missing file).
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut tries = 1;
    loop {
        match f() {
            Err(e) if tries < READ_TRIES && e.kind() != io::ErrorKind::NotFound => tries += 1,
            done => return done,
        }
    }
}

/// The position in a cursor file; `None` when missing or damaged (a read error is recorded).
fn read_cursor<F: Fs>(fs: &F, path: &std::path::Path, problems: &mut Vec<DiskError>) -> Option<u64> {
    let read = retry(|| {
        let file = fs.open(path)?;
        let mut bytes = [0; cursor::LEN + 1];
        let mut n = 0;
        while n < bytes.len() {
            match file.read_at(&mut bytes[n..], n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok((bytes, n))
    });
    let (bytes, n) = match read {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            problems.push(DiskError::new(Op::Read, path, e));
            return None;
        }
    };
    let pos = cursor::decode(&bytes[..n]);
    if pos.is_none() {
        tracing::warn!(path = %path.display(), "disk queue: a damaged cursor file is ignored");
    }
    pos
}
