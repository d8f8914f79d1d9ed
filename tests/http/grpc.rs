//! gRPC behind `RateLimitLayer`: a real tonic server (the standard health
//! service) over TCP on 127.0.0.1, a real tonic client. Allowed calls carry
//! the rate-limit metadata; refused ones are `RESOURCE_EXHAUSTED` with a
//! `google.rpc.RetryInfo` decoded by tonic-types (an implementation
//! independent of the library's encoder) and `retry-after`; `ip` keys read
//! tonic's peer address; `header:` keys read metadata; plain HTTP through
//! the same layer still gets its 429; and the wire shape of a refusal,
//! checked with raw HTTP/1.1 requests (the server also accepts HTTP/1.1,
//! as a gRPC-Web deployment does).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ratelimit::axum::{RateLimit, Rejection};
use ratelimit::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

const CHECK: &str = "/grpc.health.v1.Health/Check";

/// Three calls at once, then one every 10 s, per client address.
const PER_IP: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "6/min"
burst = 3

[headers]
style = "both"

[[rules]]
name = "health"
path = "/grpc.health.v1.Health/{*rest}"
key = "ip"
resolve = ["default"]
"#;

/// Two calls per API key (metadata `x-api-key`).
const PER_KEY: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "6/min"
burst = 2

[[rules]]
name = "health"
path = "/grpc.health.v1.Health/{*rest}"
key = "header:x-api-key"
resolve = ["default"]
"#;

/// One call a day.
const DAILY: &str = r#"
default_profile = "daily"

[profiles.daily]
rate = "1/day"
burst = 1

[[rules]]
name = "health"
path = "/{*rest}"
key = "ip"
resolve = ["default"]
"#;

/// Starts a tonic server with the health service behind the layer.
async fn serve(rate_limit: &RateLimit) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The service answers SERVING for "" (the server as a whole).
    let (_, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .accept_http1(true)
        .layer(rate_limit.layer())
        .add_service(health)
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(async move { server.await.unwrap() });
    addr
}

async fn serve_config(config: &str) -> SocketAddr {
    let rate_limit = RateLimit::builder(Config::from_toml_str(config).unwrap())
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
    serve(&rate_limit).await
}

/// A client connecting from `local` (a loopback address of its own).
async fn client_from(addr: SocketAddr, local: Option<IpAddr>) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(local)
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    client_from(addr, None).await
}

fn check() -> Request<HealthCheckRequest> {
    Request::new(HealthCheckRequest { service: String::new() })
}

fn check_with_key(key: &'static str) -> Request<HealthCheckRequest> {
    let mut request = check();
    request.metadata_mut().insert("x-api-key", key.parse().unwrap());
    request
}

fn metadata<'a>(m: &'a tonic::metadata::MetadataMap, name: &str) -> &'a str {
    m.get(name)
        .unwrap_or_else(|| panic!("no {name} in {m:?}"))
        .to_str()
        .unwrap()
}

/// `retry-after` and the RetryInfo delay of a refusal, checked to agree:
/// the delay is positive and `retry-after` is it rounded up.
fn retry(status: &Status) -> (u64, Duration) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let retry_after: u64 = metadata(status.metadata(), "retry-after").parse().unwrap();
    let info = status
        .get_details_retry_info()
        .unwrap_or_else(|| panic!("no RetryInfo in {status:?}"));
    let delay = info.retry_delay.expect("a retry delay");
    assert!(delay > Duration::ZERO, "{delay:?}");
    assert!(
        delay <= Duration::from_secs(retry_after),
        "{delay:?} vs retry-after {retry_after}"
    );
    assert!(
        delay > Duration::from_secs(retry_after - 1),
        "{delay:?} vs retry-after {retry_after}"
    );
    (retry_after, delay)
}

