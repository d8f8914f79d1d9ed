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

#[cfg(feature = "axum")]
pub(crate) use header::HeaderBudget;
pub use header::{HeaderCardinality, HeaderKey, HeaderKeyError};
pub use ip::{ClientIpConfig, ForwardedHeader, PrefixError};
pub use source::{write_address_id, AnyKey, Claim, Header, Ip, KeyContext, KeyHasher, KeySource};

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
}

/// The TCP peer of a request: axum's `ConnectInfo` (what `axum::serve`
/// provides, feature `axum`), else a [`PeerAddr`].
pub(crate) fn peer(parts: &http::request::Parts) -> Option<SocketAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = parts.extensions.get::<::axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0);
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

    /// The key of a request: its peer's address (a [`PeerAddr`], or axum's
    /// `ConnectInfo`), or the forwarded client a trusted proxy names.
    pub fn extract(&self, parts: &http::request::Parts) -> ClientKey {
        match peer(parts) {
            Some(peer) => ClientKey::Ip(self.config.client_key(peer.ip(), &parts.headers)),
            None => ClientKey::UnknownPeer,
        }
    }
}

/// Keys requests by a claim of a verified JWT (`jwt_claim("sub")`), taking
/// claims that an upstream authentication layer verified
/// ([`VerifiedClaims`](crate::resolve::VerifiedClaims) in the request's
/// extensions), or verifying the `Authorization: Bearer` token itself. An
/// unverified, expired or forged token, or a verified one without the claim,
/// is anonymous: keyed by address, and no claims are returned for limits.
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
    verifier: std::sync::Arc<crate::jwt::JwtVerifier>,
    ip: IpKey,
    hasher: KeyHasher,
}

#[cfg(feature = "jwt")]
impl JwtClaimKey {
    /// Keys by `claim` (a dotted path such as `"org.id"`).
    pub fn new(claim: &str, verifier: std::sync::Arc<crate::jwt::JwtVerifier>, ip: ClientIpConfig) -> Self {
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
    pub fn extract(&self, parts: &http::request::Parts) -> (ClientKey, Option<crate::claims::VerifiedClaims>) {
        let mut cx =
            KeyContext::with_address(parts, self.ip.extract(parts), &self.hasher).verifier(Some(&self.verifier));
        let key = self.source.extract(&mut cx);
        (key, cx.take_claims())
    }
}
