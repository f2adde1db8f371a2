//! One monitor connection: handshake, then requests, polls, notifications and user messages.

use std::collections::VecDeque;

use anyhow::{anyhow, bail, Context as _};
use futures::StreamExt;
use hmon::proto::{Handshake as HandshakeState, Role};
use hmon::{
    command_error, frame_bytes, AccountInformation, CommsLayer, Dmx, EventId, EventKind, EventState,
    Exception, Fact, FactKind, FactValue, Facts, Host, IdOrName, Interpreter, LastKnownState, Machine,
    Message, Notification, Payload, PayloadError, Request, Response, Ride, RideConnection, ServerCodec,
    StackEntry, Subscribed, Thread, ThreadCount, Timestamp, UserMessage, Workspace,
};
use hmon::{effective_interval, HandshakeOrder, PollTimer};
use sim_common::{ClientWriter, SendError, Shutdown};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use crate::world::{SimThread, WorldEvent};
use crate::{HandshakeStyle, Sim, Version};

/// Requests held while the interpreter is busy, at most.
const MAX_DEFERRED: usize = 1024;

type Frames = FramedRead<OwnedReadHalf, ServerCodec>;
type Incoming = Result<Payload<Request>, PayloadError>;

struct Session {
    sim: Sim,
    writer: ClientWriter,
    local: std::net::SocketAddr,
    poll: PollTimer,
    poll_uid: Option<String>,
    poll_facts: Vec<FactKind>,
    subscribed: [bool; 4],
    subscribe_uid: Option<String>,
}

pub(crate) async fn run(sim: Sim, stream: TcpStream, peer: String, shutdown: Shutdown) -> anyhow::Result<()> {
    let local = stream.local_addr()?;
    let (read, write) = stream.into_split();
    let writer = ClientWriter::spawn(write, sim.config.client_queue, &peer);
    let mut frames = FramedRead::new(read, ServerCodec::new(sim.config.max_frame_len));
    let timeout = sim.config.handshake_timeout;
    tokio::time::timeout(timeout, handshake(&sim, &writer, &mut frames))
        .await
        .map_err(|_| anyhow!("no handshake within {timeout:?}"))??;
    let mut session = Session {
        sim,
        writer,
        local,
        poll: PollTimer::new(),
        poll_uid: None,
        poll_facts: Vec::new(),
        subscribed: [false; 4],
        subscribe_uid: None,
    };
    session.serve(frames, shutdown).await
}

fn send(writer: &ClientWriter, payload: Payload<Response>) -> Result<(), SendError> {
    // Encoding our own typed messages cannot fail; a failure would be a bug worth seeing in the log.
    match frame_bytes(&payload) {
        Ok(bytes) => writer.send(bytes),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode a response");
            Ok(())
        }
    }
}

/// The interpreter's side of the handshake: the crate's own state machine ([`HandshakeState`]), driven.
async fn handshake(sim: &Sim, writer: &ClientWriter, frames: &mut Frames) -> anyhow::Result<()> {
    let order = match sim.config.handshake {
        HandshakeStyle::Eager => HandshakeOrder::Pipelined,
        HandshakeStyle::Lockstep => HandshakeOrder::Lockstep,
    };
    let now = Instant::now().into_std();
    let mut state = HandshakeState::new(Role::Interpreter(order), now, sim.config.handshake_timeout);
    loop {
        while let Some(frame) = state.poll_transmit() {
            send(writer, Payload::Handshake(frame))?;
        }
        if state.is_done() {
            return Ok(());
        }
        let frame = frames.next().await.context("monitor left during the handshake")??;
        match frame.map_err(|e| anyhow!("bad handshake frame: {e}"))? {
            Payload::Handshake(h) => state.handle(h)?,
            Payload::Message(m) => bail!("monitor sent {} before the handshake", m.name()),
        }
    }
}

