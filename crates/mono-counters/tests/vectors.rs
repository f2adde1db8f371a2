//! Every hex vector of mono-counters-notes.md, decoded to the stated values and re-encoded byte for byte.

use bytes::BytesMut;
use mono_counters::*;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).expect("hex byte")).collect()
}

/// Hex with quoted ASCII runs, as the notes' exchange table writes them.
fn wire(parts: &[&str]) -> Vec<u8> {
    parts
        .iter()
        .flat_map(|p| p.strip_prefix('"').map(|s| s.as_bytes().to_vec()).unwrap_or_else(|| hex(p)))
        .collect()
}

const HELLO: &str = "00 01 00 02 00
    00 00 00 00 10 00 00 00 43 6f 6d 70 69 6c 65 64 20 6d 65 74 68 6f 64 73 00 00 00 00 00 00 00 00 03 00 00 00 00 00
    07 00 00 00 0b 00 00 00 57 6f 72 6b 69 6e 67 20 53 65 74 01 00 00 00 01 00 00 00 03 00 00 00 01 00";
const FIRST_SAMPLE: &str =
    "04 00 80 48 fa ee 64 d1 08 00 00 04 00 d2 04 00 00 01 00 08 00 00 00 20 03 00 00 00 00 ff ff";
const EMPTY_SAMPLE: &str = "04 80 16 e1 fa ee 64 d1 08 ff ff";

fn hello() -> Hello {
    Hello {
        version: 1,
        headers: vec![
            Header {
                category: Category::Jit,
                name: "Compiled methods".into(),
                kind: CounterType::Int,
                unit: Unit::None,
                variance: Variance::Variable,
                index: 0,
            },
            Header {
                category: Category::System,
                name: "Working Set".into(),
                kind: CounterType::Long,
                unit: Unit::Bytes,
                variance: Variance::Variable,
                index: 1,
            },
        ],
    }
}

/// Decodes one agent message that must use every byte, and checks it re-encodes to the same bytes.
fn agent_roundtrip(codec: &mut InspectorCodec, bytes: &[u8]) -> AgentMessage {
    for cut in 0..bytes.len() {
        let mut partial = BytesMut::from(&bytes[..cut]);
        let mut probe = codec.clone();
        assert_eq!(probe.decode_message(&mut partial), Ok(None), "cut at {cut} must need more data");
        assert_eq!(partial.len(), cut, "nothing consumed from an incomplete message");
    }
    let mut buf = BytesMut::from(bytes);
    let msg = codec.decode_message(&mut buf).expect("valid").expect("complete");
    assert!(buf.is_empty(), "every byte used");
    let mut out = BytesMut::new();
    encode_agent_message(&msg, &mut out).unwrap();
    assert_eq!(&out[..], bytes, "re-encodes byte for byte");
    msg
}

fn request_roundtrip(bytes: &[u8], expected: InspectorMessage) {
    let mut codec = AgentCodec::default();
    let mut buf = BytesMut::from(bytes);
    assert_eq!(codec.decode_message(&mut buf), Ok(Some(expected.clone())));
    assert!(buf.is_empty());
    let mut out = BytesMut::new();
    encode_inspector_message(&expected, RequestOpcodes::Agent, &mut out).unwrap();
    assert_eq!(&out[..], bytes);
}

fn codec_after_hello() -> InspectorCodec {
    let mut codec = InspectorCodec::default();
    agent_roundtrip(&mut codec, &hex(HELLO));
    codec
}

#[test]
fn hello_76_bytes() {
    let bytes = hex(HELLO);
    assert_eq!(bytes.len(), 76);
    let msg = agent_roundtrip(&mut InspectorCodec::default(), &bytes);
    assert_eq!(msg, AgentMessage::Hello(hello()));
    let AgentMessage::Hello(h) = msg else { unreachable!() };
    assert_eq!(h.headers[0].full_name(), "Mono JIT/Compiled methods");
    assert_eq!(h.headers[1].full_name(), "Mono System/Working Set");
}

#[test]
fn first_sampling_31_bytes() {
    let bytes = hex(FIRST_SAMPLE);
    assert_eq!(bytes.len(), 31);
    let msg = agent_roundtrip(&mut codec_after_hello(), &bytes);
    assert_eq!(
        msg,
        AgentMessage::Sampling(Sample {
            timestamp: 635_400_000_000_000_000,
            values: vec![
                SampleValue { index: 0, data: CounterValue::Int(1234).into() },
                SampleValue { index: 1, data: CounterValue::Long(52_428_800).into() },
            ],
        })
    );
    assert_eq!(0x08d1_64ee_fa48_8000_i64, 635_400_000_000_000_000);
}

