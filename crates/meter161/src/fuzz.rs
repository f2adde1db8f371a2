//! Fuzz target bodies, shared by `fuzz/fuzz_targets/` and the corpus replay in `cargo test`. Not a stable API.

use bytes::BytesMut;

use crate::codec::{ClientCodec, ServerCodec};
use crate::message::ServerMessage;

/// Every result of decoding `chunks` in order with a fresh codec, then EOF.
fn client_results(chunks: &[&[u8]], max_line: usize) -> Vec<Result<ServerMessage, crate::DecodeError>> {
    let mut codec = ClientCodec::new(max_line, 16);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some(item) = codec.decode(&mut buf).transpose() {
            out.push(item);
        }
    }
    while let Some(item) = codec.decode_eof(&mut buf).transpose() {
        out.push(item);
    }
    assert!(buf.is_empty(), "EOF leaves nothing buffered");
    out
}

fn server_results(chunks: &[&[u8]]) -> Vec<Result<crate::ClientMessage, crate::CommandError>> {
    let mut codec = ServerCodec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some(item) = codec.decode(&mut buf).transpose() {
            out.push(item);
        }
        assert!(buf.len() < crate::SERVER_INPUT_BUFSIZE, "the command buffer stays bounded");
    }
    out
}

/// Decodes `data` in both directions, whole and split at a point taken from the data, and checks:
/// no panic; the same results whatever the split; every decoded message re-encodes to a line that
/// decodes to the same message; the session accepts whatever the codec yields.
pub fn decode(data: &[u8]) {
    let split = data.first().map_or(0, |&b| usize::from(b)) % (data.len() + 1);
    let (a, b) = data.split_at(split);
    let max_line = 64;

    let whole = client_results(&[data], max_line);
    assert_eq!(whole, client_results(&[a, b], max_line), "split at {split}");
    let bytewise: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(whole, client_results(&bytewise, max_line), "byte by byte");

    let mut session = crate::Session::new();
    for msg in whole.into_iter().flatten() {
        let mut line = BytesMut::new();
        crate::encode_server(&msg, &mut line).expect("a decoded message is encodable");
        let again = client_results(&[&line], usize::MAX);
        assert_eq!(again, vec![Ok(msg.clone())], "re-decoding {line:?}");
        let _ = session.handle(msg);
    }

    let commands = server_results(&[data]);
    assert_eq!(commands, server_results(&[a, b]), "commands split at {split}");
    for cmd in commands.into_iter().flatten() {
        let mut line = BytesMut::new();
        crate::encode_client(&cmd, &mut line);
        assert_eq!(server_results(&[&line]), vec![Ok(cmd)]);
    }
}
