//! Stacked limits through a real axum router: several `#[rate_limit]`
//! attributes on one handler, and `[[rules]]` entries that say `stack`, are
//! one decision. Admitted only if every limit admits; refused, no limit is
//! charged (checked by what the next requests get, and under concurrency by
//! exact counts). The `-06` triple reports the tightest limit, the
//! structured Lists every one, `Retry-After` the longest wait.

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::{rate_limit, ManualClock};
use serde_json::Value;
use tower::ServiceExt;

use crate::support::sf;

/// A burst limit per address and a daily quota per account.
const CONFIG: &str = r#"
default_profile = "burst"

[headers]
style = "both"

[profiles.burst]
rate = "10/s"
burst = 3

[profiles.daily]
rate = "5/d"
burst = 5
"#;

#[rate_limit(key = ip, resolve = [profile("burst"), default], name = "orders.ip")]
#[rate_limit(key = header("x-account"), resolve = [profile("daily"), default], name = "orders.account")]
async fn orders() -> &'static str {
    "orders"
}

/// Three stacked, the last a shadow limit (it never refuses, and its
/// refusal does not refuse the others).
#[rate_limit(key = ip, resolve = [profile("burst"), default], name = "s.ip")]
#[rate_limit(key = header("x-account"), resolve = [profile("daily"), default], name = "s.account")]
#[rate_limit(key = route, resolve = [profile("burst"), default], name = "s.watch", shadow)]
async fn watched() -> &'static str {
    "watched"
}

fn router() -> Router<RateLimit> {
    Router::new()
        .route("/orders", get(orders))
        .route("/watched", get(watched))
}

async fn runtime(toml: &str, clock: &ManualClock) -> RateLimit {
    RateLimit::builder(Config::from_toml_str(toml).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap()
}

fn request(path: &str, peer: &str, account: &str) -> Request<Body> {
    let mut r = Request::builder()
        .uri(path)
        .header("x-account", account)
        .body(Body::empty())
        .unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    r
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

/// `r` of the member named `name` in the `RateLimit` List.
fn remaining_of<B>(r: &Response<B>, name: &str) -> Option<i64> {
    sf::list_of(r, "ratelimit", &["r", "t"])
        .into_iter()
        .find(|m| m.name == name)
        .and_then(|m| m.get("r"))
}

async fn body_json(r: Response<Body>) -> Value {
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

const IP: &str = "orders.ip/burst";
const ACCOUNT: &str = "orders.account/daily";

#[tokio::test]
async fn attributes_stack_and_a_refusal_charges_no_limit() {
    let clock = ManualClock::new();
    let app = router().with_state(runtime(CONFIG, &clock).await).into_service();
    let (peer, other_peer) = ("192.0.2.1:1", "192.0.2.2:1");

    // Three from one address: both limits charged each time; the triple
    // reports the tighter (the address's burst of 3).
    for i in 0..3 {
        let r = send(&app, request("/orders", peer, "alice")).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        assert_eq!(remaining_of(&r, IP), Some(2 - i));
        assert_eq!(remaining_of(&r, ACCOUNT), Some(4 - i));
        assert_eq!(header(&r, "ratelimit-limit").as_deref(), Some("3"));
        assert_eq!(header(&r, "ratelimit-remaining"), Some((2 - i).to_string()));
        // Every policy is listed, in declaration order.
        let policies: Vec<String> = sf::list_of(&r, "ratelimit-policy", &["q", "w"])
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(policies, [IP, ACCOUNT]);
    }
    // The fourth: the address refuses, so the account is not charged.
    let r = send(&app, request("/orders", peer, "alice")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(remaining_of(&r, IP), Some(0));
    assert_eq!(
        remaining_of(&r, ACCOUNT),
        Some(2),
        "the refusal charged the account nothing"
    );
    assert_eq!(header(&r, "ratelimit-remaining").as_deref(), Some("0"));
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));
    let body = body_json(r).await;
    assert_eq!(body["violated-policies"], serde_json::json!([IP]));

    // The same account from another address: 2 left of its 5.
    for i in 0..2 {
        let r = send(&app, request("/orders", other_peer, "alice")).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i} from the other address");
        assert_eq!(remaining_of(&r, ACCOUNT), Some(1 - i));
    }
    // Now the account refuses; the address is not charged.
    for _ in 0..3 {
        let r = send(&app, request("/orders", other_peer, "alice")).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            remaining_of(&r, IP),
            Some(1),
            "the account's refusals cost the address nothing"
        );
        // The triple reports the refusing limit, Retry-After its wait (a
        // fifth of a day: 17280 s).
        assert_eq!(header(&r, "ratelimit-limit").as_deref(), Some("5"));
        assert_eq!(header(&r, "retry-after").as_deref(), Some("17280"));
        let body = body_json(r).await;
        assert_eq!(body["violated-policies"], serde_json::json!([ACCOUNT]));
    }
    // Another account from the other address: its one unit left.
    let r = send(&app, request("/orders", other_peer, "bob")).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(remaining_of(&r, IP), Some(0));
    assert_eq!(remaining_of(&r, "orders.account/daily"), Some(4));
}

