//! The hmon client against dyalog-sim over TCP on 127.0.0.1, port 0.

use std::time::Duration;

use bytes::BytesMut;
use dyalog_sim::{Config, HandshakeStyle, Sim, Version};
use futures::{FutureExt, StreamExt};
use hmon::*;
use serde_json::{json, Value};
use sim_common::Shutdown;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A sim serving on 127.0.0.1 (the shared harness), with its world for the tests to step.
struct Running {
    addr: String,
    sim: Sim,
    _server: sim_common::Running,
}

/// A sim whose world moves only when the test steps it.
fn quiet(config: Config) -> Config {
    Config { tick: None, ..config }
}

async fn start(config: Config) -> Running {
    let sim = Sim::new(config);
    let serving = sim.clone();
    let (server, addr) =
        sim_common::Running::spawn_tcp(|listener, shutdown| serving.serve(listener, shutdown)).await.unwrap();
    Running { addr: addr.to_string(), sim, _server: server }
}

async fn connect(running: &Running) -> (Client, Events) {
    Client::connect(running.addr.clone(), ClientConfig::default()).await.unwrap()
}

/// The next event, failing the test if none comes within a minute (of virtual time where paused).
async fn next_event(events: &mut Events) -> Event {
    tokio::time::timeout(Duration::from_secs(60), events.next())
        .await
        .expect("an event")
        .expect("stream open")
}

async fn next_message(events: &mut Events) -> Response {
    match next_event(events).await {
        Event::Message(m) => m,
        other => panic!("expected a message, got {other:?}"),
    }
}

/// A hand-driven monitor for the error paths: raw frames in, decoded responses out.
struct Raw {
    stream: TcpStream,
    buf: BytesMut,
}

impl Raw {
    async fn connect(addr: &str) -> Raw {
        let mut raw = Raw { stream: TcpStream::connect(addr).await.unwrap(), buf: BytesMut::new() };
        let mut out = BytesMut::new();
        encode_payload::<Request>(&Payload::Handshake(Handshake::supported()), &mut out).unwrap();
        encode_payload::<Request>(&Payload::Handshake(Handshake::using()), &mut out).unwrap();
        raw.stream.write_all(&out).await.unwrap();
        assert_eq!(raw.read().await, Payload::Handshake(Handshake::supported()));
        assert_eq!(raw.read().await, Payload::Handshake(Handshake::using()));
        raw
    }

    async fn send_payload(&mut self, payload: &[u8]) {
        let mut out = BytesMut::new();
        encode_frame(payload, &mut out).unwrap();
        self.stream.write_all(&out).await.unwrap();
    }

    async fn read(&mut self) -> Payload<Response> {
        loop {
            if let Some(frame) = decode_frame(&mut self.buf, DEFAULT_MAX_FRAME_LEN).unwrap() {
                return decode_payload(&frame).unwrap();
            }
            let n = tokio::time::timeout(Duration::from_secs(30), self.stream.read_buf(&mut self.buf))
                .await
                .expect("a reply")
                .unwrap();
            assert!(n > 0, "sim closed the connection");
        }
    }

