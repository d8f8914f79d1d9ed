//! Requests in flight per client (`[profiles.NAME] concurrency`) through
//! real axum routers: a permit is held while the response body is alive
//! (a response not yet read is a request in flight), on attribute routes,
//! `[[rules]]` through the layer, stacked limits (all or nothing), probes
//! (report, never hold) and shadow routes (report, never refuse); and,
//! over a real socket, a handler that panics gives its permit back.

use crate::support::router::{body, header, send, App};
use crate::support::sf;

use axum::body::Body;
use axum::routing::{any, get};
use axum::Router;
use http::{Method, Response, StatusCode};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::{rate_limit, ManualClock};

const CONFIG: &str = r#"
default_profile = "open"

[profiles.open]
rate = "100/min"
burst = 100

[profiles.two]
rate = "100/min"
burst = 100
concurrency = 2

[profiles.one]
rate = "100/min"
burst = 100
concurrency = 1

# Two requests, then none for a minute; two at once.
[profiles.spent]
rate = "1/min"
burst = 2
concurrency = 2

[headers]
style = "both"

[responses]
probe_methods = ["HEAD"]

[routes."watched"]
shadow = true

[[rules]]
name = "proxy"
path = "/proxy/{*rest}"
key = "ip"
resolve = ["profile:one", "default"]
"#;

/// A streamed body (no size known up front): its permit is held until it
/// has been read to the end or dropped.
fn streamed() -> Body {
    let chunks: Vec<Result<bytes::Bytes, std::convert::Infallible>> =
        vec![Ok(bytes::Bytes::from_static(b"a")), Ok(bytes::Bytes::from_static(b"b"))];
    Body::from_stream(Stream(chunks.into_iter()))
}

/// An iterator as a `Stream`.
struct Stream<I>(I);

impl<I: Iterator + Unpin> futures_core::Stream for Stream<I> {
    type Item = I::Item;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<I::Item>> {
        std::task::Poll::Ready(self.0.next())
    }
}

#[rate_limit(key = ip, resolve = [profile("two"), default], name = "export")]
async fn export() -> Body {
    streamed()
}

#[rate_limit(key = ip, resolve = [profile("spent"), default], name = "spent")]
async fn spent() -> Body {
    streamed()
}

#[rate_limit(key = ip, resolve = [profile("one"), default], name = "small")]
async fn small() -> &'static str {
    "a small body in memory"
}

#[rate_limit(key = ip, resolve = [profile("one"), default], name = "empty")]
async fn empty() -> http::StatusCode {
    http::StatusCode::OK
}

#[rate_limit(key = ip, resolve = [profile("one"), default], name = "watched")]
async fn watched() -> Body {
    streamed()
}

#[rate_limit(key = ip, resolve = [profile("open"), default], name = "pair.rate")]
#[rate_limit(key = ip, resolve = [profile("one"), default], name = "pair.concurrency")]
async fn pair() -> Body {
    streamed()
}

async fn upstream() -> Body {
    streamed()
}

async fn boom() -> Body {
    panic!("the handler failed")
}

#[rate_limit(key = ip, resolve = [profile("one"), default], name = "fragile")]
async fn fragile(axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>) -> Body {
    if q.contains_key("panic") {
        return boom().await;
    }
    Body::from("fine")
}

async fn runtime() -> RateLimit {
    RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
        .routes_in(module_path!())
        .clock(ManualClock::new())
        .build()
        .await
        .unwrap()
}

async fn app() -> App {
    let rl = runtime().await;
    Router::new()
        .route("/export", get(export))
        .route("/small", get(small))
        .route("/empty", get(empty))
        .route("/spent", get(spent))
        .route("/watched", get(watched))
        .route("/pair", get(pair))
        .route("/proxy/{*rest}", any(upstream))
        .layer(rl.layer())
        .with_state(rl)
        .into_service()
}

/// The concurrency member of the structured Lists: (q, qu) of the policy,
/// r of the limit.
fn concurrency(r: &Response<Body>) -> (i64, String, i64) {
    let policy = sf::policies(r)
        .into_iter()
        .find(|m| m.name.ends_with("#concurrency"))
        .expect("a concurrency policy");
    let limit = sf::limits(r)
        .into_iter()
        .find(|m| m.name == policy.name)
        .expect("its RateLimit member");
    (
        policy.get("q").unwrap(),
        policy.text("qu").unwrap().to_owned(),
        limit.get("r").unwrap(),
    )
}

