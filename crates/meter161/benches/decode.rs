//! Decoding sys161 `DATA` lines (11 u64 fields) against tokio-util's `LinesCodec` splitting the same
//! bytes into `String`s, in the same run. Report `meter161/decode` over `LinesCodec` in lines/s.
//!
//! `trickle_meter161`: the longest line the default limits accept, fed a byte per read against whole.
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use bench_harness::{Case, Group};
use std::sync::LazyLock;

use bytes::BytesMut;
use criterion::{black_box, BatchSize, Throughput};
use meter161::{ClientCodec, ServerMessage, Session, DEFAULT_MAX_LINE, SYS161_FIELDS};
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

/// The longest line the default limits accept: DATA and 255 fields of 15 digits (4086 bytes with CRLF).
fn longest_line() -> Vec<u8> {
    let mut line = b"DATA".to_vec();
    for i in 0..255u64 {
        line.extend_from_slice(format!(" {:015}", i * 1_000_000_007).as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    assert!(line.len() <= DEFAULT_MAX_LINE);
    line
}

static BYTES: LazyLock<Vec<u8>> = LazyLock::new(data_lines);
static LONGEST: LazyLock<Vec<u8>> = LazyLock::new(longest_line);

/// Decodes `input` fed `step` bytes per read, as a socket might hand it over; returns the message count.
fn trickle(input: &[u8], step: usize) -> usize {
    let mut codec = ClientCodec::default();
    let mut buf = BytesMut::new();
    let mut n = 0;
    for chunk in input.chunks(step) {
        buf.extend_from_slice(chunk);
        while let Some(msg) = codec.decode(&mut buf).unwrap() {
            black_box(&msg);
            n += 1;
        }
    }
    assert_eq!(n, 1);
    n
}

fn groups() -> Vec<Group> {
    let buf = || BytesMut::from(&BYTES[..]);
    let lines_codec = "tokio-util/LinesCodec";
    vec![
        Group::new("data_lines", Throughput::Elements(LINES as u64), 10)
            .case(
                Case::batched("meter161/decode", BatchSize::LargeInput, buf, |mut buf| {
                    let mut codec = ClientCodec::default();
                    let mut n = 0;
                    while let Some(msg) = codec.decode(&mut buf).unwrap() {
                        black_box(&msg);
                        n += 1;
                    }
                    assert_eq!(n, LINES);
                })
                .vs(lines_codec),
            )
            .case(
                Case::batched("meter161/decode+deltas", BatchSize::LargeInput, buf, |mut buf| {
                    let mut codec = ClientCodec::default();
                    let mut session = Session::new();
                    session.handle(ServerMessage::Head(SYS161_FIELDS.map(String::from).to_vec())).unwrap();
                    while let Some(msg) = codec.decode(&mut buf).unwrap() {
                        black_box(session.handle(msg).unwrap());
                    }
                })
                .vs(lines_codec),
            )
            .case(Case::batched(lines_codec, BatchSize::LargeInput, buf, |mut buf| {
                let mut codec = LinesCodec::new();
                let mut n = 0;
                while let Some(line) = codec.decode(&mut buf).unwrap() {
                    black_box(&line);
                    n += 1;
                }
                assert_eq!(n, LINES);
            })),
        Group::new("trickle_meter161", Throughput::Bytes(LONGEST.len() as u64), 20)
            .case(Case::iter("whole", || trickle(&LONGEST, LONGEST.len())))
            .case(Case::iter("byte_per_read", || trickle(&LONGEST, 1)).vs("whole")),
    ]
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
