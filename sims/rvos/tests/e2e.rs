//! The sysinfo-wire client against rvos-sim over real sockets (TCP on 127.0.0.1 port 0, Unix in a temp dir).

use std::time::Duration;

use rvos_sim::{Config, SimHandle, SystemConfig, INIT_PID, SYSINFO_PID};
use sim_common::{NumberedUnixListener, Shutdown};
use sysinfo_wire::report::{ProcState, TRACE_LABEL_MAX};
use sysinfo_wire::{
    BootRequest, ChannelId, Client, ClientConfig, ClientError, End, Endpoint, Message, Report, SysinfoCommand,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// rvos-sim serving on 127.0.0.1 (the shared harness), with its stats.
struct Running {
    addr: String,
    handle: SimHandle,
    server: sim_common::Running,
}

impl Running {
    async fn client(&self) -> Client {
        Client::connect(&Endpoint::Tcp(self.addr.clone()), ClientConfig::default()).await.unwrap()
    }

    async fn stop(self) {
        self.server.stop().await.unwrap();
    }
}

async fn start(config: Config) -> Running {
    let (sim, handle) = rvos_sim::start(config);
    let (server, addr) =
        sim_common::Running::spawn_tcp(|listener, shutdown| rvos_sim::serve(listener, sim, shutdown))
            .await
            .unwrap();
    Running { addr: addr.to_string(), handle, server }
}

fn small_trace() -> Config {
    Config { system: SystemConfig { trace_prefill: 50, ..SystemConfig::default() }, ..Config::default() }
}

#[tokio::test]
async fn every_command_including_watchdog() {
    let sim = start(small_trace()).await;
    let mut client = sim.client().await;
    for command in SysinfoCommand::ALL {
        let response = client.request(command).await.unwrap();
        assert_eq!(response.reply.end, End::Sentinel, "{command:?}");
        assert!(!response.reply.lossy);
        assert!(
            response.report.unknown_lines().is_empty(),
            "{command:?}: {:?}",
            response.report.unknown_lines()
        );
        assert_eq!(response.report.render(), response.reply.text, "{command:?}");
        match response.report {
            Report::Ps(ps) => {
                assert_eq!(ps.processes[0].name, "idle");
                assert_eq!(ps.processes[1].name, "init");
            }
            Report::Memstat(m) => assert_eq!(m.heap.unwrap().total_kib, 4096),
            Report::Trace(t) => {
                // Ps recorded its own enter/exit entries.
                assert!(t.entries.iter().any(|e| e.label == "process_list-enter" && e.pid == 0));
            }
            Report::TraceClear(ack) => assert!(ack.ok),
            Report::Kstat(k) => {
                assert_eq!(k.counters.len(), 18);
                assert!(k.get("CHANNELS_CREATED").unwrap() >= 4);
            }
            Report::Channels(c) => assert!(!c.channels.is_empty()),
            Report::SchedLatency(h) => assert_eq!(h.title, "Scheduler run-queue latency"),
            Report::IpcLatency(h) => assert_eq!(h.title, "IPC delivery latency"),
            Report::Watchdog(w) => {
                assert!(w.enabled);
                assert_eq!(w.timeout_secs, Some(10));
                assert_eq!(w.kernel_tasks.len(), 4);
            }
            Report::UnknownCommand => panic!("{command:?} was not understood"),
        }
    }
    assert_eq!(sim.handle.stats().replies, 9);
    assert_eq!(sim.handle.stats().channels_opened, 9);
    sim.stop().await;
}

#[tokio::test]
async fn a_disabled_watchdog_and_a_cleared_trace() {
    let config = Config {
        system: SystemConfig { watchdog: false, trace_prefill: 10, ..SystemConfig::default() },
        ..Config::default()
    };
    let sim = start(config).await;
    let mut client = sim.client().await;
    assert_eq!(client.request(SysinfoCommand::Watchdog).await.unwrap().reply.text, "Watchdog: disabled\n");
    assert_eq!(client.request(SysinfoCommand::TraceClear).await.unwrap().reply.text, "ok\n");
    sim.stop().await;
}

#[tokio::test]
async fn over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rvos.sock");
    let listener = NumberedUnixListener::new(tokio::net::UnixListener::bind(&path).unwrap());
    let shutdown = Shutdown::new();
    let task = tokio::spawn(rvos_sim::run(listener, small_trace(), shutdown.clone()));
    let mut client = Client::connect(&Endpoint::Unix(path), ClientConfig::default()).await.unwrap();
    let response = client.request(SysinfoCommand::Ps).await.unwrap();
    let Report::Ps(ps) = response.report else { panic!("not ps") };
    assert!(ps.processes.len() >= 12);
    // The service formatting Ps is the one process on the CPU.
    let running: Vec<_> = ps.processes.iter().filter(|p| p.state == ProcState::Running).collect();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].name, "sysinfo");
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_full_16384_entry_trace_spans_hundreds_of_exact_chunks() {
    let sim = start(Config::default()).await;
    let mut client = sim.client().await;
    let ch = client.connect_service("sysinfo").await.unwrap();
    client.send(ch, Message::with_data(vec![0x02]).unwrap()).await.unwrap();
    let mut chunks = Vec::new();
    loop {
        let m = client.recv(ch).await.unwrap().expect("the sentinel comes before the close");
        assert_eq!(m.sender_pid(), SYSINFO_PID);
        assert!(m.caps().is_empty());
        if m.is_empty() {
            break;
        }
        chunks.push(m.into_data());
    }
    // After the sentinel the service closes the channel, and the client sees it.
    assert!(client.recv(ch).await.unwrap().is_none());
    assert!(chunks.len() >= 400, "{} chunks", chunks.len());
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c.len() == 1024));
    assert!(!chunks.last().unwrap().is_empty() && chunks.last().unwrap().len() <= 1024);
    let text = String::from_utf8(chunks.concat()).unwrap();
    let Report::Trace(trace) = Report::parse(SysinfoCommand::Trace, &text) else { panic!("not a trace") };
    assert_eq!(trace.entries.len(), 16384);
    assert!(trace.unknown.is_empty());
    assert!(trace.entries.iter().all(|e| e.label.len() <= TRACE_LABEL_MAX));
    assert!(trace.entries.iter().any(|e| e.label == "???"), "labels cut inside UTF-8 print as ???");

    // The high-level client gives the same, reassembled.
    let response = client.request(SysinfoCommand::Trace).await.unwrap();
    assert!(response.reply.chunks >= 400);
    let Report::Trace(again) = response.report else { panic!("not a trace") };
    assert_eq!(again.entries.len(), 16384);
    sim.stop().await;
}

