//! An external limit service, consulted off the request path.
//!
//! [`ServiceCache::get`] never waits: a cached answer is returned at once; a
//! miss starts one background fetch for that key (single-flight) and answers
//! `None`, so the request falls through to the next resolver. Answers live
//! for a TTL; after it, the stale answer keeps being served while one refresh
//! runs. "No answer" (404, an error, a timeout) is remembered for a shorter
//! negative TTL, so a failing service is not hammered. The cache and the
//! number of fetches in flight are bounded. The cache is split into 16
//! shards, each behind its own mutex, held for one hash-map probe.
//!
//! A full cache evicts "no answer" entries before answers, and a "no answer"
//! never evicts an answer: a client inventing keys (each a miss) cannot push
//! a partner's tier out of the cache, since only the service creates answers.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use ratelimit::service::{CacheSettings, HttpLimitService, ServiceCache};
//!
//! let service = HttpLimitService::new("http://127.0.0.1:9/v1/limits").unwrap();
//! let cache = ServiceCache::new(service, CacheSettings::default()).unwrap();
//! // A miss answers at once; the lookup runs in the background.
//! assert_eq!(cache.get(0x42), None);
//! # }
//! ```
//!
//! The key sent is a `u64` chosen by the caller: a stable identifier of the
//! client agreed with the service, never the raw client value. The HTTP
//! runtime sends [`ServiceIdKey::client_id`]: HMAC-SHA256, under a secret
//! shared with the service, of the key's length-prefixed fields (see
//! `docs/http.md`), so neither a client nor anyone reading the service's URLs
//! can compute or invert it.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::config::TlsConfig;
use crate::net::http::{http_client, http_get, is_http_or_https, HttpClient};

/// The shortest secret [`ServiceIdKey`] accepts, in bytes.
pub const MIN_ID_SECRET_LEN: usize = 32;

/// The secret the limit service's client ids are computed under, shared
/// with the service: an id is the first 8 bytes, big-endian, of
/// HMAC-SHA256(secret, message), where the message is the key's fields
/// (what [`KeySource::write_id`](crate::key::KeySource::write_id) writes,
/// one field per `write` call), each as its length (a `u32`, big-endian)
/// followed by its bytes. `docs/http.md` lists the fields of each key kind
/// and test vectors.
///
/// ```
/// use ratelimit::service::ServiceIdKey;
///
/// let ids = ServiceIdKey::new(b"ratelimit-service-id-test-secret").unwrap();
/// // A header key `x-api-key: key-a`: the fields `header:` and `key-a`.
/// assert_eq!(ids.id_of_fields(&[b"header:", b"key-a"]), 0x0a6f_1060_5e8d_eccc);
/// assert!(ServiceIdKey::new(b"too short").is_err());
/// ```
#[derive(Clone)]
pub struct ServiceIdKey {
    mac: hmac::Hmac<sha2::Sha256>,
}

impl std::fmt::Debug for ServiceIdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceIdKey(<redacted>)")
    }
}

impl ServiceIdKey {
    /// The key for `secret`, at least [`MIN_ID_SECRET_LEN`] bytes.
    pub fn new(secret: &[u8]) -> Result<Self, ServiceError> {
        use hmac::KeyInit;
        if secret.len() < MIN_ID_SECRET_LEN {
            return Err(ServiceError::of(
                ServiceErrorKind::Setup,
                format!(
                    "the client id secret is {} bytes; at least {MIN_ID_SECRET_LEN} are needed",
                    secret.len()
                ),
            ));
        }
        let mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
            .map_err(|e| ServiceError::of(ServiceErrorKind::Setup, format!("client id secret: {e}")))?;
        Ok(ServiceIdKey { mac })
    }

    /// The id of the key `source` found for a request (`key`, in the
    /// context `cx` it was extracted in).
    pub fn client_id<K: crate::key::KeySource + ?Sized>(
        &self,
        source: &K,
        cx: &crate::key::KeyContext<'_>,
        key: &crate::key::ClientKey,
    ) -> u64 {
        // The source's name follows the kind tag, for the key's own value
        // only: an address fallback is the address's id, whatever the rule.
        let name = match key {
            crate::key::ClientKey::Ip(_) | crate::key::ClientKey::UnknownPeer => None,
            _ => source.id_name(),
        };
        let mut fields = IdFields {
            mac: self.mac.clone(),
            name: name.map(str::as_bytes),
        };
        source.write_id(cx, key, &mut fields);
        std::hash::Hasher::finish(&fields)
    }

