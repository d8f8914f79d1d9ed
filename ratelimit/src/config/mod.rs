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
mod reload;
mod rules;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub use crate::limits::{JwtKeySource, JwtLimits, JwtVerification, Profile, RouteConfig};
pub use diff::ConfigChanges;
pub use error::ConfigError;
/// What a request costs, in the rule language both the attribute and
/// `[[rules]]` speak: units, or the size of its response.
pub use ratelimit_spec::Cost;
pub use reload::ConfigHandle;
#[cfg(feature = "axum")]
pub(crate) use rules::applying;
pub use rules::{PathPattern, RuleConfig};

use crate::key::ClientIpConfig;
use crate::limits::{LimitParts, LimitTable};
use crate::store::{MemoryStore, OverflowPolicy};
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

/// What startup and the checker say of an HMAC secret or PEM key without an
/// algorithm.
#[cfg(feature = "jwt")]
pub(crate) const MISSING_ALGORITHM: &str =
    "no algorithm: an HMAC secret or a PEM key needs one named (algorithm = \"HS256\", \"RS256\", ...; in code \
     JwtVerification::with_algorithm)";

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
    pub header_keys: crate::key::HeaderCardinality,
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
    pub global: Option<GlobalConfig>,
    /// The runtime's outbound TLS clients (`[tls]`): HTTPS to a JWKS URL
    /// and to the limit service, `rediss://` to Redis.
    pub tls: TlsConfig,
}

/// `[tls]`: what every outbound TLS client of the runtime trusts: HTTPS to
/// `[jwt] jwks_url` and to `[service] url` (feature `service`), and
/// `rediss://` to `[global] redis_url` (feature `redis-tls`) unless
/// `[global] ca_file` names its own CA (the more specific setting wins).
///
/// With `ca_file` set, the certificates of that PEM file are the roots, and
/// the only ones (a private CA; concatenate a public bundle into the file to
/// trust both). Unset, the webpki roots (Mozilla's, compiled in, the same on
/// every host). Certificates are always verified, hostname included. The
/// crypto provider is the application's process default if it installed
/// one, else ring for these clients alone: the library never installs one.
///
/// ```
/// use ratelimit::config::{Config, TlsConfig};
///
/// # let dir = std::env::temp_dir().join(format!("ratelimit-doc-tls-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let ca = dir.join("missing-ca.pem");
/// // In the file: `[tls] ca_file = "ca.pem"`, checked when the file is read.
/// let text = format!("[profiles.std]\nrate = \"10/s\"\n[tls]\nca_file = {:?}\n", ca.display().to_string());
/// let err = Config::from_toml_str(&text).unwrap_err();
/// assert_eq!(err.field(), Some("tls.ca_file"));
/// assert_eq!(err.line(), Some(4));
///
/// // In code:
/// let mut config = Config::from_toml_str("[profiles.std]\nrate = \"10/s\"\n").unwrap();
/// assert_eq!(config.tls, TlsConfig::default()); // the webpki roots
/// config.tls = TlsConfig::with_ca_file("/etc/ratelimit/private-ca.pem");
/// assert!(config.tls.ca_file.is_some());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// A PEM file of the CA certificates to trust instead of the webpki
    /// roots. A relative path is from the working directory. Read and
    /// checked when a configuration file is loaded, and again when a
    /// client is built.
    pub ca_file: Option<std::path::PathBuf>,
}

impl TlsConfig {
    /// Trust the CAs of the PEM file at `path` (and only them).
    pub fn with_ca_file(path: impl Into<std::path::PathBuf>) -> Self {
        TlsConfig {
            ca_file: Some(path.into()),
        }
    }
}

/// `[global]`: the fleet-wide gate reconciled through Redis (feature
/// `redis`; see `docs/global.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GlobalConfig {
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
}

/// The prefix of environment variables that override file values.
pub const ENV_PREFIX: &str = "RATELIMIT__";

