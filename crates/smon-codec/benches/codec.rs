//! 64 counters sampled 10,000 times with small deltas: smon encode/decode against the `tsz` crate
//! (Gorilla compression) on the same series, in the same run.
//!
//! `cargo bench -p smon-codec -- --warm-up-time 1 --measurement-time 3`
//! Throughput is in values (elements) per second; bytes per value are printed once at start.
//!
//! `trickle_smon`: three strings of 65,000 FF bytes (the longest the default limit accepts, each 16 FFs carrying
//! a stuffed FE), fed a byte per call against whole.
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use bench_harness::{count_mode, run_criterion, Case, Group};
use std::sync::LazyLock;

use bytes::BytesMut;
use criterion::{black_box, BatchSize, Throughput};
use smon_codec::{
    DecoderConfig, EncoderConfig, Sample, StreamDecoder, StreamEncoder, Update, UpdateRef, Value, ValueRef,
};
use tsz::stream::{BufferedReader, BufferedWriter};
use tsz::{DataPoint, Decode, Encode, StdDecoder, StdEncoder};

const COUNTERS: usize = 64;
const SAMPLES: usize = 10_000;
const VALUES: u64 = (COUNTERS * SAMPLES) as u64;
const START: u64 = 1_100_000_000;
const INTERVAL: u64 = 5;

/// `series[c][s]`: counter `c` at sample `s`, monotonically rising by small pseudo-random deltas.
fn series() -> Vec<Vec<u64>> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..COUNTERS)
        .map(|c| {
            let mut v = (c as u64 + 1) * 1_000_003;
            (0..SAMPLES)
                .map(|_| {
                    v += next() % 200;
                    v
                })
                .collect()
        })
        .collect()
}

fn names() -> Vec<String> {
    (0..COUNTERS).map(|c| format!("bench.counter.{c:02}")).collect()
}

/// One smon stream: per sample the `smon.time` timestamp, then the 64 counters.
#[allow(clippy::needless_range_loop)] // samples are the outer loop, series[c][s] the data layout
fn smon_encode(series: &[Vec<u64>], names: &[String]) -> BytesMut {
    let mut enc = StreamEncoder::new(EncoderConfig::default());
    let mut out = BytesMut::with_capacity(2 * VALUES as usize);
    for s in 0..SAMPLES {
        let t = Value::Unsigned(START + s as u64 * INTERVAL);
        enc.encode_parts("smon.time", &[], &t, &mut out).unwrap();
        for (c, name) in names.iter().enumerate() {
            enc.encode_parts(name, &[], &Value::Unsigned(series[c][s]), &mut out).unwrap();
        }
    }
    out
}

/// Decodes the stream with [`StreamDecoder::decode_with`] (borrowed updates, whole buffer per call),
/// returning the number of counter values (timestamps excluded) and a checksum.
fn smon_decode(wire: BytesMut) -> (u64, u64) {
    let mut buf = wire;
    let mut dec = StreamDecoder::new(DecoderConfig::default());
    let (mut n, mut sum) = (0u64, 0u64);
    dec.decode_with(&mut buf, |u| {
        if let UpdateRef::Value { value: ValueRef::Unsigned(v), name, .. } = u {
            if name != "smon.time" {
                n += 1;
                sum = sum.wrapping_add(v);
            }
        }
    })
    .unwrap();
    assert!(buf.is_empty());
    (n, sum)
}

/// One borrowed update per call, with [`StreamDecoder::decode_eof_ref`].
fn smon_decode_ref(wire: BytesMut) -> (u64, u64) {
    let mut buf = wire;
    let mut dec = StreamDecoder::new(DecoderConfig::default());
    let (mut n, mut sum) = (0u64, 0u64);
    while let Some(u) = dec.decode_eof_ref(&mut buf).unwrap() {
        if let UpdateRef::Value { value: ValueRef::Unsigned(v), name, .. } = u {
            if name != "smon.time" {
                n += 1;
                sum = sum.wrapping_add(v);
            }
        }
    }
    (n, sum)
}

/// The same with owned [`Update`]s (a name `Arc` and an index `Vec` per value).
fn smon_decode_owned(wire: BytesMut) -> (u64, u64) {
    let mut buf = wire;
    let mut dec = StreamDecoder::new(DecoderConfig::default());
    let (mut n, mut sum) = (0u64, 0u64);
    while let Some(u) = dec.decode_eof(&mut buf).unwrap() {
        if let Update::Value { value: Value::Unsigned(v), name, .. } = u {
            if &*name != "smon.time" {
                n += 1;
                sum = sum.wrapping_add(v);
            }
        }
    }
    (n, sum)
}

/// One Gorilla stream per counter (Gorilla compresses one series at a time), timestamps included.
fn tsz_encode(series: &[Vec<u64>]) -> Vec<Box<[u8]>> {
    series
        .iter()
        .map(|values| {
            let mut enc = StdEncoder::new(START, BufferedWriter::new());
            for (s, &v) in values.iter().enumerate() {
                enc.encode(DataPoint::new(START + s as u64 * INTERVAL, v as f64));
            }
            enc.close()
        })
        .collect()
}

