//! Who is limited: turning a request into the key it is limited by.
//!
//! Keys must come from something a client cannot mint freely, or a client
//! gets a fresh bucket per request. This module has the client's network
//! address ([`IpKey`], configured by [`ClientIpConfig`]), which every other key
//! kind falls back to when its value is missing, and header values
//! ([`HeaderKey`]) with a bound on how many one address may introduce.

mod header;
mod ip;
mod source;

use std::net::{IpAddr, SocketAddr};

pub(crate) use header::single_value;
#[cfg(feature = "axum")]
pub(crate) use header::HeaderBudget;
pub use header::{HeaderCardinality, HeaderKey, HeaderKeyError};
pub(crate) use ip::normalize_net;
pub use ip::{ClientIpConfig, ForwardedHeader, PrefixError};
pub use source::{write_address_id, AnyKey, Claim, CustomKey, Header, Ip, KeyContext, KeyHasher, KeySource, Route};

/// The TCP peer of a request, put in the request's extensions by the server
/// integration (or by you, for a custom server). Without it, requests are
/// keyed as [`ClientKey::UnknownPeer`]: limited together, never unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// What a request is limited by. Hashable, small, and free of raw client
/// values other than an (aggregated) address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientKey {
    /// The client's address, aggregated to the configured prefix.
    Ip(IpAddr),
    /// No peer address was available: every such request shares one bucket.
    UnknownPeer,
    /// A header value's keyed hash (see [`HeaderKey`]).
    Header(u64),
    /// A verified claim's keyed hash (see `JwtClaimKey`, feature `jwt`).
    Claim(u64),
    /// A key computed by a [`KeySource`] of the application's (a seeded
    /// hash: [`KeyContext::hash`]).
    Custom(u64),
    /// The route's one bucket ([`Route`]: `key = route`).
    Route,
}

/// The TCP peer of a request as the HTTP runtime finds it: axum's
/// `ConnectInfo` (what `axum::serve` provides), else tonic's
/// `TcpConnectInfo` (what a tonic server provides; feature `tonic`), else a
/// [`PeerAddr`].
#[cfg(feature = "axum")]
pub(crate) fn peer(parts: &http::request::Parts) -> Option<SocketAddr> {
    if let Some(info) = parts.extensions.get::<::axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0);
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = parts
        .extensions
        .get::<::tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr);
    }
    parts.extensions.get::<PeerAddr>().map(|p| p.0)
}

/// Keys requests by client address (see [`ClientIpConfig`] for what is
/// trusted).
///
/// ```
/// use http::Request;
/// use ratelimit::key::{ClientIpConfig, ClientKey, IpKey, PeerAddr};
///
/// let key = IpKey::new(ClientIpConfig::default());
/// let (mut parts, ()) = Request::builder()
///     .header("x-forwarded-for", "1.1.1.1") // ignored: the peer is not a trusted proxy
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert_eq!(key.extract(&parts), ClientKey::UnknownPeer);
/// parts.extensions.insert(PeerAddr("192.0.2.7:5555".parse().unwrap()));
/// assert_eq!(key.extract(&parts), ClientKey::Ip("192.0.2.7".parse().unwrap()));
/// ```
#[derive(Debug, Clone)]
pub struct IpKey {
    config: ClientIpConfig,
}

impl IpKey {
    /// An address key extractor with this configuration.
    pub fn new(config: ClientIpConfig) -> Self {
        IpKey { config }
    }

    /// The configuration.
    pub fn config(&self) -> &ClientIpConfig {
        &self.config
    }

    /// The key of a request: its [`PeerAddr`]'s address, or the forwarded
    /// client a trusted proxy names.
    pub fn extract(&self, parts: &http::request::Parts) -> ClientKey {
        match parts.extensions.get::<PeerAddr>() {
            Some(PeerAddr(peer)) => ClientKey::Ip(self.config.client_key(peer.ip(), &parts.headers)),
            None => ClientKey::UnknownPeer,
        }
    }
}

/// Keys requests by a claim of a verified JWT (`jwt_claim("sub")`), taking
/// claims that an upstream authentication layer verified
/// ([`VerifiedClaims`](crate::claims::VerifiedClaims) in the request's
/// extensions), or verifying the `Authorization: Bearer` token itself. An
/// unverified, expired or forged token is anonymous: keyed by address, and
/// no claims are returned for limits. A verified token without the claim is
/// keyed by address too, and its claims are returned (its tier applies).
///
/// ```
/// use http::Request;
/// use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
/// use ratelimit::jwt::JwtVerifier;
/// use ratelimit::key::{ClientIpConfig, ClientKey, JwtClaimKey, PeerAddr};
/// use std::sync::Arc;
///
/// let secret = b"a long random secret, not this one";
/// let verifier = Arc::new(JwtVerifier::hmac(secret, Algorithm::HS256).unwrap());
/// let key = JwtClaimKey::new("sub", verifier, ClientIpConfig::default());
/// let exp = jsonwebtoken::get_current_timestamp() + 600;
/// let token = encode(&Header::default(), &serde_json::json!({"sub": "u1", "exp": exp}),
///                    &EncodingKey::from_secret(secret).unwrap()).unwrap();
/// let request = |auth: &str| {
///     let (mut p, ()) = Request::builder().header("authorization", auth).body(()).unwrap().into_parts();
///     p.extensions.insert(PeerAddr("192.0.2.7:1".parse().unwrap()));
///     p
/// };
/// let (k, claims) = key.extract(&request(&format!("Bearer {token}")));
/// assert!(matches!(k, ClientKey::Claim(_)) && claims.is_some());
/// let (k, claims) = key.extract(&request("Bearer forged.token.here"));
/// assert_eq!((k, claims), (ClientKey::Ip("192.0.2.7".parse().unwrap()), None));
/// ```
#[cfg(feature = "jwt")]
#[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
#[derive(Debug)]
pub struct JwtClaimKey {
    source: Claim<String>,
    verifier: std::sync::Arc<crate::runtime::jwt::JwtVerifier>,
    ip: IpKey,
    hasher: KeyHasher,
}

