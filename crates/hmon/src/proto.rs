//! The protocol's state, sans-IO, in quinn-proto's style: no sockets, no clocks (time is passed in as `now`).
//!
//! * [`Handshake`]: the two handshake frames each way, for either side ([`Role`]) and either order: what to send
//!   ([`Handshake::poll_transmit`]), what the peer sent ([`Handshake::handle`]), and the deadline
//!   ([`Handshake::deadline`]). The async [`crate::Client`], [`crate::Listener`] and the dyalog-sim all drive it.
//! * [`Requests`]: UID correlation: which request waits for which UID, until when.
//! * [`Standing`]: the standing poll and subscription, re-sent after a reconnection.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use hmon::proto::{Handshake, Role};
//! use hmon::{Handshake as Frame, HandshakeOrder};
//!
//! let now = Instant::now();
//! let mut monitor = Handshake::new(Role::Monitor(HandshakeOrder::Pipelined), now, Duration::from_secs(5));
//! let mut interpreter = Handshake::new(Role::Interpreter(HandshakeOrder::Lockstep), now, Duration::from_secs(5));
//! // Shuttle frames until both are done (a socket would carry them).
//! for _ in 0..4 {
//!     while let Some(frame) = monitor.poll_transmit() { interpreter.handle(frame)?; }
//!     while let Some(frame) = interpreter.poll_transmit() { monitor.handle(frame)?; }
//! }
//! assert!(monitor.is_done() && interpreter.is_done());
//! # Ok::<(), hmon::HandshakeError>(())
//! ```

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::error::HandshakeError;
use crate::message::Request;
use crate::payload::{Handshake as Frame, PROTOCOL_VERSION};

/// The order of the handshake frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HandshakeOrder {
    /// Send both frames at once, then read the peer's two in any order (works with every peer; the default;
    /// an interpreter's "eager" handshake).
    #[default]
    Pipelined,
    /// The Dyalog demo's order. A monitor waits for `SupportedProtocols`, sends its own, waits for
    /// `UsingProtocol`, sends its own; an interpreter sends `SupportedProtocols`, waits for the monitor's, sends
    /// `UsingProtocol`, waits for the monitor's.
    Lockstep,
}

/// Which side of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The health monitor (telemon, the Dyalog demo client).
    Monitor(HandshakeOrder),
    /// The interpreter (the dyalog-sim).
    Interpreter(HandshakeOrder),
}

/// One connection's handshake.
#[derive(Debug, Clone)]
pub struct Handshake {
    outbox: VecDeque<Frame>,
    /// Sent when the peer's `SupportedProtocols` arrives.
    on_supported: Option<Frame>,
    /// Sent when the peer's `UsingProtocol` arrives.
    on_using: Option<Frame>,
    /// The peer's `UsingProtocol` must come after its `SupportedProtocols`.
    ordered: bool,
    got_supported: bool,
    got_using: bool,
    deadline: Instant,
}

impl Handshake {
    /// A handshake starting at `now`, to be done within `timeout`.
    pub fn new(role: Role, now: Instant, timeout: Duration) -> Self {
        let (first, on_supported, on_using, ordered) = match role {
            Role::Monitor(HandshakeOrder::Pipelined) | Role::Interpreter(HandshakeOrder::Pipelined) => {
                (vec![Frame::supported(), Frame::using()], None, None, false)
            }
            Role::Monitor(HandshakeOrder::Lockstep) => {
                (vec![], Some(Frame::supported()), Some(Frame::using()), true)
            }
            Role::Interpreter(HandshakeOrder::Lockstep) => {
                (vec![Frame::supported()], Some(Frame::using()), None, true)
            }
        };
        Handshake {
            outbox: first.into(),
            on_supported,
            on_using,
            ordered,
            got_supported: false,
            got_using: false,
            deadline: now.checked_add(timeout).unwrap_or(now),
        }
    }