    /// The id of a message made of `fields` (for a service computing the ids
    /// of its own clients, and for tests).
    pub fn id_of_fields(&self, fields: &[&[u8]]) -> u64 {
        let mut h = IdFields {
            mac: self.mac.clone(),
            name: None,
        };
        for f in fields {
            std::hash::Hasher::write(&mut h, f);
        }
        std::hash::Hasher::finish(&h)
    }
}

/// The message of an id: each `write` is one field, length-prefixed, so no
/// two different sequences of fields give the same bytes. Integers are
/// written big-endian (never in the platform's order), one field each.
/// The source's name (see `KeySource::id_name`) is written as the second
/// field, right after the first (the kind tag).
struct IdFields<'a> {
    mac: hmac::Hmac<sha2::Sha256>,
    name: Option<&'a [u8]>,
}

impl IdFields<'_> {
    fn field(&mut self, bytes: &[u8]) {
        use hmac::Mac;
        // A field is a header value, a claim or an address: far below 4 GiB
        // (the HTTP server bounds them); a longer one would still be hashed,
        // with a saturated length.
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        self.mac.update(&len.to_be_bytes());
        self.mac.update(bytes);
    }
}

impl std::hash::Hasher for IdFields<'_> {
    fn write(&mut self, bytes: &[u8]) {
        self.field(bytes);
        if let Some(name) = self.name.take() {
            self.field(name);
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write(&[n]);
    }
    fn write_u16(&mut self, n: u16) {
        self.write(&n.to_be_bytes());
    }
    fn write_u32(&mut self, n: u32) {
        self.write(&n.to_be_bytes());
    }
    fn write_u64(&mut self, n: u64) {
        self.write(&n.to_be_bytes());
    }
    fn write_u128(&mut self, n: u128) {
        self.write(&n.to_be_bytes());
    }
    fn write_usize(&mut self, n: usize) {
        self.write(&(n as u64).to_be_bytes());
    }
    fn write_i8(&mut self, n: i8) {
        self.write(&n.to_be_bytes());
    }
    fn write_i16(&mut self, n: i16) {
        self.write(&n.to_be_bytes());
    }
    fn write_i32(&mut self, n: i32) {
        self.write(&n.to_be_bytes());
    }
    fn write_i64(&mut self, n: i64) {
        self.write(&n.to_be_bytes());
    }
    fn write_i128(&mut self, n: i128) {
        self.write(&n.to_be_bytes());
    }
    fn write_isize(&mut self, n: isize) {
        self.write(&(n as i64).to_be_bytes());
    }
    fn finish(&self) -> u64 {
        use hmac::Mac;
        let tag = self.mac.clone().finalize().into_bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&tag[..8]);
        u64::from_be_bytes(first)
    }
}

/// What the limit service says about a client.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
#[non_exhaustive]
pub enum ServiceAnswer {
    /// A profile name: `{"tier": "premium"}`.
    Tier {
        /// The profile.
        tier: String,
    },
    /// Explicit numbers: `{"rpm": 600, "burst": 60}`.
    Limits {
        /// Requests per minute.
        rpm: u32,
        /// Burst; defaults to `rpm`.
        burst: Option<u32>,
    },
}

/// A failed lookup (the cache treats it as "no answer"), or a service or
/// cache that cannot be built. Opaque: its message, and the underlying error
/// as [`source`](std::error::Error::source) where there is one.
#[derive(Debug, Clone)]
pub struct ServiceError {
    kind: ServiceErrorKind,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServiceErrorKind {
    /// The service's URL or settings.
    Setup,
    /// The exchange failed (connection, timeout, body).
    Exchange,
    /// The service answered with something other than an answer.
    Answer,
    /// Raised by a [`LimitService`] of the application's.
    Other,
}

impl ServiceError {
    /// An error of a [`LimitService`] implementation.
    pub fn new(message: impl Into<String>) -> Self {
        Self::of(ServiceErrorKind::Other, message)
    }

    /// An error of a [`LimitService`] implementation, caused by `source`.
    pub fn with_source(message: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        let mut e = Self::new(message);
        e.source = Some(Arc::new(source));
        e
    }

