//! The test vectors of `meter161-notes.md`, one named test each.

use std::time::Duration;

use bytes::BytesMut;
use meter161::{
    BadReason, ClientCodec, ClientError, ClientMessage, CommandError, DecodeError, Header, ProtocolError,
    ServerCodec, ServerMessage, Session, Update, SYS161_FIELDS,
};

const CAPTURED: &[u8] = b"HELLO 2\r\n\
HEAD nsec kinsns uinsns udud idle irqs exns disk con emu net\r\n\
WIDTH 11 9 9 4 9 4 4 4 5 4 4\r\n\
DATA 5968289383 149100000 0 0 0 0 0 0 0 0 0\r\n\
DATA 6168380263 154102272 0 0 0 0 0 0 0 0 0\r\n";

fn decode_chunks(chunks: &[&[u8]]) -> Vec<Result<ServerMessage, DecodeError>> {
    let mut codec = ClientCodec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some(item) = codec.decode(&mut buf).transpose() {
            out.push(item);
        }
    }
    while let Some(item) = codec.decode_eof(&mut buf).transpose() {
        out.push(item);
    }
    out
}

fn decode(input: &[u8]) -> Vec<Result<ServerMessage, DecodeError>> {
    decode_chunks(&[input])
}

fn decode_bytewise(input: &[u8]) -> Vec<Result<ServerMessage, DecodeError>> {
    decode_chunks(&input.chunks(1).collect::<Vec<_>>())
}

fn data(values: &[u64]) -> ServerMessage {
    ServerMessage::Data(values.to_vec())
}

