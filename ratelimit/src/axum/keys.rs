//! Key sources: how a rule turns a request into the key it is limited by.
//! `#[rate_limit(key = ...)]` picks one concrete type per route; config
//! rules use [`RuleKey`], which matches on the configured kind.

use std::hash::Hasher;
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

    /// Writes the key's identity into `h`: a kind tag and the raw value
    /// (the address bytes, the header value, the claim), the same on every
    /// instance. Hashed with FNV-1a for the limit service's client id, and
    /// with the fleet secret for the fleet gate.
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher);

    /// A stable identifier of the client for the limit service: FNV-1a
    /// (64-bit) of [`write_id`](Self::write_id) (see `docs/http.md`), so the
    /// service can compute it for its clients. Only computed for chains that
    /// ask the service.
    fn client_id(&self, cx: &KeyContext<'_>, key: &ClientKey) -> u64 {
        let mut f = Fnv::new(b"");
        self.write_id(cx, key, &mut f);
        f.finish_id()
    }
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
    fn write_id(&self, _cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        write_ip(key, h);
    }
}

impl KeySource for Header {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        header_extract(&self.0, cx)
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        write_header(&self.0, cx, key, h);
    }
}

impl<N: AsRef<str> + Send + Sync> KeySource for Claim<N> {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        claim_extract(self.0.as_ref(), cx)
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        write_claim(self.0.as_ref(), cx, key, h);
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
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        match self.0 {
            KeySpec::Header(name) => write_header(name, cx, key, h),
            KeySpec::JwtClaim(path) => write_claim(path, cx, key, h),
            _ => write_ip(key, h),
        }
    }
}

fn header_extract(name: &HeaderName, cx: &mut KeyContext<'_>) -> ClientKey {
    cx.rt.header_keys.extract_after_ip(name, cx.parts, cx.ip)
}

fn write_header(name: &HeaderName, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
    match (key, cx.parts.headers.get(name)) {
        (ClientKey::Header(_), Some(v)) => {
            h.write(b"header:");
            h.write(v.as_bytes().trim_ascii());
        }
        _ => write_ip(key, h),
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

fn write_claim(path: &str, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
    let claim = cx.claims.as_ref().and_then(|c| c.get_key(path));
    match (key, claim) {
        (ClientKey::Claim(_), Some(ClaimKey::Text(t))) => {
            h.write(b"claim:");
            h.write(t.as_bytes());
        }
        (ClientKey::Claim(_), Some(ClaimKey::Integer(n))) => {
            h.write(b"claim:");
            write_decimal(n, h);
        }
        _ => write_ip(key, h),
    }
}

fn write_ip(key: &ClientKey, h: &mut dyn Hasher) {
    match key {
        ClientKey::Ip(IpAddr::V4(a)) => {
            h.write(b"ip:");
            h.write(&a.octets());
        }
        ClientKey::Ip(IpAddr::V6(a)) => {
            h.write(b"ip:");
            h.write(&a.octets());
        }
        _ => h.write(b"unknown"),
    }
}

fn write_decimal(n: i128, h: &mut dyn Hasher) {
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
    h.write(&buf[i..]);
}

/// FNV-1a, 64-bit: simple enough for a limit service in any language to
/// reproduce.
struct Fnv(u64);

impl Fnv {
    fn new(tag: &[u8]) -> Fnv {
        let mut f = Fnv(0xcbf2_9ce4_8422_2325);
        f.write(tag);
        f
    }
    #[cfg(test)]
    fn bytes(mut self, bytes: &[u8]) -> Fnv {
        self.write(bytes);
        self
    }
    #[cfg(test)]
    fn decimal(mut self, n: i128) -> Fnv {
        write_decimal(n, &mut self);
        self
    }
    fn finish_id(&self) -> u64 {
        self.0
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Fnv;
    use std::hash::Hasher;

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(Fnv::new(b"").finish_id(), 0xcbf2_9ce4_8422_2325);
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
