//! The web view of `telemon serve` at `/`.

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use telemon_fleet::Fleet;

/// The routes of the web view, merged into the exporter's router (behind its authentication).
pub fn routes(fleet: Arc<Fleet>) -> Router {
    let _ = fleet;
    Router::new().route("/", get(index))
}

async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        "<html><head><title>telemon</title></head><body><h1>telemon serve</h1><ul>\
         <li><a href=\"/metrics\">/metrics</a></li><li><a href=\"/targets\">/targets</a></li>\
         <li><a href=\"/healthz\">/healthz</a></li>\
         <li>/probe?target=HOST:PORT&amp;protocol=hmon|sysinfo|smon</li></ul></body></html>\n",
    )
}
