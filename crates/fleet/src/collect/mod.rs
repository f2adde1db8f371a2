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
