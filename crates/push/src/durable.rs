//! The tasks of a sender with a disk queue (`queue_dir`): a sampler that encodes each tick's samples into
//! ready-to-send requests and appends them to the [`disk`](crate::disk) queue in one write, an HTTP loop that
//! sends the oldest record and acknowledges it only after the receiver's answer, and a syncer that makes the
//! queue durable every `queue_sync` on a blocking thread.
//!
//! The queue is a FIFO, so a backlog (after an outage or a restart) goes out oldest first, before anything
//! sampled since, and each series stays in timestamp order; the sampler keeps appending at full rate
//! meanwhile. A full or failing disk never stops the sampler, the collectors or the other senders: the
//! records that cannot be written are dropped and counted (`dropped_disk_error`), the error is logged at most
//! once a minute, and the next tick tries the disk again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::config::{PushSection, WhenFull};
use crate::disk::{self, DiskQueue, Dropped, Meta, Next, RecordIn, StdFs};
use crate::memory_queue::Queued;
use crate::sender::{Plan, Ticks, Tries, Wire, RETRY_FIRST, RETRY_MAX};
use crate::stats::{now_ms, Stats};
use telemon_fleet::retry::Backoff;
use telemon_fleet::Registry;

/// How often one kind of disk trouble is logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// A sender's disk queue, shared by its sampler, its HTTP loop and its syncer.
#[derive(Clone)]
pub(crate) struct Disk {
    queue: Arc<Mutex<DiskQueue<StdFs>>>,
    /// Woken when the sampler appended.
    appended: Arc<Notify>,
    stats: Arc<Stats>,
}

impl Disk {
    /// Opens (or creates) the queue of `block` in `dir` (its `queue_dir`, or the shard's directory in it);
    /// what it found on the disk is logged, and what it had to drop is counted. Fails only when the directory
    /// cannot be created, read or locked ([`disk::DiskError::InUse`]: another process uses it), never
    /// because of what is in it. The queue holds the directory's lock for as long as the sender runs.
    pub fn open(block: &PushSection, dir: PathBuf, stats: Arc<Stats>) -> Result<Disk, disk::DiskError> {
        let config = disk::Config {
            max_bytes: block.queue_max_bytes,
            max_age: block.queue_max_age,
            when_full: match block.when_full {
                WhenFull::DropOldest => disk::WhenFull::DropOldest,
                WhenFull::DropNewest => disk::WhenFull::DropNewest,
            },
            // Several segments within the bound, so that what was sent is given back in steps.
            segment_bytes: (block.queue_max_bytes / 8).clamp(1 << 20, disk::Config::SEGMENT_BYTES),
            ..disk::Config::new(&dir)
        };
        let (queue, found) = DiskQueue::open(StdFs, config)?;
        let sender = &stats.sender;
        if found.records > 0 {
            eprintln!(
                "telemon: push {sender}: {} samples ({} bytes) queued in {} from an earlier run; sending them first",
                found.samples,
                found.bytes,
                dir.display()
            );
        }
        if found.corrupt_records > 0 || found.cut_bytes > 0 || found.missing_segments > 0 {
            tracing::warn!(
                %sender,
                dir = %dir.display(),
                corrupt_records = found.corrupt_records,
                cut_bytes = found.cut_bytes,
                missing_segments = found.missing_segments,
                "the disk queue was damaged: skipped what could not be read"
            );
        }
        for problem in &found.problems {
            tracing::warn!(%sender, error = %problem, "disk queue");
        }
        stats.add_corrupt_records(found.corrupt_records);
        count(&stats, &found.dropped);
        let disk = Disk { queue: Arc::new(Mutex::new(queue)), appended: Arc::default(), stats };
        disk.show(&disk.lock());
        Ok(disk)
    }

    fn lock(&self) -> MutexGuard<'_, DiskQueue<StdFs>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Updates the queue's gauges.
    fn show(&self, q: &DiskQueue<StdFs>) {
        self.stats.set_disk(q.disk_bytes(), q.oldest_ms());
        self.stats.set_queue(usize::try_from(q.disk_bytes()).unwrap_or(usize::MAX), q.oldest_ms());
    }

    /// Makes what was written and acknowledged durable, on a blocking thread (never under the queue's lock
    /// for the fsyncs).
    pub async fn sync(&self) -> Result<(), disk::DiskError> {
        let job = self.lock().sync_job();
        match tokio::task::spawn_blocking(move || job.run()).await {
            Ok(Ok(synced)) => {
                for e in synced.not_removed {
                    tracing::debug!(error = %e, "a sent segment stays until the next sync");
                }
                Ok(())
            }
            Ok(Err(e)) => Err(e),
            // The blocking thread panicked: what it was to sync is synced by the next job.
            Err(e) => Err(disk::DiskError::Io {
                op: disk::Op::Sync,
                path: self.lock().dir().to_owned(),
                source: std::io::Error::other(e.to_string()),
            }),
        }
    }
}

/// Counts what the queue dropped.
fn count(stats: &Stats, dropped: &[Dropped]) {
    for d in dropped {
        stats.add_dropped(d.reason.result_label(), d.samples);
    }
}

