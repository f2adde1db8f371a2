//! The client's socket, with reads batched while lines come close together.
//!
//! sys161 writes every line with its own `write()`. A client that keeps up with a 10 us interval
//! would pay one wake-up and one `read()` per line. When a read follows the previous one within the
//! batching window, the stream leaves the reactor (so no further line wakes it) and from then on reads
//! once every `window` whatever arrived meanwhile, in one go (at once again when a read filled the
//! whole buffer). The pause is shorter than the window while lines arrive fast enough that a window
//! of them would fill the socket, where sys161 waits for its reader. A pause in which nothing arrived puts the socket back under the reactor, so the
//! first line after a quiet period is read at once: a stream of one line a second is never delayed.

use std::future::Future;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::time::{Instant, Sleep};

/// The batch buffer: at a 10 us interval sys161 sends about 10 KB a millisecond.
const BATCH_BUFFER: usize = 64 * 1024;

/// The most bytes one pause should let pile up. sys161 writes its lines with blocking `write()`s, and
/// a Unix socket holds only about 22 KB of them (each write is a buffer of its own) before the
/// simulator stops to wait for its reader: a pause that let more arrive would slow the machine
/// being watched.
const BATCH_TARGET: usize = 4 * 1024;

/// The shortest pause (the timer rounds it up to its own tick).
const MIN_PAUSE: Duration = Duration::from_micros(100);

/// The pause after a batch of `got` bytes that followed a pause of `pause`: as long as lets about
/// [`BATCH_TARGET`] bytes arrive at the rate just seen, within `MIN_PAUSE..=window`.
fn next_pause(pause: Duration, got: usize, window: Duration) -> Duration {
    pause.mul_f64(BATCH_TARGET as f64 / got.max(1) as f64).clamp(MIN_PAUSE, window.max(MIN_PAUSE))
}

/// The meter socket as [`crate::Client`] reads it: a Unix stream that batches its reads when lines
/// arrive closer together than its window (see [`crate::ClientConfig::read_batching`]), and reads
/// each line as it comes otherwise.
#[derive(Debug)]
pub struct BatchedStream {
    io: Io,
    /// `None`: every read is done as soon as the socket is readable.
    window: Option<Duration>,
    /// The pause between batching reads: the window, shortened while lines arrive fast enough to
    /// fill sys161's socket within it (see [`next_pause`]).
    pause_for: Duration,
    /// When the reactor last woke a read that got bytes.
    last_read: Option<Instant>,
    /// Bytes read while batching and not yet handed out (`pending[pos..len]`); allocated on the first
    /// batch only, so a slow stream never pays for it.
    pending: Vec<u8>,
    pos: usize,
    len: usize,
    /// Whether a batching read got bytes since the last pause.
    got_since_pause: bool,
    /// Whether the last batching read drained the socket (it did not fill the buffer): pause before
    /// the next one.
    pause_next: bool,
    pause: Option<Pin<Box<Sleep>>>,
    pausing: bool,
}

#[derive(Debug)]
enum Io {
    /// Under the reactor: woken when bytes arrive.
    Registered(UnixStream),
    /// Out of the reactor: read on a timer.
    Batching(StdUnixStream),
    /// Only while switching.
    Switching,
}

impl BatchedStream {
    /// `stream`, batching reads that follow each other within `window` (`None`: never).
    pub(crate) fn new(stream: UnixStream, window: Option<Duration>) -> Self {
        BatchedStream {
            io: Io::Registered(stream),
            window: window.filter(|w| !w.is_zero()),
            pause_for: window.unwrap_or_default(),
            last_read: None,
            pending: Vec::new(),
            pos: 0,
            len: 0,
            got_since_pause: false,
            pause_next: false,
            pause: None,
            pausing: false,
        }
    }

    /// Whether reads are being batched now.
    #[cfg(test)]
    pub(crate) fn is_batching(&self) -> bool {
        matches!(self.io, Io::Batching(_))
    }

    /// Takes the socket out of the reactor: from now on it is read every window.
    fn start_batching(&mut self) -> io::Result<()> {
        if let Io::Registered(stream) = std::mem::replace(&mut self.io, Io::Switching) {
            self.io = Io::Batching(stream.into_std()?);
        }
        if self.pending.is_empty() {
            self.pending = vec![0; BATCH_BUFFER];
        }
        // More is on its way: the first batch is read a window from now.
        self.got_since_pause = true;
        self.pause_next = true;
        Ok(())
    }

