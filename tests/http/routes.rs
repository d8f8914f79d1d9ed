//! `#[rate_limit]` and the config-driven layer through real axum routers:
//! exact header values under a manual clock, 429s, JWT tiers and forged
//! tokens, shadow mode, the missing-limiter error, and an end-to-end run
//! over TCP.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::jwt::JwtVerifier;
use ratelimit::key::PeerAddr;
use ratelimit::{rate_limit, ManualClock};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::support::sf;

/// These tests serve routes on purpose beyond what each configuration can
/// (a cost above every burst, a profile some configurations lack), to see
/// what a request on them gets: startup checks no attribute route here.
const UNCHECKED: &str = "none";

const SECRET: &[u8] = b"http-test-secret-of-reasonable-length";

/// One request per second sustained, 3 at once.
const CONFIG: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "60/min"
burst = 3

[profiles.premium]
rate = "600/min"
burst = 10

[jwt]
tier_claim = "ratelimit_tier"
max_rate = "6000/min"
max_burst = 100
"#;

#[rate_limit(key = ip, resolve = [default], name = "public", layer)]
async fn public() -> &'static str {
    "public"
}

#[rate_limit(key = jwt_claim("sub"), resolve = [jwt, profile("standard"), default], name = "me", layer)]
async fn me() -> &'static str {
    "me"
}

#[rate_limit(key = ip, resolve = [default], name = "shadowed", shadow, layer)]
async fn shadowed() -> &'static str {
    "shadowed"
}

#[rate_limit(key = ip, resolve = [default], name = "heavy", cost = 2, layer)]
async fn heavy() -> &'static str {
    "heavy"
}

#[rate_limit(key = header("x-api-key"), resolve = [default], name = "keyed", layer)]
async fn keyed() -> &'static str {
    "keyed"
}

/// A cost above every burst the chain can name (the standard profile's 3).
#[rate_limit(key = ip, resolve = [default], name = "impossible", cost = 6, layer)]
async fn impossible() -> &'static str {
    "impossible"
}

async fn plain() -> &'static str {
    "plain"
}

fn router() -> Router {
    Router::new()
        .route("/public", get(public))
        .route("/me", get(me))
        .route("/shadowed", get(shadowed))
        .route("/heavy", get(heavy))
        .route("/keyed", get(keyed))
        .route("/impossible", get(impossible))
        .route("/plain", get(plain))
}

async fn runtime(toml: &str, clock: &ManualClock) -> RateLimit {
    // Metric handles bind to the recorder present at their first use:
    // install it before any runtime serves a request.
    recorder();
    RateLimit::builder(Config::from_toml_str(toml).unwrap())
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .jwt_verifier(JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap())
        .build()
        .await
        .unwrap()
}

fn request(path: &str, peer: &str) -> Request<Body> {
    request_as(http::Method::GET, path, peer)
}

fn request_as(method: http::Method, path: &str, peer: &str) -> Request<Body> {
    let mut r = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    r
}

fn with_token(mut r: Request<Body>, token: &str) -> Request<Body> {
    r.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

fn token(claims: &Value, secret: &[u8]) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

async fn send<S>(app: &S, r: Request<Body>) -> Response<Body>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = std::convert::Infallible> + Clone,
{
    app.clone().oneshot(r).await.unwrap()
}

fn header<B>(r: &Response<B>, name: &str) -> Option<String> {
    r.headers().get(name).map(|v| v.to_str().unwrap().to_owned())
}

/// (status, limit, remaining, reset, retry-after)
fn triple<B>(r: &Response<B>) -> (u16, String, String, String, Option<String>) {
    (
        r.status().as_u16(),
        header(r, "ratelimit-limit").unwrap_or_default(),
        header(r, "ratelimit-remaining").unwrap_or_default(),
        header(r, "ratelimit-reset").unwrap_or_default(),
        header(r, "retry-after"),
    )
}

fn t(
    status: u16,
    limit: &str,
    remaining: &str,
    reset: &str,
    retry: Option<&str>,
) -> (u16, String, String, String, Option<String>) {
    (
        status,
        limit.into(),
        remaining.into(),
        reset.into(),
        retry.map(Into::into),
    )
}

#[tokio::test]
async fn headers_on_allowed_and_rejected_responses_have_exact_values() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let peer = "192.0.2.1:5000";

    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(triple(&send(&app, request("/public", peer)).await));
    }
    assert_eq!(
        seen,
        vec![
            t(200, "3", "2", "1", None),
            t(200, "3", "1", "2", None),
            t(200, "3", "0", "3", None),
            t(429, "3", "0", "3", Some("1")),
        ]
    );
    // 400 ms later: still limited, Retry-After rounds 600 ms up to 1 s.
    clock.advance(Duration::from_millis(400));
    let r = send(&app, request("/public", peer)).await;
    assert_eq!(triple(&r), t(429, "3", "0", "3", Some("1")));
    // After the emission interval, one more conforms.
    clock.advance(Duration::from_millis(600));
    assert_eq!(
        triple(&send(&app, request("/public", peer)).await),
        t(200, "3", "0", "3", None)
    );
    // Another client is untouched.
    assert_eq!(
        triple(&send(&app, request("/public", "192.0.2.2:5000")).await),
        t(200, "3", "2", "1", None)
    );
}

