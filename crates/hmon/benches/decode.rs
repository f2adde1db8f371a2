//! Framing + typed decoding of `Facts` messages against `serde_json::from_slice::<Value>` on the same
//! payloads, in the same run. Report the ratio baseline/typed (above 1 means the typed path is faster).
//! Both sides get the frame in a fresh `BytesMut` from an untimed set-up and drop their result untimed.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
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

fn bench(c: &mut Criterion) {
    for (name, payload) in
        [("threads_large", threads_payload()), ("thread_count_small", thread_count_payload())]
    {
        let mut frame = BytesMut::new();
        encode_frame(&payload, &mut frame).unwrap();
        let frame = frame.freeze();
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(payload.len() as u64));
        group.bench_function("hmon_frame_and_typed_decode", |b| {
            b.iter_batched(
                || BytesMut::from(&frame[..]),
                |mut buf| {
                    let payload = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().unwrap();
                    decode_payload::<Response>(&payload).unwrap()
                },
                BatchSize::SmallInput,
            )
        });
        // The same set-up and the same drop outside the timing as the typed path: only the parse counts.
        group.bench_function("serde_json_value_baseline", |b| {
            b.iter_batched(
                || BytesMut::from(&frame[..]),
                |buf| serde_json::from_slice::<serde_json::Value>(&buf[8..]).unwrap(),
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
