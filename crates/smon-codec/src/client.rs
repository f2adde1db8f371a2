//! An async reader of updates from files (also while they grow), stdin and TCP streams.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncRead;

use crate::codec::{DecoderConfig, StreamDecoder, UpdateRef};
use crate::error::DecodeError;
use crate::message::Update;

/// The most bytes one read asks for.
pub const READ_CHUNK: usize = 16 * 1024;

/// What a read into an empty buffer asks for (the first read, and the wait for the next update): a
/// reader starts small (a stream of a few updates a second needs no more, and a fleet holds a thousand
/// readers) and doubles its other reads, up to [`READ_CHUNK`], while they come back full. An empty
/// buffer is given back while the reader waits for input, and one that grew for a large update as soon
/// as it empties.
pub const FIRST_READ_CHUNK: usize = 1024;

/// Reads [`Update`]s from any [`AsyncRead`]: a file (several runs appended to it decode as one stream,
/// each run starting with a resync), stdin, or a TCP stream.
///
/// Unlike `FramedRead`, it goes on after a decode error: the error is yielded, the decoder skips to the
/// next resync sequence, and reading continues. With [`UpdateReader::follow`] it waits at the end of the
/// input for more to be appended, like `tail -f`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use smon_codec::{DecoderConfig, Update, UpdateReader};
///
/// let two_runs: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfe\
///                         \x00\x04uabc\x01\x05\
///                         \xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfe\
///                         \x00\x04uabc\x01\x06";
/// let mut reader = UpdateReader::new(two_runs, DecoderConfig::default());
/// let mut values = Vec::new();
/// while let Some(update) = reader.next().await {
///     if let Update::Value { value, .. } = update.unwrap() {
///         values.push(value.to_string());
///     }
/// }
/// assert_eq!(values, ["5", "6"]);
/// # }
/// ```
#[derive(Debug)]
pub struct UpdateReader<R> {
    inner: R,
    decoder: StreamDecoder,
    buf: BytesMut,
    /// How many bytes the next read asks for.
    chunk: usize,
    follow: Option<Duration>,
    eof: bool,
    done: bool,
}

impl<R: AsyncRead + Unpin> UpdateReader<R> {
    /// A reader decoding `inner` with `config`.
    pub fn new(inner: R, config: DecoderConfig) -> Self {
        UpdateReader {
            inner,
            decoder: StreamDecoder::new(config),
            buf: BytesMut::new(),
            chunk: FIRST_READ_CHUNK,
            follow: None,
            eof: false,
            done: false,
        }
    }

    /// At the end of the input, wait `poll` and read again instead of stopping (for files that are
    /// still being appended to). The stream then never ends by itself.
    pub fn follow(mut self, poll: Duration) -> Self {
        self.follow = Some(poll);
        self
    }

    /// The decoder, for its token table and sync state.
    pub fn decoder(&self) -> &StreamDecoder {
        &self.decoder
    }

    /// The next update decodable from what is already buffered, without reading; `None` when more input
    /// is needed (or the input is finished).
    pub fn next_buffered(&mut self) -> Option<Result<Update, DecodeError>> {
        if self.done {
            return None;
        }
        let step = if self.eof {
            self.decoder.decode_eof(&mut self.buf)
        } else {
            self.decoder.decode(&mut self.buf)
        };
        settle(step, self.eof, &mut self.done)
    }

    /// Like [`UpdateReader::next_buffered`], but borrows the update from the decoder (see
    /// [`StreamDecoder::decode_ref`]): no allocation per value. With [`UpdateReader::fill`], this
    /// reads a stream with no allocation per update.
    pub fn next_buffered_ref(&mut self) -> Option<Result<UpdateRef<'_>, DecodeError>> {
        if self.done {
            return None;
        }
        let step = if self.eof {
            self.decoder.decode_eof_ref(&mut self.buf)
        } else {
            self.decoder.decode_ref(&mut self.buf)
        };
        settle(step, self.eof, &mut self.done)
    }

    /// The next update, reading as needed; `None` at the end of the input (never, when following).
    ///
    /// Cancel-safe: dropping the future loses no input.
    pub async fn next(&mut self) -> Option<Result<Update, DecodeError>> {
        loop {
            if let Some(item) = self.next_buffered() {
                return Some(item);
            }
            if let Err(e) = self.fill().await? {
                return Some(Err(e));
            }
        }
    }

    /// Reads more input (one read, or a `follow` pause at the end of a file) for
    /// [`UpdateReader::next_buffered`] and [`UpdateReader::next_buffered_ref`] to decode. Call it
    /// when they give `None`. `None` once the input is finished and everything in it was decoded;
    /// an I/O error ends the input.
    ///
    /// Cancel-safe: dropping the future loses no input.
    pub async fn fill(&mut self) -> Option<Result<(), DecodeError>> {
        loop {
            if self.done {
                return None;
            }
            if self.eof {
                // Decode what is left before the end is reported.
                return Some(Ok(()));
            }
            // An empty buffer waits for the next update with a first read's room only: a stream
            // that sends a sample a second spends most of its time waiting, and a fleet holds a
            // thousand of them. The reads that follow, while the sample arrives, ask for `chunk`.
            let want = if self.buf.is_empty() {
                if self.buf.capacity() > 2 * FIRST_READ_CHUNK {
                    self.buf = BytesMut::new();
                }
                FIRST_READ_CHUNK
            } else {
                self.chunk
            };
            // While nothing is there to read, an empty buffer is given back: the wait holds none.
            let mut room = 0;
            let read = std::future::poll_fn(|cx| {
                self.buf.reserve(want);
                room = self.buf.capacity() - self.buf.len();
                let polled =
                    tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut self.inner), cx, &mut self.buf);
                if polled.is_pending() && self.buf.is_empty() {
                    self.buf = BytesMut::new();
                }
                polled
            });
            match read.await {
                Ok(0) => match self.follow {
                    Some(poll) => tokio::time::sleep(poll).await,
                    None => self.eof = true,
                },
                Ok(n) => {
                    if n == room && want == self.chunk {
                        self.chunk = (self.chunk * 2).min(READ_CHUNK);
                    }
                    return Some(Ok(()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            }
        }
    }
}

