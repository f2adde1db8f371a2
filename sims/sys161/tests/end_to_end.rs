//! The meter161 client against sys161-sim over a real Unix socket in a temp dir.
//!
//! Every test runs on a paused tokio clock: simulated time advances only when everything waits, so
//! the intervals are exact and nothing sleeps. A test that hangs fails at its (virtual) deadline.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use meter161::{Client, ClientError, Event, ProtocolError, Sample, SYS161_FIELDS, SYS161_WIDTHS};
use sys161_sim::{Config, Mode};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

const SECOND: u64 = 1_000_000_000;

/// The sim in the background; `Sim::start(dir, config)` and `.stop().await`.
struct Sim(sys161_sim::Running);

impl Sim {
    fn start(dir: &Path, config: Config) -> Sim {
        Sim(sys161_sim::Running::spawn(dir, config).unwrap())
    }

    async fn stop(self) {
        self.0.stop().await.unwrap();
    }
}

/// Fails the test instead of hanging (virtual time: sim ticks keep the clock moving).
async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(3600), fut).await.expect("the test hung")
}

fn client_config() -> meter161::ClientConfig {
    meter161::ClientConfig::default()
}

async fn sample(client: &mut Client) -> Sample {
    client.next().await.expect("stream ended").expect("a sample")
}

fn nsec(s: &Sample) -> u64 {
    s.get("nsec").unwrap()
}

