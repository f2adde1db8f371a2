//! Reassembling and parsing a full 16384-entry Trace and a 200-process Ps, against `str::lines().count()`
//! over the same text in the same run (the baseline; report the ratio of bytes/s).

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sysinfo_wire::report::{BlockedOn, CpuShare, ProcState, Ps, PsRow, Trace, TraceEntry};
use sysinfo_wire::{chunk_text, Message, Reassembler, Report, SysinfoCommand};

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

/// What the client does with the messages it received: keep their buffers, join them, parse.
fn reassemble_and_parse(command: SysinfoCommand, messages: Vec<Message>) -> Report {
    let mut r = Reassembler::default();
    for m in messages {
        if r.push_owned(m.into_data()).unwrap() {
            break;
        }
    }
    Report::parse(command, &r.finish().text)
}

fn bench(c: &mut Criterion) {
    for (name, command, text) in
        [("trace_16384", SysinfoCommand::Trace, trace_text()), ("ps_200", SysinfoCommand::Ps, ps_text())]
    {
        let messages = chunks(&text);
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(text.len() as u64));
        // The received messages are the input (cloned outside the timing, as the socket hands them over);
        // the report is dropped inside the timing, as a one-shot client drops it.
        group.bench_function("reassemble_parse", |b| {
            b.iter_batched(
                || messages.clone(),
                |m| drop(black_box(reassemble_and_parse(command, m))),
                BatchSize::LargeInput,
            )
        });
        group.bench_function("parse_only", |b| b.iter(|| Report::parse(command, black_box(&text))));
        group.bench_function("reassemble_only", |b| {
            b.iter(|| {
                let mut r = Reassembler::default();
                for m in black_box(&messages) {
                    r.push(m.data()).unwrap();
                }
                r.finish()
            })
        });
        group.bench_function("reassemble_owned_only", |b| {
            b.iter_batched(
                || messages.clone(),
                |messages| {
                    let mut r = Reassembler::default();
                    for m in messages {
                        r.push_owned(m.into_data()).unwrap();
                    }
                    r.finish()
                },
                BatchSize::LargeInput,
            )
        });
        group.bench_function("baseline_lines_count", |b| b.iter(|| black_box(text.as_str()).lines().count()));
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
