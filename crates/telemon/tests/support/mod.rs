//! What every `telemon` end-to-end test needs: run the real binary, bounded by a safety-net timeout.
//!
//! Each test file includes this with `mod support;` and uses what it needs. What does not need the binary
//! (skipping when a real component is missing, starting Prometheus and VictoriaMetrics, the sims in-process,
//! `within`, `http_get`, free addresses) is in the `telemon-test-support` crate, re-exported here.
#![allow(dead_code)]

use std::process::{Output, Stdio};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

#[allow(unused_imports)]
pub use telemon_test_support::*;

/// The binary under test.
pub const TELEMON: &str = env!("CARGO_BIN_EXE_telemon");

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

/// A running `telemon`, read line by line while it runs.
pub struct Telemon {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Lines<BufReader<ChildStderr>>,
}

impl Telemon {
    /// Starts `telemon ARGS`.
    pub fn spawn(args: &[&str]) -> Telemon {
        Telemon::from(command(args))
    }

    /// Starts `program ARGS` that becomes telemon (`unshare -m sh -c '... exec telemon serve ...'`): the same
    /// process, read and stopped the same way.
    pub fn spawn_program(program: &std::path::Path, args: &[&str]) -> Telemon {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        Telemon::from(cmd)
    }

    fn from(mut cmd: Command) -> Telemon {
        let mut child = cmd.spawn().expect("telemon starts");
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
