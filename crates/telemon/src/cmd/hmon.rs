//! `telemon hmon`: watch a Dyalog APL interpreter over the Health Monitor protocol.
//!
//! `connect HOST:PORT` dials an interpreter in SERVE mode; `listen ADDR` waits for interpreters that
//! dial out in POLL mode. Either way telemon asks for facts once (or polls them), can subscribe to
//! events and ask for the last known state, and prints every message received after the handshake:
//! a readable summary by default, or the message's JSON array, one per line, with `--json`.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use hmon::{
    Client, ClientConfig, Event, EventKind, Events, Fact, FactKind, FactValue, HandshakeOrder, IdOrName,
    Listener, Message, Reconnect, Response, Thread,
};
use tokio::sync::mpsc;

use crate::cmd::record::{self, RecordArgs};
use crate::output::{self, human_bytes, print_json_line, print_line, CliError, CliResult, OutputArgs};

/// Watch a Dyalog APL interpreter (HMON).
#[derive(Debug, ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    command: HmonCommand,
}

#[derive(Debug, Subcommand)]
enum HmonCommand {
    /// Connect to an interpreter that serves HMON (SERVE mode, e.g. HMON_INIT=SERVE:localhost:4512).
    Connect {
        /// The interpreter's HOST:PORT.
        addr: String,
        /// Keep retrying while the interpreter is not there, and reconnect when it goes away.
        #[arg(long)]
        reconnect: bool,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Listen for interpreters that dial out (POLL mode, e.g. HMON_INIT=POLL:localhost:7000).
    Listen {
        /// The address to listen on (HOST:PORT; port 0 picks one, printed on stderr).
        addr: String,
        #[command(flatten)]
        session: SessionArgs,
    },
}

#[derive(Debug, Clone, ClapArgs)]
struct SessionArgs {
    /// Facts to ask for: names or IDs, comma-separated, or `all` [default: Host,Workspace,ThreadCount].
    #[arg(long, value_name = "LIST")]
    facts: Option<String>,
    /// Poll the facts at this interval (the interpreter takes at least 500ms), instead of asking once.
    #[arg(long, value_name = "DURATION", value_parser = output::parse_duration)]
    poll: Option<Duration>,
    /// Subscribe to events: names or IDs, comma-separated, or `all`; notifications are printed as they come.
    #[arg(long, value_name = "LIST")]
    subscribe: Option<String>,
    /// Ask for the last known state (answered even when the interpreter is busy).
    #[arg(long)]
    last_known_state: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// How long to wait for each reply.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = output::parse_duration)]
    timeout: Duration,
    /// Do the handshake in the Dyalog demo's lock-step order instead of pipelining it.
    #[arg(long)]
    lockstep: bool,
    #[command(flatten)]
    record: RecordArgs,
}

/// The parsed requests of a session.
#[derive(Debug)]
struct Plan {
    facts: Vec<IdOrName>,
    facts_given: bool,
    events: Option<Vec<IdOrName>>,
    args: SessionArgs,
}

impl Plan {
    fn new(args: SessionArgs) -> Result<Plan, CliError> {
        let facts = match &args.facts {
            None => vec![FactKind::Host.into(), FactKind::Workspace.into(), FactKind::ThreadCount.into()],
            Some(list) => parse_list(list, FactKind::ALL, FactKind::resolve, "fact")?,
        };
        let events = match &args.subscribe {
            None => None,
            Some(list) => Some(parse_list(list, EventKind::ALL, EventKind::resolve, "event")?),
        };
        Ok(Plan { facts, facts_given: args.facts.is_some(), events, args })
    }

    /// Whether the session goes on after its first requests (polling or subscribed).
    fn streams(&self) -> bool {
        self.args.poll.is_some() || self.events.is_some()
    }

