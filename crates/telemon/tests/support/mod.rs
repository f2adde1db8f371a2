//! What every `telemon` end-to-end test needs: run the real binary, bounded by a safety-net timeout.
//!
//! Each test file includes this with `mod support;` and uses what it needs.
#![allow(dead_code)]

use std::future::Future;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

/// The binary under test.
pub const TELEMON: &str = env!("CARGO_BIN_EXE_telemon");

/// Whether this is a CI run (`CI=true` or `1`), where a missing real component is an error, not a reason to skip.
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// `name` found on `PATH`.
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// `found`, or, when it is `None`: a panic under `CI=true`, else a loud SKIPPED on stderr and `None`. `what`
/// names the missing component, `hint` how to install it.
pub fn need(
    test: &str,
    what: &str,
    found: Option<std::path::PathBuf>,
    hint: &str,
) -> Option<std::path::PathBuf> {
    if found.is_some() {
        return found;
    }
    if in_ci() {
        panic!("{what} is missing and CI=true: {hint} so that {test} can run");
    }
    // Straight to the stderr handle: the test harness captures eprintln! and hides it when a test passes.
    let banner = "*".repeat(80);
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "\n{banner}\nSKIPPED: {test}: {what} is missing ({hint}).\n         It did NOT run.\n{banner}\n"
        ),
    );
    None
}

/// `prometheus` and `promtool` from `PATH` (Debian's `prometheus` package), or [`need`]'s `None`.
pub fn prometheus_and_promtool(test: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let hint = "apt-get install prometheus (bash .ci/prometheus.sh)";
    let prometheus = need(test, "prometheus", on_path("prometheus"), hint)?;
    let promtool = need(test, "promtool", on_path("promtool"), hint)?;
    Some((prometheus, promtool))
}

/// A safety net so that a broken test fails instead of hanging; never a timing assertion.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} never happened"))
}

/// `telemon ARGS`, with stdout and stderr piped, killed if the test drops it.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(TELEMON);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    cmd
}

/// Runs `telemon ARGS` to completion, feeding it `stdin` when given.
pub async fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = command(args);
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().expect("telemon starts");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped");
        // telemon may stop reading early (an error on line 1); that is its answer, not a test failure.
        let _ = pipe.write_all(input).await;
    }
    within(&format!("telemon {args:?} to exit"), child.wait_with_output()).await.unwrap()
}

/// The exit code (-1 when killed by a signal).
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Each line of `text` parsed as JSON.
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}"))).collect()
}

fn invalid(message: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.into())
}

/// The body of a `Transfer-Encoding: chunked` response, decoded.
fn dechunk(mut raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n").ok_or_else(|| invalid("no chunk size line"))?;
        let size = std::str::from_utf8(&raw[..eol]).map_err(|_| invalid("a chunk size that is not text"))?;
        let size = size.split(';').next().unwrap_or("").trim();
        let len = usize::from_str_radix(size, 16).map_err(|_| invalid(format!("chunk size {size:?}")))?;
        raw = &raw[eol + 2..];
        if len == 0 {
            return Ok(out);
        }
        let chunk = raw.get(..len).ok_or_else(|| invalid("a chunk cut short"))?;
        out.extend_from_slice(chunk);
        raw = raw.get(len + 2..).ok_or_else(|| invalid("a chunk without its CRLF"))?;
    }
}

/// `GET path` over HTTP/1.1 with `Connection: close` and the extra `headers`: (status, body), the body
/// de-chunked when it came chunked.
pub async fn http_get(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let end =
        raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| invalid("no end of the headers"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status =
        head.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| invalid("no status code"))?;
    let body = &raw[end + 4..];
    let body = if head.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked")) {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    let body = String::from_utf8(body).map_err(|_| invalid("a body that is not UTF-8"))?;
    Ok((status, body))
}

/// A running `telemon`, read line by line while it runs.
pub struct Telemon {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Lines<BufReader<ChildStderr>>,
}

