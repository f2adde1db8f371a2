//! The disk queue against a model of what it must deliver, on a file system that tears writes,
//! forgets what was not synced, fails on demand and crashes between any two calls.
//!
//! `SimFs` keeps, for each file, the bytes written and the bytes last fsynced, and for the
//! directory, the names as of its last fsync and the creations, renames and removals since. A
//! crash keeps the synced bytes of every file plus any prefix of the rest (sometimes zeroed: the
//! size reached the disk, the data did not), and any subset of the directory changes since the
//! last directory fsync. ENOSPC and EIO are injected at any call (a write may leave a part of
//! itself), a "disk full" state fails every write that grows a file, and a crash can be armed to
//! strike at the N-th next call — inside an append, an ack, a sync (between writing the cursor and
//! removing a segment), or the open that follows a crash.
//!
//! Records carry their id in their timestamps and payload. After every reopen the checker reads
//! the whole queue and asserts: the open succeeded; every record appended and then covered by a
//! successful sync is there unless it was acknowledged or reported dropped; nothing acknowledged
//! before a successful sync is there; the ids are increasing and were all appended once. Within
//! one life it asserts that records come out in order with no id skipped except the ones reported
//! dropped (each drop's time range names the ids), that drops are counted right, and that
//! nothing reported dropped is delivered.
//!
//! A `kill -9` (the process dies, the kernel keeps what it was given) must lose even less: every
//! record queued is still there, and no record whose acknowledgement returned comes back.
//!
//! `DISK_MODEL_CASES=N` runs more cases; `DISK_MODEL_TRACE=1` prints each operation and reopen;
//! `DISK_MODEL_STATS=1 -- --nocapture` prints what the cases exercised (crashes, faults, drops).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use proptest::prelude::*;
use telemon_push::disk::{
    Config, DiskError, DiskQueue, DropReason, Dropped, Fs, FsFile, Meta, Next, Position, RecordIn, StdFs,
    WhenFull,
};

// ---------------------------------------------------------------------------------------------
// The simulated file system

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    NoSpace,
    Eio,
}