    fn client_config(&self, reconnect: bool) -> ClientConfig {
        ClientConfig {
            request_timeout: self.args.timeout,
            handshake_timeout: self.args.timeout,
            handshake: if self.args.lockstep { HandshakeOrder::Lockstep } else { HandshakeOrder::Pipelined },
            reconnect: reconnect.then(Reconnect::default),
            uid_prefix: "telemon-".to_owned(),
            ..ClientConfig::default()
        }
    }
}

/// Parses `Host,3` or `all`, checking every entry against the known kinds.
fn parse_list<K: Copy + Into<IdOrName>>(
    list: &str,
    all: &[K],
    resolve: fn(&IdOrName) -> Option<K>,
    what: &str,
) -> Result<Vec<IdOrName>, CliError> {
    if list.trim().eq_ignore_ascii_case("all") {
        return Ok(all.iter().map(|k| (*k).into()).collect());
    }
    list.split(',')
        .filter(|w| !w.trim().is_empty())
        .map(|word| {
            let r = IdOrName::parse_word(word);
            resolve(&r).map(|_| r).ok_or_else(|| CliError::Usage(format!("unknown {what} {:?}", word.trim())))
        })
        .collect()
}

/// What a session hands to the printer.
enum Output {
    Message(Box<Response>),
    Note(String),
    Done(Result<(), String>),
}

/// An error of a connection, and for a peer of another protocol what it looks like.
fn peer_error(e: hmon::ClientError) -> CliError {
    let first = match &e {
        hmon::ClientError::OtherProtocol { first } => Some(&first[..]),
        _ => None,
    };
    CliError::Peer(output::peer_message(&e, first))
}

/// Runs `telemon hmon` until the session ends, `--count` is reached, or Ctrl-C or SIGTERM.
pub async fn run(args: Args) -> CliResult {
    match args.command {
        HmonCommand::Connect { addr, reconnect, session } => {
            record::until_stopped(connect(addr, reconnect, Plan::new(session)?)).await
        }
        HmonCommand::Listen { addr, session } => {
            record::until_stopped(listen(addr, Plan::new(session)?)).await
        }
    }
}

async fn connect(addr: String, reconnect: bool, plan: Plan) -> CliResult {
    let mut countdown = plan.args.output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    let recording = plan.args.record.start(&addr, telemon_capture::link_type::HMON, &addr)?;
    let (client, events) = match &recording {
        None => Client::connect(addr.clone(), plan.client_config(reconnect)).await.map_err(peer_error)?,
        Some(_) if reconnect => {
            return Err(CliError::Usage(
                "--record does not follow --reconnect yet: record one connection".into(),
            ))
        }
        Some(rec) => {
            let stream = tokio::net::TcpStream::connect(&addr)
                .await
                .map_err(|e| CliError::Peer(format!("cannot connect to {addr}: {e}")))?;
            let _ = stream.set_nodelay(true);
            Client::over(rec.tap(stream), plan.client_config(false)).await.map_err(peer_error)?
        }
    };
    let (tx, mut rx) = mpsc::channel(256);
    let plan = Arc::new(plan);
    let json = plan.args.output.json;
    tokio::spawn(session(client, events, plan, tx));
    loop {
        match rx.recv().await {
            None => return Ok(()),
            Some(Output::Message(m)) => {
                show(&m, json, None)?;
                if countdown.tick() {
                    return Ok(());
                }
            }
            Some(Output::Note(note)) => eprintln!("telemon: {addr}: {note}"),
            Some(Output::Done(result)) => return result.map_err(CliError::Peer),
        }
    }
}

async fn listen(addr: String, plan: Plan) -> CliResult {
    let mut countdown = plan.args.output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    if plan.args.record.record.is_some() {
        // Refused rather than ignored: a run that records nothing must not look like one that did.
        return Err(CliError::Usage(
            "--record records `hmon connect`; `hmon listen` cannot record yet".into(),
        ));
    }
    let mut listener = Listener::bind(&addr, plan.client_config(false))
        .await
        .map_err(|e| CliError::Peer(format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr()?;
    eprintln!("telemon: listening for interpreters on {local}");
    let json = plan.args.output.json;
    let plan = Arc::new(plan);
    let (tx, mut rx) = mpsc::channel::<(String, Output)>(256);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, events, peer)) => {
                    let peer = peer.to_string();
                    eprintln!("telemon: interpreter {peer} connected");
                    let (session_tx, mut session_rx) = mpsc::channel(256);
                    tokio::spawn(session(client, events, plan.clone(), session_tx));
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        while let Some(out) = session_rx.recv().await {
                            if tx.send((peer.clone(), out)).await.is_err() {
                                return;
                            }
                        }
                    });
                }
                Err(e) => eprintln!("telemon: an interpreter failed to connect: {}", peer_error(e)),
            },
            Some((peer, out)) = rx.recv() => match out {
                Output::Message(m) => {
                    show(&m, json, Some(&peer))?;
                    if countdown.tick() {
                        return Ok(());
                    }
                }
                Output::Note(note) => eprintln!("telemon: {peer}: {note}"),
                Output::Done(Ok(())) => eprintln!("telemon: {peer}: done"),
                Output::Done(Err(e)) => eprintln!("telemon: {peer}: {e}"),
            },
        }
    }
}

