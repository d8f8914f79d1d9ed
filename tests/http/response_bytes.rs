//! Charging by the response's size (`cost = response_bytes(per = 1024)` on
//! a handler, `cost = "response_bytes:1024"` on a `[[rules]]` entry): one
//! unit is reserved before the handler runs and the request is settled at
//! `max(1, ceil(bytes / 1024))` units once its body has been sent, through a
//! real axum router; streamed bodies, a body dropped part way, a client that
//! hangs up on a real socket, and the fleet gate over a real `redis-server`
//! (its count follows the settlement). The effect is read from what later
//! requests are told (`RateLimit-Remaining` is decided before the handler
//! runs, so a settlement shows in the next request).

use crate::support::redis as redis_support;
use crate::support::sf;

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Query;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::{rate_limit, ManualClock};
use serde::Deserialize;
use tower::ServiceExt;

/// 100 units at once, then 100 an hour: time refills nothing a test sees.
const CONFIG: &str = r#"
default_profile = "kib"

[profiles.kib]
rate = "100/h"
burst = 100

[[rules]]
name = "files"
path = "/files/{*file}"
key = "ip"
resolve = ["default"]
cost = "response_bytes:1024"

[headers]
style = "both"
"#;

#[derive(Deserialize)]
struct Size {
    /// Bytes in the response.
    bytes: usize,
    /// Chunks to stream them in (0: one body).
    #[serde(default)]
    chunks: usize,
    /// The stream fails after this many chunks.
    #[serde(default)]
    fail_after: Option<usize>,
    /// Stream the chunks with their total size known up front.
    #[serde(default)]
    sized: bool,
}

fn body_of(size: &Size) -> Body {
    if size.chunks == 0 {
        return Body::from(vec![b'x'; size.bytes]);
    }
    let chunk = size.bytes / size.chunks;
    if size.sized {
        return Body::new(SizedChunks {
            left: size.chunks,
            len: chunk,
        });
    }
    if let Some(after) = size.fail_after {
        return Body::from_stream(Failing {
            left: after,
            len: chunk,
        });
    }
    let stream = futures_stream(size.chunks, chunk);
    Body::from_stream(stream)
}

/// Chunks whose total is known up front (`size_hint` exact), as a file
/// with a length is.
struct SizedChunks {
    left: usize,
    len: usize,
}

impl http_body::Body for SizedChunks {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(vec![b's'; self.len])))))
    }
    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact((self.left * self.len) as u64)
    }
}

/// `left` chunks, then an error (an upstream that broke mid-stream).
struct Failing {
    left: usize,
    len: usize,
}

impl futures_core::Stream for Failing {
    type Item = Result<Bytes, std::io::Error>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.left == 0 {
            return std::task::Poll::Ready(Some(Err(std::io::Error::other("upstream broke"))));
        }
        self.left -= 1;
        std::task::Poll::Ready(Some(Ok(Bytes::from(vec![b'f'; self.len]))))
    }
}

/// `n` chunks of `len` bytes, one at a time (a real stream: the body is not
/// known up front).
fn futures_stream(n: usize, len: usize) -> impl futures_core::Stream<Item = Result<Bytes, Infallible>> + Send {
    struct Chunks {
        left: usize,
        len: usize,
    }
    impl futures_core::Stream for Chunks {
        type Item = Result<Bytes, Infallible>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            if self.left == 0 {
                return std::task::Poll::Ready(None);
            }
            self.left -= 1;
            std::task::Poll::Ready(Some(Ok(Bytes::from(vec![b'y'; self.len]))))
        }
    }
    Chunks { left: n, len }
}

#[rate_limit(key = ip, resolve = [default], name = "download", cost = response_bytes(per = 1024))]
async fn download(Query(size): Query<Size>) -> Body {
    body_of(&size)
}

/// Stacked with a per-request limit: that one keeps its one unit.
#[rate_limit(key = ip, resolve = [default], name = "export.bytes", cost = response_bytes(per = 1024))]
#[rate_limit(key = ip, resolve = [default], name = "export.requests")]
async fn export(Query(size): Query<Size>) -> Body {
    body_of(&size)
}

async fn file(Query(size): Query<Size>) -> Body {
    body_of(&size)
}