#[tokio::test]
async fn rejection_is_a_problem_json_429_and_the_handler_never_runs() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    for _ in 0..3 {
        send(&app, request("/public", "192.0.2.3:1")).await;
    }
    let r = send(&app, request("/public", "192.0.2.3:1")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "content-type").as_deref(), Some("application/problem+json"));
    let body: Value = serde_json::from_slice(&r.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["title"], "Quota Exceeded");
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["violated-policies"], json!(["public/standard"]));
    assert_eq!(body["retry_after"], 1);
}

#[tokio::test]
async fn cost_and_long_waits_round_retry_after_up() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    // cost 2 of burst 3: one admitted, then 1 unit left, not enough.
    let a = send(&app, request("/heavy", "192.0.2.4:1")).await;
    assert_eq!(triple(&a), t(200, "3", "1", "2", None));
    let b = send(&app, request("/heavy", "192.0.2.4:1")).await;
    assert_eq!(triple(&b), t(429, "3", "1", "2", Some("1")));
    clock.advance(Duration::from_millis(1));
    let c = send(&app, request("/heavy", "192.0.2.4:1")).await;
    // 999 ms to go: whole seconds, rounded up.
    assert_eq!(header(&c, "retry-after").as_deref(), Some("1"));
    // At 1 s the second conforms; a third at once must wait 2 s, and 0.6 s
    // later still 1.4 s: rounded up to 2.
    clock.advance(Duration::from_millis(999));
    assert_eq!(send(&app, request("/heavy", "192.0.2.4:1")).await.status(), 200);
    let d = send(&app, request("/heavy", "192.0.2.4:1")).await;
    assert_eq!(header(&d, "retry-after").as_deref(), Some("2"));
    clock.advance(Duration::from_millis(600));
    let e = send(&app, request("/heavy", "192.0.2.4:1")).await;
    assert_eq!(header(&e, "retry-after").as_deref(), Some("2"));
}

#[tokio::test]
async fn a_jwt_tier_raises_the_limit_and_forged_tokens_get_the_anonymous_one() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let exp = get_current_timestamp() + 600;
    let premium = token(
        &json!({"sub": "alice", "exp": exp, "ratelimit_tier": "premium"}),
        SECRET,
    );
    let plain = token(&json!({"sub": "bob", "exp": exp}), SECRET);
    let forged = token(
        &json!({"sub": "mallory", "exp": exp, "ratelimit_tier": "premium"}),
        b"not-the-secret-at-all-nope",
    );
    let forged2 = token(
        &json!({"sub": "mallory2", "exp": exp, "ratelimit_tier": "premium"}),
        b"another-wrong-secret-here",
    );
    let expired = token(
        &json!({"sub": "eve", "exp": get_current_timestamp() - 3600, "ratelimit_tier": "premium"}),
        SECRET,
    );

    let r = send(&app, with_token(request("/me", "192.0.2.10:1"), &premium)).await;
    assert_eq!(triple(&r), t(200, "10", "9", "1", None));
    // Same user from another address: same bucket (keyed by `sub`).
    let r = send(&app, with_token(request("/me", "198.51.100.1:1"), &premium)).await;
    assert_eq!(header(&r, "ratelimit-remaining").as_deref(), Some("8"));

    let r = send(&app, with_token(request("/me", "192.0.2.10:1"), &plain)).await;
    assert_eq!(
        triple(&r),
        t(200, "3", "2", "1", None),
        "no tier: profile(\"standard\")"
    );

    // Forged and expired tokens claim premium but are anonymous: keyed by
    // address, standard limit, one shared bucket however many subs they claim.
    let peer = "203.0.113.9:1";
    let mut statuses = Vec::new();
    for tok in [&forged, &forged2, &expired, &forged] {
        let r = send(&app, with_token(request("/me", peer), tok)).await;
        assert_eq!(header(&r, "ratelimit-limit").as_deref(), Some("3"));
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, vec![200, 200, 200, 429]);
}

