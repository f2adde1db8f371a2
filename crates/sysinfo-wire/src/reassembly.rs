//! Chunked replies: the service's side ([`chunk_text`]) and the client's ([`Reassembler`]).
//!
//! The service sends its text in messages of exactly [`MAX_MSG_SIZE`] bytes (the last one shorter), then a
//! zero-length sentinel. Chunk boundaries are byte offsets, so a line or a UTF-8 sequence may be split; the
//! reassembler therefore concatenates bytes and converts to text only at the end.

#[allow(unused_imports)]
use crate::prelude::*;
use crate::wire::MAX_MSG_SIZE;
use bytes::{Bytes, BytesMut};

/// The default cap on a reassembled reply: 4 MiB, far above a full 16384-entry trace ring (~1 MiB at most).
pub const DEFAULT_MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// Splits `text` into the chunks the service sends, without the sentinel: every chunk but the last is
/// exactly [`MAX_MSG_SIZE`] bytes; empty text gives no chunk at all.
pub fn chunk_text(text: &[u8]) -> core::slice::Chunks<'_, u8> {
    text.chunks(MAX_MSG_SIZE)
}

/// Why a reply ended.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum End {
    /// The zero-length sentinel arrived.
    Sentinel,
    /// The channel was closed (the service timed out, the client went first, or the server went away).
    Closed,
}

/// A reply that broke the reassembler's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReassemblyError {
    /// The reply grew past the configured limit.
    #[error("reply exceeds {max} bytes (next chunk would make it {len})")]
    TooLarge {
        /// The size the reply would have reached.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A chunk longer than a message can carry.
    #[error("chunk of {len} bytes is longer than a message ({max} bytes)")]
    ChunkTooLarge {
        /// The chunk's length.
        len: usize,
        /// [`MAX_MSG_SIZE`].
        max: usize,
    },
    /// A chunk arrived after the reply had ended.
    #[error("chunk after the end of the reply")]
    AfterEnd,
}

/// A complete reply.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The text (invalid UTF-8, which the kernel never sends, is replaced by U+FFFD).
    pub text: String,
    /// How it ended.
    pub end: End,
    /// How many data chunks arrived (the sentinel not counted).
    pub chunks: usize,
    /// Whether invalid UTF-8 had to be replaced.
    pub lossy: bool,
}

/// Collects chunks until the sentinel or a close.
///
/// Chunks are kept as they came, without a copy when they come as [`Bytes`] (a decoded message's data,
/// see [`Reassembler::push_bytes`]) or as a `Vec` ([`Reassembler::push_owned`]), and joined once, into an
/// allocation of the exact size, when the reply is finished. Borrowed chunks ([`Reassembler::push`]) are
/// copied once, one after the other into one buffer, which is the text when they are all there is.
#[derive(Debug, Clone)]
pub struct Reassembler {
    parts: Vec<Bytes>,
    /// The borrowed chunks pushed since the last kept one, copied.
    copied: BytesMut,
    len: usize,
    max: usize,
    chunks: usize,
    end: Option<End>,
}

impl Default for Reassembler {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_RESPONSE)
    }
}

impl Reassembler {
    /// A reassembler that refuses replies over `max` bytes.
    pub fn new(max: usize) -> Self {
        Reassembler { parts: Vec::new(), copied: BytesMut::new(), len: 0, max, chunks: 0, end: None }
    }

    /// Takes one chunk's data. An empty chunk is the sentinel: returns `Ok(true)` once the reply is complete.
    pub fn push(&mut self, chunk: &[u8]) -> Result<bool, ReassemblyError> {
        self.accept(chunk.len())?;
        self.copied.extend_from_slice(chunk);
        Ok(self.end.is_some())
    }

    /// Like [`Reassembler::push`], keeping the chunk's buffer instead of copying it.
    pub fn push_owned(&mut self, chunk: Vec<u8>) -> Result<bool, ReassemblyError> {
        self.push_bytes(Bytes::from(chunk))
    }

    /// Like [`Reassembler::push`], keeping the chunk's bytes (e.g. [`Message::into_bytes`], which are
    /// the connection's read buffer) instead of copying them.
    ///
    /// [`Message::into_bytes`]: crate::Message::into_bytes
    pub fn push_bytes(&mut self, chunk: Bytes) -> Result<bool, ReassemblyError> {
        self.accept(chunk.len())?;
        self.keep(chunk);
        Ok(self.end.is_some())
    }

