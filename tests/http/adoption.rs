//! What a real service needs to adopt the limiter, through real axum
//! routers: the runtime inside the application's own state (`FromRef`,
//! `#[rate_limit(...)]`), keys of the application's (`custom(Type)`
//! in the attribute, `"custom:<name>"` in `[[rules]]`), one bucket per route
//! (`global`), rejections it shapes itself (the builder's hook, the
//! attribute's `reject = path`), its own `LimitService`, and the attribute
//! reached through a renamed path (`crate = "..."`).

use std::hash::Hasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use ratelimit::axum::{RateLimit, Rejection};
use ratelimit::config::Config;
use ratelimit::key::{write_address_id, ClientKey, KeyContext, KeySource, PeerAddr};
use ratelimit::service::{LimitService, ServiceAnswer, ServiceError, ServiceIdKey};
use ratelimit::{rate_limit, ManualClock};
use tower::ServiceExt;

const CONFIG: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "60/min"
burst = 2

[profiles.premium]
rate = "600/min"
burst = 6
"#;

/// The tenant an authentication layer in front verified (an extension).
#[derive(Debug, Clone)]
struct Tenant(String);

/// Keys by the verified tenant, else by address.
#[derive(Debug, Default)]
struct ByTenant;

impl KeySource for ByTenant {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        match cx.parts().extensions.get::<Tenant>() {
            Some(t) => ClientKey::Custom(cx.hash(&t.0)),
            None => cx.address(),
        }
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        match (key, cx.parts().extensions.get::<Tenant>()) {
            (ClientKey::Custom(_), Some(t)) => {
                h.write(b"tenant:");
                h.write(t.0.as_bytes());
            }
            _ => write_address_id(key, h),
        }
    }
    fn id_name(&self) -> Option<&str> {
        Some("tenant")
    }
}

/// The application's state: a pool, and the limiter beside it.
#[derive(Clone)]
struct AppState {
    pool: Arc<str>,
    rate_limit: RateLimit,
}

impl FromRef<AppState> for RateLimit {
    fn from_ref(state: &AppState) -> RateLimit {
        state.rate_limit.clone()
    }
}

#[rate_limit(key = custom(ByTenant), resolve = [default])]
async fn orders(State(state): State<AppState>) -> String {
    format!("orders from {}", state.pool)
}

#[rate_limit(key = route, resolve = [profile("standard"), default])]
async fn export() -> &'static str {
    "export"
}

fn too_many_requests(r: &Rejection<'_>) -> http::Response<String> {
    http::Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header("content-type", "text/plain")
        .body(format!("{} is busy, retry in {} s", r.route(), r.retry_after_secs()))
        .expect("a valid response")
}

#[rate_limit(key = ip, resolve = [default], reject = too_many_requests, name = "search")]
async fn search() -> &'static str {
    "search"
}

#[rate_limit(key = ip, resolve = [default], name = "plain")]
async fn plain() -> &'static str {
    "plain"
}

fn request(path: &str, peer: &str, tenant: Option<&str>) -> Request<Body> {
    let mut r = Request::get(path).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    if let Some(t) = tenant {
        r.extensions_mut().insert(Tenant(t.to_owned()));
    }
    r
}

async fn send(app: &Router, r: Request<Body>) -> Response<String> {
    let response = app.clone().oneshot(r).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Response::from_parts(parts, body)
}

async fn statuses(app: &Router, n: usize, make: impl Fn() -> Request<Body>) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(send(app, make()).await.status().as_u16());
    }
    out
}

async fn app_state(clock: &ManualClock) -> AppState {
    let rate_limit = RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    AppState {
        pool: Arc::from("pool-1"),
        rate_limit,
    }
}