#[tokio::test]
async fn verified_claims_reach_the_handler() {
    #[rate_limit(key = jwt_claim("sub"), resolve = [jwt, default], name = "whoami", layer)]
    async fn whoami(claims: Option<axum::Extension<ratelimit::claims::VerifiedClaims>>) -> String {
        claims
            .and_then(|c| c.get_text("sub").map(|s| s.into_owned()))
            .unwrap_or_default()
    }
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = Router::new()
        .route("/whoami", get(whoami))
        .layer(rl.layer())
        .into_service();
    let tok = token(&json!({"sub": "carol", "exp": get_current_timestamp() + 60}), SECRET);
    let r = send(&app, with_token(request("/whoami", "192.0.2.20:1"), &tok)).await;
    assert_eq!(&r.into_body().collect().await.unwrap().to_bytes()[..], b"carol");
}

#[tokio::test]
async fn shadow_routes_decide_and_count_but_never_reject() {
    let snapshotter = recorder();
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(triple(&send(&app, request("/shadowed", "192.0.2.30:1")).await));
    }
    assert_eq!(
        seen,
        vec![
            t(200, "3", "2", "1", None),
            t(200, "3", "1", "2", None),
            t(200, "3", "0", "3", None),
            t(200, "3", "0", "3", None),
            t(200, "3", "0", "3", None),
        ]
    );
    // Each decision counted once: 3 allowed, 2 served in shadow mode.
    assert_eq!(
        counter(snapshotter, "ratelimit_decisions_total/shadow_rejected", "shadowed"),
        2
    );
    assert_eq!(counter(snapshotter, "ratelimit_decisions_total/allowed", "shadowed"), 3);
    assert_eq!(
        counter(snapshotter, "ratelimit_decisions_total/rejected", "shadowed"),
        0
    );
}

