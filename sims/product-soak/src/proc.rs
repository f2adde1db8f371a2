//! The processes the soak starts: the mount namespace that holds the queues' tmpfs, `telemon serve` in it
//! (restarted after its SIGKILL), and the OTLP receiver; and telemon's HTTPS API with basic auth.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A mount namespace of its own (`unshare -m`, private propagation) holding a tmpfs on the queues' directory,
/// kept alive by a `sleep` so that the queues outlive a SIGKILL of telemon; telemon runs in it (`nsenter`), and
/// the full-disk fault fills the tmpfs from it. Killed on drop.
pub struct Namespace {
    holder: Child,
    pid: u32,
    queues: PathBuf,
}

impl Namespace {
    /// Mounts a tmpfs of `mib` MiB on `queues` in a new mount namespace.
    pub async fn start(queues: &Path, mib: u64) -> Result<Namespace> {
        std::fs::create_dir_all(queues)?;
        let script = format!(
            "mount -t tmpfs -o size={mib}m tmpfs '{}' && echo ready && exec sleep 1000000",
            queues.display()
        );
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting unshare -m (needs root and util-linux)")?;
        let pid = holder.id().context("unshare has no pid")?;
        let mut out = BufReader::new(holder.stdout.take().context("piped")?).lines();
        match tokio::time::timeout(Duration::from_secs(10), out.next_line()).await {
            Ok(Ok(Some(line))) if line == "ready" => {}
            _ => bail!("the tmpfs for the queues could not be mounted in a new mount namespace"),
        }
        Ok(Namespace { holder, pid, queues: queues.to_owned() })
    }

    /// `program ARGS` run inside the namespace, through `nsenter` (which execs: its pid is the program's).
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.pid.to_string(), "-m", "--"]).arg(program);
        cmd
    }

    /// Fills the tmpfs to the last byte (a file of zeros).
    pub async fn fill(&self) -> Result<()> {
        let script = format!("cat /dev/zero > '{}/filler' 2>/dev/null; true", self.queues.display());
        let status = self.command(Path::new("sh")).args(["-c", &script]).status().await?;
        if !status.success() {
            bail!("filling the queues' tmpfs failed: {status}");
        }
        Ok(())
    }

    /// Removes what [`Namespace::fill`] wrote.
    pub async fn free(&self) -> Result<()> {
        let filler = self.queues.join("filler");
        let status = self.command(Path::new("rm")).arg("-f").arg(&filler).status().await?;
        if !status.success() {
            bail!("removing {} failed: {status}", filler.display());
        }
        Ok(())
    }

    /// Stops the holder (the tmpfs goes with the namespace).
    pub async fn stop(mut self) {
        let _ = self.holder.kill().await;
    }
}

/// One run of `telemon serve`, in the [`Namespace`], its stderr appended to a log file. Killed on drop.
pub struct Telemon {
    child: Child,
    /// Its pid.
    pub pid: u32,
}

impl Telemon {
    /// Starts `bin serve ARGS` in `ns` and waits until `https://listen/healthz` answers (at most 60 s).
    pub async fn start(
        ns: &Namespace,
        bin: &Path,
        args: &[String],
        log: &Path,
        api: &Api,
    ) -> Result<Telemon> {
        let log_path = log;
        // nsenter runs it from the namespace's root directory: an absolute path.
        let bin = std::path::absolute(bin)?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        // As the other soaks do: telemon holds a socket per target, and some.
        let script = r#"ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@""#;
        let mut child = ns
            .command(Path::new("sh"))
            .args(["-c", script, "telemon"])
            .arg(&bin)
            .arg("serve")
            .args(args)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("telemon has no pid")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("telemon ended ({status}) before it served; the end of its log:\n{}", tail(log_path));
            }
            if api.get("/healthz").await.is_ok() {
                return Ok(Telemon { child, pid });
            }
            if Instant::now() > deadline {
                bail!("telemon did not answer /healthz within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails when telemon has ended.
    pub fn check(&mut self, log: &Path) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("telemon ended ({status}); the end of its log:\n{}", tail(log));
        }
        Ok(())
    }

    /// SIGKILL, and reaped.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM (the queues sync and keep their backlog), and waited for (at most 20 s).
    pub async fn terminate(mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        }
    }
}

/// The last 30 lines of the file at `path`.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// telemon's HTTPS API (its test CA trusted, basic auth on every request).
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    user: String,
    password: String,
}

impl Api {
    /// The API at `https://addr`, trusting the CA certificate in `ca_pem`.
    pub fn new(addr: SocketAddr, ca_pem: &[u8], user: &str, password: &str) -> Result<Api> {
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca_pem)?)
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Api { http, base: format!("https://{addr}"), user: user.into(), password: password.into() })
    }

    /// `GET path`: the body of a 200.
    pub async fn get(&self, path: &str) -> Result<String> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .basic_auth(&self.user, Some(&self.password))
            .send()
            .await?;
        let status = r.status();
        let body = r.text().await?;
        if !status.is_success() {
            bail!("GET {path}: {status}: {body}");
        }
        Ok(body)
    }

    /// `POST path`: the status and the body.
    pub async fn post(&self, path: &str) -> Result<(u16, String)> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .basic_auth(&self.user, Some(&self.password))
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }
}

/// What the OTLP receiver printed: data points, and distinct ones (a point sent twice prints the same line).
#[derive(Debug, Default)]
pub struct OtlpCount {
    /// Data points received.
    pub points: u64,
    /// Hashes of the lines seen.
    distinct: HashSet<u64>,
}

impl OtlpCount {
    /// Points received more than once.
    pub fn duplicates(&self) -> u64 {
        self.points - self.distinct.len() as u64
    }
}

/// The OTLP receiver of the push tests (`crates/telemon/tests/otlp_receiver.py`, run by the push virtualenv's
/// Python), counting what it prints. Killed on drop.
pub struct OtlpReceiver {
    _child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received so far.
    pub count: Arc<Mutex<OtlpCount>>,
}

impl OtlpReceiver {
    /// Starts `python script 0` and reads its port from its first line.
    pub async fn start(python: &Path, script: &Path) -> Result<OtlpReceiver> {
        let mut child = Command::new(python)
            .arg(script)
            .arg("0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {}", python.display(), script.display()))?;
        let mut lines = BufReader::new(child.stdout.take().context("piped")?).lines();
        let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .context("the OTLP receiver said nothing in 20 s")??
            .context("the OTLP receiver ended")?;
        let first: serde_json::Value = serde_json::from_str(&first)?;
        let port = first["listening"].as_u64().context("no port in the OTLP receiver's first line")?;
        let count: Arc<Mutex<OtlpCount>> = Arc::default();
        let counting = count.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                line.hash(&mut h);
                let mut c = counting.lock().unwrap_or_else(|e| e.into_inner());
                c.points += 1;
                c.distinct.insert(h.finish());
            }
        });
        Ok(OtlpReceiver { _child: child, addr: SocketAddr::from(([127, 0, 0, 1], port as u16)), count })
    }
}