    /// Keeps an accepted chunk (the sentinel is not kept), after the chunks copied before it.
    fn keep(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.keep_copied();
            self.parts.push(chunk);
        }
    }

    /// Moves the chunks copied so far into the parts, as one (no copy).
    fn keep_copied(&mut self) {
        if !self.copied.is_empty() {
            self.parts.push(core::mem::take(&mut self.copied).freeze());
        }
    }

    /// Checks a chunk of `len` bytes against the limits and the state, and counts it.
    fn accept(&mut self, len: usize) -> Result<(), ReassemblyError> {
        if self.end.is_some() {
            return Err(ReassemblyError::AfterEnd);
        }
        if len == 0 {
            self.end = Some(End::Sentinel);
            return Ok(());
        }
        if len > MAX_MSG_SIZE {
            return Err(ReassemblyError::ChunkTooLarge { len, max: MAX_MSG_SIZE });
        }
        let total = self.len + len;
        if total > self.max {
            return Err(ReassemblyError::TooLarge { len: total, max: self.max });
        }
        self.len = total;
        self.chunks += 1;
        Ok(())
    }

    /// Records that the channel was closed (a no-op after the sentinel).
    pub fn close(&mut self) {
        self.end.get_or_insert(End::Closed);
    }

    /// Whether the reply has ended.
    pub fn is_done(&self) -> bool {
        self.end.is_some()
    }

    /// Bytes collected so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been collected.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The reply; if neither a sentinel nor a close was seen, it ended by [`End::Closed`].
    pub fn finish(mut self) -> Reply {
        let end = self.end.unwrap_or(End::Closed);
        self.keep_copied();
        let bytes = match self.parts.len() {
            // Without a copy when the one chunk's buffer is its own.
            1 => self.parts.pop().map(Vec::from).unwrap_or_default(),
            _ => {
                let mut joined = Vec::with_capacity(self.len);
                for part in &self.parts {
                    joined.extend_from_slice(part);
                }
                joined
            }
        };
        let (text, lossy) = match String::from_utf8(bytes) {
            Ok(text) => (text, false),
            Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
        };
        Reply { text, end, chunks: self.chunks, lossy }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_across_chunks_survives() {
        let text = "é".repeat(600); // 1200 bytes: the first chunk ends inside a 2-byte sequence? 1024 is even, so
        let text = format!("x{text}"); // shift by one to make it split.
        let mut r = Reassembler::default();
        for c in chunk_text(text.as_bytes()) {
            assert!(!r.push(c).unwrap());
        }
        assert!(r.push(&[]).unwrap());
        let reply = r.finish();
        assert_eq!(reply.text, text);
        assert!(!reply.lossy);
        assert_eq!(reply.chunks, 2);
    }

    #[test]
    fn owned_and_borrowed_chunks_join_in_order() {
        let mut r = Reassembler::default();
        r.push_owned(b"ab".to_vec()).unwrap();
        r.push(b"cd").unwrap();
        let buffer = Bytes::from_static(b"..ef..");
        r.push_bytes(buffer.slice(2..4)).unwrap();
        assert!(r.push_owned(Vec::new()).unwrap());
        let reply = r.finish();
        assert_eq!((reply.text.as_str(), reply.chunks, reply.end), ("abcdef", 3, End::Sentinel));
        // Borrowed chunks are copied into one buffer, which becomes the text.
        let mut r = Reassembler::default();
        r.push(b"gh").unwrap();
        r.push(b"ij").unwrap();
        assert!(r.parts.is_empty() && r.copied.len() == 4);
        assert_eq!(r.finish().text, "ghij");
        // One chunk whose buffer is its own becomes the text without a copy.
        let mut r = Reassembler::default();
        let chunk = b"whole".to_vec();
        let at = chunk.as_ptr();
        r.push_owned(chunk).unwrap();
        assert_eq!(r.finish().text.as_ptr(), at);
        let mut r = Reassembler::default();
        r.push(&[0xff, b'x']).unwrap();
        r.close();
        let reply = r.finish();
        assert_eq!((reply.text.as_str(), reply.lossy, reply.end), ("\u{fffd}x", true, End::Closed));
    }

    #[test]
    fn limits_and_order() {
        let mut r = Reassembler::new(1500);
        r.push(&[b'a'; 1024]).unwrap();
        assert_eq!(r.push(&[b'a'; 1024]), Err(ReassemblyError::TooLarge { len: 2048, max: 1500 }));
        let mut r = Reassembler::new(10);
        r.push(&[]).unwrap();
        assert_eq!(r.push(b"x"), Err(ReassemblyError::AfterEnd));
        r.close();
        assert_eq!(r.finish().end, End::Sentinel);
    }
}
