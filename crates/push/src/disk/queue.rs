//! The queue: appends at the end, hands out from the front, acknowledges, keeps its bounds.

use std::collections::VecDeque;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cursor;
use super::drops::{DropReason, Dropped, Runs};
use super::error::{AppendError, DiskError, Op};
use super::frame::{self, decode_header, encoded_len, Meta, Record, RecordIn, HEADER_LEN};
use super::fs::{Fs, FsFile};
use super::segment::{self, READ_TRIES};
use super::sync::{Pending, Shared, SyncJob, Synced};

/// What to drop when an append would take the queue over `max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// The oldest records make room (the recent data is worth more on a dashboard).
    #[default]
    DropOldest,
    /// The new records that do not fit are dropped (the backlog keeps its order and age).
    DropNewest,
}

/// Where the queue lives and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The directory holding the segments and the cursor files; created when missing. One
    /// queue per directory.
    pub dir: PathBuf,
    /// A new segment starts once the current one holds this many bytes.
    pub segment_bytes: u64,
    /// The most bytes of records queued from the cursor to the end.
    pub max_bytes: u64,
    /// Records whose newest sample is older than this are dropped from the front.
    pub max_age: Option<Duration>,
    /// What goes when `max_bytes` is reached.
    pub when_full: WhenFull,
}

impl Config {
    /// The default segment size: 16 MiB.
    pub const SEGMENT_BYTES: u64 = 16 << 20;
    /// The default bound: 1 GiB.
    pub const MAX_BYTES: u64 = 1 << 30;

    /// The defaults, in `dir`: 16 MiB segments, 1 GiB, no age limit, the oldest dropped first.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Config {
            dir: dir.into(),
            segment_bytes: Self::SEGMENT_BYTES,
            max_bytes: Self::MAX_BYTES,
            max_age: None,
            when_full: WhenFull::DropOldest,
        }
    }
}

/// Where a record handed out by [`DiskQueue::next_record`] lies: what [`DiskQueue::ack`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub(crate) start: u64,
    pub(crate) end: u64,
}

impl Position {
    /// The record's first byte, as a global position.
    pub fn start(&self) -> u64 {
        self.start
    }
    /// The position just after the record: the cursor once it is acknowledged.
    pub fn end(&self) -> u64 {
        self.end
    }
}

/// What [`DiskQueue::append`] did besides queueing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// Records queued.
    pub records: u64,
    /// Their samples.
    pub samples: u64,
    /// What the bounds dropped (older records, or new ones), in queue order: count them.
    pub dropped: Vec<Dropped>,
}

/// What [`DiskQueue::next_record`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The oldest record not handed out since the last rewind.
    Record(Position, Record),
    /// A record that was damaged or unreadable, now dropped: count it and call again.
    Dropped(Dropped),
    /// Everything queued is handed out.
    Empty,
}

/// One record of the in-memory index, from the cursor to the end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub start: u64,
    pub len: u32,
    pub meta: Meta,
}

impl Entry {
    pub fn end(&self) -> u64 {
        self.start + u64::from(self.len)
    }
}

/// A segment file the queue still reads or writes.
pub(crate) struct Segment<File> {
    pub start: u64,
    /// Its bytes that belong to the queue (a failed write or a torn tail may lie beyond).
    pub len: u64,
    /// Opened when first read or written, closed when retired.
    pub file: Option<File>,
}

impl<File> Segment<File> {
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// A crash-safe FIFO of records on disk; see [the module docs](super) for the layout and the
/// guarantees.
///
/// Not synchronized: the caller keeps it in an `Arc<Mutex<..>>` shared by the sampler (which
/// appends) and the sender (which reads and acknowledges). No method holding `&mut self`
/// fsyncs: [`DiskQueue::sync_job`] takes what to sync, and [`SyncJob::run`] fsyncs without the
/// queue.
pub struct DiskQueue<F: Fs> {
    pub(crate) fs: F,
    pub(crate) config: Config,
    /// From the one holding the cursor (or later) to the one written.
    pub(crate) segments: VecDeque<Segment<F::File>>,
    /// Every queued record from the cursor on.
    pub(crate) index: VecDeque<Entry>,
    /// The sum of the index's lengths.
    pub(crate) bytes: u64,
    /// Index entries handed out since the last rewind (`index[..handed]`).
    pub(crate) handed: usize,
    /// Records handed out and then dropped by a bound before their acknowledgement: delivered
    /// if acknowledged, else reported by [`DiskQueue::rewind`].
    pub(crate) passed: Vec<(Entry, DropReason)>,
    /// Where the next record goes.
    pub(crate) write_pos: u64,
    /// A failed write may have left bytes after the last segment's `len`.
    pub(crate) tail_dirty: bool,
    /// The position in the `cursor` file, if it was written.
    pub(crate) cursor_file: Option<u64>,
    /// What the next sync must make durable.
    pub(crate) pending: Pending,
    pub(crate) shared: Arc<Shared>,
    pub(crate) corrupt_records: u64,
    /// Failed reads in a row of `index[handed]`.
    pub(crate) read_failures: u32,
    /// The encoded records of an append, kept for its capacity.
    pub(crate) buf: Vec<u8>,
    /// The directory's lock, held for the queue's life.
    _lock: F::Lock,
}

impl<F: Fs> fmt::Debug for DiskQueue<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskQueue")
            .field("dir", &self.config.dir)
            .field("segments", &self.segments.len())
            .field("records", &self.index.len())
            .field("bytes", &self.bytes)
            .field("cursor", &self.cursor())
            .field("write_pos", &self.write_pos)
            .finish_non_exhaustive()
    }
}