impl Telemon {
    /// Starts `telemon ARGS`.
    pub fn spawn(args: &[&str]) -> Telemon {
        let mut child = command(args).spawn().expect("telemon starts");
        let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        let stderr = BufReader::new(child.stderr.take().expect("piped")).lines();
        Telemon { child, stdout, stderr }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// The next line on stdout.
    pub async fn stdout_line(&mut self) -> String {
        within("a line on stdout", self.stdout.next_line()).await.unwrap().expect("stdout closed")
    }

    /// Reads stderr until a line contains `needle`; returns that line.
    pub async fn stderr_line(&mut self, needle: &str) -> String {
        within(needle, async {
            loop {
                let line = self
                    .stderr
                    .next_line()
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("no {needle:?} on stderr"));
                if line.contains(needle) {
                    return line;
                }
            }
        })
        .await
    }

    /// Sends it SIGINT (Ctrl-C), as a user stops a command that would run forever, and waits for the exit.
    pub async fn interrupt(self) -> (i32, Vec<String>, Vec<String>) {
        let status = Command::new("kill").arg("-INT").arg(self.pid().to_string()).status().await.unwrap();
        assert!(status.success(), "kill -INT {}", self.pid());
        self.finish().await
    }

    /// Stops it (for a command that would run forever).
    pub async fn kill(mut self) {
        self.child.kill().await.expect("telemon is killed");
    }

    /// Waits for the exit; returns the code and the rest of stdout and stderr (read together, so a
    /// full pipe never blocks the child).
    pub async fn finish(mut self) -> (i32, Vec<String>, Vec<String>) {
        async fn rest<R: tokio::io::AsyncBufRead + Unpin>(lines: &mut Lines<R>) -> Vec<String> {
            let mut out = Vec::new();
            while let Some(line) = lines.next_line().await.unwrap() {
                out.push(line);
            }
            out
        }
        let (out, err) = within("stdout and stderr to close", async {
            tokio::join!(rest(&mut self.stdout), rest(&mut self.stderr))
        })
        .await;
        let status = within("telemon to exit", self.child.wait()).await.unwrap();
        (status.code().unwrap_or(-1), out, err)
    }
}

/// A fake Mono agent's bytes for issue 18's burst: a Hello with one counter
/// (`Mono System/Working Set`, bytes, variable), then five samples with values (100, 101, ...,
/// 104), with 1,250 empty samples before each of the last four; cut into writes of 64 messages.
pub fn mono_burst() -> Vec<Vec<u8>> {
    use mono_counters::*;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        headers: vec![Header {
            category: Category::System,
            name: "Working Set".into(),
            kind: CounterType::Long,
            unit: Unit::Bytes,
            variance: Variance::Variable,
            index: 0,
        }],
    };
    let sample = |timestamp: i64, value: Option<i64>| {
        AgentMessage::Sampling(Sample {
            timestamp,
            values: value
                .map(|v| SampleValue { index: 0, data: CounterValue::Long(v).into() })
                .into_iter()
                .collect(),
        })
    };
    let mut msgs = vec![AgentMessage::Hello(hello), sample(1_000_000, Some(100))];
    for v in 1..5 {
        msgs.extend((0..1250).map(|t| sample(1_000_000 * (v + 1) + t, None)));
        msgs.push(sample(1_000_000 * (v + 1) + 5000, Some(100 + v)));
    }
    msgs.chunks(64)
        .map(|chunk| {
            let mut out = bytes::BytesMut::new();
            chunk.iter().for_each(|m| encode_agent_message(m, &mut out).unwrap());
            out.to_vec()
        })
        .collect()
}

/// Binds a listener on a free loopback port: (listener, "127.0.0.1:PORT").
pub async fn listener() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

/// An smon-sim source with two per-CPU idle counters that grow by 1 and 2 every sample.
pub struct Cpus(pub u64);

impl smon_sim::Source for Cpus {
    fn sample(&mut self) -> Vec<smon_codec::Sample> {
        self.0 += 1;
        vec![
            smon_codec::Sample::new("linux.cpu.idle", [0], 1000 + self.0),
            smon_codec::Sample::new("linux.cpu.idle", [1], 2000 + 2 * self.0),
        ]
    }
}
