//! Decoding Sampling messages with 20 values, against tokio-util's `LengthDelimitedCodec` decoding
//! frames of the same size, in the same run. Report: mono frames/s divided by length-delimited frames/s.
//! The first mono case is the usual one (consecutive samples with the same layout); the second makes
//! every message's layout differ from the previous one's, the decoder's worst case.

use bytes::{BufMut, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
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

fn bench(c: &mut Criterion) {
    let (samples, frame_len) = sampling_stream(false);
    let (changing, _) = sampling_stream(true);
    assert_eq!(frame_len, 11 + 10 * (4 + 4) + 10 * (4 + 8), "20 values: 10 INT, 10 LONG");
    let delimited = length_delimited_stream(frame_len);
    assert_eq!(delimited.len(), samples.len(), "same bytes in both streams");
    let mut primed = InspectorCodec::default();
    hello().headers.iter().for_each(|h| primed.learn(h));

    let mut group = c.benchmark_group(format!("decode {FRAMES} frames of {frame_len} bytes"));
    group.throughput(Throughput::Elements(FRAMES as u64));
    group.bench_function("mono sampling, 20 values", |b| {
        b.iter(|| {
            let mut codec = primed.clone();
            let mut buf = samples.clone();
            let mut n = 0;
            while let Some(msg) = codec.decode_message(&mut buf).unwrap() {
                black_box(&msg);
                n += 1;
            }
            assert_eq!(n, FRAMES);
        })
    });
    group.bench_function("mono sampling, 20 values, layout changing every message", |b| {
        b.iter(|| {
            let mut codec = primed.clone();
            let mut buf = changing.clone();
            let mut n = 0;
            while let Some(msg) = codec.decode_message(&mut buf).unwrap() {
                black_box(&msg);
                n += 1;
            }
            assert_eq!(n, FRAMES);
        })
    });
    group.bench_function("tokio-util LengthDelimitedCodec", |b| {
        b.iter(|| {
            let mut codec = LengthDelimitedCodec::new();
            let mut buf = delimited.clone();
            let mut n = 0;
            while let Some(frame) = codec.decode(&mut buf).unwrap() {
                black_box(&frame);
                n += 1;
            }
            assert_eq!(n, FRAMES);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