    fn of(kind: ServiceErrorKind, message: impl Into<String>) -> Self {
        ServiceError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Whether the service could not be reached or did not answer in time
    /// (as opposed to answering badly).
    pub fn is_exchange(&self) -> bool {
        self.kind == ServiceErrorKind::Exchange
    }
}

impl PartialEq for ServiceError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A source of per-client limits. `key` is the client key's hash: the raw
/// client value never leaves the process.
pub trait LimitService: Send + Sync + 'static {
    /// The answer for `key`: `Ok(None)` when the service has none.
    fn lookup(&self, key: u64) -> impl Future<Output = Result<Option<ServiceAnswer>, ServiceError>> + Send;
}

/// [`LimitService`] over HTTP or HTTPS: `GET {base_url}/{key as 16 hex
/// digits}`; 200 with a JSON [`ServiceAnswer`], 404 for no answer, anything
/// else is an error.
///
/// `https://` verifies the service's certificate, hostname included, against
/// the webpki roots ([`HttpLimitService::new`]) or the CAs of a
/// [`TlsConfig`]'s `ca_file` ([`HttpLimitService::with_tls`]; the runtime
/// passes `[tls]`). A certificate that fails is a failed lookup like any
/// other: no answer (cached for the negative TTL), counted in
/// [`ServiceCache::lookup_errors`] and logged; the route falls through to
/// its next step. Nothing is fetched before the first lookup, so startup
/// never depends on the service.
#[derive(Debug, Clone)]
pub struct HttpLimitService {
    base: String,
    client: HttpClient,
}

/// The largest answer body read.
const MAX_BODY: usize = 4096;

impl HttpLimitService {
    /// A client of the service at `base_url` (`http://host:port/path` or
    /// `https://...`); `https://` trusts the webpki roots.
    ///
    /// ```
    /// use ratelimit::service::HttpLimitService;
    ///
    /// assert!(HttpLimitService::new("https://limits.example.com/v1/limits").is_ok());
    /// assert!(HttpLimitService::new("ftp://limits.example.com/").is_err());
    /// ```
    pub fn new(base_url: &str) -> Result<Self, ServiceError> {
        Self::with_tls(base_url, &TlsConfig::default())
    }

    /// A client of the service at `base_url` whose `https://` trusts the
    /// CAs of `tls.ca_file` (a private CA, and only it) when set, the webpki
    /// roots otherwise. Reads the CA file now: a missing or bad one is an
    /// error naming it.
    ///
    /// ```
    /// use ratelimit::config::TlsConfig;
    /// use ratelimit::service::HttpLimitService;
    ///
    /// let tls = TlsConfig::with_ca_file("/nonexistent/private-ca.pem");
    /// let err = HttpLimitService::with_tls("https://limits.internal/v1", &tls).unwrap_err();
    /// assert!(err.to_string().contains("private-ca.pem"), "{err}");
    /// ```
    pub fn with_tls(base_url: &str, tls: &TlsConfig) -> Result<Self, ServiceError> {
        let setup = |m: String| ServiceError::of(ServiceErrorKind::Setup, m);
        let base = base_url.trim_end_matches('/').to_owned();
        let uri = base
            .parse::<http::Uri>()
            .map_err(|e| setup(format!("{base_url:?}: {e}")))?;
        if !is_http_or_https(&uri) {
            return Err(setup(format!("{base_url:?}: expected an http:// or https:// URL")));
        }
        // Never sent, and would be logged with every failed lookup.
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(setup(
                "the limit service URL has credentials (user:password@): they would not be sent, and would be \
                 logged; refused"
                    .to_owned(),
            ));
        }
        let client = http_client(tls).map_err(|e| setup(format!("{base_url}: {e}")))?;
        Ok(HttpLimitService { base, client })
    }
}

impl LimitService for HttpLimitService {
    async fn lookup(&self, key: u64) -> Result<Option<ServiceAnswer>, ServiceError> {
        let uri: http::Uri = format!("{}/{key:016x}", self.base)
            .parse()
            .map_err(|e| ServiceError::of(ServiceErrorKind::Setup, format!("bad URI: {e}")))?;
        // The cache bounds each lookup with its own timeout; this one only
        // keeps a stuck exchange from outliving it by much.
        let (status, body) = http_get(&self.client, uri, MAX_BODY, std::time::Duration::from_secs(60))
            .await
            .map_err(|m| ServiceError::of(ServiceErrorKind::Exchange, format!("{}: {m}", self.base)))?;
        match status {
            // Every error names the service (its base URL, never the
            // client's id): the log line says which target failed.
            http::StatusCode::OK => serde_json::from_slice(&body).map(Some).map_err(|e| {
                let mut err = ServiceError::of(ServiceErrorKind::Answer, format!("{}: answer: {e}", self.base));
                err.source = Some(Arc::new(e));
                err
            }),
            http::StatusCode::NOT_FOUND => Ok(None),
            other => Err(ServiceError::of(
                ServiceErrorKind::Answer,
                format!("{}: status {other}", self.base),
            )),
        }
    }
}

