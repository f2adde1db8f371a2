//! The two tasks of every sender: a sampler that turns the store into queued items on each tick
//! (never waiting on the network), and an HTTP loop that sends the queue in order, with retries.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::memory_queue::{Queue, Queued};
use crate::stats::{now_ms, reason, Stats};
use telemon_fleet::retry::Backoff;
use telemon_fleet::{FleetSnapshot, Registry};

/// The first delay after a failed request.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest delay between two attempts (also the cap on `Retry-After`).
pub const RETRY_MAX: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// What differs between remote write and OTLP.
pub(crate) trait Wire: Send + 'static {
    /// One queued sample or data point.
    type Item: Queued + Send + Sync + 'static;
    /// The request's `Content-Type`.
    const CONTENT_TYPE: &'static str;
    /// Other fixed request headers.
    const HEADERS: &'static [(&'static str, &'static str)];

    /// What the HTTP loop needs to encode a request (OTLP's Resource).
    type Context: Send + Sync + 'static;

    /// The encoding context, taken once at start.
    fn context(&self) -> Self::Context;
    /// Appends the items of `snapshot` taken at `now_ms`.
    fn sample(&mut self, snapshot: &FleetSnapshot, now_ms: i64, out: &mut Vec<Self::Item>);
    /// The request body of `batch`.
    fn encode(context: &Self::Context, batch: &[Self::Item]) -> Vec<u8>;
    /// Whether a request answered with `status` (not 2xx) is tried again.
    fn retryable(status: u16) -> bool;
    /// From a 2xx reply's body: how many items the receiver rejected all the same.
    fn rejected(_body: &[u8]) -> u64 {
        0
    }
}

/// How one attempt ended.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// 2xx, with the reply body.
    Sent(Vec<u8>),
    /// Try again (after the server's `Retry-After`, when it gave one).
    Retry { after: Option<Duration>, why: String },
    /// Give up on this batch; the reason labels the drop.
    Drop { reason: String, why: String },
}

/// Parses `Retry-After`: delay-seconds or an HTTP date.
pub(crate) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(RETRY_AFTER_MAX));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO).min(RETRY_AFTER_MAX))
}

/// The most of a reply body read (the rest is ignored): a receiver cannot make telemon buffer
/// more than this per request.
pub const MAX_REPLY: usize = 64 << 10;

/// Reads at most `max` bytes of `resp`'s body.
async fn read_capped(mut resp: reqwest::Response, max: usize) -> reqwest::Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = max - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() == max {
            break;
        }
    }
    Ok(body)
}

/// `error` and its causes ([`std::error::Error::source`]), joined by `: `, so that a log says why: reqwest's
/// `error sending request for url (...)` names no cause, its sources do (`client error (Connect): tcp connect
/// error: Connection refused (os error 111)`). A cause whose text is already in the message is left out.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

/// One POST of `body`.
pub(crate) async fn post<W: Wire>(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Attempt {
    let mut req = client.post(url).header(reqwest::header::CONTENT_TYPE, W::CONTENT_TYPE);
    for (k, v) in W::HEADERS {
        req = req.header(*k, *v);
    }
    let resp = match req.body(body).send().await {
        Ok(r) => r,
        Err(e) if e.is_builder() => {
            return Attempt::Drop { reason: reason::REQUEST.into(), why: error_chain(&e) };
        }
        Err(e) => return Attempt::Retry { after: None, why: error_chain(&e) },
    };
    let status = resp.status().as_u16();
    let after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, SystemTime::now()));
    let body = match read_capped(resp, MAX_REPLY).await {
        Ok(b) => b,
        Err(e) if (200..300).contains(&status) => {
            // The receiver said yes; the body is only for partial_success.
            tracing::debug!(error = %e, "reading a 2xx reply");
            Vec::new()
        }
        Err(e) => return Attempt::Retry { after, why: format!("HTTP {status}, then {}", error_chain(&e)) },
    };
    if (200..300).contains(&status) {
        return Attempt::Sent(body);
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(256)]).trim().to_owned();
    let why = format!("HTTP {status}: {text}");
    if W::retryable(status) {
        Attempt::Retry { after, why }
    } else {
        Attempt::Drop { reason: reason::http(status).into(), why }
    }
}

/// The retry state of one sender's HTTP loop: whether it is failing (logged once per failing spell) and its
/// backoff.
pub(crate) struct Tries<'a> {
    pub url: &'a str,
    pub stats: &'a Stats,
    pub failing: &'a mut bool,
    pub backoff: &'a mut Backoff,
}

impl Tries<'_> {
    /// POSTs `body` (`n` samples) once and counts the outcome: `None` when the batch is done (sent, or
    /// dropped by the receiver), else the delay before the next attempt.
    pub async fn attempt<W: Wire>(
        &mut self,
        client: &reqwest::Client,
        body: &[u8],
        n: usize,
    ) -> Option<Duration> {
        let started = Instant::now();
        let attempt = post::<W>(client, self.url, body.to_vec()).await;
        self.stats.observe(started.elapsed());
        match attempt {
            Attempt::Sent(reply) => {
                self.stats.add_sent(n);
                let rejected = W::rejected(&reply);
                if rejected > 0 {
                    self.stats.add_partial();
                    self.stats.add_dropped(reason::PARTIAL_SUCCESS, rejected);
                }
                if *self.failing {
                    eprintln!("telemon: push to {}: sending again", self.url);
                    *self.failing = false;
                }
                *self.backoff = Backoff::new(RETRY_FIRST, RETRY_MAX);
                None
            }
            Attempt::Drop { reason, why } => {
                tracing::warn!(url = %self.url, %why, samples = n, "dropped by the receiver");
                self.stats.add_dropped(&reason, n as u64);
                None
            }
            Attempt::Retry { after, why } => {
                if !*self.failing {
                    eprintln!("telemon: push to {}: {why}; retrying", self.url);
                    *self.failing = true;
                }
                self.stats.add_retried(n);
                Some(after.unwrap_or_else(|| self.backoff.next_delay()))
            }
        }
    }
}