/// One interpreter: the requests of the plan, then (when polling or subscribed) its events.
async fn session(client: Client, mut events: Events, plan: Arc<Plan>, out: mpsc::Sender<Output>) {
    let result = session_steps(&client, &mut events, &plan, &out).await;
    let _ = out.send(Output::Done(result)).await;
}

async fn session_steps(
    client: &Client,
    events: &mut Events,
    plan: &Plan,
    out: &mpsc::Sender<Output>,
) -> Result<(), String> {
    let send = |m: Response| async {
        out.send(Output::Message(Box::new(m))).await.map_err(|_| "printer gone".to_owned())
    };
    if plan.args.last_known_state {
        let state = client.last_known_state().await.map_err(|e| e.to_string())?;
        send(Response::LastKnownState(state)).await?;
    }
    if let Some(list) = &plan.events {
        let subscribed = client.subscribe(list.clone()).await.map_err(|e| e.to_string())?;
        send(Response::Subscribed(subscribed)).await?;
    }
    match plan.args.poll {
        Some(interval) => {
            client.poll_facts(plan.facts.clone(), Some(interval)).await.map_err(|e| e.to_string())?;
        }
        None if plan.facts_given || !(plan.args.last_known_state || plan.events.is_some()) => {
            let facts = client.get_facts(plan.facts.clone()).await.map_err(|e| e.to_string())?;
            send(Response::Facts(facts)).await?;
        }
        None => {}
    }
    if !plan.streams() {
        return Ok(());
    }
    use futures::StreamExt;
    while let Some(event) = events.next().await {
        let output = match event {
            Event::Message(m) => Output::Message(Box::new(m)),
            Event::InvalidPayload(e) => Output::Note(format!("ignored a bad message: {e}")),
            Event::Disconnected { reason } => Output::Note(format!("disconnected: {reason}")),
            Event::Reconnected => Output::Note("reconnected".to_owned()),
            Event::Lagged { dropped } => {
                Output::Note(format!("{dropped} messages dropped (output too slow)"))
            }
            other => Output::Note(format!("{other:?}")),
        };
        if out.send(output).await.is_err() {
            return Ok(());
        }
    }
    Err("connection closed".to_owned())
}

/// Prints one message: its JSON array, or a summary for people.
/// Shows what a recorded interpreter sent (`telemon replay --view hmon`): every message of each connection,
/// decoded with the crate's codec, as `connect` shows the answers and notifications it gets.
pub async fn replay<R: tokio::io::AsyncRead + Unpin>(inputs: Vec<R>, output: &OutputArgs) -> CliResult {
    use futures::StreamExt;
    let mut countdown = output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    for input in inputs {
        let codec = hmon::ClientCodec::new(ClientConfig::default().max_frame_len);
        let mut frames = tokio_util::codec::FramedRead::new(input, codec);
        while let Some(item) = frames.next().await {
            match item {
                Ok(Ok(hmon::Payload::Message(m))) => {
                    show(&m, output.json, None)?;
                    if countdown.tick() {
                        return Ok(());
                    }
                }
                Ok(Ok(hmon::Payload::Handshake(_))) => {}
                Ok(Err(e)) => eprintln!("telemon: hmon: {e}"),
                Err(e) => {
                    eprintln!("telemon: hmon: {e}");
                    break;
                }
            }
        }
    }
    Ok(())
}

fn show(m: &Response, json: bool, peer: Option<&str>) -> CliResult {
    if json {
        return print_json_line(m);
    }
    let prefix = peer.map(|p| format!("[{p}] ")).unwrap_or_default();
    for line in summary(m) {
        print_line(format_args!("{prefix}{line}"))?;
    }
    Ok(())
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map(|v| v.to_string()).unwrap_or_else(|| "?".to_owned())
}

fn flag(v: Option<bool>, yes: &str, no: &str) -> String {
    match v {
        Some(true) => yes.to_owned(),
        Some(false) => no.to_owned(),
        None => "?".to_owned(),
    }
}