/// Cache settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheSettings {
    /// How long an answer is fresh.
    pub ttl: Duration,
    /// How long "no answer" is remembered.
    pub negative_ttl: Duration,
    /// How long a stale answer may still be served while refreshes fail.
    pub max_stale: Duration,
    /// Per-lookup timeout.
    pub timeout: Duration,
    /// Most keys cached.
    pub max_entries: usize,
    /// Most lookups in flight at once.
    pub max_in_flight: usize,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            ttl: crate::defaults::SERVICE_TTL,
            negative_ttl: crate::defaults::SERVICE_NEGATIVE_TTL,
            max_stale: Duration::from_secs(600),
            timeout: crate::defaults::SERVICE_TIMEOUT,
            max_entries: crate::defaults::SERVICE_MAX_ENTRIES,
            max_in_flight: 256,
        }
    }
}

crate::setters::with!(CacheSettings {
    with_ttl => ttl: Duration,
    with_negative_ttl => negative_ttl: Duration,
    with_max_stale => max_stale: Duration,
    with_timeout => timeout: Duration,
    with_max_entries => max_entries: usize,
    with_max_in_flight => max_in_flight: usize,
});

struct Entry {
    answer: Option<ServiceAnswer>,
    fresh_until: Instant,
    usable_until: Instant,
}

/// Shards of the cache, each behind its own mutex: a lookup locks one
/// shard for a hash-map probe, never the whole cache.
const SHARDS: usize = 16;

/// One shard. Answers and misses are kept apart so that a flood of clients
/// the service does not know (misses: anyone can make those, with new
/// keys) can only evict other misses, never a partner's answer (which only
/// the service can create).
#[derive(Default)]
struct State {
    answers: HashMap<u64, Entry>,
    misses: HashMap<u64, Entry>,
    in_flight: HashSet<u64>,
    /// Reads of this shard: fresh, stale, nothing usable.
    reads: [u64; 3],
}

impl State {
    fn get(&self, key: u64) -> Option<&Entry> {
        self.answers.get(&key).or_else(|| self.misses.get(&key))
    }

    /// Stores `entry` within `cap` entries: a miss evicts only a miss (and
    /// is dropped when the shard holds only answers); an answer evicts a
    /// miss first, else another answer. Eviction picks an arbitrary entry,
    /// in constant time: the bound matters, not the choice.
    fn store(&mut self, key: u64, entry: Entry, cap: usize) {
        if entry.answer.is_some() {
            self.misses.remove(&key);
            if !self.answers.contains_key(&key) && self.answers.len() + self.misses.len() >= cap {
                if let Some(victim) = self.misses.keys().next().copied() {
                    self.misses.remove(&victim);
                } else if let Some(victim) = self.answers.keys().next().copied() {
                    self.answers.remove(&victim);
                }
            }
            self.answers.insert(key, entry);
        } else {
            self.answers.remove(&key);
            if !self.misses.contains_key(&key) && self.answers.len() + self.misses.len() >= cap {
                match self.misses.keys().next().copied() {
                    Some(victim) => {
                        self.misses.remove(&victim);
                    }
                    // Full of answers: keep them; the miss is not cached.
                    None => return,
                }
            }
            self.misses.insert(key, entry);
        }
    }
}

/// The request-path face of a [`LimitService`]: see the module docs.
pub struct ServiceCache<S> {
    service: Arc<S>,
    settings: CacheSettings,
    shards: Arc<[Mutex<State>]>,
    /// Lookups in flight over all shards (bounded by `max_in_flight`).
    in_flight: Arc<AtomicUsize>,
    errors: Arc<LookupErrors>,
    counters: Arc<Counters>,
    runtime: tokio::runtime::Handle,
}

/// What the cache counts ([`ServiceCache::stats`]).
#[derive(Default)]
/// (Reads are counted in the shards, under the lock a read takes anyway:
/// no cache line shared by every request.)
struct Counters {
    answers: AtomicU64,
    no_answers: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
}