/// Logs a disk error at most once a minute per kind (appends, reads, syncs).
struct Throttle(Option<Instant>);

impl Throttle {
    fn ready(&mut self) -> bool {
        let now = Instant::now();
        if self.0.is_some_and(|t| now < t + LOG_EVERY) {
            return false;
        }
        self.0 = Some(now);
        true
    }
}

/// Samples `registry` every `plan.batch` and appends the encoded requests (`plan.max_per_send` samples
/// each) to the disk queue until `stop` turns true.
pub(crate) async fn sampler<W: Wire>(
    mut wire: W,
    context: Arc<W::Context>,
    registry: Registry,
    disk: Disk,
    plan: &Plan,
    mut stop: watch::Receiver<bool>,
) {
    let (every, max_per_send) = (plan.batch, plan.max_per_send);
    let mut ticks = Ticks::new(every);
    let (mut items, mut bodies) = (Vec::new(), Vec::<(Meta, Vec<u8>)>::new());
    let mut failing = Throttle(None);
    while let Some(now) = ticks.next(&mut stop).await {
        wire.sample(&registry.snapshot(), now, &mut items);
        if items.is_empty() {
            continue;
        }
        bodies.clear();
        for chunk in items.chunks(max_per_send) {
            let times = chunk.iter().map(Queued::timestamp_ms);
            let meta = Meta {
                samples: u32::try_from(chunk.len()).unwrap_or(u32::MAX),
                oldest_ms: times.clone().min().unwrap_or(now),
                newest_ms: times.max().unwrap_or(now),
            };
            bodies.push((meta, W::encode(&context, chunk)));
        }
        items.clear();
        let records: Vec<RecordIn<'_>> =
            bodies.iter().map(|(meta, b)| RecordIn { meta: *meta, payload: b }).collect();
        let mut q = disk.lock();
        // The queue's end moves by what the append wrote, whatever the bounds dropped from its front.
        let end = |q: &DiskQueue<StdFs>| q.cursor() + q.disk_bytes();
        let end_before = end(&q);
        match q.append(&records, now_ms()) {
            Ok(appended) => count(&disk.stats, &appended.dropped),
            Err(e) => {
                let dropped: Vec<Dropped> = e.all_dropped().collect();
                count(&disk.stats, &dropped);
                if failing.ready() {
                    eprintln!(
                        "telemon: push {}: {e}; dropping what cannot be written until the disk takes it again",
                        disk.stats.sender
                    );
                }
            }
        }
        disk.stats.add_disk_written(end(&q).saturating_sub(end_before));
        disk.show(&q);
        drop(q);
        disk.appended.notify_one();
    }
}

/// Syncs the queue every `every` until `stop` turns true (the last sync is the shutdown's, once the HTTP
/// loop has stopped).
pub(crate) async fn syncer(disk: Disk, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = Throttle(None);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if let Err(e) = disk.sync().await {
            if failing.ready() {
                eprintln!(
                    "telemon: push {}: {e}; the queue is synced again at the next tick",
                    disk.stats.sender
                );
            }
        }
    }
}

/// Sends the disk queue's records in order, one request each, acknowledging each after the receiver's
/// answer (2xx, or a refusal that is not retried, counted as dropped), until `stop` turns true. A request in
/// flight at the stop is finished (within the shutdown's deadline); one waiting for its retry is given up
/// without an acknowledgement, and sent again by the next run.
pub(crate) async fn sender<W: Wire>(
    client: reqwest::Client,
    plan: Plan,
    disk: Disk,
    mut stop: watch::Receiver<bool>,
    inflight: Arc<AtomicU64>,
) {
    let stats = disk.stats.clone();
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_MAX);
    let (mut failing, mut reading) = (false, Throttle(None));
    loop {
        if *stop.borrow() {
            return;
        }
        let next = disk.lock().next_record();
        let (pos, record) = match next {
            Ok(Next::Record(pos, record)) => (pos, record),
            Ok(Next::Dropped(d)) => {
                if d.reason == disk::DropReason::Corrupt {
                    stats.add_corrupt_records(d.records);
                }
                count(&stats, &[d]);
                continue;
            }
            Ok(Next::Empty) => {
                tokio::select! {
                    () = disk.appended.notified() => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
                continue;
            }
            Err(e) => {
                if reading.ready() {
                    eprintln!("telemon: push {}: {e}; trying again", stats.sender);
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
                continue;
            }
        };
        let n = record.meta.samples as usize;
        inflight.store(n as u64, Ordering::Relaxed);
        stats.set_inflight(Some(record.meta.oldest_ms));
        let mut tries = Tries { url: &plan.url, stats: &stats, failing: &mut failing, backoff: &mut backoff };
        while let Some(delay) = tries.attempt::<W>(&client, &record.payload, n).await {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                // Given up between attempts: the record stays in the queue for the next run.
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        let mut q = disk.lock();
        if let Err(e) = q.ack(pos) {
            tracing::warn!(sender = %stats.sender, error = %e, "the cursor could not be written; the next sync tries again");
        }
        disk.show(&q);
        drop(q);
        inflight.store(0, Ordering::Relaxed);
        stats.set_inflight(None);
    }
}
