//! A protocol is one component: a sixth protocol, defined here and nowhere in `crates/fleet/src` or
//! `crates/telemon/src`, registered with the built-in five, runs through the public API as they do: its
//! config block is read and checked (`FILE:LINE: KEY`), its targets are collected and scraped on
//! `/metrics`, `/probe` and `[[file_sd]]` reach it, and its connections are recorded and exported through
//! its own collector.
//!
//! The protocol, "lines": a peer sends `KEY VALUE` lines over TCP; each becomes `lines_value{key}`.

mod support;

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use telemon::config::Config;
use telemon::http::check::check;
use telemon_capture::{Connection, ReplayStream};
use telemon_fleet::config::{check_connect, check_target, labels, Block, ConfigError, Document};
use telemon_fleet::protocol::{same_as, Address, BoxFuture, Carry, Component, Headline, Start, Unit};
use telemon_fleet::{ErrorKind, Failure, MetricKind, Protocols, Publisher, TargetSnapshot};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

/// The port of a `lines` address without one.
const PORT: u16 = 7500;
/// `LINKTYPE_USER5`: the next free link type.
const LINK_TYPE: u16 = telemon_capture::LINKTYPE_USER0 + 5;

/// The component.
struct Lines;

static LINES: Lines = Lines;

/// `[[lines]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinesBlock {
    name: String,
    connect: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl Component for Lines {
    fn name(&self) -> &'static str {
        "lines"
    }

    fn sections(&self) -> &'static [&'static str] {
        &["lines"]
    }

    fn link_type(&self) -> u16 {
        LINK_TYPE
    }

    fn read(&self, _section: &str, block: &Block<'_>) -> Result<Arc<dyn Unit>, ConfigError> {
        let mut b: LinesBlock = block.read()?;
        check_target(block, &b.name, &b.labels)?;
        b.connect = check_connect(block, Some(&b.connect), PORT)?;
        Ok(Arc::new(b))
    }

    fn peer(&self) -> &'static str {
        "a lines peer"
    }

    fn address(&self) -> Option<Address> {
        Some(Address::connect(PORT))
    }

    fn replay<'a>(
        &'a self,
        p: &'a mut Publisher,
        _: &'a Connection,
        stream: ReplayStream,
    ) -> BoxFuture<'a, Failure> {
        Box::pin(collect(p, stream))
    }

    fn headlines<'a>(&self, t: &'a TargetSnapshot, _: &mut Carry) -> Vec<Headline<'a>> {
        vec![Headline::series("first value", t.series.family("lines_value").next())]
    }
}

impl Unit for LinesBlock {
    fn name(&self) -> &str {
        &self.name
    }

