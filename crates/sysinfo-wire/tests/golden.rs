//! The notes' hex vectors and rendered report examples, as named tests.

use sysinfo_wire::report::{
    Ack, BlockedOn, ChannelRow, Channels, CpuShare, HeapTag, Histogram, Kstat, Memstat, ProcState, Ps, PsRow,
    Trace, TraceEntry, Watchdog, HIST_BUCKETS, SCHED_LATENCY_TITLE,
};
use sysinfo_wire::wire::{from_bytes, to_bytes, Reader, Wire, Writer};
use sysinfo_wire::{
    chunk_text, BootRequest, BootResponse, NewConnection, Report, SysinfoCommand, WireError,
    UNKNOWN_COMMAND_TEXT,
};

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

fn round_trip<T: Wire + PartialEq + std::fmt::Debug>(value: T, bytes: &str) {
    let bytes = hex(bytes);
    assert_eq!(to_bytes(&value).unwrap(), bytes, "{value:?}");
    assert_eq!(from_bytes::<T>(&bytes).unwrap(), value);
}

#[test]
fn sysinfo_commands_are_one_tag_byte() {
    let expected = ["00", "01", "02", "03", "04", "05", "06", "07", "08"];
    for (command, hex) in SysinfoCommand::ALL.into_iter().zip(expected) {
        round_trip(command, hex);
        assert_eq!(command.request(), to_bytes(&command).unwrap(), "{command:?}");
    }
}

#[test]
fn boot_connect_service_sysinfo() {
    round_trip(BootRequest::ConnectService { name: "sysinfo".into() }, "00 07 00 73 79 73 69 6e 66 6f");
}

#[test]
fn boot_response_ok_and_error() {
    round_trip(BootResponse::Ok, "00");
    round_trip(BootResponse::Error { message: "not found".into() }, "01 09 00 6e 6f 74 20 66 6f 75 6e 64");
}

#[test]
fn new_connection_struct() {
    round_trip(NewConnection { client_pid: 5, channel_role: 0 }, "05 00 00 00 00");
}

#[test]
fn mixed_primitives() {
    let bytes = hex("34 12 ef be ad de 01 00 00 00 00 00 00 00 02 00 61 62 01");
    let mut w = Writer::new();
    0x1234u16.encode(&mut w).unwrap();
    0xdead_beefu32.encode(&mut w).unwrap();
    1u64.encode(&mut w).unwrap();
    "ab".to_owned().encode(&mut w).unwrap();
    true.encode(&mut w).unwrap();
    assert_eq!(w.into_bytes(), bytes);
    let mut r = Reader::new(&bytes);
    assert_eq!(u16::decode(&mut r).unwrap(), 0x1234);
    assert_eq!(u32::decode(&mut r).unwrap(), 0xdead_beef);
    assert_eq!(u64::decode(&mut r).unwrap(), 1);
    assert_eq!(String::decode(&mut r).unwrap(), "ab");
    assert!(bool::decode(&mut r).unwrap());
    assert_eq!(r.position(), 19);
}

#[test]
fn option_some_and_usize() {
    round_trip(Some(5u32), "01 05 00 00 00");
    round_trip(7usize, "07 00 00 00 00 00 00 00");
}

#[test]
fn sysinfo_command_decode_cases() {
    assert!(matches!(from_bytes::<SysinfoCommand>(&[]), Err(WireError::BufferUnderflow { .. })));
    assert_eq!(from_bytes::<SysinfoCommand>(&[0x09]), Err(WireError::InvalidTag(9)));
    assert_eq!(from_bytes::<SysinfoCommand>(&[0xff]), Err(WireError::InvalidTag(255)));
    assert_eq!(from_bytes::<SysinfoCommand>(&[0x08]), Ok(SysinfoCommand::Watchdog));
    assert_eq!(from_bytes::<SysinfoCommand>(&[0x00, 0xff, 0xff]), Ok(SysinfoCommand::Ps));
    assert_eq!(from_bytes::<SysinfoCommand>(b"PS"), Err(WireError::InvalidTag(0x50)));
}