/// A snapshot of a [`ServiceCache`]'s counters (what the HTTP runtime
/// exports as `ratelimit_service_cache_total` and
/// `ratelimit_service_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CacheStats {
    /// Reads that found a fresh entry.
    pub hits: u64,
    /// Reads that found an entry past its TTL but within `max_stale`,
    /// served while a refresh runs.
    pub stale: u64,
    /// Reads that found nothing usable.
    pub misses: u64,
    /// Lookups the service answered with a limit.
    pub answers: u64,
    /// Lookups the service answered with "not known" (no limit).
    pub no_answers: u64,
    /// Lookups that failed (a refused connection or certificate, a bad
    /// answer...).
    pub errors: u64,
    /// Lookups with no answer within the timeout.
    pub timeouts: u64,
    /// Entries held now (answers and remembered misses).
    pub entries: usize,
}

impl CacheStats {
    /// Lookups that failed or timed out (what
    /// [`ServiceCache::lookup_errors`] counts).
    pub fn lookups_failed(&self) -> u64 {
        self.errors + self.timeouts
    }
}

/// Failed lookups: counted, and logged at most once per
/// [`LookupErrors::LOG_EVERY`] (a failing service fails for every key).
#[derive(Default)]
struct LookupErrors {
    count: std::sync::atomic::AtomicU64,
    /// When the last line was logged, and the failures since.
    logged: Mutex<(Option<Instant>, u64)>,
}

impl LookupErrors {
    const LOG_EVERY: Duration = Duration::from_secs(60);

    /// Counts a failed lookup (`why`: the error, which names the service's
    /// URL and never a client key) and logs it when due.
    fn record(&self, why: &dyn std::fmt::Display) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let Ok(mut logged) = self.logged.lock() else {
            return;
        };
        logged.1 += 1;
        let due = match logged.0 {
            None => true,
            Some(at) => at.elapsed() >= Self::LOG_EVERY,
        };
        if due {
            let failed = std::mem::take(&mut logged.1);
            logged.0 = Some(Instant::now());
            drop(logged);
            tracing::warn!(
                target: "ratelimit",
                failed,
                "limit service lookup failed: {why}; no answer for the client (the route falls through to its \
                 next step; retried after the negative TTL; at most one such line a minute, `failed` counts \
                 the lookups since the last)"
            );
        }
    }
}

