//! [`KeySource`]: how a rule turns a request into the key it is limited by,
//! the one path every key takes. `#[rate_limit(key = ...)]` compiles to one
//! concrete source per route ([`Ip`], [`Header`], [`Claim`]); a `[[rules]]`
//! entry holds an [`AnyKey`], which dispatches to the same types; the
//! standalone extractors ([`IpKey`](super::IpKey),
//! [`HeaderKey`](super::HeaderKey), `JwtClaimKey`) run them too.

use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use http::HeaderName;

use super::header::HeaderValues;
use super::ClientKey;
use crate::runtime::claims::{NotVerified, VerifiedClaims};

/// A way to key requests. The built-in sources are [`Ip`], [`Header`] and
/// [`Claim`]; implement it for your own type to key by anything a request
/// carries (an extension an authentication layer set, a tenant header it
/// checked).
///
/// A source must never return a key a client can mint freely without a
/// bound (a raw header value, say), or a client gets a fresh bucket per
/// request; when the value it keys by is missing, return
/// [`KeyContext::address`], the client's address key.
///
/// ```
/// use std::hash::Hasher;
/// use ratelimit::key::{ClientKey, KeyContext, KeySource, PeerAddr};
///
/// /// A tenant an upstream layer verified and put in the extensions.
/// #[derive(Clone)]
/// struct Tenant(u64);
///
/// struct ByTenant;
///
/// impl KeySource for ByTenant {
///     fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
///         match cx.parts().extensions.get::<Tenant>() {
///             Some(t) => ClientKey::Custom(cx.hash(&t.0)),
///             None => cx.address(),
///         }
///     }
///     fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
///         match (key, cx.parts().extensions.get::<Tenant>()) {
///             (ClientKey::Custom(_), Some(t)) => {
///                 h.write(b"tenant:");
///                 h.write(&t.0.to_be_bytes());
///             }
///             _ => ratelimit::key::write_address_id(key, h),
///         }
///     }
/// }
///
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// parts.extensions.insert(PeerAddr("192.0.2.7:1".parse().unwrap()));
/// let hasher = ratelimit::key::KeyHasher::new();
/// let mut cx = KeyContext::new(&parts, &hasher);
/// assert_eq!(ByTenant.extract(&mut cx), ClientKey::Ip("192.0.2.7".parse().unwrap()));
/// parts.extensions.insert(Tenant(7));
/// let mut cx = KeyContext::new(&parts, &hasher);
/// assert!(matches!(ByTenant.extract(&mut cx), ClientKey::Custom(_)));
/// ```
pub trait KeySource: Send + Sync {
    /// The key of the request.
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey;

    /// Writes the key's identity into `h` as fields, one `write` call per
    /// field: a kind tag (`b"tenant:"`), then the value's bytes (the address
    /// octets, the header value, the claim), the same on every instance.
    /// Write integers as bytes in a fixed order (`&n.to_be_bytes()`), not
    /// with `write_u64` and the like, whose bytes some hashers take in the
    /// platform's order. When `key` is the address fallback, write
    /// [`write_address_id`].
    ///
    /// Two consumers hash the fields with their own secrets: the fleet gate
    /// (`[global]`, SipHash under the fleet secret) and the limit service's
    /// client id (`[service]`, HMAC-SHA256 under the id secret, each field
    /// length-prefixed: `ratelimit::service::ServiceIdKey`), so
    /// a service computing the ids of its own clients writes the same
    /// fields (`docs/http.md` lists the built-in ones).
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher);

    /// The name of what this source reads (a header's name, a claim's
    /// path), when two sources of one kind can hold the same value for
    /// different clients: the limit service's client id puts it right after
    /// the kind tag, so `sub = "acme"` and `org = "acme"` are two clients to
    /// the service. Not used for address fallbacks, nor by the fleet gate
    /// (its ids include the route, and a route has one key). Default: none.
    fn id_name(&self) -> Option<&str> {
        None
    }
}

/// The process's seeded hash of key values: raw values are hashed once,
/// here, and never stored.
#[derive(Debug, Clone, Default)]
pub struct KeyHasher(ahash::RandomState);

impl KeyHasher {
    /// A hasher with a fresh random seed.
    pub fn new() -> Self {
        KeyHasher(ahash::RandomState::new())
    }

    /// The hash of `value`.
    pub fn hash_one(&self, value: impl Hash) -> u64 {
        self.0.hash_one(value)
    }
}

