//! The inspector session against a scripted agent on an in-memory pipe, on a paused clock.

use std::time::Duration;

use bytes::BytesMut;
use mono_counters::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

fn header(index: i16, name: &str, kind: CounterType) -> Header {
    Header {
        category: Category::Gc,
        name: name.into(),
        kind,
        unit: Unit::None,
        variance: Variance::Variable,
        index,
    }
}

fn bytes(msgs: &[AgentMessage]) -> Vec<u8> {
    let mut out = BytesMut::new();
    msgs.iter().for_each(|m| encode_agent_message(m, &mut out).unwrap());
    out.to_vec()
}

fn sample(timestamp: i64, values: &[(i16, CounterValue)]) -> AgentMessage {
    AgentMessage::Sampling(Sample {
        timestamp,
        values: values.iter().map(|&(index, v)| SampleValue { index, data: v.into() }).collect(),
    })
}

async fn started(config: ClientConfig) -> (Session, DuplexStream) {
    let (inspector_side, mut agent) = tokio::io::duplex(1 << 16);
    let hello = Hello { version: 1, headers: vec![header(0, "a", CounterType::Int)] };
    agent.write_all(&bytes(&[AgentMessage::Hello(hello)])).await.unwrap();
    (Session::start(inspector_side, config).await.unwrap(), agent)
}

async fn expect_request(agent: &mut DuplexStream, expected: &[u8]) {
    let mut got = vec![0; expected.len()];
    agent.read_exact(&mut got).await.unwrap();
    assert_eq!(got, expected);
}

#[tokio::test(start_paused = true)]
async fn responses_match_requests_fifo_per_kind_between_samples() {
    let (mut session, mut agent) = started(ClientConfig::default()).await;
    let handle = session.handle();
    let adds = tokio::spawn(async move {
        tokio::join!(handle.add("Mono GC", "b"), handle.remove(0), handle.add("Mono GC", "c"),)
    });
    // Requests hit the wire in call order: Add b, Remove 0, Add c (join! polls in order).
    let mut req = BytesMut::new();
    encode_inspector_message(
        &InspectorMessage::Add(CounterName::new("Mono GC", "b")),
        RequestOpcodes::Agent,
        &mut req,
    )
    .unwrap();
    encode_inspector_message(&InspectorMessage::Remove(0), RequestOpcodes::Agent, &mut req).unwrap();
    encode_inspector_message(
        &InspectorMessage::Add(CounterName::new("Mono GC", "c")),
        RequestOpcodes::Agent,
        &mut req,
    )
    .unwrap();
    expect_request(&mut agent, &req).await;
    agent
        .write_all(&bytes(&[
            sample(1, &[(0, CounterValue::Int(5))]),
            AgentMessage::Add(AddResponse::Ok(header(1, "b", CounterType::Long))),
            sample(2, &[(1, CounterValue::Long(7))]),
            AgentMessage::Add(AddResponse::NotFound),
            AgentMessage::Remove(Status::Ok),
            sample(3, &[]),
            sample(4, &[(1, CounterValue::Long(8))]),
        ]))
        .await
        .unwrap();
    let (b, removed, c) = adds.await.unwrap();
    assert_eq!(b.unwrap(), AddResponse::Ok(header(1, "b", CounterType::Long)));
    assert_eq!(c.unwrap(), AddResponse::NotFound, "the second add gets the second add response");
    assert_eq!(removed.unwrap(), Status::Ok);

    let first = session.next_sample().await.unwrap().unwrap();
    assert_eq!((first.timestamp, first.changed.clone()), (1, vec![0]));
    let second = session.next_sample().await.unwrap().unwrap();
    assert_eq!(second.changed, vec![1]);
    assert_eq!(second.table.len(), 2);
    let third = session.next_sample().await.unwrap().unwrap();
    assert_eq!(third.table.len(), 1, "index 0 removed");
    assert_eq!(third.table.get(1).unwrap().value, Some(CounterValue::Long(8).into()));
    assert_eq!((third.timestamp, third.empty), (4, 1), "the empty sample is counted, not queued");
    // The earlier snapshots were not changed by later samples.
    assert_eq!(first.table.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_times_out_and_a_late_answer_keeps_its_slot() {
    let config = ClientConfig { request_timeout: Duration::from_secs(2), ..ClientConfig::default() };
    let (session, mut agent) = started(config).await;
    let err = session.list().await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { request: "list", .. }), "{err}");
    expect_request(&mut agent, &[0]).await;
    // The late answer to the first list, then the answer to the second.
    let late = AgentMessage::List(vec![CounterName::new("Mono JIT", "late")]);
    let fresh = AgentMessage::List(vec![CounterName::new("Mono JIT", "fresh")]);
    let handle = session.handle();
    let second = tokio::spawn(async move { handle.list().await });
    expect_request(&mut agent, &[0]).await;
    agent.write_all(&bytes(&[late, fresh])).await.unwrap();
    assert_eq!(second.await.unwrap().unwrap(), vec![CounterName::new("Mono JIT", "fresh")]);
}

