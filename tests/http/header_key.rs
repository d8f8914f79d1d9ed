//! Header keys: a client address cannot mint buckets by rotating the header.

use std::collections::HashSet;
use std::time::Duration;

use http::{HeaderValue, Request};
use ratelimit::key::{ClientIpConfig, ClientKey, HeaderCardinality, HeaderKey, PeerAddr};
use ratelimit::ManualClock;

fn parts(peer: &str, value: Option<&[u8]>) -> http::request::Parts {
    let mut b = Request::builder();
    if let Some(v) = value {
        b = b.header("x-api-key", HeaderValue::from_bytes(v).unwrap());
    }
    let (mut p, ()) = b.body(()).unwrap().into_parts();
    p.extensions.insert(PeerAddr(peer.parse().unwrap()));
    p
}

fn extractor(per_ip: u32, clock: &ManualClock) -> HeaderKey<ManualClock> {
    let cap = HeaderCardinality {
        per_ip,
        window: Duration::from_secs(60),
        max_tracked: 10_000,
    };
    HeaderKey::new("x-api-key", ClientIpConfig::default(), cap, clock.clone()).unwrap()
}

#[test]
fn rotating_the_header_from_one_address_never_creates_more_buckets_than_the_cap() {
    let clock = ManualClock::new();
    let key = extractor(5, &clock);
    let mut buckets = HashSet::new();
    for i in 0..10_000 {
        let k = key.extract(&parts("198.51.100.9:1000", Some(format!("rotating-{i}").as_bytes())));
        buckets.insert(k);
    }
    // Five header buckets, and the address's own bucket for everything else.
    assert_eq!(buckets.len(), 6, "{buckets:?}");
    assert!(buckets.contains(&ClientKey::Ip("198.51.100.9".parse().unwrap())));
}

#[test]
fn known_values_keep_their_bucket_and_addresses_are_independent() {
    let clock = ManualClock::new();
    let key = extractor(2, &clock);
    let a = key.extract(&parts("198.51.100.9:1000", Some(b"alpha")));
    let b = key.extract(&parts("198.51.100.9:1000", Some(b"beta")));
    assert!(matches!(a, ClientKey::Header(_)) && matches!(b, ClientKey::Header(_)) && a != b);
    for _ in 0..100 {
        assert_eq!(key.extract(&parts("198.51.100.9:1000", Some(b"alpha"))), a);
    }
    // Another address has its own allowance.
    let c = key.extract(&parts("203.0.113.1:1000", Some(b"gamma")));
    assert!(matches!(c, ClientKey::Header(_)));
    // The first address is out of new values for this window.
    assert!(matches!(
        key.extract(&parts("198.51.100.9:1000", Some(b"delta"))),
        ClientKey::Ip(_)
    ));
}

#[test]
fn the_allowance_comes_back_with_time() {
    let clock = ManualClock::new();
    let key = extractor(2, &clock);
    for v in ["a", "b"] {
        assert!(matches!(
            key.extract(&parts("198.51.100.9:1000", Some(v.as_bytes()))),
            ClientKey::Header(_)
        ));
    }
    assert!(matches!(
        key.extract(&parts("198.51.100.9:1000", Some(b"c"))),
        ClientKey::Ip(_)
    ));
    // 2 per 60 s: one new value every 30 s.
    clock.advance(Duration::from_secs(30));
    assert!(matches!(
        key.extract(&parts("198.51.100.9:1000", Some(b"c"))),
        ClientKey::Header(_)
    ));
    assert!(matches!(
        key.extract(&parts("198.51.100.9:1000", Some(b"d"))),
        ClientKey::Ip(_)
    ));
}

#[test]
fn missing_empty_and_hostile_values() {
    let clock = ManualClock::new();
    let key = extractor(3, &clock);
    let ip = ClientKey::Ip("198.51.100.9".parse().unwrap());
    assert_eq!(key.extract(&parts("198.51.100.9:1000", None)), ip);
    assert_eq!(key.extract(&parts("198.51.100.9:1000", Some(b""))), ip);
    assert_eq!(key.extract(&parts("198.51.100.9:1000", Some(b"   "))), ip);
    let huge = vec![b'k'; 64 * 1024];
    assert!(matches!(
        key.extract(&parts("198.51.100.9:1000", Some(&huge))),
        ClientKey::Header(_)
    ));
    assert!(matches!(
        key.extract(&parts("198.51.100.9:1000", Some(b"\xff\xfe"))),
        ClientKey::Header(_)
    ));
}

#[test]
fn invalid_settings_are_refused() {
    let clock = ManualClock::new();
    let cap = HeaderCardinality::default();
    assert!(HeaderKey::new("bad header", ClientIpConfig::default(), cap, clock.clone()).is_err());
    let zero = HeaderCardinality { per_ip: 0, ..cap };
    let err = HeaderKey::new("x-api-key", ClientIpConfig::default(), zero, clock).unwrap_err();
    assert!(err.to_string().contains("per_ip"), "{err}");
}

#[test]
fn a_header_sent_twice_is_keyed_by_the_address() {
    let clock = ManualClock::new();
    let key = extractor(3, &clock);
    let (mut p, ()) = Request::builder()
        .header("x-api-key", "victim")
        .header("x-api-key", "mine")
        .body(())
        .unwrap()
        .into_parts();
    p.extensions.insert(PeerAddr("198.51.100.9:1000".parse().unwrap()));
    assert_eq!(key.extract(&p), ClientKey::Ip("198.51.100.9".parse().unwrap()));
}

#[test]
fn an_address_never_holds_more_than_twice_the_allowance() {
    let clock = ManualClock::new();
    let key = extractor(4, &clock);
    // Rotate a new value every second for five minutes; a value stays known
    // for 60 s after its first use, so count those live at each moment.
    let mut first_use: Vec<u64> = Vec::new();
    for s in 0..300u64 {
        let k = key.extract(&parts("198.51.100.9:1000", Some(format!("v{s}").as_bytes())));
        if matches!(k, ClientKey::Header(_)) {
            first_use.push(s);
        }
        clock.advance(Duration::from_secs(1));
    }
    for &t in &first_use {
        let live = first_use.iter().filter(|&&u| u <= t && t < u + 60).count();
        assert!(
            live < 2 * 4,
            "{live} header buckets live at {t} s, more than 2 * per_ip - 1"
        );
    }
    assert!(
        first_use.len() >= 4 + 4 * 4,
        "the allowance refills: {}",
        first_use.len()
    );
}
