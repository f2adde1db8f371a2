//! One retry policy for the protocols whose libraries have no reconnect policy of their own (smon, sysinfo):
//! exponential backoff with jitter, so that many telemon processes restarted together do not reconnect in step.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The first delay after a failure.
pub const FIRST_DELAY: Duration = Duration::from_millis(50);
/// The longest delay between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// Exponential backoff with "equal jitter": each delay is drawn from `[d/2, d]`, and `d` doubles up to a cap.
/// One `Backoff` serves one streak of failures: start a new one after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    rng: u64,
}

impl Backoff {
    /// Delays start at `first` and double up to `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        // Seeded from the process's random hasher keys: no dependency, and different in every process.
        let seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8);
        Backoff { next: first, max: max.max(first), rng: seed | 1 }
    }

    /// The delay to wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        // xorshift64: plenty for spreading reconnects.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let half = d / 2;
        half + half.mul_f64((self.rng >> 11) as f64 / (1u64 << 53) as f64)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(FIRST_DELAY, MAX_DELAY)
    }
}

/// Runs `attempt` until it succeeds, backing off between failures.
///
/// With `wait: Some(d)`, gives up with the last error once the next delay would end after `d` from now;
/// with `None`, retries forever. The first failure of a streak is reported on stderr (`telemon: WHAT: ERROR;
/// retrying`), the later ones only in the debug log, and a success after failures says so.
pub async fn retry<T, E, F, Fut>(what: &str, wait: Option<Duration>, mut attempt: F) -> Result<T, E>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = wait.map(|w| Instant::now() + w);
    let mut backoff = Backoff::default();
    let mut failures = 0u32;
    loop {
        match attempt().await {
            Ok(value) => {
                if failures > 0 && deadline.is_none() {
                    eprintln!("telemon: {what}: connected after {failures} failed attempts");
                }
                return Ok(value);
            }
            Err(e) => {
                let delay = backoff.next_delay();
                if deadline.is_some_and(|d| Instant::now() + delay > d) {
                    return Err(e);
                }
                if failures == 0 && deadline.is_none() {
                    eprintln!("telemon: {what}: {e}; retrying");
                }
                tracing::debug!(what, error = %e, ?delay, "attempt failed; retrying");
                failures += 1;
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_with_jitter_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let bounds = [(50, 100), (100, 200), (200, 400), (200, 400), (200, 400)];
        for (lo, hi) in bounds {
            let d = b.next_delay();
            assert!(
                d >= Duration::from_millis(lo) && d <= Duration::from_millis(hi),
                "{d:?} not in {lo}..={hi}"
            );
        }
    }

    #[test]
    fn two_backoffs_do_not_retry_in_step() {
        let mut a = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let same = (0..16).filter(|_| a.next_delay() == b.next_delay()).count();
        assert!(same < 16);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_and_gives_up_after_the_wait() {
        let mut calls = 0;
        let got: Result<u32, String> = retry("t", None, || {
            calls += 1;
            let n = calls;
            async move {
                if n < 4 {
                    Err(format!("no {n}"))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got, Ok(4));

        let started = Instant::now();
        let got: Result<(), String> =
            retry("t", Some(Duration::from_secs(1)), || async { Err("down".into()) }).await;
        assert_eq!(got, Err("down".to_string()));
        assert!(started.elapsed() <= Duration::from_secs(1));
    }
}