#[test]
fn unchanged_sampling_11_bytes() {
    let bytes = hex(EMPTY_SAMPLE);
    assert_eq!(bytes.len(), 11);
    let msg = agent_roundtrip(&mut codec_after_hello(), &bytes);
    assert_eq!(
        msg,
        AgentMessage::Sampling(Sample { timestamp: 635_400_000_000_000_000 + 10_000_000, values: vec![] })
    );
}

#[test]
fn sampling_deltas_keep_last_values() {
    let mut codec = codec_after_hello();
    let mut table = CounterTable::from_hello(&hello());
    for bytes in [hex(FIRST_SAMPLE), hex(EMPTY_SAMPLE)] {
        let AgentMessage::Sampling(s) = agent_roundtrip(&mut codec, &bytes) else { panic!() };
        table.apply(&s);
    }
    assert_eq!(table.get(0).unwrap().value, Some(CounterValue::Int(1234).into()));
    assert_eq!(table.get(1).unwrap().value, Some(CounterValue::Long(52_428_800).into()));
    // Changing only index 1 sends only it.
    let only_one = Sample {
        timestamp: 1,
        values: vec![SampleValue { index: 1, data: CounterValue::Long(60_000_000).into() }],
    };
    let mut out = BytesMut::new();
    encode_sample(&only_one, &mut out).unwrap();
    let AgentMessage::Sampling(s) = agent_roundtrip(&mut codec, &out) else { panic!() };
    assert_eq!(table.apply(&s), vec![1]);
    assert_eq!(table.get(0).unwrap().value, Some(CounterValue::Int(1234).into()));
    assert_eq!(table.get(1).unwrap().value, Some(CounterValue::Long(60_000_000).into()));
}

#[test]
fn list_request() {
    request_roundtrip(&hex("00"), InspectorMessage::List);
}

#[test]
fn list_response() {
    let bytes = wire(&["01 08 00 00 00", "\"Mono JIT", "10 00 00 00", "\"Compiled methods", "ff ff ff ff"]);
    let msg = agent_roundtrip(&mut InspectorCodec::default(), &bytes);
    assert_eq!(msg, AgentMessage::List(vec![CounterName::new("Mono JIT", "Compiled methods")]));
}

#[test]
fn add_request_user_time() {
    request_roundtrip(
        &hex("01 0b 00 00 00 4d 6f 6e 6f 20 53 79 73 74 65 6d 09 00 00 00 55 73 65 72 20 54 69 6d 65"),
        InspectorMessage::Add(CounterName::new("Mono System", "User Time")),
    );
}

#[test]
fn add_response_ok_with_header() {
    let bytes = hex(
        "02 00 07 00 00 00 09 00 00 00 55 73 65 72 20 54 69 6d 65 01 00 00 00 02 00 00 00 03 00 00 00 02 00",
    );
    let mut codec = codec_after_hello();
    let msg = agent_roundtrip(&mut codec, &bytes);
    assert_eq!(
        msg,
        AgentMessage::Add(AddResponse::Ok(Header {
            category: Category::System,
            name: "User Time".into(),
            kind: CounterType::Long,
            unit: Unit::Time,
            variance: Variance::Variable,
            index: 2,
        }))
    );
    // The decoder learnt index 2 is a LONG.
    let sample = hex("04 00 00 00 00 00 00 00 00 02 00 08 00 01 00 00 00 00 00 00 00 ff ff");
    agent_roundtrip(&mut codec, &sample);
}

#[test]
fn add_response_notfound_has_no_header() {
    assert_eq!(
        agent_roundtrip(&mut InspectorCodec::default(), &hex("02 02")),
        AgentMessage::Add(AddResponse::NotFound)
    );
}

#[test]
fn add_response_existing_and_nok_have_no_header() {
    let mut codec = InspectorCodec::default();
    assert_eq!(agent_roundtrip(&mut codec, &hex("02 03")), AgentMessage::Add(AddResponse::Existing));
    assert_eq!(agent_roundtrip(&mut codec, &hex("02 01")), AgentMessage::Add(AddResponse::Nok));
}

#[test]
fn remove_request_index_1() {
    request_roundtrip(&hex("02 01 00"), InspectorMessage::Remove(1));
}

#[test]
fn remove_request_all() {
    request_roundtrip(&hex("02 ff ff"), InspectorMessage::Remove(-1));
}

#[test]
fn remove_response_ok_and_notfound() {
    let mut codec = InspectorCodec::default();
    assert_eq!(agent_roundtrip(&mut codec, &hex("03 00")), AgentMessage::Remove(Status::Ok));
    assert_eq!(agent_roundtrip(&mut codec, &hex("03 02")), AgentMessage::Remove(Status::NotFound));
}