fn bytes(v: Option<i64>) -> String {
    v.map(|n| human_bytes(n as f64)).unwrap_or_else(|| "?".to_owned())
}

fn uid_note(uid: &Option<String>) -> String {
    uid.as_ref().map(|u| format!(" ({u})")).unwrap_or_default()
}

/// The human view of one message.
fn summary(m: &Response) -> Vec<String> {
    match m {
        Response::Facts(f) => {
            let mut lines = Vec::new();
            match f.interval {
                Some(0) => lines.push(format!("facts: polling stopped{}", uid_note(&f.uid))),
                Some(ms) => lines.push(format!("facts: every {ms} ms{}", uid_note(&f.uid))),
                None => {}
            }
            for fact in f.facts.iter().flatten() {
                lines.extend(fact_lines(fact));
            }
            lines
        }
        Response::Notification(n) => {
            let event = n.event.as_ref();
            let name = event.and_then(|e| e.name.clone()).unwrap_or_else(|| "?".to_owned());
            let mut line = format!("event      {name}");
            if let Some(size) = n.size {
                line.push_str(&format!("  size {}", human_bytes(size as f64)));
            }
            if let Some(tid) = n.tid {
                line.push_str(&format!("  thread {tid}"));
            }
            if let Some(top) = n.stack.as_ref().and_then(|s| s.first()) {
                line.push_str(&format!("  at {}", top.description.as_deref().unwrap_or("(restricted)")));
            }
            if let Some(Some(dmx)) = &n.dmx {
                if let Some(em) = &dmx.em {
                    line.push_str(&format!("  {em}"));
                }
            }
            vec![line]
        }
        Response::Subscribed(s) => {
            let on: Vec<String> = s
                .events
                .iter()
                .flatten()
                .filter(|e| e.value == Some(true))
                .map(|e| e.name.clone().unwrap_or_else(|| opt(&e.id)))
                .collect();
            vec![format!("subscribed {}", if on.is_empty() { "(nothing)".to_owned() } else { on.join(", ") })]
        }
        Response::LastKnownState(s) => {
            let mut line = format!("state      at {}", when(&s.ts));
            if let Some(a) = &s.activity {
                let what = match a.code {
                    Some(1) => "running",
                    Some(2) => "allocating",
                    Some(3) => "compacting",
                    Some(4) => "checking the workspace",
                    Some(222) => "sleeping",
                    _ => "activity ?",
                };
                line.push_str(&format!("  {what} since {}", when(&a.ts)));
            }
            if let Some(l) = &s.location {
                line.push_str(&format!("  in {}[{}]", opt(&l.function), opt(&l.line)));
            }
            if let Some(w) = &s.ws_full {
                line.push_str(&format!("  WS FULL at {}", when(&w.ts)));
            }
            vec![line]
        }
        Response::UserMessage(u) => vec![format!("message    {}{}", opt(&u.message), uid_note(&u.uid))],
        Response::RideConnection(r) => vec![match r.restricted {
            Some(true) => "ride       restricted (needs access level 3)".to_owned(),
            _ => format!("ride       {} status {}", flag(r.connect, "connect", "disconnect"), opt(&r.status)),
        }],
        Response::InvalidSyntax(_) => vec!["error      InvalidSyntax".to_owned()],
        Response::DisallowedUid(e) | Response::UnknownCommand(e) | Response::MalformedCommand(e) => {
            vec![format!("error      {} for {}{}", m.name(), opt(&e.name), uid_note(&e.uid))]
        }
        other => vec![format!("{} {}", other.name(), serde_json::to_string(other).unwrap_or_default())],
    }
}

fn thread_line(t: &Thread) -> String {
    let top = t
        .stack
        .as_ref()
        .and_then(|s| s.first())
        .map(|e| e.description.clone().unwrap_or_else(|| "(restricted)".to_owned()))
        .unwrap_or_default();
    let error = match &t.dmx {
        Some(Some(d)) => d.em.clone().map(|em| format!("  {em}")).unwrap_or_default(),
        _ => String::new(),
    };
    format!("  thread {:>3}  {:<10} {:<8}  {top}{error}", opt(&t.tid), opt(&t.state), opt(&t.flags))
}

