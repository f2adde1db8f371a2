//! Wake-up coalescing: the fleet's runtime wakes at most once per `[serve] wakeup_slack`.
//!
//! A fleet's work arrives as many small events spread over each second: a thousand targets each
//! send a message or two, and each has a timer or two. Woken for each, the runtime's thread sleeps
//! and wakes thousands of times a second, and those context switches and `epoll_wait` calls cost
//! more than the work they deliver. Linux calls the cure timer slack: when the thread is about to
//! sleep again less than the slack after it last did, the park hook ([`Pace::hook`]) makes it sleep the rest of the
//! slack first. What arrived meanwhile is then handled in one wake-up, read by read.
//!
//! A message is handled at most one slack late (5 ms by default, at most [`MAX_WAKEUP_SLACK`]);
//! nothing is lost or reordered, because the bytes wait in the socket buffers. `telemon`'s binary
//! installs a [`Pace`]'s [`Pace::hook`] on its runtime and hands the `Pace` to its `serve`, `top` and
//! `record` commands, which set the slack from the config (the one-target commands leave it at zero). A
//! runtime without the hook (tests, a library user's own) is not affected.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The default `[serve] wakeup_slack`.
pub const DEFAULT_WAKEUP_SLACK: Duration = Duration::from_millis(5);
/// The largest `[serve] wakeup_slack` a config may ask for.
pub const MAX_WAKEUP_SLACK: Duration = Duration::from_millis(100);

thread_local! {
    /// The earliest time this thread may park again without sleeping first.
    static NEXT_PARK: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The wake-up slack of the runtimes whose park hook it is: set when the config is read, and again by
/// each reload. A clone shares the slack.
#[derive(Debug, Clone, Default)]
pub struct Pace {
    /// The slack in force, in microseconds (0: no coalescing).
    micros: Arc<AtomicU64>,
}

impl Pace {
    /// A pace with no slack yet (each event wakes the thread).
    pub fn new() -> Pace {
        Pace::default()
    }

    /// Sets the slack (zero turns coalescing off); values above [`MAX_WAKEUP_SLACK`] are lowered to it.
    pub fn set(&self, slack: Duration) {
        let micros = slack.min(MAX_WAKEUP_SLACK).as_micros();
        self.micros.store(u64::try_from(micros).unwrap_or(u64::MAX), Relaxed);
    }

    /// The slack in force.
    pub fn slack(&self) -> Duration {
        Duration::from_micros(self.micros.load(Relaxed))
    }

    /// A runtime's `on_thread_park` hook: when this thread parked less than the slack ago, it sleeps
    /// until a whole slack has passed, so that it wakes at most once per slack.
    pub fn hook(&self) -> impl Fn() + Send + Sync + 'static {
        let pace = self.clone();
        move || pace.before_park()
    }

    fn before_park(&self) {
        let slack = self.slack();
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
        let pace = Pace::new();
        let hook = pace.hook();
        pace.set(Duration::from_millis(20));
        assert_eq!(pace.slack(), Duration::from_millis(20));
        let start = Instant::now();
        for _ in 0..3 {
            hook();
        }
        // The first park does not wait; the next two wait a slack each.
        assert!(start.elapsed() >= Duration::from_millis(40), "{:?}", start.elapsed());
        pace.set(Duration::from_secs(5));
        assert_eq!(pace.slack(), MAX_WAKEUP_SLACK);
        pace.set(Duration::ZERO);
        assert_eq!(pace.slack(), Duration::ZERO);
    }
}
