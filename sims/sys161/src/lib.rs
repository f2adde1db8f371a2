//! `sys161-sim`: a fake System/161 meter socket that behaves like the real sys161.
//!
//! It serves `DIR/.sockets/meter` (folder mode 0700, a stale socket replaced) to any number of clients.
//! Each client gets `HELLO 2`, `HEAD`, `WIDTH` and an immediate `DATA`, then a `DATA` every interval of
//! its own in simulated time; `INTERVAL n` takes effect after the next already-scheduled `DATA`.
//! Commands are checked with sys161's exact rules and `BAD` texts ([`meter161::ServerCodec`]); unlike
//! sys161 a command split across reads still works, and a client that stops reading is dropped once
//! its bounded queue ([`sim_common::ClientWriter`]) is full instead of freezing everyone.
//!
//! A [`Control`] changes a running sim: its clock stops as sys161's does in its debugger (no `DATA` while
//! stopped, simulated time goes on from where it stood), and some `DATA` lines can be sent corrupted.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//!
//! let dir = tempfile::tempdir()?;
//! let (listener, _path) = sys161_sim::bind(dir.path())?;
//! let shutdown = sim_common::Shutdown::new();
//! let sim = tokio::spawn(sys161_sim::run(listener, sys161_sim::Config::default(), shutdown.clone()));
//!
//! let mut client = meter161::Client::connect(dir.path(), &meter161::ClientConfig::default()).await?;
//! let sample = client.next().await.unwrap()?;
//! assert_eq!(sample.header().names(), meter161::SYS161_FIELDS);
//! shutdown.cancel();
//! sim.await??;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod machine;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures::StreamExt;
use meter161::{ClientMessage, IntervalRange, ServerCodec, ServerMessage, DEFAULT_INTERVAL_NS};
use sim_common::{ClientWriter, NumberedUnixListener, SendError, Shutdown, UnixPeer};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

pub use machine::Machine;

/// Which document the server follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The real sys161: intervals 10 us to 2 s, silence on success.
    #[default]
    Sys161,
    /// The protocol text: intervals 100 ns to 2 s, `OK` on success.
    SpecText,
}

impl Mode {
    /// The intervals accepted in this mode.
    pub fn range(self) -> IntervalRange {
        match self {
            Mode::Sys161 => IntervalRange::SYS161,
            Mode::SpecText => IntervalRange::SPEC_TEXT,
        }
    }
}

/// How the fake server behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// sys161's behaviour or the protocol text's.
    pub mode: Mode,
    /// Simulated time per wall time (2.0 runs the machine twice as fast as the clock on the wall).
    pub speed: f64,
    /// Simulated nanoseconds at start-up.
    pub start_nsec: u64,
    /// The counters' model.
    pub machine: Machine,
    /// Messages a client may leave unread before it is dropped.
    pub queue_capacity: usize,
    /// The most `DATA` lines sent at once to catch up with simulated time; beyond that, ticks are
    /// skipped (the next `DATA` then covers several intervals, as a busy sys161's may).
    pub max_burst: usize,
    /// The version announced in `HELLO` (sys161: 2); another one tests how clients refuse it.
    pub version: u32,
    /// Send `ERROR` and close after this many `DATA` lines on each connection (0: instead of the
    /// greeting, like sys161 when `malloc` fails on accept).
    pub error_after: Option<u64>,
    /// What changes while the sim runs (its clock stopped, corrupted lines). Clones of a config share it.
    pub control: Control,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Sys161,
            speed: 1.0,
            start_nsec: 0,
            machine: Machine::default(),
            queue_capacity: 256,
            max_burst: 4096,
            version: meter161::PROTOCOL_VERSION,
            error_after: None,
            control: Control::default(),
        }
    }
}

