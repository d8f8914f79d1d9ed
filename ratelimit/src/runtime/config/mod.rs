//! Limits as data: profiles, per-route overrides and engine settings, read
//! from TOML, validated at load, overridable from the environment, and
//! reloadable at run time without losing any client's state.
//!
//! ```
//! use ratelimit::config::Config;
//!
//! let config = Config::from_toml_str(r#"
//!     default_profile = "standard"
//!
//!     [profiles.standard]
//!     rate = "600/min"
//!     burst = 60
//!
//!     [profiles.premium]
//!     rate = "6000/min"
//!
//!     [routes."users.get"]
//!     profile = "premium"
//!     cost = 2
//! "#).unwrap();
//! assert_eq!(config.default_quota().burst(), 60);
//! assert_eq!(config.route("users.get").unwrap().cost, Some(2));
//! ```
//!
//! The full reference is `docs/config.md`.

pub(crate) mod builders;
pub mod check;
mod defaults;
mod diff;
mod error;
mod raw;
pub(crate) mod reload;
mod rules;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub use crate::runtime::limits::{JwtKeySource, JwtLimits, JwtVerification, Profile, RouteConfig};
pub use crate::shared::defaults::OnOutage;
pub use crate::shared::net::TlsConfig;
pub use diff::ConfigChanges;
pub use error::ConfigError;
/// What a request costs, in the rule language both the attribute and
/// `[[rules]]` speak: units, or the size of its response.
pub use ratelimit_spec::Cost;
pub use reload::ConfigHandle;
pub(crate) use rules::applying;
#[cfg(feature = "axum")]
pub(crate) use rules::MAX_STACK;
pub use rules::{PathPattern, PathPatternError, RuleConfig};

use crate::engine::store::{MemoryStore, OverflowPolicy};
use crate::runtime::key::ClientIpConfig;
use crate::runtime::limits::{LimitParts, LimitTable};
use crate::Quota;

/// Which rate-limit response headers to send (`[headers] style`).
///
/// ```
/// use ratelimit::config::{Config, HeaderStyle};
///
/// let config = Config::from_toml_str(r#"
///     [profiles.standard]
///     rate = "60/min"
///     [headers]
///     style = "structured"
/// "#).unwrap();
/// assert_eq!(config.headers, HeaderStyle::Structured);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`
    /// (draft-ietf-httpapi-ratelimit-headers up to -06), for the limit with
    /// the fewest remaining. `"draft-06"`.
    #[default]
    Draft06,
    /// The structured fields of draft-ietf-httpapi-ratelimit-headers-10:
    /// `RateLimit-Policy` and `RateLimit`, Lists (RFC 9651) with one member
    /// per limit that applied to the request. `"structured"`.
    Structured,
    /// Both sets. `"both"`.
    Both,
    /// No rate-limit headers (429 and `Retry-After` are still sent).
    /// `"none"`.
    None,
}

#[cfg(feature = "axum")]
impl HeaderStyle {
    /// Sends `RateLimit-Limit`, `-Remaining` and `-Reset`.
    pub(crate) const fn draft06(self) -> bool {
        matches!(self, HeaderStyle::Draft06 | HeaderStyle::Both)
    }

    /// Sends `RateLimit-Policy` and `RateLimit`.
    pub(crate) const fn structured(self) -> bool {
        matches!(self, HeaderStyle::Structured | HeaderStyle::Both)
    }
}

/// Store settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// Most keys held at once.
    pub max_keys: usize,
    /// How often recovered cells are swept.
    pub sweep_interval: Duration,
    /// What happens to new keys when the store is full of live ones.
    pub overflow: OverflowPolicy,
    /// How many new keys one client network (`[ip] ipv6_network_prefix`,
    /// `ipv4_network_prefix`) may bring into the store, as a rate whose
    /// count is also the burst; past it, the network's new clients share one
    /// bucket per route. `None`: unbounded.
    pub new_keys_per_network: Option<crate::Quota>,
    /// Most keys with requests in flight that get a count of their own
    /// (`concurrency` limits; about 40 bytes each, reserved when the first
    /// concurrency limit is used); past it, keys share counters by network
    /// and route, limited together.
    pub max_keys_in_flight: usize,
}

/// Settings of the external limit service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceConfig {
    /// Base URL; the client's id is appended. `None`: the application's
    /// own [`LimitService`](crate::service::LimitService), given to
    /// `RateLimitBuilder::limit_service` (the runtime refuses to start
    /// with neither, or with both).
    pub url: Option<String>,
    /// How long an answer is used.
    pub ttl: Duration,
    /// How long a "no answer" is remembered.
    pub negative_ttl: Duration,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Most answers cached.
    pub max_entries: usize,
    /// The environment variable holding the secret client ids are keyed
    /// with (at least 32 bytes, shared with the service): the service is
    /// asked about HMAC-SHA256 ids under it, never about a value a client
    /// could compute (`docs/http.md`). Required in `[service]`.
    pub id_secret_env: Option<String>,
    /// The id secret itself, set in code instead of reading `id_secret_env`.
    pub id_secret: Option<ServiceSecret>,
}