/// A timestamp for people: `2023-01-11 14:47:00.132Z`.
fn when(ts: &Option<hmon::Timestamp>) -> String {
    ts.map(|t| t.to_rfc3339()).unwrap_or_else(|| "?".to_owned())
}

fn fact_lines(fact: &Fact) -> Vec<String> {
    match &fact.value {
        FactValue::Host(h) => {
            let mut line = String::from("host      ");
            if let Some(m) = &h.machine {
                line.push_str(&format!(" {} user {} pid {}", opt(&m.name), opt(&m.user), opt(&m.pid)));
            }
            if let Some(i) = &h.interpreter {
                line.push_str(&format!(
                    "  Dyalog {} {}-bit {} {}",
                    opt(&i.version),
                    opt(&i.bit_width),
                    flag(i.is_unicode, "Unicode", "Classic"),
                    flag(i.is_runtime, "runtime", "development"),
                ));
            }
            if let Some(level) = h.machine.as_ref().and_then(|m| m.access_level) {
                line.push_str(&format!("  access level {level}"));
            }
            match h.machine.as_ref().and_then(|m| m.desc.as_ref()) {
                Some(serde_json::Value::String(s)) if s.is_empty() => {}
                Some(serde_json::Value::String(s)) => line.push_str(&format!("  \"{s}\"")),
                Some(other) => line.push_str(&format!("  {other}")),
                None => {}
            }
            vec![line]
        }
        FactValue::AccountInformation(a) => vec![format!(
            "account    user {}  compute {} ms  connected {} ms  keying {} ms",
            opt(&a.user_identification),
            opt(&a.compute_time),
            opt(&a.connect_time),
            opt(&a.keying_time)
        )],
        FactValue::Workspace(w) => {
            let pct = match (w.used, w.allocation) {
                (Some(u), Some(a)) if a > 0 => format!(" ({:.0}%)", u as f64 * 100.0 / a as f64),
                _ => String::new(),
            };
            vec![format!(
                "workspace  {}  used {} of {}{pct}  available {}  compactions {}  gc {}",
                opt(&w.wsid),
                bytes(w.used),
                bytes(w.allocation),
                bytes(w.available),
                opt(&w.compactions),
                opt(&w.garbage_collections)
            )]
        }
        FactValue::Threads(threads) | FactValue::SuspendedThreads(threads) => {
            let what = if matches!(fact.value, FactValue::Threads(_)) { "threads" } else { "suspended" };
            let mut lines = vec![format!("{what:<10} {}", threads.len())];
            lines.extend(threads.iter().map(thread_line));
            lines
        }
        FactValue::ThreadCount(c) => {
            vec![format!("threads    {} total, {} suspended", opt(&c.total), opt(&c.suspended))]
        }
        FactValue::Raw { value, values } => vec![format!(
            "fact {} {}: {}",
            opt(&fact.id),
            fact.name.as_deref().unwrap_or("?"),
            value.as_ref().or(values.as_ref()).map(|v| v.to_string()).unwrap_or_default()
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_checked() {
        let all = parse_list("all", FactKind::ALL, FactKind::resolve, "fact").unwrap();
        assert_eq!(all.len(), 6);
        let some = parse_list("Host, 3", FactKind::ALL, FactKind::resolve, "fact").unwrap();
        assert_eq!(some, [IdOrName::Name("Host".into()), IdOrName::Id(3)]);
        assert!(matches!(
            parse_list("Nope", FactKind::ALL, FactKind::resolve, "fact"),
            Err(CliError::Usage(_))
        ));
        assert!(matches!(
            parse_list("5", EventKind::ALL, EventKind::resolve, "event"),
            Err(CliError::Usage(_))
        ));
    }

    #[test]
    fn summaries_read_well() {
        let m: Response = hmon::decode_message(
            br#"["Facts",{"UID":"xx","Interval":5000,"Facts":[{"ID":6,"Name":"ThreadCount","Value":{"Total":1,"Suspended":0}}]}]"#,
        )
        .unwrap();
        assert_eq!(summary(&m), ["facts: every 5000 ms (xx)", "threads    1 total, 0 suspended"]);
        let m: Response = hmon::decode_message(
            br#"["Notification",{"UID":"XX","Event":{"ID":2,"Name":"WorkspaceResize"},"Size":894213}]"#,
        )
        .unwrap();
        assert_eq!(summary(&m), ["event      WorkspaceResize  size 873.3 KiB"]);
    }
}
