//! The polling schedule of `PollFacts`, sans-IO: time is passed in, so the sim and the tests share it.

use std::time::Duration;

use std::time::Instant;

use crate::message::{DEFAULT_POLL_INTERVAL_MS, MIN_POLL_INTERVAL_MS};

/// The period an interpreter uses for a requested `Interval`: default 1000 ms, at least 500 ms.
pub fn effective_interval(requested_ms: Option<i64>) -> Duration {
    let ms = match requested_ms {
        None => DEFAULT_POLL_INTERVAL_MS,
        Some(ms) => u64::try_from(ms).unwrap_or(0).max(MIN_POLL_INTERVAL_MS),
    };
    Duration::from_millis(ms)
}

/// When the next poll reply is due.
///
/// `PollFacts` starts it (the first reply is due at once), `BumpFacts` makes a reply due at once and the
/// period continues from there, `StopFacts` stops it.
#[derive(Debug, Clone, Default)]
pub struct PollTimer {
    state: Option<(Duration, Instant)>,
}

impl PollTimer {
    /// A stopped timer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts (or restarts) polling with `interval`; the first reply is due at `now`.
    pub fn start(&mut self, now: Instant, interval: Duration) {
        self.state = Some((interval, now));
    }

    /// Stops polling.
    pub fn stop(&mut self) {
        self.state = None;
    }

    /// Makes a reply due at `now`; returns `false` (and does nothing) when not polling.
    pub fn bump(&mut self, now: Instant) -> bool {
        match &mut self.state {
            Some((_, due)) => {
                *due = now;
                true
            }
            None => false,
        }
    }

    /// The current period, when polling.
    pub fn interval(&self) -> Option<Duration> {
        self.state.map(|(interval, _)| interval)
    }

    /// When the next reply is due, when polling.
    pub fn deadline(&self) -> Option<Instant> {
        self.state.map(|(_, due)| due)
    }

    /// Whether a reply is due at `now`; if so the next one is scheduled one period later (from the
    /// due time, so the cadence does not drift, but never in the past after a stall).
    pub fn fire(&mut self, now: Instant) -> bool {
        match &mut self.state {
            Some((interval, due)) if *due <= now => {
                *due = match due.checked_add(*interval) {
                    Some(next) if next > now => next,
                    // A stall: one period after now, not a burst of catch-up replies.
                    _ => now.checked_add(*interval).unwrap_or_else(|| far_future(now)),
                };
                true
            }
            _ => false,
        }
    }
}

/// A deadline that never comes in practice, for periods too long for the clock to add.
fn far_future(now: Instant) -> Instant {
    now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_and_default() {
        assert_eq!(effective_interval(None), Duration::from_millis(1000));
        assert_eq!(effective_interval(Some(100)), Duration::from_millis(500));
        assert_eq!(effective_interval(Some(-5)), Duration::from_millis(500));
        assert_eq!(effective_interval(Some(750)), Duration::from_millis(750));
    }

    #[test]
    fn a_huge_interval_does_not_overflow_the_clock() {
        let t0 = Instant::now();
        let mut timer = PollTimer::new();
        timer.start(t0, effective_interval(Some(i64::MAX)));
        assert!(timer.fire(t0));
        assert!(!timer.fire(t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn cadence_bump_and_stop() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut timer = PollTimer::new();
        assert!(!timer.fire(t0));
        timer.start(t0, ms(500));
        assert!(timer.fire(t0), "first reply at once");
        assert!(!timer.fire(t0 + ms(499)));
        assert!(timer.fire(t0 + ms(500)));
        assert_eq!(timer.deadline(), Some(t0 + ms(1000)));
        assert!(timer.bump(t0 + ms(700)));
        assert!(timer.fire(t0 + ms(700)));
        assert_eq!(timer.deadline(), Some(t0 + ms(1200)), "the period continues from the bump");
        // A stall: the next deadline is one period after now, not a burst of catch-up replies.
        assert!(timer.fire(t0 + ms(5000)));
        assert_eq!(timer.deadline(), Some(t0 + ms(5500)));
        timer.stop();
        assert!(!timer.bump(t0 + ms(6000)));
        assert!(!timer.fire(t0 + ms(9000)));
    }
}