/// The limit service's client id secret, set in code; never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceSecret(pub Vec<u8>);

impl std::fmt::Debug for ServiceSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceSecret(<redacted>)")
    }
}

/// A validated configuration. Build it with [`Config::from_file`] or
/// [`Config::from_toml_str`]; swap it at run time with [`ConfigHandle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    default_profile: String,
    /// The default profile itself, so the common resolution needs no lookup.
    default: Profile,
    profiles: BTreeMap<String, Profile>,
    routes: BTreeMap<String, RouteConfig>,
    /// Store settings.
    pub store: StoreConfig,
    /// How the client's address is found.
    pub ip: ClientIpConfig,
    /// Response header style.
    pub headers: HeaderStyle,
    /// Bounds on header-derived keys (`[header_keys]`).
    pub header_keys: crate::runtime::key::HeaderCardinality,
    /// JWT limit claims, when the `[jwt]` section is present.
    pub jwt: Option<JwtLimits>,
    /// The limit service, when the `[service]` section is present.
    pub service: Option<ServiceConfig>,
    /// `[[rules]]` for the config-driven layer, in order (the first match
    /// applies).
    pub rules: Vec<RuleConfig>,
    /// The body of 429 responses (`[responses]`).
    pub responses: ResponseConfig,
    /// The fleet-wide gate (`[global]`); `None`: local-only limiting.
    pub global: Option<FleetConfig>,
    /// The runtime's outbound TLS clients (`[tls]`): HTTPS to a JWKS URL
    /// and to the limit service, `rediss://` to Redis.
    pub tls: TlsConfig,
    /// What requests read of this configuration, compiled once
    /// ([`Config::plan`]).
    plan: crate::runtime::plan::PlanCell,
}

/// `[global]`: the fleet-wide gate reconciled through Redis (feature
/// `redis`; see `docs/global.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetConfig {
    /// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS
    /// (feature `redis-tls`); a seed node when `cluster` is set.
    pub redis_url: String,
    /// The URL names a node of a Redis Cluster.
    pub cluster: bool,
    /// How often each instance reconciles (default 100 ms).
    pub sync_interval: std::time::Duration,
    /// The sliding window (default 10 s).
    pub window: std::time::Duration,
    /// Prefix of every Redis key (default `rl`).
    pub key_prefix: String,
    /// Time for one sync round's replies (default 250 ms).
    pub timeout: std::time::Duration,
    /// Time to connect (default 1 s).
    pub connect_timeout: std::time::Duration,
    /// Keys tracked per epoch (default 50,000).
    pub max_keys: usize,
    /// Sub-epochs the window is cut in (default: 25, or fewer so that each
    /// spans at least two sync intervals). More waste less of the budget
    /// and cost more Redis memory per key (docs/global.md).
    pub sub_epochs: Option<u32>,
    /// The environment variable holding the fleet secret (at least 16
    /// bytes, the same on every instance): Redis keys are keyed hashes of
    /// client keys under it.
    pub key_secret_env: Option<String>,
    /// The fleet secret itself, set in code instead of `key_secret_env`.
    pub key_secret: Option<FleetSecret>,
    /// `rediss://` only (feature `redis-tls`): a PEM file of the CA
    /// certificates to trust (a private CA) instead of the webpki roots.
    /// Checked when the configuration is loaded.
    pub ca_file: Option<std::path::PathBuf>,
    /// What a key is limited to while Redis is out of reach (default
    /// `local`).
    pub on_outage: OnOutage,
}

/// A secret that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetSecret(pub Vec<u8>);

impl std::fmt::Debug for FleetSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetSecret(<redacted>)")
    }
}

/// The `application/problem+json` body of a 429 (`[responses]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResponseConfig {
    /// The problem `type` URI (default
    /// [`DEFAULT_PROBLEM_TYPE`](Self::DEFAULT_PROBLEM_TYPE), the
    /// `quota-exceeded` type of draft-ietf-httpapi-ratelimit-headers-10).
    pub problem_type: String,
    /// The problem `title` (default
    /// [`DEFAULT_PROBLEM_TITLE`](Self::DEFAULT_PROBLEM_TITLE),
    /// `Quota Exceeded`).
    pub problem_title: String,
    /// Methods answered as probes on limited routes (`HEAD`, `OPTIONS`;
    /// default none): the limiter answers such a request itself, with the
    /// status and rate-limit headers the request would get (204, or the
    /// 429), charging nothing and never running the handler.
    pub probe_methods: Vec<http::Method>,
}

impl ResponseConfig {
    /// The methods `probe_methods` may list: a probe is never served, so a
    /// method that reads or changes anything (`GET`, `POST`) would be a
    /// route's limit turned off for it.
    pub const PROBE_METHODS: [http::Method; 2] = [http::Method::HEAD, http::Method::OPTIONS];