/// What an operator changes in a running sim, from outside, while clients stay connected. Clones share the
/// same state, so a test keeps one and the sim (through [`Config::control`]) another.
///
/// - The clock stops ([`Control::pause`]) as when sys161 sits in its debugger: no `DATA` is scheduled, and
///   once it runs again ([`Control::resume`]) simulated time goes on from where it stood, without a jump. The
///   connections stay open; a client that connects meanwhile still gets its greeting and first `DATA`.
/// - Every n-th `DATA` line of a connection is sent corrupted ([`Control::corrupt_every`]): its `kinsns`
///   word is not a number, which a client reports as a decode error of that line and then reads on.
///   sys161 never does this; it stands for a broken peer or link.
#[derive(Debug, Clone)]
pub struct Control(Arc<watch::Sender<Knobs>>);

/// The state behind a [`Control`].
#[derive(Debug, Clone, Copy, Default)]
struct Knobs {
    /// Since when the clock stands still.
    paused_since: Option<Instant>,
    /// How long it stood still before, in all (pauses that ended).
    paused_before: Duration,
    /// Every n-th `DATA` line corrupted (0: none).
    corrupt_every: u64,
}

impl Knobs {
    /// How long the clock has stood still in all, up to `now`.
    fn paused_until(&self, now: Instant) -> Duration {
        self.paused_before
            + self.paused_since.map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }
}

impl Default for Control {
    fn default() -> Self {
        Control(Arc::new(watch::channel(Knobs::default()).0))
    }
}

impl Control {
    /// Stops the simulated clock (nothing happens if it stands still already).
    pub fn pause(&self) {
        self.0.send_if_modified(|k| {
            let stop = k.paused_since.is_none();
            if stop {
                k.paused_since = Some(Instant::now());
            }
            stop
        });
    }

    /// Starts the simulated clock again where it stopped (nothing happens if it runs).
    pub fn resume(&self) {
        self.0.send_if_modified(|k| match k.paused_since.take() {
            Some(since) => {
                k.paused_before += since.elapsed();
                true
            }
            None => false,
        });
    }

    /// Whether the simulated clock stands still.
    pub fn is_paused(&self) -> bool {
        self.0.borrow().paused_since.is_some()
    }

    /// Sends every `n`-th `DATA` line of each connection corrupted from now on (0: none, the default).
    pub fn corrupt_every(&self, n: u64) {
        self.0.send_if_modified(|k| std::mem::replace(&mut k.corrupt_every, n) != n);
    }
}

/// Creates `dir/.sockets/meter` as sys161 does (folder mode 0700, a stale socket unlinked first).
pub fn bind(dir: &Path) -> io::Result<(UnixListener, PathBuf)> {
    sim_common::bind_unix_replacing_stale(dir, "meter")
}

/// A sim serving `DIR/.sockets/meter` on a background task, for tests and programs that embed it (the shared
/// [`sim_common::Running`] harness, bound where sys161 binds).
#[derive(Debug)]
pub struct Running(sim_common::Running);

impl Running {
    /// Binds `DIR/.sockets/meter` (see [`bind`]) and starts [`run`] on a new task.
    pub fn spawn(dir: &Path, config: Config) -> io::Result<Running> {
        let (listener, _) = bind(dir)?;
        Ok(Running(sim_common::Running::spawn(|shutdown| run(listener, config, shutdown))))
    }

    /// Stops the sim (clients see EOF, as when sys161 exits) and returns how [`run`] ended.
    pub async fn stop(self) -> io::Result<()> {
        self.0.stop().await
    }
}

/// Simulated time: `start_nsec` at `origin`, advancing `speed` times as fast as the (tokio) clock while
/// the [`Control`] lets it run.
#[derive(Debug, Clone, Copy)]
struct SimClock {
    origin: Instant,
    /// How long the clock had stood still before `origin` (a [`Control`] outlives a run).
    paused_at_origin: Duration,
    start_nsec: u64,
    speed: f64,
}

impl SimClock {
    /// Wall time the clock has run since `origin`, up to `now`.
    fn running(&self, knobs: &Knobs, now: Instant) -> Duration {
        let paused = knobs.paused_until(now).saturating_sub(self.paused_at_origin);
        now.saturating_duration_since(self.origin).saturating_sub(paused)
    }

