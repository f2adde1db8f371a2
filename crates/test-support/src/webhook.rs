//! An Alertmanager webhook receiver in the test: every POST it gets is kept, in order, with when it came, and
//! its alerts read from the webhook's JSON (version 4: `status`, `alerts[].labels`, `.annotations`,
//! `.startsAt`, `.endsAt`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Instant;

use tokio::sync::mpsc;

/// How many notifications may wait unread before the receiver holds up Alertmanager's next POST.
const QUEUE: usize = 1024;

/// One POST to the receiver.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The path it was sent to (which receiver of Alertmanager's config: `/pager`, say).
    pub path: String,
    /// When it arrived.
    pub at: Instant,
    /// The webhook's JSON (`null` when the body was not JSON).
    pub body: serde_json::Value,
}

/// One alert of a notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// `firing` or `resolved`.
    pub status: String,
    /// Its labels, `alertname` among them.
    pub labels: BTreeMap<String, String>,
    /// Its annotations (`summary`, `description`).
    pub annotations: BTreeMap<String, String>,
    /// When it started firing (RFC 3339).
    pub starts_at: String,
    /// When it ended (RFC 3339; Go's zero time `0001-01-01T00:00:00Z` while it fires).
    pub ends_at: String,
}

impl Notification {
    /// The notification's own `status`: `firing` while any of its alerts fires, else `resolved`.
    pub fn status(&self) -> &str {
        self.body["status"].as_str().unwrap_or_default()
    }

    /// Its alerts (none when the body is not a webhook's).
    pub fn alerts(&self) -> Vec<Alert> {
        let strings = |v: &serde_json::Value| -> BTreeMap<String, String> {
            v.as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        };
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        self.body["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| Alert {
                status: text(&a["status"]),
                labels: strings(&a["labels"]),
                annotations: strings(&a["annotations"]),
                starts_at: text(&a["startsAt"]),
                ends_at: text(&a["endsAt"]),
            })
            .collect()
    }
}

/// The receiver, on a free loopback port until it is dropped: it answers every POST with 200.
pub struct Webhook {
    addr: SocketAddr,
    received: mpsc::Receiver<Notification>,
    server: tokio::task::JoinHandle<()>,
}

impl Webhook {
    /// Starts the receiver.
    pub async fn start() -> Webhook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, received) = mpsc::channel(QUEUE);
        let keep = move |uri: axum::http::Uri, body: String| async move {
            let body = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
            let _ = tx.send(Notification { path: uri.path().to_owned(), at: Instant::now(), body }).await;
        };
        let app = axum::Router::new().fallback(axum::routing::post(keep));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Webhook { addr, received, server }
    }

    /// The URL of `path` (`/pager`, say) on the receiver: a `webhook_configs` url.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The next notification, or `None` if none comes within `wait`.
    pub async fn next(&mut self, wait: std::time::Duration) -> Option<Notification> {
        tokio::time::timeout(wait, self.received.recv()).await.ok().flatten()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.server.abort();
    }
}
