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

mod cache;
mod http;
mod ids;

use std::future::Future;
use std::sync::Arc;

use serde::Deserialize;

pub use cache::{CacheSettings, CacheStats, ServiceCache};
pub use http::HttpLimitService;
pub use ids::{ServiceIdKey, MIN_ID_SECRET_LEN};

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
#[derive(Clone)]
pub struct ServiceError {
    kind: ServiceErrorKind,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

crate::engine::errors::debug_as_display!(ServiceError);

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
mod tests;
