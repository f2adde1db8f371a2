//! What both dial-in listeners (`[[mono_listen]]`, `[[hmon_listen]]`) share: who may connect, how
//! many handshakes may be in progress, and a bound on the targets they make.
//!
//! A connection is first [screened](DialIn::screen) (its source against `allow`, the source's
//! recent failed handshakes, the handshakes in progress), then has `hello_timeout` for its Hello
//! or handshake, and is then [admitted](DialIn::admit) as a target under a name no live target
//! holds. A target whose peer left stays listed as down for the linger time; when `max_targets`
//! (live and down) is reached, the oldest down target is forgotten first, and when every target is
//! live the new connection is refused. Every refusal is counted in
//! `telemon_listener_refused_total{listener, reason}` and logged at most once a minute.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::ACCEPT_ERROR_PAUSE;
use crate::model::{Protocol, TargetSnapshot, TargetState};
use crate::own::{self, Refusal};
use crate::registry::Registry;
use crate::target::Publisher;

/// Handshakes in progress on one listener; connections beyond are refused at once.
pub const MAX_PENDING_HANDSHAKES: usize = 256;
/// Failed handshakes from one source address within [`STRIKE_WINDOW`] after which that source
/// is refused until the window ends.
pub const MAX_FAILED_HANDSHAKES: u32 = 16;
/// The window over which failed handshakes are counted per source.
pub const STRIKE_WINDOW: Duration = Duration::from_secs(60);
/// Sources whose failed handshakes are remembered (beyond, only the global cap applies).
const MAX_SOURCES: usize = 4096;
/// How often refusals are logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// How often the accept loops forget targets that lingered long enough.
pub const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// A listener's gate and table of targets; cheap to clone.
#[derive(Debug, Clone)]
pub struct DialIn {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    listener: Arc<str>,
    limits: ListenerLimits,
    registry: Registry,
    linger: Duration,
    table: Mutex<Table>,
    /// `telemon_listener_targets`: set from the table each time a lock on it is released.
    targets: Arc<std::sync::atomic::AtomicU64>,
}