/// What a key source sees of a request: the request itself, the client's
/// address key (every kind falls back to it), the verified claims (looked
/// up at most once per request), and the runtime's header-value budget.
pub struct KeyContext<'a> {
    parts: &'a Parts,
    address: ClientKey,
    hasher: &'a KeyHasher,
    headers: Option<&'a dyn HeaderValues>,
    #[cfg(feature = "jwt")]
    verifier: Option<&'a crate::runtime::jwt::JwtVerifier>,
    claims: Option<VerifiedClaims>,
    claims_checked: bool,
    /// The network of the address key, when the runtime groups keys.
    network: Option<std::net::IpAddr>,
    /// Verify even a request the runtime marked [`NotVerified`]: the
    /// verifier here is not the runtime's.
    own_verifier: bool,
}

impl std::fmt::Debug for KeyContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyContext")
            .field("address", &self.address)
            .field("claims_checked", &self.claims_checked)
            .finish_non_exhaustive()
    }
}

impl<'a> KeyContext<'a> {
    /// The context of a request, its address the [`PeerAddr`](super::PeerAddr)
    /// in its extensions as [`IpKey`](super::IpKey) reads it, with no proxy
    /// trusted; no claims, no header budget (a [`Header`] source then keys
    /// by address).
    pub fn new(parts: &'a Parts, hasher: &'a KeyHasher) -> Self {
        let address = super::IpKey::new(super::ClientIpConfig::default()).extract(parts);
        Self::with_address(parts, address, hasher)
    }

    /// The context of a request whose address key is already known.
    pub fn with_address(parts: &'a Parts, address: ClientKey, hasher: &'a KeyHasher) -> Self {
        KeyContext {
            parts,
            address,
            hasher,
            headers: None,
            #[cfg(feature = "jwt")]
            verifier: None,
            claims: None,
            claims_checked: false,
            network: None,
            own_verifier: false,
        }
    }

    /// Verifies bearer tokens with `verifier` when claims are asked for.
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    #[must_use]
    pub fn verifier(mut self, verifier: Option<&'a crate::runtime::jwt::JwtVerifier>) -> Self {
        self.verifier = verifier;
        self
    }

    /// Verifies with a verifier of the caller's own (a standalone
    /// `JwtClaimKey`), which a runtime's [`NotVerified`] mark does not
    /// concern.
    #[cfg(feature = "jwt")]
    #[must_use]
    pub(crate) fn own_verifier(mut self, verifier: &'a crate::runtime::jwt::JwtVerifier) -> Self {
        self.verifier = Some(verifier);
        self.own_verifier = true;
        self
    }

    /// Bounds header keys with this budget.
    #[must_use]
    pub(crate) fn header_values(mut self, headers: &'a dyn HeaderValues) -> Self {
        self.headers = Some(headers);
        self
    }

    /// Groups the address key's cells by its network under `ip`'s
    /// network prefixes.
    #[must_use]
    pub(crate) fn network(mut self, ip: &super::ClientIpConfig) -> Self {
        self.network = match self.address {
            ClientKey::Ip(a) => Some(ip.network(a)),
            _ => None,
        };
        self
    }

    /// The address key's network, when grouped.
    #[cfg(feature = "axum")]
    pub(crate) fn network_of(&self) -> Option<std::net::IpAddr> {
        self.network
    }

    /// The request.
    pub fn parts(&self) -> &'a Parts {
        self.parts
    }

    /// The client's address key: the fallback of every other kind.
    pub fn address(&self) -> ClientKey {
        self.address
    }

    /// The process's seeded hash of `value` (for [`ClientKey::Custom`]).
    pub fn hash(&self, value: impl Hash) -> u64 {
        self.hasher.hash_one(value)
    }

    /// The request's verified claims (an upstream layer's, else the bearer
    /// token's), verified at most once per request.
    pub fn claims(&mut self) -> Option<&VerifiedClaims> {
        if !self.claims_checked {
            self.claims_checked = true;
            self.claims = self.find_claims();
        }
        self.claims.as_ref()
    }

    /// An upstream authentication layer's claims ([`VerifiedClaims`] in the
    /// extensions), else the bearer token's if a verifier is given; `None`
    /// for anything unverified, and for a request a rule of the runtime
    /// already found without verified claims ([`NotVerified`]).
    fn find_claims(&self) -> Option<VerifiedClaims> {
        if let Some(upstream) = self.parts.extensions.get::<VerifiedClaims>() {
            return Some(upstream.clone());
        }
        if !self.own_verifier && self.parts.extensions.get::<NotVerified>().is_some() {
            return None;
        }
        // Failed signature checks are budgeted per client address, the one
        // the request is limited by.
        #[cfg(feature = "jwt")]
        {
            let client = match self.address {
                ClientKey::Ip(ip) => Some(ip),
                _ => None,
            };
            self.verifier?.verify_request_from(self.parts, client)
        }
        #[cfg(not(feature = "jwt"))]
        None
    }

    /// The claims found so far, without looking.
    #[cfg(feature = "axum")]
    pub(crate) fn found_claims(&self) -> Option<&VerifiedClaims> {
        self.claims.as_ref()
    }

    /// Whether the token was looked at (whatever the result).
    #[cfg(feature = "axum")]
    pub(crate) fn claims_checked(&self) -> bool {
        self.claims_checked
    }

    /// Takes the claims found (to hand them to the handler).
    #[cfg(any(feature = "axum", feature = "jwt"))]
    pub(crate) fn take_claims(&mut self) -> Option<VerifiedClaims> {
        self.claims.take()
    }
}