impl Config {
    /// Reads and validates a TOML file, then applies `RATELIMIT__*`
    /// environment overrides (see [`Config::from_toml_str_with_env`]).
    ///
    /// Errors name the file, the line and column, and the field.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, e))?;
        raw::load(&text, Some(path), raw::env_overrides()?)
    }

    /// Parses and validates TOML text, without environment overrides.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        raw::load(text, None, std::iter::empty())
    }

    /// Parses TOML text, then applies overrides from `vars`: a variable named
    /// `RATELIMIT__PROFILES__STANDARD__RATE` sets `profiles.standard.rate`
    /// (path segments separated by `__`, matched case-insensitively). Values
    /// are read as TOML (`100`, `true`, `["10.0.0.0/8"]`) and otherwise as
    /// strings. An override can change an existing profile or route but not
    /// create one (a typo would otherwise change nothing, silently).
    ///
    /// ```
    /// use ratelimit::config::Config;
    ///
    /// let text = "default_profile = \"std\"\n[profiles.std]\nrate = \"10/s\"\n";
    /// let vars = [("RATELIMIT__PROFILES__STD__BURST".to_string(), "3".to_string())];
    /// let config = Config::from_toml_str_with_env(text, vars).unwrap();
    /// assert_eq!(config.default_quota().burst(), 3);
    /// ```
    pub fn from_toml_str_with_env(
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        raw::load(text, None, vars)
    }

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

    /// The token verifier described by `[jwt]`, if it names a key source.
    /// Reads key files and the secret's environment variable now, and
    /// fetches a JWKS URL (which needs the `service` feature and a tokio
    /// runtime; `https://` trusts what [`Config::tls`] says).
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    pub async fn jwt_verifier(&self) -> Result<Option<crate::jwt::JwtVerifier>, crate::jwt::JwtConfigError> {
        use crate::jwt::JwtVerifier;
        let Some(v) = self.jwt.as_ref().and_then(|j| j.verification.as_ref()) else {
            return Ok(None);
        };
        let alg = || -> Result<jsonwebtoken::Algorithm, crate::jwt::JwtConfigError> {
            let Some(name) = v.algorithm.as_deref() else {
                return Err(crate::jwt::JwtConfigError::new(MISSING_ALGORITHM.to_owned()));
            };
            name.parse()
                .map_err(|_| crate::jwt::JwtConfigError::new(format!("unknown algorithm {name:?}")))
        };
        let verifier = match &v.keys {
            JwtKeySource::HmacSecretEnv(var) => JwtVerifier::hmac_from_env(var, alg()?)?,
            JwtKeySource::PemFile(path) => JwtVerifier::pem_file(path, alg()?)?,
            JwtKeySource::JwksFile(path) => JwtVerifier::jwks_file(path)?,
            #[cfg(feature = "service")]
            JwtKeySource::JwksUrl(url) => {
                let settings = crate::jwt::JwksSettings {
                    refresh_every: v.jwks_refresh,
                    cooldown: v.jwks_cooldown,
                    ..crate::jwt::JwksSettings::default()
                };
                JwtVerifier::jwks_url_with_tls(url, settings, &self.tls).await?
            }
            #[cfg(not(feature = "service"))]
            JwtKeySource::JwksUrl(_) => {
                return Err(crate::jwt::JwtConfigError::new(
                    "jwt.jwks_url needs the `service` feature of ratelimit",
                ))
            }
        };
        let mut verifier = verifier
            .leeway(v.leeway)
            .failed_checks_per_ip(v.max_failed_per_ip, v.failed_window, v.max_failed_tracked)
            .failed_checks_per_network(
                v.max_failed_per_network,
                v.failed_window,
                self.ip.network_prefixes().0,
                self.ip.network_prefixes().1,
            );
        if !v.issuer.is_empty() {
            verifier = verifier.issuer(&v.issuer.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if !v.audience.is_empty() {
            verifier = verifier.audience(&v.audience.iter().map(String::as_str).collect::<Vec<_>>());
        }
        Ok(Some(verifier))
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