    /// The next frame to send, if any (call until `None` after creating and after each [`Handshake::handle`]).
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.outbox.pop_front()
    }

    /// Takes a frame from the peer.
    pub fn handle(&mut self, frame: Frame) -> Result<(), HandshakeError> {
        match frame {
            Frame::SupportedProtocols(list) if !self.got_supported => {
                if !list.contains(&PROTOCOL_VERSION) {
                    return Err(HandshakeError::Unsupported { offered: list });
                }
                self.got_supported = true;
                self.outbox.extend(self.on_supported.take());
            }
            Frame::UsingProtocol(v) if !self.got_using && (self.got_supported || !self.ordered) => {
                if v != PROTOCOL_VERSION {
                    return Err(HandshakeError::WrongProtocol(v));
                }
                self.got_using = true;
                self.outbox.extend(self.on_using.take());
            }
            other => return Err(HandshakeError::Unexpected(other.to_string())),
        }
        Ok(())
    }

    /// Whether both sides' frames are through (nothing left to send, both of the peer's received).
    pub fn is_done(&self) -> bool {
        self.got_supported && self.got_using && self.outbox.is_empty()
    }

    /// When the handshake must be done by.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline has passed at `now` without the handshake being done.
    pub fn timed_out(&self, now: Instant) -> bool {
        !self.is_done() && now >= self.deadline
    }
}

/// UID correlation: the requests that wait for a response echoing their UID, each with a deadline. `T` is
/// whatever the caller completes (a channel's sender, an id).
#[derive(Debug)]
pub struct Requests<T> {
    pending: HashMap<String, (Instant, T)>,
}

impl<T> Default for Requests<T> {
    fn default() -> Self {
        Requests { pending: HashMap::new() }
    }
}

impl<T> Requests<T> {
    /// Waits for the response echoing `uid` until `deadline`. A UID already waiting is replaced (its token is
    /// returned).
    pub fn insert(&mut self, uid: String, deadline: Instant, token: T) -> Option<T> {
        self.pending.insert(uid, (deadline, token)).map(|(_, t)| t)
    }

    /// The token of the request that `uid` answers, if one is waiting (`InvalidSyntax` carries no UID and so
    /// never completes a request).
    pub fn complete(&mut self, uid: &str) -> Option<T> {
        self.pending.remove(uid).map(|(_, t)| t)
    }

    /// The requests whose deadline has passed at `now`, removed.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, T)> {
        let late: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, (deadline, _))| *deadline <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        late.into_iter().filter_map(|uid| self.pending.remove(&uid).map(|(_, t)| (uid, t))).collect()
    }

    /// Forgets the requests for which `gone` holds (their caller stopped waiting).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.pending.retain(|_, (_, t)| keep(t));
    }

    /// The earliest deadline, if any request waits.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|(deadline, _)| *deadline).min()
    }

    /// Every waiting request, removed (the connection is gone).
    pub fn drain(&mut self) -> impl Iterator<Item = (String, T)> + '_ {
        self.pending.drain().map(|(uid, (_, t))| (uid, t))
    }

    /// How many requests wait.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The standing poll and subscription of a monitor: what a reconnection must send again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Standing {
    poll: Option<Request>,
    subscribe: Option<Request>,
}

impl Standing {
    /// Notes a request on its way out: `PollFacts` and `Subscribe` stand (the last one wins), `StopFacts` ends
    /// the poll.
    pub fn remember(&mut self, request: &Request) {
        match request {
            Request::PollFacts(_) => self.poll = Some(request.clone()),
            Request::StopFacts(_) => self.poll = None,
            Request::Subscribe(_) => self.subscribe = Some(request.clone()),
            _ => {}
        }
    }