impl Fault {
    fn error(self) -> io::Error {
        match self {
            Fault::NoSpace => io::Error::from(io::ErrorKind::StorageFull),
            Fault::Eio => io::Error::other("EIO (injected)"),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Inode {
    data: Vec<u8>,
    synced: Vec<u8>,
}

/// A directory change since the last directory fsync.
#[derive(Debug, Clone)]
enum DirOp {
    Link(String, u64),
    Unlink(String, u64),
    Rename { from: String, to: String, ino: u64 },
}

#[derive(Debug, Default)]
struct Sim {
    inodes: HashMap<u64, Inode>,
    names: BTreeMap<String, u64>,
    durable_names: BTreeMap<String, u64>,
    log: Vec<DirOp>,
    next_ino: u64,
    /// Handles of an earlier life fail.
    generation: u64,
    calls: u64,
    fault: Option<(u64, Fault, bool)>,
    full: bool,
    crash_at: Option<u64>,
    dead: bool,
    crashes: u64,
    kills: u64,
    faults_hit: u64,
    /// The directory lock's holder (the number of the lock taken), if any; the process's end releases it.
    locked: Option<u64>,
    locks_taken: u64,
    /// The next directory lock fails with EIO.
    fail_lock: bool,
}

#[derive(Debug, Clone, Default)]
struct SimFs(Arc<Mutex<Sim>>);

/// A held directory lock of the simulated file system.
#[derive(Debug)]
struct SimLock {
    fs: SimFs,
    number: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut sim = self.fs.lock();
        // A lock of a process that has ended since was released with it.
        if sim.locked == Some(self.number) {
            sim.locked = None;
        }
    }
}

#[derive(Debug)]
struct SimFile {
    fs: SimFs,
    ino: u64,
    generation: u64,
}

/// A deterministic generator for the crash's choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

fn name_of(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

impl SimFs {
    fn lock(&self) -> MutexGuard<'_, Sim> {
        self.0.lock().unwrap()
    }

    /// Counts a call; fails it when the process is gone, a crash strikes now, or a fault is due.
    fn enter(&self, sim: &mut Sim) -> io::Result<()> {
        if sim.dead {
            return Err(io::Error::other("the process is gone"));
        }
        sim.calls += 1;
        if sim.crash_at == Some(sim.calls) {
            sim.dead = true;
            return Err(io::Error::other("the process is gone"));
        }
        if let Some((at, fault, partial)) = sim.fault {
            if at == sim.calls {
                sim.fault = None;
                sim.faults_hit += 1;
                return Err(io::Error::new(fault.error().kind(), format!("{fault:?} partial={partial}")));
            }
        }
        Ok(())
    }

    fn arm_fault(&self, after: u64, fault: Fault, partial: bool) {
        let mut sim = self.lock();
        let at = sim.calls + after + 1;
        sim.fault = Some((at, fault, partial));
    }

    fn arm_crash(&self, after: u64) {
        let mut sim = self.lock();
        let at = sim.calls + after + 1;
        sim.crash_at = Some(at);
    }

    fn disarm_crash(&self) {
        self.lock().crash_at = None;
    }

    fn set_full(&self, full: bool) {
        self.lock().full = full;
    }

    fn dead(&self) -> bool {
        self.lock().dead
    }

    /// The process is killed (`kill -9`): the kernel keeps everything it was given.
    fn kill(&self) {
        let mut sim = self.lock();
        sim.generation += 1;
        sim.fault = None;
        sim.crash_at = None;
        sim.full = false;
        sim.dead = false;
        sim.locked = None;
        sim.kills += 1;
    }

    /// The machine loses power: what was not synced is kept in part, or not at all.
    fn crash(&self, seed: u64) {
        let mut rng = Rng(seed | 1);
        let mut sim = self.lock();
        let mut names = sim.durable_names.clone();
        for op in std::mem::take(&mut sim.log) {
            if !rng.coin() {
                continue;
            }
            match op {
                DirOp::Link(name, ino) => {
                    names.insert(name, ino);
                }
                DirOp::Unlink(name, ino) => {
                    if names.get(&name) == Some(&ino) {
                        names.remove(&name);
                    }
                }
                DirOp::Rename { from, to, ino } => {
                    if names.get(&from) == Some(&ino) {
                        names.remove(&from);
                    }
                    names.insert(to, ino);
                }
            }
        }
        let live: BTreeSet<u64> = names.values().copied().collect();
        let mut inodes = HashMap::new();
        for ino in live {
            let old = sim.inodes.remove(&ino).unwrap_or_default();
            let data = if old.data == old.synced || rng.below(5) == 0 {
                old.synced
            } else {
                let common = old.data.iter().zip(&old.synced).take_while(|(a, b)| a == b).count();
                // All of it, none of it past the synced prefix, or a cut anywhere.
                let keep = match rng.below(3) {
                    0 => old.data.len(),
                    1 => common,
                    _ => common + rng.below((old.data.len() - common) as u64 + 1) as usize,
                };
                let mut data = old.data[..keep].to_vec();
                if rng.below(3) == 0 {
                    // The size reached the disk, the bytes did not.
                    let zeroed = rng.below((keep - common) as u64 + 1) as usize;
                    data[keep - zeroed..].fill(0);
                }
                data
            };
            inodes.insert(ino, Inode { synced: data.clone(), data });
        }
        sim.inodes = inodes;
        sim.names = names.clone();
        sim.durable_names = names;
        sim.generation += 1;
        sim.fault = None;
        sim.crash_at = None;
        sim.full = false;
        sim.dead = false;
        sim.locked = None;
        sim.crashes += 1;
    }

    fn file(&self, sim: &Sim, ino: u64) -> SimFile {
        SimFile { fs: self.clone(), ino, generation: sim.generation }
    }
}

impl Fs for SimFs {
    type File = SimFile;
    type Lock = SimLock;

    /// One holder at a time. A counted call, which the property's faults and crashes can strike; `fail_lock`
    /// fails the next lock (the unit test's fault on it).
    fn try_lock_dir(&self, _dir: &Path) -> io::Result<Option<SimLock>> {
        let mut sim = self.lock();
        self.enter(&mut sim)?;
        if std::mem::take(&mut sim.fail_lock) {
            return Err(Fault::Eio.error());
        }
        if sim.locked.is_some() {
            return Ok(None);
        }
        sim.locks_taken += 1;
        sim.locked = Some(sim.locks_taken);
        Ok(Some(SimLock { fs: self.clone(), number: sim.locks_taken }))
    }

    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        if self.lock().dead {
            return Err(io::Error::other("the process is gone"));
        }
        Ok(())
    }

    fn read_dir(&self, _dir: &Path) -> io::Result<Vec<OsString>> {
        let sim = self.lock();
        if sim.dead {
            return Err(io::Error::other("the process is gone"));
        }
        Ok(sim.names.keys().map(OsString::from).collect())
    }

    fn open(&self, path: &Path) -> io::Result<SimFile> {
        let mut sim = self.lock();
        self.enter(&mut sim)?;
        let ino = *sim.names.get(&name_of(path)).ok_or(io::ErrorKind::NotFound)?;
        Ok(self.file(&sim, ino))
    }

    fn create(&self, path: &Path) -> io::Result<SimFile> {
        let mut sim = self.lock();
        self.enter(&mut sim)?;
        let name = name_of(path);
        if let Some(&ino) = sim.names.get(&name) {
            sim.inodes.get_mut(&ino).ok_or(io::ErrorKind::NotFound)?.data.clear();
            return Ok(self.file(&sim, ino));
        }
        if sim.full {
            return Err(Fault::NoSpace.error());
        }
        sim.next_ino += 1;
        let ino = sim.next_ino;
        sim.inodes.insert(ino, Inode::default());
        sim.names.insert(name.clone(), ino);
        sim.log.push(DirOp::Link(name, ino));
        Ok(self.file(&sim, ino))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut sim = self.lock();
        self.enter(&mut sim)?;
        let (from, to) = (name_of(from), name_of(to));
        let ino = sim.names.remove(&from).ok_or(io::ErrorKind::NotFound)?;
        sim.names.insert(to.clone(), ino);
        sim.log.push(DirOp::Rename { from, to, ino });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut sim = self.lock();
        self.enter(&mut sim)?;
        let name = name_of(path);
        let ino = sim.names.remove(&name).ok_or(io::ErrorKind::NotFound)?;
        sim.log.push(DirOp::Unlink(name, ino));
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        let mut sim = self.lock();
        self.enter(&mut sim)?;
        sim.durable_names = sim.names.clone();
        sim.log.clear();
        Ok(())
    }
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut Sim, u64, bool) -> io::Result<T>) -> io::Result<T> {
        let mut sim = self.fs.lock();
        if sim.generation != self.generation {
            return Err(io::Error::other("a handle from before the crash"));
        }
        match self.fs.enter(&mut sim) {
            Ok(()) => f(&mut sim, self.ino, false),
            Err(e) => {
                // A fault on a write may leave a part of it: tell the write.
                if e.to_string().ends_with("partial=true") {
                    return f(&mut sim, self.ino, true).and(Err(e));
                }
                Err(e)
            }
        }
    }
}

