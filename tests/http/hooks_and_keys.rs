//! What an attacker review of the adoption change found, kept as tests
//! (each failed before its fix): a hook's success status on a refusal, a
//! key type's `Default` that panicked once, a reload taking a `[service]` a
//! restart refuses, and a hook's `Retry-After` shorter than the wait.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::extract::FromRef;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use ratelimit::axum::{RateLimit, Rejection};
use ratelimit::config::Config;
use ratelimit::key::{write_address_id, ClientKey, KeyContext, KeySource, PeerAddr};
use ratelimit::service::{LimitService, ServiceAnswer, ServiceError};
use ratelimit::{rate_limit, ManualClock};
use tower::ServiceExt;

const CONFIG: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "60/min"
burst = 2
"#;

#[derive(Clone)]
struct AppState {
    rate_limit: RateLimit,
}

impl FromRef<AppState> for RateLimit {
    fn from_ref(s: &AppState) -> RateLimit {
        s.rate_limit.clone()
    }
}

fn request(path: &str, peer: &str) -> Request<Body> {
    let mut r = Request::get(path).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    r
}

async fn send(app: &Router, r: Request<Body>) -> Response<String> {
    let response = app.clone().oneshot(r).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Response::from_parts(parts, body)
}

async fn runtime(clock: &ManualClock) -> RateLimit {
    RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------
// 1. A rejection hook decides the status, and nothing checks it: the most
//    natural axum hook, `Json(...)`, turns every refusal into a 200 OK
//    (with `Retry-After` and `RateLimit-Remaining: 0` on a "success").
// ---------------------------------------------------------------------------

fn json_busy(r: &Rejection<'_>) -> http::Response<String> {
    // A body with no status set: `Response::new` is 200.
    http::Response::new(serde_json::json!({"error": "rate_limited", "retry_in": r.retry_after_secs()}).to_string())
}

#[rate_limit(key = ip, resolve = [default], reject = json_busy, name = "review.json")]
async fn json_route() -> &'static str {
    "served"
}

/// `reject = f` with `f` returning a JSON body and no status (200): the
/// refused request would be answered 200. Clients, retries,
/// load balancers' health logic and dashboards count it as a success.
#[tokio::test]
async fn a_refusal_shaped_by_a_json_hook_is_not_a_success() {
    let clock = ManualClock::new();
    let app = Router::new().route("/j", get(json_route)).with_state(AppState {
        rate_limit: runtime(&clock).await,
    });
    for _ in 0..2 {
        assert_eq!(send(&app, request("/j", "192.0.2.1:1")).await.status(), StatusCode::OK);
    }
    let refused = send(&app, request("/j", "192.0.2.1:1")).await;
    eprintln!(
        "refused request: status {} retry-after {:?} remaining {:?} body {}",
        refused.status(),
        refused.headers().get("retry-after"),
        refused.headers().get("ratelimit-remaining"),
        refused.body()
    );
    assert_ne!(refused.body(), "served", "the handler did not run");
    assert!(
        !refused.status().is_success(),
        "a refused request was answered {} (the hook's status is used as is)",
        refused.status()
    );
}

/// The builder's hook: `http::Response::new(body)` (as examples/adopt.rs
/// starts its own) is a 200 unless the status is set; forgetting that line
/// makes every refusal of the service a 200.
#[tokio::test]
async fn a_builder_hook_without_a_status_answers_200() {
    let clock = ManualClock::new();
    let rl = RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .rejection(|r: &Rejection<'_>| http::Response::new(format!("{{\"retry_in\":{}}}", r.retry_after_secs())))
        .build()
        .await
        .unwrap();
    let app = Router::new().route("/p", get(plain)).with_state(rl);
    for _ in 0..2 {
        send(&app, request("/p", "192.0.2.2:1")).await;
    }
    let refused = send(&app, request("/p", "192.0.2.2:1")).await;
    eprintln!("refused request: status {} body {}", refused.status(), refused.body());
    assert!(!refused.status().is_success(), "refusal answered {}", refused.status());
}

#[rate_limit(key = ip, resolve = [default], name = "review.plain")]
async fn plain() -> &'static str {
    "served"
}

// ---------------------------------------------------------------------------
// 2. `custom(Type)` makes the key once, in a `LazyLock`: a `Default` that
//    panics once (a config read, an env var missing at first) poisons the
//    route for the life of the process: every later request panics too.
// ---------------------------------------------------------------------------

static FAIL_ONCE: AtomicBool = AtomicBool::new(true);

struct FlakyKey;

