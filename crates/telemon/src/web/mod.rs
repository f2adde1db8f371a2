//! The web view of `telemon serve` at `/`: a live page of the fleet and one per target, with the JSON
//! API and the Server-Sent Events stream they use.
//!
//! | path | answer |
//! |---|---|
//! | `/` | the fleet: one row per target, with headline figures and sparklines (HTML) |
//! | `/target/NAME` | one target: every series, charts, events, state history (HTML) |
//! | `/web/FILE` | the page's CSS and JS modules, compiled into the binary |
//! | `/api/v1/targets` | JSON: every row of `/` and the summary |
//! | `/api/v1/targets/NAME` | JSON: one target's series (grouped by family, with help, unit, value, rate) and their history (`?window=SECS`, up to an hour), events, state log |
//! | `/api/v1/targets/NAME/metrics` | one target's exposition (text 0.0.4, or OpenMetrics when `Accept` asks) |
//! | `POST /api/v1/sparklines` | JSON body `["NAME", ...]`: each target's headline figures over the last 5 minutes |
//! | `/api/v1/stream` | Server-Sent Events: `full` (as `/api/v1/targets`), then a `delta` a second with the rows that changed |
//! | `/api/v1/stream?target=NAME` | Server-Sent Events: `full` (as `/api/v1/targets/NAME`), then a `delta` a second with the series that changed |
//!
//! A `NAME` holding `/` is written with `%2F` in the API's paths (the page's own path takes it either way).
//! One sampler a second (see [`live`]) keeps each target's state log and, only while a view watches
//! (or with `[serve] web_history = "always"`), records what the views show into the shared
//! [`crate::history`] and computes `/`'s delta once for every viewer. Every page is served
//! with a Content-Security-Policy that allows only this origin's scripts and styles (no inline
//! script): the page asks nothing of another host.

pub mod live;

use std::io::Write as _;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::config::WebHistory;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt as _;
use serde_json::{json, Map, Value};
use telemon_fleet::collect::AbortOnDrop;
use telemon_fleet::render::{render, Format};
use telemon_fleet::{FleetSnapshot, TargetSnapshot};
use tokio::sync::broadcast::error::RecvError;

use live::{Live, Tick};

/// The page's Content-Security-Policy: this origin's scripts, styles and connections only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The most names one `POST /api/v1/sparklines` may ask for.
pub const MAX_SPARKLINE_NAMES: usize = 1000;

/// The static bundle: (path under `/web/`, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("static/index.html")),
    ("target.html", "text/html; charset=utf-8", include_str!("static/target.html")),
    ("app.css", "text/css; charset=utf-8", include_str!("static/app.css")),
    ("common.js", "text/javascript; charset=utf-8", include_str!("static/common.js")),
    ("fleet.js", "text/javascript; charset=utf-8", include_str!("static/fleet.js")),
    ("target.js", "text/javascript; charset=utf-8", include_str!("static/target.js")),
];

/// One target as `/targets` shows it, serialized straight from the snapshot: `/api/v1/targets` writes
/// a fleet's targets without building a JSON tree of them (at 5,000 targets that tree was 25 MB, the
/// largest allocation a fleet made). The keys are in the order [`target_json`] always gave them.
#[derive(serde::Serialize)]
pub struct TargetJson<'a> {
    connects: u64,
    dropped_series: u64,
    errors: Errors<'a>,
    labels: Labels<'a>,
    last_error: Option<&'a str>,
    last_update: Option<f64>,
    name: &'a str,
    protocol: &'a str,
    received_bytes: u64,
    reconnects: u64,
    series: usize,
    state: &'a str,
}

/// A target's labels as one JSON object.
struct Labels<'a>(&'a [(String, String)]);

impl serde::Serialize for Labels<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

/// A target's error counts by kind, as one JSON object.
struct Errors<'a>(&'a TargetSnapshot);

impl serde::Serialize for Errors<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.errors.iter().map(|(k, n)| (k.as_str(), n)))
    }
}