#[tokio::test]
async fn undecodable_requests_get_unknown_command_and_trailing_bytes_are_ignored() {
    let sim = start(small_trace()).await;
    let mut client = sim.client().await;
    for request in [&[][..], &[0x09], &[0xff], b"PS"] {
        let reply = client.request_raw(request).await.unwrap();
        assert_eq!(reply.text, "Unknown command\n", "{request:02x?}");
        assert_eq!(reply.end, End::Sentinel);
        assert_eq!(reply.chunks, 1);
    }
    let reply = client.request_raw(&[0x00, 0xff, 0xff]).await.unwrap();
    assert!(reply.text.starts_with("  PID  STATE"));
    assert_eq!(sim.handle.stats().unknown_commands, 4);
    sim.stop().await;
}

#[tokio::test]
async fn boot_channel_vectors_and_errors() {
    let sim = start(small_trace()).await;
    let mut client = sim.client().await;
    // The notes' discovery vector, byte for byte.
    let connect = Message::with_data(b"\x00\x07\x00sysinfo".to_vec()).unwrap();
    client.send(ChannelId::BOOT, connect).await.unwrap();
    let reply = client.recv(ChannelId::BOOT).await.unwrap().unwrap();
    assert_eq!(reply.data(), [0x00]);
    assert_eq!(reply.caps().len(), 1);
    assert_ne!(reply.caps()[0], ChannelId::BOOT);
    assert_eq!(reply.sender_pid(), INIT_PID);

    for (service, message) in [("nope", "unknown service"), ("stdio", "use stdin/stdout")] {
        match client.connect_service(service).await {
            Err(ClientError::Boot { message: m, .. }) => assert_eq!(m, message),
            other => panic!("{service}: {other:?}"),
        }
    }
    for raw in [
        vec![],
        vec![0xff],
        vec![0x00, 0x09, 0x00, b'x'],
        sysinfo_wire::wire::to_bytes(&BootRequest::GetArgs).unwrap(),
    ] {
        client.send(ChannelId::BOOT, Message::with_data(raw.clone()).unwrap()).await.unwrap();
        let reply = client.recv(ChannelId::BOOT).await.unwrap().unwrap();
        assert_eq!(reply.data(), b"\x01\x0b\x00bad request", "{raw:02x?}");
        assert!(reply.caps().is_empty());
    }
    assert_eq!(sim.handle.stats().boot_errors, 6);
    sim.stop().await;
}

