//! Forged, expired and malformed tokens are anonymous; good ones verify.

use std::time::Duration;

use base64::Engine as _;
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
use ratelimit::jwt::{bearer_token, JwtVerifier, MAX_TOKEN_LEN};
use serde_json::{json, Value};

const SECRET: &[u8] = b"test-secret-of-reasonable-length";
const RSA_PRIVATE: &[u8] = include_bytes!("../fixtures/rsa_private.pem");
const RSA2_PRIVATE: &[u8] = include_bytes!("../fixtures/rsa2_private.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("../fixtures/rsa_public.pem");
const JWKS: &str = include_str!("../fixtures/jwks.json");

fn in_ten_minutes() -> u64 {
    get_current_timestamp() + 600
}

fn hs256(claims: &Value, secret: &[u8]) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

fn rs256(claims: &Value, private_pem: &[u8], kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, &EncodingKey::from_rsa_pem(private_pem).unwrap()).unwrap()
}

fn b64(json: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
}

#[test]
fn a_good_token_verifies_and_is_cached() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap();
    let token = hs256(&json!({"sub": "u1", "exp": in_ten_minutes(), "org": {"id": 7}}), SECRET);
    let claims = v.verify(&token).expect("valid");
    assert_eq!(claims.get_text("org.id").as_deref(), Some("7"));
    assert_eq!(v.verify(&token), Some(claims), "a second verification (cached) agrees");
    // Not yet valid (nbf an hour ahead, beyond the leeway): refused.
    let later = hs256(
        &json!({"sub": "u1", "exp": in_ten_minutes(), "nbf": get_current_timestamp() + 3600}),
        SECRET,
    );
    assert!(v.verify(&later).is_none());
}

#[test]
fn forged_tokens_are_anonymous() {
    let hmac = JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap();
    let rsa = JwtVerifier::pem(RSA_PUBLIC, Algorithm::RS256).unwrap();
    let good = json!({"sub": "u1", "exp": in_ten_minutes(), "ratelimit_tier": "premium"});

    // alg: none, with and without a signature part.
    let none = format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(&good));
    assert!(hmac.verify(&none).is_none());
    assert!(rsa.verify(&none).is_none());
    assert!(hmac.verify(none.trim_end_matches('.')).is_none());
    // HS256 signed with the RSA public key as the HMAC secret (key confusion).
    let confused = hs256(&good, RSA_PUBLIC);
    assert!(rsa.verify(&confused).is_none());
    // The wrong secret, and the wrong RSA key.
    assert!(hmac.verify(&hs256(&good, b"another-secret-of-some-length")).is_none());
    assert!(rsa.verify(&rs256(&good, RSA2_PRIVATE, None)).is_none());
    // An RS256 token offered to an HMAC verifier.
    assert!(hmac.verify(&rs256(&good, RSA_PRIVATE, None)).is_none());
    // A tampered payload.
    let token = hs256(&good, SECRET);
    let mut parts: Vec<&str> = token.split('.').collect();
    let raised = b64(&json!({"sub": "u1", "exp": in_ten_minutes(), "ratelimit_tier": "unlimited"}));
    parts[1] = &raised;
    assert!(hmac.verify(&parts.join(".")).is_none());
}

#[test]
fn expiry_issuer_and_audience() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .leeway(Duration::from_secs(30));
    let now = get_current_timestamp();
    assert!(
        v.verify(&hs256(&json!({"sub": "u", "exp": now - 120}), SECRET))
            .is_none(),
        "expired beyond leeway"
    );
    assert!(
        v.verify(&hs256(&json!({"sub": "u", "exp": now - 5}), SECRET)).is_some(),
        "within leeway"
    );
    assert!(
        v.verify(&hs256(&json!({"sub": "u"}), SECRET)).is_none(),
        "exp is required"
    );
    assert!(v
        .verify(&hs256(&json!({"sub": "u", "exp": "tomorrow"}), SECRET))
        .is_none());

    let strict = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .issuer(&["https://auth.example"])
        .audience(&["api"]);
    let exp = in_ten_minutes();
    let ok = json!({"sub": "u", "exp": exp, "iss": "https://auth.example", "aud": "api"});
    assert!(strict.verify(&hs256(&ok, SECRET)).is_some());
    for bad in [
        json!({"sub": "u", "exp": exp, "iss": "https://evil.example", "aud": "api"}),
        json!({"sub": "u", "exp": exp, "iss": "https://auth.example", "aud": "other"}),
        json!({"sub": "u", "exp": exp, "aud": "api"}),
        json!({"sub": "u", "exp": exp, "iss": "https://auth.example"}),
    ] {
        assert!(strict.verify(&hs256(&bad, SECRET)).is_none(), "{bad}");
    }
}

