//! The bodies of the cargo-fuzz targets, here so the seed corpora replay on stable in the unit tests
//! (`fuzz/tests.rs`). Built only under `cfg(fuzzing)` and in tests: not part of the API.

use bytes::BytesMut;

use crate::frame::decode_frame;
use crate::message::{Request, Response};
use crate::payload::{decode_payload, encode_payload, Payload};

/// The frame limit the fuzz targets use (small, so huge lengths are exercised cheaply).
pub const FUZZ_MAX_FRAME_LEN: u32 = 1 << 20;

/// `hmon_frame`: the first byte picks a split point, the rest is a byte stream. Fed whole and in two
/// parts split there, it must decode to the same frames (or the same error) without panicking; each
/// decoded payload that decodes as a message re-encodes and re-decodes equal.
pub fn frame(data: &[u8]) {
    let Some((&selector, stream)) = data.split_first() else { return };
    let whole = frames_of(&[stream]);
    let split = selector as usize % (stream.len() + 1);
    let parts = frames_of(&[&stream[..split], &stream[split..]]);
    assert_eq!(whole, parts, "splitting the input at {split} changed the result");
    for payload in whole.0 {
        check_payload::<Response>(&payload);
        check_payload::<Request>(&payload);
    }
}

fn frames_of(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<String>) {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match decode_frame(&mut buf, FUZZ_MAX_FRAME_LEN) {
                Ok(Some(payload)) => frames.push(payload.to_vec()),
                Ok(None) => break,
                Err(e) => return (frames, Some(e.to_string())),
            }
        }
    }
    (frames, None)
}

/// `hmon_message`: arbitrary bytes as a payload decode as a handshake or a request or response without
/// panicking, and whatever decodes re-encodes and re-decodes equal.
pub fn message(data: &[u8]) {
    check_payload::<Response>(data);
    check_payload::<Request>(data);
}

fn check_payload<M: crate::message::Message>(payload: &[u8]) {
    if let Ok(decoded) = decode_payload::<M>(payload) {
        let mut buf = BytesMut::new();
        encode_payload(&decoded, &mut buf).expect("a decoded message encodes");
        let again = decode_frame(&mut buf, u32::MAX).expect("our frame decodes").expect("whole frame");
        let redecoded = decode_payload::<M>(&again).expect("our payload decodes");
        match (&decoded, &redecoded) {
            // NaN-free JSON numbers compare equal; floats in extras round-trip through serde_json.
            (Payload::Message(a), Payload::Message(b)) => assert_eq!(a, b),
            (a, b) => assert_eq!(a, b),
        }
    }
}

#[cfg(feature = "arbitrary")]
pub use structured::proto;

/// `hmon_proto`: an `arbitrary` sequence of operations on the sans-IO protocol state of `crate::proto`, checked
/// against a model after every step.
#[cfg(feature = "arbitrary")]
mod structured {
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use arbitrary::{Arbitrary, Unstructured};
    use bytes::BytesMut;
    use serde_json::{json, Map, Value};

    use crate::error::HandshakeError;
    use crate::frame::decode_frame;
    use crate::message::{Message, Request, Response};
    use crate::payload::{decode_payload, encode_payload, Handshake as Frame, Payload, PROTOCOL_VERSION};
    use crate::proto::{Handshake, HandshakeOrder, Requests, Role, Standing};

    /// At most this many operations per input.
    const MAX_OPS: usize = 512;

    /// A UID: mostly from a small pool, so that UIDs collide; sometimes anything.
    #[derive(Debug, Clone)]
    struct Uid(String);

