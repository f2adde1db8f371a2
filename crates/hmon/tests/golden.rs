//! Every wire example of the spec and the notes, as a named test.

use bytes::BytesMut;
use hmon::*;
use serde_json::{json, Value};

const HANDSHAKE_SUPPORTED: &[u8] = &[
    0x00, 0x00, 0x00, 0x1C, 0x48, 0x4D, 0x4F, 0x4E, 0x53, 0x75, 0x70, 0x70, 0x6F, 0x72, 0x74, 0x65, 0x64,
    0x50, 0x72, 0x6F, 0x74, 0x6F, 0x63, 0x6F, 0x6C, 0x73, 0x3D, 0x32,
];
const HANDSHAKE_USING: &[u8] = &[
    0x00, 0x00, 0x00, 0x17, 0x48, 0x4D, 0x4F, 0x4E, 0x55, 0x73, 0x69, 0x6E, 0x67, 0x50, 0x72, 0x6F, 0x74,
    0x6F, 0x63, 0x6F, 0x6C, 0x3D, 0x32,
];
const STOP_FACTS_FRAME: &[u8] = &[
    0x00, 0x00, 0x00, 0x18, 0x48, 0x4D, 0x4F, 0x4E, 0x5B, 0x22, 0x53, 0x74, 0x6F, 0x70, 0x46, 0x61, 0x63,
    0x74, 0x73, 0x22, 0x2C, 0x7B, 0x7D, 0x5D,
];