#[cfg(feature = "jwt")]
impl JwtClaimKey {
    /// Keys by `claim` (a dotted path such as `"org.id"`).
    pub fn new(claim: &str, verifier: std::sync::Arc<crate::runtime::jwt::JwtVerifier>, ip: ClientIpConfig) -> Self {
        JwtClaimKey {
            source: Claim(claim.to_owned()),
            verifier,
            ip: IpKey::new(ip),
            hasher: KeyHasher::new(),
        }
    }

    /// The key, and the verified claims (for the `jwt` resolver) when the
    /// request carries a verified token with the claim: what [`Claim`]
    /// answers with this extractor's verifier.
    pub fn extract(&self, parts: &http::request::Parts) -> (ClientKey, Option<crate::runtime::claims::VerifiedClaims>) {
        let mut cx = KeyContext::with_address(parts, self.ip.extract(parts), &self.hasher).own_verifier(&self.verifier);
        let key = self.source.extract(&mut cx);
        (key, cx.take_claims())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> http::request::Parts {
        http::Request::new(()).into_parts().0
    }

    /// `IpKey` reads the `PeerAddr` it documents, whatever else a server
    /// put in the extensions (a load balancer's `ConnectInfo`).
    #[cfg(feature = "axum")]
    #[test]
    fn ip_key_reads_the_peer_addr_only() {
        let mut p = parts();
        p.extensions.insert(::axum::extract::ConnectInfo::<SocketAddr>(
            "10.0.0.1:1".parse().unwrap(),
        ));
        let key = IpKey::new(ClientIpConfig::default());
        assert_eq!(key.extract(&p), ClientKey::UnknownPeer);
        p.extensions.insert(PeerAddr("203.0.113.9:1".parse().unwrap()));
        assert_eq!(key.extract(&p), ClientKey::Ip("203.0.113.9".parse().unwrap()));
        // The HTTP runtime prefers what `axum::serve` provides.
        assert_eq!(peer(&p), Some("10.0.0.1:1".parse().unwrap()));
    }

    /// A tonic server's peer (`TcpConnectInfo`) is the runtime's peer; a
    /// `TcpConnectInfo` without a remote address (a custom `Connected`)
    /// falls through to a `PeerAddr`.
    #[cfg(feature = "tonic")]
    #[test]
    fn the_runtime_reads_tonics_peer() {
        use tonic::transport::server::TcpConnectInfo;
        let mut p = parts();
        assert_eq!(peer(&p), None);
        p.extensions.insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: None,
        });
        assert_eq!(peer(&p), None);
        p.extensions.insert(PeerAddr("203.0.113.9:1".parse().unwrap()));
        assert_eq!(peer(&p), Some("203.0.113.9:1".parse().unwrap()));
        p.extensions.insert(TcpConnectInfo {
            local_addr: Some("127.0.0.1:50051".parse().unwrap()),
            remote_addr: Some("198.51.100.4:40000".parse().unwrap()),
        });
        assert_eq!(peer(&p), Some("198.51.100.4:40000".parse().unwrap()));
    }

    /// A standalone `JwtClaimKey` verifies with its own verifier even on a
    /// request the runtime marked as having no verified claims.
    #[cfg(feature = "jwt")]
    #[test]
    fn jwt_claim_key_is_not_bound_by_the_runtimes_mark() {
        use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
        let secret = b"a secret long enough for the test";
        let verifier = std::sync::Arc::new(crate::runtime::jwt::JwtVerifier::hmac(secret, Algorithm::HS256).unwrap());
        let key = JwtClaimKey::new("sub", verifier, ClientIpConfig::default());
        let exp = jsonwebtoken::get_current_timestamp() + 600;
        let token = encode(
            &Header::default(),
            &serde_json::json!({"sub": "u1", "exp": exp}),
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap();
        let mut p = parts();
        p.headers
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        p.extensions.insert(crate::runtime::claims::NotVerified);
        let (k, claims) = key.extract(&p);
        assert!(matches!(k, ClientKey::Claim(_)) && claims.is_some());
    }
}