#[tokio::test(start_paused = true)]
async fn eof_fails_pending_requests_and_ends_the_samples() {
    let (mut session, mut agent) = started(ClientConfig::default()).await;
    let handle = session.handle();
    let pending = tokio::spawn(async move { handle.add("Mono GC", "a").await });
    expect_request(&mut agent, &[1, 7, 0, 0, 0, b'M', b'o', b'n', b'o', b' ', b'G', b'C', 1, 0, 0, 0, b'a'])
        .await;
    drop(agent);
    assert!(matches!(pending.await.unwrap(), Err(ClientError::Closed { request: "add" })));
    assert!(session.next_sample().await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_decode_error_ends_the_session_with_that_error() {
    let (mut session, mut agent) = started(ClientConfig::default()).await;
    agent.write_all(&[9]).await.unwrap();
    let err = session.next_sample().await.unwrap_err();
    assert!(matches!(err, ClientError::Decode(DecodeError::UnknownAgentOpcode(9))), "{err}");
    assert!(session.next_sample().await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn the_first_message_must_be_hello() {
    let (inspector_side, mut agent) = tokio::io::duplex(1024);
    agent.write_all(&bytes(&[AgentMessage::Remove(Status::Ok)])).await.unwrap();
    let err = Session::start(inspector_side, ClientConfig::default()).await.unwrap_err();
    assert!(matches!(err, ClientError::ExpectedHello("remove response")), "{err}");
    let (inspector_side, _silent) = tokio::io::duplex(1024);
    let err = Session::start(inspector_side, ClientConfig::default()).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { request: "hello", .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_consumer_gets_merged_samples_and_the_state() {
    let config = ClientConfig { sample_queue: 2, ..ClientConfig::default() };
    let (mut session, mut agent) = started(config).await;
    let mut msgs: Vec<_> = (0..10).map(|n| sample(n, &[(0, CounterValue::Int(n as i32))])).collect();
    msgs.push(AgentMessage::List(vec![]));
    let list = {
        let handle = session.handle();
        tokio::spawn(async move { handle.list().await })
    };
    expect_request(&mut agent, &[0]).await;
    agent.write_all(&bytes(&msgs)).await.unwrap();
    // The list answer behind ten unread samples still arrives.
    assert_eq!(list.await.unwrap().unwrap(), vec![]);
    let a = session.next_sample().await.unwrap().unwrap();
    let b = session.next_sample().await.unwrap().unwrap();
    assert_eq!((a.timestamp, b.timestamp), (0, 1));
    // The other eight were merged into one update, queued as soon as there was room.
    let c = session.next_sample().await.unwrap().unwrap();
    assert_eq!((c.timestamp, c.missed, c.changed.clone()), (9, 7, vec![0]));
    assert_eq!(
        c.table.get(0).unwrap().value,
        Some(CounterValue::Int(9).into()),
        "state includes merged samples"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_the_agent_never_reads_times_out() {
    let (inspector_side, mut agent) = tokio::io::duplex(64);
    let hello = Hello { version: 1, headers: vec![] };
    agent.write_all(&bytes(&[AgentMessage::Hello(hello)])).await.unwrap();
    let config = ClientConfig { request_timeout: Duration::from_secs(1), ..ClientConfig::default() };
    let session = Session::start(inspector_side, config).await.unwrap();
    let long = "x".repeat(500);
    let err = session.add("Mono GC", long).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { request: "add", .. }), "{err}");
}

/// Issue 18's burst: five samples with values, 1,250 empty samples before each of the last four,
/// written 64 messages at a time. Returns the writes.
fn burst() -> Vec<Vec<u8>> {
    let mut msgs = vec![sample(1, &[(0, CounterValue::Int(100))])];
    for v in 1..5 {
        msgs.extend((0..1250).map(|t| sample(10 * v + t, &[])));
        msgs.push(sample(10 * v + 5000, &[(0, CounterValue::Int(100 + v as i32))]));
    }
    msgs.chunks(64).map(bytes).collect()
}

/// Writes the whole burst while the consumer reads nothing, then closes.
async fn send_burst(mut agent: DuplexStream) {
    for w in burst() {
        agent.write_all(&w).await.unwrap();
    }
    agent.shutdown().await.unwrap();
}

fn value(update: &SampleUpdate) -> Option<CounterValue> {
    update.table.readings().next().and_then(|r| match &r.value {
        Some(ValueData::Typed(v)) => Some(*v),
        _ => None,
    })
}

#[tokio::test]
async fn a_burst_of_empty_samples_loses_no_sample_with_values() {
    let (mut session, agent) = started(ClientConfig::default()).await;
    send_burst(agent).await;
    let mut updates = Vec::new();
    while let Some(u) = session.next_sample().await.unwrap() {
        updates.push(u);
    }
    let values: Vec<_> = updates.iter().map(value).collect();
    let want: Vec<_> = (0..5).map(|v| Some(CounterValue::Int(100 + v))).collect();
    assert_eq!(values, want, "every sample with a value is a row, in order");
    let empties: Vec<u64> = updates.iter().map(|u| u.empty).collect();
    assert_eq!(empties, [0, 1250, 1250, 1250, 1250], "empty samples are counted, not queued");
    assert!(updates.iter().all(|u| u.missed == 0 && u.changed == [0]));
}

#[tokio::test]
async fn a_consumer_behind_gets_merged_updates_and_the_final_state() {
    let config = ClientConfig { sample_queue: 2, ..ClientConfig::default() };
    let (mut session, agent) = started(config).await;
    send_burst(agent).await;
    let mut updates = Vec::new();
    while let Some(u) = session.next_sample().await.unwrap() {
        updates.push(u);
    }
    // Two fit in the queue; the other three are merged into one held update, queued at the end.
    let rows: u64 = updates.iter().map(|u| 1 + u.missed).sum();
    let empty: u64 = updates.iter().map(|u| u.empty).sum();
    assert_eq!((rows, empty), (5, 5000), "{updates:?}");
    assert_eq!(value(updates.last().unwrap()), Some(CounterValue::Int(104)), "the last value is never lost");
    assert!(updates.len() < 5);
}
