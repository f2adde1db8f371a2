//! The sans-IO codec of the host transport: rvOS channels carried over one Unix-socket or TCP stream, as
//! [`Frame`]s ([`decode_frame`], [`encode_frame`]). Its tokio-util face is [`HostCodec`](crate::HostCodec)
//! (feature `codec`).
//!
//! rvOS has no sockets; a process talks through channel handles, and capabilities (channel ends) move
//! inside messages. On a host, one stream stands for one client process and the kernel side together,
//! and every frame names the channel it belongs to:
//!
//! ```text
//! frame   = kind:u8  channel:u32le  body
//! kind 1  MESSAGE  body = sender_pid:u64le  cap_count:u8  caps:u32le × cap_count  len:u16le  data[len]
//! kind 2  CLOSE    body = (empty)           "I dropped my end of this channel"
//!
//! limits  cap_count <= 4 (MAX_CAPS), len <= 1024 (MAX_MSG_SIZE): checked on the header, before buffering,
//!         so a frame is at most 1 + 4 + 8 + 1 + 16 + 2 + 1024 = 1056 bytes.
//! ```
//!
//! Rules, modelled on the rvOS kernel:
//! * Channel 0 exists from the start: the boot channel to init.
//! * Channel ids are chosen by the server (the "kernel") and never reused on one stream. A channel end
//!   reaches the client only as a capability: `ConnectService` on channel 0 is answered by
//!   `BootResponse::Ok` whose `caps[0]` is a **new** channel id; from then on frames on that id belong to
//!   it. A cap sent by the client hands its end over (the client must not use that id again).
//! * `CLOSE` says one side dropped its end. Messages sent before it are still delivered first (the stream
//!   is ordered), then the peer's receive reports "closed", as rvOS's does after the queue drains.
//!   Closing the stream closes every channel on it.
//! * The server stamps `sender_pid` with the real sender's pid; the client's value is ignored.

#[allow(unused_imports)]
use crate::prelude::*;
use bytes::{Buf, BufMut, BytesMut};

use crate::message::{ChannelId, Message, MAX_CAPS};
use crate::wire::MAX_MSG_SIZE;

/// The frame kind byte of a message.
pub const KIND_MESSAGE: u8 = 1;
/// The frame kind byte of a close.
pub const KIND_CLOSE: u8 = 2;
/// The largest frame: kind, channel, pid, cap count, four caps, length and 1024 data bytes.
pub const MAX_FRAME_SIZE: usize = 1 + 4 + 8 + 1 + 4 * MAX_CAPS + 2 + MAX_MSG_SIZE;

/// One unit on the host transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A message on a channel.
    Message {
        /// The channel it travels on.
        channel: ChannelId,
        /// The message.
        message: Message,
    },
    /// The sender dropped its end of `channel`.
    Close {
        /// The channel that was closed.
        channel: ChannelId,
    },
}

impl Frame {
    /// The channel this frame belongs to.
    pub fn channel(&self) -> ChannelId {
        match self {
            Frame::Message { channel, .. } | Frame::Close { channel } => *channel,
        }
    }
}