#[test]
fn captured_greeting_and_data_decode_and_reencode_exactly() {
    let expected = vec![
        ServerMessage::Hello(2),
        ServerMessage::Head(SYS161_FIELDS.map(String::from).to_vec()),
        ServerMessage::Width(vec![11, 9, 9, 4, 9, 4, 4, 4, 5, 4, 4]),
        data(&[5968289383, 149100000, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        data(&[6168380263, 154102272, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    ];
    assert_eq!(decode(CAPTURED), expected.iter().cloned().map(Ok).collect::<Vec<_>>());
    assert_eq!(decode_bytewise(CAPTURED), decode(CAPTURED));
    let mut out = BytesMut::new();
    for msg in &expected {
        meter161::encode_server(msg, &mut out).unwrap();
    }
    assert_eq!(&out[..], CAPTURED);
    assert_eq!(ServerMessage::sys161_greeting().to_vec(), expected[..3].to_vec());
}

/// What a client makes of each line: a row (values and deltas), an error, or nothing.
#[derive(Debug, PartialEq)]
enum Outcome {
    Row(Vec<u64>, Option<Vec<u64>>),
    Error(ProtocolError),
}

fn outcomes(input: &[u8], bytewise: bool) -> Vec<Outcome> {
    let decoded = if bytewise { decode_bytewise(input) } else { decode(input) };
    let mut session = Session::new();
    let mut out = Vec::new();
    for item in decoded {
        match item.map_err(ProtocolError::from).and_then(|msg| session.handle(msg)) {
            Ok(Some(Update::Sample(s))) => {
                out.push(Outcome::Row(s.values().to_vec(), s.deltas().map(<[u64]>::to_vec)))
            }
            Ok(_) => {}
            Err(e) => out.push(Outcome::Error(e)),
        }
    }
    out
}

#[test]
fn scripted_stream_gives_stat161s_rows_and_errors() {
    let script: &[u8] = b"hello 2\nhead nsec kinsns\nwidth 3 3\ndata 100 5\n  DATA\t200   7  \r\nOK\n\
BAD Interval too small\nERROR something broke\nFOO bar\nDATA 1 2 3\nDATA 18446744073709551615 9\n\
DATA 5 12abc\nDATA 10 -3\nHEAD\n\nDATA 20 30";
    let invalid = |index, word: &str| {
        Outcome::Error(ProtocolError::Decode(DecodeError::InvalidNumber {
            keyword: "DATA",
            index,
            word: word.into(),
            bits: 64,
        }))
    };
    let expected = vec![
        Outcome::Row(vec![100, 5], None),
        Outcome::Row(vec![200, 7], Some(vec![100, 2])),
        Outcome::Error(ProtocolError::Rejected { text: Some("Interval too small".into()) }),
        Outcome::Error(ProtocolError::ServerError { text: Some("something broke".into()) }),
        Outcome::Error(ProtocolError::UnknownMessage { line: "FOO bar".into() }),
        Outcome::Error(ProtocolError::FieldCount { expected: 2, got: 3 }),
        Outcome::Row(vec![u64::MAX, 9], Some(vec![18446744073709551415, 2])),
        // stat161 reads the leading digits ("12abc" is 12, "-3" is 0); we report the line (resolution 12).
        invalid(1, "12abc"),
        invalid(1, "-3"),
        Outcome::Error(ProtocolError::EmptyHead),
        // The unterminated "DATA 20 30" is discarded at EOF, as stat161 does.
    ];
    assert_eq!(outcomes(script, false), expected);
    assert_eq!(outcomes(script, true), expected, "one byte at a time");
}

#[test]
fn quirks_a_client_tolerates() {
    let input = b"\r\n   \t\r\nhello\t2\ndata  1 2\r\nData 3\t4 \r\n\r\n  HeAd a  b\r\nok\r\nbad\nerror\n";
    assert_eq!(
        decode(input),
        vec![
            Ok(ServerMessage::Hello(2)),
            Ok(data(&[1, 2])),
            Ok(data(&[3, 4])),
            Ok(ServerMessage::Head(vec!["a".into(), "b".into()])),
            Ok(ServerMessage::Ok),
            Ok(ServerMessage::Bad(None)),
            Ok(ServerMessage::Error(None)),
        ]
    );
}

#[test]
fn a_stray_cr_inside_a_line_is_a_blank() {
    assert_eq!(decode(b"DATA 1\r2\n"), vec![Ok(data(&[1, 2]))]);
}

#[test]
fn head_names_keep_their_case() {
    assert_eq!(
        decode(b"head NSEC Kinsns\n"),
        vec![Ok(ServerMessage::Head(vec!["NSEC".into(), "Kinsns".into()]))]
    );
}

#[test]
fn values_up_to_u64_max() {
    assert_eq!(decode(b"DATA 18446744073709551615 0\n"), vec![Ok(data(&[u64::MAX, 0]))]);
    assert_eq!(
        decode(b"DATA 18446744073709551616\n"),
        vec![Err(DecodeError::InvalidNumber {
            keyword: "DATA",
            index: 0,
            word: "18446744073709551616".into(),
            bits: 64
        })]
    );
}

#[test]
fn every_bad_text_decodes_to_its_reason() {
    for reason in BadReason::ALL {
        let line = format!("BAD {}\r\n", reason.text());
        let decoded = decode(line.as_bytes());
        assert_eq!(decoded, vec![Ok(reason.reply())], "{line:?}");
        let err = Session::new().handle(reason.reply()).unwrap_err();
        assert_eq!(err.bad_reason(), Some(reason));
        let mut out = BytesMut::new();
        meter161::encode_server(&reason.reply(), &mut out).unwrap();
        assert_eq!(&out[..], line.as_bytes());
    }
    let texts: Vec<_> = BadReason::ALL.iter().map(|r| r.text()).collect();
    assert_eq!(
        texts,
        [
            "Interval too small",
            "Interval too large",
            "Invalid number",
            "Invalid command",
            "Too many words in command",
            "Input overflow"
        ]
    );
}

#[test]
fn wrapping_deltas() {
    let header = Header::new(SYS161_FIELDS.map(String::from).to_vec());
    let mut prev = [0u64; 11];
    let mut cur = [0u64; 11];
    prev[0] = 200;
    cur[0] = u64::MAX;
    prev[5] = 4294967290; // irqs
    cur[5] = 5;
    let deltas = header.deltas(&prev, &cur);
    assert_eq!(deltas[0], 18446744073709551415);
    assert_eq!(deltas[5], 11);
}

#[test]
fn interval_commands_are_encoded_exactly() {
    let mut out = BytesMut::new();
    meter161::encode_client(&ClientMessage::Interval(1_000_000_000), &mut out);
    meter161::encode_client(&ClientMessage::Interval(200_000_000), &mut out);
    assert_eq!(&out[..], b"INTERVAL 1000000000\r\nINTERVAL 200000000\r\n");
}

#[test]
fn the_client_refuses_intervals_sys161_would_reject() {
    for ns in [9_999, 2_000_000_001] {
        let err = meter161::interval_ns(Duration::from_nanos(ns)).unwrap_err();
        assert!(
            matches!(err, ClientError::IntervalOutOfRange { ns: n, min: 10_000, max: 2_000_000_000 } if n == ns)
        );
    }
    assert_eq!(meter161::interval_ns(Duration::from_nanos(10_000)).unwrap(), 10_000);
    assert_eq!(meter161::interval_ns(Duration::from_secs(2)).unwrap(), 2_000_000_000);
}

/// The reply table of the notes, decoded by the server codec (the fake server runs the same table
/// over a socket in `sims/sys161/tests`).
fn reply(command: &[u8]) -> Vec<Option<BadReason>> {
    let mut codec = ServerCodec::default();
    let mut buf = BytesMut::from(command);
    let mut out = Vec::new();
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(_)) => out.push(None),
            Ok(None) => return out,
            Err(e) => out.push(Some(e.reason())),
        }
    }
}

#[test]
fn bad_interval_too_small() {
    for cmd in
        ["INTERVAL 99\r\n", "INTERVAL 9999\r\n", "INTERVAL 010000\r\n", "INTERVAL -18446744073709551615\r\n"]
    {
        assert_eq!(reply(cmd.as_bytes()), [Some(BadReason::IntervalTooSmall)], "{cmd:?}");
    }
}

#[test]
fn bad_interval_too_large() {
    for cmd in ["INTERVAL 2000000001\r\n", "INTERVAL 4294967296\r\n", "INTERVAL -5\r\n"] {
        assert_eq!(reply(cmd.as_bytes()), [Some(BadReason::IntervalTooLarge)], "{cmd:?}");
    }
}

#[test]
fn bad_invalid_number() {
    for cmd in
        ["INTERVAL abc\r\n", "Interval 1e6\r\n", "INTERVAL 18446744073709551616\r\n", "INTERVAL 0x\r\n"]
    {
        assert_eq!(reply(cmd.as_bytes()), [Some(BadReason::InvalidNumber)], "{cmd:?}");
    }
}

#[test]
fn bad_invalid_command() {
    for cmd in ["INTERVAL\r\n", "INTERVAL 1 2\r\n", "FOO\r\n", "OK\r\n"] {
        assert_eq!(reply(cmd.as_bytes()), [Some(BadReason::InvalidCommand)], "{cmd:?}");
    }
}

#[test]
fn bad_too_many_words_in_command() {
    assert_eq!(reply(b"a b c d e f g h i\r\n"), [Some(BadReason::TooManyWords)]);
    assert_eq!(reply(b"a b c d e f g h\r\n"), [Some(BadReason::InvalidCommand)], "8 words are allowed");
}

#[test]
fn bad_input_overflow() {
    assert_eq!(reply(&[b'x'; 200]), [Some(BadReason::InputOverflow)]);
    assert_eq!(reply(&[b'x'; 127]), [], "127 bytes may still get their LF");
}

#[test]
fn accepted_commands_get_no_reply() {
    for cmd in [
        "INTERVAL 10000\r\n",
        "INTERVAL 0x10000\r\n",
        "interval 50000000\n",
        "  interval   200000000  \r\n",
        "INTERVAL 2000000000\r\n",
    ] {
        assert_eq!(reply(cmd.as_bytes()), [None], "{cmd:?}");
    }
    assert_eq!(reply(b"\r\n   \t \r\n"), [], "blank lines are ignored");
    assert_eq!(
        reply(b"INTERVAL 10000\r\nFOO\r\nINTERVAL 1\r\n"),
        [None, Some(BadReason::InvalidCommand), Some(BadReason::IntervalTooSmall)],
        "three commands in one write, in order"
    );
}

#[test]
fn spec_text_range_accepts_100() {
    let mut codec = ServerCodec::new(meter161::IntervalRange::SPEC_TEXT);
    let mut buf = BytesMut::from(&b"INTERVAL 100\r\nINTERVAL 99\r\n"[..]);
    assert_eq!(codec.decode(&mut buf), Ok(Some(ClientMessage::Interval(100))));
    assert_eq!(codec.decode(&mut buf), Err(CommandError::IntervalTooSmall { ns: 99, min: 100 }));
}