async fn app(clock: &ManualClock) -> (RateLimit, axum::routing::RouterIntoService<Body>) {
    let rl = RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/download", get(download))
        .route("/export", get(export))
        .route("/files/{*file}", get(file))
        .layer(rl.layer())
        .with_state(rl.clone())
        .into_service();
    (rl, app)
}

/// `/download` alone, with the runtime of `config` as its state.
async fn download_app(config: &str) -> axum::routing::RouterIntoService<Body> {
    let rl = RateLimit::builder(Config::from_toml_str(config).unwrap())
        .routes_in(module_path!())
        .clock(ManualClock::new())
        .build()
        .await
        .unwrap();
    Router::new()
        .route("/download", get(download))
        .with_state(rl)
        .into_service()
}

async fn send(app: &axum::routing::RouterIntoService<Body>, uri: &str, peer: &str) -> Response<Body> {
    let mut r = Request::builder().uri(uri).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    app.clone().oneshot(r).await.unwrap()
}

/// Sends a request and reads its whole body (which settles it).
async fn fetch(app: &axum::routing::RouterIntoService<Body>, uri: &str, peer: &str) -> (StatusCode, u32, usize) {
    let r = send(app, uri, peer).await;
    let status = r.status();
    let left = remaining(&r);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (status, left, body.len())
}

fn remaining(r: &Response<Body>) -> u32 {
    r.headers()["ratelimit-remaining"].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_response_is_settled_at_one_unit_per_started_kib() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.1:1";
    // Reserved 1 of 100 as it is decided.
    let (status, left, len) = fetch(&app, "/download?bytes=10241", peer).await;
    assert_eq!((status, left, len), (StatusCode::OK, 99, 10241));
    // Settled at 11 (10 KiB and one byte): 89 before the next, 88 after its
    // reservation.
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 88, "10241 bytes cost 11 units");
    // An empty body costs its one reserved unit, no more, no less.
    let (_, left, _) = fetch(&app, "/download?bytes=1024", peer).await;
    assert_eq!(left, 87, "an empty body costs 1 unit");
    // Exactly 1 KiB: 1 unit.
    let (_, left, _) = fetch(&app, "/download?bytes=1", peer).await;
    assert_eq!(left, 86, "1024 bytes cost 1 unit");
}

#[tokio::test]
async fn a_streamed_body_is_settled_when_it_ends() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.2:1";
    // 20 chunks of 1000 bytes: 20000 bytes, 20 units (19.53 KiB, rounded up).
    let (status, left, len) = fetch(&app, "/download?bytes=20000&chunks=20", peer).await;
    assert_eq!((status, left, len), (StatusCode::OK, 99, 20000));
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 79, "a streamed 20000 bytes cost 20 units");
}

#[tokio::test]
async fn a_body_dropped_part_way_pays_for_what_was_sent() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.3:1";
    let r = send(&app, "/download?bytes=10240&chunks=10", peer).await;
    assert_eq!(remaining(&r), 99);
    let mut body = r.into_body();
    // The client takes three chunks of 1 KiB, then hangs up.
    for _ in 0..3 {
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap().len(), 1024);
    }
    drop(body);
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 96, "3 KiB sent: 3 units");
}

#[tokio::test]
async fn a_client_in_debt_is_refused_until_time_pays_it_off() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.4:1";
    // 99 units' worth (plus the one reserved): the bucket is spent.
    let (status, _, _) = fetch(&app, &format!("/download?bytes={}", 100 * 1024), peer).await;
    assert_eq!(status, StatusCode::OK);
    let r = send(&app, "/download?bytes=1", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert_eq!(retry, 36, "one unit of 100/h: 36 s");
    clock.advance(Duration::from_secs(36));
    let (status, left, _) = fetch(&app, "/download?bytes=1", peer).await;
    assert_eq!((status, left), (StatusCode::OK, 0));
}

#[tokio::test]
async fn a_huge_response_puts_at_most_one_bucket_of_debt_on_the_client() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.5:1";
    // 1 MiB: 1024 units against a bucket of 100. The debt is capped (a
    // settlement never puts a client years into the future).
    let (status, _, len) = fetch(&app, "/download?bytes=1048576&chunks=16", peer).await;
    assert_eq!((status, len), (StatusCode::OK, 1_048_576));
    let r = send(&app, "/download?bytes=1", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry > 36, "in debt beyond the spent bucket: {retry}");
    assert!(
        retry <= 2 * 3600 + 36,
        "at most one bucket of debt beyond a spent bucket: {retry}"
    );
}