/// A decode step as the next item: `None` when more input is needed, and then, at the end of the
/// input, the reader is done.
fn settle<T>(
    step: Result<Option<T>, DecodeError>,
    eof: bool,
    done: &mut bool,
) -> Option<Result<T, DecodeError>> {
    match step {
        Ok(Some(update)) => Some(Ok(update)),
        Ok(None) => {
            *done |= eof;
            None
        }
        Err(e) => Some(Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{EncoderConfig, StreamEncoder};
    use crate::message::Sample;
    use std::future::Future;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_reader_waits_for_input_with_no_buffer_and_keeps_a_part_it_has() {
        let (mut peer, ours) = tokio::io::duplex(1 << 12);
        let mut reader = UpdateReader::new(ours, DecoderConfig::default());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::pin::pin!(reader.fill()).poll(&mut cx).is_pending());
        assert_eq!(reader.buf.capacity(), 0, "nothing to read: no buffer");
        let mut bytes = bytes::BytesMut::new();
        let mut enc = StreamEncoder::new(EncoderConfig::default());
        enc.encode(&Sample::new("part.n", [], 7u64), &mut bytes).unwrap();
        let (first, rest) = bytes.split_at(bytes.len() - 1);
        peer.write_all(first).await.unwrap();
        assert!(reader.fill().await.is_some_and(|r| r.is_ok()));
        while let Some(update) = reader.next_buffered() {
            assert!(!matches!(update, Ok(Update::Value { .. })), "the value is not whole yet");
        }
        assert!(std::pin::pin!(reader.fill()).poll(&mut cx).is_pending());
        assert!(reader.buf.capacity() > 0, "a part of an update keeps its buffer");
        peer.write_all(rest).await.unwrap();
        let value = loop {
            if let Some(Ok(Update::Value { value, .. })) = reader.next().await {
                break value.to_string();
            }
        };
        assert_eq!(value, "7");
    }

    #[tokio::test]
    async fn a_buffer_that_grew_for_a_large_update_is_given_back_while_waiting() {
        let (mut peer, ours) = tokio::io::duplex(1 << 20);
        let mut enc = StreamEncoder::new(EncoderConfig::default());
        let mut bytes = bytes::BytesMut::new();
        // A 40 KB string arrives in one go, then a small number.
        enc.encode(&Sample::new("big.text", [], "x".repeat(40_000).as_str()), &mut bytes).unwrap();
        peer.write_all(&bytes).await.unwrap();
        let mut reader = UpdateReader::new(ours, DecoderConfig::default());
        loop {
            match reader.next().await {
                Some(Ok(Update::Value { .. })) => break,
                Some(Ok(_)) => {}
                other => panic!("{other:?}"),
            }
        }
        assert!(reader.buf.capacity() > 2 * FIRST_READ_CHUNK, "it grew for the string");
        bytes.clear();
        enc.encode(&Sample::new("small.n", [], 7u64), &mut bytes).unwrap();
        peer.write_all(&bytes).await.unwrap();
        let mut got = None;
        while got.is_none() {
            if let Some(Ok(Update::Value { value, .. })) = reader.next().await {
                got = Some(value.to_string());
            }
        }
        assert_eq!(got.as_deref(), Some("7"));
        assert!(
            reader.buf.capacity() <= 2 * FIRST_READ_CHUNK,
            "waiting with {} bytes of buffer",
            reader.buf.capacity()
        );
    }
}
