//! Requests to an axum router in process, as its tests send them: from a
//! client address (what `key = ip` reads), and the response read back.

use axum::body::Body;
use http::{Method, Request, Response};
use ratelimit::key::PeerAddr;
use tower::ServiceExt;

/// A router, as a service.
pub(crate) type App = axum::routing::RouterIntoService<Body>;

/// `method uri` from `peer` (`"192.0.2.1:1"`).
pub(crate) async fn send(app: &App, method: Method, uri: &str, peer: &str) -> Response<Body> {
    let mut r = Request::builder().method(method).uri(uri).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    app.clone().oneshot(r).await.unwrap()
}

/// The whole body.
pub(crate) async fn body(r: Response<Body>) -> bytes::Bytes {
    http_body_util::BodyExt::collect(r.into_body())
        .await
        .unwrap()
        .to_bytes()
}

/// A header's value, which must be there.
pub(crate) fn header<'a>(r: &'a Response<Body>, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .unwrap()
}