/// Entra ID publishes RSA keys without `alg`: such a key verifies RS256
/// tokens (what its key type implies), pinned like a written one, so a token
/// claiming another algorithm with it is refused.
#[test]
fn a_jwks_key_without_alg_is_pinned_to_what_its_type_implies() {
    let mut entra: Value = serde_json::from_str(JWKS).unwrap();
    for key in entra["keys"].as_array_mut().unwrap() {
        key.as_object_mut().unwrap().remove("alg");
    }
    let v = JwtVerifier::jwks(&entra.to_string()).unwrap();
    let claims = json!({"sub": "u", "exp": in_ten_minutes()});
    assert!(v.verify(&rs256(&claims, RSA_PRIVATE, Some("key-1"))).is_some());
    let mut ps256 = Header::new(Algorithm::PS256);
    ps256.kid = Some("key-1".to_owned());
    let other_alg = encode(&ps256, &claims, &EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap()).unwrap();
    assert!(v.verify(&other_alg).is_none());
    assert!(
        v.verifications().contains(&("bad_signature", 1)),
        "{:?}",
        v.verifications()
    );
}

/// Each token the verifier checks is counted by what it found, so a
/// misconfigured issuer or audience shows in a metric rather than every user
/// quietly becoming anonymous; an issuer matches with or without its
/// trailing slash, as providers write it either way.
#[test]
fn verification_outcomes_are_counted_and_issuers_match_with_or_without_a_slash() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .issuer(&["https://tenant.auth.example"])
        .audience(&["api"]);
    let exp = in_ten_minutes();
    let now = get_current_timestamp();
    let token = |claims: Value| hs256(&claims, SECRET);
    // The provider writes its issuer with a slash; the config without.
    assert!(v
        .verify(&token(
            json!({"sub": "a", "exp": exp, "iss": "https://tenant.auth.example/", "aud": "api"})
        ))
        .is_some());
    assert!(v
        .verify(&token(
            json!({"sub": "b", "exp": exp, "iss": "https://tenant.auth.example", "aud": "api"})
        ))
        .is_some());
    // And a config written with the slash accepts the bare one.
    let slashed = JwtVerifier::hmac(SECRET, Algorithm::HS256)
        .unwrap()
        .issuer(&["https://tenant.auth.example/"]);
    assert!(slashed
        .verify(&token(
            json!({"sub": "c", "exp": exp, "iss": "https://tenant.auth.example"})
        ))
        .is_some());
    // Not a prefix match: another path is another issuer.
    assert!(v
        .verify(&token(
            json!({"sub": "d", "exp": exp, "iss": "https://tenant.auth.example/x", "aud": "api"})
        ))
        .is_none());
    assert!(v
        .verify(&token(
            json!({"sub": "e", "exp": exp, "iss": "https://tenant.auth.example", "aud": "web"})
        ))
        .is_none());
    assert!(v
        .verify(&token(
            json!({"sub": "f", "exp": now - 600, "iss": "https://tenant.auth.example", "aud": "api"})
        ))
        .is_none());
    assert!(v
        .verify(&token(
            json!({"sub": "g", "exp": exp, "nbf": now + 600, "iss": "https://tenant.auth.example", "aud": "api"})
        ))
        .is_none());
    assert!(v
        .verify(&hs256(
            &json!({"sub": "h", "exp": exp}),
            b"another-secret-of-some-length"
        ))
        .is_none());
    assert!(v.verify("not.a.token").is_none());
    // A cached verified token is not checked, nor counted, again.
    assert!(v
        .verify(&token(
            json!({"sub": "a", "exp": exp, "iss": "https://tenant.auth.example/", "aud": "api"})
        ))
        .is_some());
    assert_eq!(
        v.verifications(),
        [
            ("verified", 2),
            ("expired", 1),
            ("not_yet_valid", 1),
            ("wrong_issuer", 1),
            ("wrong_audience", 1),
            ("unknown_key", 0),
            ("bad_signature", 1),
            ("malformed", 1),
            ("not_checked", 0),
        ]
    );
}