#[tokio::test]
async fn every_connect_service_returns_a_new_channel_and_the_limit_is_no_channels() {
    let sim = start(Config { max_channels_per_client: 2, ..small_trace() }).await;
    let mut client = sim.client().await;
    let a = client.connect_service("sysinfo").await.unwrap();
    let b = client.connect_service("sysinfo").await.unwrap();
    assert!(a != b && a != ChannelId::BOOT && b != ChannelId::BOOT);
    match client.connect_service("sysinfo").await {
        Err(ClientError::Boot { message, .. }) => assert_eq!(message, "no channels"),
        other => panic!("{other:?}"),
    }
    // Closing one frees a slot.
    client.close(a).await.unwrap();
    let mut sim_handle = sim.handle.clone();
    sim_handle.wait_for(|s| s.closed_before_request >= 1).await;
    let c = client.connect_service("sysinfo").await.unwrap();
    assert!(c != a && c != b);
    // A channel that is closed cannot be used any more.
    assert!(matches!(client.send(a, Message::new()).await, Err(ClientError::NotOpen(ch)) if ch == a));
    sim.stop().await;
}

#[tokio::test]
async fn a_request_that_never_comes_is_closed_at_the_deadline_without_a_message() {
    let sim = start(Config { request_deadline: Some(Duration::from_millis(200)), ..small_trace() }).await;
    let mut client = sim.client().await;
    let ch = client.connect_service("sysinfo").await.unwrap();
    assert!(client.recv(ch).await.unwrap().is_none(), "closed, with no response and no sentinel");
    assert_eq!(sim.handle.stats().deadlines_expired, 1);
    match client.read_reply(ch).await {
        Err(ClientError::NoReply { channel }) => assert_eq!(channel, ch),
        other => panic!("{other:?}"),
    }
    // The same connection still works.
    assert_eq!(client.request(SysinfoCommand::TraceClear).await.unwrap().reply.text, "ok\n");
    sim.stop().await;
}

#[tokio::test]
async fn a_second_command_on_the_same_channel_is_never_answered() {
    let sim = start(small_trace()).await;
    let mut client = sim.client().await;
    let ch = client.connect_service("sysinfo").await.unwrap();
    client.send(ch, Message::with_data(vec![0x03]).unwrap()).await.unwrap();
    let reply = client.read_reply(ch).await.unwrap();
    assert_eq!((reply.text.as_str(), reply.end), ("ok\n", End::Sentinel));
    client.send(ch, Message::with_data(vec![0x00]).unwrap()).await.unwrap();
    assert!(client.recv(ch).await.unwrap().is_none(), "the channel was closed after the sentinel");
    assert_eq!(sim.handle.stats().replies, 1);
    sim.stop().await;
}