impl<S> std::fmt::Debug for ServiceCache<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceCache")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<S: LimitService> ServiceCache<S> {
    /// A cache over `service`; fetches run on the current tokio runtime.
    /// Fails outside a runtime.
    pub fn new(service: S, settings: CacheSettings) -> Result<Self, ServiceError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            let mut err = ServiceError::of(ServiceErrorKind::Setup, "the limit service cache needs a tokio runtime");
            err.source = Some(Arc::new(e));
            err
        })?;
        Ok(ServiceCache {
            service: Arc::new(service),
            settings,
            shards: (0..SHARDS).map(|_| Mutex::new(State::default())).collect(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            errors: Arc::default(),
            counters: Arc::default(),
            runtime,
        })
    }

    /// How many lookups failed or timed out so far (a refused certificate,
    /// a refused connection, a bad answer...). Each is also logged (a
    /// `WARN` line naming the service and the reason, at most one a
    /// minute), and each leaves the client without an answer from the
    /// service for the negative TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::service::{CacheSettings, HttpLimitService, ServiceCache};
    ///
    /// // Nothing listens on port 9: the lookup fails, in the background.
    /// let service = HttpLimitService::new("http://127.0.0.1:9/v1/limits").unwrap();
    /// let cache = ServiceCache::new(service, CacheSettings::default()).unwrap();
    /// assert_eq!(cache.get(0x42), None);
    /// while cache.lookup_errors() == 0 {
    ///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    /// }
    /// assert_eq!(cache.lookup_errors(), 1);
    /// # }
    /// ```
    pub fn lookup_errors(&self) -> u64 {
        self.errors.count.load(Ordering::Relaxed)
    }

    /// Reads and lookups so far, and the entries held now (which locks
    /// each shard in turn, briefly: call it from a timer, not per request).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::service::{CacheSettings, HttpLimitService, ServiceCache};
    ///
    /// let service = HttpLimitService::new("http://127.0.0.1:9/v1/limits").unwrap();
    /// let cache = ServiceCache::new(service, CacheSettings::default()).unwrap();
    /// assert_eq!(cache.get(0x42), None);
    /// let stats = cache.stats();
    /// assert_eq!((stats.hits, stats.misses), (0, 1));
    /// # }
    /// ```
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut stats = CacheStats {
            answers: load(&c.answers),
            no_answers: load(&c.no_answers),
            errors: load(&c.errors),
            timeouts: load(&c.timeouts),
            ..CacheStats::default()
        };
        for shard in self.shards.iter() {
            if let Ok(s) = shard.lock() {
                stats.hits += s.reads[0];
                stats.stale += s.reads[1];
                stats.misses += s.reads[2];
                stats.entries += s.answers.len() + s.misses.len();
            }
        }
        stats
    }

    /// The shard of `key`, and the most entries it holds.
    fn shard(&self, key: u64) -> &Mutex<State> {
        // Keys are hashes already; fold the high bits in anyway, so a
        // service's own key scheme cannot pile keys on one shard.
        &self.shards[((key ^ (key >> 32)) as usize) % SHARDS]
    }

    fn shard_cap(&self) -> usize {
        self.settings.max_entries.div_ceil(SHARDS).max(1)
    }

    /// The cached answer for `key`, never waiting: starts a background fetch
    /// on a miss or a stale entry (at most one per key at a time).
    pub fn get(&self, key: u64) -> Option<ServiceAnswer> {
        let now = Instant::now();
        let Ok(mut state) = self.shard(key).lock() else {
            return None;
        };
        let (answer, needs_fetch) = match state.get(key) {
            Some(e) if now < e.fresh_until => {
                let answer = e.answer.clone();
                state.reads[0] += 1;
                return answer;
            }
            Some(e) if now < e.usable_until => {
                let answer = e.answer.clone();
                state.reads[1] += 1;
                (answer, true)
            }
            _ => {
                state.reads[2] += 1;
                (None, true)
            }
        };
        // Refreshing an answer may use every slot; a lookup for a key with
        // no answer (anyone can invent those) only three quarters of them,
        // so a flood of invented keys cannot starve partners' refreshes.
        let max = self.settings.max_in_flight;
        // (At least one slot reserved from two up; a single slot is shared.)
        let slots = if answer.is_some() {
            max
        } else {
            max.saturating_sub(max.div_ceil(4)).max(1)
        };
        if needs_fetch && !state.in_flight.contains(&key) && self.take_fetch_slot(slots) {
            state.in_flight.insert(key);
            // Unlocked before spawning: a runtime that has stopped drops the
            // fetch at once, on this thread, and its guard locks this shard.
            drop(state);
            self.spawn_fetch(key);
        }
        answer
    }

    /// One of the first `max` of the `max_in_flight` lookups, if one is free.
    fn take_fetch_slot(&self, max: usize) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_ok()
    }

    fn spawn_fetch(&self, key: u64) {
        /// Removes the key from `in_flight` however the fetch ends: done,
        /// panicked in the service, or dropped unrun by a stopped runtime.
        struct InFlight(Arc<[Mutex<State>]>, usize, u64, Arc<AtomicUsize>);
        impl Drop for InFlight {
            fn drop(&mut self) {
                if let Ok(mut state) = self.0[self.1].lock() {
                    state.in_flight.remove(&self.2);
                }
                self.3.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let index = ((key ^ (key >> 32)) as usize) % SHARDS;
        let guard = InFlight(Arc::clone(&self.shards), index, key, Arc::clone(&self.in_flight));
        let service = Arc::clone(&self.service);
        let shards = Arc::clone(&self.shards);
        let cap = self.shard_cap();
        let settings = self.settings;
        let errors = Arc::clone(&self.errors);
        let counters = Arc::clone(&self.counters);
        self.runtime.spawn(async move {
            let result = tokio::time::timeout(settings.timeout, service.lookup(key)).await;
            let counter = match &result {
                Ok(Err(e)) => {
                    errors.record(e);
                    &counters.errors
                }
                Err(_) => {
                    errors.record(&format_args!("no answer within {:?}", settings.timeout));
                    &counters.timeouts
                }
                Ok(Ok(Some(_))) => &counters.answers,
                Ok(Ok(None)) => &counters.no_answers,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let now = Instant::now();
            // `guard` (moved in) clears `in_flight` when this future is
            // dropped, after the answer below is stored and the lock released.
            let _guard = &guard;
            let Ok(mut state) = shards[index].lock() else {
                return;
            };
            let entry = match result {
                Ok(Ok(Some(answer))) => Entry {
                    answer: Some(answer),
                    fresh_until: now + settings.ttl,
                    usable_until: now + settings.ttl + settings.max_stale,
                },
                Ok(Ok(None)) => Entry {
                    answer: None,
                    fresh_until: now + settings.negative_ttl,
                    usable_until: now + settings.negative_ttl,
                },
                // An error or a timeout: keep a stale answer (it stays usable
                // until its own limit) but retry only after the negative TTL.
                Ok(Err(_)) | Err(_) => match state.get(key) {
                    Some(old) if old.answer.is_some() && now < old.usable_until => Entry {
                        answer: old.answer.clone(),
                        fresh_until: now + settings.negative_ttl,
                        usable_until: old.usable_until,
                    },
                    _ => Entry {
                        answer: None,
                        fresh_until: now + settings.negative_ttl,
                        usable_until: now + settings.negative_ttl,
                    },
                },
            };
            state.store(key, entry, cap);
        });
    }
}

/// A [`LimitService`] of any type, boxed: what the HTTP runtime's `service`
/// step asks (the HTTP one by default, or the application's own given to
/// `RateLimitBuilder::limit_service`). Lookups run off the request path, so
/// the box its future takes is not on it.
///
/// ```
/// use ratelimit::service::{BoxLimitService, LimitService, ServiceAnswer, ServiceError};
///
/// struct Plans;
/// impl LimitService for Plans {
///     async fn lookup(&self, key: u64) -> Result<Option<ServiceAnswer>, ServiceError> {
///         Ok((key == 7).then(|| ServiceAnswer::Tier { tier: "premium".into() }))
///     }
/// }
/// let boxed = BoxLimitService::new(Plans);
/// # let _ = boxed;
/// ```
pub struct BoxLimitService(Box<dyn ErasedService>);

impl std::fmt::Debug for BoxLimitService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxLimitService")
    }
}

