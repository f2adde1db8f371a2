//! Property tests: round trips of frames and typed messages, and no panics on arbitrary input.

use bytes::BytesMut;
use hmon::*;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::Value;

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 #\\[\\]\"\\\\∧é←⍵]{0,12}"
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(Value::from),
        text().prop_map(Value::String),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map("[a-zA-Z ]{0,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Unknown fields: keys no HMON object knows.
fn extra() -> impl Strategy<Value = Extra> {
    btree_map("X[a-z]{0,5}", json(), 0..3).prop_map(|m| m.into_iter().collect())
}

fn uid() -> impl Strategy<Value = Option<String>> {
    option::of(text())
}

fn id_or_name() -> impl Strategy<Value = IdOrName> {
    prop_oneof![any::<i64>().prop_map(IdOrName::Id), text().prop_map(IdOrName::Name)]
}

fn refs() -> impl Strategy<Value = Option<Vec<IdOrName>>> {
    option::of(vec(id_or_name(), 0..5))
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    (0i64..4_102_444_800_000).prop_map(|ms| Timestamp::from_millis(ms).unwrap())
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (uid(), refs(), extra()).prop_map(|(uid, facts, extra)| Request::GetFacts(GetFacts {
            uid,
            facts,
            extra
        })),
        (uid(), refs(), option::of(any::<i64>()), extra()).prop_map(|(uid, facts, interval, extra)| {
            Request::PollFacts(PollFacts { uid, facts, interval, extra })
        }),
        (uid(), extra()).prop_map(|(uid, extra)| Request::StopFacts(StopFacts { uid, extra })),
        (uid(), extra()).prop_map(|(uid, extra)| Request::BumpFacts(BumpFacts { uid, extra })),
        (uid(), refs(), extra()).prop_map(|(uid, events, extra)| Request::Subscribe(Subscribe {
            uid,
            events,
            extra
        })),
        (uid(), extra())
            .prop_map(|(uid, extra)| Request::GetLastKnownState(GetLastKnownState { uid, extra })),
        (uid(), option::of(json()), option::of(json()), extra()).prop_map(|(uid, address, port, extra)| {
            Request::ConnectRide(ConnectRide { uid, address, port, extra })
        }),
        ("Z[a-zA-Z]{0,8}", extra()).prop_map(|(name, args)| Request::Unknown { name, args }),
    ]
}

fn stack() -> impl Strategy<Value = Vec<StackEntry>> {
    vec(
        (option::of(any::<bool>()), option::of(text()), extra())
            .prop_map(|(restricted, description, extra)| StackEntry { restricted, description, extra }),
        0..4,
    )
}

fn dmx() -> impl Strategy<Value = Option<Option<Box<Dmx>>>> {
    option::of(option::of(
        (option::of(any::<bool>()), option::of(vec(text(), 0..3)), option::of(any::<i64>())).prop_map(
            |(restricted, dm, en)| {
                Box::new(Dmx {
                    restricted,
                    dm,
                    en,
                    os_error: Some(serde_json::json!([0, 0, ""])),
                    ..Default::default()
                })
            },
        ),
    ))
}

fn thread() -> impl Strategy<Value = Thread> {
    (
        option::of(any::<i64>()),
        option::of(stack()),
        option::of(any::<bool>()),
        option::of(text()),
        dmx(),
        extra(),
    )
        .prop_map(|(tid, stack, suspended, state, dmx, extra)| Thread {
            tid,
            stack,
            suspended,
            state,
            flags: Some("Normal".into()),
            dmx,
            exception: Some(None),
            extra,
        })
}

fn fact() -> impl Strategy<Value = Fact> {
    prop_oneof![
        (option::of(any::<i64>()), option::of(any::<i64>()), extra()).prop_map(
            |(total, suspended, extra)| {
                Fact::new(FactValue::ThreadCount(ThreadCount { total, suspended, extra }))
            }
        ),
        vec(thread(), 0..4).prop_map(|t| Fact::new(FactValue::Threads(t))),
        vec(thread(), 0..3).prop_map(|t| Fact::new(FactValue::SuspendedThreads(t))),
        (option::of(text()), option::of(any::<i64>())).prop_map(|(wsid, used)| Fact::new(
            FactValue::Workspace(Workspace { wsid, used, ..Default::default() })
        )),
        (option::of(json()), option::of(any::<bool>())).prop_map(|(desc, unicode)| Fact::new(
            FactValue::Host(Box::new(Host {
                machine: Some(Machine { desc, ..Default::default() }),
                interpreter: Some(Interpreter { is_unicode: unicode, ..Default::default() }),
                ..Default::default()
            }))
        )),
        (7i64..1000, option::of(json()), extra()).prop_map(|(id, value, extra)| Fact {
            id: Some(id),
            name: Some(format!("Future{id}")),
            value: FactValue::Raw { value, values: None },
            extra,
        }),
    ]
}

