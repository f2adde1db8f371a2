//! The System/161 metering protocol: a sans-IO codec for both directions and an async client.
//!
//! sys161 serves ASCII lines on the Unix stream socket `.sockets/meter` in the directory it runs in:
//!
//! ```text
//! client                                          sys161 (.sockets/meter)
//!   | ---- connect ----------------------------------> |
//!   | ---- INTERVAL 1000000000\r\n  (optional, one write) -> |
//!   | <--- HELLO 2\r\n --------------------------------- |
//!   | <--- HEAD nsec kinsns uinsns udud idle irqs exns disk con emu net\r\n
//!   | <--- WIDTH 11 9 9 4 9 4 4 4 5 4 4\r\n ------------ |
//!   | <--- DATA 5968289383 149100000 0 0 0 0 0 0 0 0 0\r\n   (at once)
//!   | <--- DATA ... every interval of simulated time --- |
//!   | <--- BAD Interval too small\r\n  (a rejected command; success is silent)
//!   | <--- EOF (the simulator exited; no goodbye) ------ |
//! ```
//!
//! Values are cumulative u64; `irqs` to `net` are 32-bit sums that wrap at 2^32. This crate follows the
//! real sys161 where it differs from the protocol text: intervals are 10 us to 2 s, no `OK` is sent.
//!
//! * [`codec`]: [`ClientCodec`] and [`ServerCodec`], liberal decoders (any case, LF or CRLF, any
//!   blanks, bounded line length, recovery at the next LF) and exact encoders (uppercase, CRLF).
//! * [`Session`]: the sans-IO state machine that turns messages into a [`Header`] and [`Sample`]s
//!   with per-field wrapping deltas.
//! * [`Client`] (one connection, `set_interval`) and [`watch`] (waits for the socket and reconnects,
//!   like stat161).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! use tokio::io::AsyncWriteExt;
//!
//! // A stand-in simulator that sends the greeting and two rows captured from the real sys161.
//! let dir = tempfile::tempdir()?;
//! std::fs::create_dir(dir.path().join(".sockets"))?;
//! let listener = tokio::net::UnixListener::bind(meter161::socket_path(dir.path()))?;
//! tokio::spawn(async move {
//!     let (mut peer, _) = listener.accept().await.unwrap();
//!     peer.write_all(b"HELLO 2\r\nHEAD nsec kinsns uinsns udud idle irqs exns disk con emu net\r\n\
//!         WIDTH 11 9 9 4 9 4 4 4 5 4 4\r\nDATA 5968289383 149100000 0 0 0 0 0 0 0 0 0\r\n\
//!         DATA 6168380263 154102272 0 0 0 0 0 0 0 0 0\r\n").await.unwrap();
//! });
//!
//! let mut client = meter161::Client::connect(dir.path(), &meter161::Config::default()).await?;
//! assert_eq!(client.header().names()[1], "kinsns");
//! let first = client.next().await.unwrap()?;
//! assert_eq!(first.get("nsec"), Some(5968289383));
//! assert_eq!(first.deltas(), None);
//! let second = client.next().await.unwrap()?;
//! assert_eq!(second.delta("kinsns"), Some(5002272));
//! assert!(client.next().await.is_none(), "EOF ends the stream");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod client;
pub mod codec;
pub mod error;
pub mod message;
pub mod session;

pub use client::{interval_ns, no_simulator, socket_path, watch, Client, Config, Event};
pub use codec::{
    decode_command_line, decode_server_line, encode_client, encode_server, strtoul, ClientCodec,
    IntervalRange, ServerCodec,
};
pub use error::{ClientError, CommandError, DecodeError, EncodeError, ProtocolError};
pub use message::*;
pub use session::{Header, Sample, Session, Update};

/// Fuzz target bodies, shared by `fuzz/fuzz_targets/` and the corpus replay in `cargo test`.
#[doc(hidden)]
pub mod fuzz {
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
}
