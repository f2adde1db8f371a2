//! What every protocol's collector (in its folder under [`crate::protocol`]) is built from: each runs a
//! target's connection in the target's own task, maps what the peer sends onto the families of
//! `metrics.md`, and publishes through a [`Publisher`]; [`dialin`] is the gate of the dial-in listeners.
//!
//! Every collector is built the same way: a *session* connects, reads and returns the [`Failure`]
//! that ended it; [`Retry::after`] marks the target down, backs off (exponentially, with jitter) and
//! starts the next session.

pub mod dialin;

use std::future::Future;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::model::ErrorKind;
use super::target::{Failure, Publisher};
use crate::retry::Backoff;

/// How long a connection (and its handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause after a listener failed to accept (e.g. out of descriptors), so that it does not spin.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// The first pause after a failed session.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest pause between two sessions.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The pause between sessions: after each session's end, [`Retry::after`] marks the target down
/// with the session's failure and sleeps a backoff, reset by any session that got connected.
#[derive(Debug)]
pub struct Retry {
    backoff: Backoff,
    connects: u64,
}

impl Default for Retry {
    fn default() -> Self {
        Retry { backoff: Backoff::new(FIRST_BACKOFF, MAX_BACKOFF), connects: 0 }
    }
}

impl Retry {
    /// Marks the target down with `failure` and waits before the next session.
    pub async fn after(&mut self, p: &mut Publisher, failure: Failure) {
        if p.connects() > self.connects {
            self.connects = p.connects();
            self.backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        }
        p.down(&failure);
        tokio::time::sleep(self.backoff.next_delay()).await;
    }
}

/// Awaits `fut` for at most `limit`; a timeout is a [`Failure`] of kind `timeout` saying `what`.
///
/// `fut` is boxed here, before anything is awaited: a connect or handshake future is large and
/// short-lived, and held inline it would size the collector's future, which lives as long as the
/// target (an `async fn` would keep its argument inline).
pub fn within<'a, T>(
    limit: Duration,
    what: &'a str,
    fut: impl Future<Output = T> + Send + 'a,
) -> impl Future<Output = Result<T, Failure>> + Send + 'a {
    let fut = Box::pin(fut);
    async move {
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| Failure::new(ErrorKind::Timeout, format!("{what}: no answer within {limit:?}")))
    }
}

/// How many connects may start at once, fleet-wide, before the next waits (see [`connecting`]).
pub const CONNECTS_AT_ONCE: usize = 256;
/// How long a connect keeps its place among [`CONNECTS_AT_ONCE`] at most: a peer that does not answer holds one
/// no longer, and cannot hold back the others.
pub const CONNECT_PLACE: Duration = Duration::from_millis(50);

/// [`within`] for a connect and its handshake, paced fleet-wide: it starts once it has one of
/// [`CONNECTS_AT_ONCE`] places, which it keeps until it completes or for [`CONNECT_PLACE`], so that at most
/// that many connects are new at any time (about 5,000 a second). A start, or every peer restarting at once,
/// is then a paced stream of connects rather than a burst of SYNs that overflows the peers' accept queues
/// (each dropped SYN costs a second or more of retransmission). The wait for a place is not counted in
/// `limit`.
pub fn connecting<'a, T: Send + 'a>(
    limit: Duration,
    what: &'a str,
    fut: impl Future<Output = T> + Send + 'a,
) -> impl Future<Output = Result<T, Failure>> + Send + 'a {
    static PLACES: Semaphore = Semaphore::const_new(CONNECTS_AT_ONCE);
    let connect = within(limit, what, fut);
    async move {
        // Never closed: a place is always given in the end.
        let place = PLACES.acquire().await.ok();
        let mut connect = std::pin::pin!(connect);
        tokio::select! {
            done = &mut connect => done,
            () = tokio::time::sleep(CONNECT_PLACE) => {
                drop(place);
                connect.await
            }
        }
    }
}