#[test]
fn chunk_lengths_1023_1024_1025_2048_and_empty() {
    for (len, expected) in
        [(1023, vec![1023]), (1024, vec![1024]), (1025, vec![1024, 1]), (2048, vec![1024, 1024]), (0, vec![])]
    {
        let text = vec![b'x'; len];
        let lengths: Vec<usize> = chunk_text(&text).map(<[u8]>::len).collect();
        assert_eq!(lengths, expected, "{len} bytes");
    }
}

#[test]
fn ps_rows_byte_for_byte() {
    let rows = [
        (
            PsRow {
                pid: 2,
                state: ProcState::Blocked,
                cpu_1s: CpuShare { tenths: 0 },
                cpu_1m: CpuShare { tenths: 1 },
                mem_kib: 16,
                blocked_on: BlockedOn::Recv { ep: 4 },
                name: "serial-con".into(),
            },
            "    2  Blocked    0.0%   0.1%    16K  recv(ep 4)     serial-con",
        ),
        (
            PsRow {
                pid: 0,
                state: ProcState::Ready,
                cpu_1s: CpuShare::default(),
                cpu_1m: CpuShare::default(),
                mem_kib: 0,
                blocked_on: BlockedOn::Nothing,
                name: "idle".into(),
            },
            "    0  Ready      0.0%   0.0%     0K                 idle",
        ),
    ];
    for (row, line) in rows {
        let ps = Ps { processes: vec![row], unknown: vec![] };
        let text = ps.render();
        let expected = format!(
            "  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\n  ---  --------  -----  -----  ------  \
             -------------  ----------------\n{line}\n"
        );
        assert_eq!(text, expected);
        assert_eq!(Ps::parse(&text), ps);
    }
    assert_eq!(CpuShare::from_ewma(10_000).to_string(), "100.0%");
    assert_eq!(CpuShare::from_ewma(1234).to_string(), "12.3%");
}

#[test]
fn memstat_tag_row_and_heap_line() {
    let m = Memstat {
        heap: Some(sysinfo_wire::report::HeapSummary {
            total_kib: 4096,
            used_kib: 312,
            used_percent: 7,
            free_kib: 3784,
        }),
        tags: vec![HeapTag { tag: "IPC_".into(), current_kib: 128, peak_kib: 256, live_allocations: 23 }],
        processes: vec![],
        unknown: vec![],
    };
    let text = m.render();
    assert_eq!(
        text,
        "Kernel heap: 4096K total, 312K used (7%), 3784K free\n  Tag     Current    Peak  Allocs\n  ----  ---------  \
         ------  ------\n  IPC_      128K   256K      23\n\nProcess memory:\n  PID  NAME              MEM\n  ---  \
         ----------------  ------\n"
    );
    assert_eq!(Memstat::parse(&text), m);
}

#[test]
fn memstat_spec_example_parses() {
    let text = "Kernel heap: 1024K total, 312K used (30%), 712K free\n  Tag     Current    Peak  Allocs\n  ----  \
                ---------  ------  ------\n  ????       96K   128K      38\n  IPC_      128K   256K      23\n  SCHD       \
                32K    32K       2\n  PGTB       48K    48K      12\n\nProcess memory:\n  PID  NAME              \
                MEM\n  ---  ----------------  ------\n    0  idle                 0K\n    1  init               144K\n    \
                5  fs                 476K\n    6  shell-serial       140K\n";
    let m = Memstat::parse(text);
    assert!(m.unknown.is_empty(), "{:?}", m.unknown);
    assert_eq!(m.tags.len(), 4);
    assert_eq!(m.tags[0].tag, "????");
    assert_eq!(m.processes[3].name, "shell-serial");
    assert_eq!(m.processes[3].mem_kib, 140);
    assert_eq!(m.render(), text);
}

