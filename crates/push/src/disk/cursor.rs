//! The cursor files: where the oldest unacknowledged record starts.
//!
//! ```text
//! offset  size  field
//!      0     4  magic     F3 54 51 43 ("\xF3TQC")
//!      4     4  crc       CRC-32C of bytes 8..16
//!      8     8  position  u64, little-endian
//! ```
//!
//! Two files hold one:
//! * `cursor` is replaced (written as `cursor.tmp`, then renamed over it) on every
//!   acknowledgement, without an fsync: a rename is atomic against a process crash, so after a
//!   `kill -9` nothing acknowledged is sent again;
//! * `cursor.synced` is replaced by every sync, durably: `cursor.synced.tmp` written and fsynced,
//!   renamed, and the directory fsynced. Segments are deleted only after the `cursor.synced`
//!   that passes them is durable.
//!
//! At open the larger valid position of the two wins (both only ever hold acknowledged
//! positions). After a power loss `cursor` may be empty or torn (its rename durable, its bytes
//! not); then `cursor.synced` still holds the last synced position. With neither, the queue
//! starts from its oldest segment: duplicates, never loss.
//!
//! New records are written after the largest position any of the four files holds (the temporary
//! ones too), so an old value that a crash brings back can never point past a record.

use byteorder::{ByteOrder, LittleEndian as LE};

/// The cursor replaced on every acknowledgement.
pub const ACKED: &str = "cursor";
/// Written first, then renamed over [`ACKED`].
pub const ACKED_TMP: &str = "cursor.tmp";
/// The cursor replaced, durably, by every sync.
pub const SYNCED: &str = "cursor.synced";
/// Written and fsynced first, then renamed over [`SYNCED`].
pub const SYNCED_TMP: &str = "cursor.synced.tmp";

/// The first four bytes of a cursor file.
pub const MAGIC: [u8; 4] = [0xF3, b'T', b'Q', b'C'];

/// A cursor file's length.
pub const LEN: usize = 16;

/// The bytes of a cursor file holding `position`.
pub fn encode(position: u64) -> [u8; LEN] {
    let mut out = [0; LEN];
    out[..4].copy_from_slice(&MAGIC);
    LE::write_u64(&mut out[8..], position);
    let crc = crc32c::crc32c(&out[8..]);
    LE::write_u32(&mut out[4..8], crc);
    out
}

/// The position in a cursor file's bytes, or `None` when they are not exactly a valid one.
pub fn decode(bytes: &[u8]) -> Option<u64> {
    if bytes.len() != LEN || bytes[..4] != MAGIC {
        return None;
    }
    (crc32c::crc32c(&bytes[8..]) == LE::read_u32(&bytes[4..8])).then(|| LE::read_u64(&bytes[8..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let bytes = encode(0x0123_4567_89ab_cdef);
        assert_eq!(decode(&bytes), Some(0x0123_4567_89ab_cdef));
        for i in 0..LEN {
            let mut bad = bytes;
            bad[i] ^= 0x10;
            assert_eq!(decode(&bad), None, "byte {i} flipped");
        }
        assert_eq!(decode(&bytes[..LEN - 1]), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0; LEN]), None);
    }
}