/// A frame that breaks the transport's rules.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The kind byte is neither MESSAGE nor CLOSE.
    #[error("unknown frame kind {0} (0x{0:02x})")]
    UnknownKind(u8),
    /// More caps than a message can carry.
    #[error("frame on channel {channel} carries {count} caps, at most {max} allowed")]
    TooManyCaps {
        /// The channel.
        channel: u32,
        /// The count in the header.
        count: u8,
        /// [`MAX_CAPS`].
        max: usize,
    },
    /// More data than a message can carry.
    #[error("frame on channel {channel} carries {len} data bytes, at most {max} allowed")]
    DataTooLong {
        /// The channel.
        channel: u32,
        /// The length in the header.
        len: usize,
        /// [`MAX_MSG_SIZE`].
        max: usize,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({buffered} bytes buffered)")]
    Truncated {
        /// How many bytes of the partial frame had arrived.
        buffered: usize,
    },
    /// The server's first bytes are not the host transport's (see [`sniff`]): it speaks another protocol.
    /// Only from [`crate::Client`], which checks them before its first frame.
    #[error("not an rvOS sysinfo host transport: the peer began with \"{}\"", .first.escape_ascii())]
    OtherProtocol {
        /// The first bytes it sent (at most 24: enough for any protocol's signature).
        first: Vec<u8>,
    },
    /// The socket failed.
    #[cfg(feature = "std")]
    #[error("transport I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Appends the encoding of `frame`.
pub fn encode_frame(frame: &Frame, dst: &mut BytesMut) {
    match frame {
        Frame::Message { channel, message } => {
            // A Message never holds more than MAX_CAPS caps or MAX_MSG_SIZE bytes.
            put_message(dst, *channel, message.sender_pid(), message.caps(), message.data());
        }
        Frame::Close { channel } => {
            dst.put_u8(KIND_CLOSE);
            dst.put_u32_le(channel.0);
        }
    }
}

/// Appends the frame of a message carrying `data`, with no caps and sender 0 (what [`encode_frame`]
/// writes for `Message::with_data(data)`), without making the message. Refused when `data` is longer
/// than [`MAX_MSG_SIZE`], as [`Message::with_data`] refuses it.
pub fn encode_data_frame(
    channel: ChannelId,
    data: &[u8],
    dst: &mut BytesMut,
) -> Result<(), crate::WireError> {
    if data.len() > MAX_MSG_SIZE {
        return Err(crate::WireError::BufferOverflow { max: MAX_MSG_SIZE });
    }
    put_message(dst, channel, 0, &[], data);
    Ok(())
}

/// Appends a message frame; the caller has checked `caps` against [`MAX_CAPS`] and `data` against
/// [`MAX_MSG_SIZE`].
fn put_message(dst: &mut BytesMut, channel: ChannelId, sender_pid: u64, caps: &[ChannelId], data: &[u8]) {
    dst.reserve(1 + 4 + 8 + 1 + 4 * caps.len() + 2 + data.len());
    dst.put_u8(KIND_MESSAGE);
    dst.put_u32_le(channel.0);
    dst.put_u64_le(sender_pid);
    dst.put_u8(caps.len() as u8);
    for cap in caps {
        dst.put_u32_le(cap.0);
    }
    dst.put_u16_le(data.len() as u16);
    dst.put_slice(data);
}

/// Counts the work of [`decode_frame`] (calls, and bytes taken out), in this crate's unit tests only.
mod work {
    #[cfg(test)]
    thread_local! {
        pub(super) static EXAMINED: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
    }

    #[inline(always)]
    pub(super) fn examined(_work: usize) {
        #[cfg(test)]
        EXAMINED.with(|c| c.set(c.get() + _work));
    }
}

/// Decodes one frame from the front of `src`: `Ok(None)` means more bytes are needed.
///
/// Limits are checked as soon as their header field has arrived, before anything is buffered for the body.
pub fn decode_frame(src: &mut BytesMut) -> Result<Option<Frame>, TransportError> {
    // A call reads at most the fixed header positions (no scan), and takes a frame out once it is whole: a
    // frame trickling in costs a constant per read.
    work::examined(1);
    let Some(&kind) = src.first() else { return Ok(None) };
    if kind != KIND_MESSAGE && kind != KIND_CLOSE {
        return Err(TransportError::UnknownKind(kind));
    }
    if src.len() < 5 {
        return Ok(None);
    }
    let channel = u32::from_le_bytes([src[1], src[2], src[3], src[4]]);
    if kind == KIND_CLOSE {
        src.advance(5);
        return Ok(Some(Frame::Close { channel: ChannelId(channel) }));
    }
    const CAP_COUNT_AT: usize = 1 + 4 + 8;
    let Some(&cap_count) = src.get(CAP_COUNT_AT) else { return Ok(None) };
    if usize::from(cap_count) > MAX_CAPS {
        return Err(TransportError::TooManyCaps { channel, count: cap_count, max: MAX_CAPS });
    }
    let len_at = CAP_COUNT_AT + 1 + 4 * usize::from(cap_count);
    if src.len() < len_at + 2 {
        return Ok(None);
    }
    let len = usize::from(u16::from_le_bytes([src[len_at], src[len_at + 1]]));
    if len > MAX_MSG_SIZE {
        return Err(TransportError::DataTooLong { channel, len, max: MAX_MSG_SIZE });
    }
    let total = len_at + 2 + len;
    if src.len() < total {
        src.reserve(total - src.len());
        return Ok(None);
    }
    work::examined(total);
    let mut frame = src.split_to(total);
    frame.advance(5);
    let sender_pid = frame.get_u64_le();
    frame.advance(1);
    // The data stays in the read buffer: no copy, no allocation.
    let data = frame.split_off(4 * usize::from(cap_count) + 2).freeze();
    let mut message =
        Message::with_bytes(data).expect("length checked against MAX_MSG_SIZE").with_sender(sender_pid);
    for _ in 0..cap_count {
        message.push_cap(ChannelId(frame.get_u32_le())).expect("count checked against MAX_CAPS");
    }
    Ok(Some(Frame::Message { channel: ChannelId(channel), message }))
}

/// Whether `first`, the first bytes a server sent on a connection, can start the host transport's replies: the
/// first frame is init's answer on the boot channel, a MESSAGE (with at most [`MAX_CAPS`] caps) or a CLOSE on
/// channel 0. `None` while the bytes seen fit one but are too few to tell; the kind byte alone tells it from
/// every other protocol telemon speaks. It looks at 14 bytes at most.
///
/// ```
/// assert_eq!(sysinfo_wire::sniff(&[1, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1]), Some(true));
/// assert_eq!(sysinfo_wire::sniff(&[1, 0, 0]), None);
/// assert_eq!(sysinfo_wire::sniff(b"HELLO 2\r\n"), Some(false));
/// ```
pub fn sniff(first: &[u8]) -> Option<bool> {
    let (&kind, rest) = first.split_first()?;
    if kind != KIND_MESSAGE && kind != KIND_CLOSE {
        return Some(false);
    }
    let channel = &rest[..rest.len().min(4)];
    if channel.iter().any(|&b| b != 0) {
        return Some(false);
    }
    match (kind, first.get(13)) {
        (KIND_CLOSE, _) if channel.len() == 4 => Some(true),
        (KIND_MESSAGE, Some(&caps)) => Some(usize::from(caps) <= MAX_CAPS),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_of_other_protocols_are_not_the_host_transport() {
        let mut boot_reply = BytesMut::new();
        let message = Message::with_data(b"ok").unwrap();
        encode_frame(&Frame::Message { channel: ChannelId::BOOT, message }, &mut boot_reply);
        assert_eq!(sniff(&boot_reply), Some(true));
        for cut in 0..14 {
            assert_eq!(sniff(&boot_reply[..cut]), None, "{cut} bytes");
        }
        assert_eq!(sniff(&[KIND_CLOSE, 0, 0, 0, 0]), Some(true));
        let others: [&[u8]; 7] = [
            b"\0\0\0\x1bHMONSupportedProtocols=2",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"HELLO 2\r\n",
            b"\0\x01\0\x02\0",
            b"HTTP/1.1 400 Bad Request\r\n",
            &[KIND_MESSAGE, 9, 0, 0, 0], // not the boot channel
            &[KIND_MESSAGE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5], // more caps than a message holds
        ];
        for other in others {
            assert_eq!(sniff(other), Some(false), "{:?}", other.escape_ascii().to_string());
        }
    }

    #[test]
    fn a_data_frame_is_the_frame_of_its_message() {
        for data in [&b""[..], b"ps", &[7u8; MAX_MSG_SIZE]] {
            let (mut direct, mut via) = (BytesMut::new(), BytesMut::new());
            encode_data_frame(ChannelId(9), data, &mut direct).unwrap();
            let message = Message::with_data(data).unwrap();
            encode_frame(&Frame::Message { channel: ChannelId(9), message }, &mut via);
            assert_eq!(direct, via);
        }
        let mut dst = BytesMut::new();
        assert!(encode_data_frame(ChannelId(9), &[0; MAX_MSG_SIZE + 1], &mut dst).is_err());
        assert!(dst.is_empty());
    }

    /// Decodes a whole reply's frames fed `step` bytes at a time into a reassembler; returns the text and work.
    fn trickle(wire: &[u8], step: usize) -> (String, usize) {
        work::EXAMINED.with(|c| c.set(0));
        let mut buf = BytesMut::new();
        let mut reply = crate::Reassembler::default();
        for piece in wire.chunks(step) {
            buf.extend_from_slice(piece);
            while let Some(Frame::Message { message, .. }) = decode_frame(&mut buf).unwrap() {
                reply.push(message.data()).unwrap();
            }
        }
        (reply.finish().text, work::EXAMINED.with(|c| c.get()))
    }

    #[test]
    fn a_largest_reply_trickled_a_byte_per_read_costs_a_small_constant_times_the_whole() {
        // A 4 MiB reply (the default cap) in 1024-byte chunks and the sentinel, as the service sends it.
        let text = "0123456789abcdef".repeat(crate::DEFAULT_MAX_RESPONSE / 16);
        let mut wire = BytesMut::new();
        for chunk in crate::chunk_text(text.as_bytes()).map(|c| c.to_vec()).chain([Vec::new()]) {
            let message = Message::with_data(chunk).unwrap();
            encode_frame(&Frame::Message { channel: ChannelId(1), message }, &mut wire);
        }
        let (whole, whole_work) = trickle(&wire, wire.len());
        let (trickled, work) = trickle(&wire, 1);
        assert_eq!(whole, text);
        assert_eq!(trickled, text);
        eprintln!(
            "figure: {} bytes a byte per read: {:.2}x the work of one read",
            wire.len(),
            work as f64 / whole_work as f64
        );
        assert!(work <= 3 * whole_work, "{work} against {whole_work}");
    }

    #[test]
    fn limits_are_checked_on_the_header() {
        let mut b = BytesMut::from(&[1u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5][..]);
        assert!(matches!(decode_frame(&mut b), Err(TransportError::TooManyCaps { count: 5, .. })));
        let mut b = BytesMut::from(&[1u8, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff][..]);
        assert!(matches!(decode_frame(&mut b), Err(TransportError::DataTooLong { len: 65535, .. })));
        let mut b = BytesMut::from(&[9u8][..]);
        assert!(matches!(decode_frame(&mut b), Err(TransportError::UnknownKind(9))));
    }

    #[test]
    fn a_message_with_caps_round_trips() {
        let mut m = Message::with_data(&b"\x00"[..]).unwrap().with_sender(3);
        m.push_cap(ChannelId(7)).unwrap();
        let frame = Frame::Message { channel: ChannelId::BOOT, message: m };
        let mut b = BytesMut::new();
        encode_frame(&frame, &mut b);
        encode_frame(&Frame::Close { channel: ChannelId(7) }, &mut b);
        assert_eq!(decode_frame(&mut b).unwrap(), Some(frame));
        assert_eq!(decode_frame(&mut b).unwrap(), Some(Frame::Close { channel: ChannelId(7) }));
        assert_eq!(decode_frame(&mut b).unwrap(), None);
    }

    #[test]
    fn a_decoded_messages_data_is_the_read_buffers_bytes_and_its_caps_are_inline() {
        let mut b = BytesMut::new();
        for (data, caps) in [
            (&b"first"[..], &[][..]),
            (&b"second"[..], &[ChannelId(5), ChannelId(6), ChannelId(7), ChannelId(8)][..]),
        ] {
            let mut m = Message::with_data(data).unwrap().with_sender(2);
            for &cap in caps {
                m.push_cap(cap).unwrap();
            }
            encode_frame(&Frame::Message { channel: ChannelId(4), message: m }, &mut b);
        }
        let buffer = b.as_ptr_range();
        let inside = |m: &Message| buffer.contains(&m.data().as_ptr());
        let Some(Frame::Message { message: first, .. }) = decode_frame(&mut b).unwrap() else { panic!() };
        let Some(Frame::Message { message: second, .. }) = decode_frame(&mut b).unwrap() else { panic!() };
        assert!(inside(&first) && inside(&second), "no copy");
        assert_eq!((first.data(), first.caps(), first.sender_pid()), (&b"first"[..], &[][..], 2));
        assert_eq!(second.data(), b"second");
        assert_eq!(second.caps(), [ChannelId(5), ChannelId(6), ChannelId(7), ChannelId(8)]);
        let mut too_many = second.clone();
        assert!(too_many.push_cap(ChannelId(9)).is_err());
        assert_eq!(too_many, second, "a refused cap changes nothing");
        #[cfg(feature = "client")]
        {
            let mut kept = second.clone();
            kept.detach();
            assert!(!inside(&kept), "a message kept for later has its own bytes");
            assert_eq!(kept, second);
        }
        assert_eq!(second.into_data(), b"second", "copied out of the shared buffer");
    }
}
