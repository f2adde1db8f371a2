//! The notes' wire examples and "test vectors to pin", one named test each.

use bytes::BytesMut;
use smon_codec::{
    DecodeError, DecoderConfig, EncoderConfig, Kind, Sample, StreamDecoder, StreamEncoder, SyncState, Update,
    Value, RESYNC,
};

const EXAMPLE: &[u8] = b"\x00\x0Csmon.version\x01\x05\x30\x2E\x30\x2E\x30\
\xF0\x00\x0Dsmon.compiled\x02\x0BSep 12 2004";

fn no_resync() -> EncoderConfig {
    EncoderConfig { resync_at_start: false, ..Default::default() }
}

fn encode(config: EncoderConfig, samples: &[Sample]) -> Vec<u8> {
    let mut enc = StreamEncoder::new(config);
    let mut out = BytesMut::new();
    for s in samples {
        enc.encode(s, &mut out).unwrap();
    }
    out.to_vec()
}

fn decode(input: &[u8]) -> Result<Vec<Update>, DecodeError> {
    StreamDecoder::decode_all(input, DecoderConfig::default())
}

fn values(input: &[u8]) -> Vec<Sample> {
    decode(input).unwrap().into_iter().filter_map(Update::into_sample).collect()
}

fn text(s: &[u8]) -> Value {
    Value::Text(bytes::Bytes::copy_from_slice(s))
}

fn define(token: u64, name: &str, kind: Kind, bound_index: Option<u64>) -> Update {
    Update::Define { token, name: name.into(), kind, bound_index }
}

fn value(token: u64, name: &str, index: &[u64], value: Value) -> Update {
    Update::Value { token, name: name.into(), index: index.to_vec(), value }
}

fn example_updates() -> Vec<Update> {
    vec![
        define(1, "mon.version", Kind::Text, None),
        value(1, "mon.version", &[], text(b"0.0.0")),
        define(2, "mon.compiled", Kind::Text, None),
        value(2, "mon.compiled", &[], text(b"Sep 12 2004")),
    ]
}

fn example_samples() -> Vec<Sample> {
    vec![Sample::new("mon.version", [], "0.0.0"), Sample::new("mon.compiled", [], "Sep 12 2004")]
}

// ---- the corrected 50-byte example -------------------------------------------------------------

#[test]
fn example_is_50_bytes_and_68_with_the_resync_prefix() {
    assert_eq!(EXAMPLE.len(), 50);
    assert_eq!([&RESYNC[..], EXAMPLE].concat().len(), 68);
}

#[test]
fn example_without_resync_decodes_to_version_and_compiled() {
    assert_eq!(decode(EXAMPLE).unwrap(), example_updates());
}

#[test]
fn example_with_resync_prefix_decodes_the_same_after_a_resync() {
    let mut expected = vec![Update::Resync];
    expected.extend(example_updates());
    assert_eq!(decode(&[&RESYNC[..], EXAMPLE].concat()).unwrap(), expected);
}

#[test]
fn encoder_reproduces_the_example_byte_for_byte() {
    assert_eq!(encode(no_resync(), &example_samples()), EXAMPLE);
    assert_eq!(encode(EncoderConfig::default(), &example_samples()), [&RESYNC[..], EXAMPLE].concat());
}

/// The follow-ups from current token 2: unchanged token 2, token 3 1000 → 1005, token 1 restarted.
#[test]
fn follow_ups_encode_and_decode_as_in_the_notes() {
    let mut enc = StreamEncoder::new(no_resync());
    let mut out = BytesMut::new();
    for s in example_samples() {
        enc.encode(&s, &mut out).unwrap();
    }
    // Define u token 3 at 1000, then return to token 2 (current token 2 again, as in the notes).
    enc.encode(&Sample::new("x.counter", [], 1000), &mut out).unwrap();
    enc.encode(&Sample::new("mon.compiled", [], "Sep 12 2004"), &mut out).unwrap();
    let mut step = |s: Sample| {
        let start = out.len();
        enc.encode(&s, &mut out).unwrap();
        out[start..].to_vec()
    };
    assert_eq!(step(Sample::new("mon.compiled", [], "Sep 12 2004")), [0x00, 0x00]);
    assert_eq!(step(Sample::new("x.counter", [], 1005)), [0x01, 0x05]);
    assert_eq!(
        step(Sample::new("mon.version", [], "0.0.1")),
        [0xF0, 0x01, 0xF0, 0x05, 0x30, 0x2E, 0x30, 0x2E, 0x31]
    );
    let got = values(&out);
    assert_eq!(
        got[got.len() - 3..],
        [
            Sample::new("mon.compiled", [], "Sep 12 2004"),
            Sample::new("x.counter", [], 1005),
            Sample::new("mon.version", [], "0.0.1"),
        ]
    );
}