#[tokio::test]
async fn a_streamed_response_holds_its_permit_until_read_or_dropped() {
    let app = app().await;
    let peer = "192.0.2.1:1";
    let first = send(&app, Method::GET, "/export", peer).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(concurrency(&first), (2, "concurrent-requests".to_owned(), 1));
    let second = send(&app, Method::GET, "/export", peer).await;
    assert_eq!(concurrency(&second).2, 0);
    let third = send(&app, Method::GET, "/export", peer).await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&third, "retry-after"), "1");
    assert_eq!(header(&third, "ratelimit-limit"), "2");
    assert_eq!(header(&third, "ratelimit-remaining"), "0");
    assert_eq!(concurrency(&third).2, 0);
    let problem: serde_json::Value = serde_json::from_slice(&body(third).await).unwrap();
    assert_eq!(
        problem["violated-policies"],
        serde_json::json!(["export/two#concurrency"])
    );
    // Another client is not affected.
    assert_eq!(
        send(&app, Method::GET, "/export", "192.0.2.9:1").await.status(),
        StatusCode::OK
    );
    // Read to the end: the permit is back.
    assert_eq!(body(first).await.as_ref(), b"ab");
    let fourth = send(&app, Method::GET, "/export", peer).await;
    assert_eq!(fourth.status(), StatusCode::OK);
    // Dropped unread (a client that hung up): back too.
    drop((second, fourth));
    for _ in 0..2 {
        let r = send(&app, Method::GET, "/export", peer).await;
        assert_eq!(r.status(), StatusCode::OK);
        body(r).await;
    }
    // The refusal was not charged to the rate: 100 less the 5 admitted
    // before and this one.
    let r = send(&app, Method::GET, "/export", peer).await;
    let rate = sf::limits(&r).into_iter().find(|m| m.name == "export/two").unwrap();
    assert_eq!(rate.get("r"), Some(94));
}

/// A request its rate refuses on a route with a concurrency limit gives
/// the permit it took back at once: refusals hold nothing, so they are
/// refused by the rate, never by the permits they would have piled up.
#[tokio::test]
async fn a_refusal_by_the_rate_gives_its_permit_back() {
    let app = app().await;
    let peer = "192.0.2.7:1";
    let held = send(&app, Method::GET, "/spent", peer).await;
    assert_eq!(held.status(), StatusCode::OK);
    let read = send(&app, Method::GET, "/spent", peer).await;
    assert_eq!(read.status(), StatusCode::OK);
    body(read).await;
    for _ in 0..3 {
        let r = send(&app, Method::GET, "/spent", peer).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        let problem: serde_json::Value = serde_json::from_slice(&body(r).await).unwrap();
        assert_eq!(problem["violated-policies"], serde_json::json!(["spent/spent"]));
    }
    let probe = send(&app, Method::HEAD, "/spent", peer).await;
    assert_eq!(concurrency(&probe).2, 1, "the held request's permit only");
    drop(held);
    let probe = send(&app, Method::HEAD, "/spent", peer).await;
    assert_eq!(concurrency(&probe).2, 2, "none held");
}

/// A body of known length holds its permit until it has been sent too: a
/// length says nothing of how slowly a body streams (a proxied upstream's).
/// Only an empty body gives it back when the handler returns.
#[tokio::test]
async fn a_body_of_known_length_holds_its_permit_until_sent() {
    let app = app().await;
    let peer = "192.0.2.2:1";
    let first = send(&app, Method::GET, "/small", peer).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(concurrency(&first), (1, "concurrent-requests".to_owned(), 0));
    // Its body is unread: the permit is still held.
    let refused = send(&app, Method::GET, "/small", peer).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body(first).await.as_ref(), b"a small body in memory");
    let again = send(&app, Method::GET, "/small", peer).await;
    assert_eq!(again.status(), StatusCode::OK, "sent: the permit is back");
    // An empty body holds nothing once the handler has returned.
    let peer = "192.0.2.9:1";
    let empty = send(&app, Method::GET, "/empty", peer).await;
    assert_eq!(empty.status(), StatusCode::OK);
    assert_eq!(send(&app, Method::GET, "/empty", peer).await.status(), StatusCode::OK);
    drop(empty);
}