#[tokio::test]
async fn stacked_only_the_metered_limit_is_settled_by_size() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.6:1";
    let r = send(&app, "/export?bytes=5120", peer).await;
    assert_eq!(r.status(), StatusCode::OK);
    r.into_body().collect().await.unwrap();
    let r = send(&app, "/export?bytes=0", peer).await;
    // The -06 triple reports the tightest: the byte limit, 100 - 5 - 1 = 94.
    assert_eq!(remaining(&r), 94);
    // The structured List names both: the request limit paid 1 a request.
    let limits = sf::limit_triples(&r);
    let r_of = |needle: &str| {
        limits
            .iter()
            .find(|(name, _, _)| name.contains(needle))
            .unwrap_or_else(|| panic!("no {needle} in {limits:?}"))
            .1
    };
    assert_eq!(r_of("export.bytes"), 94);
    assert_eq!(
        r_of("export.requests"),
        98,
        "the per-request limit is not settled by size"
    );
}

#[tokio::test]
async fn a_body_of_known_size_is_charged_before_it_is_sent() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.10:1";
    // Two downloads of 10 KiB at once: the second is decided while the
    // first body is still unread, and already sees its 10 units.
    let first = send(&app, "/download?bytes=10240", peer).await;
    assert_eq!(remaining(&first), 99);
    let second = send(&app, "/download?bytes=10240", peer).await;
    assert_eq!(
        remaining(&second),
        89,
        "the first one's size was charged when its response was made"
    );
    drop((first, second));
    // Neither body was polled (a HEAD's body is dropped so): they keep
    // their charge, 20 units.
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 79);
}

#[tokio::test]
async fn a_head_without_probes_pays_for_the_size_it_would_have_sent() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.11:1";
    let mut r = Request::builder()
        .method(http::Method::HEAD)
        .uri("/download?bytes=20480")
        .body(Body::empty())
        .unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    let r = app.clone().oneshot(r).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.into_body().collect().await.unwrap().to_bytes().is_empty(),
        "a HEAD has no body"
    );
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 79, "the handler made 20 KiB: 20 units, not 1");
}

#[tokio::test]
async fn a_stream_is_charged_as_it_goes() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.12:1";
    let r = send(&app, "/download?bytes=10240&chunks=10", peer).await;
    let mut body = r.into_body();
    for _ in 0..5 {
        body.frame().await.unwrap().unwrap();
    }
    // Half-way through the first download, the next request already sees
    // the 5 KiB sent.
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 94);
    while body.frame().await.is_some() {}
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 88, "10 for the download, 1 each for the two empty ones");
}

#[tokio::test]
async fn a_stream_that_fails_pays_for_what_was_sent() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.13:1";
    let r = send(&app, "/download?bytes=10240&chunks=10&fail_after=4", peer).await;
    assert!(r.into_body().collect().await.is_err(), "the body ends in an error");
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 95, "4 KiB sent before the error: 4 units");
}

#[tokio::test]
async fn a_client_that_leaves_a_sized_body_early_gets_the_unsent_part_back() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.14:1";
    let r = send(&app, "/download?bytes=10240&chunks=10&sized=true", peer).await;
    let mut body = r.into_body();
    // Charged its 10 units up front ...
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 89);
    body.frame().await.unwrap().unwrap();
    body.frame().await.unwrap().unwrap();
    drop(body);
    // ... and settled at the 2 KiB sent when the client left.
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 96, "2 for the download, 1 each for the two empty ones");
}

#[tokio::test]
async fn a_rule_settles_by_size_through_the_layer() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.7:1";
    let (status, left, len) = fetch(&app, "/files/a.bin?bytes=30000&chunks=3", peer).await;
    assert_eq!((status, left, len), (StatusCode::OK, 99, 30000));
    let (_, left, _) = fetch(&app, "/files/b.bin?bytes=0", peer).await;
    assert_eq!(left, 69, "30000 bytes: 30 units");
    // Another client is not charged for it.
    let (_, left, _) = fetch(&app, "/files/b.bin?bytes=0", "192.0.2.8:1").await;
    assert_eq!(left, 99);
}