impl BoxLimitService {
    /// Boxes `service`.
    pub fn new(service: impl LimitService) -> Self {
        BoxLimitService(Box::new(service))
    }
}

type LookupFuture<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<Option<ServiceAnswer>, ServiceError>> + Send + 'a>>;

trait ErasedService: Send + Sync + 'static {
    fn lookup_boxed(&self, key: u64) -> LookupFuture<'_>;
}

impl<S: LimitService> ErasedService for S {
    fn lookup_boxed(&self, key: u64) -> LookupFuture<'_> {
        Box::pin(self.lookup(key))
    }
}

impl LimitService for BoxLimitService {
    fn lookup(&self, key: u64) -> impl Future<Output = Result<Option<ServiceAnswer>, ServiceError>> + Send {
        self.0.lookup_boxed(key)
    }
}

#[cfg(test)]
mod tests {
    use super::ServiceIdKey;
    use crate::key::{Claim, ClientKey, Header, Ip, KeyContext, KeyHasher};

    const SECRET: &[u8] = b"ratelimit-service-id-test-secret";

    /// The vectors of `docs/http.md`, computed with Python's `hmac` module
    /// (an independent implementation), so a limit service can check its code.
    #[test]
    fn documented_test_vectors() {
        let ids = ServiceIdKey::new(SECRET).unwrap();
        let cases: [(&[&[u8]], u64); 6] = [
            (&[b"claim:", b"sub", b"alice"], 0x0fe9_a6b8_ae5a_8ab8),
            (&[b"claim:", b"uid", b"42"], 0x892c_bad0_be4b_189e),
            (&[b"header:", b"x-api-key", b"key-a"], 0xae26_b4e4_0003_7401),
            (&[b"ip:", &[192, 0, 2, 1]], 0x0cd2_5fd4_c0d5_6f2d),
            (
                &[b"ip:", &[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]],
                0xf1ac_424a_268c_a2d8,
            ),
            (&[b"unknown"], 0x99f0_86c9_674e_3d17),
        ];
        for (fields, id) in cases {
            assert_eq!(ids.id_of_fields(fields), id, "{fields:?}");
        }
    }

    /// The built-in key sources write exactly the documented fields.
    #[test]
    fn key_sources_write_the_documented_fields() {
        let ids = ServiceIdKey::new(SECRET).unwrap();
        let hasher = KeyHasher::new();
        let (parts, ()) = http::Request::builder()
            .header("x-api-key", "  key-a ")
            .body(())
            .unwrap()
            .into_parts();
        let v4 = ClientKey::Ip("192.0.2.1".parse().unwrap());
        let cx = KeyContext::with_address(&parts, v4, &hasher);
        assert_eq!(ids.client_id(&Ip, &cx, &v4), 0x0cd2_5fd4_c0d5_6f2d);
        // A header key (its value trimmed), and its address fallback.
        let header = Header::from_static("x-api-key");
        assert_eq!(
            ids.client_id(&header, &cx, &ClientKey::Header(1)),
            0xae26_b4e4_0003_7401
        );
        assert_eq!(ids.client_id(&header, &cx, &v4), 0x0cd2_5fd4_c0d5_6f2d);
        let v6 = ClientKey::Ip("2001:db8:1:2::".parse().unwrap());
        assert_eq!(ids.client_id(&Ip, &cx, &v6), 0xf1ac_424a_268c_a2d8);
        assert_eq!(ids.client_id(&Ip, &cx, &ClientKey::UnknownPeer), 0x99f0_86c9_674e_3d17);
        // A claim without verified claims in the context: the address.
        assert_eq!(ids.client_id(&Claim("sub"), &cx, &v4), 0x0cd2_5fd4_c0d5_6f2d);
    }

