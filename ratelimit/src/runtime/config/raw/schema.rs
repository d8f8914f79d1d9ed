//! The TOML shape of a configuration: what serde reads, before validation.
//!
//! Each field's own checks (a rate, a duration, a CIDR) run in its
//! deserializer (`super::fields`), so serde reports them at the value's
//! span. Defaults come from the types that own them (`crate::config::defaults`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::fields::{
    cidrs, claim_name, duration, forwarded_header, header_style, max_keys, max_keys_in_flight, new_keys_budget,
    opt_algorithm, opt_claim_name, opt_cost, opt_http_url, opt_positive_u32, opt_prefix, opt_quota, overflow,
    positive_u32, quota, without_peer,
};
use crate::engine::store::OverflowPolicy;
use crate::runtime::config::{
    FleetConfig, HeaderStyle, JwtLimits, JwtVerification, ResponseConfig, ServiceConfig, StoreConfig,
};
use crate::runtime::key::ForwardedHeader;
use crate::Quota;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) default_profile: Option<String>,
    #[serde(default)]
    pub(super) profiles: BTreeMap<String, RawProfile>,
    #[serde(default)]
    pub(super) routes: BTreeMap<String, RawRoute>,
    #[serde(default)]
    pub(super) store: RawStore,
    #[serde(default)]
    pub(super) ip: RawIp,
    #[serde(default)]
    pub(super) headers: RawHeaders,
    pub(super) jwt: Option<RawJwt>,
    pub(super) service: Option<RawService>,
    #[serde(default)]
    pub(super) header_keys: RawHeaderKeys,
    #[serde(default)]
    pub(super) rules: Vec<RawRule>,
    pub(super) global: Option<RawGlobal>,
    #[serde(default)]
    pub(super) responses: RawResponses,
    #[serde(default)]
    pub(super) tls: RawTls,
}

/// `[tls]`: the runtime's outbound TLS clients (checked in `validate/tls.rs`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTls {
    pub(super) ca_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    #[serde(deserialize_with = "quota")]
    pub(super) rate: Quota,
    #[serde(default, deserialize_with = "opt_positive_u32")]
    pub(super) burst: Option<u32>,
    #[serde(default, deserialize_with = "opt_positive_u32")]
    pub(super) concurrency: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) profile: Option<String>,
    pub(super) shadow: Option<bool>,
    #[serde(default, deserialize_with = "opt_positive_u32")]
    pub(super) cost: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawStore {
    #[serde(deserialize_with = "max_keys")]
    pub(super) max_keys: usize,
    #[serde(deserialize_with = "duration")]
    pub(super) sweep_interval: Duration,
    #[serde(deserialize_with = "overflow")]
    pub(super) overflow: OverflowPolicy,
    #[serde(deserialize_with = "new_keys_budget")]
    pub(super) new_keys_per_network: Option<Quota>,
    #[serde(deserialize_with = "max_keys_in_flight")]
    pub(super) max_keys_in_flight: usize,
}