impl<F: Fs> DiskQueue<F> {
    pub(crate) fn new(fs: F, config: Config, durable: Option<u64>, lock: F::Lock) -> Self {
        DiskQueue {
            fs,
            config,
            segments: VecDeque::new(),
            index: VecDeque::new(),
            bytes: 0,
            handed: 0,
            passed: Vec::new(),
            write_pos: 0,
            tail_dirty: false,
            cursor_file: None,
            pending: Pending::default(),
            shared: Arc::new(Shared {
                returned: Mutex::new(Pending::default()),
                durable: Mutex::new(durable),
            }),
            corrupt_records: 0,
            read_failures: 0,
            buf: Vec::new(),
            _lock: lock,
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.config.dir.join(name)
    }

    /// The position of the oldest unacknowledged record (the end when there is none).
    pub fn cursor(&self) -> u64 {
        self.index.front().map_or(self.write_pos, |e| e.start)
    }

    /// The queue's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Bytes of the records queued from the cursor on (what `max_bytes` bounds).
    pub fn disk_bytes(&self) -> u64 {
        self.bytes
    }

    /// Records queued from the cursor on, handed out or not.
    pub fn records(&self) -> usize {
        self.index.len()
    }

    /// Records handed out and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.handed
    }

    /// Records handed out that a bound (`max_bytes`, `max_age`) dropped since: delivered if
    /// acknowledged, else returned as dropped by [`DiskQueue::rewind`]. They are the oldest of
    /// those handed out.
    pub fn in_flight_dropped(&self) -> usize {
        self.passed.len()
    }

    /// The oldest sample's timestamp in the oldest queued record.
    pub fn oldest_ms(&self) -> Option<i64> {
        self.index.front().map(|e| e.meta.oldest_ms)
    }

    /// Damaged records skipped since the queue was opened (at open and since).
    pub fn corrupt_records(&self) -> u64 {
        self.corrupt_records
    }

