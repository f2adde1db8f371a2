//! Making the queue durable without holding it: a [`SyncJob`] is taken under the caller's lock
//! (cheap: cloned handles and numbers) and run on a blocking thread.
//!
//! The order inside a job is what makes deleting safe: the segments written since the last sync
//! are fsynced, then the directory (their names), then `cursor.synced` is written to a temporary
//! file, fsynced, renamed and the directory fsynced again; only then are the segments wholly below
//! that cursor removed. A crash anywhere in between leaves either the old durable cursor with all
//! its segments, or the new one. (Vector's disk buffer once unlinked a data file before its
//! ledger was synced; after a crash the ledger pointed into a file that was gone.)

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::cursor;
use super::error::{DiskError, Op};
use super::fs::{Fs, FsFile};
use super::segment;

/// What the next sync must make durable.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// The starts of the segments written since.
    pub files: Vec<u64>,
    /// Whether entries of the directory changed since (a segment created, one removed).
    pub dir: bool,
    /// The starts of the segments wholly below the cursor, to remove.
    pub retired: Vec<u64>,
}

impl Pending {
    pub fn merge(&mut self, other: Pending) {
        for f in other.files {
            if !self.files.contains(&f) {
                self.files.push(f);
            }
        }
        self.dir |= other.dir;
        for r in other.retired {
            if !self.retired.contains(&r) {
                self.retired.push(r);
            }
        }
    }
}

/// Shared by a queue and its jobs. Neither lock is ever held during a call that `append` waits
/// for: `returned` only to move a list, `durable` only by jobs (one at a time).
#[derive(Debug)]
pub(crate) struct Shared {
    /// What a failed job could not make durable: taken back by the next job.
    pub returned: Mutex<Pending>,
    /// The position in the durable `cursor.synced`, if any; held while a job runs.
    pub durable: Mutex<Option<u64>>,
}

/// The work of one sync, detached from the queue: send it to a blocking thread
/// (`tokio::task::spawn_blocking(move || job.run())`).
pub struct SyncJob<F: Fs> {
    pub(crate) fs: F,
    pub(crate) dir: PathBuf,
    /// Segment starts, paths and handles (`None`: reopened by path).
    pub(crate) files: Vec<(u64, PathBuf, Option<F::File>)>,
    pub(crate) dir_dirty: bool,
    /// The cursor to make durable.
    pub(crate) cursor: u64,
    /// Segments wholly below `cursor`.
    pub(crate) retired: Vec<u64>,
    pub(crate) shared: Arc<Shared>,
}

impl<F: Fs> fmt::Debug for SyncJob<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncJob")
            .field("dir", &self.dir)
            .field("files", &self.files.len())
            .field("cursor", &self.cursor)
            .field("retired", &self.retired)
            .finish_non_exhaustive()
    }
}

/// What a successful sync made durable.
#[derive(Debug, Default)]
pub struct Synced {
    /// The durable cursor: everything before it is acknowledged for good.
    pub cursor: u64,
    /// Segments fsynced.
    pub segments_synced: usize,
    /// Segments removed (wholly below the cursor).
    pub segments_removed: usize,
    /// Segments that could not be removed: tried again by the next sync, or removed at open.
    pub not_removed: Vec<DiskError>,
}

impl<F: Fs> SyncJob<F> {
    /// Fsyncs the segments written since the last sync, the directory, and the cursor, then
    /// removes the segments the durable cursor passed. One job runs at a time (a second waits).
    ///
    /// On an error nothing is removed, and what was to be made durable is handed back to the
    /// queue for the next job.
    pub fn run(self) -> Result<Synced, DiskError> {
        let mut durable = self.shared.durable.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = self.make_durable(&mut durable) {
            let files = self.files.iter().map(|(start, _, _)| *start).collect();
            give_back(&self.shared, Pending { files, dir: self.dir_dirty, retired: self.retired });
            return Err(e);
        }
        let mut synced = Synced {
            cursor: durable.unwrap_or(self.cursor),
            segments_synced: self.files.len(),
            ..Synced::default()
        };
        drop(durable);
        // Every retired segment ends at or before `self.cursor`, durable now (or a later one is).
        let mut kept = Vec::new();
        for start in self.retired {
            let path = self.dir.join(segment::file_name(start));
            match self.fs.remove_file(&path) {
                Ok(()) => synced.segments_removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    synced.not_removed.push(DiskError::new(Op::Remove, path, e));
                    kept.push(start);
                }
            }
        }
        // The removals need not be durable: a segment back after a crash is below the cursor.
        let dir = synced.segments_removed > 0 && self.fs.sync_dir(&self.dir).is_err();
        if !kept.is_empty() || dir {
            give_back(&self.shared, Pending { files: Vec::new(), dir, retired: kept });
        }
        Ok(synced)
    }

    fn make_durable(&self, durable: &mut Option<u64>) -> Result<(), DiskError> {
        for (_, path, handle) in &self.files {
            let done = match handle {
                Some(f) => f.sync(),
                None => match self.fs.open(path) {
                    Ok(f) => f.sync(),
                    // Removed by an earlier job: below a durable cursor, nothing to sync.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(e),
                },
            };
            done.map_err(|e| DiskError::new(Op::Sync, path, e))?;
        }
        if self.dir_dirty {
            self.fs.sync_dir(&self.dir).map_err(|e| DiskError::new(Op::SyncDir, &self.dir, e))?;
        }
        if durable.is_some_and(|d| d >= self.cursor) {
            return Ok(());
        }
        let (tmp, path) = (self.dir.join(cursor::SYNCED_TMP), self.dir.join(cursor::SYNCED));
        let file = self.fs.create(&tmp).map_err(|e| DiskError::new(Op::Create, &tmp, e))?;
        file.write_at(&cursor::encode(self.cursor), 0).map_err(|e| DiskError::new(Op::Write, &tmp, e))?;
        file.sync().map_err(|e| DiskError::new(Op::Sync, &tmp, e))?;
        drop(file);
        self.fs.rename(&tmp, &path).map_err(|e| DiskError::new(Op::Rename, &path, e))?;
        self.fs.sync_dir(&self.dir).map_err(|e| DiskError::new(Op::SyncDir, &self.dir, e))?;
        *durable = Some(self.cursor);
        Ok(())
    }
}

/// Hands what a job left undone back to the queue's next job.
fn give_back(shared: &Shared, back: Pending) {
    shared.returned.lock().unwrap_or_else(|e| e.into_inner()).merge(back);
}
