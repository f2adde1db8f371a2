//! The inspector (mono-counters) against the fake agent over real TCP on 127.0.0.1, port 0.

use std::future::Future;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use mono_agent_sim::{AgentConfig, Backoff, DuplicateAdd, SessionEnd, ValueMode, ValueOverrides};
use mono_counters::*;
use sim_common::Shutdown;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;

/// A safety net so a broken test fails instead of hanging; never a timing assertion.
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} never happened"))
}

fn config(addr: std::net::SocketAddr, counters: &str) -> AgentConfig {
    let mut config = AgentConfig::from_options(&format!("address={addr},counters={counters},interval=5"))
        .expect("options");
    config.values = ValueMode::Fixed;
    config.backoff = Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
    config
}

const TWO: &str = "Mono JIT/Compiled methods;Mono System/Working Set";

/// An inspector and an agent dialling it; the agent's values can be forced through the returned overrides.
async fn start(
    counters: &str,
    tweak: impl FnOnce(&mut AgentConfig),
) -> (Inspector, ValueOverrides, JoinHandle<()>, Shutdown) {
    let inspector = Inspector::bind("127.0.0.1:0", ClientConfig::default()).await.unwrap();
    let mut config = config(inspector.local_addr().unwrap(), counters);
    tweak(&mut config);
    let shutdown = Shutdown::new();
    let overrides = ValueOverrides::default();
    let agent = tokio::spawn({
        let (overrides, shutdown) = (overrides.clone(), shutdown.clone());
        async move { mono_agent_sim::run_with_overrides(config, overrides, shutdown).await.expect("agent runs") }
    });
    (inspector, overrides, agent, shutdown)
}

async fn accept(inspector: &Inspector) -> Session {
    within("an agent connection", inspector.accept()).await.expect("hello").0
}

/// Reads samples until one satisfies `pred`.
async fn sample_where(
    session: &mut Session,
    what: &str,
    pred: impl Fn(&SampleUpdate) -> bool,
) -> SampleUpdate {
    within(what, async {
        loop {
            let update = session.next_sample().await.expect("valid stream").expect("agent still connected");
            if pred(&update) {
                return update;
            }
        }
    })
    .await
}

fn value(update: &SampleUpdate, index: i16) -> Option<CounterValue> {
    update.table.get(index)?.value.as_ref()?.typed()
}

#[tokio::test]
async fn hello_then_deltas() {
    let (inspector, overrides, _agent, shutdown) =
        start(&format!("{TWO};Mono JIT/Nonexistent"), |_| {}).await;
    let mut session = accept(&inspector).await;
    let names: Vec<_> = session.hello().headers.iter().map(|h| (h.full_name(), h.index, h.kind)).collect();
    assert_eq!(
        names,
        vec![
            ("Mono JIT/Compiled methods".into(), 0, CounterType::Int),
            ("Mono System/Working Set".into(), 1, CounterType::Long)
        ],
        "unknown counters are skipped, indexes count from 0"
    );
    let first = sample_where(&mut session, "the first sample", |_| true).await;
    assert_eq!(first.changed, vec![0, 1], "the first sample carries every counter");
    overrides.set("Mono System/Working Set", CounterValue::Long(52_428_800));
    let update = sample_where(&mut session, "the change", |u| !u.changed.is_empty()).await;
    assert_eq!(update.changed, vec![1], "only the changed counter is sent");
    assert_eq!(value(&update, 1), Some(CounterValue::Long(52_428_800)));
    assert!(value(&update, 0).is_some(), "the unchanged counter keeps its last value");
    shutdown.cancel();
}

#[tokio::test]
async fn list_add_remove_interleaved_with_sampling() {
    let (inspector, _overrides, _agent, shutdown) = start(TWO, |_| {}).await;
    let mut session = accept(&inspector).await;
    sample_where(&mut session, "a sample", |_| true).await;

    let list = session.list().await.unwrap();
    assert_eq!(list[0], CounterName::new("Mono JIT", "Compiled methods"));
    let system: Vec<_> =
        list.iter().filter(|c| c.category == "Mono System").map(|c| c.name.as_str()).collect();
    assert_eq!(
        system,
        [
            "User Time",
            "System Time",
            "Total Time",
            "Working Set",
            "Private Bytes",
            "Virtual Bytes",
            "Page Faults"
        ]
    );
    assert_eq!(list.last().unwrap().category, "Mono System", "registered counters first, Mono System last");

    // Two adds and a list in flight at once: each response goes to its request, FIFO per kind.
    let handle = session.handle();
    let (a, b, l) = tokio::join!(
        handle.add("Mono System", "User Time"),
        handle.add("Mono GC", "Heap size"),
        handle.list(),
    );
    let AddResponse::Ok(a) = a.unwrap() else { panic!("add User Time") };
    let AddResponse::Ok(b) = b.unwrap() else { panic!("add Heap size") };
    assert_eq!((a.full_name().as_str(), a.index, a.unit), ("Mono System/User Time", 2, Unit::Time));
    assert_eq!((b.full_name().as_str(), b.index, b.kind), ("Mono GC/Heap size", 3, CounterType::Word));
    assert_eq!(l.unwrap(), list);
    let update = sample_where(&mut session, "the added counters", |u| u.changed.contains(&3)).await;
    assert_eq!(value(&update, 3).map(|v| v.size()), Some(8), "WORD from a 64-bit agent");

    assert_eq!(session.remove(1).await.unwrap(), Status::Ok);
    assert_eq!(session.remove(1).await.unwrap(), Status::NotFound, "already removed");
    let AddResponse::Ok(again) = session.add("Mono System", "Working Set").await.unwrap() else { panic!() };
    assert_eq!(again.index, 4, "indexes are never reused");
    // Samples without values are not handed out: the next one shown carries the new counter.
    let update = sample_where(&mut session, "a sample after remove", |u| u.changed.contains(&4)).await;
    assert!(update.table.get(1).is_none());
    shutdown.cancel();
}