/// Through the layer (`[[rules]]`): a hang-up right after a sized body
/// was charged gets the unsent part back; a late one, after the bucket
/// refilled and was spent again, gets nothing.
#[tokio::test]
async fn a_rule_hands_back_the_unsent_part_of_a_sized_body_only_while_it_is_owed() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.32:1";
    let r = send(&app, "/files/a.bin?bytes=20480&chunks=20&sized=true", peer).await;
    let mut body = r.into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    let (_, left, _) = fetch(&app, "/files/b.bin?bytes=0", peer).await;
    assert_eq!(left, 98, "1 KiB sent: 1 unit, the 19 unsent handed back");
    // Now a late one.
    let r = send(
        &app,
        &format!("/files/a.bin?bytes={}&chunks=98&sized=true", 98 * 1024),
        peer,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut body = r.into_body();
    body.frame().await.unwrap().unwrap();
    clock.advance(Duration::from_secs(3600));
    let mut admitted = 0;
    for _ in 0..101 {
        let (status, _, _) = fetch(&app, "/files/b.bin?bytes=0", peer).await;
        admitted += u32::from(status == StatusCode::OK);
    }
    assert_eq!(admitted, 100);
    drop(body);
    let r = send(&app, "/files/b.bin?bytes=0", peer).await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "nothing handed back an hour late"
    );
}

#[tokio::test]
async fn a_route_override_of_the_cost_replaces_the_metering() {
    let text = format!("{CONFIG}\n[routes.download]\ncost = 2\n");
    let app = download_app(&text).await;
    let peer = "192.0.2.9:1";
    let (_, left, _) = fetch(&app, "/download?bytes=50000", peer).await;
    assert_eq!(left, 98);
    let (_, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!(left, 96, "2 units a request, whatever the size");
}

#[test]
fn the_config_spells_the_cost_as_the_attribute_does() {
    let bad = |cost: &str| {
        let text = CONFIG.replace("cost = \"response_bytes:1024\"", &format!("cost = {cost}"));
        Config::from_toml_str(&text).unwrap_err().to_string()
    };
    let e = bad("\"response_bytes:0\"");
    assert!(e.contains("rules[0].cost") && e.contains("at least 1"), "{e}");
    let e = bad("\"bytes:10\"");
    assert!(e.contains("unknown cost") && e.contains("response_bytes:1024"), "{e}");
    let e = bad("0");
    assert!(e.contains("from 1 to"), "{e}");
    let ok = Config::from_toml_str(CONFIG).unwrap();
    assert_eq!(ok.rules[0].bytes_per_unit, Some(1024));
    assert_eq!(ok.rules[0].cost, 1);
}

/// Over real sockets: a real HTTP/1.1 client (raw TCP, no shared code with
/// the server) downloads a streamed body, and another hangs up part way.
mod sockets {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn slow(Query(size): Query<Size>) -> Body {
        // A chunk every 20 ms: a client that hangs up is noticed mid-body.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(1);
        tokio::spawn(async move {
            for _ in 0..size.chunks {
                if tx
                    .send(Ok(Bytes::from(vec![b'z'; size.bytes / size.chunks])))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Body::from_stream(ReceiverStream(rx))
    }

    struct ReceiverStream(tokio::sync::mpsc::Receiver<Result<Bytes, Infallible>>);
    impl futures_core::Stream for ReceiverStream {
        type Item = Result<Bytes, Infallible>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            self.0.poll_recv(cx)
        }
    }

    #[rate_limit(key = ip, resolve = [default], name = "slow", cost = response_bytes(per = 1024))]
    async fn slow_route(size: Query<Size>) -> Body {
        slow(size).await
    }

    async fn serve() -> SocketAddr {
        let rl = RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
            .routes_in(module_path!())
            .build()
            .await
            .unwrap();
        let app = Router::new()
            .route("/slow", axum::routing::get(slow_route))
            .with_state(rl);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
                .await
                .unwrap();
        });
        addr
    }

    /// Sends a GET and reads until `stop` bytes of the whole exchange have
    /// arrived (then hangs up), or the server closes: the head and what was
    /// read.
    async fn get(addr: SocketAddr, target: &str, stop: Option<usize>) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {target} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if stop.is_some_and(|stop| got.len() >= stop) {
                break;
            }
        }
        drop(s);
        String::from_utf8_lossy(&got).into_owned()
    }

    fn remaining_of(response: &str) -> u32 {
        let line = response
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("ratelimit-remaining:"))
            .unwrap_or_else(|| panic!("no RateLimit-Remaining in {response:.300}"));
        line.split(':').nth(1).unwrap().trim().parse().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_real_client_pays_for_a_download_and_a_hang_up_for_what_was_sent() {
        let addr = serve().await;
        // 10 chunks of 2048 bytes, read to the end: 20 units.
        let whole = get(addr, "/slow?bytes=20480&chunks=10", None).await;
        assert!(whole.starts_with("HTTP/1.1 200"), "{whole:.200}");
        assert_eq!(remaining_of(&whole), 99);
        let next = get(addr, "/slow?bytes=0&chunks=1", None).await;
        assert_eq!(remaining_of(&next), 79, "20480 bytes read: 20 units");

        // 50 chunks of 2048 bytes; the client hangs up after about 3 of them.
        let partial = get(addr, "/slow?bytes=102400&chunks=50", Some(3 * 2048)).await;
        assert_eq!(remaining_of(&partial), 78);
        // The server notices at its next write or so, and drops the body
        // (1 s: generous on a loaded machine; the stream has 1 s to go).
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let next = get(addr, "/slow?bytes=0&chunks=1", None).await;
        let left = remaining_of(&next);
        // Paid for what was sent before the hang-up was seen (a few chunks,
        // some still in socket buffers), never the whole 100 KiB (which would
        // leave nothing).
        assert!(
            (50..=75).contains(&left),
            "charged for what was sent, not the whole body: {left} left"
        );
    }
}

