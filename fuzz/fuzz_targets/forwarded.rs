//! Forwarded-header parsing under arbitrary bytes: never panics, and never
//! returns an address that is neither the peer nor a trusted-proxy chain's
//! answer. Run: see fuzz/README.md.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use ratelimit::key::{ClientIpConfig, ForwardedHeader};

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let trusted: IpAddr = "10.0.0.1".parse().unwrap();
    let untrusted: IpAddr = "203.0.113.5".parse().unwrap();
    for header in [ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded] {
        let config = ClientIpConfig::default()
            .trust_proxies(["10.0.0.0/8".parse().unwrap(), "2001:db8::/32".parse().unwrap()])
            .forwarded_header(header);
        // An untrusted peer is always the answer.
        assert_eq!(config.client_addr(untrusted, lines.iter().copied()), untrusted);
        // A trusted peer's answer aggregates without panicking.
        let got = config.client_addr(trusted, lines.iter().copied());
        let _ = config.aggregate(got);
    }
});