#[tokio::test]
async fn a_rule_through_the_layer_holds_its_permit_for_the_body() {
    let app = app().await;
    let peer = "192.0.2.3:1";
    let first = send(&app, Method::GET, "/proxy/a", peer).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(concurrency(&first), (1, "concurrent-requests".to_owned(), 0));
    let refused = send(&app, Method::GET, "/proxy/b", peer).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), "1");
    assert_eq!(body(first).await.as_ref(), b"ab");
    assert_eq!(send(&app, Method::GET, "/proxy/c", peer).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn stacked_limits_refused_by_a_concurrency_charge_no_rate() {
    let app = app().await;
    let peer = "192.0.2.4:1";
    let held = send(&app, Method::GET, "/pair", peer).await;
    assert_eq!(held.status(), StatusCode::OK);
    for _ in 0..3 {
        let r = send(&app, Method::GET, "/pair", peer).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        let problem: serde_json::Value = serde_json::from_slice(&body(r).await).unwrap();
        assert_eq!(
            problem["violated-policies"],
            serde_json::json!(["pair.concurrency/one#concurrency"])
        );
    }
    drop(held);
    // All or nothing: the refusals charged neither limit's rate.
    let r = send(&app, Method::GET, "/pair", peer).await;
    assert_eq!(r.status(), StatusCode::OK);
    let rates: Vec<(String, i64)> = sf::limits(&r)
        .into_iter()
        .filter(|m| !m.name.ends_with("#concurrency"))
        .map(|m| (m.name.clone(), m.get("r").unwrap()))
        .collect();
    assert_eq!(
        rates,
        [
            ("pair.rate/open".to_owned(), 98),
            ("pair.concurrency/one".to_owned(), 98)
        ]
    );
}

#[tokio::test]
async fn a_probe_reports_the_permits_and_holds_none() {
    let app = app().await;
    let peer = "192.0.2.5:1";
    let probe = send(&app, Method::HEAD, "/export", peer).await;
    assert_eq!(probe.status(), StatusCode::NO_CONTENT);
    assert_eq!(concurrency(&probe).2, 2, "nothing in flight: both permits left");
    let a = send(&app, Method::GET, "/export", peer).await;
    let b = send(&app, Method::GET, "/export", peer).await;
    assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
    let probe = send(&app, Method::HEAD, "/export", peer).await;
    assert_eq!(
        probe.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "what a request would get now"
    );
    assert_eq!(header(&probe, "retry-after"), "1");
    drop(a);
    let probe = send(&app, Method::HEAD, "/export", peer).await;
    assert_eq!(probe.status(), StatusCode::NO_CONTENT);
    assert_eq!(concurrency(&probe).2, 1);
    drop(b);
}

#[tokio::test]
async fn a_shadow_route_reports_a_full_concurrency_and_serves() {
    let app = app().await;
    let peer = "192.0.2.6:1";
    let first = send(&app, Method::GET, "/watched", peer).await;
    let second = send(&app, Method::GET, "/watched", peer).await;
    assert_eq!((first.status(), second.status()), (StatusCode::OK, StatusCode::OK));
    assert_eq!(concurrency(&second).2, 0, "reported as full");
    drop((first, second));
}

/// Over a real socket: a handler that panics (the connection's task
/// unwinds and drops the request) gives its permit back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_gives_its_permit_back() {
    let rl = runtime().await;
    let app = Router::new().route("/fragile", get(fragile)).with_state(rl);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
        .unwrap();
    });
    let request = |path: &'static str| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let text = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        // A panicking handler's connection is closed with no response.
        let _ = stream.read_to_end(&mut raw).await;
        String::from_utf8_lossy(&raw).into_owned()
    };
    for _ in 0..3 {
        let reply = request("/fragile?panic=1").await;
        assert!(
            !reply.starts_with("HTTP/1.1 429"),
            "refused: a permit was lost: {reply}"
        );
    }
    // Concurrency 1: had a panic kept its permit, this would be refused.
    let reply = request("/fragile").await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}
