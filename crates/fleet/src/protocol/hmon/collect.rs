//! The Dyalog Health Monitor: a poll of facts at the target's `poll` period, a subscription to
//! events, and `GetLastKnownState` at the same period. SERVE mode connects ([`run_connect`]) and
//! drives its [`hmon::Connection`] in the target's own task (one task per target); POLL mode listens,
//! and each interpreter that dials in becomes a target ([`listen`]).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use hmon::{
    Client, ClientConfig, ClientError, Connection, Event, EventKind, Events, FactKind, FactValue, GetFacts,
    GetLastKnownState, IdOrName, Incoming, Message as _, Request, Response, Subscribe,
};
use tokio::sync::mpsc;

use super::HmonBlock;
use crate::collect::dialin::{Admitted, DialIn};
use crate::collect::{connecting, flush_due, within, AbortOnDrop, Retry, CONNECT_TIMEOUT};
use crate::model::{ErrorKind, MetricKind};
use crate::protocol::{Component as _, Start};
use crate::recording;
use crate::store::SlotId;
use crate::target::{Failure, Publisher};

/// The facts polled when a target does not list its own: the ones exported as metrics.
pub const DEFAULT_FACTS: [FactKind; 4] =
    [FactKind::Host, FactKind::AccountInformation, FactKind::Workspace, FactKind::ThreadCount];

/// What to ask an interpreter for.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The facts polled: those of the block, without Host when Host is asked once per session.
    polled: Arc<[IdOrName]>,
    /// Whether Host is asked once per session (with `GetFacts`, after the poll starts) instead of
    /// polled: what telemon exports of it (version, bit width, session) does not change while an
    /// interpreter runs, and it is the largest of the facts. Only when other facts are polled.
    host_once: bool,
    events: Arc<[IdOrName]>,
    poll: Duration,
}

/// The process's one copy of a list of facts or events: the blocks of a config mostly ask for the same
/// ones, and each interpreter's plan held copies of its own (about 0.3 KB with the defaults). Lists come
/// from the config only, so the table is as large as the distinct lists in it.
fn shared_list(list: Vec<IdOrName>) -> Arc<[IdOrName]> {
    static LISTS: OnceLock<Mutex<HashSet<Arc<[IdOrName]>>>> = OnceLock::new();
    let mut lists = LISTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(shared) = lists.get(list.as_slice()) {
        return shared.clone();
    }
    let shared: Arc<[IdOrName]> = list.into();
    lists.insert(shared.clone());
    shared
}

impl Default for Plan {
    /// The default facts, every event, polled every second (what a probe asks for).
    fn default() -> Self {
        Plan::with(
            DEFAULT_FACTS.iter().map(|&k| k.into()).collect(),
            EventKind::ALL.iter().map(|&k| k.into()).collect(),
            Duration::from_secs(1),
        )
    }
}

impl Plan {
    /// The plan of a `[[hmon]]` or `[[hmon_listen]]` block (names were checked with the config).
    pub fn new(t: &HmonBlock) -> Plan {
        let words = |list: &Option<Vec<String>>| -> Option<Vec<IdOrName>> {
            list.as_ref().map(|l| l.iter().map(|w| IdOrName::parse_word(w)).collect())
        };
        Plan::with(
            words(&t.facts).unwrap_or_else(|| DEFAULT_FACTS.iter().map(|&k| k.into()).collect()),
            words(&t.subscribe).unwrap_or_else(|| EventKind::ALL.iter().map(|&k| k.into()).collect()),
            t.poll,
        )
    }

    fn with(facts: Vec<IdOrName>, events: Vec<IdOrName>, poll: Duration) -> Plan {
        let is_host = |f: &IdOrName| FactKind::resolve(f) == Some(FactKind::Host);
        let host_once = facts.iter().any(is_host) && !facts.iter().all(is_host);
        let polled = if host_once { facts.into_iter().filter(|f| !is_host(f)).collect() } else { facts };
        Plan { polled: shared_list(polled), host_once, events: shared_list(events), poll }
    }

    /// The `GetFacts` that asks for Host once.
    fn get_host() -> Request {
        Request::GetFacts(GetFacts { facts: Some(vec![FactKind::Host.into()]), ..Default::default() })
    }

    fn client_config(&self) -> ClientConfig {
        ClientConfig {
            handshake_timeout: CONNECT_TIMEOUT,
            request_timeout: CONNECT_TIMEOUT.max(self.poll),
            reconnect: None,
            uid_prefix: "telemon-".to_owned(),
            ..ClientConfig::default()
        }
    }

    /// How long without polled facts before the connection counts as hung.
    fn stall(&self) -> Duration {
        (self.poll * 3).max(Duration::from_secs(10))
    }
}