#[tokio::test]
async fn calls_past_the_burst_are_resource_exhausted_with_retry_info() {
    let addr = serve_config(PER_IP).await;
    let mut client = client(addr).await;
    for remaining in ["2", "1", "0"] {
        let response = client.check(check()).await.expect("within the burst");
        let m = response.metadata();
        // The layer's headers reach the client as initial metadata.
        assert_eq!(metadata(m, "ratelimit-limit"), "3");
        assert_eq!(metadata(m, "ratelimit-remaining"), remaining);
        assert!(metadata(m, "ratelimit-policy").starts_with("\"@health/standard\";q=3;w=30"));
        assert!(metadata(m, "ratelimit").starts_with(&format!("\"@health/standard\";r={remaining}")));
    }
    let status = client.check(check()).await.expect_err("past the burst");
    let (retry_after, delay) = retry(&status);
    assert_eq!(retry_after, 10, "one call every 10 s");
    assert!(delay > Duration::from_secs(9), "{delay:?}");
    assert_eq!(status.message(), "rate limit @health/standard exceeded; retry in 10 s");
    // The rate-limit metadata are on the refusal too.
    let m = status.metadata();
    assert_eq!(metadata(m, "ratelimit-limit"), "3");
    assert_eq!(metadata(m, "ratelimit-remaining"), "0");
    assert_eq!(metadata(m, "ratelimit-reset"), "30");
    assert!(metadata(m, "ratelimit").contains(";r=0;t=10"));
    // The rich error model: one detail, the RetryInfo (tonic-types reads
    // the google.rpc.Status itself).
    let details = status.get_error_details();
    assert!(details.retry_info().is_some());
    assert!(details.error_info().is_none() && details.quota_failure().is_none());

    // Another client address (127.0.0.2: the peer tonic's server saw) has a
    // bucket of its own: the layer read `TcpConnectInfo`, or every call
    // would share the one "unknown peer" bucket.
    let mut other = client_from(addr, Some("127.0.0.2".parse().unwrap())).await;
    let response = other.check(check()).await.expect("another address");
    assert_eq!(metadata(response.metadata(), "ratelimit-remaining"), "2");
    // And the first is still refused.
    retry(&client.check(check()).await.expect_err("still limited"));
}

#[tokio::test]
async fn metadata_keys_limit_each_api_key_on_its_own() {
    let addr = serve_config(PER_KEY).await;
    let mut client = client(addr).await;
    for remaining in ["1", "0"] {
        let response = client
            .check(check_with_key("key-a"))
            .await
            .expect("key-a within its burst");
        assert_eq!(metadata(response.metadata(), "ratelimit-remaining"), remaining);
    }
    retry(
        &client
            .check(check_with_key("key-a"))
            .await
            .expect_err("key-a past its burst"),
    );
    // Same connection, same address, another key: its own bucket.
    for remaining in ["1", "0"] {
        let response = client
            .check(check_with_key("key-b"))
            .await
            .expect("key-b within its burst");
        assert_eq!(metadata(response.metadata(), "ratelimit-remaining"), remaining);
    }
    retry(
        &client
            .check(check_with_key("key-b"))
            .await
            .expect_err("key-b past its burst"),
    );
    // No key: the address's bucket, which neither key used.
    let response = client.check(check()).await.expect("no key: the address");
    assert_eq!(metadata(response.metadata(), "ratelimit-remaining"), "1");
}

