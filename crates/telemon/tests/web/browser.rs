//! A headless Chromium driven over WebDriver: its own chromedriver on a free port (killed on drop), one
//! session, and what the tests read of the page (scripts, the console log, screenshots).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::support::{free_port, need_on_path, until};

/// A chromedriver child and a browser session on it.
pub struct Browser {
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
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         format!("--window-size={width},{height}"), "--no-first-run",
                         "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                         "--disable-backgrounding-occluded-windows"],
            }),
        );
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

    /// Ends the session and chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
    }
}
