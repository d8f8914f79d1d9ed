//! Keys from a request header (`x-api-key`), with a bound on how many
//! distinct values one client address may introduce.

use std::time::Duration;

use http::HeaderName;

use super::{ClientIpConfig, ClientKey, Header, IpKey, KeyContext, KeyHasher, KeySource};
use crate::{Clock, Limiter, MemoryStore, Quota, SystemClock};

/// Routes of the internal limiter that tracks header values.
const SEEN_ROUTE: u32 = 1;
const BUDGET_ROUTE: u32 = 2;

/// The network budget a standalone [`HeaderKey`]'s tracker uses: the
/// `[store]` default.
fn default_network_budget() -> Quota {
    Quota::per_minute(crate::shared::defaults::NEW_KEYS_PER_NETWORK)
}

/// How many distinct header values a client address may introduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderCardinality {
    /// New distinct values one address may introduce: this many at once,
    /// then this many per `window` (one every `window / per_ip`). As a value
    /// stays known for a window after its first use, an address holds at most
    /// `2 * per_ip - 1` header buckets at any moment.
    pub per_ip: u32,
    /// How long a value counts as known for its address after first use.
    pub window: Duration,
    /// Most entries tracked (known pairs and per-address budgets together);
    /// 32 bytes each, allocated up front.
    pub max_tracked: usize,
}

impl Default for HeaderCardinality {
    /// 8 values per address per 10 minutes, 100,000 pairs tracked.
    fn default() -> Self {
        HeaderCardinality {
            per_ip: 8,
            window: Duration::from_secs(600),
            max_tracked: 100_000,
        }
    }
}

/// Why a [`HeaderKey`] cannot be built: an invalid header name, or
/// cardinality settings the engine refuses (the engine's error is the
/// [`source`](std::error::Error::source)).
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderKeyError {
    message: String,
    source: Option<HeaderKeySource>,
}

crate::engine::errors::debug_as_display!(HeaderKeyError);

#[derive(Debug, Clone, PartialEq, Eq)]
enum HeaderKeySource {
    Quota(crate::QuotaError),
    Store(crate::StoreConfigError),
}

impl HeaderKeyError {
    fn new(message: String, source: Option<HeaderKeySource>) -> Self {
        HeaderKeyError { message, source }
    }
}

impl std::fmt::Display for HeaderKeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HeaderKeyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.source {
            Some(HeaderKeySource::Quota(e)) => Some(e),
            Some(HeaderKeySource::Store(e)) => Some(e),
            None => None,
        }
    }
}

/// Keys requests by a header's value (hashed; the value is never stored).
///
/// A header such as `x-api-key` is written by the client, so on its own it
/// would let a client mint a fresh bucket per request. Each client address
/// may therefore introduce at most [`HeaderCardinality::per_ip`] new values
/// per window (see there for the exact bound); past that its requests are
/// keyed by its address ([`ClientKey::Ip`]), i.e. charged to its IP bucket.
/// A missing or empty header, or one sent more than once (which value would
/// the application use?), is keyed by address too.
///
/// The tracking lives in a `MemoryStore` of its own (`max_tracked`
/// entries). When it is full, new values are charged to its shared overflow
/// cells and, once those are spent, fall back to the address; size
/// `max_tracked` above (addresses × (per_ip + 1)) at your peak.
///
/// ```
/// use http::Request;
/// use ratelimit::key::{ClientIpConfig, ClientKey, HeaderCardinality, HeaderKey, PeerAddr};
/// use ratelimit::ManualClock;
///
/// let cap = HeaderCardinality { per_ip: 2, ..HeaderCardinality::default() };
/// let key = HeaderKey::new("x-api-key", ClientIpConfig::default(), cap, ManualClock::new()).unwrap();
/// let request = |api_key: &str| {
///     let (mut parts, ()) = Request::builder().header("x-api-key", api_key).body(()).unwrap().into_parts();
///     parts.extensions.insert(PeerAddr("192.0.2.7:4000".parse().unwrap()));
///     parts
/// };
/// let a = key.extract(&request("key-a"));
/// assert!(matches!(a, ClientKey::Header(_)));
/// assert_eq!(key.extract(&request("key-a")), a, "a known value keeps its key");
/// assert!(matches!(key.extract(&request("key-b")), ClientKey::Header(_)));
/// // A third new value from the same address in the window: the IP bucket.
/// assert_eq!(key.extract(&request("key-c")), ClientKey::Ip("192.0.2.7".parse().unwrap()));
/// ```
#[derive(Debug)]
pub struct HeaderKey<C: Clock = SystemClock> {
    source: Header,
    ip: IpKey,
    hasher: KeyHasher,
    budget: HeaderBudget<C>,
}

impl<C: Clock> HeaderKey<C> {
    /// A header key extractor. Refuses an invalid header name, a zero
    /// cardinality or window.
    pub fn new(
        name: &str,
        ip: ClientIpConfig,
        cardinality: HeaderCardinality,
        clock: C,
    ) -> Result<Self, HeaderKeyError> {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| HeaderKeyError::new(format!("invalid header name {name:?}"), None))?;
        Ok(HeaderKey {
            source: Header(name),
            ip: IpKey::new(ip),
            hasher: KeyHasher::new(),
            budget: HeaderBudget::new(cardinality, Some(default_network_budget()), clock)?,
        })
    }

    /// The header read.
    pub fn header_name(&self) -> &HeaderName {
        &self.source.0
    }

    /// The key of a request: what [`Header`] answers with this extractor's
    /// budget.
    pub fn extract(&self, parts: &http::request::Parts) -> ClientKey {
        let address = self.ip.extract(parts);
        let mut cx = KeyContext::with_address(parts, address, &self.hasher)
            .header_values(&self.budget)
            .network(self.ip.config());
        self.source.extract(&mut cx)
    }
}