#[test]
fn kstat_row() {
    let k = Kstat::from_values(&[1234, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let text = k.render();
    assert_eq!(text.lines().count(), 18);
    assert_eq!(text.lines().next().unwrap(), "  SCHED_SWITCHES           1234");
    assert_eq!(text.lines().last().unwrap(), "  IRQ_PLIC_OTHER           0");
    assert_eq!(Kstat::parse(&text), k);
    assert_eq!(k.get("SCHED_SWITCHES"), Some(1234));
}

#[test]
fn channels_header_and_closed_row() {
    let c = Channels {
        channels: vec![ChannelRow {
            channel: 3,
            ep_a: 6,
            ep_b: 7,
            refs_a: 1,
            msgs_a: 10,
            bytes_a: 400,
            closed: true,
            ..ChannelRow::default()
        }],
        unknown: vec![],
    };
    let text = c.render();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "    CH   EP_A   EP_B    QA    QB  RC_A  RC_B   MSGS_A  BYTES_A   MSGS_B  BYTES_B"
    );
    assert_eq!(
        lines.next().unwrap(),
        "  ----  -----  -----  ----  ----  ----  ----  -------  -------  -------  -------"
    );
    assert_eq!(
        lines.next().unwrap(),
        "     3      6      7     0     0     1     0       10      400        0        0  (closed)"
    );
    assert_eq!(Channels::parse(&text), c);
}

#[test]
fn histogram_row_bounds_and_no_data() {
    let mut counts = [0u64; HIST_BUCKETS];
    counts[0] = 5;
    counts[3] = 20;
    counts[6] = 40;
    let h = Histogram::from_buckets(SCHED_LATENCY_TITLE, &counts);
    let text = h.render();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "  Scheduler run-queue latency");
    assert_eq!(lines[1], "            us                  count  distribution");
    let row = |lo_hi: &str, pad: usize, count: u64, bar: usize| {
        format!(
            "{}{lo_hi}{}{count}  |{}{}|",
            " ".repeat(13),
            " ".repeat(pad),
            "#".repeat(bar),
            " ".repeat(30 - bar)
        )
    };
    assert_eq!(lines[2], row("0 -> 0", 19, 5, 3));
    assert_eq!(lines[5], row("0 -> 1", 18, 20, 15));
    assert_eq!(lines[8], row("6 -> 12", 17, 40, 30));
    assert_eq!(lines.last().unwrap(), &"  total: 65");
    assert_eq!(lines.len(), 2 + 7 + 1);
    assert_eq!(Histogram::parse(&text), h);
    // The notes' example row: bucket 5 = [32, 64) ticks = 3 -> 6 µs.
    let mut one = [0u64; HIST_BUCKETS];
    one[5] = 40;
    let row = Histogram::from_buckets("IPC delivery latency", &one).render();
    assert_eq!(
        row.lines().nth(2).unwrap(),
        "             3 -> 6                  40  |##############################|"
    );
    let empty = Histogram::from_buckets(SCHED_LATENCY_TITLE, &[0; HIST_BUCKETS]);
    assert_eq!(empty.render(), "  Scheduler run-queue latency\n  (no data)\n");
    assert_eq!(Histogram::parse(&empty.render()), empty);
}

#[test]
fn trace_entry_empty_ring_and_trace_clear() {
    let t = Trace {
        entries: vec![TraceEntry { timestamp: 123_456_789, pid: 0, label: "process_list-enter".into() }],
        unknown: vec![],
    };
    assert_eq!(t.render(), "123456789: pid 0 hit process_list-enter\n");
    assert_eq!(Trace::parse(&t.render()), t);
    assert_eq!(Trace::default().render(), "(no trace entries)\n");
    assert_eq!(Trace::parse("(no trace entries)\n"), Trace::default());
    assert_eq!(Ack { ok: true, unknown: vec![] }.render(), "ok\n");
    assert_eq!(
        Report::parse(SysinfoCommand::TraceClear, "ok\n"),
        Report::TraceClear(Ack { ok: true, unknown: vec![] })
    );
}

#[test]
fn watchdog_disabled_and_enabled() {
    assert_eq!(Watchdog::default().render(), "Watchdog: disabled\n");
    assert_eq!(Watchdog::parse("Watchdog: disabled\n"), Watchdog::default());
    let text = concat!(
        "Watchdog: enabled\n",
        "  Timeout: 10s (100000000 ticks)\n",
        "  Kernel task heartbeats:\n",
        "    init         last heartbeat 12ms ago\n",
        "    sysinfo      last heartbeat 0ms ago\n",
        "  Critical user processes:\n",
        "    PID   5 fs               last heartbeat 300ms ago\n",
    );
    let w = Watchdog::parse(text);
    assert!(w.unknown.is_empty(), "{:?}", w.unknown);
    assert!(w.enabled);
    assert_eq!(w.timeout_ticks, Some(100_000_000));
    assert_eq!(w.kernel_tasks[1].name, "sysinfo");
    assert_eq!(w.critical_processes[0].pid, 5);
    assert_eq!(w.critical_processes[0].ago_ms, 300);
    assert_eq!(w.render(), text);
    let none =
        "Watchdog: enabled\n  Timeout: 10s (100000000 ticks)\n  Kernel task heartbeats:\n  Critical user \
                processes:\n    (none or scheduler locked)\n";
    let w = Watchdog::parse(none);
    assert!(w.unknown.is_empty() && w.critical_processes.is_empty());
    assert_eq!(w.render(), none);
}

