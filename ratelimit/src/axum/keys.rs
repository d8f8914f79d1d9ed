//! Key sources: how a rule turns a request into the key it is limited by.
//! `#[rate_limit(key = ...)]` picks one concrete type per route; config
//! rules use [`RuleKey`], which matches on the configured kind.

use std::net::IpAddr;

use http::request::Parts;
use http::HeaderName;

use super::runtime::Runtime;
use crate::config::KeySpec;
use crate::key::ClientKey;
use crate::resolve::{ClaimKey, VerifiedClaims};

/// What a key source sees: the request, the runtime, and the address key
/// already computed (every kind falls back to it).
#[derive(Debug)]
pub struct KeyContext<'a> {
    pub(crate) rt: &'a Runtime,
    pub(crate) parts: &'a Parts,
    pub(crate) ip: ClientKey,
    /// Verified claims found while extracting (for the `jwt` resolver).
    pub(crate) claims: Option<VerifiedClaims>,
    /// Whether the token was looked at (whatever the result).
    pub(crate) claims_checked: bool,
}

/// A way to key requests. Implemented by the types `#[rate_limit(key = ...)]`
/// expands to; not meant to be implemented outside this crate.
pub trait KeySource: Send + Sync {
    /// The key of the request.
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey;

    /// A stable identifier of the client for the limit service: FNV-1a
    /// (64-bit) of a kind tag and the raw value (see `docs/http.md`), the
    /// same on every instance, so the service can compute it for its
    /// clients. Only computed for chains that ask the service.
    fn client_id(&self, cx: &KeyContext<'_>, key: &ClientKey) -> u64;
}

/// `key = ip`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ip;

/// `key = header("x-api-key")`.
#[derive(Debug, Clone)]
pub struct Header(pub HeaderName);

/// `key = jwt_claim("sub")`; `N` is `&'static str` from the attribute, or a
/// shared string from a config rule.
#[derive(Debug, Clone)]
pub struct Claim<N>(pub N);

impl KeySource for Ip {
    #[inline]
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        cx.ip
    }
    fn client_id(&self, _cx: &KeyContext<'_>, key: &ClientKey) -> u64 {
        ip_id(key)
    }
}

impl KeySource for Header {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        header_extract(&self.0, cx)
    }
    fn client_id(&self, cx: &KeyContext<'_>, key: &ClientKey) -> u64 {
        header_client_id(&self.0, cx, key)
    }
}

impl<N: AsRef<str> + Send + Sync> KeySource for Claim<N> {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        claim_extract(self.0.as_ref(), cx)
    }
    fn client_id(&self, cx: &KeyContext<'_>, key: &ClientKey) -> u64 {
        claim_client_id(self.0.as_ref(), cx, key)
    }
}

/// The key of a `[[rules]]` entry.
#[derive(Debug)]
pub(crate) struct RuleKey<'a>(pub(crate) &'a KeySpec);

impl KeySource for RuleKey<'_> {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        match self.0 {
            KeySpec::Header(name) => header_extract(name, cx),
            KeySpec::JwtClaim(path) => claim_extract(path, cx),
            _ => cx.ip,
        }
    }
    fn client_id(&self, cx: &KeyContext<'_>, key: &ClientKey) -> u64 {
        match self.0 {
            KeySpec::Header(name) => header_client_id(name, cx, key),
            KeySpec::JwtClaim(path) => claim_client_id(path, cx, key),
            _ => ip_id(key),
        }
    }
}

fn header_extract(name: &HeaderName, cx: &mut KeyContext<'_>) -> ClientKey {
    cx.rt.header_keys.extract_after_ip(name, cx.parts, cx.ip)
}

fn header_client_id(name: &HeaderName, cx: &KeyContext<'_>, key: &ClientKey) -> u64 {
    match (key, cx.parts.headers.get(name)) {
        (ClientKey::Header(_), Some(v)) => Fnv::new(b"header:").bytes(v.as_bytes().trim_ascii()).finish(),
        _ => ip_id(key),
    }
}

fn claim_extract(path: &str, cx: &mut KeyContext<'_>) -> ClientKey {
    let claims = cx.rt.claims(cx.parts);
    cx.claims_checked = true;
    let hash = claims
        .as_ref()
        .and_then(|c| c.get_key(path).map(|k| cx.rt.claim_hasher.hash_one(k)));
    match hash {
        Some(hash) => {
            cx.claims = claims;
            ClientKey::Claim(hash)
        }
        // No verified claim: anonymous, by address, and no claims for the
        // resolvers either.
        None => cx.ip,
    }
}

fn claim_client_id(path: &str, cx: &KeyContext<'_>, key: &ClientKey) -> u64 {
    let claim = cx.claims.as_ref().and_then(|c| c.get_key(path));
    match (key, claim) {
        (ClientKey::Claim(_), Some(ClaimKey::Text(t))) => Fnv::new(b"claim:").bytes(t.as_bytes()).finish(),
        (ClientKey::Claim(_), Some(ClaimKey::Integer(n))) => Fnv::new(b"claim:").decimal(n).finish(),
        _ => ip_id(key),
    }
}

fn ip_id(key: &ClientKey) -> u64 {
    match key {
        ClientKey::Ip(IpAddr::V4(a)) => Fnv::new(b"ip:").bytes(&a.octets()).finish(),
        ClientKey::Ip(IpAddr::V6(a)) => Fnv::new(b"ip:").bytes(&a.octets()).finish(),
        _ => Fnv::new(b"unknown").finish(),
    }
}

/// FNV-1a, 64-bit: simple enough for a limit service in any language to
/// reproduce.
struct Fnv(u64);

impl Fnv {
    fn new(tag: &[u8]) -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325).bytes(tag)
    }
    fn bytes(mut self, bytes: &[u8]) -> Fnv {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }
    fn decimal(self, n: i128) -> Fnv {
        let mut buf = [0u8; 40];
        let mut i = buf.len();
        let negative = n < 0;
        let mut m = n.unsigned_abs();
        loop {
            i -= 1;
            buf[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if negative {
            i -= 1;
            buf[i] = b'-';
        }
        self.bytes(&buf[i..])
    }
    fn finish(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Fnv;

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(Fnv::new(b"").finish(), 0xcbf2_9ce4_8422_2325);
        assert_eq!(Fnv::new(b"a").finish(), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            Fnv::new(b"claim:").decimal(-42).finish(),
            Fnv::new(b"claim:-42").finish()
        );
        assert_eq!(Fnv::new(b"claim:").decimal(0).finish(), Fnv::new(b"claim:0").finish());
        // The ids docs/http.md lists, so a limit service can check its code.
        assert_eq!(Fnv::new(b"claim:").bytes(b"alice").finish(), 0xd7e4_f80e_e79e_a819);
        assert_eq!(Fnv::new(b"claim:").decimal(42).finish(), 0x0b3d_6955_e691_baa9);
        assert_eq!(Fnv::new(b"ip:").bytes(&[192, 0, 2, 1]).finish(), 0x37b8_fda7_ceec_5af3);
        assert_eq!(Fnv::new(b"header:").bytes(b"key-a").finish(), 0xc86b_3ef2_3b67_6fcb);
        assert_eq!(Fnv::new(b"unknown").finish(), 0x4988_65c7_bd1f_3959);
    }
}