/// A sampler's clock: a tick every `batch`, each with its timestamp in Unix ms, which never goes backwards
/// even when the wall clock does.
pub(crate) struct Ticks {
    interval: tokio::time::Interval,
    last_ms: i64,
}

impl Ticks {
    pub fn new(every: Duration) -> Ticks {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticks { interval, last_ms: 0 }
    }

    /// The next tick's timestamp, or `None` once `stop` turns true.
    pub async fn next(&mut self, stop: &mut watch::Receiver<bool>) -> Option<i64> {
        tokio::select! {
            _ = self.interval.tick() => {}
            _ = stop.wait_for(|s| *s) => return None,
        }
        self.last_ms = now_ms().max(self.last_ms + 1);
        Some(self.last_ms)
    }
}

/// A running sender's settings.
#[derive(Clone)]
pub(crate) struct Plan {
    pub url: String,
    pub batch: Duration,
    pub max_per_send: usize,
}

/// Samples `registry` every `plan.batch` into `queue` until `stop` turns true.
pub(crate) async fn sampler<W: Wire>(
    mut wire: W,
    registry: Registry,
    queue: Arc<Queue<W::Item>>,
    stats: Arc<Stats>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = Ticks::new(every);
    let mut items = Vec::new();
    while let Some(now) = ticks.next(&mut stop).await {
        wire.sample(&registry.snapshot(), now, &mut items);
        let dropped = queue.push(items.drain(..));
        stats.add_dropped(reason::QUEUE_FULL, dropped);
        stats.set_queue(queue.bytes(), queue.oldest_ms());
    }
}

/// Sends `queue` in order, `plan.max_per_send` items per request, until `stop` turns true and
/// the queue is empty (the caller bounds that with its shutdown deadline); or, when `handoff` is set
/// before `stop`, as soon as its request in flight ends, leaving the queue to a replacement.
pub(crate) async fn sender<W: Wire>(
    context: W::Context,
    client: reqwest::Client,
    plan: Plan,
    queue: Arc<Queue<W::Item>>,
    stats: Arc<Stats>,
    (stop, handoff): (watch::Receiver<bool>, Arc<std::sync::atomic::AtomicBool>),
    inflight: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_MAX);
    let mut failing = false;
    loop {
        if handoff.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let batch = queue.take(plan.max_per_send);
        if batch.is_empty() {
            if *stop.borrow() {
                return;
            }
            let mut stop = stop.clone();
            tokio::select! {
                () = queue.pushed() => {}
                _ = stop.wait_for(|s| *s) => {}
            }
            continue;
        }
        let n = batch.len();
        inflight.store(n as u64, std::sync::atomic::Ordering::Relaxed);
        stats.set_inflight(batch.first().map(Queued::timestamp_ms));
        stats.set_queue(queue.bytes(), queue.oldest_ms());
        let body = W::encode(&context, &batch);
        let mut tries = Tries { url: &plan.url, stats: &stats, failing: &mut failing, backoff: &mut backoff };
        while let Some(delay) = tries.attempt::<W>(&client, &body, n).await {
            // A retry waits; a replacement (handoff) takes the batch back at the front of the queue instead.
            if *stop.borrow() {
                tokio::time::sleep(delay).await;
            } else {
                let mut stop = stop.clone();
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            }
            if handoff.load(std::sync::atomic::Ordering::Relaxed) {
                let dropped = queue.put_back(batch);
                stats.add_dropped(reason::QUEUE_FULL, dropped);
                inflight.store(0, std::sync::atomic::Ordering::Relaxed);
                stats.set_inflight(None);
                return;
            }
        }
        drop(batch);
        inflight.store(0, std::sync::atomic::Ordering::Relaxed);
        stats.set_inflight(None);
        stats.set_queue(queue.bytes(), queue.oldest_ms());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 45: a failed POST was logged as `error sending request for url (...)`, which hides why.
    #[tokio::test]
    async fn a_failed_request_says_why() {
        // A port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/api/v1/write");
        let attempt = post::<crate::remote_write::RemoteWrite>(&reqwest::Client::new(), &url, vec![1]).await;
        let Attempt::Retry { why, .. } = attempt else { panic!("{attempt:?}") };
        assert!(why.starts_with("error sending request for url ("), "{why}");
        assert!(why.contains("Connection refused"), "the cause: {why}");
        assert_eq!(why.matches("Connection refused").count(), 1, "said once: {why}");
    }

    #[test]
    fn retry_after_takes_seconds_or_a_date_and_is_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(retry_after("86400", now), Some(RETRY_AFTER_MAX));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(7)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-1", now), None);
    }
}