impl Default for RawStore {
    fn default() -> Self {
        let d = StoreConfig::default();
        RawStore {
            max_keys: d.max_keys,
            sweep_interval: d.sweep_interval,
            overflow: d.overflow,
            new_keys_per_network: d.new_keys_per_network,
            max_keys_in_flight: d.max_keys_in_flight,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIp {
    #[serde(default, deserialize_with = "cidrs")]
    pub(super) trusted_proxies: Vec<IpNet>,
    #[serde(default, deserialize_with = "forwarded_header")]
    pub(super) forwarded_header: ForwardedHeader,
    #[serde(default, deserialize_with = "opt_prefix::<128, _>")]
    pub(super) ipv6_prefix: Option<u8>,
    #[serde(default, deserialize_with = "opt_prefix::<32, _>")]
    pub(super) ipv4_prefix: Option<u8>,
    #[serde(default, deserialize_with = "opt_prefix::<128, _>")]
    pub(super) ipv6_network_prefix: Option<u8>,
    #[serde(default, deserialize_with = "opt_prefix::<32, _>")]
    pub(super) ipv4_network_prefix: Option<u8>,
    #[serde(default, deserialize_with = "without_peer")]
    pub(super) without_peer: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHeaders {
    #[serde(default, deserialize_with = "header_style")]
    pub(super) style: HeaderStyle,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawHeaderKeys {
    #[serde(deserialize_with = "positive_u32")]
    pub(super) per_ip: u32,
    #[serde(deserialize_with = "duration")]
    pub(super) window: Duration,
    #[serde(deserialize_with = "max_keys")]
    pub(super) max_tracked: usize,
}

impl Default for RawHeaderKeys {
    fn default() -> Self {
        let d = crate::runtime::key::HeaderCardinality::default();
        RawHeaderKeys {
            per_ip: d.per_ip,
            window: d.window,
            max_tracked: d.max_tracked,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJwt {
    #[serde(default = "tier_claim", deserialize_with = "claim_name")]
    pub(super) tier_claim: String,
    #[serde(default, deserialize_with = "opt_claim_name")]
    pub(super) rate_claim: Option<String>,
    #[serde(default, deserialize_with = "opt_claim_name")]
    pub(super) burst_claim: Option<String>,
    #[serde(default, deserialize_with = "opt_quota")]
    pub(super) max_rate: Option<Quota>,
    #[serde(default, deserialize_with = "opt_positive_u32")]
    pub(super) max_burst: Option<u32>,
    pub(super) hmac_secret_env: Option<String>,
    pub(super) pem_file: Option<String>,
    pub(super) jwks_file: Option<String>,
    #[serde(default, deserialize_with = "opt_http_url")]
    pub(super) jwks_url: Option<String>,
    #[serde(default, deserialize_with = "opt_algorithm")]
    pub(super) algorithm: Option<String>,
    #[serde(default)]
    pub(super) issuer: Vec<String>,
    #[serde(default)]
    pub(super) audience: Vec<String>,
    #[serde(default = "leeway", deserialize_with = "duration")]
    pub(super) leeway: Duration,
    #[serde(default = "jwks_refresh", deserialize_with = "duration")]
    pub(super) jwks_refresh: Duration,
    #[serde(default = "jwks_cooldown", deserialize_with = "duration")]
    pub(super) jwks_cooldown: Duration,
    #[serde(default = "max_failed_per_ip", deserialize_with = "positive_u32")]
    pub(super) max_failed_per_ip: u32,
    #[serde(default = "max_failed_per_network", deserialize_with = "positive_u32")]
    pub(super) max_failed_per_network: u32,
    #[serde(default = "max_failed_per_second", deserialize_with = "positive_u32")]
    pub(super) max_failed_per_second: u32,
    #[serde(default = "failed_window", deserialize_with = "duration")]
    pub(super) failed_window: Duration,
    #[serde(default = "max_failed_tracked", deserialize_with = "max_keys")]
    pub(super) max_failed_tracked: usize,
}

fn tier_claim() -> String {
    JwtLimits::DEFAULT_TIER_CLAIM.to_owned()
}
fn leeway() -> Duration {
    JwtVerification::DEFAULT_LEEWAY
}
fn jwks_refresh() -> Duration {
    JwtVerification::DEFAULT_JWKS_REFRESH
}
fn jwks_cooldown() -> Duration {
    JwtVerification::DEFAULT_JWKS_COOLDOWN
}
fn max_failed_per_ip() -> u32 {
    JwtVerification::DEFAULT_MAX_FAILED_PER_IP
}
fn max_failed_per_network() -> u32 {
    JwtVerification::DEFAULT_MAX_FAILED_PER_NETWORK
}
fn max_failed_per_second() -> u32 {
    JwtVerification::DEFAULT_MAX_FAILED_PER_SECOND
}
fn failed_window() -> Duration {
    JwtVerification::DEFAULT_FAILED_WINDOW
}
fn max_failed_tracked() -> usize {
    JwtVerification::DEFAULT_MAX_FAILED_TRACKED
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawService {
    #[serde(default, deserialize_with = "opt_http_url")]
    pub(super) url: Option<String>,
    #[serde(default = "service_ttl", deserialize_with = "duration")]
    pub(super) ttl: Duration,
    #[serde(default = "service_negative_ttl", deserialize_with = "duration")]
    pub(super) negative_ttl: Duration,
    #[serde(default = "service_timeout", deserialize_with = "duration")]
    pub(super) timeout: Duration,
    #[serde(default = "service_max_entries", deserialize_with = "max_keys")]
    pub(super) max_entries: usize,
    pub(super) id_secret_env: Option<String>,
}

fn service_ttl() -> Duration {
    ServiceConfig::DEFAULT_TTL
}
fn service_negative_ttl() -> Duration {
    ServiceConfig::DEFAULT_NEGATIVE_TTL
}
fn service_timeout() -> Duration {
    ServiceConfig::DEFAULT_TIMEOUT
}
fn service_max_entries() -> usize {
    ServiceConfig::DEFAULT_MAX_ENTRIES
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) name: String,
    pub(super) path: String,
    #[serde(default)]
    pub(super) methods: Vec<String>,
    pub(super) key: String,
    pub(super) resolve: Vec<String>,
    #[serde(default, deserialize_with = "opt_cost")]
    pub(super) cost: Option<ratelimit_spec::Cost>,
    #[serde(default)]
    pub(super) shadow: bool,
    #[serde(default)]
    pub(super) stack: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGlobal {
    pub(super) redis_url: String,
    #[serde(default)]
    pub(super) cluster: bool,
    #[serde(default = "global_sync_interval", deserialize_with = "duration")]
    pub(super) sync_interval: Duration,
    #[serde(default = "global_window", deserialize_with = "duration")]
    pub(super) window: Duration,
    #[serde(default = "global_key_prefix")]
    pub(super) key_prefix: String,
    #[serde(default = "global_timeout", deserialize_with = "duration")]
    pub(super) timeout: Duration,
    #[serde(default = "global_connect_timeout", deserialize_with = "duration")]
    pub(super) connect_timeout: Duration,
    #[serde(default = "global_max_keys", deserialize_with = "max_keys")]
    pub(super) max_keys: usize,
    pub(super) key_secret_env: Option<String>,
    pub(super) sub_epochs: Option<u32>,
    pub(super) ca_file: Option<PathBuf>,
    pub(super) on_outage: Option<String>,
}

fn global_sync_interval() -> Duration {
    FleetConfig::DEFAULT_SYNC_INTERVAL
}
fn global_window() -> Duration {
    FleetConfig::DEFAULT_WINDOW
}
fn global_key_prefix() -> String {
    FleetConfig::DEFAULT_KEY_PREFIX.to_owned()
}
fn global_timeout() -> Duration {
    FleetConfig::DEFAULT_TIMEOUT
}
fn global_connect_timeout() -> Duration {
    FleetConfig::DEFAULT_CONNECT_TIMEOUT
}
fn global_max_keys() -> usize {
    FleetConfig::DEFAULT_MAX_KEYS
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawResponses {
    pub(super) problem_type: String,
    pub(super) problem_title: String,
    pub(super) probe_methods: Vec<String>,
}

impl Default for RawResponses {
    fn default() -> Self {
        let d = ResponseConfig::default();
        RawResponses {
            problem_type: d.problem_type,
            problem_title: d.problem_title,
            probe_methods: Vec::new(),
        }
    }
}
