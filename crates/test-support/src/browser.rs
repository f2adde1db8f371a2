//! A headless Chromium driven over WebDriver: its own chromedriver on a free port in a process group of its own
//! (the whole group, Chromium's processes with it, killed on drop, also when a test panics), one session, and
//! what the tests read of the page (scripts, the console log, screenshots).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::{free_port, need_on_path, until};

/// A chromedriver child and a browser session on it.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    url: String,
    session: String,
    http: reqwest::Client,
}

/// `chromium` and `chromedriver` from `PATH`, or `None` (a skip outside CI, a failure under `CI=true`).
pub fn need_browser(test: &str) -> Option<PathBuf> {
    let hint = "apt-get install chromium chromium-driver (bash .ci/browser.sh)";
    need_on_path(test, "chromium", hint)?;
    need_on_path(test, "chromedriver", hint)
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width`×`height`, logging the console.
    pub async fn start(chromedriver: &std::path::Path, width: u32, height: u32) -> Browser {
        Browser::start_with(chromedriver, width, height, &[]).await
    }

    /// [`Browser::start`] with more Chromium flags (`--ignore-certificate-errors` for a self-signed test
    /// certificate, say).
    pub async fn start_with(
        chromedriver: &std::path::Path,
        width: u32,
        height: u32,
        flags: &[&str],
    ) -> Browser {
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let mut args = vec![
            json!("--headless=new"),
            json!("--no-sandbox"),
            json!("--disable-gpu"),
            json!("--disable-dev-shm-usage"),
            json!(format!("--window-size={width},{height}")),
            json!("--no-first-run"),
            json!("--disable-background-timer-throttling"),
            json!("--disable-renderer-backgrounding"),
            json!("--disable-backgrounding-occluded-windows"),
        ];
        args.extend(flags.iter().map(|f| json!(f)));
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), json!({ "binary": "/usr/bin/chromium", "args": args }));
        caps.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
        let client = until("chromedriver answers", Duration::from_millis(100), async || {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            ClientBuilder::new(connector).capabilities(caps.clone()).connect(&url).await.ok()
        })
        .await;
        let session = client.session_id().await.ok().flatten().expect("a session id");
        Browser { client, driver, url, session, http: reqwest::Client::new() }
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// Calls chromedriver's own command `path` (after the session) with `body`.
    async fn raw(&self, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(format!("{}/session/{}/{path}", self.url, self.session))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        let bytes = r
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .bytes()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_slice::<Value>(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))["value"].clone()
    }

    /// The browser console's entries since the last call: (level, message).
    pub async fn console(&self) -> Vec<(String, String)> {
        let log = self.raw("se/log", json!({ "type": "browser" })).await;
        log.as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or("").to_owned(),
                            e["message"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Emulates `prefers-color-scheme: dark` (or light) through the DevTools protocol.
    pub async fn color_scheme(&self, scheme: &str) {
        self.raw(
            "goog/cdp/execute",
            json!({ "cmd": "Emulation.setEmulatedMedia",
                    "params": { "features": [{ "name": "prefers-color-scheme", "value": scheme }] } }),
        )
        .await;
    }

    /// Sends `header: value` with every request the browser makes from now on (the page, its modules, its
    /// `fetch` calls and its `EventSource`), through the DevTools protocol.
    pub async fn extra_header(&self, header: &str, value: &str) {
        self.raw("goog/cdp/execute", json!({ "cmd": "Network.enable", "params": {} })).await;
        self.raw(
            "goog/cdp/execute",
            json!({ "cmd": "Network.setExtraHTTPHeaders", "params": { "headers": { header: value } } }),
        )
        .await;
    }

    /// Whether a JavaScript dialog (alert, confirm, prompt) is open.
    pub async fn dialog_open(&self) -> bool {
        self.client.get_alert_text().await.is_ok()
    }

    /// The process group of chromedriver and the browser it started.
    pub fn process_group(&self) -> Option<i32> {
        self.driver.id().and_then(|id| i32::try_from(id).ok())
    }

    /// Ends the session, then (on drop) chromedriver and the browser.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    /// Kills chromedriver's whole process group: killing chromedriver alone (`kill_on_drop`) leaves the browser
    /// it started running when a test panics before [`Browser::close`].
    fn drop(&mut self) {
        if let Some(group) = self.process_group() {
            // SAFETY: kill(2) with a negative pid signals the process group; no memory is involved.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
    }
}

/// The processes (pids) in process group `group` now, from `/proc`.
pub fn processes_in_group(group: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // /proc/PID/stat: "pid (comm) state ppid pgrp ...", comm may hold spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
            let mut fields = after.split_whitespace();
            let state = fields.next();
            // A zombie is gone already (its parent has yet to reap it).
            state != Some("Z") && fields.nth(1).and_then(|g| g.parse::<i32>().ok()) == Some(group)
        })
        .collect()
}
