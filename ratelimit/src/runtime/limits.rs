//! Limits as plain data: profiles, per-route settings, the caps on limits
//! carried by tokens. The configuration owns them; resolvers read them
//! through [`LimitTable`] without knowing the configuration (which sits above
//! them).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::Quota;

/// A named limit: a rate and a burst.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Profile {
    /// The profile's name, kept for the process's life (interned: one copy
    /// per name), so a resolution reports it on the request path by
    /// copying a reference: no allocation, and no reference count written
    /// by every request from every core.
    pub name: &'static str,
    /// The profile's quota (its burst defaults to the rate's count).
    pub quota: Quota,
    /// Requests of one client that may be in flight at once on a route
    /// (`concurrency = N`); `None`: not limited.
    pub concurrency: Option<u32>,
}

/// `name` kept for the process's life, one copy per distinct name: what a
/// configuration's profile and rule names are, so the request path carries
/// them as `&'static str`. A shared `Arc<str>` cost two locked instructions
/// per request (its count up and down), on a cache line every core writes.
/// Only configuration names are interned (never a client's value: a token's
/// tier or a limit service's answer is looked up, not kept), so the set is
/// bounded by the distinct names of the configurations the process builds.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(&kept) = names.get(name) {
        return kept;
    }
    let kept: &'static str = Box::leak(Box::from(name));
    names.insert(kept);
    kept
}

/// Per-route settings, by stable route name (`#[rate_limit(name = ...)]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RouteConfig {
    /// The profile this route uses instead of what its resolver chain says
    /// when no earlier resolver answers (see `docs/config.md`).
    pub profile: Option<String>,
    /// `Some(true)`: decide, send headers and count, but never reject;
    /// `Some(false)`: enforce even a route declared `shadow`; `None`: as the
    /// route declares.
    pub shadow: Option<bool>,
    /// Units each request costs, replacing the route's own `cost`.
    pub cost: Option<u32>,
}

/// Where the keys that verify tokens come from (exactly one).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JwtKeySource {
    /// An HMAC secret in this environment variable.
    HmacSecretEnv(String),
    /// A PEM public key file.
    PemFile(String),
    /// A JWKS document file.
    JwksFile(String),
    /// A JWKS URL (feature `service`).
    JwksUrl(String),
}

/// What startup and the checker say of an HMAC secret or PEM key without an
/// algorithm.
#[cfg(feature = "jwt")]
pub(crate) const MISSING_ALGORITHM: &str =
    "no algorithm: an HMAC secret or a PEM key needs one named (algorithm = \"HS256\", \"RS256\", ...; in code \
     JwtVerification::with_algorithm)";

/// How tokens are verified (`[jwt]` with a key source).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JwtVerification {
    /// The key source.
    pub keys: JwtKeySource,
    /// The pinned algorithm, for an HMAC secret or a PEM key.
    pub algorithm: Option<String>,
    /// Accepted issuers (empty: not checked).
    pub issuer: Vec<String>,
    /// Accepted audiences (empty: not checked).
    pub audience: Vec<String>,
    /// Clock skew tolerated on `exp`.
    pub leeway: Duration,
    /// JWKS URL refresh interval.
    pub jwks_refresh: Duration,
    /// Least time between JWKS URL fetches.
    pub jwks_cooldown: Duration,
    /// Failed signature checks a client address may cause at once, and as
    /// many more per `failed_window`; past them its tokens are anonymous
    /// without a check (cached verified tokens excepted).
    pub max_failed_per_ip: u32,
    /// Failed signature checks the addresses of one client network (`[ip]`
    /// network prefixes) may cause together, at once and per
    /// `failed_window`; counted before each address's own budget.
    pub max_failed_per_network: u32,
    /// Failed public-key checks the whole process may run, at once and per
    /// second; below half of it, only clients within their share are
    /// checked. HMAC tokens are never budgeted.
    pub max_failed_per_second: u32,
    /// The window of `max_failed_per_ip`.
    pub failed_window: Duration,
    /// Client addresses tracked for failed checks at once (beyond, new
    /// addresses share an overflow budget).
    pub max_failed_tracked: usize,
}

/// How JWT claims set a client's limit, and how tokens are verified.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JwtLimits {
    /// Claim naming a profile (`"premium"`).
    pub tier_claim: String,
    /// Claim with requests per minute.
    pub rate_claim: String,
    /// Claim with the burst.
    pub burst_claim: String,
    /// The largest rate a token may ask for; with `max_burst`, what turns
    /// on reading numbers from tokens (`None`: only the tier claim is read).
    pub max_rate: Option<Quota>,
    /// The largest burst a token may ask for (set with `max_rate`).
    pub max_burst: Option<u32>,
    /// Verification by this crate; `None` when an upstream layer verifies
    /// tokens and passes `VerifiedClaims`.
    pub verification: Option<JwtVerification>,
}

/// What resolvers read of a configuration: borrowed views, taken once per
/// request. Implemented by [`Config`](crate::config::Config).
#[derive(Debug, Clone, Copy)]
pub struct LimitParts<'a> {
    /// Profiles by name.
    pub profiles: &'a BTreeMap<String, Profile>,
    /// The default profile.
    pub default: &'a Profile,
    /// Per-route settings by route name.
    pub routes: &'a BTreeMap<String, RouteConfig>,
    /// The caps on limits carried by tokens (`[jwt]`).
    pub jwt: Option<&'a JwtLimits>,
}

/// A source of [`LimitParts`]: the running configuration.
pub trait LimitTable {
    /// The parts resolvers read.
    fn limits(&self) -> LimitParts<'_>;
}

#[cfg(test)]
mod tests {
    use super::intern;

    /// Two configurations naming the same profile share one copy of the
    /// name (what the metrics' tier lookup compares by address first), and
    /// different names stay apart.
    #[test]
    fn a_name_is_kept_once() {
        let a = crate::runtime::config::Config::from_toml_str("[profiles.interned_once]\nrate = \"1/s\"\n").unwrap();
        let b = crate::runtime::config::Config::from_toml_str("[profiles.interned_once]\nrate = \"2/s\"\n").unwrap();
        let name = |c: &crate::runtime::config::Config| c.profile("interned_once").unwrap().name;
        let (x, y) = (name(&a), name(&b));
        assert!(std::ptr::eq(x, y), "one copy of a name");
        assert!(std::ptr::eq(intern(&String::from("interned_once")), x));
        assert_eq!(intern("interned_other"), "interned_other");
        assert!(!std::ptr::eq(intern("interned_other"), x));
    }
}