/// Completes when a held-back change is due to be published (see [`Publisher::flush_due`]); never
/// when nothing is held back, so an idle target costs no timer wake-ups.
pub async fn flush_due(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A task that is aborted when this handle is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A storm of connects is paced: never more than [`CONNECTS_AT_ONCE`] at once while they take less than
    /// [`CONNECT_PLACE`]; one that hangs gives its place up after [`CONNECT_PLACE`], so hanging peers never hold
    /// back the rest.
    #[tokio::test(start_paused = true)]
    async fn connects_are_paced_and_a_hanging_one_gives_its_place_up() {
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let started = tokio::time::Instant::now();
        // As many peers that never answer as there are places...
        let mut hanging = tokio::task::JoinSet::new();
        for _ in 0..CONNECTS_AT_ONCE {
            hanging.spawn(connecting(CONNECT_TIMEOUT, "connect", std::future::pending::<()>()));
        }
        tokio::task::yield_now().await;
        // ...then a thousand that answer in 10 ms.
        let mut answering = tokio::task::JoinSet::new();
        for _ in 0..1000 {
            let (now, most) = (now.clone(), most.clone());
            answering.spawn(async move {
                let connect = async {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                };
                connecting(CONNECT_TIMEOUT, "connect", connect).await.unwrap();
                tokio::time::Instant::now()
            });
        }
        let mut last = started;
        while let Some(at) = answering.join_next().await {
            last = last.max(at.unwrap());
        }
        assert!(most.load(Ordering::SeqCst) <= CONNECTS_AT_ONCE, "{most:?}");
        // The hanging ones gave their places up at 50 ms; then 1000 connects of 10 ms, 256 at a time: 4 rounds.
        let took = last - started;
        assert!(took >= CONNECT_PLACE + Duration::from_millis(40), "{took:?}");
        assert!(took < CONNECT_PLACE + Duration::from_millis(100), "{took:?}");
        // The hanging ones time out at their own limit, not counting their wait.
        while let Some(done) = hanging.join_next().await {
            assert_eq!(done.unwrap().unwrap_err().kind, ErrorKind::Timeout);
        }
        assert!(tokio::time::Instant::now() - started >= CONNECT_TIMEOUT);
    }
}

/// What the collectors' property tests share: a publisher on its own registry, and a check of
/// every value in the rendered exposition.
#[cfg(test)]
pub(crate) mod testing {
    use crate::model::Protocol;
    use crate::registry::Registry;
    use crate::render::{render, Format};
    use crate::target::Publisher;

    /// A publisher of one target `t` on a fresh registry.
    pub fn publisher(protocol: Protocol) -> (Registry, Publisher) {
        let reg = Registry::new();
        let p = Publisher::new(&reg, "t", protocol, vec![], 10_000);
        (reg, p)
    }

    /// Publishes `p`, renders the registry and checks that every sample value is a number, finite
    /// unless its family is one of `non_finite_ok` (families whose NaN or ±Inf is documented).
    pub fn check_rendered(reg: &Registry, p: &mut Publisher, non_finite_ok: &[&str]) -> Result<(), String> {
        p.flush();
        for format in [Format::Text004, Format::OpenMetrics] {
            let text = render(&reg.snapshot(), format);
            for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
                let value = line.rsplit(' ').next().unwrap_or("");
                let finite = match value {
                    "NaN" | "+Inf" | "-Inf" => false,
                    v => v.parse::<f64>().map_err(|e| format!("{line:?}: {e}"))?.is_finite(),
                };
                let family = line.split(['{', ' ']).next().unwrap_or("");
                if !finite && !non_finite_ok.iter().any(|f| family.starts_with(f)) {
                    return Err(format!("{line:?} is not finite"));
                }
            }
        }
        Ok(())
    }

    /// `text` with its runs of digits replaced, in turn, by `numbers` (cycling).
    pub fn with_numbers(text: &str, numbers: &[String]) -> String {
        let mut out = String::with_capacity(text.len());
        let mut k = 0;
        let mut in_digits = false;
        for c in text.chars() {
            if c.is_ascii_digit() {
                if !in_digits && !numbers.is_empty() {
                    out.push_str(&numbers[k % numbers.len()]);
                    k += 1;
                }
                in_digits = true;
            } else {
                in_digits = false;
                out.push(c);
            }
        }
        out
    }

    /// A number as a peer might print it: small, any `u64`, or any `i64`.
    pub fn any_number() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            (0u64..1000).prop_map(|v| v.to_string()),
            any::<u64>().prop_map(|v| v.to_string()),
            any::<i64>().prop_map(|v| v.to_string()),
            Just(u64::MAX.to_string()),
        ]
    }
}