fn kind(e: &ClientError) -> ErrorKind {
    match e {
        ClientError::Frame(_) => ErrorKind::Decode,
        ClientError::Timeout { .. } => ErrorKind::Timeout,
        // A peer of another protocol (a web server, an smon stream) is a protocol error, not a connection's.
        ClientError::Handshake(_)
        | ClientError::Rejected { .. }
        | ClientError::UnexpectedReply { .. }
        | ClientError::OtherProtocol { .. } => ErrorKind::Protocol,
        _ => ErrorKind::Connect,
    }
}

fn fail(e: ClientError) -> Failure {
    Failure::new(kind(&e), e)
}

/// SERVE mode: connects to `addr` forever.
pub async fn run_connect(mut p: Publisher, addr: String, plan: Plan) {
    let mut retry = Retry::default();
    loop {
        let failure = connect_session(&mut p, &addr, &plan).await;
        retry.after(&mut p, failure).await;
    }
}

/// Connects to `addr` (SERVE mode, no reconnecting: [`Retry`] does that), the stream wrapped in the
/// target's recording tap (see [`Publisher::tap`]), and does the handshake.
async fn connect<F>(addr: &str, config: hmon::ClientConfig, tap: F) -> Result<Connection, ClientError>
where
    F: FnOnce(tokio::net::TcpStream) -> telemon_capture::Tap<tokio::net::TcpStream>,
{
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect { addr: addr.to_owned(), source })?;
    let _ = stream.set_nodelay(true);
    Connection::over(tap(stream), config).await
}

async fn connect_session(p: &mut Publisher, addr: &str, plan: &Plan) -> Failure {
    let connected =
        connecting(CONNECT_TIMEOUT * 2, "connect", connect(addr, plan.client_config(), p.tapper(addr)));
    let mut conn = match connected.await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return fail(e),
        Err(f) => return f,
    };
    p.up();
    collect_connection(p, &mut conn, plan).await
}

/// What a session has learnt from the interpreter so far.
#[derive(Debug, Default)]
struct Seen {
    info: Info,
    /// Notifications by event name (bounded, see [`message`]).
    counts: HashMap<String, EventCount>,
    facts: bool,
    /// The slots of the facts' series, each kept by [`Publisher::put_kept`].
    slots: FactSlots,
    /// The slot of `dyalog_last_known_state_timestamp_seconds`.
    activity: Option<SlotId>,
}

impl Seen {
    /// A session's start: every subscribed event at 0 (shown with the first facts), so that rate()
    /// sees the first notification.
    fn subscribed(events: &[IdOrName]) -> Seen {
        let mut seen = Seen::default();
        for e in events.iter().filter_map(EventKind::resolve) {
            seen.counts.insert(e.name().to_owned(), EventCount::default());
        }
        seen
    }
}

/// How many notifications of one event came, and the slot of its `dyalog_events_total` series.
#[derive(Debug, Default)]
struct EventCount {
    n: u64,
    slot: Option<SlotId>,
}

/// The slots of the series the polled facts set (all but `dyalog_interpreter_info`), by fact.
#[derive(Debug, Default)]
struct FactSlots {
    account: [Option<SlotId>; 3],
    workspace: [Option<SlotId>; 7],
    workspace_counters: [Option<SlotId>; 2],
    pockets: [Option<SlotId>; 3],
    threads: [Option<SlotId>; 2],
}

/// Pairs each of `values` with its kept slot: as many slots as values, or it does not compile.
fn with_slots<T, const N: usize>(
    values: [T; N],
    slots: &mut [Option<SlotId>; N],
) -> impl Iterator<Item = (T, &mut Option<SlotId>)> {
    values.into_iter().zip(slots.iter_mut())
}

