//! Typed errors: each says what was being done, to which file, and what the system answered.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::drops::{DropReason, Dropped};

/// A file-system operation of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Creating the queue directory.
    CreateDir,
    /// Listing the queue directory.
    ListDir,
    /// Opening a file.
    Open,
    /// Creating a file.
    Create,
    /// Reading a file.
    Read,
    /// Writing a file.
    Write,
    /// Cutting a file back.
    Truncate,
    /// Fsyncing a file.
    Sync,
    /// Fsyncing the directory.
    SyncDir,
    /// Renaming a file over another.
    Rename,
    /// Removing a file.
    Remove,
    /// Taking the queue directory's lock.
    Lock,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::CreateDir => "cannot create the queue directory",
            Op::ListDir => "cannot list the queue directory",
            Op::Open => "cannot open",
            Op::Create => "cannot create",
            Op::Read => "cannot read",
            Op::Write => "cannot write",
            Op::Truncate => "cannot cut back",
            Op::Sync => "cannot fsync",
            Op::SyncDir => "cannot fsync the directory",
            Op::Rename => "cannot rename into",
            Op::Remove => "cannot remove",
            Op::Lock => "cannot lock the queue directory",
        })
    }
}

/// An error of the disk queue: an I/O error with the operation and the file, or a directory
/// another queue holds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiskError {
    /// A file-system operation failed.
    #[error("disk queue: {op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: Op,
        /// The file (or directory).
        path: PathBuf,
        /// What the system answered.
        #[source]
        source: io::Error,
    },
    /// [`DiskQueue::open`](super::DiskQueue::open) found the directory locked by another queue, in
    /// this process or another: two queues never share a directory.
    #[error(
        "queue_dir {} is in use by another process (its lock file is held): each telemon needs a queue_dir of its own",
        dir.display()
    )]
    InUse {
        /// The queue directory.
        dir: PathBuf,
    },
}

impl DiskError {
    pub(crate) fn new(op: Op, path: impl Into<PathBuf>, source: io::Error) -> Self {
        DiskError::Io { op, path: path.into(), source }
    }

    /// Whether the disk was full (ENOSPC, or a quota).
    pub fn is_disk_full(&self) -> bool {
        match self {
            DiskError::Io { source, .. } => {
                matches!(source.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded)
            }
            DiskError::InUse { .. } => false,
        }
    }
}

/// An append that wrote nothing durable: its records are dropped (reason `disk_error`), the
/// queue stays usable, and the next append tries again.
#[derive(Debug, thiserror::Error)]
#[error("{records} records ({samples} samples) not queued: {error}")]
pub struct AppendError {
    /// The records of the append that were to be written.
    pub records: u64,
    /// Their samples, to count as dropped.
    pub samples: u64,
    /// Their bytes, as they would have been on disk.
    pub bytes: u64,
    /// The records that the same call dropped before writing (too old, too large); the bound's
    /// drops of older records are not made when the write fails.
    pub dropped: Vec<Dropped>,
    /// The failed operation.
    #[source]
    pub error: DiskError,
}

impl AppendError {
    /// Everything this append dropped: the records it could not write (`disk_error`) and those
    /// in [`AppendError::dropped`].
    pub fn all_dropped(&self) -> impl Iterator<Item = Dropped> + '_ {
        let failed = Dropped {
            reason: DropReason::DiskError,
            records: self.records,
            samples: self.samples,
            bytes: self.bytes,
            oldest_ms: None,
            newest_ms: None,
        };
        self.dropped.iter().copied().chain((self.records > 0).then_some(failed))
    }
}