    fn now_nsec(&self, knobs: &Knobs) -> u64 {
        let wall = self.running(knobs, Instant::now()).as_nanos() as f64;
        self.start_nsec.saturating_add((wall * self.speed) as u64)
    }

    /// When simulated time reaches `nsec` if the clock runs from now on.
    fn instant_at(&self, knobs: &Knobs, nsec: u64) -> Instant {
        let now = Instant::now();
        let wall = nsec.saturating_sub(self.start_nsec) as f64 / self.speed;
        let wall = Duration::from_nanos(wall.min(u64::MAX as f64 / 2.0) as u64);
        now + wall.saturating_sub(self.running(knobs, now))
    }
}

/// One client's reporting schedule, in simulated nanoseconds.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    next: u64,
    interval: u64,
}

impl Schedule {
    /// Fires the due event: returns its time and schedules the next one with the interval in force
    /// now, so a new interval applies after the event that was already scheduled (as in sys161).
    fn fire(&mut self) -> u64 {
        let at = self.next;
        self.next = at.saturating_add(self.interval);
        at
    }

    /// Skips the events due by `now`; returns how many.
    fn skip_to(&mut self, now: u64) -> u64 {
        if self.next > now {
            return 0;
        }
        let skipped = (now - self.next) / self.interval + 1;
        self.next = self.next.saturating_add(skipped.saturating_mul(self.interval));
        skipped
    }
}

struct Shared {
    config: Config,
    clock: SimClock,
}

/// Serves the meter socket until `shutdown` is cancelled. Clients are served concurrently; one that
/// misbehaves or stops reading is dropped without affecting the others.
pub async fn run(listener: UnixListener, config: Config, shutdown: Shutdown) -> io::Result<()> {
    if !(config.speed.is_finite() && config.speed > 0.0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("speed {} is not > 0", config.speed),
        ));
    }
    let origin = Instant::now();
    let paused_at_origin = config.control.0.borrow().paused_until(origin);
    let clock = SimClock { origin, paused_at_origin, start_nsec: config.start_nsec, speed: config.speed };
    let shared = Arc::new(Shared { config, clock });
    let clients = shutdown.clone();
    sim_common::accept_loop(NumberedUnixListener::new(listener), shutdown, move |stream, peer| {
        serve(stream, peer, Arc::clone(&shared), clients.clone())
    })
    .await
}

/// Why a client's connection ended early.
#[derive(Debug)]
enum Dropped {
    Lagged(SendError),
    Io(io::Error),
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::Lagged(e) => write!(f, "{e}; dropped it so the others are not held up"),
            Dropped::Io(e) => write!(f, "read failed: {e}"),
        }
    }
}

fn encode(msg: &ServerMessage, out: &mut BytesMut) {
    meter161::encode_server(msg, out).expect("the sim only sends encodable messages");
}

/// `msg` (a `DATA` line) encoded with a `#` before its second word (`kinsns`), which is then no number.
fn encode_corrupted(msg: &ServerMessage, out: &mut BytesMut) {
    let start = out.len();
    encode(msg, out);
    let mut spaces = out[start..].iter().enumerate().filter(|(_, b)| **b == b' ').map(|(i, _)| start + i);
    if let Some(at) = spaces.nth(1) {
        let tail = out.split_off(at + 1);
        out.extend_from_slice(b"#");
        out.unsplit(tail);
    }
}

