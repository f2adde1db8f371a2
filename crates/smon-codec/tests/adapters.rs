//! The tokio-util codec and the async reader: framed reading and writing, errors mid-stream,
//! following a growing file.

use futures::{SinkExt, StreamExt};
use smon_codec::{
    DecodeError, DecoderConfig, EncoderConfig, Sample, SmonCodec, Update, UpdateReader, Value, RESYNC,
};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{FramedRead, FramedWrite};

fn samples() -> Vec<Sample> {
    vec![
        Sample::new("mon.version", [], "0.0.0"),
        Sample::new("linux.cpu.idle", [0], 10),
        Sample::new("linux.cpu.idle", [1], 20),
        Sample::new("linux.cpu.idle", [0], 15),
    ]
}

#[tokio::test]
async fn framed_write_then_framed_read_round_trip() {
    let mut wire = Vec::new();
    {
        let mut sink = FramedWrite::new(&mut wire, SmonCodec::default());
        for s in samples() {
            sink.send(s).await.unwrap();
        }
        SinkExt::<Sample>::close(&mut sink).await.unwrap();
    }
    assert!(wire.starts_with(&RESYNC));
    let updates: Vec<Update> =
        FramedRead::new(&wire[..], SmonCodec::default()).map(|u| u.unwrap().unwrap()).collect().await;
    assert_eq!(updates[0], Update::Resync);
    let back: Vec<Sample> = updates.into_iter().filter_map(Update::into_sample).collect();
    assert_eq!(back, samples());
}

#[tokio::test]
async fn framed_read_reports_truncation_at_eof() {
    let wire = b"\x00\x04ua.b\x01".to_vec();
    let mut frames = FramedRead::new(&wire[..], SmonCodec::default());
    let err = frames.next().await.unwrap().unwrap().unwrap_err();
    assert!(matches!(err, DecodeError::Truncated { offset: 0, pending: 7 }), "{err:?}");
}

#[tokio::test]
async fn framed_read_goes_on_after_a_decode_error_at_the_next_resync() {
    // A bad item (an unknown type byte in a definition), then a resync and a good value.
    let mut wire = RESYNC.to_vec();
    wire.extend_from_slice(b"\x00\x04xa.b\x01\x05");
    wire.extend_from_slice(&RESYNC);
    wire.extend_from_slice(b"\x00\x04ua.b\x01\x07");
    let items: Vec<_> = FramedRead::new(&wire[..], SmonCodec::default()).collect().await;
    let items: Vec<Result<Update, DecodeError>> =
        items.into_iter().map(|i| i.expect("no I/O error")).collect();
    assert!(matches!(items[0], Ok(Update::Resync)), "{items:?}");
    assert!(matches!(items[1], Err(DecodeError::UnknownType { type_byte: b'x', .. })), "{items:?}");
    assert!(matches!(items[2], Ok(Update::Resync)), "{items:?}");
    assert!(
        matches!(&items[4], Ok(Update::Value { value, .. }) if *value == smon_codec::Value::Unsigned(7)),
        "{items:?}"
    );
    // The same bad item first in the stream: the stream does not start like smon at all, and still goes on
    // at the next resync.
    let items: Vec<_> = FramedRead::new(&wire[RESYNC.len()..], SmonCodec::default()).collect().await;
    let first = wire[RESYNC.len()..RESYNC.len() + 24].to_vec();
    assert!(
        matches!(&items[0], Ok(Err(DecodeError::OtherProtocol { first: f })) if *f == first),
        "{items:?}"
    );
    assert!(matches!(&items[3], Ok(Ok(Update::Value { .. }))), "{items:?}");
}