#[test]
fn follow_up_index_change_cpu0_to_cpu1_is_fb_01() {
    // Encoder: a two-level series whose innermost level changes.
    let out = encode(
        no_resync(),
        &[Sample::new("linux.disk.reads", [8, 0], 1), Sample::new("linux.disk.reads", [8, 1], 2)],
    );
    let first = encode(no_resync(), &[Sample::new("linux.disk.reads", [8, 0], 1)]);
    // FB 01, then token 1 → 2 (a new indexed token copied from token 1), value 2.
    assert_eq!(&out[first.len()..first.len() + 2], [0xFB, 0x01]);
    // Decoder: a plain token under A11 index ops, as in the notes.
    let mut stream = b"\x00\x0Fulinux.cpu.idle\x01\x05".to_vec();
    stream.extend_from_slice(&[0xFA, 0x00, 0x00, 0x01, 0xFB, 0x01, 0x00, 0x01]);
    let got = values(&stream);
    assert_eq!(got[1].index, [0]);
    assert_eq!(got[2].index, [1]);
}

#[test]
fn spec_literal_example_fails_with_undefined_token_158() {
    let literal = b"\x00\x0Bsmon.version\x01\x05\x30\x2E\x30\x2E\x30\
\xF0\x00\x0Dsmon.compiled\x02\x0BSep 12 2004";
    let err = decode(literal).unwrap_err();
    assert!(matches!(err, DecodeError::UndefinedToken { token: 158, offset: 16 }), "{err:?}");
}

// ---- number boundaries of the notes' table ----------------------------------------------------

/// The bytes the encoder writes for a `u` token going from `prev` to `new` (without the token field).
fn encoded_step(prev: u64, new: u64) -> Vec<u8> {
    let mut enc = StreamEncoder::new(no_resync());
    let mut out = BytesMut::new();
    enc.encode(&Sample::new("a.b", [], prev), &mut out).unwrap();
    let start = out.len();
    enc.encode(&Sample::new("a.b", [], new), &mut out).unwrap();
    assert_eq!(out[start], 0x00, "same token: token delta 0");
    out[start + 1..].to_vec()
}

/// Decodes `value_bytes` as a `u` value against `prev`.
fn decoded_step(prev: u64, value_bytes: &[u8]) -> u64 {
    let mut stream = b"\x00\x04ua.b\x01\xF7".to_vec();
    stream.extend_from_slice(&prev.to_be_bytes());
    stream.push(0x00);
    stream.extend_from_slice(value_bytes);
    let got = values(&stream);
    assert_eq!(got[0].value, Value::Unsigned(prev));
    match got[1].value {
        Value::Unsigned(v) => v,
        ref other => panic!("{other:?}"),
    }
}

/// The encoder writes `bytes` for prev → new, and `bytes` decode back to `new`.
fn boundary(prev: u64, new: u64, bytes: &[u8]) {
    assert_eq!(encoded_step(prev, new), bytes, "{prev} -> {new}");
    assert_eq!(decoded_step(prev, bytes), new, "{bytes:02X?}");
}

#[test]
fn delta_0_is_00() {
    boundary(1000, 1000, &[0x00]);
}

#[test]
fn delta_5_is_05() {
    boundary(1000, 1005, &[0x05]);
}

#[test]
fn delta_223_is_df() {
    boundary(1000, 1223, &[0xDF]);
}

#[test]
fn delta_224_is_e0_00() {
    boundary(1000, 1224, &[0xE0, 0x00]);
}