/// The fleet gate counts the settled cost: an instance's download is seen
/// by the other instance through a real `redis-server`.
mod fleet {
    use super::*;
    use ratelimit::config::FleetSecret;
    use redis_support::RedisServer;
    use std::time::Instant;

    const SECRET: &[u8] = b"response bytes fleet secret 32 b";

    #[rate_limit(key = ip, resolve = [default], name = "fleet.download", cost = response_bytes(per = 1024))]
    async fn fleet_download(Query(size): Query<Size>) -> Body {
        body_of(&size)
    }

    async fn instance(url: &str, clock: &ManualClock) -> (RateLimit, axum::routing::RouterIntoService<Body>) {
        // 60/min over a 10 s window: a fleet budget of 10 units; the burst
        // of 100 leaves the fleet limit the one that binds.
        let toml = format!(
            "default_profile = \"minute\"\n[profiles.minute]\nrate = \"60/min\"\nburst = 100\n\
             [global]\nredis_url = \"{url}\"\nsync_interval = \"50ms\"\nwindow = \"10s\"\n"
        );
        let mut config = Config::from_toml_str(&toml).unwrap();
        config.global.as_mut().unwrap().key_secret = Some(FleetSecret(SECRET.to_vec()));
        let rl = RateLimit::builder(config)
            .routes_in(module_path!())
            .clock(clock.clone())
            .build()
            .await
            .unwrap();
        let app = Router::new()
            .route("/download", get(fleet_download))
            .with_state(rl.clone())
            .into_service();
        (rl, app)
    }