/// `key = route`: one bucket for the whole route, whoever the client (a
/// route protecting a fragile backend, a total budget of a partner API).
///
/// ```
/// use ratelimit::key::{ClientKey, KeyContext, KeyHasher, KeySource, Route};
///
/// let (parts, ()) = http::Request::new(()).into_parts();
/// let hasher = KeyHasher::new();
/// assert_eq!(Route.extract(&mut KeyContext::new(&parts, &hasher)), ClientKey::Route);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Route;

impl KeySource for Route {
    #[inline]
    fn extract(&self, _cx: &mut KeyContext<'_>) -> ClientKey {
        ClientKey::Route
    }
    fn write_id(&self, _cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        match key {
            // The id of 0.1's `key = global`, kept: a rename does not move
            // a route's bucket in a limit service or in Redis.
            ClientKey::Route => h.write(b"global"),
            _ => write_address_id(key, h),
        }
    }
}

/// `key = "custom:<name>"` of a `[[rules]]` entry: the [`KeySource`]
/// registered on the runtime's builder under `name`
/// (`RateLimit::builder(config).key("tenant", ByTenant)`, feature `axum`),
/// bound when the runtime starts and at each reload; a configuration naming
/// an extractor that was not registered is refused then. Unbound (a rule
/// used outside a runtime), it keys by address.
#[derive(Clone)]
pub struct CustomKey {
    name: Arc<str>,
    source: Option<Arc<dyn KeySource>>,
}

impl CustomKey {
    /// The unbound key `name` (what the configuration holds).
    pub fn new(name: &str) -> Self {
        CustomKey {
            name: Arc::from(name),
            source: None,
        }
    }

    /// The name it is registered under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether an extractor is bound.
    pub fn is_bound(&self) -> bool {
        self.source.is_some()
    }

    /// Binds the extractor (the HTTP runtime binds a rule's key to the one
    /// registered under its name; outside a runtime, bind it yourself).
    pub fn bind(&mut self, source: Arc<dyn KeySource>) {
        self.source = Some(source);
    }
}

impl std::fmt::Debug for CustomKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomKey")
            .field("name", &self.name)
            .field("bound", &self.source.is_some())
            .finish()
    }
}

/// Two custom keys are the same key when they have the same name: the
/// configuration's meaning (what is bound is the runtime's business).
impl PartialEq for CustomKey {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CustomKey {}

impl KeySource for CustomKey {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        match &self.source {
            Some(s) => s.extract(cx),
            None => cx.address,
        }
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        match &self.source {
            Some(s) => s.write_id(cx, key, h),
            None => write_address_id(key, h),
        }
    }
    fn id_name(&self) -> Option<&str> {
        self.source.as_deref().and_then(KeySource::id_name)
    }
}

/// `key = ip`: the client's address (see [`ClientIpConfig`](super::ClientIpConfig)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ip;

/// `key = header("x-api-key")`: a header's value, hashed, with the bound on
/// how many values one address may introduce ([`HeaderKey`](super::HeaderKey)
/// describes it). Without a budget in the context, the address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header(pub HeaderName);

/// `key = jwt_claim("sub")`: a claim of a verified token, by dotted path.
/// `N` is `&'static str` from the attribute, or a shared string from a
/// config rule. No verified token, or no such claim in it: the address (a
/// verified token without the claim keeps its claims for the resolver
/// chain and the handler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim<N>(pub N);

impl Header {
    /// `header("name")` of the attribute (a lowercase, valid name: the
    /// spec checked it at compile time).
    pub const fn from_static(name: &'static str) -> Self {
        Header(HeaderName::from_static(name))
    }
}

