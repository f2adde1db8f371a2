//! Decoding Sampling messages with 20 values, against tokio-util's `LengthDelimitedCodec` decoding
//! frames of the same size, in the same run. Report: mono frames/s divided by length-delimited frames/s.
//! The first mono case is the usual one (consecutive samples with the same layout); the second makes
//! every message's layout differ from the previous one's, the decoder's worst case.
//!
//! `trickle_mono`: a Hello of 4,000 counters (about 1 MiB, the default message limit) and a Sampling message
//! with a value for each, fed a byte per read against whole.
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use bench_harness::{Case, Group};
use std::sync::LazyLock;

use bytes::{BufMut, BytesMut};
use criterion::{black_box, Throughput};
use mono_counters::*;
use tokio_util::codec::{Decoder, LengthDelimitedCodec};

const FRAMES: usize = 1000;
const VALUES: i16 = 20;

fn hello() -> Hello {
    let headers = (0..VALUES)
        .map(|index| Header {
            category: Category::System,
            name: format!("Counter {index}"),
            kind: if index % 2 == 0 { CounterType::Int } else { CounterType::Long },
            unit: Unit::Bytes,
            variance: Variance::Variable,
            index,
        })
        .collect();
    Hello { version: 1, headers }
}

/// `FRAMES` Sampling messages of 20 values; with `alternate`, every other message lists its values in
/// reverse order, so no message has the previous one's layout (the decoder's slow path).
fn sampling_stream(alternate: bool) -> (BytesMut, usize) {
    let mut wire = BytesMut::new();
    let mut frame_len = 0;
    for n in 0..FRAMES as i64 {
        let mut values: Vec<SampleValue> = (0..VALUES)
            .map(|index| SampleValue {
                index,
                data: if index % 2 == 0 {
                    CounterValue::Int(n as i32 + index as i32).into()
                } else {
                    CounterValue::Long(n * 1_000_000 + index as i64).into()
                },
            })
            .collect();
        if alternate && n % 2 == 1 {
            values.reverse();
        }
        let before = wire.len();
        encode_sample(&Sample { timestamp: 635_400_000_000_000_000 + n * 10_000_000, values }, &mut wire)
            .unwrap();
        frame_len = wire.len() - before;
    }
    (wire, frame_len)
}

fn length_delimited_stream(frame_len: usize) -> BytesMut {
    let mut wire = BytesMut::new();
    for n in 0..FRAMES {
        wire.put_u32(frame_len as u32 - 4);
        wire.extend(std::iter::repeat_n(n as u8, frame_len - 4));
    }
    wire
}

struct Streams {
    frame_len: usize,
    samples: BytesMut,
    changing: BytesMut,
    delimited: BytesMut,
    primed: InspectorCodec,
}

static STREAMS: LazyLock<Streams> = LazyLock::new(|| {
    let (samples, frame_len) = sampling_stream(false);
    let (changing, _) = sampling_stream(true);
    assert_eq!(frame_len, 11 + 10 * (4 + 4) + 10 * (4 + 8), "20 values: 10 INT, 10 LONG");
    let delimited = length_delimited_stream(frame_len);
    assert_eq!(delimited.len(), samples.len(), "same bytes in both streams");
    let mut primed = InspectorCodec::default();
    hello().headers.iter().for_each(|h| primed.learn(h));
    Streams { frame_len, samples, changing, delimited, primed }
});

/// The largest Hello the default limit accepts (4,000 counters with long names) and a Sampling message with a
/// value for each.
static LARGEST: LazyLock<BytesMut> = LazyLock::new(|| {
    let headers: Vec<Header> = (0..4000)
        .map(|index| Header {
            category: Category::Jit,
            name: format!("{index:0>230}"),
            kind: CounterType::Long,
            unit: Unit::None,
            variance: Variance::Variable,
            index,
        })
        .collect();
    let mut wire = BytesMut::new();
    encode_agent_message(&AgentMessage::Hello(Hello { version: PROTOCOL_VERSION, headers }), &mut wire)
        .unwrap();
    assert!(wire.len() <= Limits::default().max_message_len && wire.len() > 1_000_000, "{}", wire.len());
    let values = (0..4000)
        .map(|index| SampleValue { index, data: ValueData::Typed(CounterValue::Long(index.into())) })
        .collect();
    encode_sample(&Sample { timestamp: 7, values }, &mut wire).unwrap();
    wire
});

/// Decodes `wire` fed `step` bytes per read; returns the number of messages (two).
fn trickle(wire: &[u8], step: usize) -> usize {
    let mut codec = InspectorCodec::default();
    let mut buf = BytesMut::new();
    let mut n = 0;
    for chunk in wire.chunks(step) {
        buf.extend_from_slice(chunk);
        while let Some(msg) = codec.decode_message(&mut buf).unwrap() {
            black_box(&msg);
            n += 1;
        }
    }
    assert_eq!(n, 2);
    n
}

fn decode_all(primed: &InspectorCodec, wire: &BytesMut) {
    let mut codec = primed.clone();
    let mut buf = wire.clone();
    let mut n = 0;
    while let Some(msg) = codec.decode_message(&mut buf).unwrap() {
        black_box(&msg);
        n += 1;
    }
    assert_eq!(n, FRAMES);
}

fn groups() -> Vec<Group> {
    let streams = &*STREAMS;
    let length_delimited = "tokio-util LengthDelimitedCodec";
    vec![
        Group::new(
            format!("decode {FRAMES} frames of {} bytes", streams.frame_len),
            Throughput::Elements(FRAMES as u64),
            20,
        )
        .case(
            Case::iter("mono sampling, 20 values", || decode_all(&STREAMS.primed, &STREAMS.samples))
                .vs(length_delimited),
        )
        .case(
            Case::iter("mono sampling, 20 values, layout changing every message", || {
                decode_all(&STREAMS.primed, &STREAMS.changing)
            })
            .vs(length_delimited),
        )
        .case(Case::iter(length_delimited, || {
            let mut codec = LengthDelimitedCodec::new();
            let mut buf = STREAMS.delimited.clone();
            let mut n = 0;
            while let Some(frame) = codec.decode(&mut buf).unwrap() {
                black_box(&frame);
                n += 1;
            }
            assert_eq!(n, FRAMES);
        })),
        Group::new("trickle_mono", Throughput::Bytes(LARGEST.len() as u64), 1)
            .flat(10)
            .case(Case::iter("whole", || trickle(&LARGEST, LARGEST.len())))
            .case(Case::iter("byte_per_read", || trickle(&LARGEST, 1)).vs("whole")),
    ]
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
