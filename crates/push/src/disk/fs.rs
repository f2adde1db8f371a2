//! The file-system calls of the queue, behind a trait, so that the tests can put a file system
//! that tears writes, forgets what was not synced and fails on demand under the same code.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The file in a queue directory whose lock [`Fs::try_lock_dir`] takes on the real file system.
pub const LOCK_FILE: &str = "lock";

/// A file system: the directory operations the queue uses.
///
/// `Clone` so that a [`SyncJob`](super::SyncJob) can carry one to a blocking thread.
pub trait Fs: Clone + Send + Sync + 'static {
    /// An open file.
    type File: FsFile;
    /// A held directory lock: the lock is released when it is dropped.
    type Lock: Send + Sync + 'static;

    /// Takes the exclusive lock on `dir` (which exists) without waiting, for as long as the
    /// returned guard lives: `Ok(None)` when another holder has it, in this process or another.
    fn try_lock_dir(&self, dir: &Path) -> io::Result<Option<Self::Lock>>;

    /// Creates `dir` and its parents when missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries of `dir`.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    /// Creates a file (emptied when it exists) for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Self::File>;
    /// Renames `from` over `to`, atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file. Reads and writes are positional, so one handle serves the writer and the reader.
pub trait FsFile: Send + Sync + 'static + Sized {
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Reads into `buf` from `offset`; returns the bytes read, 0 at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`: one `write` call unless the kernel writes less. On an
    /// error a part of `buf` may have been written.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Cuts (or extends) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's bytes durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Another handle to the same file.
    fn try_clone(&self) -> io::Result<Self>;

    /// Reads exactly `buf.len()` bytes from `offset`; `UnexpectedEof` when the file is shorter.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The operating system's file system, through `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdFs;

impl Fs for StdFs {
    type File = File;
    /// The open [`LOCK_FILE`]: closing it releases the lock.
    type Lock = File;

    /// Locks `dir`'s [`LOCK_FILE`] (created when missing, never removed): `flock(LOCK_EX | LOCK_NB)` on
    /// Unix, `LockFileEx` on Windows, through `fs4`. The kernel releases the lock when the process ends,
    /// however it ends, so a crash never leaves a directory locked. The lock belongs to the open file, so
    /// a second [`DiskQueue::open`](super::DiskQueue::open) of the same directory in the same process is
    /// refused too.
    fn try_lock_dir(&self, dir: &Path) -> io::Result<Option<File>> {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK_FILE))?;
        match fs4::FileExt::try_lock(&file) {
            Ok(()) => Ok(Some(file)),
            Err(fs4::TryLockError::WouldBlock) => Ok(None),
            Err(fs4::TryLockError::Error(e)) => Err(e),
        }
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?.map(|e| e.map(|e| e.file_name())).collect()
    }

    fn open(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(path)
    }

    fn create(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    #[cfg(unix)]
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    /// Windows cannot open a directory as a file; its renames are made durable by the file
    /// system's journal.
    #[cfg(not(unix))]
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}

impl FsFile for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    #[cfg(unix)]
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }

    #[cfg(windows)]
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::windows::fs::FileExt::seek_read(self, buf, offset)
    }

    #[cfg(unix)]
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }

    #[cfg(windows)]
    fn write_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match std::os::windows::fs::FileExt::seek_write(self, buf, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn try_clone(&self) -> io::Result<Self> {
        File::try_clone(self)
    }
}