    struct NoAnswers;
    impl super::LimitService for NoAnswers {
        async fn lookup(&self, _key: u64) -> Result<Option<super::ServiceAnswer>, super::ServiceError> {
            Ok(None)
        }
    }

    /// A cache whose runtime has stopped: a fetch spawned there is dropped
    /// unrun at once, on the calling thread, and its in-flight guard locks
    /// the key's shard. `get` must not deadlock on its own shard lock, and
    /// must not leak a fetch slot.
    #[test]
    fn get_after_the_runtime_stopped_neither_deadlocks_nor_leaks_a_slot() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let settings = super::CacheSettings {
            max_in_flight: 1,
            ..super::CacheSettings::default()
        };
        let cache = rt.block_on(async { super::ServiceCache::new(NoAnswers, settings).unwrap() });
        drop(rt);
        let cache = std::sync::Arc::new(cache);
        let (tx, rx) = std::sync::mpsc::channel();
        let c = std::sync::Arc::clone(&cache);
        std::thread::spawn(move || {
            let _ = c.get(1);
            let _ = c.get(2);
            let _ = tx.send(c.in_flight.load(std::sync::atomic::Ordering::Acquire));
        });
        let in_flight = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("get deadlocked (or panicked) after the runtime stopped");
        assert_eq!(in_flight, 0, "a fetch slot leaked");
    }

    /// Two claim keys (or two header keys) with the same value are
    /// different clients to the service: a user whose `sub` is `acme`
    /// must not get the tier of the organisation `org = "acme"`.
    #[test]
    fn ids_of_different_claims_with_one_value_differ() {
        let ids = ServiceIdKey::new(SECRET).unwrap();
        let hasher = KeyHasher::new();
        let claims = serde_json::json!({"sub": "acme", "org": "acme"});
        let serde_json::Value::Object(map) = claims else {
            unreachable!()
        };
        let (mut parts, ()) = http::Request::builder()
            .header("x-user", "acme")
            .header("x-org", "acme")
            .body(())
            .unwrap()
            .into_parts();
        parts.extensions.insert(crate::claims::VerifiedClaims::new(map));
        let v4 = ClientKey::Ip("192.0.2.1".parse().unwrap());
        let mut cx = KeyContext::with_address(&parts, v4, &hasher);
        assert!(cx.claims().is_some());
        let sub = ids.client_id(&Claim("sub"), &cx, &ClientKey::Claim(1));
        let org = ids.client_id(&Claim("org"), &cx, &ClientKey::Claim(1));
        assert_ne!(sub, org, "claim sub=acme and claim org=acme share a service id");
        let user = ids.client_id(&Header::from_static("x-user"), &cx, &ClientKey::Header(1));
        let tenant = ids.client_id(&Header::from_static("x-org"), &cx, &ClientKey::Header(1));
        assert_ne!(user, tenant, "header x-user: acme and x-org: acme share a service id");
    }

    #[test]
    fn ids_depend_on_the_secret_and_on_field_boundaries() {
        let a = ServiceIdKey::new(SECRET).unwrap();
        let b = ServiceIdKey::new(b"another-secret-of-32-bytes-or-so").unwrap();
        assert_ne!(a.id_of_fields(&[b"header:", b"k"]), b.id_of_fields(&[b"header:", b"k"]));
        // Length prefixes: moving bytes between fields changes the id.
        assert_ne!(a.id_of_fields(&[b"header:", b"k"]), a.id_of_fields(&[b"header:k"]));
        assert_ne!(a.id_of_fields(&[b"header:", b"k"]), a.id_of_fields(&[b"header", b":k"]));
        assert!(ServiceIdKey::new(&SECRET[..31]).is_err());
        assert_eq!(format!("{a:?}"), "ServiceIdKey(<redacted>)");
    }
}
