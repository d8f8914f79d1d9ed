//! A JWKS URL: random `kid`s cannot make the verifier fetch more than once
//! per cooldown, a down endpoint leaves known keys working, and a rotation is
//! picked up in the background.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::stub::{Reply, Stub};
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
use ratelimit::jwt::{JwksSettings, JwtVerifier};
use serde_json::{json, Value};

const RSA_PRIVATE: &[u8] = include_bytes!("../fixtures/rsa_private.pem");
const RSA2_PRIVATE: &[u8] = include_bytes!("../fixtures/rsa2_private.pem");
const JWKS: &str = include_str!("../fixtures/jwks.json");

/// The fixture JWKS with only its first key.
fn first_key_only() -> String {
    let mut set: Value = serde_json::from_str(JWKS).unwrap();
    set["keys"].as_array_mut().unwrap().truncate(1);
    set.to_string()
}

fn token(private: &[u8], kid: &str) -> String {
    static NONCE: AtomicUsize = AtomicUsize::new(0);
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    // A nonce: every token differs, so no answer comes from the token cache.
    let jti = NONCE.fetch_add(1, Ordering::Relaxed);
    let claims = json!({"sub": "u", "exp": get_current_timestamp() + 600, "jti": jti});
    encode(&header, &claims, &EncodingKey::from_rsa_pem(private).unwrap()).unwrap()
}

