//! The body of the fuzz target `push_disk_record`, also replayed over its seed corpus by
//! the unit tests of `crate::fuzz` on stable (the fuzz target calls it as
//! `telemon_push::fuzz::record_reader`).

use super::frame::{decode, encode, Decoded, RecordIn, HEADER_LEN, MAX_RECORD};
use super::fs::FsFile;
use super::segment;

/// `push_disk_record`: the bytes as a stream of records (and as a segment file) never make the
/// reader panic or read, skip or allocate past what it was given; every record it finds
/// re-encodes to the same bytes; a record cut anywhere needs more; the file scan finds the same
/// records as the decoder stepping through the bytes.
#[doc(hidden)]
pub fn record_reader(data: &[u8]) {
    let mut at = 0;
    let mut found = Vec::new();
    while at < data.len() {
        let rest = &data[at..];
        match decode(rest) {
            Decoded::Record { header, payload } => {
                let len = header.record_len();
                assert!(len <= rest.len() && len <= MAX_RECORD);
                let mut again = Vec::new();
                encode(&RecordIn { meta: header.meta, payload }, &mut again)
                    .expect("a decoded record encodes");
                assert_eq!(again, rest[..len], "a record changed on a round trip at {at}");
                for cut in [0, 1, 3, 4, HEADER_LEN - 1, HEADER_LEN, len / 2, len - 1] {
                    if cut < len {
                        assert!(
                            matches!(decode(&rest[..cut]), Decoded::NeedMore { .. }),
                            "cut at {cut} of {len}"
                        );
                    }
                }
                found.push((at as u64, header));
                at += len;
            }
            Decoded::NeedMore { needed } => {
                assert!(needed > rest.len() && needed <= MAX_RECORD, "need {needed} of {}", rest.len());
                break;
            }
            Decoded::Damaged { header, skip } => {
                assert!(skip >= 1 && skip <= rest.len(), "skip {skip} of {}", rest.len());
                if let Some(h) = header {
                    assert_eq!(skip, h.record_len());
                }
                at += skip;
            }
        }
    }
    // The segment scan reads the same bytes in windows and must agree.
    let scan = segment::scan(&Bytes(data.to_vec()), 0, data.len() as u64);
    assert!(scan.error.is_none());
    let scanned: Vec<_> = scan.records.iter().map(|&(off, h)| (off, h)).collect();
    assert_eq!(scanned, found, "the scan and the decoder disagree");
    assert!(scan.good_end <= scan.end && scan.end <= data.len() as u64);
}

/// Bytes as a read-only file.
struct Bytes(Vec<u8>);

impl FsFile for Bytes {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.0.len() as u64)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let from = usize::try_from(offset).unwrap_or(usize::MAX).min(self.0.len());
        let n = buf.len().min(self.0.len() - from);
        buf[..n].copy_from_slice(&self.0[from..from + n]);
        Ok(n)
    }
    fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(std::io::ErrorKind::PermissionDenied.into())
    }
    fn set_len(&self, _: u64) -> std::io::Result<()> {
        Err(std::io::ErrorKind::PermissionDenied.into())
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Bytes(self.0.clone()))
    }
}