#[test]
fn unknown_command_text_and_kept_unknown_lines() {
    assert_eq!(UNKNOWN_COMMAND_TEXT, "Unknown command\n");
    let ps = Ps::parse("  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\nsomething new\n");
    assert_eq!(ps.unknown.len(), 1);
    assert_eq!(ps.unknown[0].line, 2);
    assert_eq!(ps.unknown[0].text, "something new");
}

#[test]
fn spec_ps_example_parses_and_its_extra_space_is_kept_in_the_names() {
    // The spec's rows have one space more before the name than the kernel prints. A name may start with a
    // space (rvOS names a process after the last `/` of its path: `/bin/ lead` runs as ` lead`), so the
    // extra space is read as the name's, and the report prints back exactly as it came.
    let text = "  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\n  ---  --------  -----  -----  ------  \
                -------------  ----------------\n    0  Ready      0.0%   0.0%     0K                  idle\n    1  \
                Running   12.3%   8.5%   144K                  init\n    2  Blocked    0.0%   0.1%    16K  recv(ep 4)      \
                serial-con\n";
    let ps = Ps::parse(text);
    assert!(ps.unknown.is_empty(), "{:?}", ps.unknown);
    assert_eq!(ps.processes.len(), 3);
    assert_eq!(ps.processes[1].cpu_1s.fraction(), 0.123);
    assert_eq!(ps.processes[2].blocked_on, BlockedOn::Recv { ep: 4 });
    assert_eq!(ps.processes[0].name, " idle");
    assert_eq!(ps.processes[2].name, " serial-con");
    assert_eq!(ps.render(), text);
}

#[test]
fn a_process_name_starting_with_a_space_keeps_it() {
    let row = "    7  Running    0.5%  10.0%    16K                  lead\n";
    let text = format!("  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\n  ---  --------  -----  -----  ------  -------------  ----------------\n{row}");
    let ps = Ps::parse(&text);
    assert_eq!(ps.processes[0].name, " lead");
    assert_eq!(ps.render(), text, "the row prints back as the kernel printed it");
}

#[test]
fn trace_labels_keep_a_trailing_cr_and_a_split_label_prints_back_in_place() {
    use sysinfo_wire::report::Trace;
    // A label may hold any bytes: one ends in `\r`, one holds a `\n` (the kernel's text is then ambiguous:
    // the rest of that label reads as a line of its own, kept where it was).
    let text = "10: pid 1 hit cr\r\n20: pid 2 hit split\nrest of it\n30: pid 3 hit last\n";
    let trace = Trace::parse(text);
    assert_eq!(trace.entries.len(), 3);
    assert_eq!(&*trace.entries[0].label, "cr\r");
    assert_eq!(&*trace.entries[1].label, "split");
    assert_eq!(trace.unknown.len(), 1);
    assert_eq!((trace.unknown[0].line, trace.unknown[0].text.as_str()), (3, "rest of it"));
    assert_eq!(trace.render(), text, "every line prints back in its place");
}

#[test]
fn a_multibyte_blocked_on_text_pads_by_characters() {
    // The kernel's `{:<13}` pads to 13 characters: `é-wait` (7 bytes, 6 characters) is followed by 7 spaces,
    // so the name starts a byte later than with ASCII (found by fuzzing).
    let row = format!("    2  Blocked    0.0%   1.1%    16K  {:<13}  idle\n", "é-wait");
    let text = format!("  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\n  ---  --------  -----  -----  ------  -------------  ----------------\n{row}");
    let ps = Ps::parse(&text);
    assert_eq!(ps.processes[0].name, "idle");
    assert_eq!(ps.processes[0].blocked_on, BlockedOn::Other { text: "é-wait".into() });
    assert_eq!(ps.render(), text);
}