#[test]
fn jwks_pins_the_algorithm_per_kid() {
    let v = JwtVerifier::jwks(JWKS).unwrap();
    let claims = json!({"sub": "u", "exp": in_ten_minutes()});
    assert!(v.verify(&rs256(&claims, RSA_PRIVATE, Some("key-1"))).is_some());
    assert!(v.verify(&rs256(&claims, RSA2_PRIVATE, Some("key-2"))).is_some());
    // Signed by key 2 but claiming key 1; an unknown kid; no kid.
    assert!(v.verify(&rs256(&claims, RSA2_PRIVATE, Some("key-1"))).is_none());
    assert!(v.verify(&rs256(&claims, RSA_PRIVATE, Some("key-9"))).is_none());
    assert!(v.verify(&rs256(&claims, RSA_PRIVATE, None)).is_none());
    // HS256 under a known kid, signed with that key's public PEM.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("key-1".into());
    let confused = encode(&header, &claims, &EncodingKey::from_secret(RSA_PUBLIC).unwrap()).unwrap();
    assert!(v.verify(&confused).is_none());
}

#[test]
fn garbage_and_huge_tokens_are_anonymous_and_never_panic() {
    let v = JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap();
    let j = JwtVerifier::jwks(JWKS).unwrap();
    let huge_b64 = "A".repeat(MAX_TOKEN_LEN);
    let big_claim = hs256(
        &json!({"sub": "u", "exp": in_ten_minutes(), "pad": "x".repeat(MAX_TOKEN_LEN)}),
        SECRET,
    );
    for t in [
        "",
        ".",
        "..",
        "a.b.c",
        "not a token",
        "eyJhbGciOiJIUzI1NiJ9",
        "eyJhbGciOiJIUzI1NiJ9.e30.",
        "\u{0}\u{1}\u{2}",
        "é.é.é",
        huge_b64.as_str(),
        big_claim.as_str(),
    ] {
        assert!(v.verify(t).is_none(), "{:.40}", t);
        assert!(j.verify(t).is_none(), "{:.40}", t);
    }
}

