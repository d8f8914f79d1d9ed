//! The limit service's unit tests: client ids and the cache.

use super::ServiceIdKey;
use crate::runtime::key::{Claim, ClientKey, Header, Ip, KeyContext, KeyHasher};

const SECRET: &[u8] = b"ratelimit-service-id-test-secret";

/// The vectors of `docs/http.md`, computed with Python's `hmac` module
/// (an independent implementation), so a limit service can check its code.
#[test]
fn documented_test_vectors() {
    let ids = ServiceIdKey::new(SECRET).unwrap();
    let cases: [(&[&[u8]], u64); 6] = [
        (&[b"claim:", b"sub", b"alice"], 0x0fe9_a6b8_ae5a_8ab8),
        (&[b"claim:", b"uid", b"42"], 0x892c_bad0_be4b_189e),
        (&[b"header:", b"x-api-key", b"key-a"], 0xae26_b4e4_0003_7401),
        (&[b"ip:", &[192, 0, 2, 1]], 0x0cd2_5fd4_c0d5_6f2d),
        (
            &[b"ip:", &[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]],
            0xf1ac_424a_268c_a2d8,
        ),
        (&[b"unknown"], 0x99f0_86c9_674e_3d17),
    ];
    for (fields, id) in cases {
        assert_eq!(ids.id_of_fields(fields), id, "{fields:?}");
    }
}

/// The built-in key sources write exactly the documented fields.
#[test]
fn key_sources_write_the_documented_fields() {
    let ids = ServiceIdKey::new(SECRET).unwrap();
    let hasher = KeyHasher::new();
    let (parts, ()) = http::Request::builder()
        .header("x-api-key", "  key-a ")
        .body(())
        .unwrap()
        .into_parts();
    let v4 = ClientKey::Ip("192.0.2.1".parse().unwrap());
    let cx = KeyContext::with_address(&parts, v4, &hasher);
    assert_eq!(ids.client_id(&Ip, &cx, &v4), 0x0cd2_5fd4_c0d5_6f2d);
    // A header key (its value trimmed), and its address fallback.
    let header = Header::from_static("x-api-key");
    assert_eq!(
        ids.client_id(&header, &cx, &ClientKey::Header(1)),
        0xae26_b4e4_0003_7401
    );
    assert_eq!(ids.client_id(&header, &cx, &v4), 0x0cd2_5fd4_c0d5_6f2d);
    let v6 = ClientKey::Ip("2001:db8:1:2::".parse().unwrap());
    assert_eq!(ids.client_id(&Ip, &cx, &v6), 0xf1ac_424a_268c_a2d8);
    assert_eq!(ids.client_id(&Ip, &cx, &ClientKey::UnknownPeer), 0x99f0_86c9_674e_3d17);
    // A claim without verified claims in the context: the address.
    assert_eq!(ids.client_id(&Claim("sub"), &cx, &v4), 0x0cd2_5fd4_c0d5_6f2d);
}

struct NoAnswers;
impl super::LimitService for NoAnswers {
    async fn lookup(&self, _key: u64) -> Result<Option<super::ServiceAnswer>, super::ServiceError> {
        Ok(None)
    }
}

/// A cache whose runtime has stopped: a fetch spawned there is dropped
/// unrun at once, on the calling thread, and its in-flight guard locks
/// the key's shard. `get` must not deadlock on its own shard lock, and
/// must not leak a fetch slot.
#[test]
fn get_after_the_runtime_stopped_neither_deadlocks_nor_leaks_a_slot() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let settings = super::CacheSettings {
        max_in_flight: 1,
        ..super::CacheSettings::default()
    };
    let cache = rt.block_on(async { super::ServiceCache::new(NoAnswers, settings).unwrap() });
    drop(rt);
    let cache = std::sync::Arc::new(cache);
    let (tx, rx) = std::sync::mpsc::channel();
    let c = std::sync::Arc::clone(&cache);
    std::thread::spawn(move || {
        let _ = c.get(1);
        let _ = c.get(2);
        let _ = tx.send(c.in_flight.load(std::sync::atomic::Ordering::Acquire));
    });
    let in_flight = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("get deadlocked (or panicked) after the runtime stopped");
    assert_eq!(in_flight, 0, "a fetch slot leaked");
}

/// Two claim keys (or two header keys) with the same value are
/// different clients to the service: a user whose `sub` is `acme`
/// must not get the tier of the organisation `org = "acme"`.
#[test]
fn ids_of_different_claims_with_one_value_differ() {
    let ids = ServiceIdKey::new(SECRET).unwrap();
    let hasher = KeyHasher::new();
    let claims = serde_json::json!({"sub": "acme", "org": "acme"});
    let serde_json::Value::Object(map) = claims else {
        unreachable!()
    };
    let (mut parts, ()) = http::Request::builder()
        .header("x-user", "acme")
        .header("x-org", "acme")
        .body(())
        .unwrap()
        .into_parts();
    parts
        .extensions
        .insert(crate::runtime::claims::VerifiedClaims::new(map));
    let v4 = ClientKey::Ip("192.0.2.1".parse().unwrap());
    let mut cx = KeyContext::with_address(&parts, v4, &hasher);
    assert!(cx.claims().is_some());
    let sub = ids.client_id(&Claim("sub"), &cx, &ClientKey::Claim(1));
    let org = ids.client_id(&Claim("org"), &cx, &ClientKey::Claim(1));
    assert_ne!(sub, org, "claim sub=acme and claim org=acme share a service id");
    let user = ids.client_id(&Header::from_static("x-user"), &cx, &ClientKey::Header(1));
    let tenant = ids.client_id(&Header::from_static("x-org"), &cx, &ClientKey::Header(1));
    assert_ne!(user, tenant, "header x-user: acme and x-org: acme share a service id");
}

#[test]
fn ids_depend_on_the_secret_and_on_field_boundaries() {
    let a = ServiceIdKey::new(SECRET).unwrap();
    let b = ServiceIdKey::new(b"another-secret-of-32-bytes-or-so").unwrap();
    assert_ne!(a.id_of_fields(&[b"header:", b"k"]), b.id_of_fields(&[b"header:", b"k"]));
    // Length prefixes: moving bytes between fields changes the id.
    assert_ne!(a.id_of_fields(&[b"header:", b"k"]), a.id_of_fields(&[b"header:k"]));
    assert_ne!(a.id_of_fields(&[b"header:", b"k"]), a.id_of_fields(&[b"header", b":k"]));
    assert!(ServiceIdKey::new(&SECRET[..31]).is_err());
    assert_eq!(format!("{a:?}"), "ServiceIdKey(<redacted>)");
}