/// The limiter lives in the application's state; handlers find it through
/// `FromRef` without a layer, and still read the rest of the state.
#[tokio::test]
async fn the_runtime_is_found_in_the_applications_state() {
    let clock = ManualClock::new();
    let state = app_state(&clock).await;
    let app = Router::new().route("/orders", get(orders)).with_state(state.clone());
    let r = send(&app, request("/orders", "192.0.2.1:1", Some("acme"))).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.body(), "orders from pool-1");
    assert_eq!(r.headers()["ratelimit-limit"], "2");
    assert_eq!(r.headers()["ratelimit-remaining"], "1");
    // The same bucket as the state's limiter holds: it is the same runtime.
    assert_eq!(state.rate_limit.limiter().store().len(), 1);
}

/// `custom(ByTenant)`: tenants get a bucket each, whatever address they
/// come from; without a tenant, the address.
#[tokio::test]
async fn a_custom_key_type_limits_by_tenant() {
    let clock = ManualClock::new();
    let app = Router::new()
        .route("/orders", get(orders))
        .with_state(app_state(&clock).await);
    // One tenant from three addresses: one bucket of 2.
    let mut seen = Vec::new();
    for peer in ["192.0.2.1:1", "192.0.2.2:1", "198.51.100.3:1"] {
        seen.push(
            send(&app, request("/orders", peer, Some("acme")))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(seen, [200, 200, 429]);
    // Another tenant, from the same address: its own bucket.
    assert_eq!(
        statuses(&app, 3, || request("/orders", "192.0.2.1:1", Some("globex"))).await,
        [200, 200, 429]
    );
    // No tenant: by address, a bucket of its own too.
    assert_eq!(
        statuses(&app, 3, || request("/orders", "192.0.2.1:1", None)).await,
        [200, 200, 429]
    );
}

/// `global`: every client shares the route's one bucket.
#[tokio::test]
async fn a_global_key_is_one_bucket_for_the_route() {
    let clock = ManualClock::new();
    let state = app_state(&clock).await;
    let app = Router::new().route("/export", get(export)).with_state(state.clone());
    let mut seen = Vec::new();
    for i in 0..4 {
        let peer = format!("203.0.113.{}:1", i + 1);
        seen.push(send(&app, request("/export", &peer, None)).await.status().as_u16());
    }
    assert_eq!(seen, [200, 200, 429, 429], "four clients, one bucket of 2");
    assert_eq!(state.rate_limit.limiter().store().len(), 1);
}

/// `reject = path`: the route's own 429, with `Retry-After` and the
/// rate-limit headers added for it.
#[tokio::test]
async fn a_route_shapes_its_own_rejection() {
    let clock = ManualClock::new();
    let app = Router::new()
        .route("/search", get(search))
        .with_state(app_state(&clock).await);
    let make = || request("/search", "192.0.2.9:1", None);
    assert_eq!(statuses(&app, 2, make).await, [200, 200]);
    let r = send(&app, make()).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["content-type"], "text/plain");
    assert_eq!(r.body(), "search is busy, retry in 1 s");
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["ratelimit-remaining"], "0");
}

