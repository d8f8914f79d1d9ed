//! Who is limited: turning a request into the key it is limited by.
//!
//! Keys must come from something a client cannot mint freely, or a client
//! gets a fresh bucket per request. This module has the client's network
//! address ([`IpKey`], configured by [`ClientIpConfig`]), which every other key
//! kind falls back to when its value is missing, and header values
//! ([`HeaderKey`]) with a bound on how many one address may introduce.

mod header;
mod ip;

use std::net::{IpAddr, SocketAddr};

pub use header::{HeaderCardinality, HeaderKey, HeaderKeyError};
pub use ip::{ClientIpConfig, ForwardedHeader, PrefixError};

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

    /// The key of a request.
    pub fn extract(&self, parts: &http::request::Parts) -> ClientKey {
        let Some(PeerAddr(peer)) = parts.extensions.get::<PeerAddr>() else {
            return ClientKey::UnknownPeer;
        };
        let values = parts
            .headers
            .get_all(self.config.header().name())
            .iter()
            .map(http::HeaderValue::as_bytes);
        let client = self.config.client_addr(peer.ip(), values);
        ClientKey::Ip(self.config.aggregate(client))
    }
}