/// SERVE mode: subscribes, starts the poll, and reads until the connection fails, all on the one
/// connection driven here (one task per target).
///
/// `GetLastKnownState` is asked as each polled `Facts` arrives, and the target is published once its
/// reply is in (or [`LKS_HOLD`] after it was asked), so that the two make one publication and one
/// wake-up. While no facts come (an interpreter polls only while it runs APL code, notes rule 12),
/// it is asked every poll period on its own. One is in flight at a time. Notifications are published
/// with the next facts, or a poll period after they came.
async fn collect_connection(p: &mut Publisher, conn: &mut Connection, plan: &Plan) -> Failure {
    let mut seen = Seen::subscribed(&plan.events);
    let mut subscribing = None;
    if !plan.events.is_empty() {
        let subscribe = Subscribe { events: Some(plan.events.to_vec()), ..Default::default() };
        // The requests are boxed (here, and in `ask_lks`): their state is large, and inline it would
        // size this future, which lives as long as the connection, for what takes a moment.
        match Box::pin(conn.request(Request::Subscribe(subscribe))).await {
            Ok(uid) => subscribing = Some(uid),
            Err(e) => return fail(e),
        }
    }
    if let Err(e) = conn.poll_facts(plan.polled.to_vec(), Some(plan.poll)).await {
        return fail(e);
    }
    // Its reply is read like the other facts, below.
    if plan.host_once {
        if let Err(e) = Box::pin(conn.request(Plan::get_host())).await {
            return fail(e);
        }
    }
    let now = tokio::time::Instant::now();
    // The GetLastKnownState in flight.
    let mut asking: Option<String> = None;
    // Changes are not published before this (see above).
    let mut hold: Option<tokio::time::Instant> = None;
    // When to ask GetLastKnownState if no facts arrive first.
    let mut ask = std::pin::pin!(tokio::time::sleep_until(now + plan.poll));
    // Armed once per stall period, not once per message: it checks `last_facts` when it fires.
    let mut last_facts = now;
    let mut stall = std::pin::pin!(tokio::time::sleep_until(now + plan.stall()));
    loop {
        let flush_at = p.flush_due().map(|due| hold.map_or(due, |h| due.max(h)));
        // A GetLastKnownState to ask, and why: asked after the `select!`, not in its arms, where the
        // message just read (and the select's output) would be held in this future, which lives as
        // long as the connection, while the request is written.
        let mut ask_now = None;
        tokio::select! {
            incoming = conn.next() => match incoming {
                Err(e) => return fail(e),
                Ok(Incoming::Event(event)) => {
                    let facts = matches!(&event, Event::Message(Response::Facts(_)));
                    if let Some(failure) = on_event(p, event, &mut seen) {
                        return failure;
                    }
                    if !facts {
                        hold.get_or_insert_with(|| tokio::time::Instant::now() + plan.poll);
                        continue;
                    }
                    last_facts = tokio::time::Instant::now();
                    if asking.is_some() {
                        p.maybe_flush();
                        continue;
                    }
                    ask_now = Some(Ask::WithFacts);
                }
                Ok(Incoming::Reply { uid, response }) if subscribing.as_ref() == Some(&uid) => {
                    subscribing = None;
                    if response.is_error() {
                        let name = response.name().to_owned();
                        return fail(ClientError::Rejected { name, request: "Subscribe".into() });
                    }
                }
                Ok(Incoming::Reply { uid, response }) if asking.as_ref() == Some(&uid) => {
                    asking = None;
                    hold = None;
                    match response {
                        Response::LastKnownState(state) => last_known_state(p, &state, &mut seen.activity),
                        other => p.error(&fail(ClientError::Rejected {
                            name: other.name().to_owned(),
                            request: "GetLastKnownState".into(),
                        })),
                    }
                    p.maybe_flush();
                }
                Ok(Incoming::Reply { response, .. }) => {
                    if let Some(failure) = on_event(p, Event::Message(response), &mut seen) {
                        return failure;
                    }
                    hold.get_or_insert_with(|| tokio::time::Instant::now() + plan.poll);
                }
                Ok(Incoming::Timeout { uid }) => {
                    let after = conn.config().request_timeout;
                    let timeout = ClientError::Timeout { what: "reply", after };
                    if subscribing.as_ref() == Some(&uid) {
                        return fail(timeout);
                    }
                    if asking.as_ref() == Some(&uid) {
                        asking = None;
                        p.error(&fail(timeout));
                    }
                }
                Ok(_) => {}
            },
            () = &mut ask, if asking.is_none() => ask_now = Some(Ask::OnItsOwn(tokio::time::Instant::now())),
            () = flush_due(flush_at) => {
                hold = None;
                p.flush_if_dirty();
            }
            () = &mut stall => {
                let due = last_facts + plan.stall();
                if due <= tokio::time::Instant::now() {
                    return Failure::new(ErrorKind::Timeout, format!("no polled facts for {:?}", plan.stall()));
                }
                stall.as_mut().reset(due);
            }
        }
        if let Some(why) = ask_now {
            match ask_lks(conn).await {
                Ok(uid) => asking = Some(uid),
                Err(e) => return fail(e),
            }
            match why {
                Ask::WithFacts => {
                    hold = Some(last_facts + LKS_HOLD);
                    // Asked on its own only when the next facts are half a period late.
                    ask.as_mut().reset(last_facts + plan.poll + plan.poll / 2);
                }
                Ask::OnItsOwn(at) => ask.as_mut().reset(at + plan.poll),
            }
        }
    }
}

/// Why a session asks `GetLastKnownState` (see `collect_connection`).
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// Polled facts came: its reply is published with them.
    WithFacts,
    /// Its timer fired, at the given time: no facts came in time to ask it with them.
    OnItsOwn(tokio::time::Instant),
}

/// How long polled facts wait, at most, for the reply to the `GetLastKnownState` asked with them
/// before they are published without it.
const LKS_HOLD: Duration = Duration::from_millis(200);

/// Sends a `GetLastKnownState`; returns its UID. The request is boxed (see `collect_connection`).
async fn ask_lks(conn: &mut Connection) -> Result<String, ClientError> {
    Box::pin(conn.request(Request::GetLastKnownState(GetLastKnownState::default()))).await
}