/// The builder's hook shapes every other refusal, attribute routes' and
/// `[[rules]]`' alike; a `Retry-After` it sets is kept, and the rate-limit
/// headers are added.
#[tokio::test]
async fn the_builders_hook_shapes_every_other_rejection() {
    let clock = ManualClock::new();
    let config = format!(
        "{CONFIG}\n[[rules]]\nname = \"api\"\npath = \"/api/{{*rest}}\"\nkey = \"ip\"\nresolve = [\"default\"]\n"
    );
    let rl = RateLimit::builder(Config::from_toml_str(&config).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .rejection(|r: &Rejection<'_>| {
            let mut response = Response::new(format!(
                "{{\"error\":\"slow_down\",\"route\":\"{}\",\"policy\":\"{}\",\"denial\":\"{:?}\",\"method\":\"{}\"}}",
                r.route(),
                r.policy(),
                r.decision().denial(),
                r.request().method,
            ));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            if r.route() == "api" {
                response.headers_mut().insert("retry-after", "30".parse().unwrap());
            }
            response
        })
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/plain", get(plain))
        .route("/api/{*rest}", get(|| async { "api" }))
        .with_state(rl.clone())
        .layer(rl.layer());
    let make = || request("/plain", "192.0.2.10:1", None);
    assert_eq!(statuses(&app, 2, make).await, [200, 200]);
    let r = send(&app, make()).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.body(),
        "{\"error\":\"slow_down\",\"route\":\"plain\",\"policy\":\"plain/standard\",\"denial\":\"Some(RateLimited)\",\"method\":\"GET\"}"
    );
    assert_eq!(r.headers()["retry-after"], "1", "added by the runtime");
    assert_eq!(r.headers()["ratelimit-limit"], "2");

    let make = || request("/api/v1/x", "192.0.2.11:1", None);
    assert_eq!(statuses(&app, 2, make).await, [200, 200]);
    let r = send(&app, make()).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        r.body().contains("\"route\":\"api\",\"policy\":\"@api/standard\""),
        "{}",
        r.body()
    );
    assert_eq!(r.headers()["retry-after"], "30", "the hook's own is kept");
    assert_eq!(r.headers()["ratelimit-remaining"], "0");
}

/// `"custom:<name>"` in `[[rules]]` runs the extractor registered under
/// that name; a configuration naming an unregistered one is refused at
/// startup and at reload (where the running one stays).
#[tokio::test]
async fn a_rule_names_a_registered_key() {
    let clock = ManualClock::new();
    let rules = |key: &str| {
        Config::from_toml_str(&format!(
            "{CONFIG}\n[[rules]]\nname = \"orders\"\npath = \"/orders\"\nkey = \"{key}\"\nresolve = [\"default\"]\n"
        ))
        .unwrap()
    };
    let err = RateLimit::builder(rules("custom:tenant"))
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("key \"custom:tenant\" of rule \"orders\": no key extractor is registered under \"tenant\"")
            && err.contains("none is registered"),
        "{err}"
    );
    let err = RateLimit::builder(rules("custom:tenant"))
        .routes_in(module_path!())
        .key("tenant ", ByTenant)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("key \"tenant \": invalid custom key name"), "{err}");

    let rl = RateLimit::builder(rules("custom:tenant"))
        .routes_in(module_path!())
        .clock(clock.clone())
        .key("tenant", ByTenant)
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/orders", get(|| async { "orders" }))
        .layer(rl.layer());
    let mut seen = Vec::new();
    for peer in ["192.0.2.1:1", "192.0.2.2:1", "198.51.100.3:1"] {
        seen.push(
            send(&app, request("/orders", peer, Some("acme")))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(seen, [200, 200, 429], "one tenant, three addresses, one bucket");

    let err = rl.reload(rules("custom:org")).unwrap_err();
    assert_eq!(err.field(), Some("rules[0].key"));
    assert!(err.to_string().contains("registered: \"tenant\""), "{err}");
    assert!(err.to_string().contains("the running configuration stays"), "{err}");
    // Still keyed by tenant: a new tenant has its own bucket.
    assert_eq!(
        send(&app, request("/orders", "192.0.2.1:1", Some("initech")))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&app, request("/orders", "192.0.2.1:1", Some("acme")))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    rl.reload(rules("ip")).unwrap();
    assert_eq!(
        statuses(&app, 3, || request("/orders", "192.0.2.77:1", Some("acme"))).await,
        [200, 200, 429],
        "now by address"
    );
}

const ID_SECRET: &[u8] = b"adoption-test-service-id-secret!!";

/// The application's own limit service: premium for one tenant, counted.
struct Plans {
    premium: u64,
    lookups: Arc<AtomicUsize>,
}

impl LimitService for Plans {
    async fn lookup(&self, key: u64) -> Result<Option<ServiceAnswer>, ServiceError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        Ok((key == self.premium).then(|| ServiceAnswer::Tier { tier: "premium".into() }))
    }
}