/// The table, locked; dropping it publishes how many targets the table holds.
struct Locked<'a> {
    table: MutexGuard<'a, Table>,
    gauge: &'a std::sync::atomic::AtomicU64,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.table
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.table
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let held = self.table.live.len() + self.table.down.len();
        self.gauge.store(held as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
struct Table {
    next_claim: u64,
    /// Live targets by name, with the claim of the session that holds each.
    live: HashMap<Arc<str>, u64>,
    /// Down targets by name: the claim of the session that left, and when.
    down: HashMap<Arc<str>, (u64, Instant)>,
    /// Down targets, oldest first (an entry whose claim no longer matches `down` is stale).
    down_order: VecDeque<(Arc<str>, u64)>,
    pending: usize,
    strikes: HashMap<IpAddr, (u32, Instant)>,
    last_log: Option<Instant>,
    unlogged: u64,
}

impl Table {
    /// Forgets the oldest down target; false when there is none.
    fn evict_oldest_down(&mut self, registry: &Registry) -> bool {
        while let Some((name, claim)) = self.down_order.pop_front() {
            if self.down.get(&name).is_some_and(|(c, _)| *c == claim) {
                self.down.remove(&name);
                registry.remove(&name);
                return true;
            }
        }
        false
    }
}

/// A connection whose handshake is in progress: hold it until [`DialIn::admit`] or
/// [`Pending::failed`]. Dropped otherwise, it counts as a failed handshake.
#[derive(Debug)]
pub struct Pending {
    dial: DialIn,
    source: IpAddr,
    settled: bool,
}

impl Pending {
    /// The handshake failed or timed out: counted against the source, and as a refusal.
    pub fn failed(mut self) {
        self.settle(false);
    }

    fn settle(&mut self, ok: bool) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let mut t = self.dial.lock();
        t.pending -= 1;
        if !ok {
            let now = Instant::now();
            if t.strikes.len() >= MAX_SOURCES {
                t.strikes.retain(|_, (_, since)| now.duration_since(*since) < STRIKE_WINDOW);
            }
            let tracked = t.strikes.len() < MAX_SOURCES || t.strikes.contains_key(&self.source);
            if tracked {
                let s = t.strikes.entry(self.source).or_insert((0, now));
                if now.duration_since(s.1) >= STRIKE_WINDOW {
                    *s = (0, now);
                }
                s.0 += 1;
            }
            self.dial.refused_locked(&mut t, Refusal::Handshake, self.source);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.settle(false);
    }
}

/// A session admitted as a target: publish through `publisher`, and call [`DialIn::ended`] with
/// `claim` when the peer leaves.
#[derive(Debug)]
pub struct Admitted {
    /// The target's publisher (state `connecting`; not removed on drop: the table forgets it).
    pub publisher: Publisher,
    /// This session's claim on the name.
    pub claim: u64,
}

impl DialIn {
    /// The gate of the listener named `listener` (its block's name).
    pub fn new(listener: &str, limits: ListenerLimits, registry: Registry, linger: Duration) -> DialIn {
        let listener: Arc<str> = Arc::from(listener);
        let targets = own::listener_started(&listener);
        DialIn {
            shared: Arc::new(Shared {
                listener,
                limits,
                registry,
                linger,
                table: Mutex::new(Table::default()),
                targets,
            }),
        }
    }

    /// The listener's bounds.
    pub fn limits(&self) -> &ListenerLimits {
        &self.shared.limits
    }

    fn lock(&self) -> Locked<'_> {
        let table = self.shared.table.lock().unwrap_or_else(|e| e.into_inner());
        Locked { table, gauge: &self.shared.targets }
    }

    fn refused_locked(&self, t: &mut Table, reason: Refusal, source: IpAddr) {
        own::listener_refused(&self.shared.listener, reason);
        t.unlogged += 1;
        let now = Instant::now();
        if t.last_log.is_none_or(|at| now.duration_since(at) >= LOG_EVERY) {
            tracing::warn!(
                listener = %self.shared.listener,
                refused = t.unlogged,
                last_reason = reason.as_str(),
                last_source = %source,
                "refusing dial-in connections (counted in telemon_listener_refused_total; logged once a minute)"
            );
            t.last_log = Some(now);
            t.unlogged = 0;
        }
    }

    /// Decides at once whether a new connection from `peer` may try its handshake.
    pub fn screen(&self, peer: SocketAddr) -> Result<Pending, Refusal> {
        let source = peer.ip().to_canonical();
        let mut t = self.lock();
        let allow = &self.shared.limits.allow;
        let verdict = if !allow.is_empty() && !allow.iter().any(|net| net.contains(&source)) {
            Err(Refusal::NotAllowed)
        } else if t
            .strikes
            .get(&source)
            .is_some_and(|(n, since)| *n >= MAX_FAILED_HANDSHAKES && since.elapsed() < STRIKE_WINDOW)
        {
            Err(Refusal::RateLimited)
        } else if t.pending >= MAX_PENDING_HANDSHAKES {
            Err(Refusal::TooManyHandshakes)
        } else {
            Ok(())
        };
        match verdict {
            Ok(()) => {
                t.pending += 1;
                Ok(Pending { dial: self.clone(), source, settled: false })
            }
            Err(reason) => {
                self.refused_locked(&mut t, reason, source);
                Err(reason)
            }
        }
    }

    /// Makes a target of a session whose handshake succeeded, under the first of `names` that no
    /// live target of this listener holds (a down one is taken over). When `max_targets` are
    /// listed, the oldest down target is forgotten; when all are live, the session is refused.
    pub fn admit(
        &self,
        mut pending: Pending,
        names: &[String],
        protocol: Protocol,
        labels: Vec<(String, String)>,
        series_limit: usize,
    ) -> Result<Admitted, Refusal> {
        pending.settle(true);
        let mut t = self.lock();
        let registry = &self.shared.registry;
        let Some(name) = names.iter().find(|n| !t.live.contains_key(n.as_str())) else {
            self.refused_locked(&mut t, Refusal::MaxTargets, pending.source);
            return Err(Refusal::MaxTargets);
        };
        let name: Arc<str> = Arc::from(name.as_str());
        let takes_over = t.down.contains_key(&name);
        if !takes_over
            && t.live.len() + t.down.len() >= self.shared.limits.max_targets
            && !t.evict_oldest_down(registry)
        {
            self.refused_locked(&mut t, Refusal::MaxTargets, pending.source);
            return Err(Refusal::MaxTargets);
        }
        let is_down = |old: &TargetSnapshot| old.state == TargetState::Down;
        let Some(publisher) =
            Publisher::try_new(registry, name.clone(), protocol, labels, series_limit, is_down)
        else {
            // Only another block could hold the name, and names carry their block's name.
            self.refused_locked(&mut t, Refusal::MaxTargets, pending.source);
            return Err(Refusal::MaxTargets);
        };
        t.down.remove(&name);
        t.next_claim += 1;
        let claim = t.next_claim;
        t.live.insert(name, claim);
        Ok(Admitted { publisher, claim })
    }

    /// The session holding `claim` on `name` ended: the target is listed as down until it
    /// lingered long enough, is taken over, or is forgotten for room.
    pub fn ended(&self, name: &Arc<str>, claim: u64) {
        let mut t = self.lock();
        if t.live.get(name) != Some(&claim) {
            return;
        }
        t.live.remove(name);
        t.down.insert(name.clone(), (claim, Instant::now()));
        t.down_order.push_back((name.clone(), claim));
        // Stale entries (names taken over since) are dropped now and then.
        if t.down_order.len() > 2 * t.down.len() + 64 {
            let Table { down, down_order, .. } = &mut *t;
            down_order.retain(|(n, c)| down.get(n).is_some_and(|(dc, _)| dc == c));
        }
    }

    /// Forgets the down targets that lingered long enough.
    pub fn expire(&self) {
        let mut t = self.lock();
        let now = Instant::now();
        while let Some((name, claim)) = t.down_order.front().cloned() {
            match t.down.get(&name) {
                Some(&(c, since)) if c == claim => {
                    if now.duration_since(since) < self.shared.linger {
                        break;
                    }
                    t.down.remove(&name);
                    self.shared.registry.remove(&name);
                }
                _ => {}
            }
            t.down_order.pop_front();
        }
    }

    /// Live and down targets listed now.
    pub fn targets(&self) -> usize {
        let t = self.lock();
        t.live.len() + t.down.len()
    }
}