impl FsFile for SimFile {
    fn size(&self) -> io::Result<u64> {
        self.with(|sim, ino, _| Ok(sim.inodes[&ino].data.len() as u64))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with(|sim, ino, torn| {
            if torn {
                return Ok(0);
            }
            let data = &sim.inodes[&ino].data;
            let from = (offset as usize).min(data.len());
            let n = buf.len().min(data.len() - from);
            buf[..n].copy_from_slice(&data[from..from + n]);
            Ok(n)
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with(|sim, ino, torn| {
            let full = sim.full;
            let data = &mut sim.inodes.get_mut(&ino).ok_or(io::ErrorKind::NotFound)?.data;
            let end = offset as usize + buf.len();
            let (n, result) = if torn {
                (buf.len() / 2, Ok(()))
            } else if full && end > data.len() {
                (data.len().saturating_sub(offset as usize).min(buf.len()), Err(Fault::NoSpace.error()))
            } else {
                (buf.len(), Ok(()))
            };
            if data.len() < offset as usize {
                data.resize(offset as usize, 0);
            }
            let at = offset as usize;
            let keep = data.len().max(at + n);
            data.resize(keep, 0);
            data[at..at + n].copy_from_slice(&buf[..n]);
            result
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|sim, ino, torn| {
            if !torn {
                sim.inodes.get_mut(&ino).ok_or(io::ErrorKind::NotFound)?.data.resize(len as usize, 0);
            }
            Ok(())
        })
    }

    fn sync(&self) -> io::Result<()> {
        self.with(|sim, ino, torn| {
            if !torn {
                let inode = sim.inodes.get_mut(&ino).ok_or(io::ErrorKind::NotFound)?;
                inode.synced = inode.data.clone();
            }
            Ok(())
        })
    }

    fn try_clone(&self) -> io::Result<Self> {
        Ok(SimFile { fs: self.fs.clone(), ino: self.ino, generation: self.generation })
    }
}

// ---------------------------------------------------------------------------------------------
// Records: the id is in the timestamps and the payload

const T0: i64 = 1_700_000_000_000;

fn meta(id: u64) -> Meta {
    let t = T0 + id as i64 * 1000;
    Meta { samples: (id % 5 + 1) as u32, oldest_ms: t, newest_ms: t }
}

fn payload(id: u64) -> Vec<u8> {
    let len = (id * 7919 % 200) as usize + if id % 13 == 0 { 600 } else { 0 };
    id.to_le_bytes().iter().copied().cycle().take(len).collect()
}

fn id_of(ms: i64) -> u64 {
    ((ms - T0) / 1000) as u64
}

/// The ids a drop names.
fn ids_of(d: &Dropped) -> std::ops::RangeInclusive<u64> {
    let (lo, hi) = (d.oldest_ms.expect("a drop within a life names its records"), d.newest_ms.unwrap());
    id_of(lo)..=id_of(hi)
}

// ---------------------------------------------------------------------------------------------
// Operations and the model

#[derive(Debug, Clone)]
enum Op {
    Append(u8),
    Next,
    /// Acknowledges the last record handed out.
    AckLast,
    /// Acknowledges the first record handed out.
    AckFirst,
    Rewind,
    /// Hands out everything and acknowledges the last record (the sender caught up).
    Drain,
    Sync,
    /// Takes a sync job, appends, then runs the job (a sync running beside the sampler).
    SyncAround(u8),
    Fault {
        after: u8,
        eio: bool,
        partial: bool,
    },
    Full(bool),
    /// Advances the clock by this many seconds (for `max_age`).
    Tick(u8),
    /// A power loss (or, with `power: false`, a `kill -9`) after `after` more file-system calls
    /// (0: now), and another inside the open that follows when `in_open` says so.
    Crash {
        after: u8,
        seed: u64,
        in_open: Option<u8>,
        power: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (1u8..=4).prop_map(Op::Append),
        22 => Just(Op::Next),
        10 => Just(Op::AckLast),
        3 => Just(Op::AckFirst),
        4 => Just(Op::Rewind),
        3 => Just(Op::Drain),
        10 => Just(Op::Sync),
        3 => (1u8..=3).prop_map(Op::SyncAround),
        5 => (0u8..10, any::<bool>(), any::<bool>()).prop_map(|(after, eio, partial)| Op::Fault { after, eio, partial }),
        3 => any::<bool>().prop_map(Op::Full),
        2 => (0u8..30).prop_map(Op::Tick),
        8 => (0u8..12, any::<u64>(), proptest::option::weighted(0.3, 0u8..20), any::<bool>())
            .prop_map(|(after, seed, in_open, power)| Op::Crash { after, seed, in_open, power }),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        300u64..3000,
        proptest::option::weighted(0.5, 1500u64..8000),
        proptest::option::weighted(0.3, 20u64..60),
        any::<bool>(),
    )
        .prop_map(|(segment_bytes, max_bytes, max_age, newest)| {
            let mut c = Config::new("/queue");
            c.segment_bytes = segment_bytes;
            c.max_bytes = max_bytes.unwrap_or(u64::MAX);
            c.max_age = max_age.map(Duration::from_secs);
            c.when_full = if newest { WhenFull::DropNewest } else { WhenFull::DropOldest };
            c
        })
}

struct Model {
    fs: SimFs,
    config: Config,
    queue: Option<DiskQueue<SimFs>>,
    next_id: u64,
    clock_skew: i64,
    /// Ids ever given to an append, failed or not.
    attempted: BTreeSet<u64>,
    /// Ids appended and then covered by a successful sync.
    synced: BTreeSet<u64>,
    /// Ids whose append returned Ok.
    appended: BTreeSet<u64>,
    /// Ids reported dropped, in any life.
    dropped: BTreeSet<u64>,
    /// The highest id acknowledged, in any life (acks cover everything before).
    acked_upto: u64,
    /// The highest id acknowledged in this life: a record acknowledged before a crash may come
    /// back, and is not acknowledged in the new life until it is again.
    acked_in_life: u64,
    /// The highest id whose acknowledgement returned Ok in this life (its cursor file written).
    acked_written: u64,
    /// The kind of the crash armed.
    power: bool,
    /// The highest id acknowledged before a sync that succeeded.
    acked_synced_upto: u64,
    /// This life: ids queued from the cursor, in order (those handed out first).
    life: VecDeque<u64>,
    /// This life: ids handed out since the last rewind, with their positions.
    handed: Vec<(u64, Position)>,
    stats: Stats,
}

#[derive(Debug, Default)]
struct Stats {
    delivered: u64,
    reopened: u64,
    dropped: u64,
    append_errors: u64,
    sync_errors: u64,
}

impl Model {
    fn new(config: Config) -> Self {
        let mut m = Model {
            fs: SimFs::default(),
            config,
            queue: None,
            next_id: 1,
            clock_skew: 0,
            attempted: BTreeSet::new(),
            synced: BTreeSet::new(),
            appended: BTreeSet::new(),
            dropped: BTreeSet::new(),
            acked_upto: 0,
            acked_in_life: 0,
            acked_written: 0,
            power: true,
            acked_synced_upto: 0,
            life: VecDeque::new(),
            handed: Vec::new(),
            stats: Stats::default(),
        };
        m.reopen(None, None);
        m
    }

    fn q(&mut self) -> &mut DiskQueue<SimFs> {
        self.queue.as_mut().unwrap()
    }

    fn now_ms(&self) -> i64 {
        T0 + self.next_id as i64 * 1000 + self.clock_skew
    }

    /// Applies the drops a call reported, in order: the ids each names leave the queue (none of
    /// them may be in flight), and each counts exactly the queued records it names.
    fn apply_drops(&mut self, drops: &[Dropped]) {
        for d in drops {
            let ids = ids_of(d);
            let before = self.life.len();
            self.life.retain(|id| !ids.contains(id));
            assert_eq!((before - self.life.len()) as u64, d.records, "{d:?} in {:?}", self.life);
            for id in ids {
                assert!(
                    !self.handed.iter().any(|(h, _)| *h == id),
                    "{id} was reported dropped while in flight: {d:?}"
                );
                self.dropped.insert(id);
            }
            self.stats.dropped += d.records;
        }
    }

    fn append(&mut self, n: u8) {
        let ids: Vec<u64> = (0..u64::from(n)).map(|i| self.next_id + i).collect();
        self.next_id += u64::from(n);
        let payloads: Vec<Vec<u8>> = ids.iter().map(|&id| payload(id)).collect();
        let records: Vec<RecordIn<'_>> =
            ids.iter().zip(&payloads).map(|(&id, p)| RecordIn { meta: meta(id), payload: p }).collect();
        self.attempted.extend(&ids);
        let now = self.now_ms();
        let result = self.q().append(&records, now);
        if std::env::var_os("DISK_MODEL_TRACE").is_some() {
            eprintln!("  append {ids:?} at {now}: {result:?}");
        }
        // The batch goes to the end, then what was dropped leaves; what stays of the batch was
        // queued (Ok) or not written (Err).
        self.life.extend(&ids);
        let drops = match &result {
            Ok(done) => done.dropped.clone(),
            Err(e) => e.dropped.clone(),
        };
        self.apply_drops(&drops);
        let stayed: Vec<u64> = ids.iter().copied().filter(|id| self.life.contains(id)).collect();
        let samples: u64 = stayed.iter().map(|&id| u64::from(meta(id).samples)).sum();
        match result {
            Ok(done) => {
                assert_eq!(
                    (done.records, done.samples),
                    (stayed.len() as u64, samples),
                    "{done:?} of {ids:?}"
                );
                self.appended.extend(stayed);
            }
            Err(e) => {
                self.stats.append_errors += 1;
                assert_eq!((e.records, e.samples), (stayed.len() as u64, samples), "{e}");
                self.life.retain(|id| !stayed.contains(id));
                self.dropped.extend(stayed);
            }
        }
    }

    fn next(&mut self) {
        match self.q().next_record() {
            Ok(Next::Record(pos, rec)) => {
                let id = id_of(rec.meta.newest_ms);
                let want = self.life.get(self.handed.len()).copied();
                assert_eq!(
                    Some(id),
                    want,
                    "delivered {id}, the queue holds {:?} after {:?}",
                    self.life,
                    self.handed
                );
                assert_eq!(rec.meta, meta(id));
                assert_eq!(rec.payload, payload(id), "the payload of {id}");
                self.handed.push((id, pos));
                self.stats.delivered += 1;
            }
            Ok(Next::Dropped(d)) => {
                assert!(matches!(d.reason, DropReason::Corrupt | DropReason::DiskError), "{d:?}");
                let id = id_of(d.oldest_ms.unwrap());
                assert_eq!(self.life.get(self.handed.len()), Some(&id), "dropped {d:?}");
                self.apply_drops(&[d]);
            }
            Ok(Next::Empty) => {
                assert_eq!(self.handed.len(), self.life.len(), "empty, but the queue holds {:?}", self.life)
            }
            Err(_) => {}
        }
    }

    fn ack(&mut self, first: bool) {
        let Some(&(id, pos)) = (if first { self.handed.first() } else { self.handed.last() }) else { return };
        if self.q().ack(pos).is_ok() {
            self.acked_written = self.acked_written.max(id);
        }
        self.acked_upto = self.acked_upto.max(id);
        self.acked_in_life = self.acked_in_life.max(id);
        while self.life.front().is_some_and(|&f| f <= id) {
            self.life.pop_front();
        }
        self.handed.retain(|(h, _)| *h > id);
    }

    fn rewind(&mut self) {
        let drops = self.q().rewind();
        // The runs name in-flight records a bound dropped; ids between them are not queued
        // (dropped and reported already, or lost in a crash before they were synced).
        for d in &drops {
            let ids = ids_of(d);
            let in_flight = self.handed.iter().filter(|(h, _)| ids.contains(h)).count() as u64;
            assert_eq!(in_flight, d.records, "rewind reported {d:?}, handed out: {:?}", self.handed);
            for id in ids {
                let handed = self.handed.iter().any(|(h, _)| *h == id);
                assert!(handed || !self.life.contains(&id), "rewind reported {id}, queued and not in flight");
                if handed {
                    self.life.retain(|l| *l != id);
                }
                self.dropped.insert(id);
            }
        }
        self.handed.clear();
    }

    /// A sync; with `between`, the job is taken, records appended, then the job run.
    fn sync(&mut self, between: u8) {
        // What is queued now: appended in this life, or found on the disk at the last open.
        let covered: Vec<u64> = self.life.iter().copied().collect();
        let acked = self.acked_in_life;
        let job = self.q().sync_job();
        if between > 0 {
            self.append(between);
        }
        match job.run() {
            Ok(_) => {
                self.synced.extend(covered);
                self.acked_synced_upto = self.acked_synced_upto.max(acked);
            }
            Err(_) => self.stats.sync_errors += 1,
        }
    }

    /// Crashes now, then reopens (crashing again inside the open when asked to).
    ///
    /// After a `kill -9` (not a power loss) more must hold: every record queued is still there,
    /// and no record whose acknowledgement returned is.
    fn crash(&mut self, seed: u64, in_open: Option<u8>, power: bool) {
        self.queue = None;
        let kill = (!power).then(|| {
            let queued: Vec<u64> =
                self.life.iter().copied().filter(|id| !self.dropped.contains(id)).collect();
            (queued, self.acked_written)
        });
        if power {
            self.fs.crash(seed);
        } else {
            self.fs.kill();
        }
        self.power = power;
        self.reopen(in_open.map(|k| (k, seed)), kill);
    }

    fn reopen(&mut self, mut crash_in_open: Option<(u8, u64)>, kill: Option<(Vec<u64>, u64)>) {
        self.stats.reopened += 1;
        let (mut queue, recovery) = loop {
            if let Some((k, _)) = crash_in_open {
                self.fs.arm_crash(u64::from(k));
            }
            let opened = DiskQueue::open(self.fs.clone(), self.config.clone());
            let crashed = self.fs.dead();
            self.fs.disarm_crash();
            match (opened, crashed) {
                (_, true) => {
                    let seed = crash_in_open.take().map_or(7, |(_, s)| s.rotate_left(17));
                    if kill.is_some() {
                        self.fs.kill();
                    } else {
                        self.fs.crash(seed);
                    }
                }
                (Ok(opened), false) => break opened,
                (Err(e), false) => panic!("open failed: {e}"),
            }
        };
        for d in &recovery.dropped {
            if let (Some(lo), Some(hi)) = (d.oldest_ms, d.newest_ms) {
                self.dropped.extend(id_of(lo)..=id_of(hi));
            }
        }
        // Read everything, then hand out from the cursor again.
        let mut found = Vec::new();
        let mut dropped_in_pass = 0;
        let mut tries = 0;
        loop {
            match queue.next_record() {
                Ok(Next::Record(_, rec)) => {
                    let id = id_of(rec.meta.newest_ms);
                    assert_eq!(rec.payload, payload(id), "the payload of {id} after a crash");
                    assert_eq!(rec.meta, meta(id));
                    found.push(id);
                }
                Ok(Next::Dropped(d)) => {
                    dropped_in_pass += 1;
                    if let (Some(lo), Some(hi)) = (d.oldest_ms, d.newest_ms) {
                        self.dropped.extend(id_of(lo)..=id_of(hi));
                    }
                }
                Ok(Next::Empty) => break,
                Err(e) => {
                    tries += 1;
                    assert!(tries < 100, "reading after a reopen is stuck: {e}");
                }
            }
        }
        assert!(queue.rewind().is_empty());
        assert_eq!(recovery.records as usize, found.len() + dropped_in_pass, "{recovery:?}");
        assert!(found.windows(2).all(|w| w[0] < w[1]), "out of order after a reopen: {found:?}");
        let present: BTreeSet<u64> = found.iter().copied().collect();
        for id in &found {
            assert!(self.attempted.contains(id), "{id} was never appended");
            assert!(
                *id > self.acked_synced_upto,
                "{id} was acknowledged and synced (up to {}), and came back",
                self.acked_synced_upto
            );
        }
        for id in &self.synced {
            if *id > self.acked_upto && !self.dropped.contains(id) {
                assert!(present.contains(id), "{id} was synced and is lost; found {found:?}; {recovery:?}");
            }
        }
        if let Some((queued, acked)) = kill {
            for id in queued {
                let dropped = self.dropped.contains(&id);
                assert!(
                    present.contains(&id) || dropped,
                    "{id} was queued before a kill -9 and is lost; {recovery:?}"
                );
            }
            assert!(
                found.iter().all(|&id| id > acked),
                "acknowledged up to {acked} before a kill -9: {found:?}"
            );
        }
        if std::env::var_os("DISK_MODEL_TRACE").is_some() {
            eprintln!("  reopened: {found:?} {recovery:?}");
        }
        self.life = found.into();
        self.handed.clear();
        self.acked_in_life = 0;
        self.acked_written = 0;
        self.queue = Some(queue);
    }

    fn run(&mut self, op: &Op) {
        if std::env::var_os("DISK_MODEL_TRACE").is_some() {
            eprintln!(
                "{op:?}: life {:?} handed {:?}",
                self.life,
                self.handed.iter().map(|h| h.0).collect::<Vec<_>>()
            );
        }
        match *op {
            Op::Append(n) => self.append(n),
            Op::Next => self.next(),
            Op::AckLast => self.ack(false),
            Op::AckFirst => self.ack(true),
            Op::Rewind => self.rewind(),
            Op::Drain => {
                for _ in 0..1000 {
                    let before = (self.handed.len(), self.life.len());
                    self.next();
                    if (self.handed.len(), self.life.len()) == before || self.fs.dead() {
                        break;
                    }
                }
                self.ack(false);
            }
            Op::Sync => self.sync(0),
            Op::SyncAround(n) => self.sync(n),
            Op::Fault { after, eio, partial } => {
                self.fs.arm_fault(u64::from(after), if eio { Fault::Eio } else { Fault::NoSpace }, partial)
            }
            Op::Full(full) => self.fs.set_full(full),
            Op::Tick(s) => self.clock_skew += i64::from(s) * 1000,
            Op::Crash { after: 0, seed, in_open, power } => self.crash(seed, in_open, power),
            Op::Crash { after, power, .. } => {
                self.power = power;
                self.fs.arm_crash(u64::from(after));
            }
        }
        if let Some(q) = &self.queue {
            // Records in flight that a bound dropped: lost unless acknowledged.
            for (id, _) in &self.handed[..q.in_flight_dropped()] {
                self.dropped.insert(*id);
            }
        }
        if self.fs.dead() {
            // The armed crash struck inside this operation: what it did after is gone too.
            self.crash(0x5eed ^ self.next_id, None, self.power);
        }
    }
}

proptest! {
    // 1024 cases of up to 200 operations (about 2 s); DISK_MODEL_CASES=20000 for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("DISK_MODEL_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1024),
        max_shrink_iters: 4096,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_queue_keeps_what_was_synced_through_faults_and_crashes(
        config in config(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        TOTALS.add(&run_case(config, &ops));
    }
}

/// Runs `ops` through the model, then a final sync and a power loss: everything appended since is still
/// there.
fn run_case(config: Config, ops: &[Op]) -> Model {
    let mut m = Model::new(config);
    for op in ops {
        m.run(op);
    }
    m.fs.set_full(false);
    m.fs.disarm_crash();
    m.sync(0);
    m.crash(42, None, true);
    m
}

/// A case CI's property run found (issue 46): record 144 was synced, and a power loss then brought back, as
/// the `cursor` file, a position from before (14353) past the position it was written at (12624). The old
/// position was in `cursor.tmp` when a power loss struck; a `kill -9` struck the next acknowledgement after it
/// had emptied that file in place (which hid the old position from the next open, so new records went below
/// it); that open's acknowledgement rewrote the same file and renamed it to `cursor`, and a sync made the name
/// durable but not the bytes, so the last power loss kept the old bytes. The queue now writes each cursor to a
/// new file.
#[test]
fn ci_case_a_synced_record_after_crashes_around_a_reopen() {
    let ops = vec![
        Op::Append(2),
        Op::Append(1),
        Op::Append(4),
        Op::Append(2),
        Op::Append(1),
        Op::Append(1),
        Op::Append(2),
        Op::Append(4),
        Op::Append(4),
        Op::Append(4),
        Op::SyncAround(2),
        Op::Append(2),
        Op::Append(1),
        Op::Append(3),
        Op::Append(3),
        Op::Append(3),
        Op::Append(2),
        Op::Append(2),
        Op::Append(3),
        Op::Append(4),
        Op::Append(1),
        Op::Append(4),
        Op::Append(2),
        Op::SyncAround(1),
        Op::Append(1),
        Op::Append(3),
        Op::Fault { after: 0, eio: false, partial: false },
        Op::Full(true),
        Op::Append(4),
        Op::Append(3),
        Op::Append(2),
        Op::Append(1),
        Op::Append(3),
        Op::Next,
        Op::Append(4),
        Op::Append(4),
        Op::Append(4),
        Op::Tick(0),
        Op::Append(2),
        Op::Append(2),
        Op::Next,
        Op::Next,
        Op::Append(2),
        Op::Crash { after: 2, seed: 0, in_open: None, power: false },
        Op::Append(2),
        Op::Append(2),
        Op::Append(1),
        Op::Next,
        Op::Append(2),
        Op::Append(1),
        Op::Append(3),
        Op::Drain,
        Op::Append(1),
        Op::Crash { after: 7, seed: 0, in_open: None, power: true },
        Op::Append(1),
        Op::Append(1),
        Op::Append(2),
        Op::Append(3),
        Op::Append(2),
        Op::Append(1),
        Op::Append(1),
        Op::Next,
        Op::Next,
        Op::Crash { after: 1, seed: 0, in_open: None, power: true },
        Op::Append(4),
        Op::Next,
        Op::Append(2),
        Op::Crash { after: 5, seed: 0, in_open: None, power: false },
        Op::Next,
        Op::Append(2),
        Op::Fault { after: 0, eio: false, partial: false },
        Op::Append(3),
        Op::Append(2),
        Op::Append(1),
        Op::Drain,
        Op::Append(2),
        Op::Drain,
        Op::Crash { after: 8, seed: 0, in_open: None, power: true },
        Op::Append(4),
        Op::Append(2),
        Op::Append(2),
        Op::Fault { after: 0, eio: false, partial: false },
        Op::Next,
        Op::Next,
        Op::Append(3),
        Op::Next,
        Op::Crash { after: 3, seed: 0, in_open: None, power: false },
        Op::Next,
        Op::AckLast,
        Op::Drain,
        Op::Append(1),
    ];
    let mut config = Config::new("/queue");
    config.segment_bytes = 1424;
    config.when_full = WhenFull::DropOldest;
    run_case(config, &ops);
}

/// What the cases exercised, summed (printed with `--nocapture` and `DISK_MODEL_STATS=1`).
struct Totals([std::sync::atomic::AtomicU64; 8]);

static TOTALS: Totals = Totals([const { std::sync::atomic::AtomicU64::new(0) }; 8]);

impl Totals {
    fn add(&self, m: &Model) {
        use std::sync::atomic::Ordering::Relaxed;
        let sim = m.fs.lock();
        let v = [
            m.stats.delivered,
            m.stats.reopened,
            sim.crashes + sim.kills,
            sim.faults_hit,
            m.stats.dropped,
            m.stats.append_errors,
            m.stats.sync_errors,
            m.synced.len() as u64,
        ];
        for (t, v) in self.0.iter().zip(v) {
            t.fetch_add(v, Relaxed);
        }
        if std::env::var_os("DISK_MODEL_STATS").is_some() {
            let t: Vec<u64> = self.0.iter().map(|a| a.load(Relaxed)).collect();
            eprintln!(
                "delivered {} reopened {} crashes {} faults {} dropped {} append errors {} sync errors {} synced {}",
                t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]
            );
        }
    }
}

/// The model itself can fail: a queue that forgets to fsync is caught.
#[test]
fn the_simulated_disk_loses_what_was_not_synced() {
    let fs = SimFs::default();
    let config = Config::new("/queue");
    let (mut q, _) = DiskQueue::open(fs.clone(), config.clone()).unwrap();
    let p = payload(1);
    q.append(&[RecordIn { meta: meta(1), payload: &p }], T0).unwrap();
    drop(q);
    // Without a sync, some crash loses the record (the segment's name or bytes).
    let lost = (0..64u64).any(|seed| {
        let fs2 = SimFs(Arc::new(Mutex::new(clone_sim(&fs.lock()))));
        fs2.crash(seed);
        let (mut q, _) = DiskQueue::open(fs2, config.clone()).unwrap();
        matches!(q.next_record(), Ok(Next::Empty))
    });
    assert!(lost, "no crash lost an unsynced record: the simulated disk keeps too much");
}

fn clone_sim(s: &Sim) -> Sim {
    Sim {
        inodes: s.inodes.clone(),
        names: s.names.clone(),
        durable_names: s.durable_names.clone(),
        log: s.log.clone(),
        next_ino: s.next_ino,
        generation: s.generation,
        ..Sim::default()
    }
}

/// A second queue on a directory is refused while the first lives, with an error naming the directory, and
/// accepted once the first is dropped; a fault while taking the lock fails the open and leaves the directory
/// unlocked.
#[test]
fn a_directory_has_one_queue_at_a_time() {
    let fs = SimFs::default();
    let config = Config::new("/queue");
    let (mut first, _) = DiskQueue::open(fs.clone(), config.clone()).unwrap();
    let p = payload(1);
    first.append(&[RecordIn { meta: meta(1), payload: &p }], T0).unwrap();

    let refused = DiskQueue::open(fs.clone(), config.clone()).unwrap_err();
    assert!(matches!(&refused, DiskError::InUse { dir } if dir == Path::new("/queue")), "{refused:?}");
    assert_eq!(
        refused.to_string(),
        "queue_dir /queue is in use by another process (its lock file is held): each telemon needs a queue_dir of its own"
    );
    // The refused opener changed nothing: the first queue goes on.
    assert!(matches!(first.next_record(), Ok(Next::Record(_, r)) if r.payload == p));

    drop(first);
    let (mut second, _) = DiskQueue::open(fs.clone(), config.clone()).unwrap();
    assert!(matches!(second.next_record(), Ok(Next::Record(_, r)) if r.payload == p));
    drop(second);

    // A fault on the lock: the open fails, typed, and nothing is held.
    fs.lock().fail_lock = true;
    let failed = DiskQueue::open(fs.clone(), config.clone()).unwrap_err();
    assert!(
        matches!(&failed, DiskError::Io { op: telemon_push::disk::Op::Lock, path, .. } if path == Path::new("/queue/lock")),
        "{failed:?}"
    );
    assert!(failed.to_string().contains("cannot lock the queue directory /queue/lock"), "{failed}");
    let (mut third, _) = DiskQueue::open(fs, config).unwrap();
    assert!(matches!(third.next_record(), Ok(Next::Record(_, r)) if r.payload == p));
}

/// The same on the real file system: `flock` on the directory's `lock` file, which the queue lists as its own.
#[test]
fn the_real_file_system_locks_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (first, found) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!(found.stray_files, 0);
    assert!(dir.path().join(telemon_push::disk::LOCK_FILE).exists());
    let refused = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap_err();
    assert!(matches!(&refused, DiskError::InUse { dir: d } if d == dir.path()), "{refused:?}");
    drop(first);
    let (_again, found) = DiskQueue::open(StdFs, Config::new(dir.path())).unwrap();
    assert_eq!(found.stray_files, 0, "the lock file is the queue's own");
}