async fn eventually(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn settings(cooldown_ms: u64) -> JwksSettings {
    JwksSettings {
        refresh_every: Duration::from_secs(3600),
        cooldown: Duration::from_millis(cooldown_ms),
        timeout: Duration::from_millis(500),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kids_cause_at_most_one_fetch_per_cooldown() {
    // Signing is slow; sign first, so the verifies below take far less
    // than the cooldown.
    let first: Vec<String> = (0..500).map(|i| token(RSA_PRIVATE, &format!("random-{i}"))).collect();
    let second: Vec<String> = (0..500).map(|i| token(RSA_PRIVATE, &format!("again-{i}"))).collect();
    let server = Stub::start("/.well-known/jwks.json", Reply::Json(first_key_only()), Duration::ZERO).await;
    let v = JwtVerifier::jwks_url(&server.url, settings(1_000)).await.unwrap();
    assert_eq!(server.hits(), 1, "the first fetch");
    // Within the cooldown of the first fetch: no fetch at all.
    for t in &first {
        assert!(v.verify(t).is_none());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.hits(), 1);
    // After the cooldown: one fetch for the next burst of unknown kids.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    for t in &second {
        assert!(v.verify(t).is_none());
    }
    eventually(|| server.hits() == 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.hits(), 2);
    assert_eq!(v.jwks_fetches(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_keys_keep_working_when_the_endpoint_is_down_and_rotations_arrive() {
    let server = Stub::start("/.well-known/jwks.json", Reply::Json(first_key_only()), Duration::ZERO).await;
    let v = JwtVerifier::jwks_url(&server.url, settings(50)).await.unwrap();
    let good = token(RSA_PRIVATE, "key-1");
    assert!(v.verify(&good).is_some());

    // Down: an unknown kid, past the cooldown, triggers a refresh that
    // fails; the known key stays.
    server.set(Reply::Status(503));
    let unknown = token(RSA2_PRIVATE, "key-2");
    tokio::time::sleep(Duration::from_millis(60)).await;
    eventually(|| v.verify(&unknown).is_none() && server.hits() >= 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        v.verify(&token(RSA_PRIVATE, "key-1")).is_some(),
        "stale keys are served"
    );

    // Back up with a rotated set: key-2 is picked up in the background.
    server.set(Reply::Json(JWKS.to_owned()));
    tokio::time::sleep(Duration::from_millis(60)).await; // past the cooldown
    let rotated = token(RSA2_PRIVATE, "key-2");
    eventually(|| v.verify(&rotated).is_some()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_jwks_url_that_fails_at_start_is_refused() {
    let server = Stub::start("/.well-known/jwks.json", Reply::Status(503), Duration::ZERO).await;
    let err = JwtVerifier::jwks_url(&server.url, settings(50)).await.unwrap_err();
    assert!(err.to_string().contains("503"), "{err}");
    assert!(JwtVerifier::jwks_url("https://example.invalid/jwks", settings(50))
        .await
        .is_err());
}

/// A key removed upstream stops verifying after the refresh interval even
/// while its token is only ever answered from the verifier's cache (the
/// staleness check ran on cache misses only, so a hot token kept a removed
/// key alive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_stops_verifying_even_for_cached_tokens() {
    let server = Stub::start("/.well-known/jwks.json", Reply::Json(JWKS.to_owned()), Duration::ZERO).await;
    let settings = JwksSettings {
        refresh_every: Duration::from_millis(200),
        ..settings(50)
    };
    let v = JwtVerifier::jwks_url(&server.url, settings).await.unwrap();
    let hot = token(RSA2_PRIVATE, "key-2");
    assert!(v.verify(&hot).is_some());
    server.set(Reply::Json(first_key_only()));
    eventually(|| v.verify(&hot).is_none()).await;
}

/// An identity provider briefly unavailable at deploy time (a 503, as a
/// restarting one answers) does not stop startup: it is asked again, and
/// the keys it then serves are used. A 404 (a wrong URL) is not retried,
/// and a provider that stays down stops startup saying how often it was
/// asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_asks_a_briefly_unavailable_jwks_again() {
    let server = std::sync::Arc::new(Stub::start("/.well-known/jwks.json", Reply::Status(503), Duration::ZERO).await);
    let flip = {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move {
            eventually(|| server.hits() >= 1).await;
            server.set(Reply::Json(first_key_only()));
        })
    };
    let v = JwtVerifier::jwks_url(&server.url, settings(1_000)).await.unwrap();
    flip.await.unwrap();
    assert_eq!(server.hits(), 2, "one 503, then the keys");
    assert_eq!(v.jwks_fetches(), 2);
    assert!(v.verify(&token(RSA_PRIVATE, "key-1")).is_some());

    let missing = Stub::start("/.well-known/jwks.json", Reply::Status(404), Duration::ZERO).await;
    let e = JwtVerifier::jwks_url(&missing.url, settings(1_000))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("status 404"), "{e}");
    assert_eq!(missing.hits(), 1, "a 404 is not asked again");

    let down = Stub::start("/.well-known/jwks.json", Reply::Status(503), Duration::ZERO).await;
    let e = JwtVerifier::jwks_url(&down.url, settings(1_000))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("status 503 Service Unavailable (tried 3 times)"), "{e}");
    assert_eq!(down.hits(), 3);
}

/// The fixture JWKS with its keys in the other order, and with `kid`
/// `key-1` given key-2's material.
fn reordered_and_swapped() -> (String, String) {
    let set: Value = serde_json::from_str(JWKS).unwrap();
    let mut reordered = set.clone();
    reordered["keys"].as_array_mut().unwrap().reverse();
    let mut swapped = set.clone();
    swapped["keys"][0]["n"] = set["keys"][1]["n"].clone();
    swapped["keys"][0]["e"] = set["keys"][1]["e"].clone();
    (reordered.to_string(), swapped.to_string())
}

/// A refresh forced by a token naming an unknown `kid`, finished: the
/// fetch is counted once its keys are in force.
async fn forced_refresh(v: &JwtVerifier, round: usize) {
    tokio::time::sleep(Duration::from_millis(60)).await; // past the cooldown
    let fetched = v.jwks_fetches();
    let unknown = token(RSA_PRIVATE, &format!("unknown-{round}"));
    eventually(|| v.verify(&unknown).is_none() && v.jwks_fetches() > fetched).await;
}

/// An unknown `kid` forces a refresh every cooldown (any client can send
/// one); a refresh that brings the same keys (here also in another order)
/// keeps the tokens verified under them cached, so it costs no client a
/// signature check. A changed set still ends them: a key removed, or a
/// `kid` whose material changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_with_the_same_keys_keeps_verified_tokens_cached() {
    let (reordered, swapped) = reordered_and_swapped();
    let server = Stub::start("/.well-known/jwks.json", Reply::Json(JWKS.to_owned()), Duration::ZERO).await;
    let v = JwtVerifier::jwks_url(&server.url, settings(50)).await.unwrap();
    let (hot, other) = (token(RSA_PRIVATE, "key-1"), token(RSA2_PRIVATE, "key-2"));
    assert!(v.verify(&hot).is_some() && v.verify(&other).is_some());
    assert_eq!(v.signature_checks(), 2);
    for (round, served) in [JWKS.to_owned(), reordered.clone(), JWKS.to_owned()]
        .into_iter()
        .enumerate()
    {
        server.set(Reply::Json(served));
        forced_refresh(&v, round).await;
        assert!(v.verify(&hot).is_some() && v.verify(&other).is_some());
        assert_eq!(
            v.signature_checks(),
            2,
            "refresh {round} brought the same keys, yet the cached tokens were checked again"
        );
    }
    assert_eq!(server.hits(), 4, "each forced refresh fetched");

    // key-2 removed: the set changed, the cache is emptied, key-1's token
    // is checked again (and verifies), key-2's no longer verifies.
    server.set(Reply::Json(first_key_only()));
    forced_refresh(&v, 10).await;
    assert!(v.verify(&hot).is_some());
    assert_eq!(v.signature_checks(), 3);
    assert!(v.verify(&other).is_none());
    // key-1's material replaced under the same kid: its cached token is
    // checked again, and fails.
    server.set(Reply::Json(swapped));
    forced_refresh(&v, 11).await;
    assert!(v.verify(&hot).is_none(), "a token of a replaced key stayed cached");
}