/// A raw HTTP/1.1 request: status, headers (lowercase names), body.
async fn http1(addr: SocketAddr, content_type: &str) -> (u16, Vec<(String, String)>, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {CHECK} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: {content_type}\r\ncontent-length: 0\r\nconnection: \
         close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("the server answers")
        .unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .map(|l| {
            let (name, value) = l.split_once(':').unwrap();
            (name.trim().to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// A day-long wait: the RetryInfo says a day, so does `retry-after`, and the
/// wire shape is gRPC's for every spelling of gRPC's content type, HTTP's
/// for anything else.
#[tokio::test]
async fn a_day_long_wait_and_the_wire_shape_of_refusals() {
    let addr = serve_config(DAILY).await;
    let mut client = client(addr).await;
    client.check(check()).await.expect("the day's one call");
    let status = client.check(check()).await.expect_err("the day's second call");
    let (retry_after, delay) = retry(&status);
    assert_eq!(retry_after, 86_400);
    assert!(delay > Duration::from_secs(86_399), "{delay:?}");
    assert_eq!(status.message(), "rate limit @health/daily exceeded; retry in 86400 s");

    for grpc in [
        "application/grpc",
        "application/grpc+proto",
        "APPLICATION/GRPC",
        "Application/gRPC+json",
    ] {
        let (code, headers, body) = http1(addr, grpc).await;
        assert_eq!(code, 200, "{grpc}: {headers:?}");
        assert_eq!(header(&headers, "content-type"), Some("application/grpc"), "{grpc}");
        assert_eq!(header(&headers, "grpc-status"), Some("8"), "{grpc}");
        // Percent-encoded per the gRPC spec (nothing here needs it).
        assert_eq!(
            header(&headers, "grpc-message"),
            Some("rate limit @health/daily exceeded; retry in 86400 s")
        );
        let details = header(&headers, "grpc-status-details-bin").expect("details");
        assert!(!details.ends_with('='), "unpadded base64: {details}");
        assert_eq!(header(&headers, "retry-after"), Some("86400"));
        assert_eq!(header(&headers, "ratelimit-remaining"), Some("0"));
        assert_eq!(header(&headers, "content-length"), Some("0"));
        assert!(body.is_empty(), "trailers-only: {body:?}");
    }
    for http in [
        "application/grpcfoo",
        "application/grpc-web",
        "application/json",
        "text/plain",
    ] {
        let (code, headers, body) = http1(addr, http).await;
        assert_eq!(code, 429, "{http}: {headers:?}");
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/problem+json"),
            "{http}"
        );
        assert_eq!(header(&headers, "grpc-status"), None, "{http}");
        assert_eq!(header(&headers, "retry-after"), Some("86400"));
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["status"], 429);
        assert_eq!(body["retry_after"], 86_400);
    }
}

/// Over raw HTTP/2, as gRPC clients speak it: the refusal is one HEADERS
/// frame that ends the stream (gRPC's "Trailers-Only"), for each spelling of
/// gRPC's content type; a look-alike type gets the 429.
#[tokio::test]
async fn over_http2_a_refusal_is_trailers_only() {
    let addr = serve_config(DAILY).await;
    client(addr).await.check(check()).await.expect("the day's one call");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    for (content_type, grpc) in [
        ("application/grpc", true),
        ("application/grpc+proto", true),
        ("APPLICATION/GRPC+PROTO", true),
        ("application/grpc; charset=utf-8", true),
        ("application/grpcfoo", false),
    ] {
        let request = http::Request::post(format!("http://{addr}{CHECK}"))
            .header("content-type", content_type)
            .header("te", "trailers")
            .body(())
            .unwrap();
        let mut h2 = h2.clone().ready().await.unwrap();
        let (response, mut body) = h2.send_request(request, false).unwrap();
        // An empty HealthCheckRequest: not compressed, length 0.
        body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
            .unwrap();
        let response = response.await.unwrap();
        let headers = response.headers();
        if grpc {
            assert_eq!(response.status(), 200, "{content_type}");
            assert!(
                response.body().is_end_stream(),
                "{content_type}: HEADERS with END_STREAM"
            );
            assert_eq!(headers["content-type"], "application/grpc");
            assert_eq!(headers["grpc-status"], "8");
            assert_eq!(headers["retry-after"], "86400");
            assert!(headers.contains_key("grpc-status-details-bin"));
        } else {
            assert_eq!(response.status(), 429, "{content_type}");
            assert_eq!(headers["content-type"], "application/problem+json");
            assert!(!headers.contains_key("grpc-status"));
        }
    }
}

/// gRPC and plain HTTP through one layer share the rule's bucket; each
/// gets its own shape of refusal.
#[tokio::test]
async fn plain_http_through_the_same_layer_still_gets_a_429() {
    let addr = serve_config(PER_IP).await;
    let mut client = client(addr).await;
    for _ in 0..3 {
        client.check(check()).await.expect("within the burst");
    }
    retry(&client.check(check()).await.expect_err("past the burst"));
    let (code, headers, body) = http1(addr, "application/json").await;
    assert_eq!(code, 429);
    assert_eq!(header(&headers, "retry-after"), Some("10"));
    assert_eq!(header(&headers, "ratelimit-limit"), Some("3"));
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["violated-policies"][0], "@health/standard");
}

/// `grpc-message` is percent-encoded (a `%` as `%25`, UTF-8 bytes as
/// `%XX`), and tonic's decoder gives back the text.
#[tokio::test]
async fn the_grpc_message_is_percent_encoded() {
    let config = PER_IP
        .replace("default_profile = \"standard\"", "default_profile = \"caf\u{e9} 100%\"")
        .replace("[profiles.standard]", "[profiles.\"caf\u{e9} 100%\"]");
    let addr = serve_config(&config).await;
    let mut client = client(addr).await;
    for _ in 0..3 {
        client.check(check()).await.expect("within the burst");
    }
    let status = client.check(check()).await.expect_err("past the burst");
    retry(&status);
    // The policy name is itself percent-encoded (a structured-field String);
    // the gRPC message carries that text, which tonic decodes back.
    assert_eq!(
        status.message(),
        "rate limit @health/caf%C3%A9 100%25 exceeded; retry in 10 s"
    );
    let (_, headers, _) = http1(addr, "application/grpc").await;
    assert_eq!(
        header(&headers, "grpc-message"),
        Some("rate limit @health/caf%25C3%25A9 100%2525 exceeded; retry in 10 s")
    );
}

#[ratelimit::rate_limit(key = route, resolve = [default], name = "grpc.handler")]
async fn limited_handler() -> &'static str {
    "served"
}