#[test]
fn good_bye() {
    request_roundtrip(&hex("7f"), InspectorMessage::GoodBye);
}

#[test]
fn gist_numbering_knob() {
    let mut codec = AgentCodec::new(Limits::default(), RequestOpcodes::Gist);
    let mut buf = BytesMut::from(&hex("01 02 ff ff ff ff 02 00 00 00 41 42 03 01 00 00")[..]);
    assert_eq!(codec.decode_message(&mut buf), Ok(Some(InspectorMessage::List)));
    assert_eq!(
        codec.decode_message(&mut buf),
        Err(DecodeError::NullString { field: "add category" }),
        "gist Add with a null category is refused like the real agent"
    );
    let mut buf = BytesMut::from(&hex("03 01 00 00")[..]);
    assert_eq!(codec.decode_message(&mut buf), Ok(Some(InspectorMessage::Remove(1))));
    assert_eq!(
        codec.decode_message(&mut buf),
        Ok(Some(InspectorMessage::Unknown(0))),
        "0 is not a gist opcode"
    );
    let mut out = BytesMut::new();
    encode_inspector_message(&InspectorMessage::Remove(1), RequestOpcodes::Gist, &mut out).unwrap();
    assert_eq!(&out[..], hex("03 01 00"));
}

#[test]
fn unknown_command_byte_consumes_only_itself() {
    let mut codec = AgentCodec::default();
    let mut buf = BytesMut::from(&hex("05 00")[..]);
    assert_eq!(codec.decode_message(&mut buf), Ok(Some(InspectorMessage::Unknown(5))));
    assert_eq!(codec.decode_message(&mut buf), Ok(Some(InspectorMessage::List)));
}

fn decode_err(codec: &mut InspectorCodec, bytes: &[u8]) -> DecodeError {
    codec.decode_message(&mut BytesMut::from(bytes)).expect_err("must be an error")
}

#[test]
fn string_length_minus_two_is_an_error() {
    let err = decode_err(&mut InspectorCodec::default(), &hex("01 fe ff ff ff"));
    assert_eq!(err, DecodeError::NegativeStringLength { field: "list category", len: -2 });
}

#[test]
fn string_longer_than_the_maximum_is_refused_before_reading_it() {
    let limits = Limits { max_string_len: 8, ..Limits::default() };
    let err = decode_err(&mut InspectorCodec::new(limits), &hex("01 09 00 00 00"));
    assert_eq!(err, DecodeError::StringTooLong { field: "list category", len: 9, max: 8 });
    let err = decode_err(&mut InspectorCodec::default(), &hex("01 ff ff ff 7f"));
    assert!(matches!(err, DecodeError::StringTooLong { len: i32::MAX, .. }));
}

#[test]
fn int_value_of_size_3_is_an_error() {
    let err =
        decode_err(&mut codec_after_hello(), &hex("04 00 00 00 00 00 00 00 00 00 00 03 00 01 02 03 ff ff"));
    assert_eq!(err, DecodeError::BadValueSize { index: 0, size: 3, kind: "int" });
}

#[test]
fn value_for_an_unknown_index_is_an_error() {
    let err = decode_err(
        &mut codec_after_hello(),
        &hex("04 00 00 00 00 00 00 00 00 07 00 04 00 01 02 03 04 ff ff"),
    );
    assert_eq!(err, DecodeError::UnknownIndex(7));
}

#[test]
fn unknown_agent_opcode_is_fatal() {
    assert_eq!(decode_err(&mut InspectorCodec::default(), &hex("05")), DecodeError::UnknownAgentOpcode(5));
}

#[test]
fn other_versions_and_negative_counts_are_errors() {
    assert_eq!(
        decode_err(&mut InspectorCodec::default(), &hex("00 02 00")),
        DecodeError::UnsupportedVersion(2)
    );
    assert_eq!(
        decode_err(&mut InspectorCodec::default(), &hex("00 01 00 ff ff")),
        DecodeError::NegativeCount(-1)
    );
    let limits = Limits { max_headers: 1, ..Limits::default() };
    assert_eq!(
        decode_err(&mut InspectorCodec::new(limits), &hex("00 01 00 02 00")),
        DecodeError::TooManyHeaders { count: 2, max: 1 }
    );
}

