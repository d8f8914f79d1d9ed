//! Building settings in code. The settings structs are `#[non_exhaustive]`
//! (a new field is not a breaking change), so outside this crate they are
//! built from a constructor or `Default` and `with_*` methods, and their
//! public fields can still be read and assigned.
//!
//! ```
//! use std::time::Duration;
//! use ratelimit::config::{RouteConfig, ServiceConfig, StoreConfig};
//!
//! let store = StoreConfig::default().with_max_keys(10_000).with_sweep_interval(Duration::from_secs(5));
//! assert_eq!(store.max_keys, 10_000);
//! let service = ServiceConfig::new("http://limits.internal/v1").with_id_secret_env("LIMITS_ID_SECRET");
//! assert_eq!(service.ttl, ServiceConfig::DEFAULT_TTL);
//! let route = RouteConfig::default().with_profile("premium").with_cost(2);
//! assert_eq!(route.cost, Some(2));
//! ```

use std::path::PathBuf;
use std::time::Duration;

use super::{FleetConfig, FleetSecret, OnOutage, ResponseConfig, ServiceConfig, ServiceSecret, StoreConfig};
use crate::engine::store::OverflowPolicy;
use crate::runtime::limits::{JwtKeySource, JwtLimits, JwtVerification, Profile, RouteConfig};
use crate::shared::setters::with;
use crate::Quota;

with!(StoreConfig {
    with_max_keys => max_keys: usize,
    with_sweep_interval => sweep_interval: Duration,
    with_overflow => overflow: OverflowPolicy,
    with_new_keys_per_network => new_keys_per_network: Option<Quota>,
    with_max_keys_in_flight => max_keys_in_flight: usize,
});

impl ServiceConfig {
    /// A limit service at `url`, with the default cache settings and no id
    /// secret yet (set [`with_id_secret_env`](Self::with_id_secret_env) or
    /// [`with_id_secret`](Self::with_id_secret); startup refuses neither).
    pub fn new(url: impl Into<String>) -> ServiceConfig {
        ServiceConfig {
            url: Some(url.into()),
            ..ServiceConfig::without_url()
        }
    }

    /// The settings of a limit service the application gives the builder
    /// (`RateLimitBuilder::limit_service`), which has no URL: the cache
    /// settings and, once set, the id secret.
    pub fn without_url() -> ServiceConfig {
        ServiceConfig {
            url: None,
            ttl: ServiceConfig::DEFAULT_TTL,
            negative_ttl: ServiceConfig::DEFAULT_NEGATIVE_TTL,
            timeout: ServiceConfig::DEFAULT_TIMEOUT,
            max_entries: ServiceConfig::DEFAULT_MAX_ENTRIES,
            id_secret_env: None,
            id_secret: None,
        }
    }
}

with!(ServiceConfig {
    with_url => url: impl Into<String> as some_into,
    with_ttl => ttl: Duration,
    with_negative_ttl => negative_ttl: Duration,
    with_timeout => timeout: Duration,
    with_max_entries => max_entries: usize,
    with_id_secret_env => id_secret_env: impl Into<String> as some_into,
    with_id_secret => id_secret: ServiceSecret as some,
});

impl FleetConfig {
    /// The fleet gate through the Redis at `redis_url`, with the default
    /// settings and no fleet secret yet (set
    /// [`with_key_secret_env`](Self::with_key_secret_env) or
    /// [`with_key_secret`](Self::with_key_secret)).
    pub fn new(redis_url: impl Into<String>) -> FleetConfig {
        FleetConfig {
            redis_url: redis_url.into(),
            cluster: false,
            sync_interval: FleetConfig::DEFAULT_SYNC_INTERVAL,
            window: FleetConfig::DEFAULT_WINDOW,
            key_prefix: FleetConfig::DEFAULT_KEY_PREFIX.to_owned(),
            timeout: FleetConfig::DEFAULT_TIMEOUT,
            connect_timeout: FleetConfig::DEFAULT_CONNECT_TIMEOUT,
            max_keys: FleetConfig::DEFAULT_MAX_KEYS,
            sub_epochs: None,
            key_secret_env: None,
            key_secret: None,
            ca_file: None,
            on_outage: OnOutage::Local,
        }
    }
}

with!(FleetConfig {
    with_redis_url => redis_url: impl Into<String> as into,
    with_cluster => cluster: bool,
    with_sync_interval => sync_interval: Duration,
    with_window => window: Duration,
    with_key_prefix => key_prefix: impl Into<String> as into,
    with_timeout => timeout: Duration,
    with_connect_timeout => connect_timeout: Duration,
    with_max_keys => max_keys: usize,
    with_sub_epochs => sub_epochs: u32 as some,
    with_key_secret_env => key_secret_env: impl Into<String> as some_into,
    with_key_secret => key_secret: FleetSecret as some,
    with_ca_file => ca_file: impl Into<PathBuf> as some_into,
    with_on_outage => on_outage: OnOutage,
});

