//! Sans-IO framing: `u32 BE total length | "HMON" | payload`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::FrameError;

/// The magic after the length field.
pub const MAGIC: [u8; 4] = *b"HMON";
/// The size of the length field plus the magic.
pub const HEADER_LEN: usize = 8;
/// The default maximum total length of one frame (16 MiB).
pub const DEFAULT_MAX_FRAME_LEN: u32 = 16 * 1024 * 1024;

/// Takes one complete frame's payload off the front of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed. The length is checked as soon as its 4 bytes are
/// there, before anything is reserved, so a huge length costs nothing but the error; the magic is
/// checked as soon as 8 bytes are there. On success the payload is split off without copying.
pub fn decode_frame(buf: &mut BytesMut, max_len: u32) -> Result<Option<Bytes>, FrameError> {
    // A call looks at the 8-byte header only, and copies the frame out once it is whole: a frame trickling in
    // costs a constant per read.
    work::examined(1);
    let Some(len) = peek_len(buf) else { return Ok(None) };
    check_len(len, max_len)?;
    if buf.len() >= HEADER_LEN {
        let found: [u8; 4] = [buf[4], buf[5], buf[6], buf[7]];
        if found != MAGIC {
            return Err(FrameError::BadMagic { found });
        }
    }
    let total = len as usize;
    if buf.len() < total {
        // Room for the rest of this frame, which the check above bounded.
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    work::examined(total);
    let mut frame = buf.split_to(total);
    frame.advance(HEADER_LEN);
    Ok(Some(frame.freeze()))
}

/// Counts the work of [`decode_frame`] (calls, and bytes copied out), in this crate's unit tests only.
mod work {
    #[cfg(test)]
    thread_local! {
        pub(super) static EXAMINED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[inline(always)]
    pub(super) fn examined(_work: usize) {
        #[cfg(test)]
        EXAMINED.with(|c| c.set(c.get() + _work));
    }
}

/// Whether `first`, the first bytes a peer sent on a connection, can start an HMON stream: a frame header, a
/// total length of 9 to [`DEFAULT_MAX_FRAME_LEN`] bytes and then `HMON`. `None` while the bytes seen fit one
/// but are too few to tell; a first byte above 1 (a length over 16 MiB) is already `Some(false)`. It looks at 8
/// bytes at most.
///
/// ```
/// assert_eq!(hmon::sniff(b"\0\0\0\x1bHMONSupportedProtocols=2"), Some(true));
/// assert_eq!(hmon::sniff(b"\0\0"), None);
/// assert_eq!(hmon::sniff(b"HTTP/1.1 400 Bad Request"), Some(false));
/// ```
pub fn sniff(first: &[u8]) -> Option<bool> {
    // The smallest length these bytes can start (the missing ones 0) must fit; a whole one must be valid.
    let mut len = [0u8; 4];
    let known = first.len().min(4);
    len[..known].copy_from_slice(&first[..known]);
    let len = u32::from_be_bytes(len);
    if len > DEFAULT_MAX_FRAME_LEN || (known == 4 && check_len(len, DEFAULT_MAX_FRAME_LEN).is_err()) {
        return Some(false);
    }
    let magic = first.get(4..first.len().min(HEADER_LEN)).unwrap_or_default();
    if magic != &MAGIC[..magic.len()] {
        return Some(false);
    }
    (first.len() >= HEADER_LEN).then_some(true)
}

fn peek_len(buf: &[u8]) -> Option<u32> {
    buf.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Validates a total length against the rules and the maximum.
pub fn check_len(len: u32, max_len: u32) -> Result<(), FrameError> {
    match len {
        0..=7 => Err(FrameError::TooShort { len }),
        8 => Err(FrameError::EmptyPayload),
        _ if len > max_len => Err(FrameError::TooLarge { len, max: max_len }),
        _ => Ok(()),
    }
}

/// Appends one frame holding `payload` to `buf`, or fails if the payload is empty or too large for a u32.
pub fn encode_frame(payload: &[u8], buf: &mut BytesMut) -> Result<(), FrameError> {
    let total = payload
        .len()
        .checked_add(HEADER_LEN)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(FrameError::TooLarge { len: u32::MAX, max: u32::MAX })?;
    if payload.is_empty() {
        return Err(FrameError::EmptyPayload);
    }
    buf.reserve(total as usize);
    buf.put_u32(total);
    buf.put_slice(&MAGIC);
    buf.put_slice(payload);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_largest_frame_trickled_a_byte_per_read_costs_a_small_constant_times_the_whole() {
        let payload = vec![b'x'; DEFAULT_MAX_FRAME_LEN as usize - HEADER_LEN];
        let mut wire = BytesMut::new();
        encode_frame(&payload, &mut wire).unwrap();
        let work_of = |step: usize| {
            work::EXAMINED.with(|c| c.set(0));
            let mut buf = BytesMut::new();
            let mut frames = 0;
            for piece in wire.chunks(step) {
                buf.extend_from_slice(piece);
                while decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().is_some() {
                    frames += 1;
                }
            }
            assert_eq!(frames, 1);
            work::EXAMINED.with(|c| c.get())
        };
        let (whole, trickled) = (work_of(wire.len()), work_of(1));
        eprintln!(
            "figure: a 16 MiB frame a byte per read: {:.2}x the work of one read",
            trickled as f64 / whole as f64
        );
        assert!(trickled <= 3 * whole, "{trickled} against {whole}");
    }

    #[test]
    fn the_first_bytes_of_other_protocols_are_not_hmon() {
        let mut hmon = BytesMut::new();
        encode_frame(b"SupportedProtocols=2", &mut hmon).unwrap();
        assert_eq!(sniff(&hmon), Some(true));
        for cut in 0..HEADER_LEN {
            assert_eq!(sniff(&hmon[..cut]), None, "{cut} bytes of a frame header");
        }
        let others: [&[u8]; 7] = [
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfe", // an smon resync
            b"HELLO 2\r\nHEAD nsec",                                                     // sys161
            b"\x01\0\0\0\0\0\0\0\0\0\0\0\0\x01", // an rvOS host-transport frame
            b"\0\x01\0\x02\0\0\0\0\0",           // a Mono agent's Hello
            b"HTTP/1.1 400 Bad Request\r\n",
            b"GET / HTTP/1.1\r\n",
            b"\0\0\0\x08HMON", // an empty payload: no HMON peer sends one
        ];
        for other in others {
            assert_eq!(sniff(other), Some(false), "{:?}", other.escape_ascii().to_string());
        }
        assert_eq!(sniff(b"\x02"), Some(false), "a length over 16 MiB, from its first byte");
    }

    #[test]
    fn split_anywhere_gives_the_same_frame() {
        let mut whole = BytesMut::new();
        encode_frame(b"UsingProtocol=2", &mut whole).unwrap();
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            assert!(decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().is_none(), "cut {cut}");
            buf.extend_from_slice(&whole[cut..]);
            assert_eq!(
                &decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap().unwrap()[..],
                b"UsingProtocol=2"
            );
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn too_large_is_refused_on_the_header_without_reserving() {
        let mut buf = BytesMut::with_capacity(16);
        buf.put_u32(20 * 1024 * 1024);
        let cap = buf.capacity();
        let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len: 20971520, max: 16777216 }), "{err}");
        assert_eq!(buf.capacity(), cap, "nothing was reserved for the frame");
    }

    #[test]
    fn max_u32_length_is_refused() {
        let mut buf = BytesMut::from(&[0xFF, 0xFF, 0xFF, 0xFF][..]);
        assert!(matches!(decode_frame(&mut buf, u32::MAX - 1), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn short_lengths_are_errors() {
        for len in 0..8u32 {
            let mut buf = BytesMut::new();
            buf.put_u32(len);
            assert!(matches!(decode_frame(&mut buf, 100), Err(FrameError::TooShort { len: l }) if l == len));
        }
        let mut buf = BytesMut::new();
        buf.put_u32(8);
        buf.put_slice(b"HMON");
        assert!(matches!(decode_frame(&mut buf, 100), Err(FrameError::EmptyPayload)));
    }

    #[test]
    fn ride_magic_is_refused() {
        let mut buf = BytesMut::from(&b"\x00\x00\x00\x17RIDEUsingProtocol=2"[..]);
        let err = decode_frame(&mut buf, 100).unwrap_err();
        assert!(matches!(err, FrameError::BadMagic { found } if &found == b"RIDE"));
        assert!(err.to_string().contains("RIDE"));
    }

    #[test]
    fn empty_payload_is_not_encoded() {
        assert!(matches!(encode_frame(b"", &mut BytesMut::new()), Err(FrameError::EmptyPayload)));
    }
}