/// A trace far bigger than any socket buffer, so the service is still sending when the client leaves.
fn huge_trace() -> Config {
    Config {
        system: SystemConfig { trace_capacity: 400_000, trace_prefill: 400_000, ..SystemConfig::default() },
        ..Config::default()
    }
}

#[tokio::test]
async fn a_client_that_closes_early_stops_the_reply_and_the_sim_carries_on() {
    let sim = start(huge_trace()).await;
    let mut handle = sim.handle.clone();
    let mut client = sim.client().await;

    // Closing before sending anything.
    let ch = client.connect_service("sysinfo").await.unwrap();
    client.close(ch).await.unwrap();
    handle.wait_for(|s| s.closed_before_request == 1).await;

    // Closing the channel after the first chunk.
    let ch = client.connect_service("sysinfo").await.unwrap();
    client.send(ch, Message::with_data(vec![0x02]).unwrap()).await.unwrap();
    assert_eq!(client.recv(ch).await.unwrap().unwrap().len(), 1024);
    client.close(ch).await.unwrap();
    handle.wait_for(|s| s.replies_abandoned == 1).await;

    // Dropping the whole connection mid-reply.
    let mut other = sim.client().await;
    let ch = other.connect_service("sysinfo").await.unwrap();
    other.send(ch, Message::with_data(vec![0x02]).unwrap()).await.unwrap();
    assert_eq!(other.recv(ch).await.unwrap().unwrap().len(), 1024);
    drop(other);
    handle.wait_for(|s| s.replies_abandoned == 2).await;

    // The first connection, with late chunks of its closed channel still in flight, still works.
    assert_eq!(client.request(SysinfoCommand::Watchdog).await.unwrap().reply.end, End::Sentinel);
    sim.stop().await;
}

#[tokio::test]
async fn misbehaving_clients_do_not_stop_the_others() {
    let sim = start(Config { request_deadline: None, ..huge_trace() }).await;
    let mut handle = sim.handle.clone();

    // Breaks the framing: dropped, with a protocol error counted.
    let mut garbage = tokio::net::TcpStream::connect(&sim.addr).await.unwrap();
    garbage.write_all(&[0x09, 0, 0, 0, 0]).await.unwrap();
    let mut sink = Vec::new();
    garbage.read_to_end(&mut sink).await.unwrap();
    assert!(sink.is_empty());
    handle.wait_for(|s| s.protocol_errors == 1).await;

    // Never sends its request (and there is no deadline), and another asks for a huge trace and never reads.
    let mut silent = sim.client().await;
    let _silent_ch = silent.connect_service("sysinfo").await.unwrap();
    let mut stuck = sim.client().await;
    let stuck_ch = stuck.connect_service("sysinfo").await.unwrap();
    stuck.send(stuck_ch, Message::with_data(vec![0x02]).unwrap()).await.unwrap();

    // Everyone else is served.
    let mut client = sim.client().await;
    for command in [SysinfoCommand::Ps, SysinfoCommand::Kstat, SysinfoCommand::Watchdog] {
        assert_eq!(client.request(command).await.unwrap().reply.end, End::Sentinel);
    }
    sim.stop().await;
}

#[tokio::test]
async fn the_client_times_out_instead_of_hanging_and_caps_the_reply_size() {
    // A peer that accepts and then says nothing at all.
    let mute = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = mute.local_addr().unwrap().to_string();
    let keep = tokio::spawn(async move { mute.accept().await.map(|(s, _)| s) });
    let config = ClientConfig { request_timeout: Duration::from_millis(100), ..ClientConfig::default() };
    let mut client = Client::connect(&Endpoint::Tcp(addr), config).await.unwrap();
    match client.request(SysinfoCommand::Ps).await {
        Err(ClientError::Timeout { after }) => assert_eq!(after, Duration::from_millis(100)),
        other => panic!("{other:?}"),
    }
    drop(keep.await.unwrap().unwrap());

    let sim = start(small_trace()).await;
    let tiny = ClientConfig { max_response: 100, ..ClientConfig::default() };
    let mut small = Client::connect(&Endpoint::Tcp(sim.addr.clone()), tiny).await.unwrap();
    match small.request(SysinfoCommand::Ps).await {
        Err(ClientError::Reassembly(e)) => assert!(e.to_string().contains("exceeds 100 bytes"), "{e}"),
        other => panic!("{other:?}"),
    }
    sim.stop().await;
}