    async fn rounds_after(rl: &RateLimit, at_least: u64) {
        let gate = rl.gate().expect("[global] builds a gate");
        let start = Instant::now();
        while gate.status().rounds < at_least {
            assert!(start.elapsed() < Duration::from_secs(5), "no sync round");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_other_instance_sees_the_settled_size() {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        let (a, app_a) = instance(&server.url(), &clock).await;
        let (b, app_b) = instance(&server.url(), &clock).await;
        rounds_after(&a, 2).await;
        rounds_after(&b, 2).await;
        let peer = "192.0.2.60:1";
        // A serves 8 KiB: reserved 1, settled at 8.
        let (status, _, len) = fetch(&app_a, "/download?bytes=8192", peer).await;
        assert_eq!((status, len), (StatusCode::OK, 8192));
        let pushed = a.gate().unwrap().status().rounds;
        rounds_after(&a, pushed + 2).await;
        // A key new to B is admitted by B's own look (the overshoot the
        // model allows), and B starts pulling the key's fleet total.
        let (status, _, _) = fetch(&app_b, "/download?bytes=0", peer).await;
        assert_eq!(status, StatusCode::OK);
        let seen = b.gate().unwrap().status().rounds;
        rounds_after(&b, seen + 2).await;
        // 9 of the fleet's 10 are spent (8 settled on A, 1 on B): at most
        // one more, not the 8 more a count of one unit on A would leave.
        let mut admitted = 0;
        for _ in 0..10 {
            let (status, _, _) = fetch(&app_b, "/download?bytes=0", peer).await;
            if status == StatusCode::OK {
                admitted += 1;
            }
        }
        assert!(
            admitted <= 2,
            "B admitted {admitted}: the fleet saw the settled 8 units"
        );
    }
}

/// A request charged to a shared cell (here the full store's overflow
/// cell) pays its size there, like on a cell of its own, and a client that
/// leaves early gets the unsent part handed back to that cell.
#[tokio::test]
async fn a_shared_overflow_cell_is_charged_the_size_and_refunded_the_unsent_part() {
    let text = format!("{CONFIG}\n[store]\nmax_keys = 1\n");
    let app = download_app(&text).await;
    // The first client takes the store's one cell.
    let (status, left, _) = fetch(&app, "/download?bytes=0", "192.0.2.20:1").await;
    assert_eq!((status, left), (StatusCode::OK, 99));
    // The second, from another network, is charged to an overflow cell: a
    // sized 10 KiB body it leaves after 2 KiB.
    let peer = "198.51.100.20:1";
    let r = send(&app, "/download?bytes=10240&chunks=10&sized=true", peer).await;
    assert_eq!(remaining(&r), 99);
    let mut body = r.into_body();
    // Charged its 10 units up front on the overflow cell ...
    let (_, left, _) = fetch(&app, "/download?bytes=0", "198.51.100.21:1").await;
    assert_eq!(left, 89, "the size was charged to the shared cell");
    body.frame().await.unwrap().unwrap();
    body.frame().await.unwrap().unwrap();
    drop(body);
    // ... and settled at the 2 KiB sent: 100 - 2 - 1 - 1.
    let (status, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!((status, left), (StatusCode::OK, 96));
}

/// The issue's case: an IPv6 /48 spends its network's budget of new keys,
/// then every fresh /64 of it lands in the network's shared cell. Each one
/// downloading 64 KiB must pay 64 units there, as it would on a cell of its
/// own: the cell's burst (plus its capped debt) bounds what the whole /48
/// downloads, not its number of requests.
#[tokio::test]
async fn a_network_past_its_new_key_budget_pays_for_sizes_on_its_shared_cell() {
    let text = format!("{CONFIG}\n[store]\nnew_keys_per_network = \"2/min\"\n");
    let app = download_app(&text).await;
    // Two /64s of 2001:db8:7::/48, in two of its /56s (a /56 may bring in
    // only a quarter of its network's new keys), spend the network's two.
    for i in 0..2 {
        let (status, left, _) = fetch(&app, "/download?bytes=0", &format!("[2001:db8:7:{i}000::1]:1")).await;
        assert_eq!((status, left), (StatusCode::OK, 99));
    }
    // 100 fresh /64s of it, each downloading 64 KiB (a body of known size).
    let mut served = Vec::new();
    let mut bytes = 0;
    for i in 100..200 {
        let (status, left, len) = fetch(&app, "/download?bytes=65536", &format!("[2001:db8:7:{i}::1]:1")).await;
        if status == StatusCode::OK {
            served.push(left);
            bytes += len;
        }
    }
    // The shared cell: 1 reserved + 63 for the size = 64; the second fits
    // its one reserved unit (36 left) and goes into debt for its size; then
    // the cell is spent for the whole /48.
    assert_eq!(served, [99, 35], "RateLimit-Remaining of the downloads served");
    assert_eq!(bytes, 2 * 65536);
    // The shared cell is the network's: a client of another /48 keeps its
    // whole burst.
    let (status, left, _) = fetch(&app, "/download?bytes=0", "[2001:db8:8::1]:1").await;
    assert_eq!((status, left), (StatusCode::OK, 99));
}

/// The attack on the fix: a huge streamed body on a network's shared cell
/// puts at most one bucket of debt beyond a spent bucket on it, as on a
/// cell of its own (so one client of the network cannot lock its
/// neighbours out for longer than it could lock itself out), and nothing
/// on any other network.
#[tokio::test]
async fn a_huge_body_on_a_shared_cell_puts_at_most_one_bucket_of_debt_on_it() {
    let text = format!("{CONFIG}\n[store]\nnew_keys_per_network = \"2/min\"\n");
    let app = download_app(&text).await;
    // In two /56s: each may bring in a quarter of the network's new keys.
    for i in 0..2 {
        let (status, _, _) = fetch(&app, "/download?bytes=0", &format!("[2001:db8:5:{i}000::1]:1")).await;
        assert_eq!(status, StatusCode::OK);
    }
    // 16 MiB streamed (16,384 units) by a fresh /64 of the network.
    let (status, _, len) = fetch(&app, "/download?bytes=16777216&chunks=256", "[2001:db8:5:100::1]:1").await;
    assert_eq!((status, len), (StatusCode::OK, 16_777_216));
    let r = send(&app, "/download?bytes=1", "[2001:db8:5:101::1]:1").await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the shared cell paid for the stream"
    );
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry > 3600, "in debt beyond the spent bucket: {retry}");
    assert!(
        retry <= 2 * 3600 + 36,
        "at most one bucket of debt beyond a spent bucket: {retry}"
    );
    let (status, left, _) = fetch(&app, "/download?bytes=0", "[2001:db8:6::1]:1").await;
    assert_eq!((status, left), (StatusCode::OK, 99), "another network pays nothing");
}

/// Issue 26, item 3: a late hang-up hands back only what the charge still
/// holds. A 100 KiB body of known size is charged 100 units up front; the
/// client reads one frame and keeps the body open; an hour later (the bucket
/// refilled by time) it spends the refilled bucket; then it drops the old
/// body. Time has already given those 100 units back: the hang-up gives
/// nothing more.
#[tokio::test]
async fn a_late_hang_up_hands_back_nothing_that_time_already_refilled() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.31:1";
    let r = send(
        &app,
        &format!("/download?bytes={}&chunks=100&sized=true", 100 * 1024),
        peer,
    )
    .await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 99));
    let mut body = r.into_body();
    body.frame().await.unwrap().unwrap();
    clock.advance(Duration::from_secs(3600));
    let mut admitted = 0;
    for _ in 0..101 {
        let (status, _, _) = fetch(&app, "/download?bytes=0", peer).await;
        admitted += u32::from(status == StatusCode::OK);
    }
    assert_eq!(admitted, 100, "the refilled bucket, then 429");
    drop(body);
    let r = send(&app, "/download?bytes=0", peer).await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the hang-up refilled the bucket again ({:?} left)",
        r.headers().get("ratelimit-remaining")
    );
    // A hang-up soon after the charge still gets the unsent part back.
    clock.advance(Duration::from_secs(3600));
    let r = send(
        &app,
        &format!("/download?bytes={}&chunks=100&sized=true", 50 * 1024),
        peer,
    )
    .await;
    let mut body = r.into_body();
    body.frame().await.unwrap().unwrap();
    clock.advance(Duration::from_secs(36)); // one unit's worth of time
    drop(body);
    // Charged 50 on a full bucket, 1 KiB sent: time repaid the first unit
    // (the one sent), the 49 unsent are still owed and all come back. The
    // bucket is full before this request.
    let (status, left, _) = fetch(&app, "/download?bytes=0", peer).await;
    assert_eq!((status, left), (StatusCode::OK, 99));
}

/// The size charged up front is capped (one bucket of debt beyond a spent
/// bucket); a client that leaves early gets back only what was really
/// taken, never its earlier debt with it.
#[tokio::test]
async fn leaving_a_huge_sized_body_early_hands_back_only_what_was_taken() {
    let clock = ManualClock::new();
    let (_rl, app) = app(&clock).await;
    let peer = "192.0.2.30:1";
    // 99 units spent: 1 left.
    let (status, _, _) = fetch(&app, &format!("/download?bytes={}", 99 * 1024), peer).await;
    assert_eq!(status, StatusCode::OK);
    // A 10 MB body of known size (10000 units, far past the debt cap),
    // left after its first KiB: this request costs 1 unit.
    let r = send(&app, "/download?bytes=10240000&chunks=10000&sized=true", peer).await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 0));
    let mut body = r.into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    // 100 spent in all: the next request is refused (a refund of the
    // uncapped size would have handed the whole bucket back).
    let r = send(&app, "/download?bytes=1", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "36");
}