#[tokio::test]
async fn add_of_an_unknown_counter_is_notfound() {
    let (inspector, _overrides, _agent, shutdown) = start(TWO, |_| {}).await;
    let mut session = accept(&inspector).await;
    assert_eq!(session.add("Mono JIT", "No such counter").await.unwrap(), AddResponse::NotFound);
    assert_eq!(session.add("MyApp", "Requests").await.unwrap(), AddResponse::NotFound);
    sample_where(&mut session, "sampling goes on", |_| true).await;
    shutdown.cancel();
}

#[tokio::test]
async fn duplicate_add_answers_existing_by_default() {
    let (inspector, _overrides, _agent, shutdown) = start(TWO, |_| {}).await;
    let mut session = accept(&inspector).await;
    let dup = session.add("Mono JIT", "Compiled methods").await.unwrap();
    assert_eq!(dup, AddResponse::Existing);
    sample_where(&mut session, "sampling goes on", |_| true).await;
    shutdown.cancel();
}

#[tokio::test]
async fn duplicate_add_drops_the_connection_like_the_real_agent_then_it_reconnects() {
    let (inspector, _overrides, _agent, shutdown) =
        start(TWO, |c| c.duplicate_add = DuplicateAdd::DropConnection).await;
    let mut session = accept(&inspector).await;
    let err = session.add("Mono System", "Working Set").await.unwrap_err();
    assert!(matches!(err, ClientError::Closed { request: "add" }), "{err}");
    within("the end of the session", async { while session.next_sample().await.unwrap().is_some() {} }).await;
    assert!(
        matches!(session.list().await, Err(ClientError::Closed { .. })),
        "requests on a closed session fail at once"
    );
    let again = accept(&inspector).await;
    assert_eq!(again.hello().headers.len(), 2, "a fresh Hello after reconnecting");
    shutdown.cancel();
}

#[tokio::test]
async fn remove_all() {
    let (inspector, _overrides, _agent, shutdown) = start(TWO, |_| {}).await;
    let mut session = accept(&inspector).await;
    sample_where(&mut session, "a sample", |_| true).await;
    assert_eq!(session.remove(-1).await.unwrap(), Status::Ok);
    let AddResponse::Ok(h) = session.add("Mono JIT", "Compiled methods").await.unwrap() else { panic!() };
    assert_eq!(h.index, 2, "indexes are not reused after remove-all");
    let update = sample_where(&mut session, "the added counter", |u| u.changed.contains(&2)).await;
    assert_eq!(update.table.len(), 1, "every earlier counter removed");
    shutdown.cancel();
}

#[tokio::test]
async fn good_bye_closes_the_connection() {
    let (inspector, _overrides, agent, _shutdown) = start(TWO, |c| c.reconnect = false).await;
    let mut session = accept(&inspector).await;
    session.goodbye().await.unwrap();
    within("the agent to close", async { while session.next_sample().await.unwrap().is_some() {} }).await;
    within("the agent to stop", agent).await.unwrap();
}

#[tokio::test]
async fn agent_reconnects_when_the_inspector_goes_away() {
    let (inspector, _overrides, _agent, shutdown) = start(TWO, |_| {}).await;
    let mut first = accept(&inspector).await;
    sample_where(&mut first, "a sample", |_| true).await;
    drop(first);
    let mut second = accept(&inspector).await;
    assert_eq!(second.hello().headers.len(), 2);
    sample_where(&mut second, "a sample on the new connection", |_| true).await;
    shutdown.cancel();
}

#[tokio::test]
async fn agent_retries_until_the_inspector_listens() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let shutdown = Shutdown::new();
    let agent = tokio::spawn(mono_agent_sim::run(config(addr, TWO), shutdown.clone()));
    // Nothing listens yet: the agent gets "connection refused" and retries with backoff.
    tokio::task::yield_now().await;
    let inspector = Inspector::bind(addr, ClientConfig::default()).await.unwrap();
    accept(&inspector).await;
    shutdown.cancel();
    within("the agent to stop", agent).await.unwrap().unwrap();
}