#[tokio::test]
async fn the_reader_goes_on_after_an_error_at_the_next_resync() {
    let mut enc = smon_codec::StreamEncoder::new(EncoderConfig::default());
    let mut good = smon_codec::BytesMut::new();
    enc.encode(&Sample::new("a.b", [], 7), &mut good).unwrap();
    let input = [b"\x09\x09junk".as_slice(), &good].concat();
    let mut reader = UpdateReader::new(&input[..], DecoderConfig::default());
    let first = reader.next().await.unwrap();
    // (a stream that starts with a pair naming token 9 does not start like smon)
    assert!(
        matches!(&first, Err(DecodeError::OtherProtocol { first }) if first[..] == input[..24]),
        "{first:?}"
    );
    let mut rest = Vec::new();
    while let Some(u) = reader.next().await {
        rest.push(u.unwrap());
    }
    assert_eq!(rest[0], Update::Resync);
    assert_eq!(
        rest.last().unwrap(),
        &Update::Value { token: 1, name: "a.b".into(), index: vec![], value: Value::Unsigned(7) }
    );
}

#[tokio::test(start_paused = true)]
async fn the_reader_follows_a_growing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mon.out");
    let mut writer = tokio::fs::File::create(&path).await.unwrap();
    let mut enc = smon_codec::StreamEncoder::default();
    let mut buf = smon_codec::BytesMut::new();
    enc.encode(&Sample::new("a.b", [], 1), &mut buf).unwrap();
    // Write the first sample, and only half of the second: the reader must wait for the rest.
    enc.encode(&Sample::new("a.b", [], 300), &mut buf).unwrap();
    let split = buf.len() - 2;
    writer.write_all(&buf[..split]).await.unwrap();
    writer.flush().await.unwrap();

    let file = tokio::fs::File::open(&path).await.unwrap();
    let mut reader =
        UpdateReader::new(file, DecoderConfig::default()).follow(std::time::Duration::from_millis(50));
    assert_eq!(reader.next().await.unwrap().unwrap(), Update::Resync);
    assert!(matches!(reader.next().await.unwrap().unwrap(), Update::Define { .. }));
    assert!(matches!(reader.next().await.unwrap().unwrap(), Update::Value { value: Value::Unsigned(1), .. }));
    let pending = tokio::spawn(async move { reader.next().await.unwrap().unwrap() });
    writer.write_all(&buf[split..]).await.unwrap();
    writer.flush().await.unwrap();
    assert!(matches!(pending.await.unwrap(), Update::Value { value: Value::Unsigned(300), .. }));
}

/// Reads every update of `input` through `fill` and `next_buffered_ref`, `chunk` bytes a read.
async fn read_borrowed(input: &[u8], chunk: usize) -> Vec<Result<Update, String>> {
    let (mut peer, ours) = tokio::io::duplex(chunk);
    let input = input.to_vec();
    let writer = tokio::spawn(async move {
        for piece in input.chunks(chunk) {
            peer.write_all(piece).await.unwrap();
        }
    });
    let mut reader = UpdateReader::new(ours, DecoderConfig::default());
    let mut out = Vec::new();
    loop {
        while let Some(u) = reader.next_buffered_ref() {
            out.push(u.map(|u| u.to_update()).map_err(|e| e.to_string()));
        }
        match reader.fill().await {
            Some(Ok(())) => {}
            Some(Err(e)) => out.push(Err(e.to_string())),
            None => break,
        }
    }
    writer.await.unwrap();
    out
}

#[tokio::test]
async fn borrowed_reading_gives_what_owned_reading_gives_in_any_read_size() {
    let mut enc = smon_codec::StreamEncoder::new(EncoderConfig::default());
    let mut good = smon_codec::BytesMut::new();
    for s in samples() {
        enc.encode(&s, &mut good).unwrap();
    }
    // An error, a resync, values, and a truncated item at the end.
    let input = [b"\x09\x09junk".as_slice(), &good, b"\x00\x04ua.b"].concat();
    let mut owned = Vec::new();
    let mut reader = UpdateReader::new(&input[..], DecoderConfig::default());
    while let Some(u) = reader.next().await {
        owned.push(u.map_err(|e| e.to_string()));
    }
    assert!(owned.iter().any(|u| matches!(u, Ok(Update::Value { .. }))), "{owned:?}");
    assert!(owned.last().is_some_and(|u| u.is_err()), "the truncated item is reported: {owned:?}");
    for chunk in [1, 2, 3, 7, 64, 4096] {
        assert_eq!(read_borrowed(&input, chunk).await, owned, "reads of {chunk} bytes");
    }
}