#[tokio::test(start_paused = true)]
async fn handshake_gives_header_widths_and_an_immediate_row() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    within(async {
        let mut client = Client::connect(dir.path(), &client_config()).await.unwrap();
        assert_eq!(client.version(), Some(2));
        assert_eq!(client.header().names(), SYS161_FIELDS);
        assert_eq!(client.header().widths(), SYS161_WIDTHS);
        let first = sample(&mut client).await;
        assert_eq!(first.deltas(), None);
        let second = sample(&mut client).await;
        assert_eq!(second.delta("nsec"), Some(200_000_000), "default interval");
        assert!(second.delta("kinsns").unwrap() > 0 && second.delta("idle").unwrap() > 0);
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn greeting_bytes_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    let mut stream = UnixStream::connect(meter161::socket_path(dir.path())).await.unwrap();
    let mut reader = BufReader::new(&mut stream);
    within(async {
        let mut bytes = Vec::new();
        for _ in 0..4 {
            reader.read_until(b'\n', &mut bytes).await.unwrap();
        }
        assert_eq!(
            bytes,
            b"HELLO 2\r\nHEAD nsec kinsns uinsns udud idle irqs exns disk con emu net\r\n\
WIDTH 11 9 9 4 9 4 4 4 5 4 4\r\nDATA 0 0 0 0 0 0 0 0 0 0 0\r\n"
        );
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_socket_folder_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    let mode = std::fs::metadata(dir.path().join(".sockets")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_interval_applies_after_the_scheduled_row() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    within(async {
        let mut client = Client::connect(dir.path(), &client_config()).await.unwrap();
        let first = sample(&mut client).await;
        client.set_interval(Duration::from_secs(1)).await.unwrap();
        let mut times = vec![nsec(&first)];
        for _ in 0..3 {
            times.push(nsec(&sample(&mut client).await));
        }
        let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, [200_000_000, SECOND, SECOND], "one more row at the old spacing");
        let err = client.set_interval(Duration::from_nanos(9_999)).await.unwrap_err();
        assert!(matches!(err, ClientError::IntervalOutOfRange { ns: 9_999, .. }), "{err}");
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn interval_asked_on_connect_like_stat161() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    within(async {
        let config = meter161::ClientConfig { interval: Some(Duration::from_secs(1)), ..client_config() };
        let mut client = Client::connect(dir.path(), &config).await.unwrap();
        let mut times = Vec::new();
        for _ in 0..4 {
            times.push(nsec(&sample(&mut client).await));
        }
        let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        // Row 2 is the leftover default tick, as in the captured stat161 output.
        assert_eq!(gaps, [200_000_000, SECOND, SECOND]);
    })
    .await;
    sim.stop().await;
}

/// The `nsec` gaps between the next `n` rows.
async fn gaps(client: &mut Client, n: usize) -> Vec<u64> {
    let mut times = Vec::new();
    for _ in 0..n {
        times.push(nsec(&sample(client).await));
    }
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// A raw connection that skips DATA lines and reads the replies to commands.
struct Raw {
    lines: tokio::io::Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl Raw {
    async fn connect(dir: &Path) -> Raw {
        let stream = UnixStream::connect(meter161::socket_path(dir)).await.unwrap();
        let (read, write) = stream.into_split();
        Raw { lines: BufReader::new(read).lines(), write }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.unwrap();
    }

    /// The next line that is not HELLO/HEAD/WIDTH/DATA, without its CRLF.
    async fn reply(&mut self) -> String {
        loop {
            let line = self.lines.next_line().await.unwrap().expect("connection closed");
            let line = line.trim_end_matches('\r').to_string();
            if !["HELLO ", "HEAD ", "WIDTH ", "DATA "].iter().any(|p| line.starts_with(p)) {
                return line;
            }
        }
    }

    /// The replies to `command`: everything before the reply to a probe sent right after it. The probe
    /// is one whose reply is not among `expected`, so a wrong reply cannot pass for the probe's.
    async fn replies_to(&mut self, command: &[u8], expected: &[&str]) -> Vec<String> {
        let (probe, probe_reply) =
            [("a b c d e f g h i\r\n", "BAD Too many words in command"), ("FOO\r\n", "BAD Invalid command")]
                .into_iter()
                .find(|(_, reply)| !expected.contains(reply))
                .unwrap();
        self.send(command).await;
        self.send(probe.as_bytes()).await;
        let mut replies = Vec::new();
        loop {
            let reply = self.reply().await;
            if reply == probe_reply {
                return replies;
            }
            replies.push(reply);
        }
    }
}

/// The reply table of the notes: each command, sent in one write, and sys161's replies.
const REPLY_TABLE: &[(&str, &[&str])] = &[
    ("INTERVAL 99\r\n", &["BAD Interval too small"]),
    ("INTERVAL 9999\r\n", &["BAD Interval too small"]),
    ("INTERVAL 10000\r\n", &[]),
    ("INTERVAL 2000000001\r\n", &["BAD Interval too large"]),
    ("INTERVAL 4294967296\r\n", &["BAD Interval too large"]),
    ("INTERVAL -5\r\n", &["BAD Interval too large"]),
    ("INTERVAL abc\r\n", &["BAD Invalid number"]),
    ("Interval 1e6\r\n", &["BAD Invalid number"]),
    ("INTERVAL 18446744073709551616\r\n", &["BAD Invalid number"]),
    ("INTERVAL 0x10000\r\n", &[]),
    ("INTERVAL 010000\r\n", &["BAD Interval too small"]),
    ("INTERVAL\r\n", &["BAD Invalid command"]),
    ("INTERVAL 1 2\r\n", &["BAD Invalid command"]),
    ("FOO\r\n", &["BAD Invalid command"]),
    ("OK\r\n", &["BAD Invalid command"]),
    ("a b c d e f g h i\r\n", &["BAD Too many words in command"]),
    ("\r\n", &[]),
    ("   \t \r\n", &[]),
    ("interval 50000000\n", &[]),
    ("  interval   200000000  \r\n", &[]),
    ("INTERVAL 10000\r\nFOO\r\nINTERVAL 99\r\n", &["BAD Invalid command", "BAD Interval too small"]),
];

#[tokio::test(start_paused = true)]
async fn every_row_of_the_reply_table() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    within(async {
        let mut raw = Raw::connect(dir.path()).await;
        for (command, expected) in REPLY_TABLE {
            let replies = raw.replies_to(command.as_bytes(), expected).await;
            assert_eq!(replies, *expected, "{command:?}");
        }
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn input_overflow_and_a_split_command() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    within(async {
        let mut raw = Raw::connect(dir.path()).await;
        raw.send(&[b'x'; 200]).await;
        assert_eq!(raw.reply().await, "BAD Input overflow");
        // Like sys161, only the full 128-byte buffer is discarded: the other 72 bytes are a new line.
        raw.send(b"\r\n").await;
        assert_eq!(raw.reply().await, "BAD Invalid command");

        // A command split across writes (and reads) still works, unlike in sys161.
        raw.send(b"INTER").await;
        raw.reply_or_data().await;
        assert!(raw.replies_to(b"VAL 1000000000\r\n", &[]).await.is_empty());
    })
    .await;
    sim.stop().await;
}

impl Raw {
    /// Waits for the next line of any kind (lets the server loop go round).
    async fn reply_or_data(&mut self) -> String {
        self.lines.next_line().await.unwrap().expect("connection closed")
    }
}

#[tokio::test(start_paused = true)]
async fn spec_mode_replies_ok_and_accepts_100ns() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config { mode: Mode::SpecText, ..Config::default() });
    within(async {
        let mut raw = Raw::connect(dir.path()).await;
        assert_eq!(raw.replies_to(b"INTERVAL 100\r\n", &["OK"]).await, ["OK"]);
        assert_eq!(
            raw.replies_to(b"INTERVAL 99\r\n", &["BAD Interval too small"]).await,
            ["BAD Interval too small"]
        );
        // A client ignores OK.
        let mut client = Client::connect(dir.path(), &client_config()).await.unwrap();
        client.set_interval(Duration::from_millis(10)).await.unwrap();
        for _ in 0..3 {
            sample(&mut client).await;
        }
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_wrong_hello_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config { version: 3, ..Config::default() });
    within(async {
        let err = Client::connect(dir.path(), &client_config()).await.unwrap_err();
        assert!(matches!(err, ClientError::Protocol(ProtocolError::UnsupportedVersion { got: 3 })), "{err}");
        let mut watch = std::pin::pin!(meter161::watch(dir.path(), client_config()));
        let err = watch.next().await.unwrap().unwrap_err();
        assert!(matches!(err, ClientError::Protocol(ProtocolError::UnsupportedVersion { got: 3 })), "{err}");
        assert!(watch.next().await.is_none(), "a wrong version ends the watch, as it ends stat161");
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn two_clients_at_different_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config::default());
    within(async {
        let fast_config =
            meter161::ClientConfig { interval: Some(Duration::from_millis(10)), ..client_config() };
        let mut slow = Client::connect(dir.path(), &client_config()).await.unwrap();
        let mut fast = Client::connect(dir.path(), &fast_config).await.unwrap();
        let (slow_gaps, fast_gaps) = tokio::join!(gaps(&mut slow, 6), gaps(&mut fast, 60));
        assert!(slow_gaps.iter().all(|&g| g == 200_000_000), "{slow_gaps:?}");
        assert_eq!(fast_gaps[0], 200_000_000, "the leftover default tick");
        assert!(fast_gaps[1..].iter().all(|&g| g == 10_000_000), "{fast_gaps:?}");
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_batching_client_gets_every_row_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // Room for a window's rows: this sim drops a client that leaves too many unread.
    let sim = Sim::start(dir.path(), Config { queue_capacity: 4096, ..Config::default() });
    within(async {
        let config = meter161::ClientConfig {
            interval: Some(Duration::from_micros(10)),
            read_batching: Some(Duration::from_millis(5)),
            ..client_config()
        };
        let mut client = Client::connect(dir.path(), &config).await.unwrap();
        let gaps = gaps(&mut client, 3_000).await;
        assert_eq!(gaps[0], 200_000_000, "the leftover default tick");
        assert!(gaps[1..].iter().all(|&g| g == 10_000), "a row lost or out of order");
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stalled_client_does_not_block_a_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config { queue_capacity: 8, ..Config::default() });
    within(async {
        // The stalled client asks for the fastest rate, then never reads.
        let mut stalled = UnixStream::connect(meter161::socket_path(dir.path())).await.unwrap();
        stalled.write_all(b"INTERVAL 10000\r\n").await.unwrap();
        let live_config =
            meter161::ClientConfig { interval: Some(Duration::from_micros(10)), ..client_config() };
        let mut live = Client::connect(dir.path(), &live_config).await.unwrap();
        // Far more rows than the stalled client's socket buffer and queue can hold.
        let rows = 30_000;
        let mut last = 0;
        for _ in 0..rows {
            last = nsec(&sample(&mut live).await);
        }
        assert!(last >= (rows - 2) as u64 * 10_000);
        // The stalled client was dropped: what it can still read is bounded and ends in EOF.
        let mut unread = Vec::new();
        stalled.read_to_end(&mut unread).await.unwrap();
        let lines = unread.split(|&b| b == b'\n').filter(|l| l.starts_with(b"DATA")).count();
        assert!(lines < rows, "the stalled client got {lines} rows");
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_watch_reconnects_after_the_sim_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let first = Sim::start(dir.path(), Config::default());
    within(async {
        let mut watch = std::pin::pin!(meter161::watch(dir.path(), client_config()));
        let Event::Connected(header) = watch.next().await.unwrap().unwrap() else { panic!("not connected") };
        assert_eq!(header.names(), SYS161_FIELDS);
        let Event::Sample(s) = watch.next().await.unwrap().unwrap() else { panic!("no sample") };
        assert_eq!(s.deltas(), None);
        first.stop().await;
        loop {
            match watch.next().await.unwrap().unwrap() {
                Event::Disconnected => break,
                Event::Sample(_) => continue, // rows sent before the stop
                other => panic!("{other:?}"),
            }
        }
        // The old socket file is still there (sys161 leaves it too); the new sim replaces it.
        assert!(meter161::socket_path(dir.path()).exists());
        let second = Sim::start(dir.path(), Config { start_nsec: 5 * SECOND, ..Config::default() });
        assert!(matches!(watch.next().await.unwrap().unwrap(), Event::Connected(_)));
        let Event::Sample(s) = watch.next().await.unwrap().unwrap() else { panic!("no sample") };
        assert_eq!(s.deltas(), None, "no delta across a reconnect");
        assert!(nsec(&s) >= 5 * SECOND);
        let Event::Sample(s) = watch.next().await.unwrap().unwrap() else { panic!("no sample") };
        assert_eq!(s.delta("nsec"), Some(200_000_000));
        second.stop().await;
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_watch_waits_for_the_socket_to_appear() {
    let dir = tempfile::tempdir().unwrap();
    within(async {
        let watch = meter161::watch(dir.path(), client_config());
        let waiting = tokio::spawn(async move {
            let mut watch = std::pin::pin!(watch);
            watch.next().await.unwrap()
        });
        // Let the watch find nothing at least once (virtual time: this only orders the tasks).
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!waiting.is_finished());
        let sim = Sim::start(dir.path(), Config::default());
        assert!(matches!(waiting.await.unwrap(), Ok(Event::Connected(_))));
        sim.stop().await;
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn without_reconnect_a_missing_socket_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = meter161::ClientConfig { reconnect: false, ..client_config() };
    let mut watch = std::pin::pin!(meter161::watch(dir.path(), config));
    let err = watch.next().await.unwrap().unwrap_err();
    assert!(meter161::no_simulator(&err), "{err}");
    assert!(watch.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn an_injected_error_ends_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config { error_after: Some(2), ..Config::default() });
    within(async {
        let mut client = Client::connect(dir.path(), &client_config()).await.unwrap();
        sample(&mut client).await;
        sample(&mut client).await;
        let err = client.next().await.unwrap().unwrap_err();
        assert!(matches!(err, ClientError::Protocol(ProtocolError::ServerError { text: None })), "{err}");
        assert!(err.is_fatal());
        assert!(client.next().await.is_none());
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn error_on_accept_fails_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path(), Config { error_after: Some(0), ..Config::default() });
    within(async {
        let err = Client::connect(dir.path(), &client_config()).await.unwrap_err();
        assert!(matches!(err, ClientError::Protocol(ProtocolError::ServerError { .. })), "{err}");
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_clock_sends_nothing_and_then_goes_on_where_it_stood() {
    let dir = tempfile::tempdir().unwrap();
    let control = sys161_sim::Control::default();
    let sim = Sim::start(dir.path(), Config { control: control.clone(), ..Config::default() });
    within(async {
        let mut client = Client::connect(dir.path(), &client_config()).await.unwrap();
        sample(&mut client).await;
        let before = nsec(&sample(&mut client).await);
        control.pause();
        assert!(control.is_paused());
        // A minute of wall time without a row (the connection stays open: the wait times out, not the stream).
        let silence = tokio::time::timeout(Duration::from_secs(60), client.next()).await;
        assert!(silence.is_err(), "a row while the clock stood still: {silence:?}");
        // A client connecting meanwhile still gets its greeting and first row, at the stopped time.
        let mut late = Client::connect(dir.path(), &client_config()).await.unwrap();
        let stopped = nsec(&sample(&mut late).await);
        assert!(stopped < before + 200_000_000, "the clock stood at {stopped}, the last row was {before}");
        control.resume();
        assert!(!control.is_paused());
        let after = sample(&mut client).await;
        assert_eq!(nsec(&after), before + 200_000_000, "the next row, without the minute stopped");
        assert_eq!(after.delta("nsec"), Some(200_000_000));
    })
    .await;
    sim.stop().await;
}

#[tokio::test(start_paused = true)]
async fn corrupted_rows_are_decode_errors_between_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let control = sys161_sim::Control::default();
    control.corrupt_every(2);
    let sim = Sim::start(dir.path(), Config { control: control.clone(), ..Config::default() });
    within(async {
        let mut client = Client::connect(dir.path(), &client_config()).await.unwrap();
        for row in 1..=6 {
            let item = client.next().await.expect("the stream goes on");
            match item {
                Ok(sample) => assert_eq!(row % 2, 1, "row {row} is good: {sample:?}"),
                Err(err) => {
                    assert_eq!(row % 2, 0, "row {row}: {err}");
                    assert!(!err.is_fatal(), "{err}");
                    assert!(
                        matches!(
                            &err,
                            ClientError::Protocol(ProtocolError::Decode(
                                meter161::DecodeError::InvalidNumber { keyword: "DATA", index: 1, .. }
                            ))
                        ),
                        "{err:?}"
                    );
                }
            }
        }
        control.corrupt_every(0);
        for _ in 0..4 {
            sample(&mut client).await;
        }
    })
    .await;
    sim.stop().await;
}