/// Records one event of a session (SERVE or POLL mode); a failure ends the session.
fn on_event(p: &mut Publisher, event: Event, seen: &mut Seen) -> Option<Failure> {
    // Its values are of its own time: a notification's, held back to be published with the next
    // facts, must not lend the facts its time (their counters' rates would be taken over the wrong span).
    p.arrived();
    match event {
        Event::Disconnected { reason } => return Some(Failure::new(ErrorKind::Connect, reason)),
        Event::InvalidPayload(e) => p.error(&Failure::new(ErrorKind::Decode, e)),
        Event::Lagged { dropped } => {
            p.error(&Failure::new(ErrorKind::Protocol, format!("{dropped} messages dropped")))
        }
        Event::Message(m) => {
            if let Response::Facts(_) = &m {
                if !seen.facts {
                    seen.facts = true;
                    for (name, count) in &mut seen.counts {
                        set_event_count(p, name, count);
                    }
                }
            }
            message(p, m, seen);
        }
        _ => {}
    }
    None
}

fn last_known_state(p: &mut Publisher, state: &hmon::LastKnownState, kept: &mut Option<SlotId>) {
    let ts = state.activity.as_ref().and_then(|a| a.ts).or(state.ts);
    if let Some(ts) = ts {
        p.put_kept(
            kept,
            "dyalog_last_known_state_timestamp_seconds",
            "Unix time of the interpreter's current activity, from GetLastKnownState.",
            MetricKind::Gauge,
            &[],
            ts.unix_millis() as f64 / 1000.0,
        );
    }
}

/// Runs the collector over an already connected `stream` (a replayed recording: `telemon export`) until the
/// connection ends.
pub async fn over<S>(p: &mut Publisher, stream: S, plan: &Plan) -> Failure
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, mut events) =
        match within(CONNECT_TIMEOUT * 2, "handshake", Client::over(stream, plan.client_config())).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return fail(e),
            Err(f) => return f,
        };
    p.up();
    collect(p, &client, &mut events, plan, None).await
}

/// POLL mode: binds the block's `listen` address and returns the accept loop. Each interpreter
/// that passes the block's `allow`, `hello_timeout` and `max_targets` (see [`DialIn`]) is a target
/// named `NAME/HOST` after its Host fact, or `NAME/PEER` when it has no name or a live
/// interpreter holds that name (decided atomically). A target stays listed as down for `linger`
/// after its interpreter leaves, unless it comes back. Dropping the loop ends every session.
pub async fn listen(
    ctx: &Start,
    block: &HmonBlock,
    linger: Duration,
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let plan = Arc::new(Plan::new(block));
    let addr = block.listen.clone().unwrap_or_default();
    let limits = block.listener_limits();
    let config = ClientConfig { handshake_timeout: limits.hello_timeout, ..plan.client_config() };
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let labels = crate::config::block::labels(&block.labels);
    let name = block.name.clone();
    let (series_limit, recording) = (ctx.series_limit, ctx.recording.clone());
    let dial = DialIn::new(&name, limits, ctx.registry.clone(), linger);
    Ok(dial.clone().accept_loop(listener, "an interpreter", move |stream, peer, pending| {
        let (dial, plan, labels, name, config, recording) =
            (dial.clone(), plan.clone(), labels.clone(), name.clone(), config.clone(), recording.clone());
        async move {
            // Recorded (when a recording is installed) under the peer's address: the target's name
            // is known only after its Host fact.
            let received = Arc::new(AtomicU64::new(0));
            let target = format!("{name}/{peer}");
            let (link, address) = (super::Hmon.link_type(), peer.to_string());
            let stream =
                recording::tap(recording.as_deref(), stream, &target, link, &address, received.clone());
            let (client, mut events) = match Client::over(stream, config).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "no handshake");
                    return pending.failed();
                }
            };
            let host = within(CONNECT_TIMEOUT, "Host", client.get_facts([FactKind::Host])).await;
            let host = host.ok().and_then(Result::ok);
            let mut names: Vec<String> =
                host.as_ref().and_then(host_name).iter().map(|h| format!("{name}/{h}")).collect();
            names.push(format!("{name}/{peer}"));
            let Ok(Admitted { publisher: mut p, claim }) =
                dial.admit(pending, &names, crate::model::Protocol::HMON, labels, series_limit)
            else {
                return;
            };
            p.count_received_in(received);
            p.up();
            let failure = collect(&mut p, &client, &mut events, &plan, host).await;
            p.down(&failure);
            drop(client);
            dial.ended(p.name(), claim);
        }
    }))
}

fn host_name(facts: &hmon::Facts) -> Option<String> {
    facts.facts.iter().flatten().find_map(|f| match &f.value {
        FactValue::Host(h) => h.machine.as_ref()?.name.clone().filter(|n| !n.is_empty() && !n.contains('/')),
        _ => None,
    })
}

/// The interpreter's identity, for `dyalog_interpreter_info`.
#[derive(Debug, Default, Clone, PartialEq)]
struct Info {
    /// Version, bit width, Unicode and runtime, as the Host fact sends them.
    interpreter: (String, Option<i64>, Option<bool>, Option<bool>),
    session_uuid: String,
    wsid: String,
}

