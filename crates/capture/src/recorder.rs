//! [`Recorder`]: the writer thread behind every [`crate::Tap`], with a bounded queue, file rotation by size
//! and age, and a bound on the total on disk.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::format::{Direction, Record, RecordKind, Target};
use crate::write::{prepare_append, Writer};
use crate::Anchor;

/// Where a [`Recorder`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// One file, appended to (a new section per run). Never rotated.
    File(PathBuf),
    /// A directory of files `telemon-<UTC time>-<n>.pcapng`, rotated by size and age.
    Dir(PathBuf),
}

/// How a [`Recorder`] writes.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// Where.
    pub destination: Destination,
    /// `shb_userappl` of each section (e.g. `telemon 0.1.0`).
    pub application: String,
    /// With [`Destination::Dir`]: start a new file when the current one reaches this size.
    pub max_file_bytes: Option<u64>,
    /// With [`Destination::Dir`]: start a new file when the current one is this old.
    pub max_file_age: Option<Duration>,
    /// With [`Destination::Dir`]: delete the oldest recordings while the directory's recordings take more.
    pub max_total_bytes: Option<u64>,
    /// The most bytes of data queued for the writer thread; beyond that, data is dropped and counted.
    pub queue_bytes: usize,
}

impl RecorderConfig {
    /// Writes to `destination`, naming `application`, with a 16 MiB queue, no rotation and no disk bound.
    pub fn new(destination: Destination, application: impl Into<String>) -> Self {
        RecorderConfig {
            destination,
            application: application.into(),
            max_file_bytes: None,
            max_file_age: None,
            max_total_bytes: None,
            queue_bytes: 16 << 20,
        }
    }
}

/// What a [`Recorder`] did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Records written.
    pub records: u64,
    /// Bytes written to files (blocks, headers included).
    pub bytes_written: u64,
    /// Records dropped because the queue was full or the disk failed.
    pub lost_records: u64,
    /// Data bytes in those records.
    pub lost_bytes: u64,
    /// Files started.
    pub files: u64,
    /// Old files deleted to keep within `max_total_bytes`.
    pub files_deleted: u64,
}

/// How long the writer thread lets records gather between two drains of its queue.
const BATCH: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
struct Counters {
    records: AtomicU64,
    bytes_written: AtomicU64,
    lost_records: AtomicU64,
    lost_bytes: AtomicU64,
    files: AtomicU64,
    files_deleted: AtomicU64,
}

enum Msg {
    Record { target: u32, at: Instant, dropped: u64, kind: RecordKind },
    Flush(SyncSender<()>),
    Stop,
}

fn msg_size(kind: &RecordKind) -> usize {
    match kind {
        RecordKind::Data { bytes, .. } | RecordKind::Other(bytes) => bytes.len() + 64,
        _ => 64,
    }
}

#[derive(Debug)]
struct Shared {
    tx: SyncSender<Msg>,
    queued: Arc<AtomicUsize>,
    max_queue: usize,
    counters: Arc<Counters>,
    next_target: AtomicU32,
    /// Every registered target and its counts, by id (the writer thread copies a target's entry on its
    /// first record).
    targets: Arc<Mutex<HashMap<u32, Registered>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

/// Writes recordings from its own thread. Cheap to clone; the thread ends (after writing what is queued)
/// when [`Recorder::finish`] is called or every handle, including every [`TargetRecorder`], is dropped.
#[derive(Debug, Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
}

impl Recorder {
    /// Starts the writer thread. Fails if the destination cannot be prepared: the directory is created
    /// and must take a new file, an existing file must be a recording (its crash-cut tail is removed), a new
    /// file's directory must take it.
    ///
    /// A file is created with the first record it holds: a recorder that records nothing (a command that
    /// fails to start, a target that never connects) leaves no file behind, not even an empty one.
    pub fn start(config: RecorderConfig) -> io::Result<Recorder> {
        let queued = Arc::new(AtomicUsize::new(0));
        let counters = Arc::new(Counters::default());
        let registered: Arc<Mutex<HashMap<u32, Registered>>> = Arc::default();
        let mut thread = WriterThread::new(config.clone(), Arc::clone(&queued), Arc::clone(&counters));
        thread.registered = Arc::clone(&registered);
        // A bad destination is an error now, not at the first record.
        thread.appending = prepare(&config.destination)?;
        // Each message is small or bounded by queue_bytes; the count bound keeps tiny records bounded too.
        let (tx, rx) = sync_channel(65_536);
        let handle =
            std::thread::Builder::new().name("telemon-recorder".into()).spawn(move || thread.run(rx))?;
        Ok(Recorder {
            shared: Arc::new(Shared {
                tx,
                queued,
                max_queue: config.queue_bytes,
                counters,
                next_target: AtomicU32::new(0),
                targets: registered,
                thread: Mutex::new(Some(handle)),
            }),
        })
    }