#[test]
fn bad_key_configuration_is_refused_with_a_reason() {
    assert!(JwtVerifier::hmac(b"short", Algorithm::HS256)
        .unwrap_err()
        .to_string()
        .contains("16 bytes"));
    assert!(JwtVerifier::hmac(SECRET, Algorithm::RS256).is_err());
    assert!(JwtVerifier::pem(b"not a pem", Algorithm::RS256).is_err());
    assert!(JwtVerifier::pem(RSA_PUBLIC, Algorithm::HS256).is_err());
    // An EC key of a curve no algorithm is implied for, without `alg`.
    let no_alg = r#"{"keys":[{"kty":"EC","kid":"k","crv":"P-521","x":"AQAB","y":"AQAB"}]}"#;
    let refused = JwtVerifier::jwks(no_alg).unwrap_err().to_string();
    assert!(refused.contains("no `alg`, and its key type implies none"), "{refused}");
    // A published symmetric key is never used.
    let oct = r#"{"keys":[{"kty":"oct","kid":"s","alg":"HS256","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQ"}]}"#;
    assert!(JwtVerifier::jwks(oct).unwrap_err().to_string().contains("symmetric"));
    // Unusable keys beside good ones are skipped, not fatal.
    let mut mixed: serde_json::Value = serde_json::from_str(JWKS).unwrap();
    mixed["keys"]
        .as_array_mut()
        .unwrap()
        .push(json!({"kty": "RSA", "kid": "enc-1", "use": "enc", "alg": "RSA-OAEP", "n": "AQAB", "e": "AQAB"}));
    mixed["keys"]
        .as_array_mut()
        .unwrap()
        .push(json!({"kty": "oct", "kid": "s", "alg": "HS256", "k": "c2VjcmV0"}));
    let v = JwtVerifier::jwks(&mixed.to_string()).unwrap();
    assert!(v
        .verify(&rs256(
            &json!({"sub": "u", "exp": in_ten_minutes()}),
            RSA_PRIVATE,
            Some("key-1")
        ))
        .is_some());
    assert!(JwtVerifier::jwks(r#"{"keys":[]}"#).is_err());
    let err = JwtVerifier::hmac_from_env("RATELIMIT_TEST_SURELY_UNSET_SECRET", Algorithm::HS256).unwrap_err();
    assert!(err.to_string().contains("RATELIMIT_TEST_SURELY_UNSET_SECRET"), "{err}");
}

#[test]
fn bearer_tokens_from_requests() {
    let parts = |values: &[&str]| {
        let mut b = http::Request::builder();
        for v in values {
            b = b.header("authorization", *v);
        }
        b.body(()).unwrap().into_parts().0
    };
    assert_eq!(bearer_token(&parts(&["Bearer abc.def.ghi"])), Some("abc.def.ghi"));
    assert_eq!(bearer_token(&parts(&["bearer  abc"])), Some("abc"));
    assert_eq!(bearer_token(&parts(&["Basic dXNlcjpwYXNz"])), None);
    assert_eq!(
        bearer_token(&parts(&["Bearer a", "Bearer b"])),
        None,
        "two headers: neither"
    );
    assert_eq!(bearer_token(&parts(&[])), None);
}

/// Through the key extractor and the `jwt` step: each forged token gets
/// the address key and the default limit; a good one gets its claim key and
/// its tier.
#[test]
fn forged_tokens_get_the_ip_key_and_the_default_limit() {
    use ratelimit::config::Config;
    use ratelimit::key::{ClientIpConfig, ClientKey, JwtClaimKey, PeerAddr};
    use ratelimit::resolve::{JwtTier, ResolveContext, Resolver};
    use std::sync::Arc;

    let config = Config::from_toml_str(
        "default_profile = \"anon\"\n[profiles.anon]\nrate = \"10/min\"\n[profiles.premium]\nrate = \"1000/min\"\n\
         [jwt]\nmax_rate = \"1000/min\"\nmax_burst = 100\n",
    )
    .unwrap();
    let verifier = Arc::new(
        JwtVerifier::hmac(SECRET, Algorithm::HS256)
            .unwrap()
            .issuer(&["https://auth.example"])
            .audience(&["api"]),
    );
    let key = JwtClaimKey::new("sub", verifier, ClientIpConfig::default());
    let decide = |auth: &str| {
        let (mut p, ()) = http::Request::builder()
            .header("authorization", auth)
            .body(())
            .unwrap()
            .into_parts();
        p.extensions.insert(PeerAddr("203.0.113.50:443".parse().unwrap()));
        let (k, claims) = key.extract(&p);
        // The `jwt` step, else (passed) the default profile.
        let resolved = JwtTier.resolve(&ResolveContext::new(&config, "me", claims.as_ref()));
        (k, resolved.map_or(config.default_quota().count(), |r| r.quota.count()))
    };

    let premium = json!({"sub": "u1", "exp": in_ten_minutes(), "iss": "https://auth.example", "aud": "api",
                         "ratelimit_tier": "premium", "ratelimit_rpm": 1000});
    let (k, count) = decide(&format!("Bearer {}", hs256(&premium, SECRET)));
    assert!(matches!(k, ClientKey::Claim(_)));
    assert_eq!(count, 1000);

    let now = get_current_timestamp();
    let huge = format!("Bearer {}", "QUFB".repeat(2048));
    let forged = [
        format!("Bearer {}.{}.", b64(&json!({"alg": "none"})), b64(&premium)),
        format!("Bearer {}", hs256(&premium, RSA_PUBLIC)),
        format!("Bearer {}", hs256(&premium, b"a-wrong-secret-of-enough-length")),
        format!(
            "Bearer {}",
            hs256(
                &json!({"sub": "u1", "exp": now - 3600, "ratelimit_tier": "premium"}),
                SECRET
            )
        ),
        format!(
            "Bearer {}",
            hs256(&json!({"sub": "u1", "ratelimit_tier": "premium"}), SECRET)
        ),
        format!("Bearer {}", rs256(&premium, RSA_PRIVATE, Some("key-9"))),
        format!(
            "Bearer {}",
            hs256(
                &json!({"sub": "u1", "exp": in_ten_minutes(), "iss": "https://evil.example",
                                            "aud": "api", "ratelimit_tier": "premium"}),
                SECRET
            )
        ),
        format!(
            "Bearer {}",
            hs256(
                &json!({"sub": "u1", "exp": in_ten_minutes(), "iss": "https://auth.example",
                                            "aud": "other", "ratelimit_tier": "premium"}),
                SECRET
            )
        ),
        "Bearer garbage".to_owned(),
        huge,
        "Basic dXNlcjpwYXNz".to_owned(),
    ];
    for auth in &forged {
        let (k, count) = decide(auth);
        assert_eq!(k, ClientKey::Ip("203.0.113.50".parse().unwrap()), "{auth:.60}");
        assert_eq!(count, 10, "{auth:.60}: a forged token raised the limit");
    }
}

/// Through a real router, a `[[rules]]` entry keyed by a verified `sub`: the
/// anonymous profile has a burst of 2000, the premium tier 5000, so the
/// `RateLimit-Limit` header says whether a token verified.
const FLOOD_CONFIG: &str = r#"
default_profile = "anon"
[profiles.anon]
rate = "60000/min"
burst = 2000
[profiles.premium]
rate = "600000/min"
burst = 5000
[jwt]
max_rate = "600000/min"
max_burst = 5000
pem_file = "PEM"
algorithm = "RS256"
max_failed_per_second = 100
[[rules]]
name = "me"
path = "/{*rest}"
key = "jwt_claim:sub"
resolve = ["jwt", "default"]
"#;

/// A well-formed RS256 token that no key signed: a premium tier claim and a
/// signature of random-looking bytes, distinct for each `i` (what a flood
/// costs its sender: nothing; what it costs a verifier: a full RSA check).
fn forged_rs256(i: u64) -> String {
    let header = b64(&json!({"alg": "RS256", "typ": "JWT"}));
    let claims = b64(&json!({"sub": format!("victim-{i}"), "exp": in_ten_minutes(), "ratelimit_tier": "premium"}));
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut sig = vec![0u8; 256];
    for b in sig.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    sig[0] = 0x01; // below the modulus: the check runs to the end
    let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig);
    format!("{header}.{claims}.{sig}")
}

/// Distinct well-formed forged RS256 tokens flooding from one address cost
/// at most the address's share of failed signature checks (10 per minute)
/// and the upper half of the process budget (`max_failed_per_second`, 100
/// here), not one check each; past them, that address's tokens are
/// anonymous without a check. A good token the flooding address had
/// verified before stays verified (cached); a good client elsewhere is
/// unaffected; one forged token repeated costs one check (negative cache).
#[tokio::test]
async fn a_forged_token_flood_costs_a_bounded_number_of_signature_checks() {
    use axum::body::Body;
    use axum::routing::get;
    use ratelimit::axum::RateLimit;
    use ratelimit::config::Config;
    use ratelimit::key::PeerAddr;
    use tower::ServiceExt;

    const FLOOD: u64 = 1000;
    let pem = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rsa_public.pem");
    let config = Config::from_toml_str(&FLOOD_CONFIG.replace("PEM", pem)).unwrap();
    let rl = RateLimit::builder(config)
        .routes_in(module_path!())
        .clock(ratelimit::ManualClock::new())
        .build()
        .await
        .unwrap();
    let app = axum::Router::new()
        .route("/me", get(|| async { "me" }))
        .layer(rl.layer());
    let send = |token: String, peer: &'static str| {
        let app = app.clone();
        async move {
            let mut req = http::Request::get("/me")
                .header("authorization", format!("Bearer {token}"))
                .body(Body::empty())
                .unwrap();
            req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
            let res = app.oneshot(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.headers()["ratelimit-limit"].to_str().unwrap().to_owned()
        }
    };
    let checks = || rl.jwt_verifier().expect("[jwt] pem_file").signature_checks();
    let premium = |sub: &str| json!({"sub": sub, "exp": in_ten_minutes(), "ratelimit_tier": "premium"});
    const FLOODER: &str = "203.0.113.9:5000";

    let good_early = rs256(&premium("early"), RSA_PRIVATE, None);
    assert_eq!(send(good_early.clone(), FLOODER).await, "5000", "a good token verifies");

    let before = checks();
    let start = std::time::Instant::now();
    for i in 0..FLOOD {
        assert_eq!(
            send(forged_rs256(i), FLOODER).await,
            "2000",
            "a forged token is anonymous"
        );
    }
    let elapsed = start.elapsed();
    let flood_checks = checks() - before;
    println!("{FLOOD} distinct forged RS256 tokens from one address in {elapsed:?}: {flood_checks} signature checks");
    // Its share (10), then the process budget down to its half (50 of
    // 100), plus what the process budget refilled meanwhile (100 a second).
    let bound = 50 + (elapsed.as_secs_f64() * 100.0).ceil() as u64;
    assert!(
        flood_checks <= bound,
        "{flood_checks} signature checks for {FLOOD} forged tokens from one address (bound {bound})"
    );

    assert_eq!(
        send(good_early, FLOODER).await,
        "5000",
        "a token the flooding address had verified stays verified (cached)"
    );
    assert_eq!(
        send(rs256(&premium("elsewhere"), RSA_PRIVATE, None), "198.51.100.7:5000").await,
        "5000",
        "a good client at another address is unaffected"
    );
    // One token, made once: its `exp` is the clock's, so one made per request
    // is another token when a second passes between two of them.
    let repeated = forged_rs256(FLOOD + 1);
    let before = checks();
    for _ in 0..50 {
        assert_eq!(send(repeated.clone(), "192.0.2.44:5000").await, "2000");
    }
    assert_eq!(
        checks() - before,
        1,
        "one forged token repeated costs one signature check"
    );
}

/// Issue 26, item 1, measured: what a flood of distinct forged RS256 tokens
/// costs a verifier with the default budget (10 failed checks per address,
/// 100 per network, a quarter of that per subnet, 1,000 a second for the
/// process), from 1, 100 and 10,000 networks, in real time; and whether a
/// valid token, first seen during the flood, verifies from the flooding
/// address, from another subnet of a flooding network, and from elsewhere.
#[test]
fn failed_check_budget_under_floods() {
    const FLOOD_FOR: Duration = Duration::from_millis(1_500);
    let mut report = Vec::new();
    for networks in [1u32, 100, 10_000] {
        let v = JwtVerifier::pem(RSA_PUBLIC, Algorithm::RS256).unwrap();
        // Network n is 2001:db8:n::/48 (as /48s: n in the third group and
        // the second); each network floods from one address, its first /64.
        let network = |n: u32| [0x2001, 0x0db8 + (n >> 16) as u16, n as u16];
        let addr = |n: u32, sub: u16| {
            let [a, b, c] = network(n);
            std::net::IpAddr::from([a, b, c, sub, 0, 0, 0, 1])
        };
        let mut valid = [0u32; 3];
        let mut tries = 0u32;
        let mut sent = 0u64;
        let start = std::time::Instant::now();
        let mut i = 0u64;
        while start.elapsed() < FLOOD_FOR {
            let n = (i % u64::from(networks)) as u32;
            assert!(v.verify_from(&forged_rs256(i), Some(addr(n, 0))).is_none());
            sent += 1;
            i += 1;
            // Every 2,000 forgeries, a fresh valid token from each place.
            if i.is_multiple_of(2_000) {
                tries += 1;
                let places = [addr(0, 0), addr(0, 0x0200), addr(0x00ff_ffff, 1)];
                for (k, place) in places.into_iter().enumerate() {
                    let token = rs256(
                        &json!({"sub": format!("valid-{tries}-{k}"), "exp": in_ten_minutes()}),
                        RSA_PRIVATE,
                        None,
                    );
                    valid[k] += u32::from(v.verify_from(&token, Some(place)).is_some());
                }
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        // The valid tokens' own checks are not failures, but count here.
        let failed = v.signature_checks() - u64::from(tries) * 3;
        let per_second = failed as f64 / elapsed;
        report.push(format!(
            "{networks:>6} networks: {sent:>7} forged in {elapsed:.1} s, {failed:>5} failed checks ({per_second:>5.0}/s); \
             valid tokens verified: flooding address {}/{tries}, another /56 of its /48 {}/{tries}, elsewhere {}/{tries}",
            valid[0], valid[1], valid[2]
        ));
        // The process budget bounds the checks whatever the number of
        // networks: 1,000 at once and 1,000 a second.
        let bound = 1_000.0 + 1_000.0 * elapsed;
        assert!(
            (failed as f64) <= bound,
            "{networks} networks: {failed} checks > {bound}"
        );
        // From one network, the flood cannot take the process budget
        // below half: a valid token from elsewhere, within its share,
        // always verifies. (From many networks, each within its share,
        // the flood can spend all of it: the report says how often.)
        if networks == 1 {
            assert_eq!(valid[2], tries, "one network: a valid token from elsewhere");
            assert_eq!(valid[1], tries, "one network: a valid token from another /56 of it");
        }
    }
    for line in &report {
        println!("{line}");
    }
}