fn command_error_body() -> impl Strategy<Value = CommandError> {
    (uid(), option::of(text()), extra()).prop_map(|(uid, name, extra)| CommandError { uid, name, extra })
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        (uid(), option::of(any::<i64>()), option::of(vec(fact(), 0..4)), extra())
            .prop_map(|(uid, interval, facts, extra)| Response::Facts(Facts { uid, interval, facts, extra })),
        (uid(), option::of(vec((any::<i64>(), text(), any::<bool>()), 0..5)), extra()).prop_map(
            |(uid, events, extra)| Response::Subscribed(Subscribed {
                uid,
                events: events.map(|e| e
                    .into_iter()
                    .map(|(id, name, on)| EventState {
                        id: Some(id),
                        name: Some(name),
                        value: Some(on),
                        ..Default::default()
                    })
                    .collect()),
                extra,
            })
        ),
        (uid(), 1i64..7, option::of(any::<i64>()), option::of(stack()), dmx(), extra()).prop_map(
            |(uid, id, size, stack, dmx, extra)| Response::Notification(Notification {
                uid,
                event: Some(EventId { id: Some(id), name: Some("E".into()), ..Default::default() }),
                size,
                tid: Some(0),
                stack,
                dmx,
                exception: None,
                extra,
            })
        ),
        (
            uid(),
            option::of(timestamp()),
            option::of((any::<i64>(), timestamp())),
            option::of(timestamp()),
            extra()
        )
            .prop_map(|(uid, ts, activity, ws_full, extra)| Response::LastKnownState(
                LastKnownState {
                    uid,
                    ts,
                    activity: activity.map(|(code, ts)| Activity {
                        code: Some(code),
                        ts: Some(ts),
                        ..Default::default()
                    }),
                    location: Some(Location {
                        function: Some("#.f".into()),
                        line: Some(2),
                        ts,
                        ..Default::default()
                    }),
                    ws_full: ws_full.map(|ts| WsFull { ts: Some(ts), ..Default::default() }),
                    extra,
                }
            )),
        (uid(), option::of(any::<bool>()), option::of(any::<bool>()), option::of(any::<i64>()), extra())
            .prop_map(|(uid, restricted, connect, status, extra)| Response::RideConnection(RideConnection {
                uid,
                restricted,
                connect,
                status,
                extra
            })),
        (uid(), option::of(text()), extra())
            .prop_map(|(uid, message, extra)| Response::UserMessage(UserMessage { uid, message, extra })),
        (uid(), extra()).prop_map(|(uid, extra)| Response::InvalidSyntax(InvalidSyntax { uid, extra })),
        command_error_body().prop_map(Response::DisallowedUid),
        command_error_body().prop_map(Response::UnknownCommand),
        command_error_body().prop_map(Response::MalformedCommand),
        ("Z[a-zA-Z]{0,8}", extra()).prop_map(|(name, args)| Response::Unknown { name, args }),
    ]
}

fn handshake() -> impl Strategy<Value = Handshake> {
    prop_oneof![
        vec(any::<u32>(), 1..5).prop_map(Handshake::SupportedProtocols),
        any::<u32>().prop_map(Handshake::UsingProtocol),
    ]
}

fn round_trip<M: Message>(payload: Payload<M>) {
    let mut buf = BytesMut::new();
    encode_payload(&payload, &mut buf).unwrap();
    let frame = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().expect("a whole frame");
    assert!(buf.is_empty());
    assert_eq!(decode_payload::<M>(&frame).unwrap(), payload);
}

proptest! {
    #[test]
    fn requests_round_trip(r in request()) {
        round_trip(Payload::Message(r));
    }

    #[test]
    fn responses_round_trip(r in response()) {
        round_trip(Payload::Message(r));
    }

    #[test]
    fn handshakes_round_trip(h in handshake()) {
        round_trip::<Request>(Payload::Handshake(h.clone()));
        round_trip::<Response>(Payload::Handshake(h));
    }

    #[test]
    fn frames_round_trip_at_any_split(payloads in vec(vec(any::<u8>(), 1..64), 1..6), cuts in vec(any::<usize>(), 0..6)) {
        let mut wire = Vec::new();
        for p in &payloads {
            let mut buf = BytesMut::new();
            encode_frame(p, &mut buf).unwrap();
            wire.extend_from_slice(&buf);
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(wire.len());
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut from = 0;
        for cut in cuts {
            buf.extend_from_slice(&wire[from..cut]);
            from = cut;
            while let Some(frame) = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap() {
                got.push(frame.to_vec());
            }
        }
        prop_assert_eq!(got, payloads);
    }
}