impl Default for FlakyKey {
    fn default() -> Self {
        if FAIL_ONCE.swap(false, Ordering::SeqCst) {
            panic!("FlakyKey::default: transient failure");
        }
        FlakyKey
    }
}

impl KeySource for FlakyKey {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        cx.address()
    }
    fn write_id(&self, _cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn std::hash::Hasher) {
        write_address_id(key, h)
    }
}

#[rate_limit(key = custom(FlakyKey), resolve = [default], name = "review.flaky")]
async fn flaky() -> &'static str {
    "served"
}

/// The first request panics (the application's bug); the second one, with
/// `Default` now succeeding, panics as well: "LazyLock instance has
/// previously been poisoned". No request on the route is ever served again.
#[tokio::test]
async fn a_custom_key_whose_default_panicked_once_poisons_the_route() {
    let clock = ManualClock::new();
    let app = Router::new().route("/f", get(flaky)).with_state(runtime(&clock).await);
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request("/f", "192.0.2.3:1")).await.status() }
    })
    .await;
    assert!(first.is_err(), "the first request panics in Default");
    let second = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request("/f", "192.0.2.3:1")).await.status() }
    })
    .await;
    match &second {
        Err(e) => eprintln!("second request: {e}"),
        Ok(s) => eprintln!("second request: {s}"),
    }
    assert!(second.is_ok(), "every later request on the route panics too");
}

// ---------------------------------------------------------------------------
// 3. A reload accepts a `[service]` the startup refuses: with a builder
//    `limit_service`, a reload adding `url` (or dropping `[service]`)
//    returns Ok and is silently ignored; the next restart then fails.
// ---------------------------------------------------------------------------

struct Nobody;

impl LimitService for Nobody {
    async fn lookup(&self, _key: u64) -> Result<Option<ServiceAnswer>, ServiceError> {
        Ok(None)
    }
}

const SECRET: &[u8] = b"adoption-review-service-id-secret!";

fn with_service(url: Option<&str>) -> Config {
    let url = url.map_or(String::new(), |u| format!("url = {u:?}\n"));
    let mut config = Config::from_toml_str(&format!(
        "{CONFIG}\n[service]\n{url}id_secret_env = \"UNUSED_REVIEW\"\n"
    ))
    .unwrap();
    config.service.as_mut().unwrap().id_secret = Some(ratelimit::config::ServiceSecret(SECRET.to_vec()));
    config
}

#[tokio::test]
async fn a_reload_accepts_a_service_section_that_startup_refuses() {
    let rl = RateLimit::builder(with_service(None))
        .routes_in(module_path!())
        .limit_service(Nobody)
        .build()
        .await
        .unwrap();
    // What a restart with this file says:
    let at_start = RateLimit::builder(with_service(Some("http://127.0.0.1:9/limits")))
        .routes_in(module_path!())
        .limit_service(Nobody)
        .build()
        .await
        .unwrap_err();
    eprintln!("startup with the same file: {at_start}");
    let at_reload = rl.reload(with_service(Some("http://127.0.0.1:9/limits")));
    eprintln!("reload with the same file: {at_reload:?}");
    let dropped = rl.reload(Config::from_toml_str(CONFIG).unwrap());
    eprintln!("reload without [service]: {dropped:?}");
    assert!(
        at_reload.is_err() && dropped.is_err(),
        "a reload takes files a restart refuses (and ignores their [service])"
    );
}

/// A hook that tells clients to come back sooner than the limit allows
/// (`Retry-After: 0`) is overruled: the header says the real wait; one
/// that says longer is kept.
#[tokio::test]
async fn a_hooks_shorter_retry_after_is_raised_to_the_wait() {
    let clock = ManualClock::new();
    let rl = RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .rejection(|r: &Rejection<'_>| {
            let secs = if r.request().uri.path() == "/p" { "0" } else { "120" };
            let mut response = http::Response::new(String::new());
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            response.headers_mut().insert("retry-after", secs.parse().unwrap());
            response
        })
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/p", get(plain))
        .route("/q", get(plain))
        .with_state(rl);
    // `/p` and `/q` are one route (one handler): one bucket.
    for _ in 0..2 {
        send(&app, request("/p", "192.0.2.4:1")).await;
    }
    let refused = send(&app, request("/p", "192.0.2.5:1")).await;
    assert_eq!(refused.status(), StatusCode::OK, "another client has its own bucket");
    let refused = send(&app, request("/p", "192.0.2.4:1")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1", "raised from the hook's 0");
    let refused = send(&app, request("/q", "192.0.2.4:1")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.headers()["retry-after"],
        "120",
        "a longer one is the hook's to give"
    );
}