impl DialIn {
    /// The accept loop of a dial-in listener: accepts on `listener`, forgets the targets that lingered long
    /// enough every [`EXPIRE_EVERY`], [screens](DialIn::screen) each peer, and runs `session` for each one
    /// that passes in a task of its own, until the loop is dropped (which ends every session). `what` names
    /// the peers in logs ("an interpreter", "an agent").
    pub async fn accept_loop<F, S>(self, listener: TcpListener, what: &'static str, mut session: F)
    where
        F: FnMut(TcpStream, SocketAddr, Pending) -> S,
        S: Future<Output = ()> + Send + 'static,
    {
        let mut sessions = JoinSet::new();
        let mut expire = tokio::time::interval(EXPIRE_EVERY);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                Some(_) = sessions.join_next() => continue,
                _ = expire.tick() => {
                    self.expire();
                    continue;
                }
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
                    tracing::warn!(%addr, error = %e, "cannot accept {what}");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            let Ok(pending) = self.screen(peer) else { continue };
            let _ = stream.set_nodelay(true);
            sessions.spawn(session(stream, peer, pending));
        }
    }
}

/// The default `max_targets` of a dial-in listener.
pub const DEFAULT_MAX_TARGETS: usize = 1000;
/// The default `hello_timeout` of a dial-in listener.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for ListenerLimits {
    /// The defaults: [`DEFAULT_MAX_TARGETS`], any source, [`DEFAULT_HELLO_TIMEOUT`].
    fn default() -> ListenerLimits {
        ListenerLimits {
            max_targets: DEFAULT_MAX_TARGETS,
            allow: Vec::new(),
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
        }
    }
}

/// The bounds of a dial-in listener (`[[mono_listen]]`, `[[hmon_listen]]`), from its block.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerLimits {
    /// The most targets kept, live and remembered.
    pub max_targets: usize,
    /// The source networks accepted; empty: any.
    pub allow: Vec<ipnet::IpNet>,
    /// The deadline for a new connection's Hello or handshake.
    pub hello_timeout: Duration,
}

