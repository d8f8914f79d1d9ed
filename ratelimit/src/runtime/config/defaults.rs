//! The defaults of the configuration's settings, each defined once.
//!
//! A default owned by a type that is always compiled comes from that type
//! (`MemoryStore::DEFAULT_MAX_KEYS`, `HeaderCardinality::default()`,
//! `OverflowPolicy::default()`). The settings of feature-gated parts (`jwt`,
//! `service`, `global`) are defined once in `crate::shared::defaults`, which those
//! parts read, and republished here on the configuration type that
//! describes them.

use std::time::Duration;

use super::{FleetConfig, JwtLimits, JwtVerification, ResponseConfig, ServiceConfig, StoreConfig};
use crate::engine::store::{MemoryStore, OverflowPolicy};

impl StoreConfig {
    /// How often recovered cells are swept, by default.
    pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(10);
    /// New keys one client network may bring into the store per minute
    /// (also its burst), by default.
    pub const DEFAULT_NEW_KEYS_PER_NETWORK: u32 = crate::shared::defaults::NEW_KEYS_PER_NETWORK;
    /// Keys with requests in flight that get a count of their own, by
    /// default.
    pub const DEFAULT_MAX_KEYS_IN_FLIGHT: usize = 16_384;
}

impl Default for StoreConfig {
    /// [`MemoryStore`]'s defaults, swept every 10 s.
    fn default() -> Self {
        StoreConfig {
            max_keys: MemoryStore::DEFAULT_MAX_KEYS,
            sweep_interval: StoreConfig::DEFAULT_SWEEP_INTERVAL,
            overflow: OverflowPolicy::default(),
            new_keys_per_network: Some(crate::Quota::per_minute(StoreConfig::DEFAULT_NEW_KEYS_PER_NETWORK)),
            max_keys_in_flight: StoreConfig::DEFAULT_MAX_KEYS_IN_FLIGHT,
        }
    }
}

impl JwtLimits {
    /// The claim naming a profile, by default.
    pub const DEFAULT_TIER_CLAIM: &'static str = "ratelimit_tier";
    /// The claim with requests per minute, by default.
    pub const DEFAULT_RATE_CLAIM: &'static str = "ratelimit_rpm";
    /// The claim with the burst, by default.
    pub const DEFAULT_BURST_CLAIM: &'static str = "ratelimit_burst";
}

impl JwtVerification {
    /// Clock skew tolerated on `exp`, by default (also `JwtVerifier`'s).
    pub const DEFAULT_LEEWAY: Duration = crate::shared::defaults::JWT_LEEWAY;
    /// JWKS URL refresh interval, by default (also `JwksSettings`').
    pub const DEFAULT_JWKS_REFRESH: Duration = crate::shared::defaults::JWKS_REFRESH;
    /// Least time between JWKS URL fetches, by default (also `JwksSettings`').
    pub const DEFAULT_JWKS_COOLDOWN: Duration = crate::shared::defaults::JWKS_COOLDOWN;
    /// Failed signature checks per client address at once and per window,
    /// by default (also `JwtVerifier`'s).
    pub const DEFAULT_MAX_FAILED_PER_IP: u32 = crate::shared::defaults::JWT_MAX_FAILED_PER_IP;
    /// Failed checks per client network (`[ip]` network prefixes), by default.
    pub const DEFAULT_MAX_FAILED_PER_NETWORK: u32 = crate::shared::defaults::JWT_MAX_FAILED_PER_NETWORK;
    /// Failed public-key checks per second for the whole process, by default.
    pub const DEFAULT_MAX_FAILED_PER_SECOND: u32 = crate::shared::defaults::JWT_MAX_FAILED_PER_SECOND;
    /// The window of `max_failed_per_ip`, by default.
    pub const DEFAULT_FAILED_WINDOW: Duration = crate::shared::defaults::JWT_FAILED_WINDOW;
    /// Addresses tracked for failed checks at once, by default.
    pub const DEFAULT_MAX_FAILED_TRACKED: usize = crate::shared::defaults::JWT_MAX_FAILED_TRACKED;
}

