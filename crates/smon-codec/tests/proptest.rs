//! Properties: round trip, no panic on arbitrary bytes at any split point, chunking independence.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use smon_codec::{DecoderConfig, EncoderConfig, Sample, StreamDecoder, StreamEncoder, Update, Value};

/// Names with a fixed kind each (a name keeps its kind for the whole stream).
const UNSIGNED: [&str; 4] = ["linux.cpu.idle", "a.b", "smon.time", "linux.net.rx_bytes"];
const TEXT: [&str; 3] = ["smon.version", "x.s", "linux.net.name"];

fn unsigned_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        0u64..500,
        (0u32..64).prop_map(|s| 1u64 << s),
        any::<u64>(),
    ]
}

fn text_value() -> impl Strategy<Value = (bool, Vec<u8>)> {
    (
        any::<bool>(),
        prop::collection::vec(prop_oneof![3 => Just(0xFFu8), 1 => Just(0xFE), 2 => any::<u8>()], 0..70),
    )
}

fn index() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(prop_oneof![4 => 0u64..4, 1 => any::<u64>()], 0..4)
}

#[derive(Debug, Clone)]
enum Raw {
    U(usize, Vec<u64>, u64),
    S(usize, Vec<u64>, bool, Vec<u8>),
    /// Any name (`~` and at least 3 more bytes of any UTF-8, so never one of the fixed names); its
    /// kind follows from the name, so it stays fixed.
    Any(String, Vec<u64>, u64, Vec<u8>),
}

fn kind_is_text(name: &str) -> bool {
    name.bytes().map(u32::from).sum::<u32>() % 2 == 1
}

fn raw() -> impl Strategy<Value = Raw> {
    prop_oneof![
        3 => (0..UNSIGNED.len(), index(), unsigned_value()).prop_map(|(n, i, v)| Raw::U(n, i, v)),
        1 => (0..TEXT.len(), index(), text_value()).prop_map(|(n, i, (ext, s))| Raw::S(n, i, ext, s)),
        1 => ("[a-z]{1,4}\\.[a-z0-9_.]{1,12}|\\PC{3,12}", index(), unsigned_value(), text_value())
            .prop_map(|(name, i, v, (_, s))| Raw::Any(format!("~{name}"), i, v, s)),
    ]
}

/// Samples; a text sample with `ext` extends the previous value of its name (to exercise appends).
fn samples() -> impl Strategy<Value = Vec<Sample>> {
    prop::collection::vec(raw(), 0..120).prop_map(|raws| {
        let mut last_text: Vec<Vec<u8>> = vec![Vec::new(); TEXT.len()];
        raws.into_iter()
            .map(|r| match r {
                Raw::U(n, index, v) => Sample::new(UNSIGNED[n], index, v),
                Raw::S(n, index, ext, s) => {
                    let full = if ext { [last_text[n].as_slice(), &s].concat() } else { s };
                    last_text[n] = full.clone();
                    Sample { name: TEXT[n].into(), index, value: Value::Text(Bytes::from(full)) }
                }
                Raw::Any(name, index, _, s) if kind_is_text(&name) => {
                    Sample { name: name.into(), index, value: Value::Text(Bytes::from(s)) }
                }
                Raw::Any(name, index, v, _) => Sample::new(name, index, v),
            })
            .collect()
    })
}

fn encode(samples: &[Sample], resync: bool) -> Vec<u8> {
    let mut enc = StreamEncoder::new(EncoderConfig { resync_at_start: resync, ..Default::default() });
    let mut out = BytesMut::new();
    for s in samples {
        enc.encode(s, &mut out).expect("valid sample");
    }
    out.to_vec()
}

