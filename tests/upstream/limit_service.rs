//! The limit service cache against a real HTTP server on loopback: one
//! upstream call for a thousand concurrent misses, a hung or failing service
//! never holds a request, and stale answers are served while refreshing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::stub::{Reply, Stub};
use ratelimit::config::Config;
use ratelimit::resolve::{ResolveContext, Resolver, Service};
use ratelimit::service::{CacheSettings, HttpLimitService, ServiceAnswer, ServiceCache};

fn settings() -> CacheSettings {
    CacheSettings::default()
        .with_ttl(Duration::from_millis(300))
        .with_negative_ttl(Duration::from_millis(300))
        .with_max_stale(Duration::from_secs(10))
        .with_timeout(Duration::from_millis(100))
        .with_max_entries(1_000)
        .with_max_in_flight(64)
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
    let slow_ok = settings().with_timeout(Duration::from_secs(5));
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
        let long_negative = settings().with_negative_ttl(Duration::from_secs(5));
        let cache = Arc::new(ServiceCache::new(HttpLimitService::new(&up.url).unwrap(), long_negative).unwrap());
        let service = Service(cache.clone());
        let ctx = ResolveContext::new(&config, "r", None).with_client(7);
        // Many requests while the service misbehaves: each passes to the
        // next step at once, and the service sees one call per negative TTL.
        let start = Instant::now();
        for _ in 0..200 {
            assert_eq!(service.resolve(&ctx), None, "passed to the next step");
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "the request path never waits on the service"
        );
        tokio::time::sleep(Duration::from_millis(150)).await; // past the 100 ms timeout
        for _ in 0..200 {
            assert_eq!(service.resolve(&ctx), None, "passed to the next step");
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
    // HTTPS is built in (tests/upstream/https.rs); a URL still needs a host.
    assert!(HttpLimitService::new("https://x").is_ok());
    assert!(HttpLimitService::new("https://").is_err());
    assert!(HttpLimitService::new("/v1/limits").is_err());
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
    let settings = settings()
        .with_ttl(Duration::from_secs(600))
        .with_negative_ttl(Duration::from_secs(600))
        .with_max_entries(64);
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

/// FNV-1a 64 of the concatenated bytes: the unkeyed id the runtime sent
/// before the ids were keyed, computable by anyone from public information.
fn unkeyed_fnv(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// HMAC-SHA256 with ring (not the library's implementation), truncated to
/// the first 8 bytes, of the length-prefixed fields: the id as a limit
/// service computes it (docs/http.md).
fn independent_id(secret: &[u8], fields: &[&[u8]]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut message = Vec::new();
    for f in fields {
        message.extend_from_slice(&u32::try_from(f.len()).unwrap().to_be_bytes());
        message.extend_from_slice(f);
    }
    let tag = ring::hmac::sign(&key, &message);
    tag.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

const SECRET_A: &[u8] = b"limit-service-id-secret-one-0123456789";
const SECRET_B: &[u8] = b"limit-service-id-secret-two-0123456789";

/// The config of the runtime below: `[service]` at `url`, with the secret's
/// variable named (the tests set the secret in code).
fn service_config(url: &str) -> String {
    format!(
        "default_profile = \"std\"\n[profiles.std]\nrate = \"600/min\"\n\
         [service]\nurl = \"{url}\"\nid_secret_env = \"RATELIMIT_TEST_SERVICE_ID_SECRET_NOT_SET\"\n\
         [[rules]]\nname = \"by-header\"\npath = \"/h\"\nkey = \"header:x-api-key\"\nresolve = [\"service\", \"default\"]\n\
         [[rules]]\nname = \"by-ip\"\npath = \"/ip\"\nkey = \"ip\"\nresolve = [\"service\", \"default\"]\n"
    )
}

/// The ids a runtime keyed with `secret` sends a real loopback limit
/// service for a header key (`x-api-key: key-a`) and an address key
/// (192.0.2.1), through a real router with `[[rules]]` resolving through
/// `service`.
async fn ids_sent(secret: &[u8]) -> (String, String) {
    use axum::body::Body;
    use axum::routing::get;
    use ratelimit::axum::RateLimit;
    use ratelimit::config::ServiceSecret;
    use ratelimit::key::PeerAddr;
    use tower::ServiceExt;

    let up = Stub::start("/v1/limits", Reply::Status(404), Duration::ZERO).await;
    let mut config = Config::from_toml_str(&service_config(&up.url)).unwrap();
    config.service.as_mut().unwrap().id_secret = Some(ServiceSecret(secret.to_vec()));
    let rl = RateLimit::builder(config)
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
    let app = axum::Router::new()
        .route("/h", get(|| async { "h" }))
        .route("/ip", get(|| async { "ip" }))
        .layer(rl.layer());
    let mut ids = Vec::new();
    for (path, expected_hits) in [("/h", 1), ("/ip", 2)] {
        let mut req = http::Request::get(path)
            .header("x-api-key", "key-a")
            .body(Body::empty())
            .unwrap();
        req.extensions_mut()
            .insert(PeerAddr("192.0.2.1:40000".parse().unwrap()));
        let res = app.clone().oneshot(req).await.unwrap();
        assert_eq!(res.status(), 200);
        eventually(|| (up.hits() >= expected_hits).then_some(())).await;
        let paths = up.paths();
        let id = paths[expected_hits - 1]
            .strip_prefix("/v1/limits/")
            .expect("the service's base path")
            .to_owned();
        assert_eq!(id.len(), 16, "16 hex digits: {id}");
        assert!(!paths[expected_hits - 1].contains("key-a") && !paths[expected_hits - 1].contains("192.0.2.1"));
        ids.push(id);
    }
    (ids.remove(0), ids.remove(0))
}

/// Issue 11, item 4: a client must not be able to compute the id the limit
/// service knows it by (or a partner's): the id is keyed with a secret
/// shared with the service, and an address is not recoverable from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_ids_are_not_computable_without_the_secret() {
    let (header_id, ip_id) = ids_sent(SECRET_A).await;
    let public_header = unkeyed_fnv(&[b"header:", b"key-a"]);
    let public_ip = unkeyed_fnv(&[b"ip:", &[192, 0, 2, 1]]);
    let mut computable = Vec::new();
    if header_id == public_header {
        computable.push(format!(
            "`x-api-key: key-a` was sent as {header_id} = FNV-1a(\"header:key-a\"): any client can aim at a partner's id"
        ));
    }
    if ip_id == public_ip {
        computable.push(format!(
            "192.0.2.1 was sent as {ip_id} = FNV-1a(\"ip:\" + 4 bytes): the address inverts in 2^32 steps"
        ));
    }
    assert!(
        computable.is_empty(),
        "ids computable without any secret:\n{}",
        computable.join("\n")
    );

    // The ids are what a service holding the secret computes, with an HMAC
    // of its own, from the documented fields...
    assert_eq!(
        header_id,
        independent_id(SECRET_A, &[b"header:", b"x-api-key", b"key-a"])
    );
    assert_eq!(ip_id, independent_id(SECRET_A, &[b"ip:", &[192, 0, 2, 1]]));
    // ...and depend on the secret: another deployment's ids differ.
    let (header_b, ip_b) = ids_sent(SECRET_B).await;
    assert_ne!(header_id, header_b);
    assert_ne!(ip_id, ip_b);
    assert_eq!(
        header_b,
        independent_id(SECRET_B, &[b"header:", b"x-api-key", b"key-a"])
    );
}

/// The documented test vectors (docs/http.md), against the independent HMAC.
#[test]
fn documented_service_id_vectors_match_an_independent_hmac() {
    let secret = b"ratelimit-service-id-test-secret";
    let v6: &[u8] = &[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0];
    let cases: [(&[&[u8]], &str); 6] = [
        (&[b"claim:", b"sub", b"alice"], "0fe9a6b8ae5a8ab8"),
        (&[b"claim:", b"uid", b"42"], "892cbad0be4b189e"),
        (&[b"header:", b"x-api-key", b"key-a"], "ae26b4e400037401"),
        (&[b"ip:", &[192, 0, 2, 1]], "0cd25fd4c0d56f2d"),
        (&[b"ip:", v6], "f1ac424a268ca2d8"),
        (&[b"unknown"], "99f086c9674e3d17"),
    ];
    let ids = ratelimit::service::ServiceIdKey::new(secret).unwrap();
    for (fields, id) in cases {
        assert_eq!(independent_id(secret, fields), id, "{fields:?}");
        assert_eq!(format!("{:016x}", ids.id_of_fields(fields)), id, "{fields:?}");
    }
}

/// `[service]` without a usable secret does not start: the variable unset,
/// empty or short is an error naming it.
#[tokio::test]
async fn a_missing_empty_or_short_id_secret_is_refused_at_startup() {
    use ratelimit::axum::RateLimit;
    let var = "RATELIMIT_TEST_SERVICE_ID_SECRET_OF_THIS_TEST";
    let text = service_config("http://127.0.0.1:9/v1/limits").replace("RATELIMIT_TEST_SERVICE_ID_SECRET_NOT_SET", var);
    let start = |value: Option<&str>| {
        match value {
            Some(v) => std::env::set_var(var, v),
            None => std::env::remove_var(var),
        }
        let config = Config::from_toml_str(&text).unwrap();
        async move {
            RateLimit::builder(config)
                .routes_in(module_path!())
                .build()
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    let unset = start(None).await.unwrap_err();
    assert!(
        unset.contains(&format!(
            "[service] id_secret_env: the environment variable {var} is not set"
        )),
        "{unset}"
    );
    let empty = start(Some("")).await.unwrap_err();
    assert!(unset.contains("at least 32 bytes"), "{unset}");
    assert!(
        empty.contains(&format!("the environment variable {var} is empty")),
        "{empty}"
    );
    let short = start(Some("only-31-bytes-of-secret-0123456")).await.unwrap_err();
    assert!(
        short.contains(&format!(
            "[service] id_secret_env: {var}: the client id secret is 31 bytes; at least 32"
        )),
        "{short}"
    );
    start(Some("exactly-32-bytes-of-secret-01234")).await.unwrap();
    std::env::remove_var(var);
}

/// A service that knows partners (keys below 100), answering after 50 ms.
struct SlowPartners;

impl ratelimit::service::LimitService for SlowPartners {
    async fn lookup(&self, key: u64) -> Result<Option<ServiceAnswer>, ratelimit::service::ServiceError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok((key < 100).then(|| ServiceAnswer::Tier { tier: "partner".into() }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_inventing_keys_cannot_starve_a_partners_refresh() {
    // Every lookup takes 50 ms, so a client inventing keys (each a miss)
    // faster than 64 per 50 ms holds every fetch slot. A partner's answer,
    // fresh for 100 ms and usable 400 ms more, must still get refreshed.
    let settings = settings()
        .with_ttl(Duration::from_millis(100))
        .with_negative_ttl(Duration::from_secs(60))
        .with_max_stale(Duration::from_millis(400))
        .with_max_entries(100_000);
    let cache = Arc::new(ServiceCache::new(SlowPartners, settings).unwrap());
    cache.get(7);
    eventually(|| cache.get(7)).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let (cache, stop) = (Arc::clone(&cache), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k += 1;
                cache.get(1_000_000 + k);
                if k.is_multiple_of(64) {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    // The partner asks every 20 ms, for 1 s (twice its usable window).
    let mut lost = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        lost += usize::from(cache.get(7).is_none());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flood.await.unwrap();
    assert_eq!(lost, 0, "the partner lost its tier in {lost} of 50 requests");
}

/// Review: the refresh reserve is `max / 4` slots, none below four: with
/// `max_in_flight = 2` (or 3), invented keys still hold every slot and the
/// partner's refresh starves as before the reserve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_a_small_max_in_flight_still_reserves_a_refresh_slot() {
    let settings = settings()
        .with_ttl(Duration::from_millis(100))
        .with_negative_ttl(Duration::from_secs(60))
        .with_max_stale(Duration::from_millis(400))
        .with_max_entries(100_000)
        .with_max_in_flight(2);
    let cache = Arc::new(ServiceCache::new(SlowPartners, settings).unwrap());
    cache.get(7);
    eventually(|| cache.get(7)).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let (cache, stop) = (Arc::clone(&cache), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k += 1;
                cache.get(1_000_000 + k);
                if k.is_multiple_of(64) {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let mut lost = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        lost += usize::from(cache.get(7).is_none());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flood.await.unwrap();
    assert_eq!(lost, 0, "the partner lost its tier in {lost} of 50 requests");
}

/// What `ratelimit_service_cache_total` and `ratelimit_service_requests_total`
/// export: every read and every lookup, by result, against a real server
/// that answers, does not know the client, fails, then hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_counts_reads_and_lookups_by_result() {
    let up = Stub::start(
        "/v1/limits",
        Reply::Json(r#"{"tier": "premium"}"#.into()),
        Duration::ZERO,
    )
    .await;
    let cache = ServiceCache::new(HttpLimitService::new(&up.url).unwrap(), settings()).unwrap();
    assert_eq!(cache.get(1), None, "a miss");
    eventually(|| cache.get(1)).await; // misses until the answer lands, then a hit
    let s = cache.stats();
    assert_eq!((s.answers, s.no_answers, s.errors, s.timeouts), (1, 0, 0, 0), "{s:?}");
    assert!(s.hits >= 1 && s.misses >= 1, "{s:?}");
    assert_eq!(s.entries, 1);

    // Past the TTL: a stale read (served) starts a refresh.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(cache.get(1).is_some(), "stale, still served");
    assert_eq!(cache.stats().stale, 1);
    // Its refresh lands before the service changes its answers: each step
    // below has exactly one lookup in flight.
    eventually(|| (cache.stats().answers == 2).then_some(())).await;

    up.set(Reply::Status(404));
    assert_eq!(cache.get(2), None);
    eventually(|| (cache.stats().no_answers == 1).then_some(())).await;
    up.set(Reply::Status(500));
    assert_eq!(cache.get(3), None);
    eventually(|| (cache.stats().errors == 1).then_some(())).await;
    up.set(Reply::Hang);
    assert_eq!(cache.get(4), None);
    eventually(|| (cache.stats().timeouts == 1).then_some(())).await;
    let s = cache.stats();
    assert_eq!((s.answers, s.no_answers, s.errors, s.timeouts), (2, 1, 1, 1), "{s:?}");
    assert_eq!(s.lookups_failed(), cache.lookup_errors(), "{s:?}");
    assert_eq!(s.entries, 4, "answers and remembered misses");
}
