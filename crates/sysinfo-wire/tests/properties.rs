//! Property tests: wire round-trips, chunking independence, format-then-parse for every report, and
//! arbitrary bytes at any split point never panicking.

use bytes::BytesMut;
use proptest::prelude::*;
use sysinfo_wire::report::{
    Ack, BlockedOn, ChannelRow, Channels, Counter, CpuShare, CriticalProcess, HeapSummary, HeapTag,
    Heartbeat, Histogram, Kstat, Memstat, ProcState, ProcessMemory, Ps, PsRow, Trace, TraceEntry, Watchdog,
    HEAP_TAGS, HIST_BUCKETS, IPC_LATENCY_TITLE, KSTAT_COUNTERS, SCHED_LATENCY_TITLE,
};
use sysinfo_wire::wire::{from_bytes, to_bytes, WireBytes};
use sysinfo_wire::{
    chunk_text, BootRequest, BootResponse, ChannelId, End, Frame, Message, NewConnection, Reassembler,
    Report, SysinfoCommand,
};
use sysinfo_wire::{decode_frame, encode_frame};

fn command() -> impl Strategy<Value = SysinfoCommand> {
    (0u8..9).prop_map(|t| SysinfoCommand::from_tag(t).unwrap())
}

fn short_string() -> impl Strategy<Value = String> {
    "\\PC{0,40}"
}

fn boot_request() -> impl Strategy<Value = BootRequest> {
    prop_oneof![
        short_string().prop_map(|name| BootRequest::ConnectService { name }),
        (
            short_string(),
            prop::collection::vec(any::<u8>(), 0..50),
            prop::collection::vec(any::<u8>(), 0..50),
            any::<bool>()
        )
            .prop_map(|(path, a, n, suspended)| BootRequest::Spawn {
                path,
                args: WireBytes(a),
                ns_overrides: WireBytes(n),
                suspended
            }),
        Just(BootRequest::GetArgs),
    ]
}