    /// Registers a target; its records go through the returned handle (one per target, shared by its
    /// connections).
    pub fn target(&self, target: Target) -> Arc<TargetRecorder> {
        let id = self.shared.next_target.fetch_add(1, Ordering::Relaxed);
        // Registered beside the queue, never through it: registering must not wait for a full queue, and a
        // target's description must never be dropped (its records would be unreadable).
        let counts = Arc::new(TargetCounts::default());
        let entry = (target, Arc::clone(&counts));
        self.shared.targets.lock().unwrap_or_else(|e| e.into_inner()).insert(id, entry);
        Arc::new(TargetRecorder { shared: Arc::clone(&self.shared), id, lost: AtomicU64::new(0), counts })
    }

    /// What it did so far.
    pub fn stats(&self) -> RecorderStats {
        self.shared.counters.snapshot()
    }

    /// Waits until everything queued before this call is written and flushed (blocking).
    pub fn flush(&self) {
        let (tx, rx) = sync_channel(1);
        if self.shared.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// Writes what is queued, closes the file and stops the thread (blocking). Records sent after this are
    /// lost and counted.
    pub fn finish(&self) -> RecorderStats {
        let handle = self.shared.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            if self.shared.tx.send(Msg::Stop).is_ok() {
                let _ = handle.join();
            }
        }
        self.stats()
    }
}

impl Counters {
    fn snapshot(&self) -> RecorderStats {
        RecorderStats {
            records: self.records.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            lost_records: self.lost_records.load(Ordering::Relaxed),
            lost_bytes: self.lost_bytes.load(Ordering::Relaxed),
            files: self.files.load(Ordering::Relaxed),
            files_deleted: self.files_deleted.load(Ordering::Relaxed),
        }
    }
}

/// One target's handle on a [`Recorder`]: records never block the caller; when the queue is full the
/// record is dropped, counted in [`RecorderStats`], and the next record that gets through says how many
/// were lost before it (`epb_dropcount`).
#[derive(Debug)]
pub struct TargetRecorder {
    shared: Arc<Shared>,
    id: u32,
    lost: AtomicU64,
    counts: Arc<TargetCounts>,
}

/// A registered target, with the counts the writer thread adds to.
type Registered = (Target, Arc<TargetCounts>);

/// What was recorded of one target, and what was lost.
#[derive(Debug, Default)]
struct TargetCounts {
    written: AtomicU64,
    dropped: AtomicU64,
}

impl TargetRecorder {
    /// Bytes of this target's records written to files so far (pcapng blocks, headers included, and its
    /// interface description in each file).
    pub fn bytes_written(&self) -> u64 {
        self.counts.written.load(Ordering::Relaxed)
    }

    /// Data bytes of this target that were not recorded: the queue was full (the disk fell behind) or
    /// writing failed.
    pub fn bytes_dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    /// Records `bytes` going `direction`, now.
    pub fn data(&self, direction: Direction, bytes: &[u8]) {
        let size = bytes.len() + 64;
        if !self.reserve(size, bytes.len()) {
            return;
        }
        self.send(size, bytes.len(), RecordKind::Data { direction, bytes: bytes.to_vec() });
    }

    /// Records `kind` now.
    pub fn record(&self, kind: RecordKind) {
        let size = msg_size(&kind);
        let data = size - 64;
        if self.reserve(size, data) {
            self.send(size, data, kind);
        }
    }

    fn reserve(&self, size: usize, data: usize) -> bool {
        let before = self.shared.queued.fetch_add(size, Ordering::Relaxed);
        if before + size > self.shared.max_queue {
            self.shared.queued.fetch_sub(size, Ordering::Relaxed);
            self.lose(data);
            return false;
        }
        true
    }

    fn send(&self, size: usize, data: usize, kind: RecordKind) {
        let dropped = self.lost.swap(0, Ordering::Relaxed);
        let msg = Msg::Record { target: self.id, at: Instant::now(), dropped, kind };
        match self.shared.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.queued.fetch_sub(size, Ordering::Relaxed);
                self.lost.fetch_add(dropped, Ordering::Relaxed);
                self.lose(data);
            }
        }
    }

    fn lose(&self, data: usize) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        let c = &self.shared.counters;
        c.lost_records.fetch_add(1, Ordering::Relaxed);
        c.lost_bytes.fetch_add(data as u64, Ordering::Relaxed);
        self.counts.dropped.fetch_add(data as u64, Ordering::Relaxed);
    }
}

