//! The body of the fuzz target `capture_read`, also replayed over its seed corpus by the unit tests
//! (`fuzz/tests.rs`) on stable. Built only under `cfg(fuzzing)` and in tests.

use crate::read::{Capture, Event, Limits, Reader};
use crate::write::{encode_interface, encode_record, encode_section_header};

/// Events read from `data` fed in chunks of `chunk` bytes (the sans-IO reader), up to the first error.
fn events_chunked(data: &[u8], chunk: usize, limits: Limits) -> (Vec<Event>, u64) {
    let mut reader = Reader::new(limits);
    let mut buf: Vec<u8> = Vec::new();
    let mut rest = data;
    let mut out = Vec::new();
    loop {
        match reader.read(&buf) {
            Ok(Some((used, event))) => {
                assert!(used <= buf.len());
                buf.drain(..used);
                out.push(event);
            }
            Ok(None) if rest.is_empty() => break,
            Ok(None) => {
                assert!(buf.len() < limits.max_block as usize, "the reader asked for more than a block");
                let n = chunk.min(rest.len());
                buf.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
            }
            Err(_) => break,
        }
    }
    (out, reader.offset())
}

/// `capture_read`: arbitrary bytes never panic; the events do not depend on how the input is split; what
/// was read re-encodes to a file that reads back the same.
pub fn read(data: &[u8]) {
    let limits = Limits { max_block: 4096, max_interfaces: 64 };
    let whole = Capture::from_bytes(data, limits);
    let (events, good) = events_chunked(data, usize::MAX, limits);
    let split = data.first().map_or(1, |&b| usize::from(b % 13) + 1);
    assert_eq!((events.clone(), good), events_chunked(data, split, limits), "splitting changed the events");
    if data.len() <= 1024 {
        assert_eq!((events.clone(), good), events_chunked(data, 1, limits), "byte-wise reading differs");
    }
    assert_eq!(whole.warning.is_none(), good == data.len() as u64);

    // Re-encode what was read (our writer's form) and read it back.
    let mut file = Vec::new();
    for event in &events {
        match event {
            Event::Section { application } => {
                encode_section_header(&mut file, application.as_deref().unwrap_or(""))
            }
            Event::Interface { target, .. } => encode_interface(&mut file, target),
            Event::Record(record) => encode_record(&mut file, record),
            Event::Skipped { .. } => {}
        }
    }
    let again = Capture::from_bytes(&file, Limits::default());
    assert_eq!(again.warning, None, "re-encoded recording is damaged");
    let normalise = |c: &Capture| {
        c.sections
            .iter()
            .map(|s| (s.application.clone().unwrap_or_default(), s.targets.clone(), s.records.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(normalise(&again), normalise(&whole));
}

#[cfg(test)]
mod tests;