/// A `#[rate_limit]` axum handler that a gRPC call reaches (a router
/// mixing both) refuses it the gRPC way too.
#[tokio::test]
async fn an_attribute_route_refuses_grpc_calls_the_grpc_way() {
    use tower::ServiceExt;
    let rate_limit = RateLimit::builder(Config::from_toml_str(DAILY).unwrap())
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
    let app = axum::Router::new()
        .route("/pkg.Service/Method", axum::routing::post(limited_handler))
        .with_state(rate_limit);
    let call = |content_type: &'static str| {
        http::Request::post("/pkg.Service/Method")
            .header("content-type", content_type)
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let served = app.clone().oneshot(call("application/grpc")).await.unwrap();
    assert_eq!(served.status(), 200);
    assert!(!served.headers().contains_key("grpc-status"));
    let refused = app.clone().oneshot(call("application/grpc+proto")).await.unwrap();
    assert_eq!(refused.status(), 200);
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert_eq!(refused.headers()["retry-after"], "86400");
    assert_eq!(refused.headers()["ratelimit-remaining"], "0");
    let message = refused.headers()["grpc-message"].to_str().unwrap();
    assert_eq!(message, "rate limit grpc.handler/daily exceeded; retry in 86400 s");
    let plain = app.oneshot(call("application/json")).await.unwrap();
    assert_eq!(plain.status(), 429);
}

/// The application's hook: a gRPC refusal of its own is sent (with
/// `retry-after` and the rate-limit metadata added); an HTTP answer to a
/// gRPC call is replaced by the standard gRPC refusal.
#[tokio::test]
async fn a_rejection_hook_can_answer_grpc_calls_itself() {
    fn hook(r: &Rejection<'_>) -> http::Response<String> {
        if r.is_grpc() && r.request().headers.contains_key("x-own") {
            return http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "14")
                .header("grpc-message", "try the other region")
                .body(String::new())
                .unwrap();
        }
        http::Response::builder()
            .status(429)
            .header("content-type", "text/plain")
            .body(format!("slow down, retry in {} s\n", r.retry_after_secs()))
            .unwrap()
    }
    let config = Config::from_toml_str(PER_IP).unwrap();
    let rate_limit = RateLimit::builder(config)
        .routes_in(module_path!())
        .rejection(hook)
        .build()
        .await
        .unwrap();
    let addr = serve(&rate_limit).await;
    let mut client = client(addr).await;
    for _ in 0..3 {
        client.check(check()).await.expect("within the burst");
    }
    // The hook's text 429 cannot reach a gRPC client: the standard refusal.
    let status = client.check(check()).await.expect_err("past the burst");
    assert_eq!(retry(&status).0, 10);
    // The hook's own gRPC refusal.
    let mut own = check();
    own.metadata_mut().insert("x-own", "1".parse().unwrap());
    let status = client.check(own).await.expect_err("past the burst");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "try the other region");
    assert_eq!(metadata(status.metadata(), "retry-after"), "10");
    assert_eq!(metadata(status.metadata(), "ratelimit-remaining"), "0");
    // HTTP clients get the hook's answer.
    let (code, headers, body) = http1(addr, "application/json").await;
    assert_eq!(code, 429);
    assert_eq!(header(&headers, "content-type"), Some("text/plain"));
    assert_eq!(body, "slow down, retry in 10 s\n");
}

