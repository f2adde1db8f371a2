//! A crash-safe on-disk FIFO of records: the durable queue between a sender's sampler and its
//! HTTP loop.
//!
//! Each record is one ready-to-send request body (an encoded remote write or OTLP request) with
//! its sample count and timestamps. The sampler [appends](DiskQueue::append) a tick's records in
//! one write; the HTTP loop takes the oldest record not yet handed out ([`DiskQueue::next_record`]),
//! POSTs it, and [acknowledges](DiskQueue::ack) it after a 2xx (or a permanent refusal, which
//! the caller counts as dropped). After a failed attempt it may [rewind](DiskQueue::rewind) to
//! hand out from the cursor again.
//!
//! # On disk
//!
//! ```text
//! queue_dir/
//!   segment-0000000000000000.log   records, from global byte position 0
//!   segment-0000000001000a3c.log   the next segment starts where the previous one ended
//!   cursor                         the oldest unacknowledged position, replaced at every ack
//!   cursor.synced                  the same, replaced durably by every sync
//!   lock                           locked (flock) by the queue that has the directory open
//!
//! a segment:  [record][record][record]...          (a new one once `segment_bytes` is passed)
//!
//! a record:   0        4           8            12           16        20          28          36
//!             +--------+-----------+------------+------------+---------+-----------+-----------+---------+
//!             | magic  | header_crc| payload_len| payload_crc| samples | oldest_ms | newest_ms | payload |
//!             | F3 54  | CRC-32C   | u32 <= 64  | CRC-32C of | u32     | i64       | i64       | n bytes |
//!             | 51 31  | of 8..36  | MiB        | payload    |         |           |           |         |
//!             +--------+-----------+------------+------------+---------+-----------+-----------+---------+
//!
//! a cursor:   [magic F3 54 51 43][CRC-32C of the position u32][position u64]     (16 bytes)
//! ```
//!
//! Little-endian throughout. The header has its own checksum so that a length is trusted only
//! after it checked: a torn tail is told from damage in the middle, a record whose payload alone
//! is damaged is skipped whole with its samples known, and nothing is allocated from an
//! unchecked length ([`frame`] has the details, [`cursor`] the two cursor files).
//!
//! # Guarantees
//!
//! * **At least once.** A record whose append was followed by a successful [sync](SyncJob::run)
//!   is delivered after any crash, unless it was acknowledged or reported dropped. Duplicates
//!   are possible (what was sent but not yet acknowledged, or acknowledged since the last sync
//!   after a power loss); after a plain process crash (`kill -9`) nothing acknowledged comes back.
//! * **Order.** Records are handed out in append order.
//! * **No silent loss.** Every drop — over `max_bytes`, older than `max_age`, not written
//!   (disk full, I/O error), found damaged — is returned to the caller with its sample count and
//!   reason, to count.
//! * **Opens, whatever is on disk.** A torn tail is cut back, a damaged record skipped and
//!   counted, a missing segment logged, a stray file ignored, a bad cursor clamped or replaced by
//!   the oldest segment; [`DiskQueue::open`] fails only if the directory cannot be created,
//!   locked or listed, and says in its [`Recovery`] what it found.
//! * **One queue per directory.** [`DiskQueue::open`] takes the directory's lock through its
//!   [`Fs`] ([`Fs::try_lock_dir`]: `flock` on the `lock` file for [`StdFs`]) and holds it until
//!   the queue is dropped; a second opener, in this process or another, gets
//!   [`DiskError::InUse`].
//! * **A full or failing disk is not fatal.** An append that fails drops its records (counted)
//!   and the next one tries again; a part written is cut back. A record unreadable
//!   [`READ_TRIES`] times is dropped, so reading never stops on one bad record.
//!
//! # What the others lose, and what this does instead
//!
//! * vmagent moves its read offset when a block is read, before the 2xx: here only
//!   [`DiskQueue::ack`] moves the cursor. Its blocks have no checksum: here both the header and
//!   the payload have one.
//! * Prometheus keeps no send position: here the cursor is a file, replaced on every ack.
//! * The OpenTelemetry Collector does not fsync by default, and does not start on a bad file:
//!   here every sync fsyncs, and no file content stops [`DiskQueue::open`].
//! * Vector once removed a data file before its ledger was synced (a crash loop): here a segment
//!   is removed only after the `cursor.synced` that passes it is durable ([`SyncJob::run`]), and a
//!   cursor into a removed segment is clamped, not fatal. A full disk stops Vector; here it
//!   drops and counts.
//!
//! # Locking, and why fsync never blocks an append
//!
//! [`DiskQueue`] is not synchronized itself: the caller shares it as `Arc<Mutex<DiskQueue<_>>>`
//! between the sampler (append) and the sender (next, ack). Every method under that lock does
//! page-cache I/O only (one `write` per append, positional reads, a 16-byte file and a rename per
//! ack). Durability is split off: [`DiskQueue::sync_job`] takes, under the lock, what must become
//! durable (cloned segment handles, the cursor, the segments to remove), and
//! [`SyncJob::run`] does the fsyncs and removals without the queue — on a blocking thread, every
//! `queue_sync` and at shutdown:
//!
//! ```no_run
//! # use std::sync::{Arc, Mutex};
//! # use telemon_push::disk::{DiskQueue, StdFs};
//! # async fn tick(queue: Arc<Mutex<DiskQueue<StdFs>>>) {
//! let job = queue.lock().unwrap().sync_job();
//! match tokio::task::spawn_blocking(move || job.run()).await {
//!     Ok(Ok(_synced)) => {}
//!     Ok(Err(e)) => eprintln!("{e}"), // handed back: the next sync tries again
//!     Err(_) => {}
//! }
//! # }
//! ```
//!
//! A single internal lock orders the jobs themselves, and is never taken by `append`.
//!
//! The index of queued records (32 bytes per record) is kept in memory; [`DiskQueue::open`]
//! rebuilds it by reading the queue once.

pub mod cursor;
mod drops;
mod error;
pub mod frame;
mod fs;
/// The body of the fuzz target `push_disk_record`, re-exported by `crate::fuzz` (only under
/// `cfg(fuzzing)` and in tests).
#[cfg(any(fuzzing, test))]
pub(crate) mod fuzz;
mod queue;
mod recovery;
mod segment;
mod sync;

pub use drops::{DropReason, Dropped};
pub use error::{AppendError, DiskError, Op};
pub use frame::{Meta, Record, RecordIn, MAX_PAYLOAD};
pub use fs::{Fs, FsFile, StdFs, LOCK_FILE};
pub use queue::{Appended, Config, DiskQueue, Next, Position, WhenFull};
pub use recovery::{CursorFound, Recovery};
pub use segment::READ_TRIES;
pub use sync::{SyncJob, Synced};
