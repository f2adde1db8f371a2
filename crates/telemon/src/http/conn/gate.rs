//! `basic_auth_users`, `rate_limit` and `http_server_config.headers` around the whole Router: a
//! hyper service in front of it, so that every route (those of `http` and of `web`) is covered.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::service::TowerToHyperService;

use super::auth::OPEN_PATH;
use super::web_config::WebConfig;

/// The Router behind the web config in force when its connection was accepted.
#[derive(Clone)]
pub(crate) struct Gatekeeper {
    inner: TowerToHyperService<Router>,
    web: Option<Arc<WebConfig>>,
}

impl Gatekeeper {
    pub(crate) fn new(inner: TowerToHyperService<Router>, web: Option<Arc<WebConfig>>) -> Gatekeeper {
        Gatekeeper { inner, web }
    }
}

fn plain(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("{status}\n")));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

impl hyper::service::Service<Request<Incoming>> for Gatekeeper {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let inner = self.inner.clone();
        let Some(web) = self.web.clone() else { return Box::pin(inner.call(request)) };
        Box::pin(async move {
            let mut response = if web.limiter.as_ref().is_some_and(|l| !l.allow()) {
                plain(StatusCode::TOO_MANY_REQUESTS)
            } else if web.users.is_empty()
                || request.uri().path() == OPEN_PATH
                || web.users.check(request.headers().get(header::AUTHORIZATION)).await
            {
                inner.call(request).await?
            } else {
                let mut denied = plain(StatusCode::UNAUTHORIZED);
                denied.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
                denied
            };
            for (name, value) in &web.headers {
                response.headers_mut().insert(name.clone(), value.clone());
            }
            Ok(response)
        })
    }
}