    /// The oldest `newest_ms` a record may have at `now_ms`.
    fn horizon(&self, now_ms: i64) -> Option<i64> {
        let age = self.config.max_age?;
        Some(now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)))
    }

    /// Appends `records` (oldest first) in one write, after dropping what the bounds say to drop.
    ///
    /// `now_ms` is the wall clock in Unix milliseconds, for `max_age`. On an error nothing of
    /// `records` is queued (a part written is cut back before the next append) and the bound
    /// drops no older record; the queue stays usable.
    pub fn append(&mut self, records: &[RecordIn<'_>], now_ms: i64) -> Result<Appended, AppendError> {
        let cursor_before = self.cursor();
        let mut front = Runs::default();
        let mut batch = Runs::default();
        if let Some(horizon) = self.horizon(now_ms) {
            while self.index.front().is_some_and(|e| e.meta.newest_ms < horizon) {
                self.drop_front(DropReason::TooOld, &mut front);
            }
        }
        let horizon = self.horizon(now_ms);
        // Encode what may be queued; `kept` holds each record's length and meta.
        self.buf.clear();
        let mut kept: Vec<(u32, Meta)> = Vec::with_capacity(records.len());
        for r in records {
            let len = encoded_len(r.payload.len()) as u64;
            if horizon.is_some_and(|h| r.meta.newest_ms < h) {
                batch.add(DropReason::TooOld, &r.meta, len);
            } else if len > self.config.max_bytes || frame::encode(r, &mut self.buf).is_err() {
                batch.add(DropReason::QueueFull, &r.meta, len);
            } else {
                kept.push((len as u32, r.meta));
                batch.gap();
            }
        }
        // The bound: DropNewest keeps the records that fit; DropOldest drops the batch's own
        // oldest records while the batch alone is over it (older records go after the write).
        let mut skip = 0usize; // bytes of buf not written, from the front
        match self.config.when_full {
            WhenFull::DropNewest => {
                let room = self.config.max_bytes.saturating_sub(self.bytes);
                let (mut total, mut fit) = (0u64, 0);
                while fit < kept.len() && total + u64::from(kept[fit].0) <= room {
                    total += u64::from(kept[fit].0);
                    fit += 1;
                }
                let mut newest = Dropped::none(DropReason::QueueFull);
                for (len, meta) in kept.drain(fit..) {
                    newest.add(&meta, u64::from(len));
                }
                batch.push(newest);
                self.buf.truncate(total as usize);
            }
            WhenFull::DropOldest => {
                let mut total: u64 = kept.iter().map(|(len, _)| u64::from(*len)).sum();
                let mut oldest = Dropped::none(DropReason::QueueFull);
                let mut n = 0;
                while total > self.config.max_bytes {
                    let (len, meta) = kept[n];
                    oldest.add(&meta, u64::from(len));
                    total -= u64::from(len);
                    skip += len as usize;
                    n += 1;
                }
                kept.drain(..n);
                batch.push(oldest);
            }
        }
        let samples: u64 = kept.iter().map(|(_, m)| u64::from(m.samples)).sum();
        let mut appended = Appended { records: kept.len() as u64, samples, dropped: Vec::new() };
        if !kept.is_empty() {
            let start = match self.write(skip) {
                Ok(start) => start,
                Err(error) => {
                    if self.cursor() != cursor_before {
                        self.cursor_moved_quietly();
                    }
                    let mut dropped = front.finish();
                    dropped.extend(batch.finish());
                    let bytes = (self.buf.len() - skip) as u64;
                    return Err(AppendError { records: appended.records, samples, bytes, dropped, error });
                }
            };
            let mut at = start;
            for (len, meta) in kept {
                self.index.push_back(Entry { start: at, len, meta });
                at += u64::from(len);
                self.bytes += u64::from(len);
            }
        }
        while self.bytes > self.config.max_bytes {
            self.drop_front(DropReason::QueueFull, &mut front);
        }
        appended.dropped = front.finish();
        appended.dropped.extend(batch.finish());
        if self.cursor() != cursor_before {
            self.cursor_moved_quietly();
        }
        Ok(appended)
    }

    /// Drops the oldest queued record: reported in `runs`, or kept in `passed` when in flight.
    fn drop_front(&mut self, reason: DropReason, runs: &mut Runs) {
        let Some(e) = self.index.pop_front() else { return };
        self.bytes -= u64::from(e.len);
        if self.handed > 0 {
            self.handed -= 1;
            self.passed.push((e, reason));
        } else {
            runs.add(reason, &e.meta, u64::from(e.len));
        }
    }

    /// Writes `buf[skip..]` at the end in one call; returns the position it starts at.
    fn write(&mut self, skip: usize) -> Result<u64, DiskError> {
        let seg = self.writable_segment()?;
        let s = &mut self.segments[seg];
        let path = self.config.dir.join(segment::file_name(s.start));
        let file = match &s.file {
            Some(f) => f,
            None => s.file.insert(self.fs.open(&path).map_err(|e| DiskError::new(Op::Open, &path, e))?),
        };
        let bytes = &self.buf[skip..];
        if let Err(e) = file.write_at(bytes, s.len) {
            // Cut back what was written of it; if that fails too, the next append does.
            self.tail_dirty = file.set_len(s.len).is_err();
            return Err(DiskError::new(Op::Write, path, e));
        }
        let start = s.end();
        s.len += bytes.len() as u64;
        self.write_pos = s.end();
        if !self.pending.files.contains(&s.start) {
            self.pending.files.push(s.start);
        }
        Ok(start)
    }

    /// The index of the segment to write to: the last one if it ends at `write_pos`, is clean
    /// and not full, else a new one starting at `write_pos`.
    fn writable_segment(&mut self) -> Result<usize, DiskError> {
        if let Some(s) = self.segments.back_mut() {
            if s.end() == self.write_pos && s.len < self.config.segment_bytes {
                if !self.tail_dirty {
                    return Ok(self.segments.len() - 1);
                }
                let path = self.config.dir.join(segment::file_name(s.start));
                let len = s.len;
                let cut = match &s.file {
                    Some(f) => f.set_len(len),
                    None => self.fs.open(&path).and_then(|f| f.set_len(len).map(|()| f)).map(|f| {
                        s.file = Some(f);
                    }),
                };
                match cut {
                    Ok(()) => {
                        self.tail_dirty = false;
                        return Ok(self.segments.len() - 1);
                    }
                    // An empty segment is named after write_pos: nowhere else to go.
                    Err(e) if s.len == 0 => return Err(DiskError::new(Op::Truncate, path, e)),
                    // Leave the garbage behind: the next segment starts at write_pos, and a
                    // segment is never read past the next one's start.
                    Err(_) => {}
                }
            }
        }
        let start = self.write_pos;
        let path = self.path(&segment::file_name(start));
        let file = self.fs.create(&path).map_err(|e| DiskError::new(Op::Create, &path, e))?;
        self.tail_dirty = false;
        self.pending.dir = true;
        // The full segment before it may be wholly acknowledged already.
        self.segments.push_back(Segment { start, len: 0, file: Some(file) });
        self.retire();
        Ok(self.segments.len().saturating_sub(1))
    }

    /// Hands out the oldest record not handed out since the last [`DiskQueue::rewind`]; the
    /// cursor does not move until [`DiskQueue::ack`].
    ///
    /// A record that fails its checksum is dropped (`corrupt`); one that cannot be read
    /// [`READ_TRIES`] times in a row is dropped (`disk_error`): both are returned as
    /// [`Next::Dropped`]. An error is returned for the earlier failed reads.
    pub fn next_record(&mut self) -> Result<Next, DiskError> {
        let Some(e) = self.index.get(self.handed).copied() else { return Ok(Next::Empty) };
        match self.read(&e) {
            Ok(Some(payload)) => {
                self.read_failures = 0;
                self.handed += 1;
                Ok(Next::Record(Position { start: e.start, end: e.end() }, Record { meta: e.meta, payload }))
            }
            Ok(None) => {
                self.read_failures = 0;
                self.corrupt_records += 1;
                self.remove_handed();
                Ok(Next::Dropped(Dropped::one(DropReason::Corrupt, &e.meta, u64::from(e.len))))
            }
            Err(err) => {
                self.read_failures += 1;
                if self.read_failures < READ_TRIES {
                    return Err(err);
                }
                tracing::warn!(error = %err, position = e.start, "disk queue: dropping an unreadable record");
                self.read_failures = 0;
                self.remove_handed();
                Ok(Next::Dropped(Dropped::one(DropReason::DiskError, &e.meta, u64::from(e.len))))
            }
        }
    }

    /// Removes `index[handed]`, which could not be handed out.
    fn remove_handed(&mut self) {
        if let Some(e) = self.index.remove(self.handed) {
            self.bytes -= u64::from(e.len);
        }
        if self.handed == 0 {
            self.cursor_moved_quietly();
        }
    }

    /// The payload of `e` if its header and checksums hold, `None` if damaged.
    fn read(&mut self, e: &Entry) -> Result<Option<Vec<u8>>, DiskError> {
        let seg = self.segments.partition_point(|s| s.start <= e.start).checked_sub(1);
        let Some(s) = seg.map(|i| &mut self.segments[i]).filter(|s| e.end() <= s.end()) else {
            return Ok(None);
        };
        let path = self.config.dir.join(segment::file_name(s.start));
        let file = match &s.file {
            Some(f) => f,
            None => s.file.insert(self.fs.open(&path).map_err(|err| DiskError::new(Op::Open, &path, err))?),
        };
        let offset = e.start - s.start;
        let mut head = [0; HEADER_LEN];
        file.read_exact_at(&mut head, offset).map_err(|err| DiskError::new(Op::Read, &path, err))?;
        let Some(header) =
            decode_header(&head).filter(|h| h.record_len() == e.len as usize && h.meta == e.meta)
        else {
            return Ok(None);
        };
        // The length is the index's, checked when the record was written or scanned, and again here.
        let mut payload = vec![0; header.payload_len as usize];
        file.read_exact_at(&mut payload, offset + HEADER_LEN as u64)
            .map_err(|err| DiskError::new(Op::Read, &path, err))?;
        Ok(header.checks(&payload).then_some(payload))
    }

    /// Acknowledges the record at `pos` and every record before it: the cursor moves past it,
    /// and the `cursor` file is replaced (no fsync: [`DiskQueue::sync_job`] makes it durable).
    ///
    /// An error means the `cursor` file could not be written: the acknowledgement holds in
    /// memory, but a crash before the next successful write or sync would send those records
    /// again.
    pub fn ack(&mut self, pos: Position) -> Result<(), DiskError> {
        if pos.end <= self.cursor() {
            // A record the bounds passed while it was in flight: delivered after all. The cursor
            // file may still be behind the drop that passed it.
            self.passed.retain(|(e, _)| e.end() > pos.end);
            return self.cursor_moved();
        }
        self.passed.clear();
        while self.index.front().is_some_and(|e| e.end() <= pos.end) {
            if let Some(e) = self.index.pop_front() {
                self.bytes -= u64::from(e.len);
            }
            self.handed = self.handed.saturating_sub(1);
        }
        self.cursor_moved()
    }

    /// Hands out from the cursor again (after a failed send). Returns the records that were in
    /// flight when a bound dropped them: not acknowledged, they are lost; count them.
    pub fn rewind(&mut self) -> Vec<Dropped> {
        self.handed = 0;
        self.read_failures = 0;
        let mut runs = Runs::default();
        for (e, reason) in self.passed.drain(..) {
            runs.add(reason, &e.meta, u64::from(e.len));
        }
        runs.finish()
    }

    /// After the cursor moved without a caller to tell of a failure: logs it.
    fn cursor_moved_quietly(&mut self) {
        if let Err(e) = self.cursor_moved() {
            tracing::warn!(error = %e, "disk queue: the cursor file is behind (a crash would resend)");
        }
    }

    /// Retires the segments the cursor passed and replaces the `cursor` file.
    fn cursor_moved(&mut self) -> Result<(), DiskError> {
        self.retire();
        let c = self.cursor();
        if self.cursor_file == Some(c) {
            return Ok(());
        }
        let (tmp, path) = (self.path(cursor::ACKED_TMP), self.path(cursor::ACKED));
        // A new file each time, never the old one emptied: the old one's bytes may be all a power loss keeps
        // of it (its emptying was not synced), and once renamed to `cursor` (a later sync makes the name
        // durable) an old position would come back as the cursor, past records written below it since.
        match self.fs.remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(DiskError::new(Op::Remove, &tmp, e))
            }
            _ => {}
        }
        let file = self.fs.create(&tmp).map_err(|e| DiskError::new(Op::Create, &tmp, e))?;
        file.write_at(&cursor::encode(c), 0).map_err(|e| DiskError::new(Op::Write, &tmp, e))?;
        drop(file);
        self.fs.rename(&tmp, &path).map_err(|e| DiskError::new(Op::Rename, &path, e))?;
        self.cursor_file = Some(c);
        Ok(())
    }

    /// Moves the segments wholly below the cursor to the list a sync removes (once the cursor
    /// that passes them is durable). The segment being written stays until it is full.
    pub(crate) fn retire(&mut self) {
        let c = self.cursor();
        while let Some(s) = self.segments.front() {
            let writing = self.segments.len() == 1
                && s.end() == self.write_pos
                && s.len < self.config.segment_bytes
                && !self.tail_dirty;
            if s.end() > c || writing {
                break;
            }
            if let Some(s) = self.segments.pop_front() {
                self.pending.retired.push(s.start);
            }
        }
    }

    /// What a sync must make durable, taken under the caller's lock (no I/O but `dup`):
    /// run the job on a blocking thread, without the lock.
    pub fn sync_job(&mut self) -> SyncJob<F> {
        let returned = std::mem::take(&mut *self.shared.returned.lock().unwrap_or_else(|e| e.into_inner()));
        self.pending.merge(returned);
        let pending = std::mem::take(&mut self.pending);
        let files = pending
            .files
            .iter()
            .filter_map(|&start| {
                let s = self.segments.iter().find(|s| s.start == start)?;
                let handle = s.file.as_ref().and_then(|f| f.try_clone().ok());
                Some((start, self.config.dir.join(segment::file_name(start)), handle))
            })
            .collect();
        SyncJob {
            fs: self.fs.clone(),
            dir: self.config.dir.clone(),
            files,
            dir_dirty: pending.dir,
            cursor: self.cursor(),
            retired: pending.retired,
            shared: self.shared.clone(),
        }
    }

    /// [`DiskQueue::sync_job`] and [`SyncJob::run`] at once, for a caller without another task
    /// (tests, tools, shutdown).
    pub fn sync(&mut self) -> Result<Synced, DiskError> {
        self.sync_job().run()
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }
}