#[tokio::test]
async fn config_route_overrides_apply_to_attribute_routes() {
    let toml = format!("{CONFIG}\n[routes.public]\nshadow = true\n[routes.heavy]\ncost = 3\nshadow = false\n");
    let clock = ManualClock::new();
    let rl = runtime(&toml, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    for _ in 0..5 {
        assert_eq!(send(&app, request("/public", "192.0.2.40:1")).await.status(), 200);
    }
    let r = send(&app, request("/heavy", "192.0.2.40:1")).await;
    assert_eq!(
        header(&r, "ratelimit-remaining").as_deref(),
        Some("0"),
        "cost 3 from config"
    );
    // A reload takes effect at once and keeps state.
    rl.reload(Config::from_toml_str(CONFIG).unwrap()).unwrap();
    assert_eq!(send(&app, request("/public", "192.0.2.40:1")).await.status(), 429);
}

#[tokio::test]
async fn a_route_without_a_limiter_answers_500_not_unlimited() {
    let snapshotter = recorder();
    let app = router().into_service();
    for _ in 0..3 {
        let r = send(&app, request("/public", "192.0.2.50:1")).await;
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(header(&r, "content-type").as_deref(), Some("application/problem+json"));
        let body: Value = serde_json::from_slice(&r.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert!(body["detail"].as_str().unwrap().contains("\"public\""), "{body}");
    }
    assert!(counter(snapshotter, "ratelimit_missing_limiter_total", "public") >= 3);
    // The runtime as an extension works too.
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(axum::Extension(rl)).into_service();
    assert_eq!(send(&app, request("/public", "192.0.2.50:1")).await.status(), 200);
}

const RULES: &str = r#"
[[rules]]
name = "public"
path = "/plain"
methods = ["GET"]
key = "ip"
resolve = ["default"]
"#;

/// A layer reads the configuration for `[[rules]]` only while it has some
/// (a flag set with it): a reload that adds rules limits from the next
/// request, and one that drops them frees the routes again.
#[tokio::test]
async fn a_reload_that_adds_rules_limits_at_once_and_one_that_drops_them_frees() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let unlimited = |r: &Response<Body>| (r.status(), header(r, "ratelimit-limit"));
    for _ in 0..5 {
        let r = send(&app, request("/plain", "192.0.2.62:1")).await;
        assert_eq!(unlimited(&r), (StatusCode::OK, None), "no rules yet");
    }
    rl.reload(Config::from_toml_str(&format!("{CONFIG}{RULES}")).unwrap())
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(send(&app, request("/plain", "192.0.2.62:1")).await.status().as_u16());
    }
    assert_eq!(
        seen,
        [200, 200, 200, 429],
        "the rule's burst of 3, from the first request after the reload"
    );
    rl.reload(Config::from_toml_str(CONFIG).unwrap()).unwrap();
    let r = send(&app, request("/plain", "192.0.2.62:1")).await;
    assert_eq!(unlimited(&r), (StatusCode::OK, None), "the rules dropped");
}

#[tokio::test]
async fn the_config_layer_gives_the_same_results_as_the_attribute() {
    let clock_a = ManualClock::new();
    let clock_b = ManualClock::new();
    let attr = router().layer(runtime(CONFIG, &clock_a).await.layer()).into_service();
    let rules = router()
        .layer(runtime(&format!("{CONFIG}{RULES}"), &clock_b).await.layer())
        .into_service();
    for step in [0u64, 0, 0, 0, 300, 700, 0, 2500, 0, 0, 0] {
        clock_a.advance(Duration::from_millis(step));
        clock_b.advance(Duration::from_millis(step));
        let a = send(&attr, request("/public", "192.0.2.60:1")).await;
        let b = send(&rules, request("/plain", "192.0.2.60:1")).await;
        assert_eq!(triple(&a), triple(&b));
        let body_a = a.into_body().collect().await.unwrap().to_bytes();
        let body_b = b.into_body().collect().await.unwrap().to_bytes();
        if body_a != b"public"[..] {
            // The same body, but for the policy's name: a rule's is marked
            // `@` (a rule and an attribute may share a name, not a bucket).
            let body_b = String::from_utf8_lossy(&body_b).replace("\"@public/", "\"public/");
            assert_eq!(String::from_utf8_lossy(&body_a), body_b, "same rejection body");
        }
    }
    // Other methods and paths are not matched by the rule.
    let clock = ManualClock::new();
    let rl = runtime(&format!("{CONFIG}{RULES}"), &clock).await;
    let app = Router::new()
        .route("/plain", get(plain).post(plain))
        .route("/other", get(plain))
        .layer(rl.layer())
        .into_service();
    let post = request_as(http::Method::POST, "/plain", "192.0.2.61:1");
    assert_eq!(header(&send(&app, post).await, "ratelimit-limit"), None);
    // A GET rule covers HEAD, which axum answers with the GET handler.
    let head = request_as(http::Method::HEAD, "/plain", "192.0.2.61:1");
    assert_eq!(header(&send(&app, head).await, "ratelimit-limit").as_deref(), Some("3"));
    assert_eq!(
        header(&send(&app, request("/other", "192.0.2.61:1")).await, "ratelimit-limit"),
        None
    );
}