/// Only a `POST` is a gRPC call: a `GET` or `HEAD` claiming the type gets the
/// HTTP 429 (answered `200` with an empty body, it would be a cacheable
/// blank page a client could plant in a shared cache for everyone), and a
/// gRPC refusal tells caches not to store it.
#[tokio::test]
async fn only_a_post_is_refused_the_grpc_way_and_never_cached() {
    use tower::ServiceExt;
    let rate_limit = RateLimit::builder(Config::from_toml_str(DAILY).unwrap())
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
    let app = axum::Router::new()
        .route(
            "/pkg.Service/Method",
            axum::routing::get(limited_handler).post(limited_handler),
        )
        .with_state(rate_limit);
    let call = |method: http::Method| {
        http::Request::builder()
            .method(method)
            .uri("/pkg.Service/Method")
            .header("content-type", "application/grpc")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let served = app.clone().oneshot(call(http::Method::POST)).await.unwrap();
    assert_eq!(served.status(), 200);
    assert!(!served.headers().contains_key("grpc-status"));
    for method in [http::Method::GET, http::Method::HEAD] {
        let refused = app.clone().oneshot(call(method.clone())).await.unwrap();
        assert_eq!(refused.status(), 429, "{method}");
        assert!(!refused.headers().contains_key("grpc-status"), "{method}");
    }
    let refused = app.oneshot(call(http::Method::POST)).await.unwrap();
    assert_eq!(refused.status(), 200);
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert_eq!(refused.headers()["cache-control"], "no-store");
}

/// A hook's gRPC refusal is made well-formed: HTTP 200 whatever status it
/// set, no body after the headers that carry `grpc-status`, and details
/// that say the hook's code and message (not the default ones it started
/// from), with the wait still in them.
#[tokio::test]
async fn a_hooks_grpc_refusal_is_sent_trailers_only_with_matching_details() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    fn hook(r: &Rejection<'_>) -> http::Response<String> {
        let mut own = r.grpc_response().map(|_| "a body a gRPC client cannot read".to_owned());
        *own.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
        own.headers_mut()
            .insert("grpc-status", http::HeaderValue::from_static("14"));
        own.headers_mut().insert(
            "grpc-message",
            http::HeaderValue::from_static("try%20the%20other%20region"),
        );
        own
    }
    let config = Config::from_toml_str(DAILY).unwrap();
    let rate_limit = RateLimit::builder(config)
        .routes_in(module_path!())
        .rejection(hook)
        .build()
        .await
        .unwrap();
    let app = axum::Router::new()
        .route("/pkg.Service/Method", axum::routing::post(|| async { "served" }))
        .layer(rate_limit.layer());
    let call = || {
        http::Request::post("/pkg.Service/Method")
            .header("content-type", "application/grpc")
            .extension(ratelimit::key::PeerAddr("192.0.2.1:1".parse().unwrap()))
            .body(axum::body::Body::empty())
            .unwrap()
    };
    assert_eq!(app.clone().oneshot(call()).await.unwrap().status(), 200);
    let refused = app.oneshot(call()).await.unwrap();
    assert_eq!(
        refused.status(),
        200,
        "Trailers-Only: gRPC clients read an HTTP error as UNAVAILABLE"
    );
    let status = Status::from_header_map(refused.headers()).expect("a gRPC status in the headers");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "try the other region");
    let details = status.details();
    let text = String::from_utf8_lossy(details);
    assert!(
        text.contains("try the other region"),
        "the details say the hook's message"
    );
    assert!(!text.contains("exceeded"), "not the default message: {text}");
    let info = status.get_details_retry_info().expect("RetryInfo kept");
    let delay = info.retry_delay.expect("a delay");
    assert!(
        delay > Duration::from_secs(86_399) && delay <= Duration::from_secs(86_400),
        "{delay:?}"
    );
    assert!(
        refused.into_body().collect().await.unwrap().to_bytes().is_empty(),
        "no body"
    );
}