/// The bound on how many distinct header values one client address may
/// introduce (see [`HeaderKey`]), shared by every `header(...)` key of a
/// runtime so the per-address cap spans all of them.
#[derive(Debug)]
pub(crate) struct HeaderBudget<C: Clock = SystemClock> {
    hasher: ahash::RandomState,
    tracker: Limiter<MemoryStore, C>,
    seen: Quota,
    budget: Quota,
}

/// What a [`KeyContext`] asks of a header budget (a trait object there, so
/// the context need not know the budget's clock).
pub(crate) trait HeaderValues: Send + Sync {
    /// The key of `name`'s value on a request from `ip_key`: the value's
    /// own bucket while the address's budget allows, else the address.
    /// `network`: the address's network, whose new tracked values share a
    /// budget (so one network rotating addresses cannot fill the tracker).
    fn key(
        &self,
        name: &HeaderName,
        parts: &http::request::Parts,
        ip_key: ClientKey,
        network: Option<std::net::IpAddr>,
    ) -> ClientKey;
}

impl<C: Clock> HeaderBudget<C> {
    /// The tracker's cell for `key`, in its network's group.
    fn cell<K: std::hash::Hash>(&self, route: u32, key: &K, network: Option<std::net::IpAddr>) -> crate::CellKey {
        match network {
            Some(net) => self.tracker.grouped_cell_key(route, key, &net),
            None => self.tracker.cell_key(route, key),
        }
    }

    /// `network_budget`: the new tracked entries one network may add (see
    /// [`MemoryStoreBuilder::new_keys_per_group`](crate::MemoryStoreBuilder::new_keys_per_group)).
    pub(crate) fn new(
        cardinality: HeaderCardinality,
        network_budget: Option<Quota>,
        clock: C,
    ) -> Result<Self, HeaderKeyError> {
        let (seen, budget) = Self::quotas(cardinality)?;
        let mut store = MemoryStore::builder().max_keys(cardinality.max_tracked);
        if let Some(budget) = network_budget {
            store = store.new_keys_per_group(budget);
        }
        let store = store.try_build().map_err(|e| {
            HeaderKeyError::new(
                format!("header cardinality max_tracked: {e}"),
                Some(HeaderKeySource::Store(e)),
            )
        })?;
        Ok(HeaderBudget {
            hasher: ahash::RandomState::new(),
            tracker: Limiter::new(store, clock),
            seen,
            budget,
        })
    }
}

#[cfg(feature = "axum")]
impl HeaderBudget<crate::SystemClock> {
    /// Whether [`HeaderBudget::new`] would accept `cardinality`, without
    /// allocating its tracker (for the configuration checker).
    pub(crate) fn validate(cardinality: HeaderCardinality) -> Result<(), HeaderKeyError> {
        Self::quotas(cardinality)?;
        MemoryStore::builder()
            .max_keys(cardinality.max_tracked)
            .validate()
            .map_err(|e| {
                HeaderKeyError::new(
                    format!("header cardinality max_tracked: {e}"),
                    Some(HeaderKeySource::Store(e)),
                )
            })
    }
}

impl<C: Clock> HeaderBudget<C> {
    /// The quota of one value's first sighting, and of new values per
    /// address.
    fn quotas(cardinality: HeaderCardinality) -> Result<(Quota, Quota), HeaderKeyError> {
        let seen = Quota::new(1, cardinality.window).map_err(|e| {
            HeaderKeyError::new(
                format!("header cardinality window: {e}"),
                Some(HeaderKeySource::Quota(e)),
            )
        })?;
        let budget = Quota::new(cardinality.per_ip, cardinality.window).map_err(|e| {
            HeaderKeyError::new(
                format!("header cardinality per_ip: {e}"),
                Some(HeaderKeySource::Quota(e)),
            )
        })?;
        Ok((seen, budget))
    }
}

impl<C: Clock> HeaderValues for HeaderBudget<C> {
    fn key(
        &self,
        name: &HeaderName,
        parts: &http::request::Parts,
        ip_key: ClientKey,
        network: Option<std::net::IpAddr>,
    ) -> ClientKey {
        let Some(bytes) = single_value(&parts.headers, name) else {
            return ip_key;
        };
        let value_hash = self.hasher.hash_one(bytes);
        let pair = (ip_key, value_hash);

        // Known for this address within the window: its own bucket. (A
        // zero-cost probe never inserts, so it only ever sees the pair's own
        // cell or a fresh one.)
        let seen = self.cell(SEEN_ROUTE, &pair, network);
        let probe = self.tracker.check_cell(seen, &self.seen, 0);
        if probe.is_denied() || probe.remaining() == 0 {
            return ClientKey::Header(value_hash);
        }
        // A new value: it spends one unit of the address's budget of new
        // values, or the request falls back to the address's bucket.
        if self
            .tracker
            .check_cell(self.cell(BUDGET_ROUTE, &ip_key, network), &self.budget, 1)
            .is_denied()
        {
            return ip_key;
        }
        self.tracker.check_cell(seen, &self.seen, 1);
        ClientKey::Header(value_hash)
    }
}

/// The value a header key reads: the header sent exactly once, its value
/// trimmed of ASCII whitespace and not empty; `None` (the request is keyed
/// by address) otherwise. The runtime and `explain` both ask this.
pub(crate) fn single_value<'a>(headers: &'a http::HeaderMap, name: &HeaderName) -> Option<&'a [u8]> {
    let mut values = headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let bytes = value.as_bytes().trim_ascii();
    (!bytes.is_empty()).then_some(bytes)
}