#[test]
fn word_values_of_4_and_8_bytes_and_raw_unknown_types() {
    let mut codec = InspectorCodec::default();
    let headers = [(0, CounterType::Word), (1, CounterType::Unknown(9)), (2, CounterType::Double)]
        .map(|(index, kind)| Header {
            category: Category::Unknown(42),
            name: "x".into(),
            kind,
            unit: Unit::Unknown(77),
            variance: Variance::Unknown(0),
            index,
        })
        .to_vec();
    let mut out = BytesMut::new();
    encode_agent_message(&AgentMessage::Hello(Hello { version: 1, headers }), &mut out).unwrap();
    agent_roundtrip(&mut codec, &out);
    let word4 = hex("04 00 00 00 00 00 00 00 00 00 00 04 00 01 00 00 00 ff ff");
    let AgentMessage::Sampling(s) = agent_roundtrip(&mut codec, &word4) else { panic!() };
    assert_eq!(s.values[0].data, CounterValue::Word32(1).into());
    let word8 = hex("04 00 00 00 00 00 00 00 00 00 00 08 00 01 00 00 00 00 00 00 00 ff ff");
    let AgentMessage::Sampling(s) = agent_roundtrip(&mut codec, &word8) else { panic!() };
    assert_eq!(s.values[0].data, CounterValue::Word64(1).into());
    let raw =
        hex("04 00 00 00 00 00 00 00 00 01 00 03 00 aa bb cc 02 00 08 00 00 00 00 00 00 00 f8 3f ff ff");
    let AgentMessage::Sampling(s) = agent_roundtrip(&mut codec, &raw) else { panic!() };
    assert_eq!(s.values[0].data, ValueData::Raw(vec![0xaa, 0xbb, 0xcc]));
    assert_eq!(s.values[1].data, CounterValue::Double(1.5).into());
    let word2 = hex("04 00 00 00 00 00 00 00 00 00 00 02 00 01 00 ff ff");
    assert!(matches!(
        decode_err(&mut codec, &word2),
        DecodeError::BadValueSize { size: 2, kind: "word", .. }
    ));
}

#[test]
fn truncated_at_eof_is_reported() {
    let mut codec = InspectorCodec::default();
    let bytes = hex(HELLO);
    let mut buf = BytesMut::from(&bytes[..40]);
    assert_eq!(codec.decode_message_eof(&mut buf), Err(DecodeError::Truncated { buffered: 40 }));
    assert_eq!(codec.decode_message_eof(&mut BytesMut::new()), Ok(None));
}

#[test]
fn an_endless_message_hits_the_size_limit() {
    let limits = Limits { max_message_len: 64, ..Limits::default() };
    let mut codec = InspectorCodec::new(limits);
    let mut list = hex("01");
    for _ in 0..20 {
        list.extend(wire(&["01 00 00 00", "\"a", "01 00 00 00", "\"b"]));
    }
    assert_eq!(decode_err(&mut codec, &list), DecodeError::MessageTooLarge { max: 64 });
}

#[test]
fn a_repeated_layout_decodes_the_same_as_a_new_one() {
    // The decoder has a fast path for a sample with the previous sample's layout; it must agree with
    // the slow path, and fall back to it (with its errors) whenever the layout differs.
    let mut codec = codec_after_hello();
    agent_roundtrip(&mut codec, &hex(FIRST_SAMPLE));
    let same_layout =
        hex("04 01 00 00 00 00 00 00 00 00 00 04 00 07 00 00 00 01 00 08 00 09 00 00 00 00 00 00 00 ff ff");
    let AgentMessage::Sampling(s) = agent_roundtrip(&mut codec, &same_layout) else { panic!() };
    assert_eq!(
        s.values,
        vec![
            SampleValue { index: 0, data: CounterValue::Int(7).into() },
            SampleValue { index: 1, data: CounterValue::Long(9).into() },
        ]
    );
    let swapped =
        hex("04 01 00 00 00 00 00 00 00 01 00 08 00 09 00 00 00 00 00 00 00 00 00 04 00 07 00 00 00 ff ff");
    let AgentMessage::Sampling(s) = agent_roundtrip(&mut codec, &swapped) else { panic!() };
    assert_eq!(s.values[0].index, 1);
    let bad_size = hex("04 01 00 00 00 00 00 00 00 01 00 04 00 09 00 00 00 00 00 04 00 07 00 00 00 ff ff");
    assert_eq!(
        decode_err(&mut codec, &bad_size),
        DecodeError::BadValueSize { index: 1, size: 4, kind: "long" }
    );
    let no_terminator =
        hex("04 01 00 00 00 00 00 00 00 01 00 08 00 09 00 00 00 00 00 00 00 00 00 04 00 07 00 00 00 05 00");
    assert_eq!(decode_err(&mut codec, &no_terminator), DecodeError::UnknownIndex(5));
}
