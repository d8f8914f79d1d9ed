//! The verifier's unit tests: the failed-check budget and the caches.

use super::JwtVerifier;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use std::net::IpAddr;
use std::time::Duration;

const SECRET: &[u8] = b"unit-test-secret-of-some-length";

fn token(sub: &str, secret: &[u8]) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    let claims = serde_json::json!({"sub": sub, "exp": exp});
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

fn ip(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

/// Review (h-headers): a leeway longer than the time since 1970 (a
/// config typo such as `leeway = "500000h"`, accepted at load) reaches
/// jsonwebtoken's `now - leeway` (u64): a debug build panics there, a
/// release build wraps and refuses every valid token as expired.
#[test]
fn review_a_leeway_longer_than_the_epoch_still_verifies_a_valid_token() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .leeway(Duration::from_secs(500_000 * 3600));
    assert!(v.verify(&token("u", SECRET)).is_some());
}

#[test]
fn only_failures_use_the_budget() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .failed_checks_per_ip(2, Duration::from_secs(60), 100);
    // Twenty distinct good tokens from one address (a NAT): all verify.
    // (Kept: minting "u0" again a second later would give another
    // token, `exp` being part of it, and the test would flake.)
    let good: Vec<String> = (0..20).map(|i| token(&format!("u{i}"), SECRET)).collect();
    for t in &good {
        assert!(v.verify_from(t, ip("192.0.2.1")).is_some());
    }
    for i in 0..20 {
        assert!(v
            .verify_from(
                &token(&format!("f{i}"), b"wrong-secret-of-some-length-too"),
                ip("192.0.2.1")
            )
            .is_none());
    }
    assert_eq!(v.signature_checks(), 22, "20 good, then 2 failures, then none");
    assert_eq!(v.budget_refusals(), 18);
    // Other addresses, and the unbudgeted `verify`, are unaffected.
    assert!(v.verify_from(&token("other", SECRET), ip("192.0.2.2")).is_some());
    assert!(v.verify(&token("direct", SECRET)).is_some());
    // Past its budget, the address's new good tokens wait too (the
    // trade-off); its cached ones still verify.
    assert!(v.verify_from(&token("new", SECRET), ip("192.0.2.1")).is_none());
    assert!(v.verify_from(&good[0], ip("192.0.2.1")).is_some());
}

#[test]
fn the_budget_refills_over_its_window() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .failed_checks_per_ip(2, Duration::from_millis(200), 100);
    let bad = |i: u32| token(&format!("f{i}"), b"wrong-secret-of-some-length-too");
    for i in 0..5 {
        assert!(v.verify_from(&bad(i), ip("2001:db8::")).is_none());
    }
    assert_eq!(v.signature_checks(), 2);
    std::thread::sleep(Duration::from_millis(150)); // at least one unit back (100 ms each)
    for i in 5..10 {
        assert!(v.verify_from(&bad(i), ip("2001:db8::")).is_none());
    }
    let checks = v.signature_checks();
    assert!((3..=4).contains(&checks), "{checks}");
}

#[test]
fn a_failed_token_is_checked_once() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap();
    let forged = token("x", b"wrong-secret-of-some-length-too");
    for _ in 0..100 {
        assert!(v.verify(&forged).is_none());
    }
    assert_eq!(v.signature_checks(), 1);
    // A token not yet valid (`nbf` ahead) is not remembered as failed.
    let now = jsonwebtoken::get_current_timestamp();
    let claims = serde_json::json!({"sub": "s", "exp": now + 600, "nbf": now + 300});
    let early = encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET).unwrap(),
    )
    .unwrap();
    assert!(v.verify(&early).is_none());
    assert!(v.verify(&early).is_none());
    assert_eq!(v.signature_checks(), 3);
}

#[test]
fn one_48_cannot_make_every_new_clients_token_anonymous() {
    // Default budget: 10 failed checks per address per minute, 10,000
    // addresses tracked. One forged token puts an address in debt for
    // 6 s, so one IPv6 /48 (65,536 /64s, each its own address as
    // limited) sending one forged token from each of 12,000 /64s (12,000
    // cheap requests, repeated every 6 s) fills the table and spends
    // every shard's shared overflow budget. A good client from another
    // network, with a fresh valid token, must still be verified.
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap();
    for i in 0..12_000u32 {
        let addr = IpAddr::from([0x2001, 0x0db8, 0xaaaa, i as u16, 0, 0, 0, 0]);
        let forged = format!("eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.forged{i}");
        assert!(v.verify_from(&forged, Some(addr)).is_none());
    }
    let good = token("alice", SECRET);
    assert!(
        v.verify_from(&good, ip("2001:db8:bbbb:1::")).is_some(),
        "a client of another network is anonymous after one network's flood ({} refused unchecked)",
        v.budget_refusals()
    );
}

#[test]
fn a_table_full_of_addresses_bounds_the_rest_together() {
    // One address per shard, then every new address shares its shard's
    // overflow budget: a flood from many addresses is bounded too.
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .failed_checks_per_ip(1, Duration::from_secs(60), 1);
    for i in 0..2000u32 {
        let addr = IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
        assert!(v
            .verify_from(&token(&format!("f{i}"), b"wrong-secret-of-some-length-too"), Some(addr))
            .is_none());
    }
    let checks = v.signature_checks();
    assert!(checks <= 2 * super::CACHE_SHARDS as u64, "{checks}");
}