#[rate_limit(key = custom(ByTenant), resolve = [service, default], name = "plans")]
async fn planned() -> &'static str {
    "planned"
}

/// The `service` step asks the application's `LimitService`: the ids it
/// gets are the documented HMAC of the key's fields, so it can compute its
/// own tenants' ids.
#[tokio::test]
async fn the_service_step_asks_the_applications_limit_service() {
    let ids = ServiceIdKey::new(ID_SECRET).unwrap();
    let premium = ids.id_of_fields(&[b"tenant:", b"tenant", b"acme"]);
    let lookups = Arc::new(AtomicUsize::new(0));
    let mut config = Config::from_toml_str(&format!(
        "{CONFIG}\n[service]\nid_secret_env = \"UNUSED_IN_THIS_TEST\"\n"
    ))
    .unwrap();
    let service = config.service.as_mut().unwrap();
    service.id_secret = Some(ratelimit::config::ServiceSecret(ID_SECRET.to_vec()));
    let rl = RateLimit::builder(config)
        .routes_in(module_path!())
        .limit_service(Plans {
            premium,
            lookups: Arc::clone(&lookups),
        })
        .build()
        .await
        .unwrap();
    let app = Router::new().route("/plans", get(planned)).with_state(rl);
    // The first request misses (the lookup runs in the background).
    let r = send(&app, request("/plans", "192.0.2.1:1", Some("acme"))).await;
    assert_eq!(r.headers()["ratelimit-limit"], "2");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = send(&app, request("/plans", "192.0.2.1:1", Some("acme"))).await;
        if r.headers()["ratelimit-limit"] == "6" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the service's tier never applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another tenant: the service has no answer, the default applies.
    let other = send(&app, request("/plans", "192.0.2.1:1", Some("globex"))).await;
    assert_eq!(other.headers()["ratelimit-limit"], "2");
    assert!(lookups.load(Ordering::SeqCst) >= 1);
}

/// The builder's service and `[service] url` together, or a service with
/// no `[service]` section, are refused with what to do.
#[tokio::test]
async fn a_limit_service_is_given_once() {
    let plans = || Plans {
        premium: 0,
        lookups: Arc::default(),
    };
    let err = RateLimit::builder(Config::from_toml_str(CONFIG).unwrap())
        .routes_in(module_path!())
        .limit_service(plans())
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("the configuration has no [service] section"), "{err}");
    let mut config = Config::from_toml_str(&format!(
        "{CONFIG}\n[service]\nurl = \"http://127.0.0.1:9/limits\"\nid_secret_env = \"X\"\n"
    ))
    .unwrap();
    config.service.as_mut().unwrap().id_secret = Some(ratelimit::config::ServiceSecret(ID_SECRET.to_vec()));
    let err = RateLimit::builder(config.clone())
        .routes_in(module_path!())
        .limit_service(plans())
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[service] url: a limit service was also given to the builder"),
        "{err}"
    );
    config.service.as_mut().unwrap().url = None;
    let err = RateLimit::builder(config)
        .routes_in(module_path!())
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("[service] url: missing"), "{err}");
}

/// A re-export of the crate, as an application that renames or wraps the
/// dependency has: `crate = "..."` points the expansion at it.
mod platform {
    pub(crate) use ratelimit as limits;
}

#[rate_limit(crate = "crate::adoption::platform::limits", key = ip, resolve = [default], name = "renamed")]
async fn renamed() -> &'static str {
    "renamed"
}

#[tokio::test]
async fn the_attribute_works_through_a_renamed_path() {
    let clock = ManualClock::new();
    let state = app_state(&clock).await;
    let app = Router::new()
        .route("/renamed", get(renamed))
        .with_state(state.rate_limit);
    let make = || request("/renamed", "192.0.2.5:1", None);
    assert_eq!(statuses(&app, 3, make).await, [200, 200, 429]);
}
