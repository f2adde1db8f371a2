//! The Dyalog Health Monitor: a poll of facts at the target's `poll` period, a subscription to
//! events, and `GetLastKnownState` at the same period. SERVE mode connects ([`run_connect`]);
//! POLL mode listens, and each interpreter that dials in becomes a target ([`listen`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hmon::{
    Client, ClientConfig, ClientError, Event, EventKind, Events, FactKind, FactValue, IdOrName, Response,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{flush_due, within, AbortOnDrop, Claims, Retry, CONNECT_TIMEOUT};
use crate::fleet::config::HmonTarget;
use crate::fleet::model::{ErrorKind, MetricKind, Protocol};
use crate::fleet::registry::Registry;
use crate::fleet::target::{label, Failure, Publisher};
use crate::record;

/// The facts polled when a target does not list its own: the ones exported as metrics.
pub const DEFAULT_FACTS: [FactKind; 4] =
    [FactKind::Host, FactKind::AccountInformation, FactKind::Workspace, FactKind::ThreadCount];

/// What to ask an interpreter for.
#[derive(Debug, Clone)]
pub struct Plan {
    facts: Vec<IdOrName>,
    events: Vec<IdOrName>,
    poll: Duration,
}

impl Default for Plan {
    /// The default facts, every event, polled every second (what a probe asks for).
    fn default() -> Self {
        Plan {
            facts: DEFAULT_FACTS.iter().map(|&k| k.into()).collect(),
            events: EventKind::ALL.iter().map(|&k| k.into()).collect(),
            poll: Duration::from_secs(1),
        }
    }
}

impl Plan {
    /// The plan of a `[[hmon]]` or `[[hmon_listen]]` block (names were checked with the config).
    pub fn new(t: &HmonTarget) -> Plan {
        let words = |list: &Option<Vec<String>>| -> Option<Vec<IdOrName>> {
            list.as_ref().map(|l| l.iter().map(|w| IdOrName::parse_word(w)).collect())
        };
        Plan {
            facts: words(&t.facts).unwrap_or_else(|| DEFAULT_FACTS.iter().map(|&k| k.into()).collect()),
            events: words(&t.subscribe).unwrap_or_else(|| EventKind::ALL.iter().map(|&k| k.into()).collect()),
            poll: t.poll,
        }
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
        ClientError::Handshake(_) | ClientError::Rejected { .. } | ClientError::UnexpectedReply { .. } => {
            ErrorKind::Protocol
        }
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

/// Connects to `addr` (SERVE mode, no reconnecting: [`Retry`] does that), the stream wrapped in a recording
/// tap (see [`record::tap`]), and does the handshake.
async fn connect(
    addr: &str,
    config: hmon::ClientConfig,
    name: &str,
) -> Result<(Client, Events), ClientError> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect { addr: addr.to_owned(), source })?;
    let _ = stream.set_nodelay(true);
    Client::over(record::tap(stream, name, record::Protocol::Hmon, addr), config).await
}

async fn connect_session(p: &mut Publisher, addr: &str, plan: &Plan) -> Failure {
    let connected = within(CONNECT_TIMEOUT * 2, "connect", connect(addr, plan.client_config(), p.name()));
    let (client, mut events) = match connected.await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return fail(e),
        Err(f) => return f,
    };
    p.up();
    collect(p, &client, &mut events, plan).await
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
    collect(p, &client, &mut events, plan).await
}

/// As [`hmon::Listener`] (handshakes run concurrently, an error concerns one connection), each accepted
/// stream wrapped in a recording tap (see [`record::tap`]) as the target `NAME/PEER`.
struct TappedListener {
    listener: tokio::net::TcpListener,
    config: ClientConfig,
    name: String,
    handshakes: JoinSet<Result<(Client, Events, std::net::SocketAddr), ClientError>>,
}

impl TappedListener {
    async fn accept(&mut self) -> Result<(Client, Events, std::net::SocketAddr), ClientError> {
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let (stream, peer) =
                        accepted.map_err(|source| ClientError::Connect { addr: "listener".into(), source })?;
                    let _ = stream.set_nodelay(true);
                    let stream =
                        record::tap(stream, &format!("{}/{peer}", self.name), record::Protocol::Hmon, &peer.to_string());
                    let config = self.config.clone();
                    self.handshakes.spawn(async move {
                        let (client, events) = Client::over(stream, config).await?;
                        Ok((client, events, peer))
                    });
                }
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    return done.unwrap_or_else(|e| Err(ClientError::Closed { reason: Some(e.to_string()) }));
                }
            }
        }
    }
}