/// Client mode (a dialling interpreter, a replay): subscribes, starts the poll and reads until the
/// connection fails. Host is asked after the poll starts, as [`collect_connection`] asks it, unless
/// `host` already holds the interpreter's Host fact.
async fn collect(
    p: &mut Publisher,
    client: &Client,
    events: &mut Events,
    plan: &Plan,
    host: Option<hmon::Facts>,
) -> Failure {
    let mut seen = Seen::subscribed(&plan.events);
    if !plan.events.is_empty() {
        if let Err(e) = client.subscribe(plan.events.to_vec()).await {
            return fail(e);
        }
    }
    if let Err(e) = client.poll_facts(plan.polled.to_vec(), Some(plan.poll)).await {
        return fail(e);
    }
    if plan.host_once {
        let host = match host {
            Some(host) => Ok(host),
            None => within(CONNECT_TIMEOUT, "Host", client.get_facts([FactKind::Host]))
                .await
                .and_then(|r| r.map_err(fail)),
        };
        match host {
            Ok(host) => {
                if let Some(failure) = on_event(p, Event::Message(Response::Facts(host)), &mut seen) {
                    return failure;
                }
            }
            Err(f) => p.error(&f),
        }
    }
    // GetLastKnownState runs beside the event loop, so that a slow reply never holds events back.
    let (lks_tx, mut lks_rx) = mpsc::channel(1);
    let poller = {
        let client = client.clone();
        let period = plan.poll;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if lks_tx.send(client.last_known_state().await).await.is_err() {
                    return;
                }
            }
        })
    };
    let _abort = AbortOnDrop(poller);
    let mut deadline = tokio::time::Instant::now() + plan.stall();
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else {
                    return Failure::new(ErrorKind::Connect, "the interpreter closed the connection");
                };
                let message = matches!(event, Event::Message(_));
                if matches!(event, Event::Message(Response::Facts(_))) {
                    deadline = tokio::time::Instant::now() + plan.stall();
                }
                if let Some(failure) = on_event(p, event, &mut seen) {
                    return failure;
                }
                if message {
                    p.maybe_flush();
                }
            }
            Some(lks) = lks_rx.recv() => match lks {
                Ok(state) => last_known_state(p, &state, &mut seen.activity),
                Err(e) => p.error(&fail(e)),
            },
            () = flush_due(p.flush_due()) => p.flush_if_dirty(),
            () = tokio::time::sleep_until(deadline) => {
                return Failure::new(ErrorKind::Timeout, format!("no polled facts for {:?}", plan.stall()));
            }
        }
    }
}

fn set_event_count(p: &mut Publisher, event: &str, count: &mut EventCount) {
    p.put_kept(
        &mut count.slot,
        "dyalog_events_total",
        "Notifications received from the interpreter, by event.",
        MetricKind::Counter,
        &[("event", event)],
        count.n,
    );
}

fn message(p: &mut Publisher, m: Response, seen: &mut Seen) {
    let counts = &mut seen.counts;
    match m {
        Response::Facts(facts) => {
            for fact in facts.facts.into_iter().flatten() {
                self::fact(p, fact.value, &mut seen.info, &mut seen.slots);
            }
        }
        Response::Notification(mut n) => {
            let event = n.event.as_mut();
            let id = event.as_ref().and_then(|e| e.id);
            let name = event
                .and_then(|e| e.name.take())
                .or_else(|| id.and_then(EventKind::from_id).map(|k| k.name().to_owned()))
                .unwrap_or_else(|| "unknown".to_owned());
            // Bounded: an interpreter naming endless events is cut off by the series limit, and
            // the map with it.
            if counts.len() < 1024 && !counts.contains_key(&name) {
                counts.insert(name.clone(), EventCount::default());
            }
            if let Some(count) = counts.get_mut(&name) {
                count.n += 1;
                set_event_count(p, &name, count);
            }
            let mut text = name;
            if let Some(tid) = n.tid {
                let _ = write!(text, " (thread {tid})");
            }
            if let Some(em) = n.dmx.as_ref().and_then(|d| d.as_ref()).and_then(|d| d.em.as_ref()) {
                let _ = write!(text, ": {em}");
            }
            if let Some(size) = n.size {
                let _ = write!(text, ": {size} bytes");
            }
            p.event(text);
        }
        Response::UserMessage(u) => p.event(format!("UserMessage: {}", u.message.unwrap_or_default())),
        _ => {}
    }
}