async fn serve(
    stream: UnixStream,
    peer: UnixPeer,
    shared: Arc<Shared>,
    shutdown: Shutdown,
) -> Result<(), Dropped> {
    let Shared { config, clock } = &*shared;
    let (read, write) = stream.into_split();
    // A lagging client is cut by the writer itself; any other exit lets it flush (for a bounded time).
    let writer = ClientWriter::spawn(write, config.queue_capacity, peer);
    let send = |out: &mut BytesMut| -> Result<(), Dropped> {
        match writer.send(out.split().freeze()) {
            Err(e @ SendError::Lagged { .. }) => {
                tracing::warn!(%peer, capacity = config.queue_capacity, "client stopped reading; dropping it");
                Err(Dropped::Lagged(e))
            }
            // The writer has ended: the client went away; the reader will see it too.
            Err(SendError::Closed { .. }) | Ok(()) => Ok(()),
        }
    };
    let mut out = BytesMut::with_capacity(256);
    if config.error_after == Some(0) {
        encode(&ServerMessage::Error(None), &mut out);
        send(&mut out)?;
        return Ok(());
    }
    let [_, head, width] = ServerMessage::sys161_greeting();
    for msg in [ServerMessage::Hello(config.version), head, width] {
        encode(&msg, &mut out);
    }
    let mut control = config.control.0.subscribe();
    let mut knobs = *control.borrow_and_update();
    let mut schedule = Schedule { next: clock.now_nsec(&knobs), interval: DEFAULT_INTERVAL_NS };
    let mut sent: u64 = 0;
    // The timer fired (or the connection is new): at least one DATA is due, whatever float rounding
    // in the clock says.
    let mut due = true;
    let mut commands = FramedRead::new(read, ServerCodec::new(config.mode.range()));
    loop {
        // Send what is due: the immediate first DATA, or the ticks whose time has come (at most a burst).
        let now = clock.now_nsec(&knobs);
        let mut burst = 0;
        while (due || schedule.next <= now) && burst < config.max_burst {
            due = false;
            let at = schedule.fire();
            sent += 1;
            let data = ServerMessage::Data(config.machine.counters_at(at).to_vec());
            if knobs.corrupt_every > 0 && sent % knobs.corrupt_every == 0 {
                encode_corrupted(&data, &mut out);
            } else {
                encode(&data, &mut out);
            }
            burst += 1;
            if config.error_after == Some(sent) {
                encode(&ServerMessage::Error(None), &mut out);
                send(&mut out)?;
                tracing::info!(%peer, "sent ERROR as configured; closing");
                return Ok(());
            }
        }
        let skipped = schedule.skip_to(now);
        if skipped > 0 {
            tracing::debug!(%peer, skipped, "simulated time outran the sends; skipped ticks");
        }
        if !out.is_empty() {
            send(&mut out)?;
        }
        let paused = knobs.paused_since.is_some();
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = writer.closed() => return Ok(()),
            _ = tokio::time::sleep_until(clock.instant_at(&knobs, schedule.next)), if !paused => due = true,
            // The sender lives in `config`, so this never fails while the sim serves.
            Ok(()) = control.changed() => knobs = *control.borrow_and_update(),
            command = commands.next() => match command {
                None => return Ok(()),
                Some(Err(e)) => return Err(Dropped::Io(e)),
                Some(Ok(Ok(ClientMessage::Interval(ns)))) => {
                    tracing::debug!(%peer, ns, "interval changed");
                    schedule.interval = ns;
                    if config.mode == Mode::SpecText {
                        encode(&ServerMessage::Ok, &mut out);
                    }
                }
                Some(Ok(Ok(other))) => {
                    tracing::debug!(%peer, ?other, "command not served");
                    encode(&meter161::BadReason::InvalidCommand.reply(), &mut out);
                }
                Some(Ok(Err(rejected))) => {
                    tracing::debug!(%peer, error = %rejected, "command rejected");
                    encode(&rejected.reason().reply(), &mut out);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_interval_applies_after_the_scheduled_event() {
        let mut s = Schedule { next: 0, interval: 200 };
        assert_eq!(s.fire(), 0);
        s.interval = 1000; // arrives between the first DATA and the already-scheduled second one
        assert_eq!(s.fire(), 200);
        assert_eq!(s.fire(), 1200);
        assert_eq!(s.fire(), 2200);
    }

    #[test]
    fn skipping_keeps_the_grid() {
        let mut s = Schedule { next: 1000, interval: 100 };
        assert_eq!(s.skip_to(999), 0);
        assert_eq!(s.skip_to(1250), 3);
        assert_eq!(s.next, 1300);
    }
}