/// POLL mode: binds the block's `listen` address and returns the accept loop. Each interpreter is a
/// target named `NAME/HOST` after its Host fact (or `NAME/PEER` when it has no name or the name is
/// taken by a connected interpreter). A target stays listed as down for `linger` after its
/// interpreter leaves, unless it comes back. Dropping the loop ends every session.
pub async fn listen(
    registry: Registry,
    block: &HmonTarget,
    series_limit: usize,
    linger: Duration,
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let plan = Arc::new(Plan::new(block));
    let addr = block.listen.clone().unwrap_or_default();
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let mut listener = TappedListener {
        listener,
        config: plan.client_config(),
        name: block.name.get_ref().clone(),
        handshakes: JoinSet::new(),
    };
    let labels = crate::fleet::labels(&block.labels);
    let name = block.name.get_ref().clone();
    let claims = Claims::default();
    Ok(async move {
        let mut sessions = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                Some(_) = sessions.join_next() => continue,
            };
            let (client, mut events, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "an interpreter failed to connect");
                    continue;
                }
            };
            let (registry, plan, labels, name, claims) =
                (registry.clone(), plan.clone(), labels.clone(), name.clone(), claims.clone());
            sessions.spawn(async move {
                let host = match within(CONNECT_TIMEOUT, "Host", client.get_facts([FactKind::Host])).await {
                    Ok(Ok(facts)) => host_name(&facts),
                    _ => None,
                };
                let mut target = format!("{name}/{}", host.as_deref().unwrap_or(&peer.to_string()));
                if registry.snapshot().get(&target).is_some_and(|t| t.is_up()) {
                    target = format!("{name}/{peer}");
                }
                let mut p = Publisher::new(&registry, target, Protocol::Hmon, labels, series_limit);
                let claim = claims.claim(p.name());
                p.up();
                let failure = collect(&mut p, &client, &mut events, &plan).await;
                p.down(&failure);
                drop(client);
                claims.linger_then_remove(&registry, p.name(), claim, linger).await;
            });
        }
    })
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
    version: String,
    bitwidth: String,
    unicode: String,
    runtime: String,
    session_uuid: String,
    wsid: String,
}