fn request(line: &str) -> Request {
    let decoded: Request = decode_message(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_json_equivalent(&decoded, line);
    decoded
}

fn response(line: &str) -> Response {
    let decoded: Response = decode_message(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_json_equivalent(&decoded, line);
    decoded
}

/// Re-encoding gives the same JSON value, and decoding that gives the same message.
fn assert_json_equivalent<M: Message>(decoded: &M, line: &str) {
    let encoded = serde_json::to_vec(decoded).unwrap();
    let a: Value = serde_json::from_slice(&encoded).unwrap();
    let b: Value = serde_json::from_str(line).unwrap();
    assert_eq!(a, b, "{line}");
    assert_eq!(&decode_message::<M>(&encoded).unwrap(), decoded);
}

fn frame_of(payload: &Payload<Request>) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode_payload(payload, &mut buf).unwrap();
    buf.to_vec()
}

fn decode_one<M: Message>(bytes: &[u8]) -> Payload<M> {
    let mut buf = BytesMut::from(bytes);
    let payload = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().unwrap();
    assert!(buf.is_empty());
    decode_payload(&payload).unwrap()
}

// ---- frames, byte for byte, both directions

#[test]
fn handshake_supported_protocols_frame() {
    assert_eq!(frame_of(&Payload::Handshake(Handshake::supported())), HANDSHAKE_SUPPORTED);
    assert_eq!(
        decode_one::<Response>(HANDSHAKE_SUPPORTED),
        Payload::Handshake(Handshake::SupportedProtocols(vec![2]))
    );
    assert_eq!(
        decode_one::<Request>(HANDSHAKE_SUPPORTED),
        Payload::Handshake(Handshake::SupportedProtocols(vec![2]))
    );
}

#[test]
fn handshake_using_protocol_frame() {
    assert_eq!(frame_of(&Payload::Handshake(Handshake::using())), HANDSHAKE_USING);
    assert_eq!(decode_one::<Response>(HANDSHAKE_USING), Payload::Handshake(Handshake::UsingProtocol(2)));
}

#[test]
fn stop_facts_frame() {
    assert_eq!(frame_of(&Payload::Message(Request::StopFacts(StopFacts::default()))), STOP_FACTS_FRAME);
    assert_eq!(
        decode_one::<Request>(STOP_FACTS_FRAME),
        Payload::Message(Request::StopFacts(StopFacts::default()))
    );
}

#[test]
fn spec_framing_diagram_length_is_big_endian_total() {
    // The diagram's 0x0000000B: 8 + a 3-byte payload.
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x0BHMON[1]"[..]);
    assert_eq!(&decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().unwrap()[..], b"[1]");
}

#[test]
fn handshake_supported_list_with_several_versions() {
    let mut buf = BytesMut::new();
    encode_frame(b"SupportedProtocols=1,2", &mut buf).unwrap();
    assert_eq!(decode_one::<Response>(&buf), Payload::Handshake(Handshake::SupportedProtocols(vec![1, 2])));
}

// ---- requests

#[test]
fn request_get_facts_by_name() {
    let Request::GetFacts(r) = request(r##"["GetFacts",{"Facts":["Host","Workspace"]}]"##) else { panic!() };
    let kinds: Vec<_> = r.facts.unwrap().iter().map(FactKind::resolve).collect();
    assert_eq!(kinds, [Some(FactKind::Host), Some(FactKind::Workspace)]);
}

#[test]
fn request_get_facts_by_id() {
    let Request::GetFacts(r) = request(r##"["GetFacts",{"Facts":[1,3]}]"##) else { panic!() };
    assert_eq!(r.facts.unwrap(), [IdOrName::Id(1), IdOrName::Id(3)]);
}

#[test]
fn request_get_facts_mixed() {
    let Request::GetFacts(r) = request(r##"["GetFacts",{"Facts":["Host",3]}]"##) else { panic!() };
    assert_eq!(r.facts.unwrap(), [IdOrName::Name("Host".into()), IdOrName::Id(3)]);
}

#[test]
fn request_poll_facts() {
    let Request::PollFacts(r) = request(r##"["PollFacts",{"Facts":[1,"Workspace"],"Interval":750}]"##) else {
        panic!()
    };
    assert_eq!(r.interval, Some(750));
    assert_eq!(r.facts.unwrap().len(), 2);
}

#[test]
fn request_stop_facts() {
    assert_eq!(request(r##"["StopFacts",{}]"##), Request::StopFacts(StopFacts::default()));
}

#[test]
fn request_bump_facts() {
    assert_eq!(request(r##"["BumpFacts",{}]"##), Request::BumpFacts(BumpFacts::default()));
}

#[test]
fn request_subscribe() {
    let Request::Subscribe(r) = request(r##"["Subscribe",{"UID":"XX","Events":[1,4]}]"##) else { panic!() };
    assert_eq!(r.uid.as_deref(), Some("XX"));
    let kinds: Vec<_> = r.events.unwrap().iter().map(EventKind::resolve).collect();
    assert_eq!(kinds, [Some(EventKind::WorkspaceCompaction), Some(EventKind::TrappedSignal)]);
}

#[test]
fn request_get_last_known_state() {
    assert_eq!(request(r##"["GetLastKnownState",{}]"##), Request::GetLastKnownState(Default::default()));
}

#[test]
fn request_get_last_known_state_with_uid() {
    let r = request(r##"["GetLastKnownState",{"UID":"123"}]"##);
    assert_eq!(r.uid(), Some("123"));
}

#[test]
fn request_connect_ride_20() {
    let Request::ConnectRide(r) = request(r##"["ConnectRide",{"Address":"localhost","Port":4502}]"##) else {
        panic!()
    };
    assert_eq!((r.address, r.port), (Some(json!("localhost")), Some(json!(4502))));
}

#[test]
fn request_pre_release_get_last_known_state_with_id_keeps_the_unknown_field() {
    let Request::GetLastKnownState(r) = request(r##"["GetLastKnownState",{"id":"12345"}]"##) else {
        panic!()
    };
    assert_eq!(r.extra["id"], json!("12345"));
}

#[test]
fn request_spec_generic_message_shape_is_an_unknown_message() {
    let line = r##"["MessageName",{"key1":"value1","key2":222,"key3":[3,4,5]}]"##;
    let Request::Unknown { name, args } = request(line) else { panic!() };
    assert_eq!(name, "MessageName");
    assert_eq!(args["key3"], json!([3, 4, 5]));
    let Response::Unknown { name, .. } = response(line) else { panic!() };
    assert_eq!(name, "MessageName");
}

#[test]
fn request_hatstand_is_unknown_with_uid() {
    let r = request(r##"["Hatstand",{"UID":"ABC"}]"##);
    assert_eq!((r.name(), r.uid()), ("Hatstand", Some("ABC")));
}

// ---- responses

#[test]
fn response_facts_thread_count_polling() {
    let Response::Facts(f) = response(
        r##"["Facts",{"UID":"xx","Interval":5000,"Facts":[{"ID":6,"Name":"ThreadCount","Value":{"Total":1,"Suspended":0}}]}]"##,
    ) else {
        panic!()
    };
    assert_eq!((f.uid.as_deref(), f.interval), (Some("xx"), Some(5000)));
    let facts = f.facts.unwrap();
    assert_eq!(facts[0].kind(), Some(FactKind::ThreadCount));
    assert_eq!(
        facts[0].value,
        FactValue::ThreadCount(ThreadCount { total: Some(1), suspended: Some(0), ..Default::default() })
    );
}

#[test]
fn response_subscribed_with_restored_bracket() {
    let Response::Subscribed(s) = response(
        r##"["Subscribed",{"UID":"XX","Events":[{"ID":1,"Name":"WorkspaceCompaction","Value":1},{"ID":2,"Name":"WorkspaceResize","Value":0}]}]"##,
    ) else {
        panic!()
    };
    let events = s.events.unwrap();
    assert_eq!(events[0].value, Some(true));
    assert_eq!(events[1].value, Some(false));
}

#[test]
fn response_spec_subscribed_example_missing_bracket_is_invalid_syntax() {
    // Verbatim from the spec, which lacks the closing `]`.
    let line = r##"["Subscribed",{"UID":"XX","Events":[{"ID":1,"Name":"WorkspaceCompaction","Value":1},{"ID":2,"Name":"WorkspaceResize","Value":0}]}"##;
    let err = decode_message::<Response>(line.as_bytes()).unwrap_err();
    let PayloadError::InvalidSyntax { reason } = &err else { panic!("{err:?}") };
    assert!(reason.contains("EOF"), "the error says the input ended early: {reason}");
    assert!(err.to_string().starts_with("invalid syntax"), "{err}");
    // Through the framing too: the frame is fine, its payload is not.
    let mut buf = BytesMut::new();
    encode_frame(line.as_bytes(), &mut buf).unwrap();
    let payload = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().unwrap();
    assert!(matches!(decode_payload::<Response>(&payload), Err(PayloadError::InvalidSyntax { .. })));
}

#[test]
fn response_notification_details_beside_event() {
    let Response::Notification(n) = response(
        r##"["Notification",{"UID":"XX","Event":{"ID":2,"Name":"WorkspaceResize"},"Size":894213}]"##,
    ) else {
        panic!()
    };
    assert_eq!(n.event.unwrap().id, Some(EventKind::WorkspaceResize.id()));
    assert_eq!(n.size, Some(894213));
}

#[test]
fn response_last_known_state_ts_only() {
    let Response::LastKnownState(s) = response(r##"["LastKnownState",{"TS":"20230111T144700.132Z"}]"##)
    else {
        panic!()
    };
    assert_eq!(s.ts.unwrap().to_string(), "20230111T144700.132Z");
    assert!(s.activity.is_none() && s.location.is_none() && s.ws_full.is_none());
}

#[test]
fn response_last_known_state_full() {
    let Response::LastKnownState(s) = response(
        r##"["LastKnownState",{"UID":"123","TS":"20230111T144700.132Z","Activity":{"Code":1,"TS":"20230111T144700.132Z"},"Location":{"Function":"#.f","Line":2,"TS":"20230111T144700.132Z"},"WS FULL":{"TS":"20230111T144620.723Z"}}]"##,
    ) else {
        panic!()
    };
    assert_eq!(s.activity.unwrap().code, Some(1));
    let location = s.location.unwrap();
    assert_eq!((location.function.as_deref(), location.line), (Some("#.f"), Some(2)));
    assert_eq!(s.ws_full.unwrap().ts.unwrap().to_string(), "20230111T144620.723Z");
}

#[test]
fn response_last_known_state_timestamp_without_z() {
    let Response::LastKnownState(s) =
        decode_message::<Response>(br##"["LastKnownState",{"TS":"20231231T235959.999"}]"##).unwrap()
    else {
        panic!()
    };
    assert_eq!(s.ts.unwrap().to_string(), "20231231T235959.999Z");
}

#[test]
fn response_ride_connection_20() {
    let Response::RideConnection(r) =
        response(r##"["RideConnection",{"UID":"myuid","Restricted":0,"Connect":1,"Status":0}]"##)
    else {
        panic!()
    };
    assert_eq!((r.restricted, r.connect, r.status), (Some(false), Some(true), Some(0)));
}

#[test]
fn response_invalid_syntax() {
    assert_eq!(response(r##"["InvalidSyntax",{}]"##), Response::InvalidSyntax(Default::default()));
}

#[test]
fn response_disallowed_uid() {
    let r = response(r##"["DisallowedUID",{"UID":"xx","Name":"StopFacts"}]"##);
    assert_eq!(r, Response::DisallowedUid(command_error("StopFacts", Some("xx".into()))));
}

#[test]
fn response_unknown_command() {
    let r = response(r##"["UnknownCommand",{"UID":"ABC","Name":"Hatstand"}]"##);
    assert_eq!(r, Response::UnknownCommand(command_error("Hatstand", Some("ABC".into()))));
    assert!(r.is_error());
}

#[test]
fn response_malformed_command() {
    let r = response(r##"["MalformedCommand",{"Name":"GetLastKnownState"}]"##);
    assert_eq!(r, Response::MalformedCommand(command_error("GetLastKnownState", None)));
}

#[test]
fn response_user_message() {
    let Response::UserMessage(m) = response(r##"["UserMessage",{"UID":"123","Message":"Hello"}]"##) else {
        panic!()
    };
    assert_eq!((m.uid.as_deref(), m.message.as_deref()), (Some("123"), Some("Hello")));
}

#[test]
fn response_unknown_name_is_kept() {
    let Response::Unknown { name, args } = response(r##"["ThreadSwitched",{"UID":"1","Tid":4}]"##) else {
        panic!()
    };
    assert_eq!((name.as_str(), &args["Tid"]), ("ThreadSwitched", &json!(4)));
}

// ---- payloads the interpreter answers with InvalidSyntax or MalformedCommand

#[test]
fn invalid_syntax_payloads() {
    for bad in [
        "{}",
        "[]",
        r##"["X"]"##,
        "[1,{}]",
        r##"["X",[]]"##,
        "not json",
        r##"["GetLastKnownState"]"##,
        r##"["X",{},1]"##,
    ] {
        let err = decode_message::<Request>(bad.as_bytes()).unwrap_err();
        assert!(matches!(err, PayloadError::InvalidSyntax { .. }), "{bad}: {err:?}");
    }
}

#[test]
fn numeric_uid_is_malformed() {
    let err = decode_message::<Request>(br##"["GetFacts",{"UID":5,"Facts":[1]}]"##).unwrap_err();
    assert_eq!(
        err,
        PayloadError::Malformed {
            name: "GetFacts".into(),
            uid: None,
            reason: match &err {
                PayloadError::Malformed { reason, .. } => reason.clone(),
                _ => unreachable!(),
            }
        }
    );
}

#[test]
fn bad_fact_reference_type_keeps_the_uid() {
    let err = decode_message::<Request>(br##"["GetFacts",{"UID":"u","Facts":[null]}]"##).unwrap_err();
    assert!(
        matches!(err, PayloadError::Malformed { ref name, uid: Some(ref u), .. } if name == "GetFacts" && u == "u")
    );
}

// ---- fact shapes from the notes

#[test]
fn fact_host_20_with_desc_object_session_uuid_and_ride_listening_only() {
    let line = r##"["Facts",{"UID":"h","Facts":[{"ID":1,"Name":"Host","Value":{
        "Machine":{"Name":"box","User":"apl","PID":4242,"Desc":{"App":"x","N":[1,2]},"AccessLevel":3},
        "Interpreter":{"Version":"20.0.51234","BitWidth":64,"IsUnicode":1,"IsRuntime":false,"SessionUUID":"3b241101-e2bb-4255-8caf-4136c566a962"},
        "CommsLayer":{"Version":"3.5","Address":"127.0.0.1","Port4":4512,"Port6":0},
        "RIDE":{"Listening":0}}}]}]"##;
    let Response::Facts(f) = decode_message::<Response>(line.as_bytes()).unwrap() else { panic!() };
    let FactValue::Host(host) = &f.facts.unwrap()[0].value else { panic!() };
    let machine = host.machine.as_ref().unwrap();
    assert_eq!(machine.desc, Some(json!({"App": "x", "N": [1, 2]})));
    let interpreter = host.interpreter.as_ref().unwrap();
    assert_eq!((interpreter.is_unicode, interpreter.is_runtime), (Some(true), Some(false)));
    assert!(interpreter.session_uuid.is_some());
    let ride = host.ride.as_ref().unwrap();
    assert_eq!((ride.listening, ride.port4), (Some(false), None));
}

#[test]
fn fact_threads_with_suspended_thread_null_exception_and_restricted_stack() {
    let line = r##"["Facts",{"Facts":[{"ID":4,"Name":"Threads","Values":[
        {"Tid":0,"Stack":[{"Restricted":0,"Description":"#.f[2]"}],"Suspended":0,"State":"Session","Flags":"Normal"},
        {"Tid":1,"Stack":[{"Restricted":1}],"Suspended":1,"State":"x","Flags":"Paused",
         "DMX":{"Restricted":0,"Category":"Domain","DM":["DOMAIN ERROR","f[2] 1÷0","     ∧"],"EM":"DOMAIN ERROR","EN":11,"ENX":0,
                "InternalLocation":["arith.c",1234],"Vendor":"Dyalog","Message":"","OSError":[0,0,""]},
         "Exception":null}]}]}]"##;
    let Response::Facts(f) = decode_message::<Response>(line.as_bytes()).unwrap() else { panic!() };
    let FactValue::Threads(threads) = &f.facts.as_ref().unwrap()[0].value else { panic!() };
    assert_eq!(threads[0].stack.as_ref().unwrap()[0].description.as_deref(), Some("#.f[2]"));
    assert_eq!(threads[1].stack.as_ref().unwrap()[0].restricted, Some(true));
    assert_eq!(threads[1].suspended, Some(true));
    assert_eq!(threads[1].dmx.as_ref().unwrap().as_ref().unwrap().en, Some(11));
    assert_eq!(threads[1].exception, Some(None), "null is kept apart from absent");
    assert_json_equivalent(&Response::Facts(f), line);
}

#[test]
fn fact_suspended_threads_workspace_account_information() {
    let line = r##"["Facts",{"Facts":[
        {"ID":5,"Name":"SuspendedThreads","Values":[{"Tid":1,"Stack":[],"State":"x","Flags":"Normal","DMX":null,"Exception":{"Restricted":1}}]},
        {"ID":3,"Name":"Workspace","Value":{"WSID":"CLEAR WS","Available":1,"Used":2,"Compactions":3,"GarbageCollections":4,"GarbagePockets":5,"FreePockets":6,"UsedPockets":7,"Sediment":8,"Allocation":9,"AllocationHWM":10,"TrapReserveWanted":11,"TrapReserveActual":12}},
        {"ID":2,"Name":"AccountInformation","Value":{"UserIdentification":1001,"ComputeTime":10,"ConnectTime":20,"KeyingTime":0}}]}]"##;
    let Response::Facts(f) = response(line) else { panic!() };
    let facts = f.facts.unwrap();
    assert!(matches!(&facts[0].value, FactValue::SuspendedThreads(t) if t[0].suspended.is_none()));
    assert!(matches!(&facts[1].value, FactValue::Workspace(w) if w.trap_reserve_actual == Some(12)));
    assert!(
        matches!(&facts[2].value, FactValue::AccountInformation(a) if a.user_identification == Some(1001))
    );
}

#[test]
fn fact_by_name_only_and_unknown_fact_id() {
    let Response::Facts(f) = response(
        r##"["Facts",{"Facts":[{"Name":"ThreadCount","Value":{"Total":3,"Suspended":1}},{"ID":7,"Name":"Future","Values":[1]}]}]"##,
    ) else {
        panic!()
    };
    let facts = f.facts.unwrap();
    assert!(matches!(&facts[0].value, FactValue::ThreadCount(c) if c.total == Some(3)));
    assert_eq!(facts[1].value, FactValue::Raw { value: None, values: Some(json!([1])) });
}

#[test]
fn subscribed_with_demo_event_ids_5_and_6() {
    let Response::Subscribed(s) = response(
        r##"["Subscribed",{"Events":[{"ID":5,"Name":"ThreadSwitch","Value":0},{"ID":6,"Name":"All","Value":1}]}]"##,
    ) else {
        panic!()
    };
    let events = s.events.unwrap();
    assert_eq!(EventKind::from_id(events[0].id.unwrap()), None);
}

#[test]
fn booleans_as_numbers_or_json_booleans() {
    for (text, want) in [("1", true), ("true", true), ("0", false), ("false", false)] {
        let line = format!(r##"["RideConnection",{{"Restricted":{text}}}]"##);
        let Response::RideConnection(r) = decode_message::<Response>(line.as_bytes()).unwrap() else {
            panic!()
        };
        assert_eq!(r.restricted, Some(want), "{text}");
    }
    let encoded = serde_json::to_string(&Response::RideConnection(RideConnection {
        restricted: Some(true),
        ..Default::default()
    }))
    .unwrap();
    assert_eq!(encoded, r##"["RideConnection",{"Restricted":1}]"##);
}
