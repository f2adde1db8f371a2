//! Framing + typed decoding of `Facts` messages against `serde_json::from_slice::<Value>` on the same
//! payloads, in the same run. Report the ratio baseline/typed (above 1 means the typed path is faster).
//! Both sides get the frame in a fresh `BytesMut` from an untimed set-up and drop their result untimed.
//!
//! `trickle_hmon`: the largest frame the default limit accepts (16 MiB), fed a byte per read against whole.
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use bench_harness::{Case, Group};
use std::sync::LazyLock;

use bytes::BytesMut;
use criterion::{black_box, BatchSize, Throughput};
use hmon::*;

/// A large `Threads` fact: 200 threads with 24-line stacks, every fourth one suspended with `⎕DMX`.
fn threads_payload() -> Vec<u8> {
    let threads: Vec<Thread> = (0..200)
        .map(|tid| {
            let suspended = tid % 4 == 3;
            Thread {
                tid: Some(tid),
                stack: Some(
                    (0..24)
                        .map(|line| StackEntry {
                            restricted: Some(false),
                            description: Some(format!(
                                "#.App.Worker{tid}.Step{line}[{}] r←Process ⍵",
                                line * 3
                            )),
                            ..Default::default()
                        })
                        .collect(),
                ),
                suspended: Some(suspended),
                state: Some(if suspended { "Suspended" } else { "Running" }.to_owned()),
                flags: Some("Normal".to_owned()),
                dmx: suspended.then(|| {
                    Some(Box::new(Dmx {
                        restricted: Some(false),
                        category: Some("Domain".to_owned()),
                        dm: Some(vec!["DOMAIN ERROR".into(), "Step0[0] r←1÷0".into(), "           ∧".into()]),
                        em: Some("DOMAIN ERROR".to_owned()),
                        en: Some(11),
                        enx: Some(0),
                        internal_location: Some(serde_json::json!(["arith.c", 1234])),
                        vendor: Some("Dyalog".to_owned()),
                        message: Some(String::new()),
                        os_error: Some(serde_json::json!([0, 0, ""])),
                        ..Default::default()
                    }))
                }),
                exception: suspended.then_some(None),
                ..Default::default()
            }
        })
        .collect();
    let facts = Response::Facts(Facts {
        uid: Some("poll-1".into()),
        interval: Some(1000),
        facts: Some(vec![Fact::new(FactValue::Threads(threads))]),
        ..Default::default()
    });
    serde_json::to_vec(&facts).unwrap()
}

fn thread_count_payload() -> Vec<u8> {
    br#"["Facts",{"UID":"xx","Interval":5000,"Facts":[{"ID":6,"Name":"ThreadCount","Value":{"Total":1,"Suspended":0}}]}]"#
        .to_vec()
}

/// A payload and its frame.
struct Input {
    payload_len: usize,
    frame: bytes::Bytes,
}

fn input(payload: Vec<u8>) -> Input {
    let mut frame = BytesMut::new();
    encode_frame(&payload, &mut frame).unwrap();
    Input { payload_len: payload.len(), frame: frame.freeze() }
}

static THREADS_LARGE: LazyLock<Input> = LazyLock::new(|| input(threads_payload()));
static THREAD_COUNT_SMALL: LazyLock<Input> = LazyLock::new(|| input(thread_count_payload()));
/// The largest frame the default limit accepts.
static LARGEST: LazyLock<BytesMut> = LazyLock::new(|| {
    let payload = vec![b'x'; DEFAULT_MAX_FRAME_LEN as usize - HEADER_LEN];
    let mut wire = BytesMut::new();
    encode_frame(&payload, &mut wire).unwrap();
    assert_eq!(wire.len(), DEFAULT_MAX_FRAME_LEN as usize);
    wire
});

/// Frames `wire` fed `step` bytes per read; returns the number of frames (one).
fn trickle(wire: &[u8], step: usize) -> usize {
    let mut buf = BytesMut::new();
    let mut frames = 0;
    for piece in wire.chunks(step) {
        buf.extend_from_slice(piece);
        while let Some(frame) = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap() {
            black_box(&frame);
            frames += 1;
        }
    }
    assert_eq!(frames, 1);
    frames
}

fn groups() -> Vec<Group> {
    let mut groups = Vec::new();
    for (name, input, count_iters) in
        [("threads_large", &THREADS_LARGE, 5), ("thread_count_small", &THREAD_COUNT_SMALL, 200)]
    {
        let setup = || BytesMut::from(&input.frame[..]);
        groups.push(
            Group::new(name, Throughput::Bytes(input.payload_len as u64), count_iters)
                .case(
                    Case::batched("hmon_frame_and_typed_decode", BatchSize::SmallInput, setup, |mut buf| {
                        let payload = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().unwrap();
                        decode_payload::<Response>(&payload).unwrap()
                    })
                    .vs("serde_json_value_baseline"),
                )
                // The same set-up and the same drop outside the timing as the typed path: only the parse counts.
                .case(Case::batched("serde_json_value_baseline", BatchSize::SmallInput, setup, |buf| {
                    serde_json::from_slice::<serde_json::Value>(&buf[8..]).unwrap()
                })),
        );
    }
    groups.push(
        Group::new("trickle_hmon", Throughput::Bytes(DEFAULT_MAX_FRAME_LEN.into()), 1)
            .flat(10)
            .case(Case::iter("whole", || trickle(&LARGEST, LARGEST.len())))
            .case(Case::iter("byte_per_read", || trickle(&LARGEST, 1)).vs("whole")),
    );
    groups
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
