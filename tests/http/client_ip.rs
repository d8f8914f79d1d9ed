//! Client address extraction against hostile headers: a table of cases, and
//! properties over arbitrary header bytes.

use std::net::IpAddr;

use http::{HeaderValue, Request};
use proptest::prelude::*;
use ratelimit::key::{ClientIpConfig, ClientKey, ForwardedHeader, IpKey, PeerAddr};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn proxies() -> ClientIpConfig {
    ClientIpConfig::default().trust_proxies(
        [
            "10.0.0.0/8",
            "192.168.0.0/16",
            "2001:db8:ffff::/48",
            "::ffff:172.16.0.0/108",
        ]
        .iter()
        .map(|c| c.parse().unwrap()),
    )
}

/// Runs one request through `IpKey` and returns the (unaggregated for IPv4)
/// key address.
fn key_of(config: ClientIpConfig, peer: Option<&str>, headers: &[(&str, &[u8])]) -> ClientKey {
    let mut builder = Request::builder();
    for (name, value) in headers {
        builder = builder.header(*name, HeaderValue::from_bytes(value).unwrap());
    }
    let (mut parts, ()) = builder.body(()).unwrap().into_parts();
    if let Some(peer) = peer {
        parts.extensions.insert(PeerAddr(peer.parse().unwrap()));
    }
    IpKey::new(config).extract(&parts)
}

struct Case {
    name: &'static str,
    header: ForwardedHeader,
    peer: Option<&'static str>,
    headers: &'static [(&'static str, &'static [u8])],
    want: Option<&'static str>, // None: UnknownPeer
}

const XFF: ForwardedHeader = ForwardedHeader::XForwardedFor;
const FWD: ForwardedHeader = ForwardedHeader::Forwarded;