impl ListenerLimits {
    /// The limits of a block's keys; `Err((key, message))` names what is wrong.
    pub fn new(
        max_targets: Option<usize>,
        allow: Option<&[String]>,
        hello_timeout: Option<Duration>,
    ) -> Result<ListenerLimits, (&'static str, String)> {
        let max_targets = max_targets.unwrap_or(DEFAULT_MAX_TARGETS);
        if max_targets == 0 {
            return Err(("max_targets", "must be above zero".into()));
        }
        let hello_timeout = hello_timeout.unwrap_or(DEFAULT_HELLO_TIMEOUT);
        if hello_timeout.is_zero() {
            return Err(("hello_timeout", "must be above zero".into()));
        }
        let mut nets = Vec::new();
        for a in allow.unwrap_or_default() {
            let net = match (a.parse::<ipnet::IpNet>(), a.parse::<std::net::IpAddr>()) {
                (Ok(net), _) => net.trunc(),
                (_, Ok(ip)) => ipnet::IpNet::from(ip),
                _ => {
                    let message = format!("{a:?} is neither a network (\"10.0.0.0/8\") nor an address");
                    return Err(("allow", message));
                }
            };
            nets.push(net);
        }
        Ok(ListenerLimits { max_targets, allow: nets, hello_timeout })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dial(max_targets: usize, allow: &[&str], linger: Duration) -> (DialIn, Registry) {
        let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
        let limits = ListenerLimits::new(Some(max_targets), Some(&allow), None).unwrap();
        let reg = Registry::new();
        (DialIn::new("test-listener", limits, reg.clone(), linger), reg)
    }

    fn peer(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn admit(d: &DialIn, names: &[&str]) -> Result<Admitted, Refusal> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        d.admit(d.screen(peer("127.0.0.1:1")).unwrap(), &names, Protocol::MONO, vec![], 10)
    }

    #[test]
    fn only_allowed_sources_get_in() {
        let (d, _) = dial(10, &["10.0.0.0/8", "127.0.0.1"], Duration::from_secs(60));
        assert!(d.screen(peer("10.1.2.3:5")).is_ok());
        assert!(d.screen(peer("127.0.0.1:5")).is_ok());
        assert!(d.screen(peer("[::ffff:127.0.0.1]:5")).is_ok(), "a v4-mapped address is its v4 address");
        assert_eq!(d.screen(peer("127.0.0.2:5")).unwrap_err(), Refusal::NotAllowed);
        assert_eq!(d.screen(peer("[::1]:5")).unwrap_err(), Refusal::NotAllowed);
    }

    #[test]
    fn a_source_that_keeps_failing_handshakes_is_refused_for_a_while() {
        let (d, _) = dial(10, &[], Duration::from_secs(60));
        for _ in 0..MAX_FAILED_HANDSHAKES {
            d.screen(peer("127.0.0.9:1")).unwrap().failed();
        }
        assert_eq!(d.screen(peer("127.0.0.9:2")).unwrap_err(), Refusal::RateLimited);
        assert!(d.screen(peer("127.0.0.1:2")).is_ok(), "other sources are not affected");
    }

    #[test]
    fn handshakes_in_progress_are_capped() {
        let (d, _) = dial(10, &[], Duration::from_secs(60));
        let held: Vec<Pending> =
            (0..MAX_PENDING_HANDSHAKES).map(|_| d.screen(peer("127.0.0.1:1")).unwrap()).collect();
        assert_eq!(d.screen(peer("127.0.0.1:1")).unwrap_err(), Refusal::TooManyHandshakes);
        drop(held);
        assert!(d.screen(peer("127.0.0.2:1")).is_ok(), "room again once they ended");
        assert_eq!(d.screen(peer("127.0.0.1:1")).unwrap_err(), Refusal::RateLimited, "they all failed");
    }

    #[test]
    fn the_oldest_down_target_makes_room_and_live_ones_are_never_evicted() {
        let (d, reg) = dial(2, &[], Duration::from_secs(600));
        let a = admit(&d, &["l/a"]).unwrap();
        let b = admit(&d, &["l/b"]).unwrap();
        assert_eq!(admit(&d, &["l/c"]).unwrap_err(), Refusal::MaxTargets, "both live");
        let (mut pa, mut pb) = (a.publisher, b.publisher);
        pa.down(&crate::target::Failure::new(crate::model::ErrorKind::Connect, "gone"));
        d.ended(pa.name(), a.claim);
        pb.down(&crate::target::Failure::new(crate::model::ErrorKind::Connect, "gone"));
        d.ended(pb.name(), b.claim);
        let c = admit(&d, &["l/c"]).unwrap();
        assert!(reg.snapshot().get("l/a").is_none(), "the oldest down target is forgotten");
        assert!(reg.snapshot().get("l/b").is_some());
        assert_eq!(d.targets(), 2);
        // A returning peer takes its down entry over without evicting anyone.
        let b2 = admit(&d, &["l/b"]).unwrap();
        assert_eq!(d.targets(), 2);
        drop((c, b2, pa, pb));
    }

    #[test]
    fn a_live_name_is_never_shared() {
        let (d, _) = dial(10, &[], Duration::from_secs(600));
        let first = admit(&d, &["l/host", "l/1.2.3.4:5"]).unwrap();
        let second = admit(&d, &["l/host", "l/1.2.3.4:6"]).unwrap();
        assert_eq!((&**first.publisher.name(), &**second.publisher.name()), ("l/host", "l/1.2.3.4:6"));
    }

    #[test]
    fn down_targets_are_forgotten_after_the_linger() {
        let (d, reg) = dial(10, &[], Duration::ZERO);
        let a = admit(&d, &["l/a"]).unwrap();
        d.ended(a.publisher.name(), a.claim);
        d.expire();
        assert_eq!(d.targets(), 0);
        assert!(reg.snapshot().get("l/a").is_none());
    }
}
