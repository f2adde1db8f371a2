//! Property tests: round trips, and arbitrary bytes at arbitrary split points.

use bytes::BytesMut;
use meter161::{ClientCodec, ClientMessage, DecodeError, ServerCodec, ServerMessage};
use proptest::prelude::*;

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9]{1,12}",
        "[!-~]{1,10}",   // any printable ASCII but the blank
        "[a-zé€ß]{1,6}", // and some non-ASCII
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(word(), 1..6).prop_map(|w| w.join(" "))
}

fn is_keyword(w: &str) -> bool {
    ["HELLO", "HEAD", "WIDTH", "DATA", "OK", "BAD", "ERROR"].iter().any(|k| k.eq_ignore_ascii_case(w))
}

fn server_message() -> impl Strategy<Value = ServerMessage> {
    prop_oneof![
        any::<u32>().prop_map(ServerMessage::Hello),
        prop::collection::vec(word(), 0..16).prop_map(ServerMessage::Head),
        prop::collection::vec(any::<u32>(), 0..16).prop_map(ServerMessage::Width),
        prop::collection::vec(any::<u64>(), 0..16).prop_map(ServerMessage::Data),
        Just(ServerMessage::Ok),
        prop::option::of(text()).prop_map(ServerMessage::Bad),
        prop::option::of(text()).prop_map(ServerMessage::Error),
        text()
            .prop_filter("not a keyword", |t| !is_keyword(t.split(' ').next().unwrap()))
            .prop_map(ServerMessage::Unknown),
    ]
}

fn decode_split(bytes: &[u8], split: usize) -> Vec<Result<ServerMessage, DecodeError>> {
    let split = split % (bytes.len() + 1);
    let mut codec = ClientCodec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in [&bytes[..split], &bytes[split..]] {
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

/// Writes `msg` the way a sloppy server might: any case, runs of blanks, LF or CRLF.
fn sloppy(msg: &ServerMessage, lower: bool, blanks: &str, crlf: bool) -> Vec<u8> {
    let mut exact = BytesMut::new();
    meter161::encode_server(msg, &mut exact).unwrap();
    let line = std::str::from_utf8(&exact[..exact.len() - 2]).unwrap();
    let mut words: Vec<String> = line.split(' ').map(String::from).collect();
    if lower && msg.keyword().is_some() {
        words[0] = words[0].to_lowercase();
    }
    let mut out = format!("{blanks}{}{blanks}", words.join(blanks)).into_bytes();
    out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
    out
}

proptest! {
    #[test]
    fn server_messages_round_trip(msgs in prop::collection::vec(server_message(), 1..8), split in any::<usize>()) {
        let mut bytes = BytesMut::new();
        for msg in &msgs {
            meter161::encode_server(msg, &mut bytes).unwrap();
        }
        let decoded = decode_split(&bytes, split);
        prop_assert_eq!(decoded, msgs.into_iter().map(Ok).collect::<Vec<_>>());
    }

    #[test]
    fn liberal_spellings_decode_to_the_same_message(
        msg in server_message(),
        lower in any::<bool>(),
        blanks in "[ \t]{1,3}",
        crlf in any::<bool>(),
    ) {
        let bytes = sloppy(&msg, lower, &blanks, crlf);
        prop_assert_eq!(decode_split(&bytes, 0), vec![Ok(msg)]);
    }

    #[test]
    fn interval_commands_round_trip(ns in meter161::MIN_INTERVAL_NS..=meter161::MAX_INTERVAL_NS, split in any::<usize>()) {
        let mut bytes = BytesMut::new();
        meter161::encode_client(&ClientMessage::Interval(ns), &mut bytes);
        let split = split % (bytes.len() + 1);
        let mut codec = ServerCodec::default();
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        for chunk in [&bytes[..split], &bytes[split..]] {
            buf.extend_from_slice(chunk);
            while let Some(item) = codec.decode(&mut buf).transpose() {
                decoded.push(item);
            }
        }
        prop_assert_eq!(decoded, vec![Ok(ClientMessage::Interval(ns))]);
    }

    /// Good lines separated by bad ones (overlong, bad numbers, unknown keywords) still come out exactly,
    /// in order, and nothing else comes out as a message of a known kind.
    #[test]
    fn bad_lines_never_corrupt_good_ones(
        msgs in prop::collection::vec(server_message(), 1..6),
        junk in prop::collection::vec(prop_oneof![
            Just(b"DATA 1 x\n".to_vec()),
            Just(b"HELLO\n".to_vec()),
            Just(vec![b'7'; 5000]),
            Just([b"DATA ".as_slice(), &[b'1'; 4100], b"\n"].concat()),
        ], 6),
        split in any::<usize>(),
    ) {
        let mut bytes = Vec::new();
        for (msg, junk) in msgs.iter().zip(&junk) {
            bytes.extend_from_slice(junk);
            if !junk.ends_with(b"\n") {
                bytes.push(b'\n');
            }
            let mut line = BytesMut::new();
            meter161::encode_server(msg, &mut line).unwrap();
            bytes.extend_from_slice(&line);
        }
        let good: Vec<ServerMessage> = decode_split(&bytes, split).into_iter().filter_map(Result::ok).collect();
        prop_assert_eq!(good, msgs);
    }
}