impl<'a> TargetJson<'a> {
    /// The fields of `t`.
    pub fn new(t: &'a TargetSnapshot) -> TargetJson<'a> {
        let unix = |at: std::time::SystemTime| {
            at.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
        };
        TargetJson {
            connects: t.connects,
            dropped_series: t.dropped_series,
            errors: Errors(t),
            labels: Labels(&t.labels),
            last_error: t.last_error.as_deref(),
            last_update: t.last_update.map(unix),
            name: &t.name,
            protocol: t.protocol.as_str(),
            received_bytes: t.received_bytes,
            reconnects: t.connects.saturating_sub(1),
            series: t.series.len(),
            state: t.state.as_str(),
        }
    }
}

/// One target as `/targets` shows it, as a JSON value (a target page adds its own fields to it).
pub fn target_json(t: &TargetSnapshot) -> Value {
    serde_json::to_value(TargetJson::new(t)).unwrap_or(Value::Null)
}

/// Each asset gzipped once, on first use.
static GZIPPED: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|(_, _, body)| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            let _ = gz.write_all(body.as_bytes());
            gz.finish().unwrap_or_default()
        })
        .collect()
});

/// The bundle's size in bytes: (uncompressed, gzipped), every file of it.
pub fn bundle_size() -> (usize, usize) {
    (ASSETS.iter().map(|a| a.2.len()).sum(), GZIPPED.iter().map(Vec::len).sum())
}

#[derive(Clone)]
struct WebState {
    live: Arc<Live>,
    _sampler: Arc<AbortOnDrop>,
}

/// The web view of a fleet: its sampler and its routes.
#[derive(Clone)]
pub struct View {
    state: WebState,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").finish_non_exhaustive()
    }
}

impl View {
    /// Starts the view's sampler on the current runtime (so it must be called within one); it stops
    /// when the view and every router from it are dropped. `history` is `[serve] web_history`.
    pub fn start(fleet: Arc<telemon_fleet::Fleet>, history: WebHistory) -> View {
        let (live, sampler) = Live::start(fleet, history);
        View { state: WebState { live, _sampler: Arc::new(sampler) } }
    }

    /// Sets when the history is kept (a reload of `[serve] web_history`).
    pub fn set_history(&self, history: WebHistory) {
        self.state.live.set_history(history);
    }

    /// The routes of the view, to merge into the exporter's router (behind its authentication).
    pub fn routes(&self) -> Router {
        router(self.state.clone())
    }
}

/// The routes of a new web view of `fleet` keeping its history while watched (see [`View`]).
pub fn routes(fleet: Arc<telemon_fleet::Fleet>) -> Router {
    View::start(fleet, WebHistory::WhileViewed).routes()
}

fn router(state: WebState) -> Router {
    Router::new()
        .route("/", get(|h: HeaderMap| async move { asset("index.html", &h) }))
        .route("/target/{*name}", get(|h: HeaderMap| async move { asset("target.html", &h) }))
        .route("/web/{file}", get(|Path(file): Path<String>, h: HeaderMap| async move { asset(&file, &h) }))
        .route("/api/v1/targets", get(api_targets))
        .route("/api/v1/targets/{name}", get(api_target))
        .route("/api/v1/targets/{name}/metrics", get(api_target_metrics))
        .route("/api/v1/sparklines", post(api_sparklines))
        .route("/api/v1/stream", get(stream))
        .with_state(state)
}

fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r
}

fn asset(file: &str, headers: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.0 == file) else {
        return error(StatusCode::NOT_FOUND, &format!("no such file: /web/{file}"));
    };
    let (_, content_type, body) = ASSETS[i];
    let gzip =
        crate::exposition::accepts_gzip(headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()));
    let mut r = if gzip {
        ([(header::CONTENT_ENCODING, "gzip")], GZIPPED[i].clone()).into_response()
    } else {
        body.into_response()
    };
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    secure(r)
}

fn error(status: StatusCode, message: &str) -> Response {
    secure(
        (status, [(header::CONTENT_TYPE, "application/json")], json!({ "error": message }).to_string())
            .into_response(),
    )
}