    async fn ask(&mut self, payload: &str) -> Value {
        self.send_payload(payload.as_bytes()).await;
        match self.read().await {
            Payload::Message(m) => serde_json::to_value(&m).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// Reads until the sim closes the connection.
    async fn until_closed(&mut self) {
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.stream.read_to_end(&mut sink))
            .await
            .expect("the sim closes the connection");
    }
}

// ---- handshakes

#[tokio::test]
async fn handshake_in_every_order() {
    for sim_style in [HandshakeStyle::Eager, HandshakeStyle::Lockstep] {
        let running = start(quiet(Config { handshake: sim_style, ..Config::default() })).await;
        for order in [HandshakeOrder::Pipelined, HandshakeOrder::Lockstep] {
            let config = ClientConfig { handshake: order, ..ClientConfig::default() };
            let (client, _events) = Client::connect(running.addr.clone(), config).await.unwrap();
            let state = client.last_known_state().await.unwrap();
            assert!(state.ts.is_some(), "{sim_style:?} / {order:?}");
        }
    }
}

#[tokio::test]
async fn a_pipelining_peer_sends_handshake_and_requests_in_one_write() {
    let running = start(quiet(Config::default())).await;
    let mut stream = TcpStream::connect(&running.addr).await.unwrap();
    let mut out = BytesMut::new();
    encode_payload::<Request>(&Payload::Handshake(Handshake::SupportedProtocols(vec![1, 2])), &mut out)
        .unwrap();
    encode_payload::<Request>(&Payload::Handshake(Handshake::using()), &mut out).unwrap();
    encode_frame(br#"["GetLastKnownState",{"UID":"p"}]"#, &mut out).unwrap();
    stream.write_all(&out).await.unwrap();
    let mut raw = Raw { stream, buf: BytesMut::new() };
    assert!(matches!(raw.read().await, Payload::Handshake(Handshake::SupportedProtocols(_))));
    assert!(matches!(raw.read().await, Payload::Handshake(Handshake::UsingProtocol(2))));
    let Payload::Message(Response::LastKnownState(s)) = raw.read().await else { panic!() };
    assert_eq!(s.uid.as_deref(), Some("p"));
}

#[tokio::test]
async fn a_peer_without_protocol_2_is_dropped() {
    let running = start(quiet(Config::default())).await;
    let mut stream = TcpStream::connect(&running.addr).await.unwrap();
    let mut out = BytesMut::new();
    encode_frame(b"SupportedProtocols=1", &mut out).unwrap();
    stream.write_all(&out).await.unwrap();
    let mut raw = Raw { stream, buf: BytesMut::new() };
    raw.until_closed().await;
}

// ---- requests

#[tokio::test]
async fn get_facts_returns_every_fact_in_request_order() {
    let running = start(quiet(Config::default())).await;
    let (client, _events) = connect(&running).await;
    let facts = client
        .get_facts([
            IdOrName::from(FactKind::ThreadCount),
            IdOrName::Id(1),
            IdOrName::Name("AccountInformation".into()),
            IdOrName::Id(3),
            IdOrName::Id(4),
            IdOrName::Id(5),
            IdOrName::Id(6),
        ])
        .await
        .unwrap();
    assert_eq!(facts.interval, None, "Interval only when polling");
    let kinds: Vec<_> = facts.facts.as_ref().unwrap().iter().map(|f| f.value.kind()).collect();
    use FactKind::*;
    assert_eq!(
        kinds,
        [ThreadCount, Host, AccountInformation, Workspace, Threads, SuspendedThreads, ThreadCount].map(Some)
    );
    let list = facts.facts.unwrap();
    let FactValue::Host(host) = &list[1].value else { panic!() };
    assert_eq!(host.machine.as_ref().unwrap().access_level, Some(2));
    assert_eq!(host.machine.as_ref().unwrap().desc, Some(json!("")), "19.0: Desc is a string");
    assert_eq!(host.interpreter.as_ref().unwrap().session_uuid, None, "19.0 has no SessionUUID");
    assert_eq!(host.ride.as_ref().unwrap().listening, Some(false));
    let FactValue::Workspace(ws) = &list[3].value else { panic!() };
    assert_eq!(ws.wsid.as_deref(), Some("CLEAR WS"));
    let FactValue::Threads(threads) = &list[4].value else { panic!() };
    assert!(threads[0].stack.as_ref().unwrap()[0].description.is_some());
}

#[tokio::test]
async fn empty_facts_list_gets_an_empty_reply() {
    let running = start(quiet(Config::default())).await;
    let (client, _events) = connect(&running).await;
    let facts = client.get_facts(Vec::<IdOrName>::new()).await.unwrap();
    assert_eq!(facts.facts, Some(vec![]));
}

#[tokio::test]
async fn version_20_host_fact() {
    let running = start(quiet(Config { version: Version::V20, access_level: 3, ..Config::default() })).await;
    let (client, _events) = connect(&running).await;
    let facts = client.get_facts([FactKind::Host]).await.unwrap();
    let FactValue::Host(host) = &facts.facts.unwrap()[0].value else { panic!() };
    let uuid = host.interpreter.as_ref().unwrap().session_uuid.clone().unwrap();
    assert_eq!(uuid.len(), 36);
    assert!(host.machine.as_ref().unwrap().desc.as_ref().unwrap().is_object(), "20.0: Desc may be an object");
    assert_eq!(host.machine.as_ref().unwrap().access_level, Some(3));
}

#[tokio::test]
async fn connect_ride_by_version_and_access_level() {
    let full = start(quiet(Config { version: Version::V20, access_level: 3, ..Config::default() })).await;
    let (client, _events) = connect(&full).await;
    let reply = client.connect_ride(Some(("localhost", 4502))).await.unwrap();
    assert_eq!((reply.restricted, reply.connect, reply.status), (Some(false), Some(true), Some(0)));
    let reply = client.connect_ride(None).await.unwrap();
    assert_eq!(reply.connect, Some(false), "anything but a string and a number disconnects");

    let restricted =
        start(quiet(Config { version: Version::V20, access_level: 2, ..Config::default() })).await;
    let (client, _events) = connect(&restricted).await;
    let reply = client.connect_ride(Some(("localhost", 4502))).await.unwrap();
    assert_eq!((reply.restricted, reply.connect), (Some(true), None));

    let old = start(quiet(Config::default())).await;
    let (client, _events) = connect(&old).await;
    let err = client.connect_ride(Some(("localhost", 4502))).await.unwrap_err();
    assert!(matches!(err, ClientError::Rejected { ref name, .. } if name == "UnknownCommand"), "{err}");
}

#[tokio::test]
async fn level_3_needs_version_20() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = dyalog_sim::run(listener, Config { access_level: 3, ..Config::default() }, Shutdown::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("access level 3"), "{err}");
}

#[tokio::test]
async fn access_level_0_refuses_connections() {
    let running = start(quiet(Config { access_level: 0, ..Config::default() })).await;
    // The listener is closed at once; wait for that by retrying until the port refuses.
    let mut refused = false;
    for _ in 0..100 {
        match TcpStream::connect(&running.addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            _ => tokio::task::yield_now().await,
        }
    }
    assert!(refused);
}

#[tokio::test]
async fn unknown_fact_is_rejected_as_malformed() {
    let running = start(quiet(Config::default())).await;
    let (client, _events) = connect(&running).await;
    let err = client.get_facts([IdOrName::Name("Nope".into())]).await.unwrap_err();
    assert!(
        matches!(err, ClientError::Rejected { ref name, ref request } if name == "MalformedCommand" && request == "GetFacts"),
        "{err}"
    );
    let err = client.subscribe([IdOrName::Id(5)]).await.unwrap_err();
    assert!(
        matches!(err, ClientError::Rejected { ref name, .. } if name == "MalformedCommand"),
        "ThreadSwitch is unknown"
    );
}

// ---- error responses, from a raw monitor

#[tokio::test]
async fn every_error_response() {
    let running = start(quiet(Config::default())).await;
    let mut raw = Raw::connect(&running.addr).await;
    for bad in [
        "{}",
        "[]",
        r#"["X"]"#,
        "[1,{}]",
        r#"["X",[]]"#,
        "not json",
        r#"["GetLastKnownState"]"#,
        "UsingProtocol=2",
    ] {
        assert_eq!(raw.ask(bad).await, json!(["InvalidSyntax", {}]), "{bad}");
    }
    assert_eq!(
        raw.ask(r#"["StopFacts",{"UID":"xx"}]"#).await,
        json!(["DisallowedUID", {"UID": "xx", "Name": "StopFacts"}])
    );
    assert_eq!(
        raw.ask(r#"["BumpFacts",{"UID":"b"}]"#).await,
        json!(["DisallowedUID", {"UID": "b", "Name": "BumpFacts"}])
    );
    assert_eq!(
        raw.ask(r#"["Hatstand",{"UID":"ABC"}]"#).await,
        json!(["UnknownCommand", {"UID": "ABC", "Name": "Hatstand"}])
    );
    assert_eq!(raw.ask(r#"["Hatstand",{}]"#).await, json!(["UnknownCommand", {"Name": "Hatstand"}]));
    assert_eq!(
        raw.ask(r#"["GetFacts",{"UID":"u","Facts":["Host","Nope"]}]"#).await,
        json!(["MalformedCommand", {"UID": "u", "Name": "GetFacts"}])
    );
    assert_eq!(
        raw.ask(r#"["GetFacts",{"UID":"u"}]"#).await,
        json!(["MalformedCommand", {"UID": "u", "Name": "GetFacts"}])
    );
    assert_eq!(
        raw.ask(r#"["GetLastKnownState",{"UID":123}]"#).await,
        json!(["MalformedCommand", {"Name": "GetLastKnownState"}])
    );
    assert_eq!(
        raw.ask(r#"["Subscribe",{"Events":[1,6]}]"#).await,
        json!(["MalformedCommand", {"Name": "Subscribe"}])
    );
    assert_eq!(
        raw.ask(r#"["ConnectRide",{"UID":"r"}]"#).await,
        json!(["UnknownCommand", {"UID": "r", "Name": "ConnectRide"}])
    );
    // The pre-release request with an unknown field is answered (the field is ignored).
    let reply = raw.ask(r#"["GetLastKnownState",{"id":"12345"}]"#).await;
    assert_eq!(reply[0], "LastKnownState");
    assert!(reply[1]["TS"].as_str().unwrap().ends_with('Z'));
    // A poll period too long for any clock is not a crash.
    let reply = raw.ask(r#"["PollFacts",{"Facts":[6],"Interval":9223372036854775807}]"#).await;
    assert_eq!(reply[1]["Interval"], i64::MAX);
    // The connection is still fine after all that.
    assert_eq!(raw.ask(r#"["StopFacts",{}]"#).await, json!(["Facts", {"Interval": 0, "Facts": []}]));
}

#[tokio::test]
async fn uncorrelated_error_responses_reach_the_event_stream() {
    let running = start(quiet(Config::default())).await;
    let (client, mut events) = connect(&running).await;
    client
        .send(Request::StopFacts(StopFacts { uid: Some("xx".into()), ..Default::default() }))
        .await
        .unwrap();
    assert_eq!(
        next_message(&mut events).await,
        Response::DisallowedUid(command_error("StopFacts", Some("xx".into())))
    );
    client.send(Request::Unknown { name: "Hatstand".into(), args: Extra::new() }).await.unwrap();
    assert_eq!(next_message(&mut events).await, Response::UnknownCommand(command_error("Hatstand", None)));
}

// ---- polling, with the paused clock

#[tokio::test(start_paused = true)]
async fn polling_cadence_floor_bump_and_stop() {
    let running = start(quiet(Config::default())).await;
    let (client, mut events) = connect(&running).await;
    let uid = client.poll_facts([FactKind::ThreadCount], Some(Duration::from_millis(100))).await.unwrap();
    let mut times = Vec::new();
    for _ in 0..4 {
        let Response::Facts(f) = next_message(&mut events).await else { panic!() };
        assert_eq!(f.uid.as_deref(), Some(uid.as_str()), "the UID is on every poll");
        assert_eq!(f.interval, Some(500), "100 ms is taken as 500");
        times.push(tokio::time::Instant::now());
    }
    let gaps: Vec<_> = times.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    assert!(gaps.iter().all(|g| (500..510).contains(g)), "virtual gaps {gaps:?}");

    // BumpFacts: one at once, then the period goes on from there.
    let before = tokio::time::Instant::now();
    client.bump_facts().await.unwrap();
    let Response::Facts(_) = next_message(&mut events).await else { panic!() };
    assert!((tokio::time::Instant::now() - before).as_millis() < 10, "the bump is answered at once");

    // A plain GetFacts does not cancel polling.
    client.get_facts([FactKind::Workspace]).await.unwrap();
    let Response::Facts(f) = next_message(&mut events).await else { panic!() };
    assert_eq!(f.uid.as_deref(), Some(uid.as_str()));

    client.stop_facts().await.unwrap();
    loop {
        let Response::Facts(f) = next_message(&mut events).await else { panic!() };
        if f.interval == Some(0) {
            assert_eq!(f.facts, Some(vec![]));
            assert_eq!(f.uid, None);
            break;
        }
    }
    // Five virtual seconds later nothing more has come (a reply to a request made now comes after any
    // poll the sim had sent before it).
    tokio::time::sleep(Duration::from_secs(5)).await;
    client.last_known_state().await.unwrap();
    assert!(events.next().now_or_never().is_none(), "no polls after StopFacts");
}

#[tokio::test(start_paused = true)]
async fn polling_defaults_to_1000_ms_and_a_new_poll_replaces_the_old() {
    let running = start(quiet(Config::default())).await;
    let (client, mut events) = connect(&running).await;
    client.poll_facts([FactKind::ThreadCount], None).await.unwrap();
    let Response::Facts(first) = next_message(&mut events).await else { panic!() };
    let t0 = tokio::time::Instant::now();
    let Response::Facts(second) = next_message(&mut events).await else { panic!() };
    assert_eq!((first.interval, second.interval), (Some(1000), Some(1000)));
    assert!((1000..1010).contains(&(tokio::time::Instant::now() - t0).as_millis()));
    let uid = client.poll_facts([FactKind::Workspace], Some(Duration::from_millis(750))).await.unwrap();
    let f = loop {
        let Response::Facts(f) = next_message(&mut events).await else { panic!() };
        if f.uid.as_deref() == Some(uid.as_str()) {
            break f;
        }
    };
    assert_eq!(f.interval, Some(750));
    assert_eq!(f.facts.unwrap()[0].kind(), Some(FactKind::Workspace));
}

// ---- subscriptions

#[tokio::test]
async fn subscriptions_and_notifications() {
    let running = start(quiet(Config::default())).await;
    let (client, mut events) = connect(&running).await;
    let subscribed = client.subscribe(EventKind::ALL.iter().copied()).await.unwrap();
    let states: Vec<_> =
        subscribed.events.unwrap().iter().map(|e| (e.id.unwrap(), e.value.unwrap())).collect();
    assert_eq!(states, [(1, true), (2, true), (3, true), (4, true)]);
    for _ in 0..5 {
        running.sim.world().step();
    }
    let mut seen = std::collections::BTreeMap::new();
    while seen.len() < 4 {
        let Response::Notification(n) = next_message(&mut events).await else { panic!() };
        assert!(n.uid.as_deref().is_some_and(|u| u.starts_with("hmon-")), "the Subscribe UID is echoed");
        let kind = EventKind::from_id(n.event.as_ref().unwrap().id.unwrap()).unwrap();
        match kind {
            EventKind::WorkspaceResize => assert!(n.size.unwrap() > 0),
            EventKind::WorkspaceCompaction => assert!(n.stack.is_some() && n.tid.is_some()),
            EventKind::TrappedSignal | EventKind::UntrappedSignal => {
                let dmx = n.dmx.clone().unwrap().unwrap();
                assert!(dmx.en.is_some() && dmx.restricted == Some(false));
            }
        }
        seen.insert(kind, n);
    }

    // Subscribe replaces the whole set; an empty list is allowed.
    let subscribed = client.subscribe([EventKind::WorkspaceResize]).await.unwrap();
    let on: Vec<_> =
        subscribed.events.unwrap().iter().filter(|e| e.value == Some(true)).map(|e| e.id.unwrap()).collect();
    assert_eq!(on, [2]);
    for _ in 0..8 {
        running.sim.world().step();
    }
    client.last_known_state().await.unwrap(); // everything the steps caused has been sent by now
    let mut kinds = Vec::new();
    while let Some(Some(Event::Message(Response::Notification(n)))) = events.next().now_or_never() {
        kinds.push(n.event.unwrap().id.unwrap());
    }
    assert!(!kinds.is_empty() && kinds.iter().all(|k| *k == 2), "{kinds:?}");
    let subscribed = client.subscribe(Vec::<IdOrName>::new()).await.unwrap();
    assert!(subscribed.events.unwrap().iter().all(|e| e.value == Some(false)));
}

#[tokio::test]
async fn user_messages_on_request() {
    let running = start(quiet(Config::default())).await;
    let (_client, mut events) = connect(&running).await;
    let (_other, mut other_events) = connect(&running).await;
    running.sim.world().user_message(Some("123".into()), "Hello");
    for events in [&mut events, &mut other_events] {
        let Response::UserMessage(m) = next_message(events).await else { panic!() };
        assert_eq!((m.uid.as_deref(), m.message.as_deref()), (Some("123"), Some("Hello")));
    }
}

// ---- access level 1

#[tokio::test]
async fn access_level_1_redacts_stacks_dmx_and_exception() {
    let running = start(quiet(Config { access_level: 1, ..Config::default() })).await;
    let (client, mut events) = connect(&running).await;
    client.subscribe([EventKind::UntrappedSignal]).await.unwrap();
    for _ in 0..4 {
        running.sim.world().step(); // step 4 raises an untrapped signal, which suspends a worker
    }
    let Response::Notification(n) = next_message(&mut events).await else { panic!() };
    assert_eq!(n.event.unwrap().id, Some(3));
    assert!(n.stack.unwrap().iter().all(|s| s.restricted == Some(true) && s.description.is_none()));
    let as_json = serde_json::to_value(n.dmx.unwrap()).unwrap();
    assert_eq!(as_json, json!({"Restricted": 1}));

    let facts =
        client.get_facts([FactKind::Host, FactKind::Threads, FactKind::SuspendedThreads]).await.unwrap();
    let list = facts.facts.unwrap();
    let FactValue::Host(host) = &list[0].value else { panic!() };
    assert_eq!(host.machine.as_ref().unwrap().access_level, Some(1));
    let FactValue::Threads(threads) = &list[1].value else { panic!() };
    for t in threads {
        let stack = serde_json::to_value(t.stack.as_ref().unwrap()).unwrap();
        assert!(stack.as_array().unwrap().iter().all(|s| *s == json!({"Restricted": 1})), "{stack}");
    }
    let FactValue::SuspendedThreads(suspended) = &list[2].value else { panic!() };
    assert_eq!(suspended.len(), 1);
    let t = serde_json::to_value(&suspended[0]).unwrap();
    assert_eq!((&t["DMX"], &t["Exception"]), (&json!({"Restricted": 1}), &json!({"Restricted": 1})));
    assert!(t.get("Suspended").is_none(), "SuspendedThreads omit Suspended");
}

// ---- unresponsive

#[tokio::test]
async fn unresponsive_answers_only_last_known_state() {
    let running = start(quiet(Config { unresponsive: true, ..Config::default() })).await;
    let (client, _events) = connect(&running).await;
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.get_facts([FactKind::ThreadCount]).await }
    });
    let state = client.last_known_state().await.unwrap();
    assert_eq!(state.activity.unwrap().code, Some(222), "sleeping");
    assert!(!pending.is_finished());
    // Still unanswered after another round trip; then the interpreter comes back and answers it.
    client.last_known_state().await.unwrap();
    assert!(!pending.is_finished());
    running.sim.world().set_busy(false);
    let facts = pending.await.unwrap().unwrap();
    assert!(matches!(facts.facts.unwrap()[0].value, FactValue::ThreadCount(_)));
}

#[tokio::test(start_paused = true)]
async fn unresponsive_requests_time_out() {
    let running = start(quiet(Config { unresponsive: true, ..Config::default() })).await;
    let config = ClientConfig { request_timeout: Duration::from_secs(3), ..ClientConfig::default() };
    let (client, _events) = Client::connect(running.addr.clone(), config).await.unwrap();
    let err = client.get_facts([FactKind::Host]).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { what: "reply", .. }), "{err}");
    assert!(client.last_known_state().await.is_ok());
}

// ---- POLL mode

#[tokio::test]
async fn poll_mode_dials_the_monitor_and_retries_until_it_listens() {
    // A free port with nobody listening yet.
    let addr = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let sim = Sim::new(quiet(Config::default()));
    let shutdown = Shutdown::new();
    tokio::spawn(sim.clone().poll(addr.to_string(), shutdown.clone()));
    tokio::task::yield_now().await;
    let mut listener = Listener::bind(addr, ClientConfig::default()).await.unwrap();
    let (client, mut events, _peer) = listener.accept().await.unwrap();
    let facts = client.get_facts([FactKind::Workspace]).await.unwrap();
    assert_eq!(facts.facts.unwrap().len(), 1);
    sim.world().user_message(None, "polled");
    let Response::UserMessage(m) = next_message(&mut events).await else { panic!() };
    assert_eq!(m.message.as_deref(), Some("polled"));
    // When the monitor drops the session, the interpreter dials again.
    drop(client);
    drop(events);
    let (again, _events, _) = listener.accept().await.unwrap();
    assert!(again.last_known_state().await.is_ok());
    shutdown.cancel();
}

#[tokio::test]
async fn a_silent_connection_does_not_hold_up_other_interpreters() {
    let config = ClientConfig { handshake_timeout: Duration::from_secs(600), ..ClientConfig::default() };
    let mut listener = Listener::bind("127.0.0.1:0", config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _silent = TcpStream::connect(addr).await.unwrap();
    let sim = Sim::new(quiet(Config::default()));
    let shutdown = Shutdown::new();
    tokio::spawn(sim.poll(addr.to_string(), shutdown.clone()));
    let (client, _events, _) = listener.accept().await.unwrap();
    assert!(client.last_known_state().await.is_ok());
    shutdown.cancel();
}

// ---- oversized frames, garbage, and monitors that misbehave

#[tokio::test]
async fn a_20_mib_frame_from_a_monitor_is_refused_on_its_header() {
    let running = start(quiet(Config::default())).await;
    let mut raw = Raw::connect(&running.addr).await;
    // Only the header and a few bytes: the sim must not wait for (or buffer) the other 20 MiB.
    raw.stream.write_all(&(20u32 * 1024 * 1024).to_be_bytes()).await.unwrap();
    raw.stream.write_all(b"HMON[\"GetFacts\"").await.unwrap();
    raw.until_closed().await;
    let (client, _events) = connect(&running).await;
    assert!(client.last_known_state().await.is_ok(), "other monitors are still served");
}

#[tokio::test]
async fn a_20_mib_frame_from_an_interpreter_is_refused_on_its_header() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fake = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut out = BytesMut::new();
        encode_payload::<Response>(&Payload::Handshake(Handshake::supported()), &mut out).unwrap();
        encode_payload::<Response>(&Payload::Handshake(Handshake::using()), &mut out).unwrap();
        out.extend_from_slice(&(20u32 * 1024 * 1024).to_be_bytes());
        out.extend_from_slice(b"HMON[\"Facts\",{");
        stream.write_all(&out).await.unwrap();
        // Hold the connection open: the client must give up on the header alone.
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    });
    let (_client, mut events) = Client::connect(addr, ClientConfig::default()).await.unwrap();
    let Event::Disconnected { reason } = next_event(&mut events).await else { panic!() };
    assert!(reason.contains("20971520") && reason.contains("exceeds the maximum"), "{reason}");
    assert!(events.next().await.is_none(), "no reconnect configured: the stream ends");
    fake.await.unwrap();
}

#[tokio::test]
async fn garbage_and_half_frames_do_not_disturb_other_monitors() {
    let running = start(quiet(Config::default())).await;
    let (client, _events) = connect(&running).await;

    let mut garbage = Raw::connect(&running.addr).await;
    garbage.stream.write_all(b"\x00\x00\x00\x17RIDEUsingProtocol=2").await.unwrap();
    garbage.until_closed().await;

    let mut half = Raw::connect(&running.addr).await;
    half.stream.write_all(b"\x00\x00\x00\x40HMON[\"GetFa").await.unwrap();
    drop(half);

    let mut short = TcpStream::connect(&running.addr).await.unwrap();
    short.write_all(b"\x00\x00\x00\x03").await.unwrap();
    let mut sink = Vec::new();
    let _ = short.read_to_end(&mut sink).await; // handshake frames, then the close

    assert!(client.get_facts([FactKind::Host]).await.is_ok());
}

#[tokio::test]
async fn a_monitor_that_never_reads_is_dropped_and_others_are_served() {
    let running = start(quiet(Config { client_queue: 4, ..Config::default() })).await;
    let mut lazy = Raw::connect(&running.addr).await;
    let mut requests = BytesMut::new();
    for _ in 0..4000 {
        encode_frame(br#"["GetFacts",{"Facts":[1,2,3,4,5,6]}]"#, &mut requests).unwrap();
    }
    let writing = tokio::spawn(async move {
        // The sim may drop us before it has read everything; a failed write is fine.
        let _ = lazy.stream.write_all(&requests).await;
        lazy
    });
    let (client, _events) = connect(&running).await;
    for _ in 0..3 {
        assert!(client.get_facts([FactKind::Threads]).await.is_ok());
    }
    let mut lazy = writing.await.unwrap();
    lazy.until_closed().await;
}

// ---- client reconnect

#[tokio::test]
async fn client_retries_until_the_sim_listens_and_reconnects_with_its_poll() {
    let addr = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let config = ClientConfig {
        reconnect: Some(Reconnect {
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(200),
            max_attempts: None,
        }),
        ..ClientConfig::default()
    };
    let connecting = tokio::spawn(Client::connect(addr.to_string(), config));
    tokio::task::yield_now().await;
    let shutdown = Shutdown::new();
    let sim = Sim::new(quiet(Config::default()));
    tokio::spawn(sim.clone().serve(TcpListener::bind(addr).await.unwrap(), shutdown.clone()));
    let (client, mut events) = connecting.await.unwrap().unwrap();
    let uid = client.poll_facts([FactKind::ThreadCount], Some(Duration::from_secs(60))).await.unwrap();
    let Response::Facts(_) = next_message(&mut events).await else { panic!() };

    // The sim goes away and comes back on the same port.
    shutdown.cancel();
    let Event::Disconnected { .. } = next_event(&mut events).await else { panic!() };
    let shutdown = Shutdown::new();
    // The old listener closes once the sim has stopped its sessions; wait for the port to be free.
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(_) => tokio::task::yield_now().await,
        }
    };
    tokio::spawn(sim.clone().serve(listener, shutdown.clone()));
    assert_eq!(next_event(&mut events).await, Event::Reconnected);
    let Response::Facts(f) = next_message(&mut events).await else { panic!() };
    assert_eq!(f.uid.as_deref(), Some(uid.as_str()), "the standing poll was sent again");
    assert!(client.last_known_state().await.is_ok());
    shutdown.cancel();
}

// ---- a Connection driven by its owner (one task per interpreter)

/// The next thing a [`Connection`] yields, failing the test if nothing comes within a minute.
async fn next_incoming(conn: &mut Connection) -> Incoming {
    tokio::time::timeout(Duration::from_secs(60), conn.next()).await.expect("something arrives").unwrap()
}

#[tokio::test]
async fn a_connection_polls_asks_and_subscribes_in_its_owners_task() {
    let running = start(quiet(Config::default())).await;
    let mut conn = Connection::connect(&running.addr, ClientConfig::default()).await.unwrap();
    let subscribe = Subscribe { events: Some(vec![EventKind::WorkspaceResize.into()]), ..Default::default() };
    let subscribed = conn.request(Request::Subscribe(subscribe)).await.unwrap();
    let poll = conn.poll_facts([FactKind::Workspace], Some(Duration::from_millis(500))).await.unwrap();
    let lks = conn.request(Request::GetLastKnownState(GetLastKnownState::default())).await.unwrap();
    let (mut got_subscribed, mut got_lks, mut polls) = (false, false, 0);
    while !(got_subscribed && got_lks && polls >= 2) {
        match next_incoming(&mut conn).await {
            Incoming::Reply { uid, response: Response::Subscribed(_) } if uid == subscribed => {
                got_subscribed = true
            }
            Incoming::Reply { uid, response: Response::LastKnownState(_) } if uid == lks => got_lks = true,
            Incoming::Event(Event::Message(Response::Facts(f)))
                if f.uid.as_deref() == Some(poll.as_str()) =>
            {
                polls += 1
            }
            other => panic!("{other:?}"),
        }
    }
    running.sim.world().user_message(None, "hello");
    loop {
        match next_incoming(&mut conn).await {
            Incoming::Event(Event::Message(Response::UserMessage(m))) => {
                assert_eq!(m.message.as_deref(), Some("hello"));
                break;
            }
            Incoming::Event(Event::Message(Response::Facts(_))) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_listener_yields_interpreters_as_connections_too() {
    let mut listener = Listener::bind("127.0.0.1:0", ClientConfig::default()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sim = Sim::new(quiet(Config::default()));
    let shutdown = Shutdown::new();
    tokio::spawn(sim.poll(addr.to_string(), shutdown.clone()));
    let (mut conn, _peer) = listener.accept_connection().await.unwrap();
    let uid = conn.request(Request::GetLastKnownState(GetLastKnownState::default())).await.unwrap();
    match next_incoming(&mut conn).await {
        Incoming::Reply { uid: got, response: Response::LastKnownState(_) } => assert_eq!(got, uid),
        other => panic!("{other:?}"),
    }
    shutdown.cancel();
}