/// At most one call of a client in flight.
const ONE_IN_FLIGHT: &str = r#"
default_profile = "one"

[profiles.one]
rate = "60/min"
burst = 10
concurrency = 1

[headers]
style = "both"

[[rules]]
name = "health"
path = "/grpc.health.v1.Health/{*rest}"
key = "ip"
resolve = ["default"]
"#;

/// A streaming call (`Watch` stays open) holds the client's one permit
/// while it streams: a second call is RESOURCE_EXHAUSTED, with RetryInfo
/// and `retry-after: 1`, and once the stream is dropped the next call is
/// served.
#[tokio::test]
async fn a_streaming_call_holds_its_permit_until_the_stream_ends() {
    let addr = serve_config(ONE_IN_FLIGHT).await;
    let mut c = client(addr).await;
    let watch = c.watch(check()).await.expect("the first call is served");
    let mut stream = watch.into_inner();
    assert!(stream.message().await.unwrap().is_some(), "the watch streams");
    let refused = c.check(check()).await.unwrap_err();
    assert_eq!(retry(&refused).0, 1);
    assert!(refused.message().contains("in flight"), "{}", refused.message());
    // Another client is not affected.
    let mut other = client_from(addr, Some("127.0.0.2".parse().unwrap())).await;
    assert!(other.check(check()).await.is_ok());
    drop(stream);
    // The server sees the stream reset on its next poll: retry a moment.
    let mut served = false;
    for _ in 0..50 {
        if c.check(check()).await.is_ok() {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "the dropped stream gave its permit back");
}

/// A gRPC-shaped `[[rules]]` path that names none of the services the
/// server serves (the package left out) never matches a call: with the
/// services named on the builder, startup and reloads refuse it, saying
/// which path was meant (`tests/processes/grpc_example.rs` reads the
/// startup log of the rules in force).
#[tokio::test]
async fn a_grpc_rule_that_names_no_served_service_is_refused() {
    use tonic_health::pb::health_server::HealthServer;
    use tonic_health::server::HealthService;
    let rules = |path: &str| {
        format!(
            "[profiles.standard]\nrate = \"10/s\"\n[[rules]]\nname = \"check\"\npath = \"{path}\"\nkey = \"ip\"\n\
             resolve = [\"default\"]\n[[rules]]\nname = \"rest\"\npath = \"/api/{{id}}\"\nkey = \"ip\"\n\
             resolve = [\"default\"]\n"
        )
    };
    let build = |path: &str| {
        RateLimit::builder(Config::from_toml_str(&rules(path)).unwrap())
            .routes_in(module_path!())
            .grpc_service::<HealthServer<HealthService>>()
            .build()
    };
    let refused = build("/Health/Check").await.unwrap_err().to_string();
    assert!(
        refused.contains("path \"/Health/Check\" names the gRPC service \"Health\", which this server does not serve"),
        "{refused}"
    );
    assert!(
        refused.contains("did you mean \"/grpc.health.v1.Health/Check\"?"),
        "{refused}"
    );
    // The served service (the REST rule beside it is not gRPC-shaped).
    let rl = build("/grpc.health.v1.Health/Check").await.unwrap();
    // A reload that brings the mistake back is refused.
    let reload = rl
        .reload(Config::from_toml_str(&rules("/Health/Watch")).unwrap())
        .unwrap_err()
        .to_string();
    assert!(reload.contains("the running configuration stays"), "{reload}");
    // Without the services named, nothing is known to check against.
    RateLimit::builder(Config::from_toml_str(&rules("/Health/Check")).unwrap())
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
}
