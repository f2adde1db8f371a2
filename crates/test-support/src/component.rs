//! A real component (Prometheus, VictoriaMetrics, Alertmanager) as a child process of the test: on a free loopback port,
//! with its log in a temporary directory of its own, killed if the test drops it, and waited for until its
//! readiness URL answers 200 (a wait that fails with the end of its log if the process exits first).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::net::{free_addr, http_get, DEADLINE};

/// The pause between two polls of a component.
const POLL: Duration = Duration::from_millis(100);
/// The name of a component's log (stdout and stderr together) in its directory.
const LOG: &str = "output.log";
/// How many lines of its log a failure shows.
const TAIL: usize = 30;

/// A component's command line before it starts: a free loopback address (or a given one) and a new temporary
/// directory, which the arguments may name.
pub struct Launch {
    name: String,
    bin: PathBuf,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    args: Vec<OsString>,
}

impl Launch {
    /// `bin`, called `name` in failures, on a free port of 127.0.0.1.
    pub fn new(name: &str, bin: &Path) -> Launch {
        Launch {
            name: name.to_owned(),
            bin: bin.to_owned(),
            addr: free_addr(),
            dir: tempfile::tempdir().unwrap(),
            args: Vec::new(),
        }
    }

    /// On `addr` instead (a restart on the address of an earlier run).
    pub fn at(mut self, addr: SocketAddr) -> Launch {
        self.addr = addr;
        self
    }

    /// The address it will listen on: the arguments name it.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its directory: its log, and what else it needs (a config file, a default data directory).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Launch {
        self.args.push(arg.into());
        self
    }

    /// Starts it, without waiting for anything (for a component whose readiness is not a plain HTTP GET:
    /// wait with [`Component::until`]).
    pub fn spawn(self) -> Component {
        let log = std::fs::File::create(self.dir.path().join(LOG)).unwrap();
        let child = Command::new(&self.bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()));
        Component { name: self.name, child, addr: self.addr, dir: self.dir }
    }

    /// Starts it and waits until `GET ready_path` answers 200 ([`Component::wait_ready`]).
    pub async fn start(self, ready_path: &str) -> Component {
        let mut component = self.spawn();
        component.wait_ready(ready_path).await;
        component
    }
}

/// A running component: the child process (killed if the test drops it), its address and its directory.
pub struct Component {
    name: String,
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Component {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Its temporary directory (removed when it is dropped).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The end of its log, to show in a failure.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(LOG)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "--- the end of {}'s log ---\n{}",
            self.name,
            lines[lines.len().saturating_sub(TAIL)..].join("\n")
        )
    }

    /// Polls `probe` until it answers `Some` and returns that answer; fails the test with the end of the log
    /// when the process exits first or when [`DEADLINE`] passes.
    pub async fn until<T>(&mut self, what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
        let child = &mut self.child;
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    return Err::<T, ExitStatus>(status);
                }
                if let Some(v) = probe().await {
                    return Ok(v);
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        match found {
            Ok(Ok(v)) => v,
            Ok(Err(status)) => panic!("{} exited ({status}) before {what}\n{}", self.name, self.log_tail()),
            Err(_) => panic!("{what}: never happened within {DEADLINE:?}\n{}", self.log_tail()),
        }
    }

    /// Waits until `GET path` answers 200 ([`Component::until`]).
    pub async fn wait_ready(&mut self, path: &str) {
        let addr = self.addr;
        let what = format!("{} ready at {}", self.name, self.url(path));
        self.until(&what, async || matches!(http_get(addr, path, &[]).await, Ok((200, _))).then_some(()))
            .await
    }

    /// Kills it and reaps it.
    pub async fn kill(mut self) {
        self.child.kill().await.unwrap_or_else(|e| panic!("{} is killed: {e}", self.name));
    }

    /// Stops it with SIGTERM (so that it flushes its data) and waits for the exit (at most [`DEADLINE`]).
    pub async fn terminate(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await;
        }
        let _ = tokio::time::timeout(DEADLINE, self.child.wait()).await;
    }
}

/// Prometheus's config without scrapes (the default): a receiver, or a server over backfilled blocks.
const NO_SCRAPES: &str = "global:\n  scrape_interval: 1m\nscrape_configs: []\n";

/// How to start a real Prometheus (Debian's `prometheus`): its `prometheus.yml`, its data directory, flags.
pub struct Prometheus {
    launch: Launch,
    config: String,
    data: Option<PathBuf>,
    flags: Vec<OsString>,
}