#[test]
fn delta_479_is_e0_ff() {
    boundary(1000, 1479, &[0xE0, 0xFF]);
}

#[test]
fn delta_480_is_e1_01_00() {
    boundary(1000, 1480, &[0xE1, 0x01, 0x00]);
}

#[test]
fn delta_65759_is_e1_ff_ff() {
    boundary(1000, 1000 + 65_759, &[0xE1, 0xFF, 0xFF]);
}

#[test]
fn delta_65760_is_e2_01_00_00() {
    boundary(1000, 1000 + 65_760, &[0xE2, 0x01, 0x00, 0x00]);
}

#[test]
fn delta_2_pow_32_is_e3_ff_ff_ff_20() {
    boundary(0, 1 << 32, &[0xE3, 0xFF, 0xFF, 0xFF, 0x20]);
}

#[test]
fn delta_u64_max_from_0_is_e7_and_ties_f7() {
    boundary(0, u64::MAX, &[0xE7, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F]);
}

#[test]
fn absolute_u64_max_f7_decodes() {
    assert_eq!(decoded_step(5, &[0xF7, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]), u64::MAX);
    // The encoder's own choice (E7, which ties F7) round-trips too.
    assert_eq!(decoded_step(5, &encoded_step(5, u64::MAX)), u64::MAX);
}

#[test]
fn negative_delta_1_is_e8_01() {
    boundary(1000, 999, &[0xE8, 0x01]);
}

#[test]
fn negative_delta_255_is_e8_ff() {
    boundary(1000, 745, &[0xE8, 0xFF]);
}

#[test]
fn negative_delta_256_is_e9_01_00() {
    boundary(100_000, 99_744, &[0xE9, 0x01, 0x00]);
}

