//! The bodies of the fuzz targets `smon_decode` and `smon_roundtrip`, also replayed over the seed
//! corpora by the unit tests (`fuzz/tests.rs`) on stable. Built only under `cfg(fuzzing)` and in tests.

#[allow(unused_imports)]
use crate::prelude::*;
use bytes::BytesMut;

use crate::{DecoderConfig, EncoderConfig, Sample, StreamDecoder, StreamEncoder, Update, Value};

/// What decoding a whole input yields: updates and errors (as text: `io::Error` has no equality).
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Update(Update),
    Error(String),
}

/// Decodes `input` fed in chunks of the given sizes (cycled; 0 means "the rest"), past errors.
fn decode_chunked(input: &[u8], chunks: &[usize], config: DecoderConfig) -> Vec<Outcome> {
    let mut dec = StreamDecoder::new(config);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = input;
    let mut i = 0;
    loop {
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(u)) => out.push(Outcome::Update(u)),
                Ok(None) => break,
                Err(e) => out.push(Outcome::Error(e.to_string())),
            }
        }
        if rest.is_empty() {
            break;
        }
        let size = match chunks.get(i % chunks.len().max(1)) {
            Some(&0) | None => rest.len(),
            Some(&n) => n.min(rest.len()),
        };
        i += 1;
        buf.extend_from_slice(&rest[..size]);
        rest = &rest[size..];
    }
    loop {
        match dec.decode_eof(&mut buf) {
            Ok(Some(u)) => out.push(Outcome::Update(u)),
            Ok(None) => break,
            Err(e) => out.push(Outcome::Error(e.to_string())),
        }
    }
    out
}

/// `smon_decode`: arbitrary bytes never panic; the result does not depend on the chunking; values
/// decoded from the input re-encode and decode back equal.
pub fn decode(data: &[u8]) {
    for strict in [false, true] {
        let config = DecoderConfig { strict, ..Default::default() };
        let whole = decode_chunked(data, &[0], config);
        let split = data.first().map_or(1, |&b| usize::from(b % 7) + 1);
        assert_eq!(whole, decode_chunked(data, &[split, 1, 3], config), "chunking changed the result");
        if data.len() <= 512 {
            assert_eq!(whole, decode_chunked(data, &[1], config), "byte-wise decoding differs");
        }
        if !strict {
            reencode(&whole);
        }
    }
}

/// Re-encodes the decoded values and checks they decode back equal. Samples the encoder refuses
/// (a name reused with another type, a name grown past the limit by lossy UTF-8) are left out.
fn reencode(outcomes: &[Outcome]) {
    let mut enc = StreamEncoder::new(EncoderConfig::default());
    let mut wire = BytesMut::new();
    let mut sent = Vec::new();
    for outcome in outcomes {
        if let Outcome::Update(Update::Value { name, index, value, .. }) = outcome {
            let sample = Sample { name: name.clone(), index: index.clone(), value: value.clone() };
            if enc.encode(&sample, &mut wire).is_ok() {
                sent.push(sample);
            }
        }
    }
    let back: Vec<Sample> = StreamDecoder::decode_all(&wire, DecoderConfig::default())
        .expect("encoder output decodes")
        .into_iter()
        .filter_map(Update::into_sample)
        .collect();
    assert_eq!(back, sent);
}

/// Turns fuzz bytes into a sequence of valid samples (structured input without extra dependencies).
struct Gen<'a> {
    data: &'a [u8],
}

const NAMES: [(&str, bool); 6] = [
    ("linux.cpu.idle", false),
    ("smon.version", true),
    ("a.b", false),
    ("x.s", true),
    ("linux.net.rx_bytes", false),
    ("smon.time", false),
];

impl Gen<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..8 {
            v = (v << 8) | u64::from(self.byte().unwrap_or(0));
        }
        v
    }

    fn number(&mut self, last: u64) -> u64 {
        match self.byte().unwrap_or(0) % 8 {
            0 => u64::MAX,
            1 => 0,
            2 => self.u64(),
            3 => last.wrapping_sub(u64::from(self.byte().unwrap_or(1))),
            4 => last.wrapping_add(u64::MAX - u64::from(self.byte().unwrap_or(0))),
            5 => [223, 224, 479, 480, 65_759, 65_760, 1 << 32][usize::from(self.byte().unwrap_or(0) % 7)],
            _ => last.wrapping_add(u64::from(self.byte().unwrap_or(0))),
        }
    }

    fn text(&mut self, last: &[u8]) -> Vec<u8> {
        let mut s = if self.byte().unwrap_or(0) & 1 == 0 { last.to_vec() } else { Vec::new() };
        let parts = self.byte().unwrap_or(0) % 4;
        for _ in 0..parts {
            let b = self.byte().unwrap_or(0);
            let n = usize::from(self.byte().unwrap_or(0) % 48);
            let fill = if b < 0x60 { 0xFF } else { b };
            s.extend(core::iter::repeat_n(fill, n));
        }
        s
    }

    fn samples(&mut self) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut last_u = 0u64;
        let mut last_s = Vec::new();
        while let Some(b) = self.byte() {
            if out.len() >= 256 {
                break;
            }
            let (name, is_text) = NAMES[usize::from(b % 6)];
            let depth = usize::from((b >> 3) % 4);
            let index: Vec<u64> = (0..depth)
                .map(|_| match self.byte().unwrap_or(0) {
                    x @ 0..=250 => u64::from(x % 4),
                    _ => self.u64(),
                })
                .collect();
            let value = if is_text {
                last_s = self.text(&last_s);
                Value::Text(last_s.clone().into())
            } else {
                last_u = self.number(last_u);
                Value::Unsigned(last_u)
            };
            out.push(Sample { name: name.into(), index, value });
        }
        out
    }
}

/// `smon_roundtrip`: samples built from the fuzz bytes encode deterministically, and decode back equal
/// whatever the chunking.
pub fn roundtrip(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else { return };
    let samples = Gen { data: rest }.samples();
    let config = EncoderConfig { resync_at_start: flags & 1 == 1, ..Default::default() };
    let encode = || {
        let mut enc = StreamEncoder::new(config);
        let mut wire = BytesMut::new();
        for s in &samples {
            enc.encode(s, &mut wire).expect("generated samples are valid");
        }
        wire
    };
    let wire = encode();
    assert_eq!(wire, encode(), "encoding is deterministic");
    let whole = decode_chunked(&wire, &[0], DecoderConfig { strict: true, ..Default::default() });
    let back: Vec<Sample> = whole
        .iter()
        .filter_map(|o| match o {
            Outcome::Update(u) => u.clone().into_sample(),
            Outcome::Error(e) => panic!("encoder output failed to decode: {e}"),
        })
        .collect();
    assert_eq!(back, samples);
    let split = usize::from(flags >> 1) + 1;
    assert_eq!(whole, decode_chunked(&wire, &[split], DecoderConfig { strict: true, ..Default::default() }));
}

#[cfg(test)]
mod tests;
