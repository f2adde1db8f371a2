//! [`Tap`]: an `AsyncRead + AsyncWrite` that records what passes through it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::format::{Direction, RecordKind};
use crate::recorder::TargetRecorder;

/// Wraps a connection and records each read (inbound) and each write (outbound) through a
/// [`TargetRecorder`], which never blocks: a full queue counts the bytes as lost instead. Creating the tap
/// records the connection's start, dropping it the connection's end, and a read that finds end of file
/// the peer's close ([`RecordKind::PeerClosed`]). A tap without a recorder
/// ([`Tap::off`]) passes everything through, so that code can use one stream type whether it records or not.
/// With [`Tap::counting`] it also adds the bytes read to a counter, recording or not.
#[derive(Debug)]
pub struct Tap<S> {
    inner: S,
    recorder: Option<Arc<TargetRecorder>>,
    received: Option<Arc<AtomicU64>>,
}

impl<S> Tap<S> {
    /// Starts recording `inner` (records an [`RecordKind::Open`]).
    pub fn new(inner: S, recorder: Arc<TargetRecorder>) -> Self {
        Tap::maybe(inner, Some(recorder))
    }

    /// Records `inner` if there is a recorder; passes it through otherwise.
    pub fn maybe(inner: S, recorder: Option<Arc<TargetRecorder>>) -> Self {
        if let Some(r) = &recorder {
            r.record(RecordKind::Open);
        }
        Tap { inner, recorder, received: None }
    }

    /// Passes `inner` through without recording.
    pub fn off(inner: S) -> Self {
        Tap { inner, recorder: None, received: None }
    }

    /// Also adds the number of bytes read to `received` (whether or not it records).
    pub fn counting(mut self, received: Arc<AtomicU64>) -> Self {
        self.received = Some(received);
        self
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S> Drop for Tap<S> {
    fn drop(&mut self) {
        if let Some(r) = &self.recorder {
            r.record(RecordKind::Close);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            let new = &buf.filled()[before..];
            if new.is_empty() && buf.remaining() > 0 {
                // End of file: the peer closed its side.
                if let Some(r) = &this.recorder {
                    r.record(RecordKind::PeerClosed);
                }
            } else if !new.is_empty() {
                if let Some(r) = &this.recorder {
                    r.data(Direction::Inbound, new);
                }
                if let Some(received) = &this.received {
                    received.fetch_add(new.len() as u64, Ordering::Relaxed);
                }
            }
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &poll {
            if let (Some(r), true) = (&this.recorder, *n > 0) {
                r.data(Direction::Outbound, &buf[..*n]);
            }
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