/// Subscribes, starts the poll and reads until the connection fails.
async fn collect(p: &mut Publisher, client: &Client, events: &mut Events, plan: &Plan) -> Failure {
    let mut counts: HashMap<String, u64> = HashMap::new();
    if !plan.events.is_empty() {
        if let Err(e) = client.subscribe(plan.events.clone()).await {
            return fail(e);
        }
        // Every subscribed event starts at 0 (shown with the first facts), so that rate() sees the
        // first notification.
        for e in plan.events.iter().filter_map(EventKind::resolve) {
            counts.insert(e.name().to_owned(), 0);
        }
    }
    if let Err(e) = client.poll_facts(plan.facts.clone(), Some(plan.poll)).await {
        return fail(e);
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
    let mut info = Info::default();
    let mut facts_seen = false;
    let mut deadline = tokio::time::Instant::now() + plan.stall();
    loop {
        tokio::select! {
            event = events.next() => match event {
                None => return Failure::new(ErrorKind::Connect, "the interpreter closed the connection"),
                Some(Event::Disconnected { reason }) => return Failure::new(ErrorKind::Connect, reason),
                Some(Event::InvalidPayload(e)) => p.error(&Failure::new(ErrorKind::Decode, e)),
                Some(Event::Lagged { dropped }) => {
                    p.error(&Failure::new(ErrorKind::Protocol, format!("{dropped} messages dropped")))
                }
                Some(Event::Message(m)) => {
                    if let Response::Facts(_) = &m {
                        deadline = tokio::time::Instant::now() + plan.stall();
                        if !facts_seen {
                            facts_seen = true;
                            for (name, &n) in &counts {
                                set_event_count(p, name, n);
                            }
                        }
                    }
                    message(p, m, &mut info, &mut counts);
                    p.maybe_flush();
                }
                Some(_) => {}
            },
            Some(lks) = lks_rx.recv() => match lks {
                Ok(state) => {
                    let ts = state.activity.as_ref().and_then(|a| a.ts).or(state.ts);
                    if let Some(ts) = ts {
                        p.set(
                            "dyalog_last_known_state_timestamp_seconds",
                            "Unix time of the interpreter's current activity, from GetLastKnownState.",
                            MetricKind::Gauge,
                            vec![],
                            ts.unix_millis() as f64 / 1000.0,
                        );
                    }
                }
                Err(e) => p.error(&fail(e)),
            },
            () = flush_due(p.flush_due()) => p.flush_if_dirty(),
            () = tokio::time::sleep_until(deadline) => {
                return Failure::new(ErrorKind::Timeout, format!("no polled facts for {:?}", plan.stall()));
            }
        }
    }
}

fn set_event_count(p: &mut Publisher, event: &str, n: u64) {
    p.set(
        "dyalog_events_total",
        "Notifications received from the interpreter, by event.",
        MetricKind::Counter,
        vec![label("event", event)],
        n as f64,
    );
}

fn message(p: &mut Publisher, m: Response, info: &mut Info, counts: &mut HashMap<String, u64>) {
    match m {
        Response::Facts(facts) => {
            for fact in facts.facts.into_iter().flatten() {
                self::fact(p, fact.value, info);
            }
        }
        Response::Notification(n) => {
            let event = n.event.as_ref();
            let name = event
                .and_then(|e| e.name.clone())
                .or_else(|| {
                    event.and_then(|e| e.id).and_then(EventKind::from_id).map(|k| k.name().to_owned())
                })
                .unwrap_or_else(|| "unknown".to_owned());
            // Bounded: an interpreter naming endless events is cut off by the series limit, and
            // the map with it.
            if counts.len() < 1024 || counts.contains_key(&name) {
                let n_seen = counts.entry(name.clone()).or_insert(0);
                *n_seen += 1;
                let seen = *n_seen;
                set_event_count(p, &name, seen);
            }
            let mut text = name;
            if let Some(tid) = n.tid {
                text.push_str(&format!(" (thread {tid})"));
            }
            if let Some(em) = n.dmx.as_ref().and_then(|d| d.as_ref()).and_then(|d| d.em.as_ref()) {
                text.push_str(&format!(": {em}"));
            }
            if let Some(size) = n.size {
                text.push_str(&format!(": {size} bytes"));
            }
            p.event(text);
        }
        Response::UserMessage(u) => p.event(format!("UserMessage: {}", u.message.unwrap_or_default())),
        _ => {}
    }
}

fn fact(p: &mut Publisher, value: FactValue, info: &mut Info) {
    let mut new_info = info.clone();
    match value {
        FactValue::Host(h) => {
            if let Some(i) = &h.interpreter {
                let s = |v: &Option<String>| v.clone().unwrap_or_default();
                let b = |v: Option<bool>| v.map(|b| b.to_string()).unwrap_or_default();
                new_info.version = s(&i.version);
                new_info.bitwidth = i.bit_width.map(|w| w.to_string()).unwrap_or_default();
                new_info.unicode = b(i.is_unicode);
                new_info.runtime = b(i.is_runtime);
                new_info.session_uuid = s(&i.session_uuid);
            }
        }
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
            for (fam, help, ms) in secs {
                if let Some(ms) = ms {
                    p.set(fam, help, MetricKind::Counter, vec![], ms as f64 / 1000.0);
                }
            }
        }
        FactValue::Workspace(w) => {
            let gauges = [
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
            for (fam, help, v) in gauges {
                if let Some(v) = v {
                    p.set(fam, help, MetricKind::Gauge, vec![], v as f64);
                }
            }
            let counters = [
                ("dyalog_workspace_compactions_total", "Workspace compactions.", w.compactions),
                (
                    "dyalog_workspace_garbage_collections_total",
                    "Workspace garbage collections.",
                    w.garbage_collections,
                ),
            ];
            for (fam, help, v) in counters {
                if let Some(v) = v {
                    p.set(fam, help, MetricKind::Counter, vec![], v as f64);
                }
            }
            for (state, v) in
                [("garbage", w.garbage_pockets), ("free", w.free_pockets), ("used", w.used_pockets)]
            {
                if let Some(v) = v {
                    let help = "Workspace pockets, by state.";
                    p.set(
                        "dyalog_workspace_pockets",
                        help,
                        MetricKind::Gauge,
                        vec![label("state", state)],
                        v as f64,
                    );
                }
            }
            if let Some(wsid) = w.wsid {
                new_info.wsid = wsid;
            }
        }
        FactValue::ThreadCount(t) => {
            for (state, v) in [("total", t.total), ("suspended", t.suspended)] {
                if let Some(v) = v {
                    let help = "APL threads, all and suspended.";
                    p.set("dyalog_threads", help, MetricKind::Gauge, vec![label("state", state)], v as f64);
                }
            }
        }
        _ => {}
    }
    if new_info != *info {
        *info = new_info;
        p.retain_family("dyalog_interpreter_info", |_| false);
        let labels = vec![
            label("version", &info.version),
            label("bitwidth", &info.bitwidth),
            label("unicode", &info.unicode),
            label("runtime", &info.runtime),
            label("session_uuid", &info.session_uuid),
            label("wsid", &info.wsid),
        ];
        p.set("dyalog_interpreter_info", "The interpreter and its workspace.", MetricKind::Info, labels, 1.0);
    }
}
