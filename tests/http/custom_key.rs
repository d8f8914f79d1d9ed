//! A key source written by the application plugs into the runtime without
//! touching it: a `KeySource` of the test's own, named by
//! `key = custom(Type)`, through a real axum router. Tenants an
//! upstream layer verified (an extension) each get their own bucket; a
//! request without one falls back to its address.

use std::hash::Hasher;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::key::{write_address_id, ClientKey, KeyContext, KeySource, PeerAddr};
use ratelimit::{rate_limit, ManualClock};
use tower::ServiceExt;

/// What an authentication layer in front of the limiter verified.
#[derive(Debug, Clone)]
struct Tenant(String);

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
}

#[rate_limit(key = custom(ByTenant), resolve = [default], name = "tenant.get")]
async fn tenant_handler() -> &'static str {
    "ok"
}

#[tokio::test]
async fn an_application_key_source_limits_each_tenant_apart() {
    let config = Config::from_toml_str("[profiles.standard]\nrate = \"1/min\"\nburst = 2\n").unwrap();
    let clock = ManualClock::new();
    let rl = RateLimit::builder(config)
        .routes_in(module_path!())
        .clock(clock)
        .build()
        .await
        .unwrap();
    let app = Router::new().route("/t", get(tenant_handler)).with_state(rl);

    let send = |tenant: Option<&str>| {
        let app = app.clone();
        let mut r = Request::builder().uri("/t").body(Body::empty()).unwrap();
        r.extensions_mut().insert(PeerAddr("192.0.2.1:1".parse().unwrap()));
        if let Some(t) = tenant {
            r.extensions_mut().insert(Tenant(t.to_owned()));
        }
        async move {
            let response = app.oneshot(r).await.unwrap();
            (
                response.status(),
                response.headers().get("ratelimit-remaining").cloned(),
            )
        }
    };
    // Tenant a: its burst of 2, then refused.
    assert_eq!(send(Some("a")).await.0, StatusCode::OK);
    assert_eq!(send(Some("a")).await.0, StatusCode::OK);
    assert_eq!(send(Some("a")).await.0, StatusCode::TOO_MANY_REQUESTS);
    // Tenant b, same address: a bucket of its own.
    let (status, remaining) = send(Some("b")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(remaining.as_ref().map(|v| v.to_str().unwrap()), Some("1"));
    // No tenant: the address's bucket, untouched so far.
    assert_eq!(send(None).await.0, StatusCode::OK);
    assert_eq!(send(None).await.0, StatusCode::OK);
    assert_eq!(send(None).await.0, StatusCode::TOO_MANY_REQUESTS);
}