struct OpenFile {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
    opened: Instant,
    anchor: Anchor,
    /// Target id -> interface id in this file's section.
    interfaces: HashMap<u32, u32>,
}

/// Checks that `destination` can be written without creating a recording there; returns an existing file
/// opened and made ready for appending ([`prepare_append`]), which the first record then uses.
fn prepare(destination: &Destination) -> io::Result<Option<File>> {
    let dir = match destination {
        Destination::Dir(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.as_path()
        }
        Destination::File(path) => match OpenOptions::new().read(true).write(true).open(path) {
            Ok(mut file) => {
                cut_unfinished_tail(&mut file, path)?;
                return Ok(Some(file));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            },
            Err(e) => return Err(e),
        },
    };
    // A file that has no name (O_TMPFILE where the system has it) and is gone when closed: whether the
    // directory takes a new file, leaving nothing behind.
    tempfile::tempfile_in(dir).map(|_| None)
}

/// [`prepare_append`] on the recording at `path`, logging what it cut.
fn cut_unfinished_tail(file: &mut File, path: &Path) -> io::Result<()> {
    let check = prepare_append(file)?;
    if check.cut > 0 {
        tracing::warn!(
            path = %path.display(),
            cut = check.cut,
            "recording: removed an unfinished block at the end of the file before appending"
        );
    }
    Ok(())
}

struct WriterThread {
    config: RecorderConfig,
    /// With [`Destination::File`]: the existing file, checked at start, that the first record appends to.
    appending: Option<File>,
    targets: HashMap<u32, Registered>,
    registered: Arc<Mutex<HashMap<u32, Registered>>>,
    file: Option<OpenFile>,
    seq: u64,
    queued: Arc<AtomicUsize>,
    counters: Arc<Counters>,
    /// After a write error: when to try a new file.
    retry_at: Option<Instant>,
    last_lost_report: (Instant, u64),
}