/// Feeds `input` into a buffer in the given chunk sizes (cycled), calling `drain(buf, false)` before
/// the first chunk and after each one, then `drain(buf, true)` once at the end of the input.
fn feed_chunked(input: &[u8], chunks: &[usize], mut drain: impl FnMut(&mut BytesMut, bool)) {
    let mut buf = BytesMut::new();
    let mut rest = input;
    let mut i = 0;
    loop {
        drain(&mut buf, false);
        if rest.is_empty() {
            break;
        }
        let n = chunks[i % chunks.len()].clamp(1, rest.len());
        i += 1;
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
    drain(&mut buf, true);
}

/// Every update and error (as text) from `input` fed in the given chunk sizes (cycled).
fn decode_chunked(input: &[u8], chunks: &[usize]) -> Vec<Result<Update, String>> {
    let mut dec = StreamDecoder::new(DecoderConfig::default());
    let mut out = Vec::new();
    feed_chunked(input, chunks, |buf, eof| loop {
        let decoded = if eof { dec.decode_eof(buf) } else { dec.decode(buf) };
        match decoded {
            Ok(Some(u)) => out.push(Ok(u)),
            Ok(None) => break,
            Err(e) => out.push(Err(e.to_string())),
        }
    });
    out
}

/// The same through the borrowing APIs: `decode_with` for whole buffers, `decode_eof_ref` at the end.
fn decode_chunked_with(input: &[u8], chunks: &[usize]) -> Vec<Result<Update, String>> {
    let mut dec = StreamDecoder::new(DecoderConfig::default());
    let mut out = Vec::new();
    feed_chunked(input, chunks, |buf, eof| loop {
        if eof {
            match dec.decode_eof_ref(buf) {
                Ok(Some(u)) => out.push(Ok(u.to_update())),
                Ok(None) => break,
                Err(e) => out.push(Err(e.to_string())),
            }
        } else {
            let result = dec.decode_with(buf, |u| out.push(Ok(u.to_update())));
            match result {
                Ok(_) => break,
                Err(e) => out.push(Err(e.to_string())),
            }
        }
    });
    out
}

fn interesting_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => any::<u8>(),
            3 => Just(0xFFu8),
            2 => 0xFAu8..=0xFD,
            2 => 0u8..8,
            1 => Just(0xFE),
            1 => Just(b'u'),
            1 => Just(b's'),
        ],
        0..600,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn decode_of_encode_is_identity(samples in samples(), resync in any::<bool>()) {
        let wire = encode(&samples, resync);
        let back: Vec<Sample> = StreamDecoder::decode_all(&wire, DecoderConfig { strict: true, ..Default::default() })
            .unwrap()
            .into_iter()
            .filter_map(Update::into_sample)
            .collect();
        prop_assert_eq!(back, samples);
    }

    #[test]
    fn encoding_is_deterministic(samples in samples()) {
        prop_assert_eq!(encode(&samples, true), encode(&samples, true));
    }

    #[test]
    fn arbitrary_bytes_at_any_split_point_never_panic(
        bytes in interesting_bytes(),
        split in any::<prop::sample::Index>(),
    ) {
        let at = split.index(bytes.len() + 1);
        let whole = decode_chunked(&bytes, &[usize::MAX]);
        let mut dec = StreamDecoder::new(DecoderConfig::default());
        let mut buf = BytesMut::from(&bytes[..at]);
        let mut split_out = Vec::new();
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(u)) => split_out.push(Ok(u)),
                Ok(None) => break,
                Err(e) => split_out.push(Err(e.to_string())),
            }
        }
        buf.extend_from_slice(&bytes[at..]);
        loop {
            match dec.decode_eof(&mut buf) {
                Ok(Some(u)) => split_out.push(Ok(u)),
                Ok(None) => break,
                Err(e) => split_out.push(Err(e.to_string())),
            }
        }
        prop_assert_eq!(split_out, whole);
    }

    #[test]
    fn decoding_is_independent_of_chunking(
        samples in samples(),
        chunks in prop::collection::vec(1usize..40, 1..8),
    ) {
        let wire = encode(&samples, true);
        prop_assert_eq!(decode_chunked(&wire, &chunks), decode_chunked(&wire, &[usize::MAX]));
    }

    #[test]
    fn borrowing_apis_agree_with_owned_decoding(
        samples in samples(),
        noise in interesting_bytes(),
        chunks in prop::collection::vec(1usize..40, 1..8),
    ) {
        let wire = encode(&samples, true);
        prop_assert_eq!(decode_chunked_with(&wire, &chunks), decode_chunked(&wire, &[usize::MAX]));
        prop_assert_eq!(decode_chunked_with(&noise, &chunks), decode_chunked(&noise, &[usize::MAX]));
    }

    #[test]
    fn arbitrary_bytes_decode_the_same_in_any_chunking(
        bytes in interesting_bytes(),
        chunks in prop::collection::vec(1usize..16, 1..6),
    ) {
        prop_assert_eq!(decode_chunked(&bytes, &chunks), decode_chunked(&bytes, &[usize::MAX]));
    }
}