/// Sets the series of one polled fact, each through its slot in `slots`.
fn fact(p: &mut Publisher, value: FactValue, info: &mut Info, slots: &mut FactSlots) {
    let changed = match value {
        FactValue::Host(h) => h.interpreter.is_some_and(|i| {
            // Compared as sent, with no text made: the labels are written only when one changed.
            let new = (i.version.unwrap_or_default(), i.bit_width, i.is_unicode, i.is_runtime);
            let session_uuid = i.session_uuid.unwrap_or_default();
            let changed = new != info.interpreter || session_uuid != info.session_uuid;
            if changed {
                (info.interpreter, info.session_uuid) = (new, session_uuid);
            }
            changed
        }),
        FactValue::AccountInformation(a) => {
            let secs = [
                ("dyalog_account_cpu_seconds_total", "CPU time used by the APL session.", a.compute_time),
                (
                    "dyalog_account_connect_seconds_total",
                    "Time the APL session has been connected.",
                    a.connect_time,
                ),
                ("dyalog_account_keying_seconds_total", "Keying time of the APL session.", a.keying_time),
            ];
            for ((fam, help, ms), kept) in with_slots(secs, &mut slots.account) {
                if let Some(ms) = ms {
                    p.put_kept(kept, fam, help, MetricKind::Counter, &[], ms as f64 / 1000.0);
                }
            }
            false
        }
        FactValue::Workspace(w) => {
            let values = [
                ("dyalog_workspace_available_bytes", "Workspace bytes available.", w.available),
                ("dyalog_workspace_used_bytes", "Workspace bytes used.", w.used),
                ("dyalog_workspace_allocation_bytes", "Workspace bytes allocated.", w.allocation),
                (
                    "dyalog_workspace_allocation_hwm_bytes",
                    "High-water mark of workspace allocation.",
                    w.allocation_hwm,
                ),
                ("dyalog_workspace_sediment_bytes", "Workspace sediment bytes.", w.sediment),
                ("dyalog_workspace_trap_reserve_wanted_bytes", "Trap reserve wanted.", w.trap_reserve_wanted),
                (
                    "dyalog_workspace_trap_reserve_actual_bytes",
                    "Trap reserve actually held.",
                    w.trap_reserve_actual,
                ),
            ];
            for ((fam, help, v), kept) in with_slots(values, &mut slots.workspace) {
                if let Some(v) = v {
                    p.put_kept(kept, fam, help, MetricKind::Gauge, &[], v);
                }
            }
            let values = [
                ("dyalog_workspace_compactions_total", "Workspace compactions.", w.compactions),
                (
                    "dyalog_workspace_garbage_collections_total",
                    "Workspace garbage collections.",
                    w.garbage_collections,
                ),
            ];
            for ((fam, help, v), kept) in with_slots(values, &mut slots.workspace_counters) {
                if let Some(v) = v {
                    p.put_kept(kept, fam, help, MetricKind::Counter, &[], v);
                }
            }
            let values = [("garbage", w.garbage_pockets), ("free", w.free_pockets), ("used", w.used_pockets)];
            for ((state, v), kept) in with_slots(values, &mut slots.pockets) {
                if let Some(v) = v {
                    let help = "Workspace pockets, by state.";
                    p.put_kept(
                        kept,
                        "dyalog_workspace_pockets",
                        help,
                        MetricKind::Gauge,
                        &[("state", state)],
                        v,
                    );
                }
            }
            match w.wsid {
                Some(wsid) if wsid != info.wsid => {
                    info.wsid = wsid;
                    true
                }
                _ => false,
            }
        }
        FactValue::ThreadCount(t) => {
            for ((state, v), kept) in
                with_slots([("total", t.total), ("suspended", t.suspended)], &mut slots.threads)
            {
                if let Some(v) = v {
                    let help = "APL threads, all and suspended.";
                    p.put_kept(kept, "dyalog_threads", help, MetricKind::Gauge, &[("state", state)], v);
                }
            }
            false
        }
        _ => false,
    };
    if changed {
        p.retain_family("dyalog_interpreter_info", |_| false);
        let (version, bit_width, unicode, runtime) = &info.interpreter;
        let bit_width = bit_width.map(|w| w.to_string()).unwrap_or_default();
        let flag = |b: &Option<bool>| b.map(|b| b.to_string()).unwrap_or_default();
        let (unicode, runtime) = (flag(unicode), flag(runtime));
        let labels = [
            ("version", version.as_str()),
            ("bitwidth", &bit_width),
            ("unicode", &unicode),
            ("runtime", &runtime),
            ("session_uuid", &info.session_uuid),
            ("wsid", &info.wsid),
        ];
        p.put(
            "dyalog_interpreter_info",
            "The interpreter and its workspace.",
            MetricKind::Info,
            &labels,
            1u64,
        );
    }
}

#[cfg(test)]
mod serve_mode_tests {
    use super::*;
    use crate::model::TargetSnapshot;
    use crate::registry::Registry;