#[tokio::test]
async fn retry_after_is_the_longest_wait_among_the_refusing_limits() {
    let clock = ManualClock::new();
    let app = router().with_state(runtime(CONFIG, &clock).await).into_service();
    let peer = "192.0.2.7:1";
    // Spend the account (5) over two addresses' bursts.
    for i in 0..5 {
        let from = if i < 3 { peer } else { "192.0.2.8:1" };
        assert_eq!(
            send(&app, request("/orders", from, "carol")).await.status(),
            StatusCode::OK
        );
    }
    // From `peer`: its burst is spent too. Both refuse; Retry-After is the
    // account's (17280 s), not the address's (1 s); both are violated.
    let r = send(&app, request("/orders", peer, "carol")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "retry-after").as_deref(), Some("17280"));
    assert_eq!(
        header(&r, "ratelimit-limit").as_deref(),
        Some("5"),
        "the longest wait is reported"
    );
    let body = body_json(r).await;
    assert_eq!(body["violated-policies"], serde_json::json!([IP, ACCOUNT]));
    assert_eq!(body["retry_after"], 17280);
    // A second later the address has room again, the account still not:
    // still refused, the address still not charged.
    clock.advance(Duration::from_secs(1));
    let r = send(&app, request("/orders", peer, "carol")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(remaining_of(&r, IP), Some(3));
}

#[tokio::test]
async fn a_shadow_limit_in_a_stack_never_refuses_the_others() {
    let clock = ManualClock::new();
    let app = router().with_state(runtime(CONFIG, &clock).await).into_service();
    // `s.watch` is one bucket for everyone (burst 3), in shadow: its
    // refusals are reported, never enforced.
    for (i, peer) in [
        "192.0.2.11:1",
        "192.0.2.12:1",
        "192.0.2.13:1",
        "192.0.2.14:1",
        "192.0.2.15:1",
    ]
    .into_iter()
    .enumerate()
    {
        let r = send(&app, request("/watched", peer, &format!("acct-{i}"))).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        let watch = remaining_of(&r, "s.watch/burst").unwrap();
        assert_eq!(watch, (2 - i as i64).max(0));
        // The enforcing limits were charged (their own buckets are fresh).
        assert_eq!(remaining_of(&r, "s.ip/burst"), Some(2));
        assert_eq!(remaining_of(&r, "s.account/daily"), Some(4));
    }
}

/// Stacked rules: the first matching rule says `stack`, so the next
/// matching one applies too; a rule without it ends the stack.
const RULES: &str = r#"
default_profile = "burst"

[headers]
style = "both"

[profiles.burst]
rate = "10/s"
burst = 3