#[rustfmt::skip]
const CASES: &[Case] = &[
    // The peer is not a trusted proxy: headers are the client's own words.
    Case { name: "untrusted peer, no header", header: XFF, peer: Some("203.0.113.5:1234"), headers: &[], want: Some("203.0.113.5") },
    Case { name: "untrusted peer ignores XFF", header: XFF, peer: Some("203.0.113.5:1234"), headers: &[("x-forwarded-for", b"1.1.1.1")], want: Some("203.0.113.5") },
    Case { name: "untrusted peer ignores Forwarded", header: FWD, peer: Some("203.0.113.5:1234"), headers: &[("forwarded", b"for=1.1.1.1")], want: Some("203.0.113.5") },
    Case { name: "untrusted IPv6 peer", header: XFF, peer: Some("[2001:db8:1:2::9]:443"), headers: &[("x-forwarded-for", b"1.1.1.1")], want: Some("2001:db8:1:2::") },
    Case { name: "IPv4-mapped peer is IPv4", header: XFF, peer: Some("[::ffff:203.0.113.5]:80"), headers: &[], want: Some("203.0.113.5") },
    Case { name: "no peer at all", header: XFF, peer: None, headers: &[("x-forwarded-for", b"1.1.1.1")], want: None },
    // Trusted proxy, X-Forwarded-For.
    Case { name: "trusted proxy, one hop", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.7")], want: Some("198.51.100.7") },
    Case { name: "spoofed leftmost entries", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"6.6.6.6, 7.7.7.7, 198.51.100.7")], want: Some("198.51.100.7") },
    Case { name: "skips trusted hops", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"6.6.6.6, 198.51.100.7, 192.168.1.1, 10.9.9.9")], want: Some("198.51.100.7") },
    Case { name: "all trusted chain: leftmost", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"10.1.1.1, 192.168.1.1")], want: Some("10.1.1.1") },
    Case { name: "trusted proxy, no header: the proxy", header: XFF, peer: Some("10.0.0.1:80"), headers: &[], want: Some("10.0.0.1") },
    Case { name: "repeated header lines are one list", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"6.6.6.6"), ("x-forwarded-for", b"198.51.100.7, 10.2.2.2")], want: Some("198.51.100.7") },
    Case { name: "spoof in the first of repeated lines", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"6.6.6.6, 7.7.7.7"), ("x-forwarded-for", b"198.51.100.7")], want: Some("198.51.100.7") },
    Case { name: "entry with port", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.7:5555")], want: Some("198.51.100.7") },
    Case { name: "bracketed IPv6 with port", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"[2001:db8:5::1]:8080")], want: Some("2001:db8:5::") },
    Case { name: "plain IPv6 aggregated to /64", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"2001:db8:5:6:7:8:9:a")], want: Some("2001:db8:5:6::") },
    Case { name: "IPv4-mapped entry is IPv4", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"::ffff:198.51.100.7")], want: Some("198.51.100.7") },
    Case { name: "mapped entry in a trusted mapped net", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.7, ::ffff:172.16.0.9")], want: Some("198.51.100.7") },
    Case { name: "whitespace and empty spacing", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"  198.51.100.7\t,10.3.3.3  ")], want: Some("198.51.100.7") },
    Case { name: "garbage at the client position: last trusted hop", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.7, not-an-ip, 10.4.4.4")], want: Some("10.4.4.4") },
    Case { name: "garbage left of the client is never read", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"<script>, 198.51.100.7")], want: Some("198.51.100.7") },
    Case { name: "unknown in XFF", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"unknown")], want: Some("10.0.0.1") },
    Case { name: "empty entry", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.7,,")], want: Some("10.0.0.1") },
    Case { name: "empty header value", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"")], want: Some("10.0.0.1") },
    Case { name: "non-UTF-8 bytes", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.\xff")], want: Some("10.0.0.1") },
    Case { name: "non-UTF-8 left of the client", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"\xfe\xff, 198.51.100.7")], want: Some("198.51.100.7") },
    Case { name: "port out of range", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.7:70000")], want: Some("10.0.0.1") },
    Case { name: "IPv6 zone id refused", header: XFF, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"fe80::1%eth0")], want: Some("10.0.0.1") },
    Case { name: "XFF ignored when Forwarded is configured", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("x-forwarded-for", b"198.51.100.7")], want: Some("10.0.0.1") },
    // Trusted proxy, RFC 7239 Forwarded.
    Case { name: "Forwarded for=", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=198.51.100.17;proto=https")], want: Some("198.51.100.17") },
    Case { name: "Forwarded bracketed IPv6 with port", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=\"[2001:db8:cafe::17]:4711\"")], want: Some("2001:db8:cafe::") },
    Case { name: "Forwarded spoofed leftmost", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=6.6.6.6, for=198.51.100.17, for=10.5.5.5;by=10.0.0.1")], want: Some("198.51.100.17") },
    Case { name: "Forwarded unknown", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=unknown")], want: Some("10.0.0.1") },
    Case { name: "Forwarded obfuscated identifier", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=_hidden, for=10.6.6.6")], want: Some("10.6.6.6") },
    Case { name: "Forwarded without for=", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"proto=https;by=10.0.0.1")], want: Some("10.0.0.1") },
    Case { name: "Forwarded case-insensitive name", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"FOR=198.51.100.17")], want: Some("198.51.100.17") },
    Case { name: "Forwarded unterminated quote cannot swallow trusted hops", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=\"6.6.6.6"), ("forwarded", b"for=198.51.100.17")], want: Some("198.51.100.17") },
    Case { name: "Forwarded comma inside quotes is malformed", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=\"198.51.100.17, 10.7.7.7\"")], want: Some("10.0.0.1") },
    Case { name: "Forwarded repeated for= in one element", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=6.6.6.6;for=198.51.100.17")], want: Some("10.0.0.1") },
    Case { name: "Forwarded quoted comma copied by a proxy cannot inject a hop", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=198.51.100.17;host=\"x,for=6.6.6.6;a=\"")], want: Some("198.51.100.17") },
    Case { name: "Forwarded quoted semicolon in another parameter", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=198.51.100.17;host=\"a;b\"")], want: Some("198.51.100.17") },
    Case { name: "Forwarded escape is malformed", header: FWD, peer: Some("10.0.0.1:80"), headers: &[("forwarded", b"for=\"198.51.100.17\\\"\"")], want: Some("10.0.0.1") },
];