impl Claim<&'static str> {
    /// `jwt_claim("path")` of the attribute.
    pub const fn from_static(path: &'static str) -> Self {
        Claim(path)
    }
}

impl KeySource for Ip {
    #[inline]
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        cx.address
    }
    #[inline]
    fn write_id(&self, _cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        write_address_id(key, h);
    }
}

impl KeySource for Header {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        match cx.headers {
            Some(budget) => budget.key(&self.0, cx.parts, cx.address, cx.network),
            None => cx.address,
        }
    }
    fn id_name(&self) -> Option<&str> {
        Some(self.0.as_str())
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        match (key, cx.parts.headers.get(&self.0)) {
            (ClientKey::Header(_), Some(v)) => {
                h.write(b"header:");
                h.write(v.as_bytes().trim_ascii());
            }
            _ => write_address_id(key, h),
        }
    }
}

impl<N: AsRef<str> + Send + Sync> KeySource for Claim<N> {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        let hasher = cx.hasher;
        let hash = cx
            .claims()
            .and_then(|c| c.get_key(self.0.as_ref()).map(|k| hasher.hash_one(k)));
        match hash {
            Some(hash) => ClientKey::Claim(hash),
            // No verified token, or one without this claim: by address. A
            // verified token stays verified (its tier still applies, the
            // handler still gets its claims); only an unverifiable one is
            // anonymous.
            None => cx.address,
        }
    }
    fn id_name(&self) -> Option<&str> {
        Some(self.0.as_ref())
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        // The claim's text: the same a string and the integer it spells
        // (`ClaimKey`), as for the local cell.
        match (key, cx.claims.as_ref().and_then(|c| c.get_key(self.0.as_ref()))) {
            (ClientKey::Claim(_), Some(claim)) => {
                h.write(b"claim:");
                h.write(claim.as_str().as_bytes());
            }
            _ => write_address_id(key, h),
        }
    }
}

/// The key of a `[[rules]]` entry: one of the built-in sources, chosen by
/// the configuration, dispatched with a `match` (no trait object).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnyKey {
    /// `"ip"`.
    Ip(Ip),
    /// `"header:<name>"`.
    Header(Header),
    /// `"jwt_claim:<path>"`.
    Claim(Claim<Arc<str>>),
    /// `"route"`.
    Route(Route),
    /// `"custom:<name>"`.
    Custom(CustomKey),
}

impl AnyKey {
    /// The source a spec names. The spec admits exactly the header names
    /// `http` does; a disagreement is reported, never papered over.
    pub(crate) fn from_spec(spec: &ratelimit_spec::KeyKind) -> Result<AnyKey, String> {
        use ratelimit_spec::KeyKind;
        Ok(match spec {
            KeyKind::Ip => AnyKey::Ip(Ip),
            KeyKind::Header(name) => AnyKey::Header(Header(
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("invalid header name {name:?}: {e}"))?,
            )),
            KeyKind::Claim(path) => AnyKey::Claim(Claim(Arc::from(path.as_str()))),
            KeyKind::Route => AnyKey::Route(Route),
            KeyKind::Custom(name) => AnyKey::Custom(CustomKey::new(name)),
        })
    }
}

impl KeySource for AnyKey {
    #[inline]
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        match self {
            AnyKey::Ip(k) => k.extract(cx),
            AnyKey::Header(k) => k.extract(cx),
            AnyKey::Claim(k) => k.extract(cx),
            AnyKey::Route(k) => k.extract(cx),
            AnyKey::Custom(k) => k.extract(cx),
        }
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn Hasher) {
        match self {
            AnyKey::Ip(k) => k.write_id(cx, key, h),
            AnyKey::Header(k) => k.write_id(cx, key, h),
            AnyKey::Claim(k) => k.write_id(cx, key, h),
            AnyKey::Route(k) => k.write_id(cx, key, h),
            AnyKey::Custom(k) => k.write_id(cx, key, h),
        }
    }
    fn id_name(&self) -> Option<&str> {
        match self {
            AnyKey::Ip(k) => k.id_name(),
            AnyKey::Header(k) => k.id_name(),
            AnyKey::Claim(k) => k.id_name(),
            AnyKey::Route(k) => k.id_name(),
            AnyKey::Custom(k) => k.id_name(),
        }
    }
}

/// The identity of an address key (`ip:` and the address bytes, or
/// `unknown`): what every source writes for its address fallback.
#[inline]
pub fn write_address_id(key: &ClientKey, h: &mut dyn Hasher) {
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
