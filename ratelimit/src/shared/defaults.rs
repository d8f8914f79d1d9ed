//! Defaults of settings that the configuration and a feature-gated part
//! (`jwt`, `service`, `redis`) share: each defined once, here, at the bottom
//! of the crate where every feature can read it. The configuration types
//! republish them (`ServiceConfig::DEFAULT_TTL`, ...).

use std::time::Duration;

/// New keys one client network may bring into the store per minute (also
/// its burst).
pub(crate) const NEW_KEYS_PER_NETWORK: u32 = 256;
/// Clock skew tolerated on a token's `exp`.
pub(crate) const JWT_LEEWAY: Duration = Duration::from_secs(30);
/// Failed signature checks a client address may cause at once, and per
/// `JWT_FAILED_WINDOW`.
pub(crate) const JWT_MAX_FAILED_PER_IP: u32 = 10;
/// Failed signature checks the addresses of one client network may cause
/// together, at once and per `JWT_FAILED_WINDOW`.
pub(crate) const JWT_MAX_FAILED_PER_NETWORK: u32 = 100;
/// Failed public-key checks the whole process may run, at once and per
/// second: a few percent of a core for RS256.
pub(crate) const JWT_MAX_FAILED_PER_SECOND: u32 = 1_000;
/// The window of `JWT_MAX_FAILED_PER_IP`.
pub(crate) const JWT_FAILED_WINDOW: Duration = Duration::from_secs(60);
/// Client addresses whose failed checks are tracked at once.
pub(crate) const JWT_MAX_FAILED_TRACKED: usize = 10_000;
/// How often a JWKS URL is fetched again.
pub(crate) const JWKS_REFRESH: Duration = Duration::from_secs(600);
/// Least time between two fetches of a JWKS URL.
pub(crate) const JWKS_COOLDOWN: Duration = Duration::from_secs(30);
/// How long a limit service's answer is used.
pub(crate) const SERVICE_TTL: Duration = Duration::from_secs(60);
/// How long a limit service's "no answer" is remembered.
pub(crate) const SERVICE_NEGATIVE_TTL: Duration = Duration::from_secs(5);
/// Time a limit service call may take.
pub(crate) const SERVICE_TIMEOUT: Duration = Duration::from_millis(200);
/// Most limit service answers cached.
pub(crate) const SERVICE_MAX_ENTRIES: usize = 10_000;
/// How often each instance reconciles with the fleet.
pub(crate) const GLOBAL_SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The fleet gate's sliding window.
pub(crate) const GLOBAL_WINDOW: Duration = Duration::from_secs(10);
/// Prefix of every Redis key of the fleet gate.
pub(crate) const GLOBAL_KEY_PREFIX: &str = "rl";
/// Time for one sync round's replies.
pub(crate) const GLOBAL_TIMEOUT: Duration = Duration::from_millis(250);
/// Time to connect to Redis.
pub(crate) const GLOBAL_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Keys the fleet gate tracks per epoch.
pub(crate) const GLOBAL_MAX_KEYS: usize = 50_000;

/// What the gate limits a key to while the store is out of reach (the
/// whole gate local-only, or a key whose part of the last round failed):
/// `[global] on_outage`.
///
/// ```
/// use ratelimit::config::{Config, OnOutage};
///
/// let toml = "[profiles.standard]\nrate = \"600/min\"\n\
///             [global]\nredis_url = \"redis://127.0.0.1:6379\"\nkey_secret_env = \"FLEET_SECRET\"\non_outage = \"share\"\n";
/// let config = Config::from_toml_str(toml).unwrap();
/// assert_eq!(config.global.unwrap().on_outage, OnOutage::Share);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnOutage {
    /// Each instance's local limit (the quota): nobody is refused because
    /// Redis went away, and the fleet can admit up to N times the budget.
    #[default]
    Local,
    /// Each instance holds a key to its last known share: every request is
    /// charged N times its cost locally (N the live instances when the
    /// store was last read, a charge at most the burst), so the fleet stays
    /// near its limit and a client gets about `1 / N` of it on each
    /// instance until the store answers again.
    Share,
}