with!(ResponseConfig {
    with_problem_type => problem_type: impl Into<String> as into,
    with_problem_title => problem_title: impl Into<String> as into,
    with_probe_methods => probe_methods: Vec<http::Method>,
});

impl Profile {
    /// A profile named `name` with this quota. The name is kept once for
    /// the process's life (a decision reports it without a shared count):
    /// name profiles from your configuration, not from clients' values.
    pub fn new(name: &str, quota: Quota) -> Profile {
        Profile {
            name: crate::runtime::limits::intern(name),
            quota,
            concurrency: None,
        }
    }

    /// This profile, letting one client have at most `n` requests in
    /// flight at once on a route (`concurrency = n`; 0 is refused at
    /// startup).
    ///
    /// ```
    /// use ratelimit::{config::Profile, Quota};
    ///
    /// let exports = Profile::new("exports", Quota::per_minute(10)).with_concurrency(2);
    /// assert_eq!(exports.concurrency, Some(2));
    /// ```
    #[must_use]
    pub fn with_concurrency(mut self, n: u32) -> Profile {
        self.concurrency = Some(n);
        self
    }
}

with!(RouteConfig {
    with_profile => profile: impl Into<String> as some_into,
    with_shadow => shadow: bool as some,
    with_cost => cost: u32 as some,
});

impl JwtLimits {
    /// Token limits capped at `max_rate` and `max_burst`, read from the
    /// default claims (`ratelimit_tier`, `ratelimit_rpm`,
    /// `ratelimit_burst`), with tokens verified upstream (no
    /// [`verification`](Self::verification)).
    pub fn new(max_rate: Quota, max_burst: u32) -> JwtLimits {
        JwtLimits {
            max_rate: Some(max_rate),
            max_burst: Some(max_burst),
            ..JwtLimits::tiers()
        }
    }

    /// Token limits by tier only: the tier claim (`ratelimit_tier`) names a
    /// profile; numbers in tokens are not read.
    pub fn tiers() -> JwtLimits {
        JwtLimits {
            tier_claim: JwtLimits::DEFAULT_TIER_CLAIM.to_owned(),
            rate_claim: JwtLimits::DEFAULT_RATE_CLAIM.to_owned(),
            burst_claim: JwtLimits::DEFAULT_BURST_CLAIM.to_owned(),
            max_rate: None,
            max_burst: None,
            verification: None,
        }
    }
}

with!(JwtLimits {
    with_tier_claim => tier_claim: impl Into<String> as into,
    with_rate_claim => rate_claim: impl Into<String> as into,
    with_burst_claim => burst_claim: impl Into<String> as into,
    with_max_rate => max_rate: Quota as some,
    with_max_burst => max_burst: u32 as some,
    with_verification => verification: JwtVerification as some,
});

impl JwtVerification {
    /// Verification with the keys of `keys` and the default settings (no
    /// issuer or audience). A JWKS (`JwksFile`, `JwksUrl`) pins each key's
    /// algorithm itself; an HMAC secret or a PEM key needs one named with
    /// [`with_algorithm`](Self::with_algorithm) (`"HS256"`, `"RS256"`, ...),
    /// or startup refuses it, as the file's `[jwt] algorithm` is required
    /// beside `hmac_secret_env` and `pem_file`.
    pub fn new(keys: JwtKeySource) -> JwtVerification {
        JwtVerification {
            keys,
            algorithm: None,
            issuer: Vec::new(),
            audience: Vec::new(),
            leeway: JwtVerification::DEFAULT_LEEWAY,
            jwks_refresh: JwtVerification::DEFAULT_JWKS_REFRESH,
            jwks_cooldown: JwtVerification::DEFAULT_JWKS_COOLDOWN,
            max_failed_per_ip: JwtVerification::DEFAULT_MAX_FAILED_PER_IP,
            max_failed_per_network: JwtVerification::DEFAULT_MAX_FAILED_PER_NETWORK,
            max_failed_per_second: JwtVerification::DEFAULT_MAX_FAILED_PER_SECOND,
            failed_window: JwtVerification::DEFAULT_FAILED_WINDOW,
            max_failed_tracked: JwtVerification::DEFAULT_MAX_FAILED_TRACKED,
        }
    }
}

with!(JwtVerification {
    with_keys => keys: JwtKeySource,
    with_algorithm => algorithm: impl Into<String> as some_into,
    with_issuer => issuer: Vec<String>,
    with_audience => audience: Vec<String>,
    with_leeway => leeway: Duration,
    with_jwks_refresh => jwks_refresh: Duration,
    with_jwks_cooldown => jwks_cooldown: Duration,
    with_max_failed_per_ip => max_failed_per_ip: u32,
    with_max_failed_per_network => max_failed_per_network: u32,
    with_max_failed_per_second => max_failed_per_second: u32,
    with_failed_window => failed_window: Duration,
    with_max_failed_tracked => max_failed_tracked: usize,
});