fn tsz_decode(streams: Vec<Box<[u8]>>) -> (u64, u64) {
    let (mut n, mut sum) = (0u64, 0u64);
    for bytes in streams {
        let mut dec = StdDecoder::new(BufferedReader::new(bytes));
        while let Ok(dp) = dec.next() {
            n += 1;
            sum = sum.wrapping_add(dp.get_value() as u64);
        }
    }
    (n, sum)
}

static SERIES: LazyLock<Vec<Vec<u64>>> = LazyLock::new(series);
static NAMES: LazyLock<Vec<String>> = LazyLock::new(names);
static SMON: LazyLock<BytesMut> = LazyLock::new(|| smon_encode(&SERIES, &NAMES));
static GORILLA: LazyLock<Vec<Box<[u8]>>> = LazyLock::new(|| tsz_encode(&SERIES));

/// Three samples of strings of 65,000 FF bytes.
static LONGEST: LazyLock<BytesMut> = LazyLock::new(|| {
    let mut enc = StreamEncoder::default();
    let mut wire = BytesMut::new();
    for i in 0..3 {
        let text = vec![0xff; 65_000];
        enc.encode(&Sample::new(format!("big.s{i}"), [], &text[..]), &mut wire).unwrap();
    }
    wire
});

/// Decodes `wire` fed `step` bytes per call; returns the number of updates.
fn trickle(wire: &[u8], step: usize) -> usize {
    let mut dec = StreamDecoder::default();
    let mut buf = BytesMut::new();
    let mut n = 0;
    for piece in wire.chunks(step) {
        buf.extend_from_slice(piece);
        while let Some(u) = dec.decode(&mut buf).unwrap() {
            black_box(&u);
            n += 1;
        }
    }
    assert_eq!(n, 7, "the stream's resync, and a definition and a value per string");
    n
}

fn groups() -> Vec<Group> {
    let (decode_tsz, encode_tsz) = ("decode/tsz", "encode/tsz");
    let smon = || SMON.clone();
    vec![
        Group::new(format!("{COUNTERS}x{SAMPLES}"), Throughput::Elements(VALUES), 2)
            .sample_size(10)
            .case(Case::iter("encode/smon", || black_box(smon_encode(&SERIES, &NAMES)).len()).vs(encode_tsz))
            .case(Case::iter(encode_tsz, || black_box(tsz_encode(&SERIES)).len()))
            .case(
                Case::batched("decode/smon", BatchSize::LargeInput, smon, |w| black_box(smon_decode(w)))
                    .vs(decode_tsz),
            )
            .case(
                Case::batched("decode_ref/smon", BatchSize::LargeInput, smon, |w| {
                    black_box(smon_decode_ref(w))
                })
                .vs(decode_tsz),
            )
            .case(
                Case::batched("decode_owned/smon", BatchSize::LargeInput, smon, |w| {
                    black_box(smon_decode_owned(w))
                })
                .vs(decode_tsz),
            )
            .case(Case::batched(
                decode_tsz,
                BatchSize::LargeInput,
                || GORILLA.clone(),
                |g| black_box(tsz_decode(g)),
            )),
        Group::new("trickle_smon", Throughput::Bytes(LONGEST.len() as u64), 1)
            .flat(10)
            .case(Case::iter("whole", || trickle(&LONGEST, LONGEST.len())))
            .case(Case::iter("byte_per_call", || trickle(&LONGEST, 1)).vs("whole")),
    ]
}

/// The round trips agree before anything is measured; the sizes are printed beside the times.
fn check_and_print_sizes() {
    let (series, smon, gorilla) = (&*SERIES, &*SMON, &*GORILLA);
    let expected: u64 = series.iter().flatten().fold(0u64, |a, &v| a.wrapping_add(v));
    assert_eq!(smon_decode(smon.clone()), (VALUES, expected), "smon round trip");
    assert_eq!(smon_decode_ref(smon.clone()), (VALUES, expected), "smon round trip (ref)");
    assert_eq!(smon_decode_owned(smon.clone()), (VALUES, expected), "smon round trip (owned)");
    assert_eq!(tsz_decode(gorilla.clone()), (VALUES, expected), "tsz round trip");
    let smon_bpv = smon.len() as f64 / VALUES as f64;
    let tsz_bytes: usize = gorilla.iter().map(|b| b.len()).sum();
    let tsz_bpv = tsz_bytes as f64 / VALUES as f64;
    println!(
        "bytes/value: smon {smon_bpv:.3} ({} bytes), tsz {tsz_bpv:.3} ({tsz_bytes} bytes), smon/tsz {:.3}",
        smon.len(),
        smon_bpv / tsz_bpv
    );
}

fn main() {
    if count_mode(env!("CARGO_PKG_NAME"), groups) {
        return;
    }
    check_and_print_sizes();
    run_criterion(groups);
}