    impl<'a> Arbitrary<'a> for Uid {
        fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
            const POOL: [&str; 6] = ["1", "2", "3", "x", "", "UID"];
            Ok(Uid(if u.ratio(7, 8)? {
                POOL[u.choose_index(POOL.len())?].to_string()
            } else {
                String::arbitrary(u)?
            }))
        }
    }

    /// The `UID` argument of a message: a string, a number (which no request waits for), or none.
    #[derive(Debug, Arbitrary)]
    enum UidArg {
        Str(Uid),
        Number(u8),
        Absent,
    }

    impl UidArg {
        fn insert(&self, args: &mut Map<String, Value>) {
            match self {
                UidArg::Str(uid) => args.insert("UID".into(), Value::String(uid.0.clone())),
                UidArg::Number(n) => args.insert("UID".into(), json!(n)),
                UidArg::Absent => None,
            };
        }
    }

    /// A message name: one of the known ones (by index), or an unknown one.
    #[derive(Debug, Arbitrary)]
    enum Name {
        Known(u8),
        Unknown,
    }

    impl Name {
        fn of(&self, names: &[&'static str]) -> &'static str {
            match self {
                Name::Known(i) => names[usize::from(*i) % names.len()],
                Name::Unknown => "NoSuchMessage",
            }
        }
    }

    #[derive(Debug, Clone, Copy, Arbitrary)]
    enum Order {
        Pipelined,
        Lockstep,
    }

    impl From<Order> for HandshakeOrder {
        fn from(o: Order) -> Self {
            match o {
                Order::Pipelined => HandshakeOrder::Pipelined,
                Order::Lockstep => HandshakeOrder::Lockstep,
            }
        }
    }

    /// A handshake frame from a misbehaving peer.
    #[derive(Debug, Arbitrary)]
    enum FrameSpec {
        Supported,
        SupportedList(Vec<u32>),
        Using,
        UsingOther(u32),
    }

    impl FrameSpec {
        fn frame(self) -> Frame {
            match self {
                FrameSpec::Supported => Frame::supported(),
                FrameSpec::SupportedList(list) => Frame::SupportedProtocols(list),
                FrameSpec::Using => Frame::using(),
                FrameSpec::UsingOther(v) => Frame::UsingProtocol(v),
            }
        }
    }

    #[derive(Debug, Arbitrary)]
    enum Op {
        /// A new connection: a fresh handshake, this side a monitor if `monitor`, the peer the other role.
        Connect {
            monitor: bool,
            ours: Order,
            theirs: Order,
            timeout_ms: u16,
        },
        /// Moves the next frame of one side from its handshake to the wire (in order, as over TCP).
        Transmit {
            ours: bool,
        },
        /// Hands the oldest frame on the wire to the other side's handshake.
        Deliver {
            to_us: bool,
        },
        /// A frame that the honest peer did not send.
        Inject {
            to_us: bool,
            frame: FrameSpec,
        },
        /// Shuttles frames both ways until nothing moves.
        Settle,
        /// A request on its way out; one with a reply waits for its UID for `timeout_ms`.
        Send {
            name: Name,
            uid: UidArg,
            reply: bool,
            timeout_ms: u16,
            facts: Vec<u8>,
            interval: Option<i16>,
        },
        /// A response from the interpreter, routed by its UID.
        Respond {
            name: Name,
            uid: UidArg,
        },
        Advance {
            ms: u16,
        },
        Expire,
        /// The callers whose token has this parity stop waiting.
        Retain {
            odd: bool,
        },
        /// The connection is lost: every waiting request fails, the standing requests are replayed.
        Disconnect,
    }

    /// One side of a handshake and what its documentation says it must do.
    struct Side {
        hs: Handshake,
        /// Lockstep: the peer's `UsingProtocol` only after its `SupportedProtocols`.
        ordered: bool,
        got_supported: bool,
        got_using: bool,
        /// Frames queued so far (sent at once, or in answer to the peer's).
        queued: usize,
        /// Frames taken with `poll_transmit`.
        sent: Vec<Frame>,
        /// Frames on the wire to the other side.
        wire: Vec<Frame>,
    }

    impl Side {
        fn new(role: Role, now: Instant, timeout: Duration) -> Self {
            let (ordered, queued) = match role {
                Role::Monitor(HandshakeOrder::Pipelined) | Role::Interpreter(HandshakeOrder::Pipelined) => {
                    (false, 2)
                }
                Role::Monitor(HandshakeOrder::Lockstep) => (true, 0),
                Role::Interpreter(HandshakeOrder::Lockstep) => (true, 1),
            };
            let hs = Handshake::new(role, now, timeout);
            assert_eq!(hs.deadline(), now + timeout);
            Side {
                hs,
                ordered,
                got_supported: false,
                got_using: false,
                queued,
                sent: Vec::new(),
                wire: Vec::new(),
            }
        }

        fn is_done(&self) -> bool {
            self.got_supported && self.got_using && self.queued == self.sent.len()
        }

        /// Takes the next frame to send: each side sends `SupportedProtocols=2` then `UsingProtocol=2`, each once,
        /// and nothing it has not queued yet.
        fn transmit(&mut self) {
            let frame = self.hs.poll_transmit();
            if self.sent.len() < self.queued {
                let frame = frame.expect("a queued frame");
                let expected = [Frame::supported(), Frame::using()];
                assert_eq!(frame, expected[self.sent.len()], "frame {} sent", self.sent.len());
                self.sent.push(frame.clone());
                self.wire.push(frame);
            } else {
                assert_eq!(frame, None, "nothing more is queued");
            }
        }

        /// Hands the side a frame from its peer; `Err` as documented, and an error changes nothing.
        fn handle(&mut self, frame: Frame) -> Result<(), HandshakeError> {
            let before = format!("{:?}", self.hs);
            let result = self.hs.handle(frame.clone());
            let expected = match &frame {
                Frame::SupportedProtocols(list) if !self.got_supported => {
                    if list.contains(&PROTOCOL_VERSION) {
                        self.got_supported = true;
                        // A lockstep side answers the peer's SupportedProtocols with its next frame.
                        if self.ordered && self.queued < 2 {
                            self.queued += 1;
                        }
                        Ok(())
                    } else {
                        Err(HandshakeError::Unsupported { offered: list.clone() })
                    }
                }
                Frame::UsingProtocol(v) if !self.got_using && (self.got_supported || !self.ordered) => {
                    if *v == PROTOCOL_VERSION {
                        self.got_using = true;
                        // A lockstep monitor answers the peer's UsingProtocol with its own.
                        if self.ordered && self.queued < 2 {
                            self.queued += 1;
                        }
                        Ok(())
                    } else {
                        Err(HandshakeError::WrongProtocol(*v))
                    }
                }
                other => Err(HandshakeError::Unexpected(other.to_string())),
            };
            assert_eq!(result, expected, "{frame:?}");
            if result.is_err() {
                assert_eq!(format!("{:?}", self.hs), before, "an error changed the handshake");
            }
            result
        }

        fn check(&self, now: Instant) {
            assert_eq!(self.hs.is_done(), self.is_done());
            assert_eq!(self.hs.timed_out(now), !self.is_done() && now >= self.hs.deadline());
        }
    }

    struct Harness {
        start: Instant,
        now: Instant,
        ours: Side,
        theirs: Side,
        /// Whether every frame either side took came from its honest peer (then nothing may fail).
        honest: bool,
        requests: Requests<u64>,
        /// The model of `requests`: token and deadline by UID.
        waiting: HashMap<String, (Instant, u64)>,
        next_token: u64,
        standing: Standing,
        poll: Option<Request>,
        subscribe: Option<Request>,
    }

    /// `hmon_proto`: operations from `data` drive a monitor's `Handshake` against an honest interpreter's (or the
    /// reverse) with frames delivered in any interleaving, plus injected frames, `Requests` and `Standing`.
    /// Invariants: no panic; each side sends `SupportedProtocols=2` then `UsingProtocol=2`, once each, and only
    /// when its order says so; `handle` accepts or refuses exactly as documented, and a refusal changes nothing;
    /// two honest sides never fail and, once settled, are both done; `timed_out` is "not done and past the
    /// deadline"; a response completes a request only if one waits for its UID, handing out that request's token,
    /// once; `expire` removes exactly the requests past their deadline; `next_deadline` is the earliest one;
    /// `Standing` replays the last `PollFacts` (unless a `StopFacts` came after it), then the last `Subscribe`, and
    /// what it replays encodes and decodes back equal.
    pub fn proto(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let start = Instant::now();
        let second = Duration::from_secs(1);
        let mut h = Harness {
            start,
            now: start,
            ours: Side::new(Role::Monitor(HandshakeOrder::Pipelined), start, second),
            theirs: Side::new(Role::Interpreter(HandshakeOrder::Pipelined), start, second),
            honest: true,
            requests: Requests::default(),
            waiting: HashMap::new(),
            next_token: 0,
            standing: Standing::default(),
            poll: None,
            subscribe: None,
        };
        let Ok(ops) = u.arbitrary_iter::<Op>() else { return };
        for op in ops.take(MAX_OPS) {
            let Ok(op) = op else { break };
            h.run(op);
            h.check();
        }
        h.settle();
        h.check();
    }

    impl Harness {
        fn sides(&mut self, ours: bool) -> (&mut Side, &mut Side) {
            if ours {
                (&mut self.ours, &mut self.theirs)
            } else {
                (&mut self.theirs, &mut self.ours)
            }
        }

        /// Delivers the oldest frame on the wire from the other side to this one.
        fn deliver(&mut self, to_us: bool) -> bool {
            let honest = self.honest;
            let (to, from) = self.sides(to_us);
            if from.wire.is_empty() {
                return false;
            }
            let frame = from.wire.remove(0);
            let result = to.handle(frame);
            assert!(!honest || result.is_ok(), "an honest peer's frame failed: {result:?}");
            true
        }

        fn settle(&mut self) {
            loop {
                let mut moved = false;
                for ours in [true, false] {
                    let (side, _) = self.sides(ours);
                    while side.sent.len() < side.queued {
                        side.transmit();
                        moved = true;
                    }
                }
                for to_us in [true, false] {
                    while self.deliver(to_us) {
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
            if self.honest {
                assert!(self.ours.is_done() && self.theirs.is_done(), "two honest sides settled unfinished");
            }
        }

        fn run(&mut self, op: Op) {
            match op {
                Op::Connect { monitor, ours, theirs, timeout_ms } => {
                    self.connect(monitor, ours, theirs, timeout_ms)
                }
                Op::Transmit { ours } => self.sides(ours).0.transmit(),
                Op::Deliver { to_us } => {
                    self.deliver(to_us);
                }
                Op::Inject { to_us, frame } => {
                    if self.sides(to_us).0.handle(frame.frame()).is_ok() {
                        // The two sides may now disagree about what was said.
                        self.honest = false;
                    }
                }
                Op::Settle => self.settle(),
                Op::Send { name, uid, reply, timeout_ms, facts, interval } => {
                    self.send(name, uid, reply, timeout_ms, facts, interval)
                }
                Op::Respond { name, uid } => self.respond(name, uid),
                Op::Advance { ms } => self.now += Duration::from_millis(u64::from(ms)),
                Op::Expire => {
                    let mut expired = self.requests.expire(self.now);
                    expired.sort();
                    let mut expected: Vec<(String, u64)> = self
                        .waiting
                        .iter()
                        .filter(|(_, (deadline, _))| *deadline <= self.now)
                        .map(|(uid, (_, token))| (uid.clone(), *token))
                        .collect();
                    expected.sort();
                    assert_eq!(expired, expected, "expired at {:?}", self.now - self.start);
                    self.waiting.retain(|_, (deadline, _)| *deadline > self.now);
                }
                Op::Retain { odd } => {
                    self.requests.retain(|token| token % 2 == u64::from(odd));
                    self.waiting.retain(|_, (_, token)| *token % 2 == u64::from(odd));
                }
                Op::Disconnect => {
                    let mut failed: Vec<(String, u64)> = self.requests.drain().collect();
                    failed.sort();
                    let mut expected: Vec<(String, u64)> =
                        self.waiting.drain().map(|(uid, (_, token))| (uid, token)).collect();
                    expected.sort();
                    assert_eq!(failed, expected);
                    for request in self.standing.replay() {
                        let mut buf = BytesMut::new();
                        encode_payload(&Payload::Message(request.clone()), &mut buf)
                            .expect("a request encodes");
                        let frame =
                            decode_frame(&mut buf, u32::MAX).expect("our frame").expect("a whole frame");
                        assert!(buf.is_empty());
                        assert_eq!(
                            decode_payload::<Request>(&frame).expect("our payload"),
                            Payload::Message(request.clone())
                        );
                    }
                }
            }
        }

        fn connect(&mut self, monitor: bool, ours: Order, theirs: Order, timeout_ms: u16) {
            let timeout = Duration::from_millis(u64::from(timeout_ms));
            let (ours, theirs) = if monitor {
                (Role::Monitor(ours.into()), Role::Interpreter(theirs.into()))
            } else {
                (Role::Interpreter(ours.into()), Role::Monitor(theirs.into()))
            };
            self.ours = Side::new(ours, self.now, timeout);
            self.theirs = Side::new(theirs, self.now, timeout);
            self.honest = true;
        }

        fn send(
            &mut self,
            name: Name,
            uid: UidArg,
            reply: bool,
            timeout_ms: u16,
            facts: Vec<u8>,
            interval: Option<i16>,
        ) {
            let name = name.of(Request::NAMES);
            let mut args = Map::new();
            uid.insert(&mut args);
            let ids: Vec<Value> =
                facts.iter().map(|&f| if f < 128 { json!(f % 16) } else { json!("Host") }).collect();
            match name {
                "GetFacts" | "PollFacts" => {
                    args.insert("Facts".into(), Value::Array(ids));
                }
                "Subscribe" => {
                    args.insert("Events".into(), Value::Array(ids));
                }
                _ => {}
            }
            if let Some(ms) = interval {
                args.insert("Interval".into(), json!(ms));
            }
            let json = serde_json::to_vec(&json!([name, args])).expect("JSON");
            let Ok(Payload::Message(request)) = decode_payload::<Request>(&json) else { return };
            self.standing.remember(&request);
            match &request {
                Request::PollFacts(_) => self.poll = Some(request.clone()),
                Request::StopFacts(_) => self.poll = None,
                Request::Subscribe(_) => self.subscribe = Some(request.clone()),
                _ => {}
            }
            if let (true, Some(uid)) = (reply, request.uid()) {
                let deadline = self.now + Duration::from_millis(u64::from(timeout_ms));
                let token = self.next_token;
                self.next_token += 1;
                let replaced = self.requests.insert(uid.to_owned(), deadline, token);
                let expected = self.waiting.insert(uid.to_owned(), (deadline, token)).map(|(_, t)| t);
                assert_eq!(replaced, expected, "a UID already waiting is replaced");
            }
        }

        fn respond(&mut self, name: Name, uid: UidArg) {
            let name = name.of(Response::NAMES);
            let mut args = Map::new();
            uid.insert(&mut args);
            let json = serde_json::to_vec(&json!([name, args])).expect("JSON");
            let Ok(Payload::Message(response)) = decode_payload::<Response>(&json) else { return };
            // As the client routes a response: by its UID, if it has one.
            let completed = response.uid().and_then(|uid| self.requests.complete(uid));
            let expected = match (&uid, response.uid()) {
                (UidArg::Str(sent), Some(got)) => {
                    assert_eq!(sent.0, got, "the UID decoded is the one sent");
                    self.waiting.remove(got).map(|(_, token)| token)
                }
                (_, None) => None,
                (_, Some(got)) => panic!("{uid:?} decoded as UID {got:?}"),
            };
            assert_eq!(completed, expected, "{response:?} completed the wrong request");
        }

        fn check(&self) {
            self.ours.check(self.now);
            self.theirs.check(self.now);
            assert_eq!(self.requests.len(), self.waiting.len());
            assert_eq!(self.requests.is_empty(), self.waiting.is_empty());
            assert_eq!(self.requests.next_deadline(), self.waiting.values().map(|(d, _)| *d).min());
            let replay: Vec<&Request> = self.standing.replay().collect();
            let expected: Vec<&Request> = self.poll.iter().chain(self.subscribe.iter()).collect();
            assert_eq!(replay, expected, "what a reconnection re-sends");
        }
    }
}

#[cfg(test)]
mod tests;