    /// The target "dyalog" once `pred` holds for it (within 30 s).
    async fn target_when(
        registry: &Registry,
        mut pred: impl FnMut(&TargetSnapshot) -> bool,
    ) -> TargetSnapshot {
        let mut changed = registry.changed();
        let wait = async {
            loop {
                if let Some(t) = registry.snapshot().get("dyalog").filter(|t| pred(t)) {
                    return t.clone();
                }
                changed.changed().await.expect("the registry outlives the test");
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait).await.expect("within 30 s")
    }

    fn has(t: &TargetSnapshot, family: &str, label: Option<(&str, &str)>) -> bool {
        t.series.iter().any(|s| {
            s.family() == family && label.is_none_or(|(k, v)| s.labels().get(k).as_deref() == Some(v))
        })
    }

    /// A sim serving `config`, and a SERVE-mode target "dyalog" polling it every `poll`: the sim, its
    /// shutdown, the registry and the collector's task.
    async fn serve_target(
        config: dyalog_sim::Config,
        poll: Duration,
    ) -> (dyalog_sim::Sim, sim_common::Shutdown, Registry, AbortOnDrop) {
        let sim = dyalog_sim::Sim::new(config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let shutdown = sim_common::Shutdown::new();
        tokio::spawn(sim.clone().serve(listener, shutdown.clone()));
        let registry = Registry::new();
        let p = Publisher::new(&registry, "dyalog", crate::model::Protocol::HMON, Vec::new(), 10_000);
        let plan = Plan { poll, ..Plan::default() };
        let collector = AbortOnDrop(tokio::spawn(run_connect(p, addr, plan)));
        (sim, shutdown, registry, collector)
    }

    #[tokio::test]
    async fn a_serve_target_polls_asks_last_known_state_and_counts_events_in_one_task() {
        let config = dyalog_sim::Config { tick: None, ..dyalog_sim::Config::default() };
        let (sim, shutdown, registry, _collector) = serve_target(config, Duration::from_millis(500)).await;
        let t = target_when(&registry, |t| {
            has(t, "dyalog_workspace_used_bytes", None)
                && has(t, "dyalog_last_known_state_timestamp_seconds", None)
                && has(t, "dyalog_events_total", Some(("event", "WorkspaceResize")))
                // From the Host fact, asked once.
                && has(t, "dyalog_interpreter_info", None)
        })
        .await;
        assert!(t.is_up() && t.connects == 1 && t.errors.total() == 0, "{t:?}");
        sim.world().raise(dyalog_sim::WorldEvent::Event {
            kind: EventKind::WorkspaceResize,
            tid: None,
            stack: None,
            dmx: None,
            size: Some(1 << 20),
        });
        let t = target_when(&registry, |t| {
            t.series.iter().any(|s| {
                s.family() == "dyalog_events_total"
                    && s.label("event") == "WorkspaceResize"
                    && s.number() == Some(1.0)
            })
        })
        .await;
        assert!(t.events.iter().any(|e| e.text.contains("WorkspaceResize")), "{:?}", t.events);
        shutdown.cancel();
        let t = target_when(&registry, |t| !t.is_up()).await;
        assert!(t.errors.get(ErrorKind::Connect) >= 1, "{t:?}");
    }

    #[test]
    fn host_is_asked_once_when_other_facts_are_polled() {
        let plan = |facts: &[&str]| {
            let plan = Plan::with(
                facts.iter().map(|f| IdOrName::parse_word(f)).collect(),
                Vec::new(),
                Duration::from_secs(1),
            );
            let host_polled = plan.polled.iter().any(|f| FactKind::resolve(f) == Some(FactKind::Host));
            assert!(!(plan.host_once && host_polled), "Host is asked once or polled, not both");
            (plan.polled.len(), plan.host_once)
        };
        assert_eq!(plan(&["Host", "Workspace", "ThreadCount"]), (2, true));
        assert_eq!(plan(&["1", "Workspace"]), (1, true), "Host by its ID");
        assert_eq!(plan(&["Host"]), (1, false), "polled when it is the only fact");
        assert_eq!(plan(&["Workspace"]), (1, false));
        let default = Plan::default();
        assert!(default.host_once && default.polled.len() == DEFAULT_FACTS.len() - 1);
    }

    #[test]
    fn plans_with_the_same_lists_share_them() {
        let (a, b) = (Plan::default(), Plan::default());
        assert!(Arc::ptr_eq(&a.polled, &b.polled) && Arc::ptr_eq(&a.events, &b.events));
        let other = Plan::with(vec![IdOrName::parse_word("Workspace")], Vec::new(), Duration::from_secs(1));
        assert!(
            !Arc::ptr_eq(&a.polled, &other.polled) && *other.polled == [IdOrName::parse_word("Workspace")]
        );
    }

    #[tokio::test]
    async fn a_busy_interpreter_without_facts_is_still_asked_its_last_known_state() {
        // Busy: only GetLastKnownState is answered, so no facts arrive to ask it with.
        let config = dyalog_sim::Config { tick: None, unresponsive: true, ..dyalog_sim::Config::default() };
        let (_sim, shutdown, registry, _collector) = serve_target(config, Duration::from_millis(200)).await;
        let t = target_when(&registry, |t| has(t, "dyalog_last_known_state_timestamp_seconds", None)).await;
        assert!(t.is_up(), "{t:?}");
        assert!(!has(&t, "dyalog_workspace_used_bytes", None), "no facts from a busy interpreter: {t:?}");
        shutdown.cancel();
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    const FACTS: &str = r##"["Facts",{"Facts":[
        {"ID":1,"Name":"Host","Value":{"Machine":{"Name":"box","User":"apl","PID":1,"Desc":"","AccessLevel":2},"Interpreter":{"Version":"19.0.1","BitWidth":64,"IsUnicode":true,"IsRuntime":false,"SessionUUID":"u"}}},
        {"ID":3,"Name":"Workspace","Value":{"WSID":"CLEAR WS","Available":1,"Used":2,"Compactions":3,"GarbageCollections":4,"GarbagePockets":5,"FreePockets":6,"UsedPockets":7,"Sediment":8,"Allocation":9,"AllocationHWM":10,"TrapReserveWanted":11,"TrapReserveActual":12}},
        {"ID":2,"Name":"AccountInformation","Value":{"UserIdentification":1001,"ComputeTime":10,"ConnectTime":20,"KeyingTime":0}},
        {"ID":6,"Name":"ThreadCount","Value":{"Total":3,"Suspended":1}}]}]"##;

