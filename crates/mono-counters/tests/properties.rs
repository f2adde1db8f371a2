//! Property tests: round-trips in both directions, and no panic on arbitrary bytes at any split point.

use bytes::BytesMut;
use mono_counters::*;
use proptest::prelude::*;

fn raw_i32() -> impl Strategy<Value = i32> {
    prop_oneof![0..10i32, any::<i32>()]
}

fn header(index: i16) -> impl Strategy<Value = Header> {
    (raw_i32(), "[a-zA-Z0-9 :éü]{0,24}", 0..5i32, raw_i32(), raw_i32()).prop_map(
        move |(category, name, kind, unit, variance)| Header {
            category: Category::from_raw(category),
            name,
            kind: CounterType::from_raw(kind),
            unit: Unit::from_raw(unit),
            variance: Variance::from_raw(variance),
            index,
        },
    )
}

fn hello() -> impl Strategy<Value = Hello> {
    (0..12usize).prop_flat_map(|n| {
        (0..n as i16).map(header).collect::<Vec<_>>().prop_map(|headers| Hello { version: 1, headers })
    })
}

fn value_for(kind: CounterType) -> BoxedStrategy<ValueData> {
    match kind {
        CounterType::Int => any::<i32>().prop_map(|v| CounterValue::Int(v).into()).boxed(),
        CounterType::Long => any::<i64>().prop_map(|v| CounterValue::Long(v).into()).boxed(),
        CounterType::Word => prop_oneof![
            any::<i32>().prop_map(|v| CounterValue::Word32(v).into()),
            any::<i64>().prop_map(|v| CounterValue::Word64(v).into()),
        ]
        .boxed(),
        CounterType::Double => any::<f64>()
            .prop_filter("NaN != NaN", |v| !v.is_nan())
            .prop_map(|v| CounterValue::Double(v).into())
            .boxed(),
        _ => proptest::collection::vec(any::<u8>(), 0..12).prop_map(ValueData::Raw).boxed(),
    }
}

/// A Hello followed by samples of its counters (any subset, in any order, repeats allowed).
fn session() -> impl Strategy<Value = (Hello, Vec<Sample>)> {
    hello().prop_flat_map(|hello| {
        let headers = hello.headers.clone();
        let sample = (
            any::<i64>(),
            proptest::collection::vec(
                if headers.is_empty() {
                    Just(None).boxed()
                } else {
                    proptest::sample::select(headers.clone()).prop_map(Some).boxed()
                },
                0..8,
            ),
        )
            .prop_flat_map(|(timestamp, picks)| {
                let values: Vec<_> = picks
                    .into_iter()
                    .flatten()
                    .map(|h| value_for(h.kind).prop_map(move |data| SampleValue { index: h.index, data }))
                    .collect();
                values.prop_map(move |values| Sample { timestamp, values })
            });
        (Just(hello), proptest::collection::vec(sample, 0..6))
    })
}

fn counter_name() -> impl Strategy<Value = CounterName> {
    ("[ -~]{0,20}", "\\PC{0,12}").prop_map(|(c, n)| CounterName::new(c, n))
}

fn other_response() -> impl Strategy<Value = AgentMessage> {
    prop_oneof![
        proptest::collection::vec(counter_name(), 0..10).prop_map(AgentMessage::List),
        Just(AgentMessage::Add(AddResponse::NotFound)),
        Just(AgentMessage::Add(AddResponse::Existing)),
        Just(AgentMessage::Add(AddResponse::Nok)),
        prop_oneof![Just(Status::Ok), Just(Status::Nok), Just(Status::NotFound), Just(Status::Existing)]
            .prop_map(AgentMessage::Remove),
    ]
}

fn request(opcodes: RequestOpcodes) -> impl Strategy<Value = InspectorMessage> {
    let known = [opcodes.list(), opcodes.add(), opcodes.remove(), 127];
    prop_oneof![
        Just(InspectorMessage::List),
        counter_name().prop_map(InspectorMessage::Add),
        any::<i16>().prop_map(InspectorMessage::Remove),
        Just(InspectorMessage::GoodBye),
        any::<u8>()
            .prop_filter("unknown byte", move |b| !known.contains(b))
            .prop_map(InspectorMessage::Unknown),
    ]
}

fn decode_all(codec: &mut InspectorCodec, bytes: &[u8]) -> Vec<AgentMessage> {
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(m) = codec.decode_message(&mut buf).expect("valid stream") {
        out.push(m);
    }
    assert!(buf.is_empty());
    out
}