    /// Puts the socket back under the reactor (a window went by without a byte, or a write must wait).
    fn stop_batching(&mut self) -> io::Result<()> {
        if let Io::Batching(stream) = std::mem::replace(&mut self.io, Io::Switching) {
            self.io = Io::Registered(UnixStream::from_std(stream)?);
        }
        self.last_read = None;
        self.pausing = false;
        self.pause_next = false;
        Ok(())
    }

    fn start_pause(&mut self) {
        let at = Instant::now() + self.pause_for;
        match &mut self.pause {
            Some(pause) => pause.as_mut().reset(at),
            None => self.pause = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        self.pausing = true;
        self.pause_next = false;
        self.got_since_pause = false;
    }
}

impl AsyncRead for BatchedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.pos < this.len {
                let n = buf.remaining().min(this.len - this.pos);
                buf.put_slice(&this.pending[this.pos..this.pos + n]);
                this.pos += n;
                return Poll::Ready(Ok(()));
            }
            if matches!(this.io, Io::Batching(_)) {
                if this.window.is_some() && this.pause_next {
                    this.start_pause();
                }
                if this.pausing {
                    if let Some(pause) = &mut this.pause {
                        ready!(pause.as_mut().poll(cx));
                    }
                    this.pausing = false;
                }
            }
            match &mut this.io {
                Io::Registered(stream) => {
                    let before = buf.filled().len();
                    ready!(Pin::new(stream).poll_read(cx, buf))?;
                    // A read that filled the buffer is continued by the next one, not woken apart
                    // from it: only reads that took all there was count as lines coming close.
                    if buf.filled().len() > before && buf.remaining() > 0 {
                        if let Some(window) = this.window {
                            let now = Instant::now();
                            if this.last_read.is_some_and(|t| now.duration_since(t) < window) {
                                this.start_batching()?;
                            }
                            this.last_read = Some(now);
                        }
                    }
                    return Poll::Ready(Ok(()));
                }
                Io::Batching(stream) => {
                    match stream.read(&mut this.pending) {
                        Ok(0) => return Poll::Ready(Ok(())),
                        Ok(n) => {
                            (this.pos, this.len) = (0, n);
                            this.got_since_pause = true;
                            // A read that did not fill the buffer took all there was: one read a pause.
                            this.pause_next = n < this.pending.len();
                            if let Some(window) = this.window {
                                this.pause_for = next_pause(this.pause_for, n, window);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            // Nothing since the last pause: the stream went quiet.
                            if this.window.is_some() && this.got_since_pause {
                                this.start_pause();
                            } else {
                                this.stop_batching()?;
                            }
                        }
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                Io::Switching => return Poll::Ready(Err(switch_failed())),
            }
        }
    }
}

impl AsyncWrite for BatchedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match &mut this.io {
                Io::Registered(stream) => return Pin::new(stream).poll_write(cx, data),
                Io::Batching(stream) => match stream.write(data) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // Waiting for room needs the reactor.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => this.stop_batching()?,
                    done => return Poll::Ready(done),
                },
                Io::Switching => return Poll::Ready(Err(switch_failed())),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Registered(stream) => Pin::new(stream).poll_flush(cx),
            Io::Batching(_) => Poll::Ready(Ok(())),
            Io::Switching => Poll::Ready(Err(switch_failed())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Registered(stream) => Pin::new(stream).poll_shutdown(cx),
            Io::Batching(stream) => Poll::Ready(stream.shutdown(std::net::Shutdown::Write)),
            Io::Switching => Poll::Ready(Err(switch_failed())),
        }
    }
}