    proptest! {
        /// The polled facts with their numbers replaced by arbitrary ones (as an interpreter could
        /// send) map to finite values without a panic.
        #[test]
        fn any_numbers_in_the_facts_map_to_finite_values(
            numbers in proptest::collection::vec(crate::collect::testing::any_number(), 1..30),
        ) {
            use crate::collect::testing::{check_rendered, publisher, with_numbers};
            let json = with_numbers(FACTS, &numbers);
            let Ok(response) = hmon::decode_message::<Response>(json.as_bytes()) else { return Ok(()) };
            let (reg, mut p) = publisher(crate::model::Protocol::HMON);
            message(&mut p, response, &mut Seen::default());
            prop_assert_eq!(check_rendered(&reg, &mut p, &[]), Ok(()));
        }
    }

    /// Polled facts, a notification 200 ms later (held back, in SERVE mode, to be published with the
    /// next facts), and the next facts 800 ms after it: the connect time grew by 1 s in 1 s.
    #[tokio::test(start_paused = true)]
    async fn a_counters_rate_is_over_the_times_its_facts_arrived() {
        use crate::collect::testing::publisher;
        let facts = |ms: u64| {
            let json = FACTS.replace(r#""ConnectTime":20"#, &format!(r#""ConnectTime":{ms}"#));
            Event::Message(hmon::decode_message::<Response>(json.as_bytes()).unwrap())
        };
        let notification =
            r#"["Notification",{"UID":"XX","Event":{"ID":2,"Name":"WorkspaceResize"},"Size":1}]"#;
        let (reg, mut p) = publisher(crate::model::Protocol::HMON);
        let mut seen = Seen::default();
        assert!(on_event(&mut p, facts(10_000), &mut seen).is_none());
        p.flush();
        tokio::time::advance(Duration::from_millis(200)).await;
        let n = hmon::decode_message::<Response>(notification.as_bytes()).unwrap();
        assert!(on_event(&mut p, Event::Message(n), &mut seen).is_none());
        tokio::time::advance(Duration::from_millis(800)).await;
        assert!(on_event(&mut p, facts(11_000), &mut seen).is_none());
        p.flush();
        let snapshot = reg.snapshot();
        let rate = snapshot.targets[0]
            .series
            .family("dyalog_account_connect_seconds_total")
            .next()
            .and_then(|s| s.rate());
        assert_eq!(rate, Some(1.0), "1 s of connect time in 1 s");
    }

    #[test]
    fn the_facts_template_decodes() {
        assert!(hmon::decode_message::<Response>(FACTS.as_bytes()).is_ok());
    }

    #[test]
    fn interpreter_info_has_the_host_facts_labels_and_follows_a_new_session() {
        use crate::collect::testing::publisher;
        let (reg, mut p) = publisher(crate::model::Protocol::HMON);
        let mut seen = Seen::default();
        let info = |reg: &crate::registry::Registry| -> Vec<String> {
            let t = reg.snapshot().targets[0].clone();
            t.series
                .iter()
                .filter(|s| s.family() == "dyalog_interpreter_info")
                .map(|s| {
                    ["version", "bitwidth", "unicode", "runtime", "session_uuid", "wsid"]
                        .map(|k| s.label(k).to_string())
                        .join(",")
                })
                .collect()
        };
        for _ in 0..2 {
            message(&mut p, hmon::decode_message(FACTS.as_bytes()).unwrap(), &mut seen);
            p.flush();
            assert_eq!(info(&reg), ["19.0.1,64,true,false,u,CLEAR WS"]);
        }
        let new_session = FACTS.replace(r#""SessionUUID":"u""#, r#""SessionUUID":"v""#);
        message(&mut p, hmon::decode_message(new_session.as_bytes()).unwrap(), &mut seen);
        p.flush();
        assert_eq!(info(&reg), ["19.0.1,64,true,false,v,CLEAR WS"]);
    }
}