fn boot_response() -> impl Strategy<Value = BootResponse> {
    prop_oneof![
        Just(BootResponse::Ok),
        short_string().prop_map(|message| BootResponse::Error { message }),
        prop::collection::vec(any::<u8>(), 0..100).prop_map(|a| BootResponse::Args { args: WireBytes(a) }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (prop::collection::vec(any::<u8>(), 0..=1024), any::<u64>(), prop::collection::vec(any::<u32>(), 0..=4))
        .prop_map(|(data, pid, caps)| {
            let mut m = Message::with_data(data).unwrap().with_sender(pid);
            for c in caps {
                m.push_cap(ChannelId(c)).unwrap();
            }
            m
        })
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (any::<u32>(), message()).prop_map(|(c, message)| Frame::Message { channel: ChannelId(c), message }),
        any::<u32>().prop_map(|c| Frame::Close { channel: ChannelId(c) }),
    ]
}

/// Names as rvOS has them: printable, no leading or trailing space, no double space, at most 16 bytes.
fn name() -> impl Strategy<Value = String> {
    "[a-z0-9_.-]{1,6}( [a-z0-9_.-]{1,6})?( [a-z0-9-]{1,2})?"
}

fn blocked_on() -> impl Strategy<Value = BlockedOn> {
    prop_oneof![
        Just(BlockedOn::Nothing),
        any::<u64>().prop_map(|ep| BlockedOn::Recv { ep }),
        any::<u64>().prop_map(|ep| BlockedOn::Send { ep }),
        any::<u64>().prop_map(|ms| BlockedOn::Timer { ms }),
        Just(BlockedOn::Poll),
        Just(BlockedOn::Debug),
        Just(BlockedOn::SpawnSuspended),
        "wait-[a-z]{1,10}".prop_map(|text| BlockedOn::Other { text }),
    ]
}

fn ps() -> impl Strategy<Value = Ps> {
    let state = prop_oneof![
        Just(ProcState::Ready),
        Just(ProcState::Running),
        Just(ProcState::Blocked),
        Just(ProcState::Dead)
    ];
    let row = (0u64..100_000, state, 0u32..10_000, 0u32..10_000, any::<u64>(), blocked_on(), name())
        .prop_map(|(pid, state, a, b, mem_kib, blocked_on, name)| PsRow {
            pid,
            state,
            cpu_1s: CpuShare { tenths: a },
            cpu_1m: CpuShare { tenths: b },
            mem_kib,
            blocked_on,
            name: name.into(),
        });
    prop::collection::vec(row, 0..30).prop_map(|processes| Ps { processes, unknown: vec![] })
}

fn memstat() -> impl Strategy<Value = Memstat> {
    let heap =
        prop::option::of((any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(t, u, p, f)| HeapSummary { total_kib: t, used_kib: u, used_percent: p, free_kib: f },
        ));
    let tag = (0..HEAP_TAGS.len(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(i, c, p, a)| {
        HeapTag { tag: HEAP_TAGS[i].into(), current_kib: c, peak_kib: p, live_allocations: a }
    });
    let process = (any::<u64>(), name(), any::<u64>()).prop_map(|(pid, name, mem_kib)| ProcessMemory {
        pid,
        name: name.into(),
        mem_kib,
    });
    (heap, prop::collection::vec(tag, 0..32), prop::collection::vec(process, 0..30))
        .prop_map(|(heap, tags, processes)| Memstat { heap, tags, processes, unknown: vec![] })
}

fn trace() -> impl Strategy<Value = Trace> {
    let entry = (any::<u64>(), any::<u64>(), "\\PC{0,32}").prop_map(|(timestamp, pid, label)| TraceEntry {
        timestamp,
        pid,
        label: label.into(),
    });
    prop::collection::vec(entry, 0..60).prop_map(|entries| Trace { entries, unknown: vec![] })
}

fn kstat() -> impl Strategy<Value = Kstat> {
    prop_oneof![
        prop::array::uniform18(any::<u64>()).prop_map(|v| Kstat::from_values(&v)),
        prop::collection::vec(("[A-Z][A-Z0-9_]{0,30}", any::<u64>()), 0..25).prop_map(|v| Kstat {
            counters: v.into_iter().map(|(name, value)| Counter { name: name.into(), value }).collect(),
            unknown: vec![]
        }),
    ]
}

fn channels() -> impl Strategy<Value = Channels> {
    let row = (prop::array::uniform11(any::<u64>()), any::<bool>())
        .prop_map(|(n, closed)| ChannelRow::from_columns(n, closed));
    prop::collection::vec(row, 0..30).prop_map(|channels| Channels { channels, unknown: vec![] })
}

fn histogram_counts() -> impl Strategy<Value = [u64; HIST_BUCKETS]> {
    prop::collection::vec(
        prop_oneof![3 => Just(0u64), 2 => 0u64..1_000_000, 1 => 0u64..(u64::MAX / 64)],
        HIST_BUCKETS,
    )
    .prop_map(|v| v.try_into().unwrap())
}

fn watchdog() -> impl Strategy<Value = Watchdog> {
    let enabled = (
        prop::option::of(any::<u64>()),
        prop::collection::vec(
            ("[a-z]{1,12}", any::<u64>()).prop_map(|(name, ago_ms)| Heartbeat { name: name.into(), ago_ms }),
            0..6,
        ),
        prop::collection::vec(
            (0u64..100_000, name(), any::<u64>()).prop_map(|(pid, name, ago_ms)| CriticalProcess {
                pid,
                name: name.into(),
                ago_ms,
            }),
            0..6,
        ),
    )
        .prop_map(|(ticks, kernel_tasks, critical_processes)| Watchdog {
            enabled: true,
            timeout_secs: ticks.map(|t| t / 10_000_000),
            timeout_ticks: ticks,
            kernel_tasks,
            critical_processes,
            unknown: vec![],
        });
    prop_oneof![Just(Watchdog::default()), enabled]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn wire_values_round_trip(c in command(), req in boot_request(), resp in boot_response(),
                              pid in any::<u32>(), role in any::<u8>(), opt in any::<Option<u64>>(),
                              i in any::<i64>(), b in any::<bool>(), f in any::<f64>()) {
        prop_assert_eq!(from_bytes::<SysinfoCommand>(&to_bytes(&c).unwrap()).unwrap(), c);
        prop_assert_eq!(from_bytes::<BootRequest>(&to_bytes(&req).unwrap()).unwrap(), req);
        prop_assert_eq!(from_bytes::<BootResponse>(&to_bytes(&resp).unwrap()).unwrap(), resp);
        let nc = NewConnection { client_pid: pid, channel_role: role };
        prop_assert_eq!(from_bytes::<NewConnection>(&to_bytes(&nc).unwrap()).unwrap(), nc);
        prop_assert_eq!(from_bytes::<Option<u64>>(&to_bytes(&opt).unwrap()).unwrap(), opt);
        prop_assert_eq!(from_bytes::<i64>(&to_bytes(&i).unwrap()).unwrap(), i);
        prop_assert_eq!(from_bytes::<bool>(&to_bytes(&b).unwrap()).unwrap(), b);
        prop_assert_eq!(from_bytes::<f64>(&to_bytes(&f).unwrap()).unwrap().to_bits(), f.to_bits());
    }

    #[test]
    fn frames_round_trip_at_any_split(frames in prop::collection::vec(frame(), 0..8), cut in any::<prop::sample::Index>()) {
        let mut wire = BytesMut::new();
        for f in &frames {
            encode_frame(f, &mut wire);
        }
        let cut = cut.index(wire.len() + 1);
        let mut src = BytesMut::from(&wire[..cut]);
        let mut got = Vec::new();
        while let Some(f) = decode_frame(&mut src).unwrap() {
            got.push(f);
        }
        src.extend_from_slice(&wire[cut..]);
        while let Some(f) = decode_frame(&mut src).unwrap() {
            got.push(f);
        }
        prop_assert!(src.is_empty());
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn reassembly_does_not_depend_on_chunking(text in "\\PC{0,3000}", cuts in prop::collection::vec(1usize..1025, 1..20)) {
        let mut canonical = Reassembler::default();
        for c in chunk_text(text.as_bytes()) {
            canonical.push(c).unwrap();
        }
        canonical.push(&[]).unwrap();
        let canonical = canonical.finish();
        prop_assert_eq!(&canonical.text, &text);
        prop_assert_eq!(canonical.end, End::Sentinel);

        // Any other cutting, with or without the sentinel, gives the same text.
        let mut other = Reassembler::default();
        let mut rest = text.as_bytes();
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            other.push(&rest[..n]).unwrap();
            rest = &rest[n..];
            i += 1;
        }
        other.close();
        let other = other.finish();
        prop_assert_eq!(other.text, text);
        prop_assert!(!other.lossy);
        prop_assert_eq!(other.end, End::Closed);
    }

    #[test]
    fn ps_format_then_parse(r in ps()) {
        prop_assert_eq!(Ps::parse(&r.render()), r);
    }

    #[test]
    fn memstat_format_then_parse(r in memstat()) {
        prop_assert_eq!(Memstat::parse(&r.render()), r);
    }

    #[test]
    fn trace_format_then_parse(r in trace()) {
        prop_assert_eq!(Trace::parse(&r.render()), r);
    }

    #[test]
    fn kstat_format_then_parse(r in kstat()) {
        prop_assert_eq!(Kstat::parse(&r.render()), r);
    }

    #[test]
    fn channels_format_then_parse(r in channels()) {
        prop_assert_eq!(Channels::parse(&r.render()), r);
    }

    #[test]
    fn histograms_format_then_parse(counts in histogram_counts(), sched in any::<bool>()) {
        let title = if sched { SCHED_LATENCY_TITLE } else { IPC_LATENCY_TITLE };
        let h = Histogram::from_buckets(title, &counts);
        let text = h.render();
        prop_assert_eq!(Histogram::parse(&text), h.clone());
        let command = if sched { SysinfoCommand::SchedLatency } else { SysinfoCommand::IpcLatency };
        let report = Report::parse(command, &text);
        prop_assert_eq!(report.render(), text);
    }

    #[test]
    fn watchdog_format_then_parse(r in watchdog()) {
        prop_assert_eq!(Watchdog::parse(&r.render()), r);
    }

    #[test]
    fn trace_clear_format_then_parse(ok in any::<bool>()) {
        let ack = Ack { ok, unknown: vec![] };
        prop_assert_eq!(Ack::parse(&ack.render()), ack);
    }

    #[test]
    fn arbitrary_text_never_panics_any_parser(text in "(\\PC{0,40}\n){0,20}") {
        for command in SysinfoCommand::ALL {
            let report = Report::parse(command, &text);
            let _ = report.render();
        }
    }

    #[test]
    fn any_split_of_arbitrary_frames_bytes_never_panics(data in prop::collection::vec(any::<u8>(), 0..600), cut in any::<prop::sample::Index>()) {
        let cut = cut.index(data.len() + 1);
        let mut src = BytesMut::from(&data[..cut]);
        let mut broken = false;
        loop {
            match decode_frame(&mut src) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => { broken = true; break; }
            }
        }
        if !broken {
            src.extend_from_slice(&data[cut..]);
            while let Ok(Some(_)) = decode_frame(&mut src) {}
        }
    }
}

#[test]
fn kstat_default_names_are_the_kernels() {
    assert_eq!(KSTAT_COUNTERS.len(), 18);
    assert_eq!(KSTAT_COUNTERS[0], "SCHED_SWITCHES");
}