[profiles.daily]
rate = "5/d"
burst = 5

[[rules]]
name = "api.ip"
path = "/api/{*rest}"
key = "ip"
resolve = ["profile:burst", "default"]
stack = true

[[rules]]
name = "api.account"
path = "/api/{*rest}"
key = "header:x-account"
resolve = ["profile:daily", "default"]

[[rules]]
name = "api.never"
path = "/api/{*rest}"
key = "ip"
resolve = ["profile:burst", "default"]
"#;

async fn plain() -> &'static str {
    "plain"
}

#[tokio::test]
async fn stacked_rules_are_one_decision() {
    let clock = ManualClock::new();
    let rl = runtime(RULES, &clock).await;
    let app = Router::new()
        .route("/api/{*rest}", get(plain))
        .layer(rl.layer())
        .into_service();
    let (peer, other) = ("198.51.100.1:1", "198.51.100.2:1");
    for i in 0..3 {
        let r = send(&app, request("/api/x", peer, "dave")).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        assert_eq!(remaining_of(&r, "@api.ip/burst"), Some(2 - i));
        assert_eq!(remaining_of(&r, "@api.account/daily"), Some(4 - i));
        // The third rule matches too, but the stack ended before it.
        assert_eq!(remaining_of(&r, "@api.never/burst"), None);
    }
    let r = send(&app, request("/api/x", peer, "dave")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(remaining_of(&r, "@api.account/daily"), Some(2), "not charged");
    let body = body_json(r).await;
    assert_eq!(body["violated-policies"], serde_json::json!(["@api.ip/burst"]));
    for _ in 0..2 {
        assert_eq!(
            send(&app, request("/api/x", other, "dave")).await.status(),
            StatusCode::OK
        );
    }
    let r = send(&app, request("/api/x", other, "dave")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        remaining_of(&r, "@api.ip/burst"),
        Some(1),
        "the account's refusal cost the address nothing"
    );
    assert_eq!(header(&r, "retry-after").as_deref(), Some("17280"));
}

/// Under concurrency, on a multi-threaded runtime: 200 requests at once
/// from 10 addresses (burst 3 each: 30) for one account (5 a day). Exactly
/// 5 are admitted, and the refused ones charged no address: each address
/// then has exactly its burst minus what it was admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_refusals_charge_nothing() {
    let clock = ManualClock::new();
    let app = router().with_state(runtime(CONFIG, &clock).await).into_service();
    let peers: Vec<String> = (0..10).map(|i| format!("203.0.113.{}:1", i + 1)).collect();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let app = app.clone();
        let peer = peers[i % peers.len()].clone();
        tasks.push(tokio::spawn(async move {
            let r = send(&app, request("/orders", &peer, "erin")).await;
            (peer, r.status())
        }));
    }
    let mut admitted_by = std::collections::BTreeMap::<String, i64>::new();
    let mut admitted = 0;
    for t in tasks {
        let (peer, status) = t.await.unwrap();
        if status == StatusCode::OK {
            admitted += 1;
            *admitted_by.entry(peer).or_default() += 1;
        } else {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        }
    }
    assert_eq!(admitted, 5, "the account's daily quota, exactly");
    // Each address: a fresh account's request sees 3 - admitted - 1 left.
    for (i, peer) in peers.iter().enumerate() {
        let used = admitted_by.get(peer).copied().unwrap_or(0);
        let r = send(&app, request("/orders", peer, &format!("probe-{i}"))).await;
        if used < 3 {
            assert_eq!(r.status(), StatusCode::OK, "{peer} had {used} admitted");
            assert_eq!(remaining_of(&r, IP), Some(3 - used - 1), "{peer}: no partial charges");
        } else {
            assert_eq!(
                r.status(),
                StatusCode::TOO_MANY_REQUESTS,
                "{peer} had its burst admitted"
            );
            assert_eq!(remaining_of(&r, IP), Some(0));
        }
    }
}