impl Session {
    async fn serve(&mut self, mut frames: Frames, shutdown: Shutdown) -> anyhow::Result<()> {
        let mut events = self.sim.world.subscribe();
        let mut busy = self.sim.world.watch_busy();
        let mut deferred: VecDeque<Incoming> = VecDeque::new();
        loop {
            let is_busy = *busy.borrow_and_update();
            let deadline = if is_busy { None } else { self.poll.deadline() };
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = self.writer.closed() => return Ok(()),
                frame = frames.next() => match frame {
                    None => return Ok(()),
                    Some(Err(e)) => bail!("monitor sent a bad frame: {e}"),
                    Some(Ok(incoming)) if is_busy => {
                        if is_last_known_state(&incoming) {
                            self.handle(incoming)?;
                        } else if deferred.len() < MAX_DEFERRED {
                            deferred.push_back(incoming);
                        } else {
                            bail!("more than {MAX_DEFERRED} requests while busy");
                        }
                    }
                    Some(Ok(incoming)) => self.handle(incoming)?,
                },
                _ = tokio::time::sleep_until(deadline.map_or_else(Instant::now, Instant::from_std)), if deadline.is_some() => {
                    if self.poll.fire(Instant::now().into_std()) {
                        self.send_poll()?;
                    }
                }
                event = events.recv() => match event {
                    Ok(event) => self.on_world_event(event)?,
                    Err(RecvError::Lagged(n)) => tracing::debug!(missed = n, "world events missed"),
                    Err(RecvError::Closed) => return Ok(()),
                },
                changed = busy.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    if !*busy.borrow() {
                        while let Some(incoming) = deferred.pop_front() {
                            self.handle(incoming)?;
                        }
                    }
                }
            }
        }
    }

    fn reply(&self, response: Response) -> Result<(), SendError> {
        send(&self.writer, Payload::Message(response))
    }

    fn handle(&mut self, incoming: Incoming) -> anyhow::Result<()> {
        let request = match incoming {
            Ok(Payload::Message(request)) => request,
            // A handshake text after the handshake is not JSON.
            Ok(Payload::Handshake(_))
            | Err(PayloadError::InvalidSyntax { .. } | PayloadError::Handshake { .. }) => {
                return Ok(self.reply(Response::InvalidSyntax(Default::default()))?);
            }
            Err(PayloadError::Malformed { name, uid, .. }) => {
                return Ok(self.reply(Response::MalformedCommand(command_error(name, uid)))?);
            }
            Err(e) => {
                tracing::warn!(error = %e, "unclassified payload error");
                return Ok(self.reply(Response::InvalidSyntax(Default::default()))?);
            }
        };
        let response = self.answer(request);
        if let Some(response) = response {
            self.reply(response)?;
        }
        Ok(())
    }

    /// The reply to one request (`None`: nothing is sent, e.g. `BumpFacts` or the first poll reply,
    /// which the poll timer sends).
    fn answer(&mut self, request: Request) -> Option<Response> {
        let name = request.name().to_owned();
        let uid = request.uid().map(str::to_owned);
        let malformed = || Some(Response::MalformedCommand(command_error(&name, uid.clone())));
        match request {
            Request::GetFacts(args) => {
                let Some(kinds) = resolve_facts(args.facts.as_deref()) else { return malformed() };
                Some(Response::Facts(Facts { uid, facts: Some(self.facts(&kinds)), ..Default::default() }))
            }
            Request::PollFacts(args) => {
                let Some(kinds) = resolve_facts(args.facts.as_deref()) else { return malformed() };
                self.poll_facts = kinds;
                self.poll_uid = uid;
                self.poll.start(Instant::now().into_std(), effective_interval(args.interval));
                None
            }
            Request::StopFacts(_) | Request::BumpFacts(_) if uid.is_some() => {
                Some(Response::DisallowedUid(command_error(&name, uid)))
            }
            Request::StopFacts(_) => {
                self.poll.stop();
                Some(Response::Facts(Facts {
                    interval: Some(0),
                    facts: Some(Vec::new()),
                    ..Default::default()
                }))
            }
            Request::BumpFacts(_) => {
                self.poll.bump(Instant::now().into_std());
                None
            }
            Request::Subscribe(args) => {
                let Some(events) = args.events.as_deref() else { return malformed() };
                let mut wanted = [false; 4];
                for e in events {
                    let Some(kind) = EventKind::resolve(e) else { return malformed() };
                    wanted[kind as usize - 1] = true;
                }
                self.subscribed = wanted;
                self.subscribe_uid = uid.clone();
                let events = EventKind::ALL
                    .iter()
                    .map(|k| EventState {
                        id: Some(k.id()),
                        name: Some(k.name().to_owned()),
                        value: Some(wanted[*k as usize - 1]),
                        ..Default::default()
                    })
                    .collect();
                Some(Response::Subscribed(Subscribed { uid, events: Some(events), ..Default::default() }))
            }
            Request::GetLastKnownState(_) => Some(Response::LastKnownState(self.last_known_state(uid))),
            Request::ConnectRide(args) if self.sim.config.version == Version::V20 => {
                if self.sim.config.access_level < 3 {
                    return Some(Response::RideConnection(RideConnection {
                        uid,
                        restricted: Some(true),
                        ..Default::default()
                    }));
                }
                let connect = matches!(
                    (&args.address, &args.port),
                    (Some(serde_json::Value::String(_)), Some(serde_json::Value::Number(_)))
                );
                Some(Response::RideConnection(RideConnection {
                    uid,
                    restricted: Some(false),
                    connect: Some(connect),
                    status: Some(0),
                    ..Default::default()
                }))
            }
            _ => Some(Response::UnknownCommand(command_error(&name, uid))),
        }
    }

    fn send_poll(&self) -> anyhow::Result<()> {
        let interval = self.poll.interval().map(|d| d.as_millis() as i64);
        let facts = Facts {
            uid: self.poll_uid.clone(),
            interval,
            facts: Some(self.facts(&self.poll_facts)),
            ..Default::default()
        };
        Ok(self.reply(Response::Facts(facts))?)
    }

    fn on_world_event(&self, event: WorldEvent) -> anyhow::Result<()> {
        match event {
            WorldEvent::UserMessage { uid, text } => {
                self.reply(Response::UserMessage(UserMessage {
                    uid,
                    message: Some(text),
                    ..Default::default()
                }))?;
            }
            WorldEvent::Event { kind, tid, stack, dmx, size } => {
                if !self.subscribed[kind as usize - 1] {
                    return Ok(());
                }
                let signal = matches!(kind, EventKind::TrappedSignal | EventKind::UntrappedSignal);
                let notification = Notification {
                    uid: self.subscribe_uid.clone(),
                    event: Some(EventId {
                        id: Some(kind.id()),
                        name: Some(kind.name().to_owned()),
                        ..Default::default()
                    }),
                    size,
                    tid,
                    stack: stack.map(|s| self.stack(&s)),
                    dmx: signal.then(|| dmx.map(|d| Box::new(self.redact_dmx(*d)))),
                    exception: signal.then(|| {
                        self.restricted()
                            .then(|| Box::new(Exception { restricted: Some(true), ..Default::default() }))
                    }),
                    ..Default::default()
                };
                self.reply(Response::Notification(notification))?;
            }
        }
        Ok(())
    }

    fn restricted(&self) -> bool {
        self.sim.config.access_level < 2
    }

    fn stack(&self, lines: &[String]) -> Vec<StackEntry> {
        lines
            .iter()
            .map(|line| StackEntry {
                restricted: Some(self.restricted()),
                description: (!self.restricted()).then(|| line.clone()),
                ..Default::default()
            })
            .collect()
    }

    fn redact_dmx(&self, dmx: Dmx) -> Dmx {
        if self.restricted() {
            Dmx { restricted: Some(true), ..Default::default() }
        } else {
            dmx
        }
    }

    fn thread(&self, t: &SimThread, with_suspended: bool) -> Thread {
        let mut out = Thread {
            tid: Some(t.tid),
            stack: Some(self.stack(&t.stack)),
            suspended: with_suspended.then_some(t.suspended),
            state: Some(t.state.clone()),
            flags: Some(t.flags.clone()),
            ..Default::default()
        };
        if t.suspended {
            if self.restricted() {
                out.dmx = Some(Some(Box::new(Dmx { restricted: Some(true), ..Default::default() })));
                out.exception =
                    Some(Some(Box::new(Exception { restricted: Some(true), ..Default::default() })));
            } else {
                out.dmx = Some(t.dmx.clone().map(Box::new));
                out.exception = Some(t.exception.clone().map(Box::new));
            }
        }
        out
    }

    fn facts(&self, kinds: &[FactKind]) -> Vec<Fact> {
        let config = &self.sim.config;
        let state = self.sim.world.lock();
        kinds
            .iter()
            .map(|kind| {
                let value = match kind {
                    FactKind::Host => FactValue::Host(Box::new(Host {
                        machine: Some(Machine {
                            name: Some(std::env::var("HOSTNAME").unwrap_or_else(|_| "dyalog-sim".to_owned())),
                            user: Some(std::env::var("USER").unwrap_or_else(|_| "apl".to_owned())),
                            pid: Some(i64::from(std::process::id())),
                            desc: Some(config.desc.clone().unwrap_or_else(|| match config.version {
                                Version::V19 => serde_json::Value::String(String::new()),
                                Version::V20 => {
                                    serde_json::json!({"Application": "dyalog-sim", "Role": ["demo", 1]})
                                }
                            })),
                            access_level: Some(i64::from(config.access_level)),
                            ..Default::default()
                        }),
                        interpreter: Some(Interpreter {
                            version: Some(match config.version {
                                Version::V19 => "19.0.48958".to_owned(),
                                Version::V20 => "20.0.51234".to_owned(),
                            }),
                            bit_width: Some(64),
                            is_unicode: Some(true),
                            is_runtime: Some(false),
                            session_uuid: (config.version == Version::V20)
                                .then(|| session_uuid(&state.started)),
                            ..Default::default()
                        }),
                        comms_layer: Some(CommsLayer {
                            version: Some("3.5".to_owned()),
                            address: Some(self.local.ip().to_string()),
                            port4: Some(i64::from(self.local.port())),
                            port6: Some(0),
                            ..Default::default()
                        }),
                        ride: Some(Ride { listening: Some(false), ..Default::default() }),
                        ..Default::default()
                    })),
                    FactKind::AccountInformation => {
                        let up = Timestamp::now().unix_millis() - state.started.unix_millis();
                        FactValue::AccountInformation(AccountInformation {
                            user_identification: Some(1001),
                            compute_time: Some(up / 10),
                            connect_time: Some(up),
                            keying_time: Some(0),
                            ..Default::default()
                        })
                    }
                    FactKind::Workspace => {
                        let w = &state.workspace;
                        FactValue::Workspace(Workspace {
                            wsid: Some(w.wsid.clone()),
                            available: Some(w.size - w.used),
                            used: Some(w.used),
                            compactions: Some(w.compactions),
                            garbage_collections: Some(w.garbage_collections),
                            garbage_pockets: Some(0),
                            free_pockets: Some(12 + w.compactions % 5),
                            used_pockets: Some(4000 + w.used / 1024),
                            sediment: Some(4096),
                            allocation: Some(w.size),
                            allocation_hwm: Some(w.allocation_hwm),
                            trap_reserve_wanted: Some(65536),
                            trap_reserve_actual: Some(65536),
                            ..Default::default()
                        })
                    }
                    FactKind::Threads => {
                        FactValue::Threads(state.threads.iter().map(|t| self.thread(t, true)).collect())
                    }
                    FactKind::SuspendedThreads => FactValue::SuspendedThreads(
                        state.threads.iter().filter(|t| t.suspended).map(|t| self.thread(t, false)).collect(),
                    ),
                    FactKind::ThreadCount => FactValue::ThreadCount(ThreadCount {
                        total: Some(state.threads.len() as i64),
                        suspended: Some(state.threads.iter().filter(|t| t.suspended).count() as i64),
                        ..Default::default()
                    }),
                };
                Fact::new(value)
            })
            .collect()
    }

    fn last_known_state(&self, uid: Option<String>) -> LastKnownState {
        let state = self.sim.world.lock();
        let (code, since) = state.activity;
        let (function, line, at) = state.location.clone();
        LastKnownState {
            uid,
            ts: Some(Timestamp::now()),
            activity: Some(hmon::Activity { code: Some(code), ts: Some(since), ..Default::default() }),
            location: Some(hmon::Location {
                function: Some(function),
                line: Some(line),
                ts: Some(at),
                ..Default::default()
            }),
            ws_full: state.ws_full.map(|ts| hmon::WsFull { ts: Some(ts), ..Default::default() }),
            ..Default::default()
        }
    }
}

fn is_last_known_state(incoming: &Incoming) -> bool {
    matches!(incoming, Ok(Payload::Message(Request::GetLastKnownState(_))))
        || matches!(incoming, Err(PayloadError::Malformed { name, .. }) if name == "GetLastKnownState")
}

/// The facts a request names, or `None` when the list is missing or names an unknown fact.
fn resolve_facts(facts: Option<&[IdOrName]>) -> Option<Vec<FactKind>> {
    facts?.iter().map(FactKind::resolve).collect()
}

/// A version-4-shaped UUID derived from the start time and the PID (stable for the sim's life).
fn session_uuid(started: &Timestamp) -> String {
    let a = (started.unix_millis() as u64).wrapping_mul(1_000_000);
    let b = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ a.rotate_left(17);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        a as u16 & 0x0fff,
        (b >> 48) as u16 & 0x3fff | 0x8000,
        b & 0xffff_ffff_ffff
    )
}