    /// What to send again after reconnecting, poll first.
    pub fn replay(&self) -> impl Iterator<Item = &Request> {
        self.poll.iter().chain(self.subscribe.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{PollFacts, StopFacts, Subscribe};

    fn run(a: &mut Handshake, b: &mut Handshake) -> Result<(), HandshakeError> {
        for _ in 0..4 {
            while let Some(f) = a.poll_transmit() {
                b.handle(f)?;
            }
            while let Some(f) = b.poll_transmit() {
                a.handle(f)?;
            }
        }
        Ok(())
    }

    #[test]
    fn every_order_on_either_side_completes() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        for m in [HandshakeOrder::Pipelined, HandshakeOrder::Lockstep] {
            for i in [HandshakeOrder::Pipelined, HandshakeOrder::Lockstep] {
                let (mut monitor, mut interp) =
                    (Handshake::new(Role::Monitor(m), t0, s), Handshake::new(Role::Interpreter(i), t0, s));
                run(&mut monitor, &mut interp).unwrap();
                assert!(monitor.is_done() && interp.is_done(), "{m:?} monitor, {i:?} interpreter");
                assert!(!monitor.timed_out(t0 + s));
            }
        }
    }

    #[test]
    fn a_lockstep_monitor_sends_nothing_first_and_answers_each_frame() {
        let t0 = Instant::now();
        let mut m = Handshake::new(Role::Monitor(HandshakeOrder::Lockstep), t0, Duration::from_secs(1));
        assert_eq!(m.poll_transmit(), None);
        m.handle(Frame::supported()).unwrap();
        assert_eq!(m.poll_transmit(), Some(Frame::supported()));
        assert_eq!(m.poll_transmit(), None);
        m.handle(Frame::using()).unwrap();
        assert_eq!(m.poll_transmit(), Some(Frame::using()));
        assert!(m.is_done());
    }

    #[test]
    fn wrong_versions_repeats_and_order_are_errors() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut m = Handshake::new(Role::Monitor(HandshakeOrder::Pipelined), t0, s);
        assert!(matches!(
            m.handle(Frame::SupportedProtocols(vec![1, 3])),
            Err(HandshakeError::Unsupported { offered }) if offered == [1, 3]
        ));
        let mut m = Handshake::new(Role::Monitor(HandshakeOrder::Pipelined), t0, s);
        assert!(matches!(m.handle(Frame::UsingProtocol(3)), Err(HandshakeError::WrongProtocol(3))));
        let mut m = Handshake::new(Role::Monitor(HandshakeOrder::Pipelined), t0, s);
        m.handle(Frame::supported()).unwrap();
        assert!(matches!(m.handle(Frame::supported()), Err(HandshakeError::Unexpected(_))), "twice");
        let mut i = Handshake::new(Role::Interpreter(HandshakeOrder::Lockstep), t0, s);
        assert!(matches!(i.handle(Frame::using()), Err(HandshakeError::Unexpected(_))), "using first");
    }

    #[test]
    fn a_handshake_not_done_by_its_deadline_has_timed_out() {
        let t0 = Instant::now();
        let m = Handshake::new(Role::Monitor(HandshakeOrder::Pipelined), t0, Duration::from_secs(2));
        assert!(!m.timed_out(t0 + Duration::from_secs(1)));
        assert!(m.timed_out(t0 + Duration::from_secs(2)));
        assert_eq!(m.deadline(), t0 + Duration::from_secs(2));
    }

    #[test]
    fn requests_complete_by_uid_and_expire_by_deadline() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = Requests::default();
        assert_eq!(r.insert("a".into(), t0 + ms(100), 1), None);
        r.insert("b".into(), t0 + ms(50), 2);
        assert_eq!(
            r.insert("a".into(), t0 + ms(200), 3),
            Some(1),
            "a duplicate UID replaces the waiting one"
        );
        assert_eq!(r.next_deadline(), Some(t0 + ms(50)));
        assert_eq!(r.complete("nobody"), None, "an unknown UID completes nothing");
        assert_eq!(r.expire(t0 + ms(60)), vec![("b".to_string(), 2)]);
        assert_eq!(r.complete("a"), Some(3));
        assert_eq!(r.complete("a"), None, "a response completes its request once");
        assert!(r.is_empty() && r.next_deadline().is_none());
        r.insert("c".into(), t0, 4);
        assert_eq!(r.drain().collect::<Vec<_>>(), vec![("c".to_string(), 4)]);
    }

    #[test]
    fn the_standing_poll_and_subscription_are_replayed_poll_first() {
        let mut s = Standing::default();
        let poll = Request::PollFacts(PollFacts::default());
        let sub = Request::Subscribe(Subscribe::default());
        s.remember(&sub);
        s.remember(&poll);
        assert_eq!(s.replay().cloned().collect::<Vec<_>>(), vec![poll, sub.clone()]);
        s.remember(&Request::StopFacts(StopFacts::default()));
        assert_eq!(s.replay().cloned().collect::<Vec<_>>(), vec![sub]);
    }
}
