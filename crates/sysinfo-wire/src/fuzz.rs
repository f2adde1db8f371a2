//! Property checks shared by the fuzz targets and the corpus-replay tests. Not a stable API.

#[allow(unused_imports)]
use crate::prelude::*;

use bytes::BytesMut;

use crate::message::{BootRequest, BootResponse, NewConnection, SysinfoCommand};
use crate::reassembly::Reassembler;
use crate::report::Report;
use crate::transport::{decode_frame, encode_frame, Frame};
use crate::wire::{from_bytes, to_bytes, Wire};

fn reencodes<T: Wire + PartialEq + core::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = from_bytes::<T>(data) {
        let bytes = to_bytes(&v).expect("a decoded value re-encodes");
        assert_eq!(from_bytes::<T>(&bytes).expect("and decodes again"), v);
        assert!(data.starts_with(&bytes), "decoding read a prefix: the encoding is that prefix");
    }
}

/// Wire values and host frames: decoding never panics; what decodes re-encodes and re-decodes equal.
pub fn wire(data: &[u8]) {
    // Wire values travel in one message's data, at most MAX_MSG_SIZE bytes.
    let payload = &data[..data.len().min(crate::MAX_MSG_SIZE)];
    reencodes::<SysinfoCommand>(payload);
    reencodes::<BootRequest>(payload);
    reencodes::<BootResponse>(payload);
    reencodes::<NewConnection>(payload);
    reencodes::<Option<u32>>(payload);
    reencodes::<String>(payload);

    let mut src = BytesMut::from(data);
    let mut frames: Vec<Frame> = Vec::new();
    while let Ok(Some(f)) = decode_frame(&mut src) {
        frames.push(f);
    }
    let mut again = BytesMut::new();
    for f in &frames {
        encode_frame(f, &mut again);
    }
    // The same frames fed one byte at a time decode identically.
    let mut split = BytesMut::new();
    let mut decoded = Vec::new();
    for b in again.iter() {
        split.extend_from_slice(&[*b]);
        while let Some(f) = decode_frame(&mut split).expect("re-encoded frames are valid") {
            decoded.push(f);
        }
    }
    assert_eq!(decoded, frames);
}

/// Report text: chunked anywhere, reassembled and parsed as every command, never panics; a report with no
/// unknown lines renders to text that parses back to the same report.
pub fn reports(data: &[u8]) {
    let (cut, body) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c).max(1), rest),
        None => (1, data),
    };
    let mut r = Reassembler::new(1 << 20);
    for chunk in body.chunks(cut) {
        if r.push(chunk).is_err() {
            return;
        }
    }
    r.close();
    let reply = r.finish();
    assert_eq!(reply.text.as_bytes() == body, !reply.lossy);
    for command in SysinfoCommand::ALL {
        let report = Report::parse(command, &reply.text);
        let rendered = report.render();
        if report.unknown_lines().is_empty() {
            assert_eq!(Report::parse(command, &rendered), report, "{rendered:?}");
        }
    }
}