impl Prometheus {
    /// Prometheus from `bin` on a free port, with a config that scrapes nothing and its data in its own
    /// directory.
    pub fn new(bin: &Path) -> Prometheus {
        Prometheus {
            launch: Launch::new("Prometheus", bin),
            config: NO_SCRAPES.into(),
            data: None,
            flags: Vec::new(),
        }
    }

    /// On `addr` instead (a restart where the senders expect it).
    pub fn at(mut self, addr: SocketAddr) -> Prometheus {
        self.launch = self.launch.at(addr);
        self
    }

    /// With `yml` as its `prometheus.yml`.
    pub fn config(mut self, yml: impl Into<String>) -> Prometheus {
        self.config = yml.into();
        self
    }

    /// On the data directory `dir` (blocks that `promtool tsdb create-blocks-from` wrote, say).
    pub fn data(mut self, dir: &Path) -> Prometheus {
        self.data = Some(dir.to_owned());
        self
    }

    /// Taking remote write (`--web.enable-remote-write-receiver`).
    pub fn remote_write_receiver(self) -> Prometheus {
        self.arg("--web.enable-remote-write-receiver")
    }

    /// One more flag (`--web.config.file=...`, say).
    pub fn arg(mut self, flag: impl Into<OsString>) -> Prometheus {
        self.flags.push(flag.into());
        self
    }

    /// Starts it without waiting (a Prometheus behind TLS: wait with [`Component::until`]).
    pub fn spawn(self) -> Component {
        self.launch().spawn()
    }

    /// Starts it and waits until `/-/ready` answers 200.
    pub async fn start(self) -> Component {
        self.launch().start("/-/ready").await
    }

    /// Its command line, with its `prometheus.yml` written.
    fn launch(self) -> Launch {
        let config = self.launch.dir().join("prometheus.yml");
        std::fs::write(&config, &self.config).unwrap();
        let data = self.data.unwrap_or_else(|| self.launch.dir().join("data"));
        let listen = self.launch.addr();
        let launch = self
            .launch
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={listen}"));
        self.flags.into_iter().fold(launch, Launch::arg)
    }
}

/// How to start a real VictoriaMetrics (Debian's `victoria-metrics`), whose queries see a sample as soon as
/// it is written (`-search.latencyOffset=0s`).
pub struct VictoriaMetrics {
    launch: Launch,
    data: Option<PathBuf>,
}

impl VictoriaMetrics {
    /// VictoriaMetrics from `bin` on a free port, with its data in its own directory.
    pub fn new(bin: &Path) -> VictoriaMetrics {
        VictoriaMetrics { launch: Launch::new("VictoriaMetrics", bin), data: None }
    }

    /// On `addr` instead (a restart where the senders expect it).
    pub fn at(mut self, addr: SocketAddr) -> VictoriaMetrics {
        self.launch = self.launch.at(addr);
        self
    }

    /// On the data directory `dir` (which a restart finds again).
    pub fn data(mut self, dir: &Path) -> VictoriaMetrics {
        self.data = Some(dir.to_owned());
        self
    }

    /// Starts it and waits until `/health` answers 200.
    pub async fn start(self) -> Component {
        let data = self.data.unwrap_or_else(|| self.launch.dir().join("data"));
        let listen = self.launch.addr();
        self.launch
            .arg(format!("-httpListenAddr={listen}"))
            .arg(format!("-storageDataPath={}", data.display()))
            .arg("-search.latencyOffset=0s")
            .arg("-retentionPeriod=1d")
            .start("/health")
            .await
    }
}

/// How to start a real Alertmanager (Debian's `prometheus-alertmanager`): its `alertmanager.yml`, on a free
/// loopback port, with its data in its own directory and clustering off (by default it would gossip on
/// 0.0.0.0:9094).
pub struct Alertmanager {
    launch: Launch,
    config: String,
}

impl Alertmanager {
    /// Alertmanager from `bin` on a free port, with `yml` as its `alertmanager.yml`.
    pub fn new(bin: &Path, yml: impl Into<String>) -> Alertmanager {
        Alertmanager { launch: Launch::new("Alertmanager", bin), config: yml.into() }
    }

    /// Starts it and waits until `/-/ready` answers 200.
    pub async fn start(self) -> Component {
        let config = self.launch.dir().join("alertmanager.yml");
        std::fs::write(&config, &self.config).unwrap();
        let data = self.launch.dir().join("data");
        let listen = self.launch.addr();
        self.launch
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", data.display()))
            .arg(format!("--web.listen-address={listen}"))
            .arg("--cluster.listen-address=")
            .start("/-/ready")
            .await
    }
}