#[tokio::test]
async fn unknown_command_bytes_are_ignored_and_garbage_causes_a_reconnect() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = Shutdown::new();
    let _agent =
        tokio::spawn(mono_agent_sim::run(config(listener.local_addr().unwrap(), TWO), shutdown.clone()));

    let (stream, _) = within("a connection", listener.accept()).await.unwrap();
    let mut framed = Framed::new(stream, InspectorCodec::default());
    assert!(matches!(framed.next().await, Some(Ok(AgentMessage::Hello(_)))));
    framed.send(InspectorMessage::Unknown(5)).await.unwrap();
    framed.send(InspectorMessage::Remove(0)).await.unwrap();
    let answer = within("the remove response", async {
        loop {
            match framed.next().await.unwrap().unwrap() {
                AgentMessage::Sampling(_) => continue,
                other => return other,
            }
        }
    })
    .await;
    assert_eq!(answer, AgentMessage::Remove(Status::Ok), "the command after the unknown byte still works");

    // An Add whose category length is -2: the agent gives up on this connection and reconnects.
    framed.get_mut().try_write(&[0x01, 0xfe, 0xff, 0xff, 0xff]).unwrap();
    within("the agent to hang up", async { while let Some(Ok(_)) = framed.next().await {} }).await;
    let (stream, _) = within("a new connection", listener.accept()).await.unwrap();
    let mut framed = Framed::new(stream, InspectorCodec::default());
    assert!(matches!(framed.next().await, Some(Ok(AgentMessage::Hello(_)))));
    shutdown.cancel();
}

#[tokio::test]
async fn serve_connection_reports_how_it_ended() {
    let (inspector_side, agent_side) = tokio::io::duplex(1 << 16);
    let mut config = config("127.0.0.1:1".parse().unwrap(), TWO);
    config.duplicate_add = DuplicateAdd::DropConnection;
    let agent = tokio::spawn(async move {
        mono_agent_sim::serve_connection(agent_side, &config, &Default::default(), Shutdown::new()).await
    });
    let session = Session::start(inspector_side, ClientConfig::default()).await.unwrap();
    assert!(session.add("Mono JIT", "Compiled methods").await.is_err());
    assert_eq!(agent.await.unwrap().unwrap(), SessionEnd::DroppedOnDuplicateAdd);
}

#[tokio::test]
async fn word_size_4_and_gist_opcodes() {
    let inspector = Inspector::bind(
        "127.0.0.1:0",
        ClientConfig { opcodes: RequestOpcodes::Gist, ..ClientConfig::default() },
    )
    .await
    .unwrap();
    let mut config = config(inspector.local_addr().unwrap(), "Mono GC/Heap size");
    config.word_size = 4;
    config.opcodes = RequestOpcodes::Gist;
    let shutdown = Shutdown::new();
    tokio::spawn(mono_agent_sim::run(config, shutdown.clone()));
    let mut session = accept(&inspector).await;
    let update = sample_where(&mut session, "a sample", |_| true).await;
    assert!(matches!(value(&update, 0), Some(CounterValue::Word32(_))));
    assert!(!session.list().await.unwrap().is_empty(), "gist List (1) understood");
    assert_eq!(session.remove(0).await.unwrap(), Status::Ok, "gist Remove (3) understood");
    shutdown.cancel();
}

#[tokio::test]
async fn interval_zero_floods_and_still_answers() {
    let (inspector, overrides, _agent, shutdown) = start(TWO, |c| c.interval = Duration::ZERO).await;
    let mut session = accept(&inspector).await;
    within("a sample", session.next_sample()).await.unwrap().unwrap();
    assert_eq!(session.list().await.unwrap().len(), mono_agent_sim::builtin_counters().len());
    // Samples without values are counted, not queued: the next change still arrives.
    overrides.set("Mono System/Working Set", CounterValue::Long(1234));
    let update = sample_where(&mut session, "the change", |u| !u.changed.is_empty()).await;
    assert_eq!(value(&update, 1), Some(CounterValue::Long(1234)));
    shutdown.cancel();
}

#[tokio::test]
async fn file_mode_writes_hello_and_samples() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.bin");
    std::fs::write(&path, b"old contents that must be truncated away").unwrap();
    let mut config =
        AgentConfig::from_options(&format!("address=file://{},counters={TWO},interval=1", path.display()))
            .unwrap();
    config.values = ValueMode::Fixed;
    config.max_samples = Some(3);
    mono_agent_sim::run(config, Shutdown::new()).await.unwrap();
    let mut file = CounterFile::open(&path, Limits::default()).await.unwrap();
    assert_eq!(file.hello().headers.len(), 2);
    let mut changed = Vec::new();
    while let Some(update) = file.next_sample().await.unwrap() {
        changed.push(update.changed.len());
    }
    assert_eq!(changed, vec![2, 0, 0], "Hello, the first full sample, then unchanged ones");
    // A record cut short at EOF is a truncation error.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let mut file = CounterFile::open(&path, Limits::default()).await.unwrap();
    file.next_sample().await.unwrap().unwrap();
    file.next_sample().await.unwrap().unwrap();
    let err = file.next_sample().await.unwrap_err();
    assert!(matches!(err, ClientError::Decode(DecodeError::Truncated { buffered: 8 })), "{err}");
}
