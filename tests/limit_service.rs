//! The limit service cache against a real HTTP server on loopback: one
//! upstream call for a thousand concurrent misses, a hung or failing service
//! never holds a request, and stale answers are served while refreshing.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit::config::Config;
use ratelimit::resolve::{Chain, DefaultProfile, FinalResolver, ResolveContext, Service};
use ratelimit::service::{CacheSettings, HttpLimitService, ServiceAnswer, ServiceCache};
use support::{Reply, Stub};

fn settings() -> CacheSettings {
    CacheSettings {
        ttl: Duration::from_millis(300),
        negative_ttl: Duration::from_millis(300),
        max_stale: Duration::from_secs(10),
        timeout: Duration::from_millis(100),
        max_entries: 1_000,
        max_in_flight: 64,
    }
}

async fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for the cache");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_misses_make_one_upstream_call() {
    // The answer takes 200 ms, so every request below misses while the one
    // fetch is in flight.
    let up = Stub::start(
        "/v1/limits",
        Reply::Json(r#"{"tier": "premium"}"#.into()),
        Duration::from_secs(1),
    )
    .await;
    let slow_ok = CacheSettings {
        timeout: Duration::from_secs(5),
        ..settings()
    };
    let cache = Arc::new(ServiceCache::new(HttpLimitService::new(&up.url).unwrap(), slow_ok).unwrap());
    let tasks: Vec<_> = (0..1_000)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get(42) })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), None, "a miss answers at once, without the service");
    }
    let answer = eventually(|| cache.get(42)).await;
    assert_eq!(answer, ServiceAnswer::Tier { tier: "premium".into() });
    assert_eq!(up.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_or_failing_service_leaves_requests_to_the_next_resolver() {
    let config = Config::from_toml_str(
        "default_profile = \"std\"\n[profiles.std]\nrate = \"10/min\"\n[profiles.premium]\nrate = \"600/min\"\n",
    )
    .unwrap();
    for mode in [
        Reply::Hang,
        Reply::Status(500),
        Reply::Status(404),
        Reply::Json("not json".into()),
    ] {
        let up = Stub::start("/v1/limits", mode, Duration::ZERO).await;
        let long_negative = CacheSettings {
            negative_ttl: Duration::from_secs(5),
            ..settings()
        };
        let cache = Arc::new(ServiceCache::new(HttpLimitService::new(&up.url).unwrap(), long_negative).unwrap());
        let chain = Chain(Service(cache.clone()), DefaultProfile);
        let ctx = ResolveContext::new(&config, "r", None).with_client(7);
        // Many requests while the service misbehaves: each is answered by
        // the default at once, and the service sees one call per negative TTL.
        let start = Instant::now();
        for _ in 0..200 {
            assert_eq!(chain.resolve_final(&ctx).profile.as_deref(), Some("std"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "the request path never waits on the service"
        );
        tokio::time::sleep(Duration::from_millis(150)).await; // past the 100 ms timeout
        for _ in 0..200 {
            assert_eq!(chain.resolve_final(&ctx).profile.as_deref(), Some("std"));
        }
        assert_eq!(up.hits(), 1, "negative answers are cached");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_answers_are_served_while_refreshing() {
    let up = Stub::start(
        "/v1/limits",
        Reply::Json(r#"{"tier": "premium"}"#.into()),
        Duration::from_millis(50),
    )
    .await;
    let cache = Arc::new(ServiceCache::new(HttpLimitService::new(&up.url).unwrap(), settings()).unwrap());
    let premium = ServiceAnswer::Tier { tier: "premium".into() };
    assert_eq!(eventually(|| cache.get(9)).await, premium);
    up.set(Reply::Json(r#"{"rpm": 120, "burst": 5}"#.into()));
    tokio::time::sleep(Duration::from_millis(350)).await; // past the TTL
                                                          // Stale, not missing, while the refresh runs.
    assert_eq!(cache.get(9), Some(premium));
    let fresh = eventually(|| cache.get(9).filter(|a| matches!(a, ServiceAnswer::Limits { .. }))).await;
    assert_eq!(
        fresh,
        ServiceAnswer::Limits {
            rpm: 120,
            burst: Some(5)
        }
    );
    // A failing refresh keeps the stale answer.
    up.set(Reply::Status(503));
    tokio::time::sleep(Duration::from_millis(350)).await;
    let calls = up.hits();
    assert_eq!(cache.get(9), Some(fresh.clone()));
    eventually(|| (up.hits() > calls).then_some(())).await;
    tokio::time::sleep(Duration::from_millis(100)).await; // the failure is recorded
    assert_eq!(cache.get(9), Some(fresh));
}

#[test]
fn bad_settings_are_refused() {
    assert!(HttpLimitService::new("ftp://x").is_err());
    assert!(HttpLimitService::new("https://x").is_err(), "TLS is not built in");
    assert!(
        ServiceCache::new(HttpLimitService::new("http://127.0.0.1:1").unwrap(), settings()).is_err(),
        "no runtime"
    );
}

/// A service that knows a few partners (keys below 100) and no one else,
/// answering at once and counting lookups.
struct Partners(Arc<std::sync::atomic::AtomicUsize>);

impl ratelimit::service::LimitService for Partners {
    async fn lookup(&self, key: u64) -> Result<Option<ServiceAnswer>, ratelimit::service::ServiceError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok((key < 100).then(|| ServiceAnswer::Tier { tier: "partner".into() }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_inventing_keys_cannot_push_a_partners_answer_out() {
    let lookups = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let settings = CacheSettings {
        ttl: Duration::from_secs(600),
        negative_ttl: Duration::from_secs(600),
        max_entries: 64,
        ..settings()
    };
    let cache = ServiceCache::new(Partners(Arc::clone(&lookups)), settings).unwrap();
    let partners: Vec<u64> = (0..16).collect();
    for &p in &partners {
        cache.get(p);
    }
    for &p in &partners {
        eventually(|| cache.get(p)).await;
    }
    // 20,000 invented keys, each a miss the service answers "unknown" to,
    // through a cache of 64 entries.
    for k in 0..20_000u64 {
        cache.get(1_000_000 + k.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 1_000_000_000);
        if k % 500 == 0 {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = lookups.load(std::sync::atomic::Ordering::Relaxed);
    let kept = partners.iter().filter(|&&p| cache.get(p).is_some()).count();
    assert_eq!(kept, partners.len(), "every partner's answer is still cached");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        lookups.load(std::sync::atomic::Ordering::Relaxed),
        before,
        "and served without asking the service again"
    );
}