#[tokio::test]
async fn connecting_to_nothing_is_a_clear_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    match Client::connect(&Endpoint::Tcp(addr.clone()), ClientConfig::default()).await {
        Err(ClientError::Connect { endpoint, .. }) => assert_eq!(endpoint, format!("tcp:{addr}")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_pipelined_batch_gets_every_reply_in_order() {
    let sim = start(small_trace()).await;
    let mut client = sim.client().await;
    let commands = [
        SysinfoCommand::Ps,
        SysinfoCommand::Memstat,
        SysinfoCommand::Kstat,
        SysinfoCommand::Channels,
        SysinfoCommand::SchedLatency,
        SysinfoCommand::IpcLatency,
        SysinfoCommand::Watchdog,
    ];
    let responses = client.request_many(&commands).await.unwrap();
    assert_eq!(responses.len(), commands.len());
    for (command, response) in commands.iter().zip(responses) {
        let response = response.unwrap();
        assert_eq!(response.command, *command);
        assert_eq!(response.reply.end, End::Sentinel, "{command:?}");
        assert!(response.report.unknown_lines().is_empty(), "{command:?}");
        assert_eq!(response.report.render(), response.reply.text, "{command:?}");
    }
    let mut handle = sim.handle.clone();
    handle.wait_for(|s| s.replies == 7).await;
    // Every channel was closed: a second batch on the same connection finds all its channels free.
    let again = client.request_many(&commands).await.unwrap();
    assert!(again.iter().all(Result::is_ok));
    // A batch longer than MAX_PIPELINE goes in rounds, under the per-client channel limit.
    let many = vec![SysinfoCommand::Watchdog; sysinfo_wire::MAX_PIPELINE * 2 + 3];
    let replies = client.request_many(&many).await.unwrap();
    assert!(replies.iter().all(|r| r.as_ref().is_ok_and(|r| r.reply.text.starts_with("Watchdog: "))));
    // The sequential API still works between batches.
    assert_eq!(client.request(SysinfoCommand::TraceClear).await.unwrap().reply.text, "ok\n");
    assert_eq!(sim.handle.stats().boot_errors, 0);
    sim.stop().await;
}

#[tokio::test]
async fn in_a_batch_a_refused_channel_or_an_undecodable_request_fails_alone() {
    let sim = start(Config { max_channels_per_client: 2, ..small_trace() }).await;
    let mut client = sim.client().await;
    let replies = client.request_many_raw(&[&[0x04], &[0x09], &[0x08]]).await.unwrap();
    assert!(replies[0].as_ref().unwrap().text.starts_with("  SCHED_SWITCHES "));
    assert_eq!(replies[1].as_ref().unwrap().text, "Unknown command\n");
    match &replies[2] {
        Err(ClientError::Boot { message, .. }) => assert_eq!(message, "no channels"),
        other => panic!("{other:?}"),
    }
    // The refused one did not spoil the connection.
    let replies = client.request_many(&[SysinfoCommand::Watchdog]).await.unwrap();
    assert!(replies[0].is_ok());
    sim.stop().await;
}

#[tokio::test]
async fn a_batch_that_outlasts_the_request_timeout_is_a_timeout() {
    let config = Config { reply_delay: Duration::from_secs(30), ..small_trace() };
    let sim = start(config).await;
    let config = ClientConfig { request_timeout: Duration::from_millis(200), ..ClientConfig::default() };
    let mut client = Client::connect(&Endpoint::Tcp(sim.addr.clone()), config).await.unwrap();
    match client.request_many(&[SysinfoCommand::Ps, SysinfoCommand::Kstat]).await {
        Err(ClientError::Timeout { after }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("{other:?}"),
    }
    // The channels were closed: the delayed replies are abandoned, not sent.
    let mut handle = sim.handle.clone();
    handle.wait_for(|s| s.replies_abandoned == 2).await;
    assert_eq!(sim.handle.stats().replies, 0);
    sim.stop().await;
}

/// Each kernel task's heartbeat age in the Watchdog report `sys` renders at `now` ticks, in ms.
fn heartbeat_ages(sys: &mut rvos_sim::System, now: u64) -> std::collections::BTreeMap<String, u64> {
    let text = sys.render(SysinfoCommand::Watchdog, now);
    let Report::Watchdog(w) = Report::parse(SysinfoCommand::Watchdog, &text) else { unreachable!() };
    w.kernel_tasks.iter().map(|h| (h.name.to_string(), h.ago_ms)).collect()
}

#[test]
fn a_hung_kernel_task_stops_petting_the_watchdog_until_it_is_let_go() {
    use rvos_sim::{KernelTask, System, TICKS_PER_SEC};
    let second = |s: u64| TICKS_PER_SEC + s * TICKS_PER_SEC;
    // console is hung from boot (--hang-task console); timer hangs at 5 s and is let go at 20 s.
    let config =
        SystemConfig { trace_prefill: 0, hung_tasks: vec![KernelTask::Console], ..SystemConfig::default() };
    let mut sys = System::new(config, second(0));
    assert!(sys.is_hung(KernelTask::Console) && !sys.is_hung(KernelTask::Timer));
    let fresh = heartbeat_ages(&mut sys, second(5));
    assert_eq!(fresh.keys().map(String::as_str).collect::<Vec<_>>(), ["console", "init", "sysinfo", "timer"]);
    assert_eq!(fresh["console"], 5_000, "{fresh:?}");
    assert!(fresh["timer"] < 1_000, "{fresh:?}");
    sys.set_hung(KernelTask::Timer, true);
    let hung = heartbeat_ages(&mut sys, second(20));
    assert_eq!(hung["console"], 20_000, "{hung:?}");
    assert!((15_000..16_000).contains(&hung["timer"]), "{hung:?}");
    assert!(hung["init"] < 1_000 && hung["sysinfo"] < 1_000, "the others pet on: {hung:?}");
    sys.set_hung(KernelTask::Timer, false);
    let again = heartbeat_ages(&mut sys, second(22));
    assert!(again["timer"] < 1_000, "{again:?}");
    assert_eq!(again["console"], 22_000, "{again:?}");
    assert_eq!(KernelTask::Timer.name(), "timer");
}

#[tokio::test]
async fn the_handle_hangs_a_task_of_the_running_sim() {
    let sim = start(small_trace()).await;
    let mut client = sim.client().await;
    let timer_age = async |client: &mut Client| {
        let response = client.request(SysinfoCommand::Watchdog).await.unwrap();
        let Report::Watchdog(w) = response.report else { panic!("{:?}", response.report) };
        w.kernel_tasks.iter().find(|h| h.name == "timer").expect("a timer heartbeat").ago_ms
    };
    sim.handle.hang(rvos_sim::KernelTask::Timer, true);
    // The heartbeat grows older than anything a petting task shows (it pets every step, 100 ms, with
    // chance 1/2: 2 s without a pet has odds of 2^-20).
    sim_common::within("the hung timer's heartbeat 2 s old", async {
        while timer_age(&mut client).await < 2_000 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    sim.handle.hang(rvos_sim::KernelTask::Timer, false);
    sim_common::within("the timer petting again", async {
        while timer_age(&mut client).await >= 2_000 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    sim.stop().await;
}
