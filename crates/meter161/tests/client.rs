//! The client against scripted servers: each test's server writes a fixed byte stream and closes.

use futures::StreamExt;
use meter161::{Client, ClientConfig, ClientError, DecodeError, ProtocolError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

/// Serves `script` to one client in a temp dir; the task returns what the client sent.
fn scripted(script: &'static [u8]) -> (tempfile::TempDir, tokio::task::JoinHandle<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".sockets")).unwrap();
    let listener = UnixListener::bind(meter161::socket_path(dir.path())).unwrap();
    let server = tokio::spawn(async move {
        let (mut peer, _) = listener.accept().await.unwrap();
        peer.write_all(script).await.unwrap();
        peer.shutdown().await.unwrap();
        let mut received = Vec::new();
        peer.read_to_end(&mut received).await.unwrap();
        received
    });
    (dir, server)
}

#[tokio::test]
async fn the_scripted_stream_gives_rows_and_per_line_errors() {
    // The notes' scripted stream, without its ERROR line (which ends a connection).
    let (dir, server) = scripted(
        b"hello 2\nhead nsec kinsns\nwidth 3 3\ndata 100 5\n  DATA\t200   7  \r\nOK\nBAD Interval too small\n\
FOO bar\nDATA 1 2 3\nDATA 18446744073709551615 9\nDATA 5 12abc\nHEAD\n\nDATA 20 30",
    );
    let mut client = Client::connect(dir.path(), &ClientConfig::default()).await.unwrap();
    assert_eq!(client.header().names(), ["nsec", "kinsns"]);
    assert_eq!(client.header().widths(), [3, 3]);
    let mut out = Vec::new();
    while let Some(item) = client.next().await {
        out.push(item.map(|s| (s.values().to_vec(), s.deltas().map(<[u64]>::to_vec))));
    }
    let rows: Vec<_> = out.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    assert_eq!(
        rows,
        [
            (vec![100, 5], None),
            (vec![200, 7], Some(vec![100, 2])),
            (vec![u64::MAX, 9], Some(vec![18446744073709551415, 2]))
        ]
    );
    let errors: Vec<_> = out.into_iter().filter_map(Result::err).collect();
    assert!(
        matches!(&errors[0], ClientError::Protocol(ProtocolError::Rejected { text: Some(t) }) if t == "Interval too small")
    );
    assert!(
        matches!(&errors[1], ClientError::Protocol(ProtocolError::UnknownMessage { line }) if line == "FOO bar")
    );
    assert!(matches!(errors[2], ClientError::Protocol(ProtocolError::FieldCount { expected: 2, got: 3 })));
    assert!(matches!(
        errors[3],
        ClientError::Protocol(ProtocolError::Decode(DecodeError::InvalidNumber { index: 1, .. }))
    ));
    assert!(matches!(errors[4], ClientError::Protocol(ProtocolError::EmptyHead)));
    assert_eq!(errors.len(), 5);
    assert!(errors.iter().all(|e| !e.is_fatal()), "the stream went on after each");
    drop(client);
    assert!(server.await.unwrap().is_empty(), "nothing was sent without an interval");
}

#[tokio::test]
async fn the_interval_goes_out_first_in_one_command() {
    let (dir, server) = scripted(b"HELLO 2\r\nHEAD a\r\nWIDTH 1\r\nDATA 1\r\n");
    let config =
        ClientConfig { interval: Some(std::time::Duration::from_secs(1)), ..ClientConfig::default() };
    let mut client = Client::connect(dir.path(), &config).await.unwrap();
    assert_eq!(client.next().await.unwrap().unwrap().values(), [1]);
    drop(client);
    assert_eq!(server.await.unwrap(), b"INTERVAL 1000000000\r\n");
}

#[tokio::test]
async fn a_wrong_version_fails_the_connect() {
    let (dir, _server) = scripted(b"HELLO 3\r\nHEAD a\r\nWIDTH 1\r\nDATA 1\r\n");
    let err = Client::connect(dir.path(), &ClientConfig::default()).await.unwrap_err();
    assert!(matches!(err, ClientError::Protocol(ProtocolError::UnsupportedVersion { got: 3 })), "{err}");
    assert!(err.to_string().contains("wrong protocol version 3"), "{err}");
}

#[tokio::test]
async fn head_without_hello_is_accepted_like_stat161_does() {
    let (dir, _server) = scripted(b"HEAD a b\r\nDATA 1 2\r\n");
    let mut client = Client::connect(dir.path(), &ClientConfig::default()).await.unwrap();
    assert_eq!(client.version(), None);
    assert_eq!(client.header().widths(), [1, 1], "without WIDTH, a column is as wide as its name");
    assert_eq!(client.next().await.unwrap().unwrap().values(), [1, 2]);
}

#[tokio::test]
async fn eof_before_head_fails_the_handshake() {
    let (dir, _server) = scripted(b"HELLO 2\r\n");
    let err = Client::connect(dir.path(), &ClientConfig::default()).await.unwrap_err();
    assert!(matches!(err, ClientError::HandshakeEof), "{err}");
}

#[tokio::test]
async fn error_after_the_handshake_ends_the_stream() {
    let (dir, _server) = scripted(b"HELLO 2\r\nHEAD a\r\nERROR\r\nDATA 1\r\n");
    let mut client = Client::connect(dir.path(), &ClientConfig::default()).await.unwrap();
    let err = client.next().await.unwrap().unwrap_err();
    assert!(matches!(err, ClientError::Protocol(ProtocolError::ServerError { text: None })), "{err}");
    assert!(client.next().await.is_none(), "nothing is read after ERROR");
}

#[tokio::test]
async fn an_overlong_line_is_skipped() {
    let (dir, _server) =
        scripted(b"HELLO 2\r\nHEAD a\r\nWIDTH 1\r\nDATA 1111111111111111111111111111111111111\r\nDATA 2\r\n");
    let config = ClientConfig { max_line: 16, ..ClientConfig::default() };
    let mut client = Client::connect(dir.path(), &config).await.unwrap();
    let err = client.next().await.unwrap().unwrap_err();
    assert!(matches!(
        err,
        ClientError::Protocol(ProtocolError::Decode(DecodeError::LineTooLong { max: 16 }))
    ));
    assert_eq!(client.next().await.unwrap().unwrap().values(), [2]);
}

#[tokio::test]
async fn a_client_runs_over_any_stream() {
    let (ours, mut sim) = tokio::io::duplex(4096);
    let config = meter161::ClientConfig::default().interval(std::time::Duration::from_millis(500));
    let serve = async {
        let mut asked = [0u8; 20];
        sim.read_exact(&mut asked).await.unwrap();
        sim.write_all(b"HELLO 2\r\nHEAD nsec irqs\r\nWIDTH 11 4\r\nDATA 5 6\r\n").await.unwrap();
        asked
    };
    let (client, asked) = tokio::join!(meter161::Client::over(ours, &config), serve);
    assert_eq!(&asked, b"INTERVAL 500000000\r\n");
    let mut client = client.unwrap();
    assert_eq!(client.header().names(), ["nsec", "irqs"]);
    let sample = client.next().await.unwrap().unwrap();
    assert_eq!(sample.values(), [5, 6]);
}