#[tokio::test]
async fn the_config_layer_limits_any_tower_service() {
    let clock = ManualClock::new();
    let rl = runtime(&format!("{CONFIG}{RULES}"), &clock).await;
    let svc = tower::ServiceBuilder::new()
        .layer(rl.layer())
        .service(tower::service_fn(|_r: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(bytes::Bytes::from_static(
                b"proxied",
            ))))
        }));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = svc.clone().oneshot(request("/plain", "192.0.2.70:1")).await.unwrap();
        statuses.push((r.status().as_u16(), header(&r, "ratelimit-remaining").unwrap()));
    }
    assert_eq!(
        statuses,
        vec![
            (200, "2".into()),
            (200, "1".into()),
            (200, "0".into()),
            (429, "0".into())
        ]
    );
}

#[tokio::test]
async fn when_a_rule_and_the_attribute_both_apply_the_tighter_is_reported() {
    // The rule gives the route 10 at once (premium); the attribute 3.
    let rule = r#"
[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
resolve = ["profile:premium", "default"]
"#;
    let clock = ManualClock::new();
    let rl = runtime(&format!("{CONFIG}{rule}"), &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let r = send(&app, request("/public", "192.0.2.80:1")).await;
    assert_eq!(triple(&r), t(200, "3", "2", "1", None));
    let r = send(&app, request("/plain", "192.0.2.80:1")).await;
    assert_eq!(
        triple(&r),
        t(200, "10", "8", "1", None),
        "only the rule applies (second request)"
    );
}

#[tokio::test]
async fn a_tighter_rule_replaces_the_attribute_triple_and_joins_its_lists() {
    // The rule allows 2 at once, the attribute 3: the rule's numbers win the
    // draft-06 triple; the structured fields list both.
    let rule = r#"
[profiles.tight]
rate = "60/min"
burst = 2

[[rules]]
name = "public"
path = "/public"
key = "ip"
resolve = ["profile:tight", "default"]
"#;
    for style in ["draft-06", "structured"] {
        let clock = ManualClock::new();
        let toml = format!(
            "{CONFIG}{rule}
[headers]
style = \"{style}\"
"
        );
        let rl = runtime(&toml, &clock).await;
        let app = router().layer(rl.layer()).into_service();
        let r = send(&app, request("/public", "192.0.2.81:1")).await;
        if style == "draft-06" {
            assert_eq!(triple(&r), t(200, "2", "1", "1", None));
        } else {
            // The structured fields list both limits, each by its own name.
            assert_eq!(
                sf::limit_triples(&r),
                vec![
                    ("public/standard".into(), 2, Some(1)),
                    ("@public/tight".into(), 1, Some(1))
                ]
            );
            assert_eq!(
                sf::policy_triples(&r),
                vec![
                    ("public/standard".into(), 3, Some(3)),
                    ("@public/tight".into(), 2, Some(2))
                ]
            );
        }
        // Same name, different buckets: the rule's second request is its
        // last; the attribute's bucket still has 1 after its second.
        let r = send(&app, request("/public", "192.0.2.81:1")).await;
        assert_eq!(r.status(), 200);
        let r = send(&app, request("/public", "192.0.2.81:1")).await;
        assert_eq!(r.status(), 429, "the rule's burst of 2 is spent");
    }
}

#[tokio::test]
async fn forwarded_headers_count_only_from_trusted_proxies() {
    let toml = format!(
        "{CONFIG}
[ip]
trusted_proxies = [\"10.0.0.0/8\"]
"
    );
    let clock = ManualClock::new();
    let rl = runtime(&toml, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let via = |peer: &str, xff: &str| {
        let mut r = request("/public", peer);
        r.headers_mut().insert("x-forwarded-for", xff.parse().unwrap());
        r
    };
    // Through the trusted proxy, each forwarded client has its own bucket.
    for client in ["203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"] {
        let r = send(&app, via("10.1.1.1:1", client)).await;
        assert_eq!(header(&r, "ratelimit-remaining").as_deref(), Some("2"), "{client}");
    }
    // From an untrusted peer the header is ignored: one bucket, whatever it says.
    let mut statuses = Vec::new();
    for client in ["203.0.113.5", "203.0.113.6", "203.0.113.7", "203.0.113.8"] {
        statuses.push(send(&app, via("198.51.100.9:1", client)).await.status().as_u16());
    }
    assert_eq!(statuses, vec![200, 200, 200, 429]);
}

#[tokio::test]
async fn structured_fields_by_config() {
    let toml = format!("{CONFIG}\n[headers]\nstyle = \"both\"\n");
    let clock = ManualClock::new();
    let rl = runtime(&toml, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let r = send(&app, request("/public", "192.0.2.90:1")).await;
    assert_eq!(sf::policy_triples(&r), vec![("public/standard".into(), 3, Some(3))]);
    assert_eq!(sf::limit_triples(&r), vec![("public/standard".into(), 2, Some(1))]);
    assert_eq!(header(&r, "ratelimit-remaining").as_deref(), Some("2"));

    let toml = format!("{CONFIG}\n[headers]\nstyle = \"none\"\n");
    let rl = runtime(&toml, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    for _ in 0..3 {
        let r = send(&app, request("/public", "192.0.2.90:1")).await;
        assert_eq!(header(&r, "ratelimit-remaining"), None);
    }
    let r = send(&app, request("/public", "192.0.2.90:1")).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "retry-after").as_deref()),
        (429, Some("1"))
    );
}

#[tokio::test]
async fn header_keys_fall_back_to_the_address() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let keyed = |key: Option<&str>| {
        let mut r = request("/keyed", "192.0.2.100:1");
        if let Some(k) = key {
            r.headers_mut().insert("x-api-key", k.parse().unwrap());
        }
        r
    };
    for _ in 0..3 {
        assert_eq!(send(&app, keyed(Some("key-a"))).await.status(), 200);
    }
    assert_eq!(send(&app, keyed(Some("key-a"))).await.status(), 429);
    // Another key from the same address has its own bucket; no key: the address's.
    assert_eq!(send(&app, keyed(Some("key-b"))).await.status(), 200);
    assert_eq!(triple(&send(&app, keyed(None)).await), t(200, "3", "2", "1", None));
}

#[tokio::test]
async fn end_to_end_over_tcp() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .await
            .unwrap();
    });
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(raw_get(addr, "/public").await);
    }
    server.abort();
    for (i, a) in answers.iter().enumerate() {
        let status = if i < 3 { "HTTP/1.1 200" } else { "HTTP/1.1 429" };
        assert!(a.starts_with(status), "{a}");
        assert!(
            a.contains(&format!("ratelimit-remaining: {}\r\n", 2usize.saturating_sub(i))),
            "{a}"
        );
    }
    assert!(answers[3].contains("retry-after: 1\r\n"));
    assert!(answers[3].contains("application/problem+json"));
}

