//! Decoding sys161 `DATA` lines (11 u64 fields) against tokio-util's `LinesCodec` splitting the same
//! bytes into `String`s, in the same run. Report `meter161/decode` over `LinesCodec` in lines/s.

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use meter161::{ClientCodec, ServerMessage, Session, SYS161_FIELDS};
use tokio_util::codec::{Decoder, LinesCodec};

const LINES: usize = 10_000;

/// `LINES` DATA lines as sys161 writes them, with values growing like a busy machine's.
fn data_lines() -> Vec<u8> {
    let mut out = BytesMut::new();
    let mut values =
        [5_968_289_383u64, 149_100_000, 3_000_000, 12_000, 40_000_000, 4_294_960_000, 9000, 800, 5000, 30, 2];
    let steps = [200_090_880u64, 5_002_272, 1_234_567, 3_210, 4_567_890, 211, 1_503, 61, 40, 3, 1];
    for _ in 0..LINES {
        meter161::encode_server(&ServerMessage::Data(values.to_vec()), &mut out).unwrap();
        for (v, s) in values.iter_mut().zip(steps) {
            *v = v.wrapping_add(s);
        }
    }
    out.to_vec()
}

fn bench(c: &mut Criterion) {
    let bytes = data_lines();
    let mut group = c.benchmark_group("data_lines");
    group.throughput(Throughput::Elements(LINES as u64));

    group.bench_function("meter161/decode", |b| {
        b.iter_batched(
            || BytesMut::from(&bytes[..]),
            |mut buf| {
                let mut codec = ClientCodec::default();
                let mut n = 0;
                while let Some(msg) = codec.decode(&mut buf).unwrap() {
                    black_box(&msg);
                    n += 1;
                }
                assert_eq!(n, LINES);
            },
            BatchSize::LargeInput,
        )
    });

    group.bench_function("meter161/decode+deltas", |b| {
        b.iter_batched(
            || BytesMut::from(&bytes[..]),
            |mut buf| {
                let mut codec = ClientCodec::default();
                let mut session = Session::new();
                session.handle(ServerMessage::Head(SYS161_FIELDS.map(String::from).to_vec())).unwrap();
                while let Some(msg) = codec.decode(&mut buf).unwrap() {
                    black_box(session.handle(msg).unwrap());
                }
            },
            BatchSize::LargeInput,
        )
    });

    group.bench_function("tokio-util/LinesCodec", |b| {
        b.iter_batched(
            || BytesMut::from(&bytes[..]),
            |mut buf| {
                let mut codec = LinesCodec::new();
                let mut n = 0;
                while let Some(line) = codec.decode(&mut buf).unwrap() {
                    black_box(&line);
                    n += 1;
                }
                assert_eq!(n, LINES);
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