    /// Which of `HEAD` (bit 0) and `OPTIONS` (bit 1) are probes, or the
    /// first method that cannot be one.
    pub(crate) fn probe_mask(methods: &[http::Method]) -> Result<u8, String> {
        let mut mask = 0;
        for m in methods {
            mask |= match *m {
                http::Method::HEAD => 1,
                http::Method::OPTIONS => 2,
                _ => {
                    return Err(format!(
                        "{m} cannot be a probe method: a probe is answered without running the handler and charges \
                         nothing, so only HEAD and OPTIONS may be"
                    ))
                }
            };
        }
        Ok(mask)
    }

    /// Whether `method` is a probe under `mask` (what
    /// [`probe_mask`](Self::probe_mask) made): the runtime's test, and
    /// `ratelimit explain`'s.
    #[inline]
    pub(crate) fn mask_has(mask: u8, method: &http::Method) -> bool {
        (mask & 1 != 0 && *method == http::Method::HEAD) || (mask & 2 != 0 && *method == http::Method::OPTIONS)
    }
}

/// The prefix of environment variables that override file values.
pub const ENV_PREFIX: &str = "RATELIMIT__";

impl Config {
    /// The default profile's name.
    pub fn default_profile(&self) -> &str {
        &self.default_profile
    }

    /// The default profile's quota.
    pub fn default_quota(&self) -> Quota {
        // Validation guarantees the default profile exists.
        self.profiles
            .get(&self.default_profile)
            .map_or(Quota::per_second(1), |p| p.quota)
    }

    /// A profile by name.
    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.get(name)
    }

    /// All profiles, by name.
    pub fn profiles(&self) -> &BTreeMap<String, Profile> {
        &self.profiles
    }

    /// A route's overrides, by route name.
    pub fn route(&self, name: &str) -> Option<&RouteConfig> {
        self.routes.get(name)
    }

    /// All route overrides, by name.
    pub fn routes(&self) -> &BTreeMap<String, RouteConfig> {
        &self.routes
    }

    /// The CA file the Redis client of `[global]` trusts: `[global]
    /// ca_file` when set (it wins for Redis), else `[tls] ca_file` when the
    /// URL is `rediss://`, else none (the webpki roots, or no TLS at all).
    ///
    /// ```
    /// use ratelimit::config::{Config, TlsConfig};
    /// use std::path::Path;
    ///
    /// let text = "[profiles.std]\nrate = \"10/s\"\n[global]\nredis_url = \"rediss://redis.internal:6380/\"\n";
    /// let mut config = Config::from_toml_str(text).unwrap();
    /// assert_eq!(config.redis_ca_file(), None);
    /// config.tls = TlsConfig::with_ca_file("all.pem");
    /// assert_eq!(config.redis_ca_file(), Some(Path::new("all.pem")));
    /// config.global.as_mut().unwrap().ca_file = Some("redis.pem".into());
    /// assert_eq!(config.redis_ca_file(), Some(Path::new("redis.pem")));
    /// // Plain redis://: no TLS, so [tls] does not apply.
    /// let g = config.global.as_mut().unwrap();
    /// g.ca_file = None;
    /// g.redis_url = "redis://redis.internal:6379/".to_owned();
    /// assert_eq!(config.redis_ca_file(), None);
    /// ```
    pub fn redis_ca_file(&self) -> Option<&Path> {
        let g = self.global.as_ref()?;
        match &g.ca_file {
            Some(own) => Some(own),
            None if g.redis_url.starts_with("rediss://") => self.tls.ca_file.as_deref(),
            None => None,
        }
    }

    /// A [`MemoryStore`] built from the `[store]` section.
    pub fn build_store(&self) -> Result<MemoryStore, crate::StoreConfigError> {
        let mut builder = MemoryStore::builder()
            .max_keys(self.store.max_keys)
            .overflow(self.store.overflow);
        if let Some(budget) = self.store.new_keys_per_network {
            builder = builder.new_keys_per_group(budget);
        }
        builder.try_build()
    }

    /// Every route's plan under this configuration (see `crate::runtime::plan`):
    /// compiled on first use, with the attribute routes `attribute`
    /// compiles (the routes linked into the program: the same every call).
    #[inline]
    #[cfg_attr(not(feature = "axum"), allow(dead_code))] // the runtime's
    pub(crate) fn plan(
        &self,
        attribute: impl FnOnce(LimitParts<'_>) -> Box<[crate::runtime::plan::RoutePlan]>,
    ) -> &crate::runtime::plan::Plan {
        self.plan.0.get_or_init(|| {
            let limits = self.limits();
            crate::runtime::plan::Plan {
                attribute: attribute(limits),
                rules: self.rules.iter().map(|r| r.plan(limits)).collect(),
            }
        })
    }
}

impl LimitTable for Config {
    fn limits(&self) -> LimitParts<'_> {
        LimitParts {
            profiles: &self.profiles,
            default: &self.default,
            routes: &self.routes,
            jwt: self.jwt.as_ref(),
        }
    }
}