async fn raw_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

// ---- metrics -------------------------------------------------------------

fn recorder() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: OnceLock<metrics_util::debugging::Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

/// A counter's total so far (`name/decision` for a series with a
/// `decision` label). Snapshots drain the recorder, and tests run in
/// parallel, so every snapshot is folded into one shared tally.
fn counter(s: &metrics_util::debugging::Snapshotter, name: &str, route: &str) -> u64 {
    use metrics_util::debugging::DebugValue;
    use std::collections::HashMap;
    use std::sync::Mutex;
    static TALLY: Mutex<Option<HashMap<(String, String), u64>>> = Mutex::new(None);
    let mut tally = TALLY.lock().unwrap();
    let tally = tally.get_or_insert_with(HashMap::new);
    for (k, _, _, v) in s.snapshot().into_vec() {
        if let DebugValue::Counter(n) = v {
            let name = match k.key().labels().find(|l| l.key() == "decision") {
                Some(d) => format!("{}/{}", k.key().name(), d.value()),
                None => k.key().name().to_owned(),
            };
            for l in k.key().labels().filter(|l| l.key() == "route") {
                *tally.entry((name.clone(), l.value().to_owned())).or_default() += n;
            }
        }
    }
    tally.get(&(name.to_owned(), route.to_owned())).copied().unwrap_or(0)
}

