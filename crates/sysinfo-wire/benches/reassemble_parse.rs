//! Reassembling and parsing a full 16384-entry Trace and a 200-process Ps, against `str::lines().count()`
//! over the same text in the same run (the baseline; report the ratio of bytes/s).
//!
//! `trickle_sysinfo`: the largest reply the default cap accepts (4 MiB in 1024-byte chunks and the sentinel),
//! its frames fed a byte per read into `decode_frame` and a `Reassembler`, against whole.
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use bench_harness::{Case, Group};
use std::sync::LazyLock;

use bytes::BytesMut;
use criterion::{black_box, BatchSize, Throughput};
use sysinfo_wire::report::{BlockedOn, CpuShare, ProcState, Ps, PsRow, Trace, TraceEntry};
use sysinfo_wire::{
    chunk_text, decode_frame, encode_frame, ChannelId, Frame, Message, Reassembler, Report, SysinfoCommand,
    DEFAULT_MAX_RESPONSE,
};

fn trace_text() -> String {
    const LABELS: [&str; 5] = ["ipc_send", "ipc_recv", "sched-switch", "process_list-enter", "???"];
    let entries = (0..16384u64)
        .map(|i| TraceEntry {
            timestamp: 123_456_789 + i * 1_337,
            pid: i % 23,
            label: LABELS[(i % 5) as usize].into(),
        })
        .collect();
    Trace { entries, unknown: Vec::new() }.render()
}

fn ps_text() -> String {
    let processes = (0..200u64)
        .map(|pid| PsRow {
            pid,
            state: [ProcState::Ready, ProcState::Running, ProcState::Blocked, ProcState::Dead]
                [(pid % 4) as usize],
            cpu_1s: CpuShare { tenths: (pid * 7 % 1001) as u32 },
            cpu_1m: CpuShare { tenths: (pid * 3 % 1001) as u32 },
            mem_kib: pid * 4 * 13,
            blocked_on: if pid % 4 == 2 { BlockedOn::Recv { ep: pid } } else { BlockedOn::Nothing },
            name: format!("proc-{pid}").into(),
        })
        .collect();
    Ps { processes, unknown: Vec::new() }.render()
}

fn chunks(text: &str) -> Vec<Message> {
    let mut v: Vec<Message> = chunk_text(text.as_bytes()).map(|c| Message::with_data(c).unwrap()).collect();
    v.push(Message::new());
    v
}

/// What the client does with the messages it received: keep their bytes, join them, parse.
fn reassemble_and_parse(command: SysinfoCommand, messages: Vec<Message>) -> Report {
    let mut r = Reassembler::default();
    for m in messages {
        if r.push_bytes(m.into_bytes()).unwrap() {
            break;
        }
    }
    Report::parse(command, &r.finish().text)
}

/// A report's text and the messages that carry it.
struct Input {
    text: String,
    messages: Vec<Message>,
}

fn input(text: String) -> Input {
    let messages = chunks(&text);
    Input { text, messages }
}

static TRACE: LazyLock<Input> = LazyLock::new(|| input(trace_text()));
static PS: LazyLock<Input> = LazyLock::new(|| input(ps_text()));

/// The largest reply the default cap accepts, framed as the transport sends it.
static LARGEST: LazyLock<BytesMut> = LazyLock::new(|| {
    let text = "0123456789abcdef".repeat(DEFAULT_MAX_RESPONSE / 16);
    let mut wire = BytesMut::new();
    for chunk in chunk_text(text.as_bytes()).map(|c| c.to_vec()).chain([Vec::new()]) {
        let message = Message::with_data(chunk).unwrap();
        encode_frame(&Frame::Message { channel: ChannelId(1), message }, &mut wire);
    }
    wire
});

/// Decodes the frames of `wire` fed `step` bytes per read into a reassembler; returns the text's length.
fn trickle(wire: &[u8], step: usize) -> usize {
    let mut buf = BytesMut::new();
    let mut reply = Reassembler::default();
    for piece in wire.chunks(step) {
        buf.extend_from_slice(piece);
        while let Some(Frame::Message { message, .. }) = decode_frame(&mut buf).unwrap() {
            reply.push(message.data()).unwrap();
        }
    }
    let len = reply.finish().text.len();
    assert_eq!(len, DEFAULT_MAX_RESPONSE);
    len
}

fn groups() -> Vec<Group> {
    let mut groups = Vec::new();
    for (name, command, input, count_iters) in
        [("trace_16384", SysinfoCommand::Trace, &TRACE, 5), ("ps_200", SysinfoCommand::Ps, &PS, 50)]
    {
        let messages = || input.messages.clone();
        let baseline = "baseline_lines_count";
        groups.push(
            Group::new(name, Throughput::Bytes(input.text.len() as u64), count_iters)
                // The received messages are the input (cloned outside the timing, as the socket hands them
                // over); the report is dropped inside the timing, as a one-shot client drops it.
                .case(
                    Case::batched("reassemble_parse", BatchSize::LargeInput, messages, move |m| {
                        drop(black_box(reassemble_and_parse(command, m)))
                    })
                    .vs(baseline),
                )
                .case(
                    Case::iter("parse_only", move || Report::parse(command, black_box(&input.text)))
                        .vs(baseline),
                )
                .case(
                    Case::iter("reassemble_only", || {
                        let mut r = Reassembler::default();
                        for m in black_box(&input.messages) {
                            r.push(m.data()).unwrap();
                        }
                        r.finish()
                    })
                    .vs(baseline),
                )
                .case(
                    Case::batched("reassemble_owned_only", BatchSize::LargeInput, messages, |messages| {
                        let mut r = Reassembler::default();
                        for m in messages {
                            r.push_owned(m.into_data()).unwrap();
                        }
                        r.finish()
                    })
                    .vs(baseline),
                )
                .case(Case::iter(baseline, || black_box(input.text.as_str()).lines().count())),
        );
    }
    groups.push(
        Group::new("trickle_sysinfo", Throughput::Bytes(LARGEST.len() as u64), 1)
            .flat(10)
            .case(Case::iter("whole", || trickle(&LARGEST, LARGEST.len())))
            .case(Case::iter("byte_per_read", || trickle(&LARGEST, 1)).vs("whole")),
    );
    groups
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