#[test]
fn the_table() {
    assert!(CASES.len() >= 30);
    let mut failures = Vec::new();
    for case in CASES {
        let got = key_of(proxies().forwarded_header(case.header), case.peer, case.headers);
        let want = match case.want {
            Some(a) => ClientKey::Ip(ip(a)),
            None => ClientKey::UnknownPeer,
        };
        if got != want {
            failures.push(format!("{}: got {got:?}, want {want:?}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_chain_longer_than_the_hop_limit_ends_at_the_last_trusted_hop() {
    let mut chain = String::from("198.51.100.7");
    for i in 0..100 {
        chain.push_str(&format!(", 10.0.{}.{}", i / 250, i % 250 + 1));
    }
    let got = key_of(proxies(), Some("10.0.0.1:80"), &[("x-forwarded-for", chain.as_bytes())]);
    match got {
        ClientKey::Ip(IpAddr::V4(v4)) => assert_eq!(v4.octets()[0], 10, "a trusted hop, got {v4}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn megabytes_of_header_are_cheap_and_harmless() {
    let junk = "x".repeat(1 << 20) + ", 198.51.100.7";
    let got = key_of(proxies(), Some("10.0.0.1:80"), &[("x-forwarded-for", junk.as_bytes())]);
    assert_eq!(got, ClientKey::Ip(ip("198.51.100.7")));
    let junk = ",".repeat(1 << 20);
    let got = key_of(proxies(), Some("10.0.0.1:80"), &[("x-forwarded-for", junk.as_bytes())]);
    assert_eq!(got, ClientKey::Ip(ip("10.0.0.1")));
}

fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    // Visible ASCII, spaces, tabs, and high bytes: what HeaderValue accepts.
    let byte = prop_oneof![
        4 => prop::sample::select(b"0123456789abcdef.:[],; =\"_xfor".to_vec()),
        1 => 0x20u8..0x7f,
        1 => 0x80u8..=0xff,
    ];
    prop::collection::vec(byte, 0..120)
}

fn address_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => v6.to_string(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// Whatever the headers say, the key is the peer or an address that is
    /// literally present in the headers (after aggregation).
    #[test]
    fn the_key_is_the_peer_or_an_address_from_the_headers(
        lines in prop::collection::vec(header_bytes(), 0..4),
        clients in prop::collection::vec(any::<[u8; 4]>(), 0..4),
        forwarded in any::<bool>(),
        trusted_peer in any::<bool>(),
    ) {
        let header = if forwarded { ForwardedHeader::Forwarded } else { ForwardedHeader::XForwardedFor };
        let name = header.name();
        let mut values: Vec<Vec<u8>> = lines;
        // Mix in well-formed entries so the walk often finds real addresses.
        for c in &clients {
            let a = std::net::Ipv4Addr::from(*c).to_string();
            values.push(if forwarded { format!("for={a}") } else { a }.into_bytes());
        }
        let peer = if trusted_peer { "10.0.0.1:80" } else { "203.0.113.5:80" };
        let headers: Vec<(&str, &[u8])> = values.iter().map(|v| (name, v.as_slice())).collect();
        let got = key_of(proxies().forwarded_header(header), Some(peer), &headers);
        let ClientKey::Ip(got) = got else { panic!("a peer was given") };
        let config = proxies();
        let peer_ip: IpAddr = peer.parse::<std::net::SocketAddr>().unwrap().ip();
        let mut candidates = vec![config.aggregate(peer_ip)];
        let joined: Vec<u8> = values.join(&b","[..]);
        let text = String::from_utf8_lossy(&joined).to_string();
        for token in text.split(|c: char| !(c.is_ascii_hexdigit() || c == '.' || c == ':')) {
            for cut in [token, token.trim_end_matches(|c: char| c.is_ascii_digit() || c == ':')] {
                if let Ok(a) = cut.parse::<IpAddr>() {
                    candidates.push(config.aggregate(a));
                }
                if let Some((a, _port)) = cut.rsplit_once(':') {
                    if let Ok(a) = a.parse::<IpAddr>() {
                        candidates.push(config.aggregate(a));
                    }
                }
            }
        }
        prop_assert!(candidates.contains(&got), "{} not in the peer or headers {:?}", address_text(got), text);
        if !trusted_peer {
            prop_assert_eq!(got, config.aggregate(peer_ip));
        }
    }

    /// Addresses in one IPv6 /64 share a key; different /64s do not.
    #[test]
    fn one_ipv6_slash_64_is_one_key(prefix in any::<u64>(), a in any::<u64>(), b in any::<u64>(), other in any::<u64>()) {
        let config = ClientIpConfig::default();
        let x = IpAddr::V6(((u128::from(prefix) << 64) | u128::from(a)).into());
        let y = IpAddr::V6(((u128::from(prefix) << 64) | u128::from(b)).into());
        prop_assert_eq!(config.aggregate(x), config.aggregate(y));
        prop_assume!(other != prefix);
        let z = IpAddr::V6(((u128::from(other) << 64) | u128::from(a)).into());
        prop_assert_ne!(config.aggregate(x), config.aggregate(z));
    }
}
