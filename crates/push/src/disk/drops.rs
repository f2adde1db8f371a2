//! What the queue drops, and why: every drop is handed back to the caller to count.

use crate::stats::reason;

use super::frame::Meta;

/// Why records were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Over `max_bytes` (or a single record over the bound, or over the record size limit).
    QueueFull,
    /// The newest sample was older than `max_age`.
    TooOld,
    /// Not written, or not readable: the disk failed.
    DiskError,
    /// Found damaged on the disk.
    Corrupt,
}

impl DropReason {
    /// The `result` label of `telemon_sender_samples_total` for these drops.
    pub fn result_label(self) -> &'static str {
        match self {
            DropReason::QueueFull => reason::QUEUE_FULL,
            DropReason::TooOld => reason::TOO_OLD,
            DropReason::DiskError => reason::DISK_ERROR,
            DropReason::Corrupt => reason::CORRUPT,
        }
    }
}

/// A run of records dropped together for one reason, in queue order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// Why.
    pub reason: DropReason,
    /// How many records (a damaged region whose header was lost counts as one).
    pub records: u64,
    /// Their samples: the count to add to the drops (0 for a damaged region whose header was lost).
    pub samples: u64,
    /// Their bytes on disk.
    pub bytes: u64,
    /// The oldest `oldest_ms` among them, when their headers were readable.
    pub oldest_ms: Option<i64>,
    /// The newest `newest_ms` among them, when their headers were readable.
    pub newest_ms: Option<i64>,
}

impl Dropped {
    /// Nothing dropped yet, for `reason`.
    pub(crate) fn none(reason: DropReason) -> Self {
        Dropped { reason, records: 0, samples: 0, bytes: 0, oldest_ms: None, newest_ms: None }
    }

    /// One damaged region without a readable header.
    pub(crate) fn region(reason: DropReason, bytes: u64) -> Self {
        Dropped { records: 1, bytes, ..Dropped::none(reason) }
    }

    /// Adds a record of `bytes` bytes described by `meta`.
    pub(crate) fn add(&mut self, meta: &Meta, bytes: u64) {
        self.records += 1;
        self.samples += u64::from(meta.samples);
        self.bytes += bytes;
        self.oldest_ms = Some(self.oldest_ms.map_or(meta.oldest_ms, |t| t.min(meta.oldest_ms)));
        self.newest_ms = Some(self.newest_ms.map_or(meta.newest_ms, |t| t.max(meta.newest_ms)));
    }

    /// The run with one record.
    pub(crate) fn one(reason: DropReason, meta: &Meta, bytes: u64) -> Self {
        let mut d = Dropped::none(reason);
        d.add(meta, bytes);
        d
    }
}

/// Builds the list of runs: consecutive records dropped for the same reason make one run.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    runs: Vec<Dropped>,
    /// Whether the next record of the same reason continues the last run.
    open: bool,
}

impl Runs {
    /// Adds a record to the current run of `reason`, or starts one.
    pub(crate) fn add(&mut self, reason: DropReason, meta: &Meta, bytes: u64) {
        match self.runs.last_mut() {
            Some(last) if self.open && last.reason == reason => last.add(meta, bytes),
            _ => self.runs.push(Dropped::one(reason, meta, bytes)),
        }
        self.open = true;
    }

    /// Ends the current run: a record kept lies between it and the next drop.
    pub(crate) fn gap(&mut self) {
        self.open = false;
    }

    /// Adds a whole run.
    pub(crate) fn push(&mut self, run: Dropped) {
        if run.records > 0 {
            self.runs.push(run);
        }
        self.open = false;
    }

    /// The runs.
    pub(crate) fn finish(self) -> Vec<Dropped> {
        self.runs
    }
}