impl ServiceConfig {
    /// How long an answer is used, by default (also `CacheSettings`').
    pub const DEFAULT_TTL: Duration = crate::shared::defaults::SERVICE_TTL;
    /// How long a "no answer" is remembered, by default.
    pub const DEFAULT_NEGATIVE_TTL: Duration = crate::shared::defaults::SERVICE_NEGATIVE_TTL;
    /// Per-call timeout, by default.
    pub const DEFAULT_TIMEOUT: Duration = crate::shared::defaults::SERVICE_TIMEOUT;
    /// Most answers cached, by default.
    pub const DEFAULT_MAX_ENTRIES: usize = crate::shared::defaults::SERVICE_MAX_ENTRIES;
}

impl FleetConfig {
    /// How often each instance reconciles, by default (`GateSettings::new`'s).
    pub const DEFAULT_SYNC_INTERVAL: Duration = crate::shared::defaults::GLOBAL_SYNC_INTERVAL;
    /// The sliding window, by default (`GateSettings::new`'s).
    pub const DEFAULT_WINDOW: Duration = crate::shared::defaults::GLOBAL_WINDOW;
    /// Prefix of every Redis key, by default (`RedisSettings::default()`'s).
    pub const DEFAULT_KEY_PREFIX: &'static str = crate::shared::defaults::GLOBAL_KEY_PREFIX;
    /// Time for one sync round's replies, by default (`RedisSettings::default()`'s).
    pub const DEFAULT_TIMEOUT: Duration = crate::shared::defaults::GLOBAL_TIMEOUT;
    /// Time to connect, by default (`RedisSettings::default()`'s).
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = crate::shared::defaults::GLOBAL_CONNECT_TIMEOUT;
    /// Keys tracked per epoch, by default (`GateSettings::new`'s).
    pub const DEFAULT_MAX_KEYS: usize = crate::shared::defaults::GLOBAL_MAX_KEYS;
}

impl ResponseConfig {
    /// The problem type draft-ietf-httpapi-ratelimit-headers-10 registers to
    /// tell a client "that the requests sent by the client exceed one or
    /// more Quota Policies": the default `problem_type`.
    pub const DEFAULT_PROBLEM_TYPE: &'static str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
    /// That problem type's registered title, the default `problem_title`.
    pub const DEFAULT_PROBLEM_TITLE: &'static str = "Quota Exceeded";
}

impl Default for ResponseConfig {
    /// The draft's `quota-exceeded` problem type and its title
    /// ([`DEFAULT_PROBLEM_TYPE`](Self::DEFAULT_PROBLEM_TYPE),
    /// [`DEFAULT_PROBLEM_TITLE`](Self::DEFAULT_PROBLEM_TITLE)).
    fn default() -> Self {
        ResponseConfig {
            problem_type: Self::DEFAULT_PROBLEM_TYPE.to_owned(),
            problem_title: Self::DEFAULT_PROBLEM_TITLE.to_owned(),
            probe_methods: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The fleet gate's own settings start from the configuration's
    /// defaults.
    #[cfg(feature = "redis")]
    #[test]
    fn the_fleet_gate_defaults_are_the_configurations() {
        use super::FleetConfig;
        let gate = crate::fleet::GateSettings::new(&[0; 16]);
        assert_eq!(gate.sync_interval, FleetConfig::DEFAULT_SYNC_INTERVAL);
        assert_eq!(gate.window, FleetConfig::DEFAULT_WINDOW);
        assert_eq!(gate.max_keys, FleetConfig::DEFAULT_MAX_KEYS);
        let redis = crate::fleet::RedisSettings::default();
        assert_eq!(redis.prefix, FleetConfig::DEFAULT_KEY_PREFIX);
        assert_eq!(redis.response_timeout, FleetConfig::DEFAULT_TIMEOUT);
        assert_eq!(redis.connect_timeout, FleetConfig::DEFAULT_CONNECT_TIMEOUT);
    }
}