/// A namespaced claim (a URL, as hosted identity providers require for
/// custom claims) keys a `[[rules]]` entry by its whole name: two tenants
/// behind one address get a bucket each, and the same tenant is limited.
#[tokio::test]
async fn a_namespaced_claim_keys_a_rule() {
    let clock = ManualClock::new();
    let toml = format!(
        "{CONFIG}\n[[rules]]\nname = \"tenants\"\npath = \"/plain\"\nkey = \"jwt_claim:https://example.com/tenant\"\n\
         resolve = [\"default\"]\n"
    );
    let rl = runtime(&toml, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let exp = get_current_timestamp() + 600;
    let as_tenant = |t: &str| {
        with_token(
            request("/plain", "192.0.2.1:1"),
            &token(
                &json!({"sub": "u", "https://example.com/tenant": t, "exp": exp}),
                SECRET,
            ),
        )
    };
    for _ in 0..3 {
        assert_eq!(send(&app, as_tenant("acme")).await.status(), StatusCode::OK);
    }
    assert_eq!(
        send(&app, as_tenant("acme")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another tenant, same address: its own bucket (keyed by address, both
    // would share the one just spent).
    assert_eq!(send(&app, as_tenant("globex")).await.status(), StatusCode::OK);
}

/// A cost above the burst never conforms: the request is refused with the
/// longest `Retry-After` there is (a day), not a panic (the seconds of
/// `Duration::MAX` rounded up overflowed) and not `Retry-After: 1`.
#[tokio::test]
async fn a_cost_above_the_burst_is_refused_with_the_longest_wait() {
    let clock = ManualClock::new();
    let rl = runtime(CONFIG, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let r = send(&app, request("/impossible", "192.0.2.8:1")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "retry-after").as_deref(), Some("86400"));
}

/// A rule matches the paths the router dispatches to its route: axum sends
/// `/users/.` and `/users/..` to `/users/{id}` (with `id` = `.`), so the
/// rule must limit them too (it skipped `.` segments, and `/users/.` was
/// never limited); `OPTIONS *` reaches the fallback, which a `/{*rest}`
/// rule must limit.
#[tokio::test]
async fn a_rule_limits_every_path_the_router_dispatches_to_it() {
    async fn user(axum::extract::Path(id): axum::extract::Path<String>) -> String {
        id
    }
    let rule = |path: &str| {
        format!(
            "[profiles.standard]\nrate = \"1/min\"\nburst = 1\n\
             [[rules]]\nname = \"r\"\npath = \"{path}\"\nkey = \"ip\"\nresolve = [\"default\"]\n"
        )
    };
    let clock = ManualClock::new();
    let rl = runtime(&rule("/users/{id}"), &clock).await;
    let app = Router::new()
        .route("/users/{id}", get(user))
        .layer(rl.layer())
        .into_service();
    for (i, path) in ["/users/.", "/users/..", "/users/%2e", "/users/a;b"]
        .into_iter()
        .enumerate()
    {
        let peer = format!("192.0.2.{}:1", 20 + i);
        let first = send(&app, request(path, &peer)).await;
        assert_eq!(first.status(), StatusCode::OK, "{path}");
        let second = send(&app, request(path, &peer)).await;
        assert_eq!(
            second.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{path} escaped the rule"
        );
    }

    // An empty segment is a parameter's value for the router: the rule
    // takes it so too.
    let rl = runtime(&rule("/users/{id}/posts"), &clock).await;
    let app = Router::new()
        .route("/users/{id}/posts", get(user))
        .layer(rl.layer())
        .into_service();
    assert_eq!(
        send(&app, request("/users//posts", "192.0.2.31:1")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&app, request("/users//posts", "192.0.2.31:1")).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "/users//posts escaped the rule"
    );

    let rl = runtime(&rule("/{*rest}"), &clock).await;
    let app = Router::new()
        .fallback(|| async { "fallback" })
        .layer(rl.layer())
        .into_service();
    let options = |peer: &str| {
        let mut r = Request::builder()
            .method(http::Method::OPTIONS)
            .uri("*")
            .body(Body::empty())
            .unwrap();
        r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
        r
    };
    assert_eq!(send(&app, options("192.0.2.30:1")).await.status(), StatusCode::OK);
    assert_eq!(
        send(&app, options("192.0.2.30:1")).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "OPTIONS * escaped the catch-all rule"
    );
}

/// A verified token without the rule's key claim is keyed by address, but
/// it is still verified: its tier applies, and the handler gets its claims.
/// (Only an unverifiable token is anonymous.)
#[tokio::test]
async fn a_verified_token_without_the_key_claim_keeps_its_tier() {
    let clock = ManualClock::new();
    let toml = format!(
        "{CONFIG}\n[[rules]]\nname = \"orgs\"\npath = \"/plain\"\nkey = \"jwt_claim:org.id\"\n\
         resolve = [\"jwt\", \"default\"]\n"
    );
    let rl = runtime(&toml, &clock).await;
    let app = router().layer(rl.layer()).into_service();
    let exp = get_current_timestamp() + 600;
    let premium_without_org = token(&json!({"sub": "u", "ratelimit_tier": "premium", "exp": exp}), SECRET);
    let r = send(
        &app,
        with_token(request("/plain", "192.0.2.40:1"), &premium_without_org),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    // The premium profile's burst (10), not the anonymous standard one (3).
    assert_eq!(header(&r, "ratelimit-limit").as_deref(), Some("10"));
}

/// Records the client ids the runtime asks the limit service about.
#[derive(Clone, Default)]
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<u64>>>);

impl Recorder {
    fn ids(&self) -> Vec<u64> {
        self.0.lock().unwrap().clone()
    }
}

impl ratelimit::service::LimitService for Recorder {
    async fn lookup(
        &self,
        key: u64,
    ) -> Result<Option<ratelimit::service::ServiceAnswer>, ratelimit::service::ServiceError> {
        self.0.lock().unwrap().push(key);
        Ok(None)
    }
}

/// A token saying `"sub": "42"` and one saying `"sub": 42` are one client
/// everywhere: one local cell (they had two, so a client holding both
/// spellings got two buckets), and one limit-service id (as before, the
/// digits as text: `docs/http.md`'s id fields). `"042"` is another client.
/// The fleet id is checked in `tests/fleet/gate.rs`.
#[tokio::test]
async fn a_claim_spelled_as_a_string_or_a_number_is_one_client_everywhere() {
    const ID_SECRET: &[u8] = b"routes-test-service-id-secret-of-32+";
    let toml = r#"
default_profile = "one"

[profiles.one]
rate = "1/min"
burst = 1

[service]
id_secret_env = "UNUSED_ROUTES_ID_SECRET"

[[rules]]
name = "by-sub"
path = "/plain"
key = "jwt_claim:sub"
resolve = ["service", "default"]
"#;
    let mut config = Config::from_toml_str(toml).unwrap();
    config.service.as_mut().unwrap().id_secret = Some(ratelimit::config::ServiceSecret(ID_SECRET.to_vec()));
    let service = Recorder::default();
    let rl = RateLimit::builder(config)
        .routes_in(UNCHECKED)
        .clock(ManualClock::new())
        .jwt_verifier(JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap())
        .limit_service(service.clone())
        .build()
        .await
        .unwrap();
    let app = router().layer(rl.layer()).into_service();
    let exp = get_current_timestamp() + 600;
    let as_sub = |sub: Value, peer: &str| {
        with_token(
            request("/plain", peer),
            &token(&json!({"sub": sub, "exp": exp}), SECRET),
        )
    };
    let ids = ratelimit::service::ServiceIdKey::new(ID_SECRET).unwrap();
    let id_of = |text: &str| ids.id_of_fields(&[b"claim:", b"sub", text.as_bytes()]);

    // Each from its own address: only the claim can join them.
    assert_eq!(
        send(&app, as_sub(json!("42"), "192.0.2.1:1")).await.status(),
        StatusCode::OK
    );
    let start = std::time::Instant::now();
    while service.ids().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "the service was never asked");
        tokio::task::yield_now().await;
    }
    assert_eq!(
        send(&app, as_sub(json!(42), "192.0.2.2:1")).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "sub 42 got a bucket of its own beside sub \"42\""
    );
    // Another client: its own bucket, and its own lookup, which (on this
    // single-threaded runtime) runs after any the request above started.
    assert_eq!(
        send(&app, as_sub(json!("042"), "192.0.2.3:1")).await.status(),
        StatusCode::OK
    );
    while !service.ids().contains(&id_of("042")) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the service was never asked about 042"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(
        service.ids(),
        [id_of("42"), id_of("042")],
        "one service id for \"42\" and 42"
    );
}