proptest! {
    #[test]
    fn agent_messages_round_trip((hello, samples) in session(), extra in proptest::collection::vec(other_response(), 0..4)) {
        let mut messages = vec![AgentMessage::Hello(hello)];
        messages.extend(extra);
        messages.extend(samples.into_iter().map(AgentMessage::Sampling));
        let mut wire = BytesMut::new();
        for m in &messages {
            encode_agent_message(m, &mut wire).unwrap();
        }
        prop_assert_eq!(decode_all(&mut InspectorCodec::default(), &wire), messages);
    }

    #[test]
    fn add_ok_round_trips(h in header(3)) {
        let msg = AgentMessage::Add(AddResponse::Ok(h));
        let mut wire = BytesMut::new();
        encode_agent_message(&msg, &mut wire).unwrap();
        prop_assert_eq!(decode_all(&mut InspectorCodec::default(), &wire), vec![msg]);
    }

    #[test]
    fn agent_requests_round_trip(requests in proptest::collection::vec(request(RequestOpcodes::Agent), 0..10)) {
        let mut wire = BytesMut::new();
        for r in &requests {
            encode_inspector_message(r, RequestOpcodes::Agent, &mut wire).unwrap();
        }
        let mut codec = AgentCodec::default();
        let mut decoded = Vec::new();
        while let Some(r) = codec.decode_message(&mut wire).unwrap() {
            decoded.push(r);
        }
        prop_assert_eq!(decoded, requests);
    }

    #[test]
    fn gist_requests_round_trip(requests in proptest::collection::vec(request(RequestOpcodes::Gist), 0..10)) {
        let mut wire = BytesMut::new();
        for r in &requests {
            encode_inspector_message(r, RequestOpcodes::Gist, &mut wire).unwrap();
        }
        let mut codec = AgentCodec::new(Limits::default(), RequestOpcodes::Gist);
        let mut decoded = Vec::new();
        while let Some(r) = codec.decode_message(&mut wire).unwrap() {
            decoded.push(r);
        }
        prop_assert_eq!(decoded, requests);
    }

    #[test]
    fn any_valid_stream_cut_anywhere_needs_more_data((hello, samples) in session(), cut in any::<prop::sample::Index>()) {
        let mut wire = BytesMut::new();
        encode_agent_message(&AgentMessage::Hello(hello), &mut wire).unwrap();
        for s in &samples {
            encode_sample(s, &mut wire).unwrap();
        }
        let cut = cut.index(wire.len() + 1);
        let mut codec = InspectorCodec::default();
        let mut buf = BytesMut::from(&wire[..cut]);
        let mut whole = 0;
        while let Some(_m) = codec.decode_message(&mut buf).expect("a prefix of a valid stream is never an error") {
            whole += 1;
        }
        prop_assert!(whole <= samples.len() + 1);
        // The remainder completes it exactly.
        buf.extend_from_slice(&wire[cut..]);
        while codec.decode_message(&mut buf).unwrap().is_some() {
            whole += 1;
        }
        prop_assert_eq!(whole, samples.len() + 1);
    }

    #[test]
    fn repeated_layouts_decode_like_fresh_ones((hello, samples) in session(), raw_flip in any::<u8>()) {
        // Each sample twice, the second time with other values in the same layout (and a WORD or raw
        // value possibly resized, which changes the layout): the layout fast path must agree with a
        // decoder that has never seen the previous sample.
        let mut primed = InspectorCodec::default();
        let mut wire = BytesMut::new();
        encode_agent_message(&AgentMessage::Hello(hello), &mut wire).unwrap();
        decode_all(&mut primed, &wire);
        let mut stream = Vec::new();
        for s in samples {
            let mut twin = s.clone();
            twin.timestamp = twin.timestamp.wrapping_add(1);
            for v in &mut twin.values {
                v.data = match &v.data {
                    ValueData::Typed(CounterValue::Int(x)) => CounterValue::Int(x ^ 0x5a5a).into(),
                    ValueData::Typed(CounterValue::Long(x)) => CounterValue::Long(x ^ 0x5a5a_5a5a).into(),
                    ValueData::Typed(CounterValue::Word32(x)) if raw_flip % 2 == 0 => CounterValue::Word64(i64::from(*x)).into(),
                    ValueData::Typed(CounterValue::Double(x)) => CounterValue::Double(-x).into(),
                    ValueData::Raw(b) if raw_flip % 3 == 0 => ValueData::Raw(b.iter().chain([&raw_flip]).copied().collect()),
                    other => other.clone(),
                };
            }
            stream.push(AgentMessage::Sampling(s));
            stream.push(AgentMessage::Sampling(twin));
        }
        let mut bytes = BytesMut::new();
        for m in &stream {
            encode_agent_message(m, &mut bytes).unwrap();
        }
        let mut continuous = primed.clone();
        let mut buf = bytes.clone();
        for expected in &stream {
            let fast = continuous.decode_message(&mut buf).unwrap().unwrap();
            let mut alone = BytesMut::new();
            encode_agent_message(expected, &mut alone).unwrap();
            let slow = primed.clone().decode_message(&mut alone).unwrap().unwrap();
            prop_assert_eq!(&fast, &slow);
            prop_assert_eq!(&fast, expected);
        }
        prop_assert!(buf.is_empty());
    }
}