/// A stream left without its socket, after moving it in or out of the reactor failed.
fn switch_failed() -> io::Error {
    io::Error::other("the meter socket was lost moving in or out of the reactor")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_line_after_a_quiet_period_is_read_at_once() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut s = BatchedStream::new(a, Some(Duration::from_secs(3600)));
        let mut buf = [0u8; 64];
        for line in [&b"DATA 1\r\n"[..], b"DATA 2\r\n"] {
            b.write_all(line).await.unwrap();
            // With an hour's window, only reading at once (not on a timer) can meet this deadline.
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await.unwrap().unwrap();
            assert_eq!(&buf[..n], line);
        }
        // The second read came soon after the first: the stream batches now.
        assert!(s.is_batching());
    }

    #[tokio::test]
    async fn a_line_read_in_pieces_is_not_lines_coming_close() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut s = BatchedStream::new(a, Some(Duration::from_secs(3600)));
        b.write_all(b"DATA 1 2 34\r\n").await.unwrap();
        let mut piece = [0u8; 4];
        for _ in 0..3 {
            s.read_exact(&mut piece).await.unwrap();
        }
        assert!(!s.is_batching(), "three reads filled their buffers");
        let mut rest = [0u8; 64];
        assert_eq!(s.read(&mut rest).await.unwrap(), 1);
        assert!(!s.is_batching(), "one read that drained the socket");
    }

    #[tokio::test]
    async fn close_lines_are_batched_and_a_quiet_window_ends_the_batching() {
        let (a, mut b) = UnixStream::pair().unwrap();
        // A long window, so that two reads a few lines apart fall within it on a busy machine too.
        let window = Duration::from_millis(200);
        let mut s = BatchedStream::new(a, Some(window));
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        b.write_all(b"DATA 1\r\n").await.unwrap();
        b.write_all(b"DATA 2\r\n").await.unwrap();
        while got.len() < 16 {
            let n = s.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        for i in 3..=50 {
            b.write_all(format!("DATA {i}\r\n").as_bytes()).await.unwrap();
        }
        let want: Vec<u8> = (1..=50).flat_map(|i| format!("DATA {i}\r\n").into_bytes()).collect();
        while got.len() < want.len() {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "early EOF");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, want);
        assert!(s.is_batching(), "two reads within the window");
        // A read that finds nothing for a whole window puts the socket back under the reactor.
        let pending = tokio::time::timeout(window * 5, s.read(&mut buf)).await;
        assert!(pending.is_err(), "nothing was sent");
        assert!(!s.is_batching());
        b.write_all(b"DATA 51\r\n").await.unwrap();
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"DATA 51\r\n");
        drop(b);
        assert_eq!(s.read(&mut buf).await.unwrap(), 0, "EOF");
    }

    #[tokio::test]
    async fn writes_work_while_batching_and_eof_is_seen() {
        let (a, mut b) = UnixStream::pair().unwrap();
        // Long enough for two reads to fall within it on a busy machine.
        let mut s = BatchedStream::new(a, Some(Duration::from_millis(500)));
        let mut buf = [0u8; 64];
        b.write_all(b"x").await.unwrap();
        assert_eq!(s.read(&mut buf).await.unwrap(), 1);
        b.write_all(b"y").await.unwrap();
        assert_eq!(s.read(&mut buf).await.unwrap(), 1);
        assert!(s.is_batching());
        s.write_all(b"INTERVAL 10000\r\n").await.unwrap();
        s.flush().await.unwrap();
        let mut line = [0u8; 16];
        b.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"INTERVAL 10000\r\n");
        drop(b);
        assert_eq!(s.read(&mut buf).await.unwrap(), 0, "EOF while batching");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// However the peer splits its writes and pauses between them, every byte arrives once, in order.
        #[test]
        fn every_byte_arrives_in_order(
            chunks in proptest::collection::vec(
                (proptest::collection::vec(proptest::prelude::any::<u8>(), 1..300), 0u64..3),
                1..40,
            ),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (sent, got) = runtime.block_on(async {
                let (a, mut b) = UnixStream::pair().unwrap();
                let mut s = BatchedStream::new(a, Some(Duration::from_millis(1)));
                let sent: Vec<u8> = chunks.iter().flat_map(|(c, _)| c.clone()).collect();
                let writer = tokio::spawn(async move {
                    for (chunk, pause_ms) in chunks {
                        b.write_all(&chunk).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                    }
                });
                let mut got = Vec::new();
                tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut got)).await.unwrap().unwrap();
                writer.await.unwrap();
                (sent, got)
            });
            proptest::prop_assert_eq!(got, sent);
        }
    }

    #[test]
    fn the_pause_shortens_while_batches_are_large_and_grows_back_to_the_window() {
        let window = Duration::from_millis(5);
        // A 5 ms pause that let 40 KB pile up (sys161 would have blocked): about 0.5 ms next.
        let fast = next_pause(window, 40 * 1024, window);
        assert_eq!(fast, Duration::from_micros(500));
        // At that rate the next batch is about the target, and the pause stays.
        assert_eq!(next_pause(fast, BATCH_TARGET, window), fast);
        // Faster still: never below the shortest pause.
        assert_eq!(next_pause(MIN_PAUSE, 1 << 20, window), MIN_PAUSE);
        // Lines slow down: the pause grows, never past the window; an empty batch is not a division by 0.
        assert_eq!(next_pause(fast, 2 * 1024, window), Duration::from_millis(1));
        assert_eq!(next_pause(fast, 10, window), window);
        assert_eq!(next_pause(fast, 0, window), window);
    }

    #[tokio::test]
    async fn without_a_window_reads_never_batch() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut s = BatchedStream::new(a, None);
        let mut buf = [0u8; 64];
        for _ in 0..3 {
            b.write_all(b"DATA 1\r\n").await.unwrap();
            s.read_exact(&mut buf[..8]).await.unwrap();
        }
        assert!(!s.is_batching());
    }
}