fn json_response(v: &Value) -> Response {
    secure(([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response())
}

async fn api_targets(State(s): State<WebState>) -> Response {
    s.live.watch_fleet(false);
    json_response(&s.live.full())
}

#[derive(serde::Deserialize)]
struct WindowQuery {
    window: Option<u32>,
}

async fn api_target(
    State(s): State<WebState>,
    Path(name): Path<String>,
    Query(q): Query<WindowQuery>,
) -> Response {
    s.live.watch_page(&name, false);
    match s.live.target(&name, q.window.unwrap_or(live::TARGET_WINDOW)) {
        Some(v) => json_response(&v),
        None => error(StatusCode::NOT_FOUND, &format!("no such target: {name}")),
    }
}

async fn api_target_metrics(
    State(s): State<WebState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let snapshot = s.live.fleet.snapshot();
    let Some(t) = snapshot.targets.iter().find(|t| *t.name == *name) else {
        return error(StatusCode::NOT_FOUND, &format!("no such target: {name}"));
    };
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let text = render(&FleetSnapshot { targets: vec![t.clone()] }, format);
    secure(([(header::CONTENT_TYPE, format.content_type())], text).into_response())
}

async fn api_sparklines(State(s): State<WebState>, body: Bytes) -> Response {
    let names: Vec<String> = match serde_json::from_slice(&body) {
        Ok(n) => n,
        Err(e) => {
            return error(StatusCode::BAD_REQUEST, &format!("the body must be a JSON array of names: {e}"))
        }
    };
    if names.len() > MAX_SPARKLINE_NAMES {
        return error(StatusCode::BAD_REQUEST, &format!("at most {MAX_SPARKLINE_NAMES} names"));
    }
    s.live.watch_fleet(false);
    secure(([(header::CONTENT_TYPE, "application/json")], s.live.sparklines(&names)).into_response())
}

#[derive(serde::Deserialize)]
struct StreamQuery {
    target: Option<String>,
}

type Events = futures::stream::BoxStream<'static, Result<Event, std::convert::Infallible>>;

async fn stream(State(s): State<WebState>, Query(q): Query<StreamQuery>) -> Response {
    let events = match q.target {
        None => fleet_stream(s.live),
        Some(name) => target_stream(s.live, name),
    };
    secure(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

fn event(kind: &str, data: &str) -> Result<Event, std::convert::Infallible> {
    Ok(Event::default().event(kind).data(data))
}

/// `/`'s stream: `full`, then each second's delta (a `full` again if this viewer fell behind).
fn fleet_stream(live: Arc<Live>) -> Events {
    // Watched first (which may sample now), then subscribed: `full` is of that sample or later.
    let watch = live.watch_fleet(true);
    let rx = live.subscribe();
    let first = Event::default().event("full").retry(Duration::from_secs(1)).data(live.full().to_string());
    let weak = Arc::downgrade(&live);
    drop(live);
    let rest = futures::stream::unfold((rx, weak, watch), |(mut rx, weak, watch)| async move {
        let ev = match rx.recv().await {
            Ok(tick) => event("delta", &tick.delta),
            Err(RecvError::Lagged(_)) => event("full", &weak.upgrade()?.full().to_string()),
            Err(RecvError::Closed) => return None,
        };
        Some((ev, (rx, weak, watch)))
    });
    futures::stream::once(async move { Ok(first) }).chain(rest).boxed()
}

/// What a target page's stream remembers of the last second it sent.
struct Sent {
    keys: Vec<String>,
    values: Vec<(Value, Value, Value)>,
    state: Map<String, Value>,
}

/// One target page's stream: `full`, then a `delta` a second with the series whose figures changed
/// and the state fields that changed (a `full` again when its series come or go, `gone` when it does).
fn target_stream(live: Arc<Live>, name: String) -> Events {
    let rx = live.subscribe();
    let watch = live.watch_page(&name, true);
    let snapshot = live.fleet.snapshot();
    let sent = snapshot.get(&name).map(|t| {
        let (keys, values) = live.figures(t);
        Sent { keys, values, state: live.target_state(t) }
    });
    let first = match live.target(&name, live::TARGET_WINDOW) {
        Some(v) => Event::default().event("full").retry(Duration::from_secs(1)).data(v.to_string()),
        None => Event::default()
            .event("gone")
            .retry(Duration::from_secs(1))
            .data(json!({ "name": name }).to_string()),
    };
    let weak = Arc::downgrade(&live);
    drop(live);
    let state = (rx, weak, name, sent, watch);
    let rest = futures::stream::unfold(state, |(mut rx, weak, name, mut sent, watch)| async move {
        let tick: Arc<Tick> = loop {
            match rx.recv().await {
                Ok(tick) => break tick,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        };
        let live = weak.upgrade()?;
        let ev = match (tick.snapshot.get(&name), sent.as_mut()) {
            (None, None) => event("delta", &json!({ "at": tick.at }).to_string()),
            (None, Some(_)) => {
                sent = None;
                event("gone", &json!({ "name": name }).to_string())
            }
            (Some(t), previous) => {
                let (keys, values) = live.figures(t);
                let state = live.target_state(t);
                match previous {
                    Some(p) if p.keys == keys => {
                        let changed: Vec<Value> = keys
                            .iter()
                            .zip(&values)
                            .zip(&p.values)
                            .filter(|((_, v), old)| v != old)
                            .map(|((k, v), _)| json!([k, v.0, v.1, v.2]))
                            .collect();
                        let fields: Map<String, Value> = state
                            .iter()
                            .filter(|(k, v)| p.state.get(*k) != Some(v))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        p.values = values;
                        p.state = state;
                        event(
                            "delta",
                            &json!({ "at": tick.at, "t": live.unix_at(tick.at), "values": changed, "fields": fields })
                                .to_string(),
                        )
                    }
                    _ => {
                        sent = Some(Sent { keys, values, state });
                        match live.target(&name, live::TARGET_WINDOW) {
                            Some(v) => event("full", &v.to_string()),
                            None => event("gone", &json!({ "name": name }).to_string()),
                        }
                    }
                }
            }
        };
        Some((ev, (rx, weak, name, sent, watch)))
    });
    futures::stream::once(async move { Ok(first) }).chain(rest).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_written_straight_says_what_its_json_tree_said() {
        use telemon_fleet::{ErrorKind, Protocol, TargetState};
        let mut t = TargetSnapshot::new(
            "rack/b12",
            Protocol::SYSINFO,
            vec![("room".into(), "b12".into()), ("a".into(), "x\"y".into())],
        );
        t.state = TargetState::Down;
        t.last_error = Some("refused".into());
        t.last_update = Some(std::time::UNIX_EPOCH + Duration::from_millis(1500));
        t.connects = 3;
        t.errors.bump(ErrorKind::Connect);
        t.dropped_series = 2;
        t.received_bytes = 77;
        let written: Value =
            serde_json::from_slice(&serde_json::to_vec(&TargetJson::new(&t)).unwrap()).unwrap();
        let mut errors = Map::new();
        for (k, n) in t.errors.iter() {
            errors.insert(k.as_str().into(), n.into());
        }
        let expected = json!({
            "name": "rack/b12",
            "protocol": "sysinfo",
            "labels": {"room": "b12", "a": "x\"y"},
            "state": "down",
            "last_error": "refused",
            "last_update": 1.5,
            "connects": 3,
            "reconnects": 2,
            "errors": errors,
            "series": 0,
            "dropped_series": 2,
            "received_bytes": 77,
        });
        assert_eq!(written, expected);
        assert_eq!(target_json(&t), expected);
    }

    #[test]
    fn the_bundle_is_small_and_has_no_inline_script() {
        let (plain, gz) = bundle_size();
        assert!(plain < 100_000 && gz < plain, "{plain} bytes, {gz} gzipped");
        for (name, _, body) in ASSETS.iter().filter(|a| a.0.ends_with(".html")) {
            for (i, _) in body.match_indices("<script") {
                let tag = &body[i..body[i..].find('>').map_or(body.len(), |e| i + e)];
                assert!(tag.contains("src="), "{name}: an inline script: {tag}");
            }
            assert!(!body.contains("http://") && !body.contains("https://"), "{name} names another host");
        }
    }
}
