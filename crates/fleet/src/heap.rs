//! Giving the heap's free pages back to the system once the fleet settles.
//!
//! Starting a fleet frees much of what it allocates: the parse of a config of a thousand blocks
//! (the TOML parser's tokens and tables, about 3 MB for a thousand targets), each target's connect
//! and handshake, the first values' label text before the first publication. glibc's allocator
//! keeps what is freed in the heap, resident, for later allocations, and gives back on its own only
//! what is at the heap's top; what a fleet freed while starting lies between what it keeps. At 1,000
//! sys161 targets about 3.4 MiB of free pages stayed resident after startup, a fifth of telemon's
//! RSS and as much as the targets' own state.
//!
//! [`keeper`] runs beside the collectors and hands the free pages back ([`release_free_memory`],
//! glibc's `malloc_trim`) once the fleet has settled: two seconds after the last time a target was
//! created, connected, disconnected or removed (a counter that the publishers bump). A fleet that never settles (a
//! target that flaps) is trimmed at most every [`MAX_UNSETTLED`]. Between those events nothing is
//! trimmed: steady-state work reuses what it frees, and pages handed back would only be faulted in
//! again. `telemon`'s `serve`, `top` and `record` run the keeper; the library never trims on its
//! own (it would be a process-wide effect in someone else's program). Elsewhere than glibc on
//! Linux, trimming does nothing.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

/// How often the keeper looks for changes.
const CHECK: Duration = Duration::from_secs(1);
/// How long the fleet must go without a change before the keeper trims.
pub const QUIET: Duration = Duration::from_secs(2);
/// The longest the keeper waits for a fleet to settle before it trims anyway.
pub const MAX_UNSETTLED: Duration = Duration::from_secs(30);

/// Counts the changes of the fleet's shape (see [`note_change`]).
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// Notes that a target was created, connected, disconnected or removed: what leaves memory freed
/// behind (a connection's handshake, a removed target's store).
pub(crate) fn note_change() {
    CHANGES.fetch_add(1, Relaxed);
}

/// Gives the heap's free pages back to the system (glibc's `malloc_trim(0)`, over every arena);
/// returns whether any were. Does nothing, and returns `false`, elsewhere than glibc on Linux.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes the allocator's own locks, and only gives back pages that hold
        // no allocation; any thread may call it at any time.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// When to trim, from the changes seen at each check.
#[derive(Debug)]
struct Settle {
    /// The change count at the last check.
    seen: u64,
    /// When the last change was seen, and when the first since the last trim was: `None` when
    /// nothing changed since the last trim.
    unsettled: Option<(Instant, Instant)>,
}

impl Settle {
    /// A fleet that has just started: a start is a change.
    fn new(changes: u64, now: Instant) -> Settle {
        Settle { seen: changes, unsettled: Some((now, now)) }
    }

    /// Whether to trim now, with the change count `changes`.
    fn check(&mut self, changes: u64, now: Instant) -> bool {
        if changes != self.seen {
            self.seen = changes;
            let first = self.unsettled.map_or(now, |(_, first)| first);
            self.unsettled = Some((now, first));
        }
        match self.unsettled {
            Some((last, first))
                if now.duration_since(last) >= QUIET || now.duration_since(first) >= MAX_UNSETTLED =>
            {
                self.unsettled = None;
                true
            }
            _ => false,
        }
    }
}

/// Trims the heap whenever the fleet settles after a change (see the module's documentation).
/// Runs until dropped.
pub async fn keeper() {
    let mut settle = Settle::new(CHANGES.load(Relaxed), Instant::now());
    let mut checks = tokio::time::interval(CHECK);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        checks.tick().await;
        if settle.check(CHANGES.load(Relaxed), Instant::now()) {
            let start = std::time::Instant::now();
            let released = release_free_memory();
            tracing::debug!(released, took = ?start.elapsed(), "heap trimmed after the fleet settled");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_the_fleet_has_been_quiet_and_not_while_nothing_changes() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut s = Settle::new(0, t0);
        assert!(!s.check(0, at(1)), "a second after the start");
        assert!(s.check(0, at(2)), "two quiet seconds after the start");
        assert!(!s.check(0, at(3)) && !s.check(0, at(60)), "nothing changed since");
        // Targets connect over a few seconds: the trim waits for the last.
        assert!(!s.check(5, at(61)));
        assert!(!s.check(9, at(62)));
        assert!(!s.check(9, at(63)));
        assert!(s.check(9, at(64)));
        assert!(!s.check(9, at(65)));
    }

    #[test]
    fn a_fleet_that_never_settles_is_trimmed_at_most_every_max_unsettled() {
        let t0 = Instant::now();
        let mut s = Settle::new(0, t0);
        let trims: Vec<u64> = (1..=70).filter(|&i| s.check(i, t0 + Duration::from_secs(i))).collect();
        assert_eq!(trims, [30, 61], "a change every second");
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_blocks_between_kept_ones_are_given_back() {
        fn resident_bytes() -> u64 {
            let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
            let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
            // SAFETY: sysconf reads a constant of the system.
            pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
        }
        // Blocks below the allocator's mmap threshold come from the heap; the kept one after them
        // keeps them from being at its top, where free would give them back by itself. Their bytes
        // are written, so their pages are resident, and stay so once freed.
        let freed: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8 + 1; 64 << 10]).collect();
        let kept = vec![1u8; 64 << 10];
        drop(freed);
        let before = resident_bytes();
        assert!(release_free_memory());
        let after = resident_bytes();
        assert!(before.saturating_sub(after) >= 2 << 20, "4 MiB freed, RSS {before} -> {after}");
        assert_eq!(kept[0], 1);
    }
}