impl WriterThread {
    fn new(config: RecorderConfig, queued: Arc<AtomicUsize>, counters: Arc<Counters>) -> Self {
        WriterThread {
            config,
            appending: None,
            targets: HashMap::new(),
            registered: Arc::default(),
            file: None,
            seq: 0,
            queued,
            counters,
            retry_at: None,
            last_lost_report: (Instant::now(), 0),
        }
    }

    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            let msg = match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => {
                    self.tick();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if matches!(msg, Msg::Stop) {
                break;
            }
            self.handle(msg);
            // Drain what is there, then flush.
            let mut stop = false;
            while let Ok(msg) = rx.try_recv() {
                if matches!(msg, Msg::Stop) {
                    stop = true;
                    break;
                }
                self.handle(msg);
            }
            if stop {
                break;
            }
            self.flush();
            self.tick();
            // Let records gather before the next drain: one wake-up and one write per batch instead of per
            // record (a crash loses at most one batch). Idle, the thread blocks in `recv` above.
            std::thread::sleep(BATCH);
        }
        self.flush();
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Flush(ack) => {
                self.flush();
                let _ = ack.send(());
            }
            Msg::Stop => {}
            Msg::Record { target, at, dropped, kind } => {
                let size = msg_size(&kind);
                self.queued.fetch_sub(size, Ordering::Relaxed);
                if let Err(e) = self.write(target, at, dropped, kind) {
                    tracing::error!(error = %e, "recording: writing failed; records are lost until a new file opens");
                    self.counters.lost_records.fetch_add(1, Ordering::Relaxed);
                    self.counters.lost_bytes.fetch_add((size - 64) as u64, Ordering::Relaxed);
                    if let Some((_, counts)) = self.targets.get(&target) {
                        counts.dropped.fetch_add((size - 64) as u64, Ordering::Relaxed);
                    }
                    self.file = None;
                    self.retry_at = Some(Instant::now() + Duration::from_secs(1));
                }
            }
        }
    }

    fn write(&mut self, target: u32, at: Instant, dropped: u64, kind: RecordKind) -> io::Result<()> {
        if !self.targets.contains_key(&target) {
            let registered = self.registered.lock().unwrap_or_else(|e| e.into_inner()).get(&target).cloned();
            let t = registered.ok_or_else(|| io::Error::other("record of an unknown target"))?;
            self.targets.insert(target, t);
        }
        self.rotate_if_due();
        if self.file.is_none() {
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                return Err(io::Error::other("no file open"));
            }
            self.open()?;
        }
        let Some(file) = self.file.as_mut() else { return Err(io::Error::other("no file open")) };
        let (t, counts) =
            self.targets.get(&target).ok_or_else(|| io::Error::other("record of an unknown target"))?;
        let before = file.writer.bytes_written();
        let interface = match file.interfaces.get(&target) {
            Some(&i) => i,
            None => {
                let i = file.writer.interface(t)?;
                file.interfaces.insert(target, i);
                i
            }
        };
        file.writer.record(&Record { interface, time_ns: file.anchor.ns_at(at), dropped, kind })?;
        let written = file.writer.bytes_written() - before;
        self.counters.records.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_written.fetch_add(written, Ordering::Relaxed);
        counts.written.fetch_add(written, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&mut self) {
        if let Some(file) = self.file.as_mut() {
            if let Err(e) = file.writer.flush() {
                tracing::error!(error = %e, path = %file.path.display(), "recording: flush failed");
            }
        }
    }

    /// Periodic work: age-based rotation while idle (the file is closed; the next record starts the next
    /// one), and reporting losses.
    fn tick(&mut self) {
        self.rotate_if_due();
        let lost = self.counters.lost_records.load(Ordering::Relaxed);
        if lost > self.last_lost_report.1 && self.last_lost_report.0.elapsed() >= Duration::from_secs(10) {
            tracing::warn!(
                lost_records = lost,
                lost_bytes = self.counters.lost_bytes.load(Ordering::Relaxed),
                "recording: the disk does not keep up; records were dropped"
            );
            self.last_lost_report = (Instant::now(), lost);
        }
    }

    /// Closes the current file when it has reached its size or age (files of a directory only).
    fn rotate_if_due(&mut self) {
        if !matches!(self.config.destination, Destination::Dir(_)) {
            return;
        }
        let Some(file) = &self.file else { return };
        let too_big = self.config.max_file_bytes.is_some_and(|max| file.writer.bytes_written() >= max);
        let too_old = self.config.max_file_age.is_some_and(|max| file.opened.elapsed() >= max);
        if too_big || too_old {
            // The next file starts with the next record.
            self.flush();
            self.file = None;
        }
    }

    fn open(&mut self) -> io::Result<()> {
        let application = self.config.application.clone();
        let (file, path) = match &self.config.destination {
            Destination::File(path) => match self.appending.take() {
                Some(file) => (file, path.clone()),
                None => {
                    let mut file =
                        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
                    cut_unfinished_tail(&mut file, path)?;
                    (file, path.clone())
                }
            },
            Destination::Dir(dir) => {
                self.seq += 1;
                let path = dir.join(file_name(SystemTime::now(), self.seq));
                (OpenOptions::new().write(true).create_new(true).open(&path)?, path)
            }
        };
        let writer = Writer::new(BufWriter::with_capacity(64 * 1024, file), &application)?;
        self.counters.files.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_written.fetch_add(writer.bytes_written(), Ordering::Relaxed);
        self.file = Some(OpenFile {
            writer,
            path,
            opened: Instant::now(),
            anchor: Anchor::now(),
            interfaces: HashMap::new(),
        });
        self.retry_at = None;
        self.enforce_total();
        Ok(())
    }

    /// Deletes the oldest recordings of the directory while they take more than `max_total_bytes`; the
    /// current file is never deleted.
    fn enforce_total(&mut self) {
        let (Destination::Dir(dir), Some(max)) = (&self.config.destination, self.config.max_total_bytes)
        else {
            return;
        };
        let current = self.file.as_ref().map(|f| f.path.clone());
        let mut files = match recordings_in(dir) {
            Ok(files) => files,
            Err(e) => {
                tracing::error!(error = %e, dir = %dir.display(), "recording: cannot list the directory");
                return;
            }
        };
        let mut total: u64 = files.iter().map(|(_, len)| len).sum();
        files.sort();
        for (path, len) in files {
            if total <= max {
                break;
            }
            if Some(&path) == current.as_ref() {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    total -= len;
                    self.counters.files_deleted.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(path = %path.display(), bytes = len, "recording: deleted the oldest recording to stay within --record-max-total");
                }
                Err(e) => tracing::error!(error = %e, path = %path.display(), "recording: cannot delete"),
            }
        }
    }
}

/// The name of the `seq`-th file started at `now`: names sort in the order files were started.
fn file_name(now: SystemTime, seq: u64) -> String {
    let time = humantime::format_rfc3339_millis(now).to_string().replace(':', "-");
    format!("telemon-{time}-{seq:06}.pcapng")
}

/// The recordings (`telemon-*.pcapng`) in `dir`, with their sizes.
pub(crate) fn recordings_in(dir: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("telemon-") && name.ends_with(".pcapng") {
            out.push((entry.path(), entry.metadata()?.len()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_sort_by_start_time() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let a = file_name(t, 9);
        let b = file_name(t + Duration::from_millis(1), 10);
        assert_eq!(a, "telemon-2023-11-14T22-13-20.000Z-000009.pcapng");
        assert!(a < b);
    }
}
