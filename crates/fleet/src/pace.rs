//! Wake-up coalescing: the fleet's runtime wakes at most once per `[serve] wakeup_slack`.
//!
//! A fleet's work arrives as many small events spread over each second: a thousand targets each
//! send a message or two, and each has a timer or two. Woken for each, the runtime's thread sleeps
//! and wakes thousands of times a second, and those context switches and `epoll_wait` calls cost
//! more than the work they deliver. Linux calls the cure timer slack: when the thread is about to
//! sleep again less than the slack after it last did, [`before_park`] makes it sleep the rest of the
//! slack first. What arrived meanwhile is then handled in one wake-up, read by read.
//!
//! A message is handled at most one slack late (5 ms by default, at most [`MAX_WAKEUP_SLACK`]);
//! nothing is lost or reordered, because the bytes wait in the socket buffers. `telemon`'s binary
//! installs [`before_park`] on its runtime, and its `serve`, `top` and `record` commands set the slack
//! from the config (the one-target commands leave it at zero). A runtime without the hook (tests, a
//! library user's own) is not affected.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The default `[serve] wakeup_slack`.
pub const DEFAULT_WAKEUP_SLACK: Duration = Duration::from_millis(5);
/// The largest `[serve] wakeup_slack` a config may ask for.
pub const MAX_WAKEUP_SLACK: Duration = Duration::from_millis(100);

/// The slack in force, in microseconds (0: no coalescing).
static SLACK_MICROS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The earliest time this thread may park again without sleeping first.
    static NEXT_PARK: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Sets the slack of every runtime that runs [`before_park`] (zero turns coalescing off); values
/// above [`MAX_WAKEUP_SLACK`] are lowered to it.
pub fn set_wakeup_slack(slack: Duration) {
    let micros = slack.min(MAX_WAKEUP_SLACK).as_micros();
    SLACK_MICROS.store(u64::try_from(micros).unwrap_or(u64::MAX), Relaxed);
}

/// The slack in force.
pub fn wakeup_slack() -> Duration {
    Duration::from_micros(SLACK_MICROS.load(Relaxed))
}

/// A runtime's `on_thread_park` hook: when this thread parked less than the slack ago, sleeps
/// until a whole slack has passed, so that it wakes at most once per slack.
pub fn before_park() {
    let slack = wakeup_slack();
    if slack.is_zero() {
        return;
    }
    NEXT_PARK.with(|next| {
        if let Some(pause) = pause(next.get(), Instant::now()) {
            std::thread::sleep(pause);
        }
        next.set(Some(Instant::now() + slack));
    });
}

/// How long to sleep before parking at `now`, when the thread may park again at `next`.
fn pause(next: Option<Instant>, now: Instant) -> Option<Duration> {
    next.and_then(|at| at.checked_duration_since(now)).filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_park_within_the_slack_waits_for_the_rest_of_it() {
        let now = Instant::now();
        assert_eq!(pause(None, now), None);
        assert_eq!(pause(Some(now), now), None);
        assert_eq!(pause(Some(now), now + Duration::from_millis(1)), None);
        assert_eq!(pause(Some(now + Duration::from_millis(3)), now), Some(Duration::from_millis(3)));
    }

    #[test]
    fn parks_are_spaced_by_the_slack_and_the_slack_is_bounded() {
        // The only test that sets the global (tests run in parallel threads).
        set_wakeup_slack(Duration::from_millis(20));
        assert_eq!(wakeup_slack(), Duration::from_millis(20));
        let start = Instant::now();
        for _ in 0..3 {
            before_park();
        }
        // The first park does not wait; the next two wait a slack each.
        assert!(start.elapsed() >= Duration::from_millis(40), "{:?}", start.elapsed());
        set_wakeup_slack(Duration::from_secs(5));
        assert_eq!(wakeup_slack(), MAX_WAKEUP_SLACK);
        set_wakeup_slack(Duration::ZERO);
        assert_eq!(wakeup_slack(), Duration::ZERO);
    }
}