#[test]
fn negative_delta_u64_max_is_ef_and_encodes_as_absolute_0() {
    let ef = [0xEF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
    assert_eq!(decoded_step(u64::MAX, &ef), 0);
    // The shortest form of MAX → 0 is absolute: F0 00 (2 bytes) beats EF + 8 bytes.
    boundary(u64::MAX, 0, &[0xF0, 0x00]);
}

#[test]
fn absolute_0_is_f0_00() {
    boundary(1000, 0, &[0xF0, 0x00]);
}

#[test]
fn absolute_1000_is_f1_03_e8() {
    boundary(70_000, 1000, &[0xF1, 0x03, 0xE8]);
}

#[test]
fn non_shortest_encodings_are_accepted() {
    assert_eq!(decoded_step(0, &[0xE1, 0x00, 0x00]), 224);
    assert_eq!(decoded_step(0, &[0xF3, 0x00, 0x00, 0x00, 0x05]), 5);
    assert_eq!(decoded_step(7, &[0xE8, 0x00]), 7);
}

#[test]
fn e7_overflow_wraps_unless_strict() {
    let e7 = [0xE7, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]; // 2^64 - 1 + 224
    assert_eq!(decoded_step(0, &e7), 223);
    let mut stream = b"\x00\x04ua.b\x01\x00\x00".to_vec();
    stream.extend_from_slice(&e7);
    let err =
        StreamDecoder::decode_all(&stream, DecoderConfig { strict: true, ..Default::default() }).unwrap_err();
    assert!(matches!(err, DecodeError::OutOfRange { offset: 9 }), "{err:?}");
}

// ---- decoder acceptance and rejection ---------------------------------------------------------

#[test]
fn c0_to_df_are_direct_values() {
    assert_eq!(decoded_step(0, &[0xC0]), 192);
    assert_eq!(decoded_step(0, &[0xDF]), 223);
}

fn decode_err(input: &[u8]) -> DecodeError {
    decode(input).unwrap_err()
}

/// The error of `input` after a resync: a stream's first item is also its check that it is smon at all.
/// Offsets count the resync's 18 bytes.
fn decode_err_mid_stream(input: &[u8]) -> DecodeError {
    decode_err(&[&RESYNC[..], input].concat())
}

/// The first bytes of a stream whose first item is bad: it does not start like smon.
#[test]
fn a_stream_whose_first_item_is_bad_does_not_start_like_smon() {
    let starts: [&[u8]; 8] = [
        b"\xF8",
        b"\x00\xE8\x01",
        b"\x00\x03uab\x01\x00",
        b"\x00\x00\x01\x00",
        b"\x00\x04xa.b\x01\x00",
        b"\x05\x00",
        b"\xFB\x01",
        b"HTTP/1.1 200 OK\r\n",
    ];
    for start in starts {
        let err = decode_err(start);
        let shown = &start[..start.len().min(24)];
        assert!(matches!(&err, DecodeError::OtherProtocol { first } if first[..] == *shown), "{err:?}");
        assert_eq!(err.offset(), Some(0));
    }
    // A stream that starts like smon keeps the errors of its first item.
    let err = decode_err(b"\x00\x04ua.b\x01\xFF\x00");
    assert!(matches!(err, DecodeError::BadNumberPrefix { byte: 0xFF, offset: 7 }), "{err:?}");
}

#[test]
fn f8_f9_fe_ff_in_a_number_position_are_rejected() {
    for byte in [0xF8u8, 0xF9, 0xFE] {
        let err = decode_err(&[b"\x00\x04ua.b\x01".as_slice(), &[byte, 0, 0]].concat());
        assert!(matches!(err, DecodeError::BadNumberPrefix { byte: b, offset: 7 } if b == byte), "{err:?}");
    }
    let err = decode_err(b"\x00\x04ua.b\x01\xFF\x00");
    assert!(matches!(err, DecodeError::BadNumberPrefix { byte: 0xFF, offset: 7 }), "{err:?}");
    let err = decode_err_mid_stream(b"\xF8");
    assert!(matches!(err, DecodeError::BadNumberPrefix { byte: 0xF8, offset: 18 }), "{err:?}");
}

#[test]
fn e8_to_ef_as_a_string_length_are_rejected() {
    for prefix in 0xE8u8..=0xEF {
        let mut stream = b"\x00\x04sa.b\x01\x02xy\x00".to_vec();
        stream.push(prefix);
        stream.extend(std::iter::repeat_n(0, usize::from(prefix - 0xE7)));
        let err = decode_err(&stream);
        assert!(matches!(err, DecodeError::NegativeStringDelta { offset: 11, .. }), "{err:?}");
    }
    let err = decode_err_mid_stream(b"\x00\xE8\x01");
    assert!(matches!(err, DecodeError::NegativeStringDelta { prefix: 0xE8, offset: 19 }), "{err:?}");
}

#[test]
fn definitions_shorter_than_4_bytes_are_rejected() {
    let err = decode_err_mid_stream(b"\x00\x03uab\x01\x00");
    assert!(matches!(err, DecodeError::DefinitionTooShort { len: 3, offset: 19 }), "{err:?}");
    let err = decode_err_mid_stream(b"\x00\x00\x01\x00");
    assert!(matches!(err, DecodeError::DefinitionTooShort { len: 0, offset: 19 }), "{err:?}");
}

#[test]
fn definitions_of_an_unknown_type_are_rejected() {
    let err = decode_err_mid_stream(b"\x00\x04xa.b\x01\x00");
    assert!(matches!(err, DecodeError::UnknownType { type_byte: b'x', offset: 20 }), "{err:?}");
}

#[test]
fn a_pair_naming_an_undefined_token_is_rejected() {
    let err = decode_err_mid_stream(b"\x05\x00");
    assert!(matches!(err, DecodeError::UndefinedToken { token: 5, offset: 18 }), "{err:?}");
}

#[test]
fn a_definition_naming_a_defined_token_is_rejected() {
    let err = decode_err(b"\x00\x04ua.b\x01\x00\xF0\x00\x04uc.d\x01\x00");
    assert!(matches!(err, DecodeError::TokenAlreadyDefined { token: 1, offset: 15 }), "{err:?}");
    let err = decode_err(b"\x00\x04ua.b\x00\x00");
    assert!(matches!(err, DecodeError::TokenAlreadyDefined { token: 0, offset: 6 }), "{err:?}");
}

#[test]
fn any_unused_token_number_may_follow_a_definition() {
    let got = decode(b"\x00\x04ua.b\xF1\x03\xE8\x07").unwrap();
    assert_eq!(got, [define(1000, "a.b", Kind::Unsigned, None), value(1000, "a.b", &[], Value::Unsigned(7))]);
}

#[test]
fn index_ops_in_value_position_are_rejected() {
    for op in [0xFAu8, 0xFB, 0xFC] {
        let err = decode_err(&[b"\x00\x04ua.b\x01".as_slice(), &[op, 0]].concat());
        assert!(matches!(err, DecodeError::UnexpectedIndexOp { byte, offset: 7 } if byte == op), "{err:?}");
    }
    let err = decode_err(b"\x00\x04ua.b\x01\x00\x00\xFD\x01");
    assert!(matches!(err, DecodeError::IndexedDefinitionWithoutIndex { offset: 10 }), "{err:?}");
}

#[test]
fn fb_and_fc_with_too_few_levels_are_rejected() {
    let err = decode_err_mid_stream(b"\xFB\x01");
    assert!(
        matches!(err, DecodeError::IndexTooShallow { op: 0xFB, needed: 1, depth: 0, offset: 18 }),
        "{err:?}"
    );
    let err = decode_err(b"\xFA\x01\xFC\x01");
    assert!(
        matches!(err, DecodeError::IndexTooShallow { op: 0xFC, needed: 2, depth: 1, offset: 2 }),
        "{err:?}"
    );
}

#[test]
fn input_ending_mid_pair_is_truncated() {
    let err = decode_err(b"\x00\x04ua.b\x01");
    assert!(matches!(err, DecodeError::Truncated { offset: 0, pending: 7 }), "{err:?}");
}

#[test]
fn strings_over_the_limit_are_rejected_before_reading_them() {
    let err = decode_err(b"\x00\x04sa.b\x01\xF3\x7F\xFF\xFF\xFF");
    assert!(matches!(err, DecodeError::StringTooLong { len: 0x7FFF_FFFF, offset: 7, .. }), "{err:?}");
}

// ---- FF stuffing ------------------------------------------------------------------------------

fn string_step(prev: &[u8], new: &[u8]) -> Vec<u8> {
    let mut enc = StreamEncoder::new(no_resync());
    let mut out = BytesMut::new();
    enc.encode(&Sample::new("s.s", [], prev), &mut out).unwrap();
    let start = out.len();
    enc.encode(&Sample::new("s.s", [], new), &mut out).unwrap();
    let got = values(&out);
    assert_eq!(got[1].value, text(new), "round trip");
    out[start + 1..].to_vec()
}

fn ff(n: usize) -> Vec<u8> {
    vec![0xFF; n]
}

#[test]
fn sixteen_ffs_get_one_stuffing_fe_even_at_the_end() {
    assert_eq!(string_step(b"", &ff(16)), [&[0x10][..], &ff(16), &[0xFE]].concat());
}

#[test]
fn seventeen_ffs_are_stuffed_after_the_sixteenth() {
    assert_eq!(string_step(b"", &ff(17)), [&[0x11][..], &ff(16), &[0xFE, 0xFF]].concat());
}

#[test]
fn forty_ffs_are_stuffed_after_each_sixteen() {
    assert_eq!(string_step(b"", &ff(40)), [&[0x28][..], &ff(16), &[0xFE], &ff(16), &[0xFE], &ff(8)].concat());
}

#[test]
fn the_ff_run_counts_the_length_payload_f0_ff() {
    let mut new = ff(16);
    new.extend(std::iter::repeat_n(b'x', 255 - 16));
    let bytes = string_step(b"abc", &new);
    assert_eq!(bytes[..19], [&[0xF0, 0xFF][..], &ff(15), &[0xFE, 0xFF]].concat());
}

#[test]
fn a_missing_stuffing_fe_is_an_error() {
    let mut stream = b"\x00\x04sa.b\x01\x11".to_vec();
    stream.extend(ff(16));
    stream.push(0x00);
    let err = decode_err(&stream);
    assert!(matches!(err, DecodeError::MissingStuffing { byte: 0x00, offset: 24 }), "{err:?}");
}

// ---- resync -----------------------------------------------------------------------------------

#[test]
fn a_resync_mid_stream_clears_the_state() {
    let stream = [EXAMPLE, &RESYNC, b"\x01\x05"].concat();
    let mut dec = StreamDecoder::default();
    let mut buf = BytesMut::from(&stream[..]);
    let mut got = Vec::new();
    let err = loop {
        match dec.decode(&mut buf) {
            Ok(Some(u)) => got.push(u),
            Ok(None) => panic!("expected an error"),
            Err(e) => break e,
        }
    };
    assert_eq!(got.last(), Some(&Update::Resync));
    assert!(dec.token_numbers().is_empty());
    assert!(matches!(err, DecodeError::UndefinedToken { token: 1, offset: 68 }), "{err:?}");
}

#[test]
fn twenty_ffs_then_fe_also_resync() {
    let stream = [EXAMPLE, &ff(20), &[0xFE], EXAMPLE].concat();
    let mut expected = example_updates();
    expected.push(Update::Resync);
    expected.extend(example_updates());
    assert_eq!(decode(&stream).unwrap(), expected);
}

#[test]
fn a_resync_inside_string_data_drops_the_partial_pair() {
    let mut stream = b"\x00\x04sa.b\x01\x40".to_vec();
    stream.extend(ff(17));
    stream.push(0xFE);
    stream.extend_from_slice(EXAMPLE);
    let mut expected = vec![Update::Resync];
    expected.extend(example_updates());
    assert_eq!(decode(&stream).unwrap(), expected);
}

#[test]
fn after_an_error_the_decoder_skips_to_the_next_resync() {
    let stream = [&RESYNC[..], b"\x05\x00garbage\xFF\xFF", &RESYNC, EXAMPLE].concat();
    let mut dec = StreamDecoder::default();
    let mut buf = BytesMut::from(&stream[..]);
    assert_eq!(dec.decode(&mut buf).unwrap(), Some(Update::Resync));
    assert!(matches!(dec.decode(&mut buf), Err(DecodeError::UndefinedToken { token: 5, offset: 18 })));
    assert_eq!(dec.sync_state(), SyncState::Lost);
    assert_eq!(dec.decode(&mut buf).unwrap(), Some(Update::Resync));
    let mut rest = Vec::new();
    while let Some(u) = dec.decode_eof(&mut buf).unwrap() {
        rest.push(u);
    }
    assert_eq!(rest, example_updates());
}

#[test]
fn seventeen_ffs_not_followed_by_fe_break_the_stream() {
    let stream = [ff(17), vec![0x00], EXAMPLE.to_vec()].concat();
    let err = decode_err(&stream);
    assert!(matches!(err, DecodeError::BrokenResync { byte: 0x00, offset: 17 }), "{err:?}");
}

// ---- index ops (A11, A12) and indexed tokens (A13) --------------------------------------------

fn indexes(input: &[u8]) -> Vec<(Vec<u64>, Value)> {
    values(input).into_iter().map(|s| (s.index, s.value)).collect()
}

#[test]
fn cpu_example_gives_none_0_1_none_and_shares_the_last_value() {
    // [pair] FA 0 [pair] FB 1 [pair] FD [pair]
    let stream = b"\x00\x0Fulinux.cpu.idle\x01\x64\xFA\x00\x00\x01\xFB\x01\x00\x02\xFD\x00\x03";
    assert_eq!(
        indexes(stream),
        [
            (vec![], Value::Unsigned(100)),
            (vec![0], Value::Unsigned(101)),
            (vec![1], Value::Unsigned(103)),
            (vec![], Value::Unsigned(106)),
        ]
    );
}

#[test]
fn device_example_gives_3_0_then_8_0() {
    // FA 3 FA 0 [pair] FC 8 FB 0 [pair] FD
    let stream = b"\x00\x0Bulinux.disk\x01\x0A\xFA\x03\xFA\x00\x00\x01\xFC\x08\xFB\x00\x00\x02\xFD\x00\x00";
    assert_eq!(
        indexes(stream),
        [
            (vec![], Value::Unsigned(10)),
            (vec![3, 0], Value::Unsigned(11)),
            (vec![8, 0], Value::Unsigned(13)),
            (vec![], Value::Unsigned(13)),
        ]
    );
}

#[test]
fn indexed_token_keeps_its_first_index_over_a_later_fa() {
    let mut stream = b"\x00\x04ux.y\x01\x05".to_vec();
    // F0 00 FD FA 0 FA 1 FA 2 + definition + new token 2 + value 7
    stream.extend_from_slice(b"\xF0\x00\xFD\xFA\x00\xFA\x01\xFA\x02\x0Fulinux.cpu.idle\x02\x07");
    // later: FD FA 4 FA 5 FA 6, then token 2 (delta 0) + 1
    stream.extend_from_slice(b"\xFD\xFA\x04\xFA\x05\xFA\x06\x00\x01");
    let got = decode(&stream).unwrap();
    assert_eq!(
        got[2..],
        [
            define(2, "linux.cpu.idle", Kind::Unsigned, Some(0)),
            value(2, "linux.cpu.idle", &[0, 1, 2], Value::Unsigned(7)),
            value(2, "linux.cpu.idle", &[0, 5, 6], Value::Unsigned(8)),
        ]
    );
}

#[test]
fn indexed_copy_of_a_defined_token_inherits_name_and_type() {
    // token 1 "x.y" (s), then select it, FD FA 9, new token 1+2 = 3, value "ok"
    let got = decode(b"\x00\x04sx.y\x01\x02hi\x00\xFD\xFA\x09\x02\x02ok").unwrap();
    assert_eq!(got[2..], [define(3, "x.y", Kind::Text, Some(9)), value(3, "x.y", &[9], text(b"ok")),]);
}

#[test]
fn encoder_uses_an_indexed_token_per_first_index() {
    let samples = [
        Sample::new("linux.cpu.idle", [0], 1000),
        Sample::new("linux.cpu.idle", [1], 5000),
        Sample::new("linux.cpu.idle", [0], 1001),
        Sample::new("linux.cpu.idle", [1], 5002),
    ];
    let out = encode(no_resync(), &samples);
    // token 0, FD FA 0, definition, new token 1, value 1000 (E2..)
    assert_eq!(out[..4], [0x00, 0xFD, 0xFA, 0x00]);
    // the last two pairs: token 2 → 1 (F0 01) +1, token 1 → 2 (01) +2: every series deltas on its own
    assert_eq!(out[out.len() - 5..], [0xF0, 0x01, 0x01, 0x01, 0x02]);
    assert_eq!(values(&out), samples);
}

// ---- encoder determinism ----------------------------------------------------------------------

#[test]
fn encoder_is_deterministic_with_the_a6_tie_order() {
    let samples = [
        Sample::new("smon.time", [], 1_100_000_000),
        Sample::new("linux.cpu.idle", [0], 5),
        Sample::new("linux.cpu.idle", [1], 6),
        Sample::new("linux.disk.reads", [8, 0], 9),
        Sample::new("linux.disk.reads", [3, 0], 9),
        Sample::new("mon.version", [], "0.0.0"),
        Sample::new("smon.time", [], 1_100_000_005),
    ];
    let a = encode(EncoderConfig::default(), &samples);
    let b = encode(EncoderConfig::default(), &samples);
    assert_eq!(a, b);
    assert_eq!(values(&a), samples);
    // token 6 (mon.version) → 1 (smon.time): F0 01 ties E8 05, absolute wins; +5 is 05.
    assert_eq!(a[a.len() - 3..], [0xF0, 0x01, 0x05]);
}

#[test]
fn encoder_rejects_bad_samples_without_writing() {
    let mut enc = StreamEncoder::new(no_resync());
    let mut out = BytesMut::new();
    assert!(enc.encode(&Sample::new("ab", [], 1), &mut out).is_err());
    enc.encode(&Sample::new("a.b", [], 1), &mut out).unwrap();
    let len = out.len();
    let err = enc.encode(&Sample::new("a.b", [], "text"), &mut out).unwrap_err();
    assert!(matches!(err, smon_codec::EncodeError::KindMismatch { .. }), "{err:?}");
    assert!(enc.encode(&Sample::new("c.d", vec![0; 17], 1), &mut out).is_err());
    assert_eq!(out.len(), len);
}