    fn same(&self, other: &dyn Unit) -> bool {
        same_as(self, other)
    }

    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>> {
        let mut p = ctx.publisher(&self.name, &LINES, labels(&self.labels));
        let addr = self.connect.clone();
        let task = async move {
            loop {
                let failure = match tokio::net::TcpStream::connect(&addr).await {
                    Ok(stream) => {
                        let stream = p.tapper(&addr)(stream);
                        collect(&mut p, stream).await
                    }
                    Err(e) => Failure::new(ErrorKind::Connect, e),
                };
                p.down(&failure);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        Box::pin(async move { Ok(Box::pin(task) as BoxFuture<'static, ()>) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Reads `KEY VALUE` lines until the stream ends.
async fn collect(p: &mut Publisher, stream: impl AsRead) -> Failure {
    p.up();
    let mut lines = BufReader::new(stream).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => match line.split_once(' ').map(|(k, v)| (k, v.trim().parse::<f64>())) {
                Some((key, Ok(v))) => {
                    p.put("lines_value", "A value the peer sent.", MetricKind::Gauge, &[("key", key)], v);
                    p.flush();
                }
                _ => p.error(&Failure::new(ErrorKind::Decode, format!("not KEY VALUE: {line:?}"))),
            },
            Ok(None) => return Failure::new(ErrorKind::Connect, "the peer closed the connection"),
            Err(e) => return Failure::new(ErrorKind::Connect, e),
        }
    }
}

trait AsRead: AsyncRead + Unpin + Send {}
impl<T: AsyncRead + Unpin + Send> AsRead for T {}

/// The peer: every client gets `temp 21`, `load 3`, ... a line every 20 ms.
async fn peer() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                for i in 0u32.. {
                    let line = format!("temp {}\nload {}\n", 20 + i % 3, i % 5);
                    if socket.write_all(line.as_bytes()).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        }
    });
    (addr, task)
}

async fn scrape(addr: std::net::SocketAddr, path: &str, want: &str) -> String {
    support::until(&format!("{path} to show {want}"), Duration::from_millis(50), async || {
        let (status, body) = support::http_get(addr, path, &[]).await.ok()?;
        (status == 200 && body.contains(want)).then_some(body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_from_outside_runs_through_the_public_api() {
    let protocols = Protocols::built_in().with(&LINES);
    let (peer_addr, peer_task) = peer().await;
    let dir = tempfile::tempdir().unwrap();

    // A config block of it, read and checked like the built-in ones, errors at FILE:LINE: KEY.
    let bad = Document::parse("bad.toml", "[[lines]]\nname = \"b\"\nconnect = \"nohost:\"\n").unwrap();
    let e = Config::read(&[bad], &protocols).unwrap_err();
    assert_eq!((e.file.as_str(), e.line, e.key.as_str()), ("bad.toml", 3, "connect"), "{e}");
    let unknown =
        Document::parse("u.toml", "[[lines]]\nname = \"b\"\nconnect = \"x:1\"\ncolour = 1\n").unwrap();
    assert_eq!(Config::read(&[unknown], &protocols).unwrap_err().line, 4);
    let without = Document::parse("w.toml", "[[lines]]\nname = \"b\"\nconnect = \"x:1\"\n").unwrap();
    let e = Config::read(&[without], &Protocols::built_in()).unwrap_err();
    assert!(e.message.contains("unknown section"), "unregistered, it is no section: {e}");

    // A block, and a target a [[file_sd]] file lists.
    std::fs::create_dir(dir.path().join("sd")).unwrap();
    std::fs::write(
        dir.path().join("sd/t.json"),
        format!(r#"[{{"targets": ["{peer_addr}"], "labels": {{"rack": "9"}}}}]"#),
    )
    .unwrap();
    let text = format!(
        "[[lines]]\nname = \"a\"\nconnect = \"{peer_addr}\"\nlabels = {{ room = \"x\" }}\n\
         [[file_sd]]\nprotocol = \"lines\"\nfiles = [\"{}/sd/*.json\"]\n",
        dir.path().display()
    );
    let config = Config::read(&[Document::parse("fleet.toml", &text).unwrap()], &protocols).unwrap();
    assert_eq!(
        config.summary(),
        "0 meter161, 0 hmon, 0 hmon_listen, 0 mono_listen, 0 smon, 0 sysinfo, 1 lines, 1 file_sd"
    );

    // Collected, recorded and scraped.
    let recorder = telemon_capture::Recorder::start(telemon_capture::RecorderConfig::new(
        telemon_capture::Destination::Dir(dir.path().join("rec")),
        "test",
    ))
    .unwrap();
    let recording = Arc::new(telemon_fleet::recording::Recording::new(recorder));
    let server = telemon::http::start_checked(
        check(config).unwrap(),
        telemon::http::Launch {
            listen: Some("127.0.0.1:0".into()),
            recording: Some(recording.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let http = server.local_addr();
    let page = scrape(http, "/metrics", "lines_value{target=\"a\",room=\"x\",key=\"temp\"}").await;
    assert!(page.contains("telemon_target_up{protocol=\"lines\",target=\"a\",room=\"x\"} 1"), "{page}");
    let page =
        scrape(http, "/metrics", &format!("lines_value{{target=\"{peer_addr}\",rack=\"9\",key=\"load\"}}"))
            .await;
    assert!(page.contains("# TYPE lines_value gauge"), "{page}");

    // A probe of it.
    let probe = format!("/probe?target={peer_addr}&protocol=lines");
    let answer = scrape(http, &probe, "lines_value{").await;
    assert!(
        answer.contains(&format!("telemon_target_up{{protocol=\"lines\",target=\"{peer_addr}\"}} 1")),
        "{answer}"
    );
    let (status, refused) = support::http_get(http, "/probe?target=x:1&protocol=nothing", &[]).await.unwrap();
    assert_eq!(status, 400);
    assert!(refused.contains("lines"), "the refusal names it among the protocols: {refused}");

    // The recording, exported through its collector.
    server.shutdown().await;
    recording.finish();
    let (capture, _) =
        telemon_capture::Capture::from_dir(dir.path().join("rec"), Default::default()).unwrap();
    let connections = capture.connections(Some("a"));
    assert!(!connections.is_empty() && connections.iter().all(|c| c.target.link_type == LINK_TYPE));
    let scrapes = telemon_fleet::rerun::replay(&protocols, connections).unwrap();
    assert!(
        scrapes.iter().any(|s| s.text.contains("lines_value{target=\"a\",key=\"temp\"}")),
        "{:?}",
        scrapes.last()
    );
    peer_task.abort();
}
