//! Verifying JWTs with `jsonwebtoken`, so their claims can key and size
//! limits. Anything that does not verify is anonymous traffic: no claims.
//!
//! * The algorithm is pinned by the key: a token's `alg` header must equal
//!   the key's, so `alg: none`, HS256 signed with an RSA public key, and
//!   similar confusions are refused.
//! * `exp` is required; `iss` and `aud`, when configured, are required and
//!   checked; a leeway (default 30 s) absorbs clock skew.
//! * Tokens over 8 KiB are refused before any parsing.
//! * Verified tokens are cached until they expire (bounded), so a hot client
//!   pays for one signature check, not one per request.
//! * Forged tokens are bounded twice: a token that failed its signature
//!   check is remembered (bounded, for a minute or until the key set
//!   changes), so one forged token repeated costs one check; and each client
//!   address may cause a limited number of failed checks per window
//!   ([`JwtVerifier::failed_checks_per_ip`], by default 10 per minute),
//!   past which its tokens are anonymous without a check (a flood of
//!   distinct forged tokens then costs its budget, not one check each).
//!   Tokens already verified and cached stay verified.
//!
//! Keys: an HMAC secret (from an environment variable), a PEM public key, a
//! JWKS document (each key with a `kid` and an `alg`), or, with the `service`
//! feature too, a JWKS URL refreshed in the background with a cooldown.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::claims::VerifiedClaims;

/// The longest token examined; longer ones are anonymous without parsing.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;
const CACHE_SHARDS: usize = 16;

/// Verified tokens by a 128-bit keyed hash of the token: claims, `exp`, and
/// the generation of the key set that verified them.
type TokenCacheShard = Mutex<HashMap<(u64, u64), (VerifiedClaims, u64, usize)>>;
/// Tokens that failed their signature check, keyed like the verified ones:
/// until when (seconds) the failure is remembered, and under which key set.
type FailedCacheShard = Mutex<HashMap<(u64, u64), (u64, usize)>>;
/// How long a failed token is remembered (at most; a key set change ends it).
const FAILED_TTL_SECS: u64 = 60;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; if something did, the data
    // (counters and caches) is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Failed signature checks per client network, then per client address:
/// GCRA at each level (`per_network` and `per_ip` at once, as many more per
/// window), in a bounded, sharded table. A unit is taken at both levels
/// before a check and given back when the token verifies, so only failures
/// count. The network is taken first: a network out of budget (one /48
/// rotating its 65,536 /64s) is refused without adding an address to the
/// table, so one network cannot fill it. When a shard is full of entries
/// still in debt, new ones share that shard's overflow cell (bounded work,
/// never unbounded checks).
struct FailureBudget {
    shards: Vec<Mutex<BudgetShard>>,
    hasher: ahash::RandomState,
    address: Rate,
    /// `None`: no network level.
    network: Option<NetworkRate>,
    per_shard: usize,
    base: Instant,
}

/// One level's GCRA: nanoseconds per unit (`window / n`) and tolerance
/// (`interval * (n - 1)`).
#[derive(Clone, Copy)]
struct Rate {
    interval: u64,
    tau: u64,
}

impl Rate {
    fn new(n: u32, window: Duration) -> Rate {
        let n = u64::from(n.max(1));
        let interval = (nanos(window) / n).max(1);
        Rate {
            interval,
            tau: interval.saturating_mul(n - 1),
        }
    }
}

#[derive(Clone, Copy)]
struct NetworkRate {
    rate: Rate,
    ipv6_prefix: u8,
    ipv4_prefix: u8,
}

#[derive(Default)]
struct BudgetShard {
    tats: HashMap<u64, u64>,
    overflow: u64,
}

/// The cell a unit was taken from, to give it back.
#[derive(Clone, Copy)]
struct Taken {
    key: u64,
    overflow: bool,
    interval: u64,
}

/// The units taken for one check: the address's, and the network's.
#[derive(Clone, Copy)]
struct TakenUnits {
    address: Taken,
    network: Option<Taken>,
}

impl FailureBudget {
    fn new(per_ip: u32, window: Duration, max_tracked: usize) -> Self {
        FailureBudget {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::new(BudgetShard::default())).collect(),
            hasher: ahash::RandomState::new(),
            address: Rate::new(per_ip, window),
            network: Some(NetworkRate {
                rate: Rate::new(crate::defaults::JWT_MAX_FAILED_PER_NETWORK, window),
                ipv6_prefix: 48,
                ipv4_prefix: 24,
            }),
            per_shard: max_tracked.div_ceil(CACHE_SHARDS).max(1),
            base: Instant::now(),
        }
    }

    /// The network level: `per_network` failed checks per window for the
    /// addresses within one IPv6 /`ipv6_prefix` or IPv4 /`ipv4_prefix`.
    fn with_network(mut self, per_network: u32, window: Duration, ipv6_prefix: u8, ipv4_prefix: u8) -> Self {
        self.network = Some(NetworkRate {
            rate: Rate::new(per_network, window),
            ipv6_prefix: ipv6_prefix.clamp(1, 128),
            ipv4_prefix: ipv4_prefix.clamp(1, 32),
        });
        self
    }

    /// Takes one unit of `client`'s network's budget and one of its own
    /// (`None`: the requests without a peer address, together); `None`
    /// when either has none left (and nothing is kept).
    fn take(&self, client: Option<IpAddr>) -> Option<TakenUnits> {
        let network = match (client, self.network) {
            (Some(ip), Some(level)) => {
                let net = crate::key::prefix_of(ip, level.ipv6_prefix, level.ipv4_prefix);
                Some(self.take_cell(self.hasher.hash_one((1u8, net)), level.rate)?)
            }
            _ => None,
        };
        match self.take_cell(self.hasher.hash_one((0u8, client)), self.address) {
            Some(address) => Some(TakenUnits { address, network }),
            None => {
                if let Some(n) = network {
                    self.give_back_cell(n);
                }
                None
            }
        }
    }

    fn take_cell(&self, key: u64, rate: Rate) -> Option<Taken> {
        let mut guard = lock(&self.shards[(key as usize) % CACHE_SHARDS]);
        let shard = &mut *guard;
        // Offset so a fresh cell (0) is fully recovered. One offset for both
        // levels: their TATs share this table (and its clean-up below, run
        // with whichever level's `now`) and the shard's overflow cell, so
        // they must be on one time axis (with each level's own interval as
        // its offset, an address-level clean-up evicted networks still in
        // debt, and gave them their whole budget back).
        let offset = self
            .network
            .map_or(self.address.interval, |n| n.rate.interval.max(self.address.interval));
        let now = nanos(self.base.elapsed()).saturating_add(offset);
        if !shard.tats.contains_key(&key) && shard.tats.len() >= self.per_shard {
            shard.tats.retain(|_, tat| *tat > now);
        }
        let overflow = !shard.tats.contains_key(&key) && shard.tats.len() >= self.per_shard;
        let cell = if overflow {
            &mut shard.overflow
        } else {
            shard.tats.entry(key).or_insert(0)
        };
        let tat = (*cell).max(now);
        if tat - now > rate.tau {
            return None;
        }
        *cell = tat.saturating_add(rate.interval);
        Some(Taken {
            key,
            overflow,
            interval: rate.interval,
        })
    }

    /// Gives back the units taken for a token that verified.
    fn give_back(&self, taken: TakenUnits) {
        self.give_back_cell(taken.address);
        if let Some(n) = taken.network {
            self.give_back_cell(n);
        }
    }

    fn give_back_cell(&self, taken: Taken) {
        let mut guard = lock(&self.shards[(taken.key as usize) % CACHE_SHARDS]);
        let shard = &mut *guard;
        let cell = if taken.overflow {
            Some(&mut shard.overflow)
        } else {
            shard.tats.get_mut(&taken.key)
        };
        if let Some(cell) = cell {
            *cell = cell.saturating_sub(taken.interval);
        }
    }
}

/// Why a verifier could not be built: the key material, the settings, or
/// a JWKS URL that could not be fetched. Opaque: its message, and the
/// underlying error as [`source`](std::error::Error::source) where there is
/// one (an I/O error reading a key file).
#[derive(Debug, Clone)]
pub struct JwtConfigError {
    message: String,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for JwtConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for JwtConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for JwtConfigError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl JwtConfigError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        JwtConfigError {
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    pub(crate) fn caused_by(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }
}

fn err(message: impl Into<String>) -> JwtConfigError {
    JwtConfigError::new(message)
}

struct PinnedKey {
    key: DecodingKey,
    alg: Algorithm,
}

enum Keys {
    Single(PinnedKey),
    ByKid(HashMap<String, PinnedKey>),
    #[cfg(feature = "service")]
    Remote(std::sync::Arc<remote::RemoteJwks>),
}

/// Verifies bearer tokens (see the module docs for what is checked).
///
/// ```
/// use ratelimit::jwt::JwtVerifier;
/// use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
///
/// let verifier = JwtVerifier::hmac(b"a long random secret", Algorithm::HS256).unwrap();
/// let exp = jsonwebtoken::get_current_timestamp() + 600;
/// let claims = serde_json::json!({"sub": "user-42", "exp": exp, "ratelimit_tier": "premium"});
/// let token = encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(b"a long random secret").unwrap()).unwrap();
///
/// let verified = verifier.verify(&token).expect("signed with the secret");
/// assert_eq!(verified.get_text("sub").as_deref(), Some("user-42"));
/// assert!(verifier.verify("not.a.token").is_none());
/// ```
pub struct JwtVerifier {
    keys: Keys,
    issuer: Option<Vec<String>>,
    audience: Option<Vec<String>>,
    leeway: Duration,
    hasher: (ahash::RandomState, ahash::RandomState),
    cache: Vec<TokenCacheShard>,
    cache_per_shard: usize,
    failed: Vec<FailedCacheShard>,
    budget: FailureBudget,
    /// Tokens that reached a signature check.
    signature_checks: AtomicU64,
    /// Tokens refused unchecked: their address had no failure budget left.
    budget_refusals: AtomicU64,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            Keys::Single(k) => format!("one {:?} key", k.alg),
            Keys::ByKid(m) => format!("{} keys by kid", m.len()),
            #[cfg(feature = "service")]
            Keys::Remote(r) => format!("JWKS from {}", r.url),
        };
        f.debug_struct("JwtVerifier")
            .field("keys", &keys)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway", &self.leeway)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// Keys it verifies with now: a JWKS's usable keys (those in force, for
    /// a JWKS URL), or 1 for a single key or secret. What the HTTP runtime
    /// exports as `ratelimit_jwt_keys`.
    ///
    /// ```
    /// use ratelimit::jwt::JwtVerifier;
    ///
    /// let verifier = JwtVerifier::hmac(b"a long random secret", jsonwebtoken::Algorithm::HS256).unwrap();
    /// assert_eq!(verifier.key_count(), 1);
    /// ```
    pub fn key_count(&self) -> usize {
        match &self.keys {
            Keys::Single(_) => 1,
            Keys::ByKid(keys) => keys.len(),
            #[cfg(feature = "service")]
            Keys::Remote(remote) => remote.key_count(),
        }
    }

    fn with_keys(keys: Keys) -> Self {
        JwtVerifier {
            keys,
            issuer: None,
            audience: None,
            leeway: crate::defaults::JWT_LEEWAY,
            hasher: (ahash::RandomState::new(), ahash::RandomState::new()),
            cache: (0..CACHE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            cache_per_shard: 10_000 / CACHE_SHARDS,
            failed: (0..CACHE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            budget: FailureBudget::new(
                crate::defaults::JWT_MAX_FAILED_PER_IP,
                crate::defaults::JWT_FAILED_WINDOW,
                crate::defaults::JWT_MAX_FAILED_TRACKED,
            ),
            signature_checks: AtomicU64::new(0),
            budget_refusals: AtomicU64::new(0),
        }
    }

    /// An HMAC secret (`HS256`, `HS384` or `HS512`).
    pub fn hmac(secret: &[u8], alg: Algorithm) -> Result<Self, JwtConfigError> {
        if !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(err(format!(
                "{alg:?} is not an HMAC algorithm: expected HS256, HS384 or HS512"
            )));
        }
        if secret.len() < 16 {
            return Err(err("the HMAC secret is shorter than 16 bytes"));
        }
        let key = DecodingKey::from_secret(secret).map_err(|e| err(format!("HMAC secret: {e}")))?;
        Ok(Self::with_keys(Keys::Single(PinnedKey { key, alg })))
    }

    /// An HMAC secret read from the environment variable `var`; refuses a
    /// missing or short secret with a message naming the variable.
    pub fn hmac_from_env(var: &str, alg: Algorithm) -> Result<Self, JwtConfigError> {
        let secret = std::env::var(var).map_err(|_| err(format!("{var}: not set (the JWT HMAC secret)")))?;
        Self::hmac(secret.as_bytes(), alg).map_err(|e| err(format!("{var}: {e}")))
    }

    /// A PEM public key: RSA (`RS*`, `PS*`), EC (`ES256`, `ES384`) or
    /// Ed25519 (`EdDSA`).
    pub fn pem(pem: &[u8], alg: Algorithm) -> Result<Self, JwtConfigError> {
        use Algorithm::*;
        let key = match alg {
            RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => DecodingKey::from_rsa_pem(pem),
            ES256 | ES384 => DecodingKey::from_ec_pem(pem),
            EdDSA => DecodingKey::from_ed_pem(pem),
            _ => return Err(err(format!("{alg:?} is not a public-key algorithm; use `hmac`"))),
        }
        .map_err(|e| err(format!("PEM key for {alg:?}: {e}")))?;
        Ok(Self::with_keys(Keys::Single(PinnedKey { key, alg })))
    }

    /// A PEM public key from a file.
    pub fn pem_file(path: impl AsRef<Path>, alg: Algorithm) -> Result<Self, JwtConfigError> {
        let path = path.as_ref();
        let pem = std::fs::read(path).map_err(|e| err(format!("{}: {e}", path.display())).caused_by(e))?;
        Self::pem(&pem, alg).map_err(|e| err(format!("{}: {e}", path.display())))
    }

    /// A JWKS document. Every key needs a `kid` and an `alg` (the algorithm
    /// is pinned per key); tokens must name their key's `kid`.
    pub fn jwks(json: &str) -> Result<Self, JwtConfigError> {
        Ok(Self::with_keys(Keys::ByKid(parse_jwks(json)?)))
    }

    /// A JWKS document from a file.
    pub fn jwks_file(path: impl AsRef<Path>) -> Result<Self, JwtConfigError> {
        let path = path.as_ref();
        let json = std::fs::read_to_string(path).map_err(|e| err(format!("{}: {e}", path.display())).caused_by(e))?;
        Self::jwks(&json).map_err(|e| err(format!("{}: {e}", path.display())))
    }

    /// Accepted issuers (`iss` must be one of them).
    #[must_use]
    pub fn issuer(mut self, issuers: &[&str]) -> Self {
        self.issuer = Some(issuers.iter().map(|s| (*s).to_owned()).collect());
        self
    }

    /// Accepted audiences (`aud` must contain one of them).
    #[must_use]
    pub fn audience(mut self, audiences: &[&str]) -> Self {
        self.audience = Some(audiences.iter().map(|s| (*s).to_owned()).collect());
        self
    }

    /// Clock skew tolerated on `exp` and `nbf` (default 30 s).
    #[must_use]
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// How many verified tokens are remembered (default 10,000), and as
    /// many failed ones.
    #[must_use]
    pub fn cache_capacity(mut self, tokens: usize) -> Self {
        self.cache_per_shard = tokens.div_ceil(CACHE_SHARDS).max(1);
        self
    }

    /// Bounds the signature checks a client address can make fail: at most
    /// `per_ip` at once and `per_ip` more per `window` (default 10 per
    /// minute), for up to `max_tracked` addresses at once (default 10,000;
    /// beyond, new addresses share a small overflow budget). Past its budget,
    /// an address's tokens are anonymous without a check, except those
    /// already verified and cached. Applies to [`verify_from`](Self::verify_from)
    /// and [`verify_request_from`](Self::verify_request_from), which the HTTP
    /// runtime calls with the client's address (after `[ip]` trusted proxies
    /// and prefix aggregation).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit::jwt::JwtVerifier;
    /// use jsonwebtoken::Algorithm;
    ///
    /// let v = JwtVerifier::hmac(b"a long random secret", Algorithm::HS256)
    ///     .unwrap()
    ///     .failed_checks_per_ip(2, Duration::from_secs(60), 1000);
    /// let peer = Some("203.0.113.9".parse().unwrap());
    /// for i in 0..100 {
    ///     let forged = format!("eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.forged{i}");
    ///     assert!(v.verify_from(&forged, peer).is_none());
    /// }
    /// assert_eq!(v.signature_checks(), 2, "two failures, then no more checks");
    /// ```
    #[must_use]
    pub fn failed_checks_per_ip(mut self, per_ip: u32, window: Duration, max_tracked: usize) -> Self {
        let network = self.budget.network;
        self.budget = FailureBudget::new(per_ip, window, max_tracked);
        if let Some(n) = network {
            self.budget.network = Some(n);
        }
        self
    }

    /// Bounds the failed checks of all the addresses of one client network
    /// (an IPv6 /`ipv6_prefix`, an IPv4 /`ipv4_prefix`) together, before
    /// each address's own budget ([`failed_checks_per_ip`](Self::failed_checks_per_ip)):
    /// `per_network` at once and as many more per `window`. Default: 100
    /// per minute per /48 or /24, so one network rotating addresses cannot
    /// fill the budget's table (and, through its shared overflow, make
    /// every new client's token anonymous).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit::jwt::JwtVerifier;
    /// use jsonwebtoken::Algorithm;
    ///
    /// let v = JwtVerifier::hmac(b"a long random secret", Algorithm::HS256)
    ///     .unwrap()
    ///     .failed_checks_per_network(3, Duration::from_secs(60), 48, 24);
    /// for i in 0..100u16 {
    ///     let forged = format!("eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.forged{i}");
    ///     let addr = std::net::IpAddr::from([0x2001, 0xdb8, 0xaaaa, i, 0, 0, 0, 0]);
    ///     assert!(v.verify_from(&forged, Some(addr)).is_none());
    /// }
    /// assert_eq!(v.signature_checks(), 3, "three failures for the whole /48");
    /// ```
    #[must_use]
    pub fn failed_checks_per_network(
        mut self,
        per_network: u32,
        window: Duration,
        ipv6_prefix: u8,
        ipv4_prefix: u8,
    ) -> Self {
        self.budget = self.budget.with_network(per_network, window, ipv6_prefix, ipv4_prefix);
        self
    }

    /// The claims of `token` if it verifies; `None` (anonymous) otherwise.
    /// No per-address budget applies (the failed-token cache does); on a
    /// request path, use [`verify_from`](Self::verify_from).
    pub fn verify(&self, token: &str) -> Option<VerifiedClaims> {
        self.verify_for(token, None)
    }

    /// [`verify`](Self::verify) for a token from `client` (the client's
    /// address as it is limited; `None` when the request has no peer
    /// address, all such requests sharing one budget): a token that needs a
    /// signature check is refused unchecked when `client` has used its
    /// budget of failed checks ([`failed_checks_per_ip`](Self::failed_checks_per_ip)).
    pub fn verify_from(&self, token: &str, client: Option<IpAddr>) -> Option<VerifiedClaims> {
        self.verify_for(token, Some(client))
    }

    /// `client`: `None` for no budget, else the address whose budget applies.
    fn verify_for(&self, token: &str, client: Option<Option<IpAddr>>) -> Option<VerifiedClaims> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let now = jsonwebtoken::get_current_timestamp();
        let id = (self.hasher.0.hash_one(token), self.hasher.1.hash_one(token));
        let shard = &self.cache[(id.0 as usize) % CACHE_SHARDS];
        let generation = self.key_generation();
        if let Ok(cache) = shard.lock() {
            // A hit counts only while the key set that verified the token is
            // still in force: a key removed from a JWKS stops verifying at once.
            if let Some((claims, exp, gen)) = cache.get(&id) {
                if *exp > now && *gen == generation {
                    let claims = claims.clone();
                    drop(cache);
                    // A hit still notices keys gone stale.
                    #[cfg(feature = "service")]
                    if let Keys::Remote(remote) = &self.keys {
                        remote.refresh_if_stale();
                    }
                    return Some(claims);
                }
            }
        }
        let failed_shard = &self.failed[(id.0 as usize) % CACHE_SHARDS];
        if let Some((until, gen)) = lock(failed_shard).get(&id) {
            // The same forged token again: refused without a second check.
            if *until > now && *gen == generation {
                return None;
            }
        }

        let header = jsonwebtoken::decode_header(token).ok()?;
        #[cfg(feature = "service")]
        let remote_keys;
        let pinned = match &self.keys {
            Keys::Single(k) => k,
            Keys::ByKid(keys) => keys.get(header.kid.as_deref()?)?,
            #[cfg(feature = "service")]
            Keys::Remote(remote) => {
                remote_keys = remote.current();
                match remote_keys.keys.get(header.kid.as_deref()?) {
                    Some(k) => k,
                    None => {
                        // Unknown kid: maybe a rotation. Refresh in the
                        // background, at most once per cooldown; this token
                        // is anonymous either way.
                        remote.refresh_soon();
                        return None;
                    }
                }
            }
        };
        if header.alg != pinned.alg {
            return None;
        }
        let mut validation = Validation::new(pinned.alg);
        // A configured issuer or audience must be present, not merely correct
        // when present (jsonwebtoken checks them only if the token has them).
        let mut required = vec!["exp"];
        if self.issuer.is_some() {
            required.push("iss");
        }
        if self.audience.is_some() {
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        // Never more than the time since 1970: jsonwebtoken computes
        // `now - leeway` in u64 (a builder's leeway is not range-checked).
        validation.leeway = self.leeway.as_secs().min(now);
        validation.validate_nbf = true;
        validation.validate_aud = self.audience.is_some();
        if let Some(aud) = &self.audience {
            validation.set_audience(aud);
        }
        if let Some(iss) = &self.issuer {
            validation.set_issuer(iss);
        }
        let taken = match client {
            None => None,
            Some(client) => match self.budget.take(client) {
                Some(taken) => Some(taken),
                None => {
                    self.budget_refusals.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
        };
        self.signature_checks.fetch_add(1, Ordering::Relaxed);
        let data = match jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &pinned.key, &validation) {
            Ok(data) => data,
            Err(e) => {
                // Remembered, unless it may verify soon (`nbf` ahead).
                if !matches!(e.kind(), jsonwebtoken::errors::ErrorKind::ImmatureSignature) {
                    let mut failed = lock(failed_shard);
                    if failed.len() >= self.cache_per_shard {
                        failed.retain(|_, (until, _)| *until > now);
                        if failed.len() >= self.cache_per_shard {
                            failed.clear();
                        }
                    }
                    failed.insert(id, (now.saturating_add(FAILED_TTL_SECS), generation));
                }
                return None;
            }
        };
        if let Some(taken) = taken {
            self.budget.give_back(taken);
        }
        let exp = data.claims.get("exp").and_then(Value::as_u64)?;
        let claims = VerifiedClaims::new(data.claims);

        if let Ok(mut cache) = shard.lock() {
            if cache.len() >= self.cache_per_shard {
                cache.retain(|_, (_, e, _)| *e > now);
                if cache.len() >= self.cache_per_shard {
                    cache.clear();
                }
            }
            cache.insert(id, (claims.clone(), exp, generation));
        }
        Some(claims)
    }

    /// How many tokens reached a signature check (cache misses that were
    /// well-formed enough to try), since the verifier was built: for
    /// monitoring, and for measuring what a flood of forged tokens costs.
    pub fn signature_checks(&self) -> u64 {
        self.signature_checks.load(Ordering::Relaxed)
    }

    /// How many tokens were refused without a signature check because their
    /// address had used its budget of failed checks.
    pub fn budget_refusals(&self) -> u64 {
        self.budget_refusals.load(Ordering::Relaxed)
    }

    /// Identifies the key set in force: changes when a JWKS URL refresh
    /// installs new keys.
    fn key_generation(&self) -> usize {
        match &self.keys {
            #[cfg(feature = "service")]
            Keys::Remote(r) => r.generation(),
            _ => 0,
        }
    }

    /// The claims of the request's `Authorization: Bearer` token, if exactly
    /// one such header is present and the token verifies.
    pub fn verify_request(&self, parts: &http::request::Parts) -> Option<VerifiedClaims> {
        self.verify(bearer_token(parts)?)
    }

    /// [`verify_request`](Self::verify_request) under `client`'s budget of
    /// failed checks (see [`verify_from`](Self::verify_from)).
    pub fn verify_request_from(&self, parts: &http::request::Parts, client: Option<IpAddr>) -> Option<VerifiedClaims> {
        self.verify_from(bearer_token(parts)?, client)
    }
}

#[cfg(feature = "service")]
mod remote {
    //! A JWKS fetched from a URL, refreshed in the background.

    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use arc_swap::ArcSwap;

    use super::{err, parse_jwks, JwtConfigError, PinnedKey};

    use crate::service::{http_client, http_get, is_http_or_https, HttpClient as Client};

    async fn fetch(
        client: &Client,
        url: &http::Uri,
        timeout: Duration,
    ) -> Result<HashMap<String, PinnedKey>, JwtConfigError> {
        let (status, body) = http_get(client, url.clone(), 1 << 20, timeout)
            .await
            .map_err(|e| err(format!("JWKS {}: {e}", shown(url))))?;
        if status != http::StatusCode::OK {
            return Err(err(format!("JWKS {}: status {status}", shown(url))));
        }
        let text = std::str::from_utf8(&body).map_err(|_| err(format!("JWKS {}: not UTF-8", shown(url))))?;
        parse_jwks(text)
    }

    /// Counts one fetch in `ratelimit_jwks_fetches_total`.
    fn count_fetch(ok: bool) {
        let result = if ok { "ok" } else { "error" };
        metrics::counter!(crate::metrics::JWKS_FETCHES, "result" => result).increment(1);
    }

    /// The URL as logs show it: scheme, host, port and path, never the
    /// query (where a provider may put an API key).
    pub(super) fn shown(url: &http::Uri) -> String {
        let scheme = url.scheme_str().unwrap_or("");
        let authority = url.authority().map_or("", |a| a.as_str());
        // `user:password@` is refused at load; drop it here too, whatever.
        let host = authority.rsplit('@').next().unwrap_or("");
        format!("{scheme}://{host}{}", url.path())
    }

    /// Refresh failures are logged at most once per this long (with the
    /// number of failures since the last success): a provider down for an
    /// hour is a handful of lines, not one per cooldown.
    const LOG_EVERY: Duration = Duration::from_secs(60);

    /// Tries of startup's fetch.
    const STARTUP_TRIES: usize = 3;

    /// Startup's fetch, and how many requests it took: an identity provider
    /// restarting or briefly overloaded at deploy time (refused, timed out,
    /// a 5xx or 429) is asked again, up to [`STARTUP_TRIES`] times with
    /// 250 ms and then 750 ms between, before startup is refused with the
    /// last reason. A JWKS that does not parse is not asked again.
    async fn fetch_at_startup(
        client: &Client,
        url: &http::Uri,
        timeout: Duration,
    ) -> Result<(HashMap<String, PinnedKey>, usize), JwtConfigError> {
        let mut wait = Duration::from_millis(250);
        let mut tries = 0;
        loop {
            tries += 1;
            let reason = match http_get(client, url.clone(), 1 << 20, timeout).await {
                Ok((http::StatusCode::OK, body)) => {
                    let parsed = std::str::from_utf8(&body)
                        .map_err(|_| err(format!("JWKS {}: not UTF-8", shown(url))))
                        .and_then(parse_jwks);
                    count_fetch(parsed.is_ok());
                    return parsed.map(|keys| (keys, tries));
                }
                Ok((status, _)) if !(status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS) => {
                    count_fetch(false);
                    return Err(err(format!("JWKS {}: status {status}", shown(url))));
                }
                Ok((status, _)) => format!("status {status}"),
                Err(e) => e,
            };
            count_fetch(false);
            if tries == STARTUP_TRIES {
                return Err(err(format!("JWKS {}: {reason} (tried {tries} times)", shown(url))));
            }
            tokio::time::sleep(wait).await;
            wait *= 3;
        }
    }

    /// A key set and its generation: a counter, bumped by each refresh that
    /// installs keys, swapped together with the keys (a heap address could
    /// be reused by a later set and revive verifications made under a
    /// removed key).
    fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) struct KeySet {
        generation: usize,
        pub(super) keys: HashMap<String, PinnedKey>,
    }

    pub(super) struct RemoteJwks {
        pub(super) url: http::Uri,
        client: Client,
        keys: ArcSwap<KeySet>,
        /// When the keys in force were fetched, in nanoseconds since
        /// `base`: an atomic, read on every verification (a mutex here
        /// would be a global lock on the request path).
        loaded_at_ns: AtomicU64,
        base: Instant,
        last_attempt: Mutex<Instant>,
        in_flight: AtomicBool,
        pub(super) fetches: AtomicUsize,
        /// Refreshes failed since the last success, and when one was last
        /// logged.
        failing: Mutex<(u64, Option<Instant>)>,
        settings: super::JwksSettings,
        runtime: tokio::runtime::Handle,
    }

    impl RemoteJwks {
        pub(super) async fn load(
            url: &str,
            settings: super::JwksSettings,
            tls: &crate::config::TlsConfig,
        ) -> Result<Arc<Self>, JwtConfigError> {
            let url: http::Uri = url.parse().map_err(|e| err(format!("JWKS URL {url:?}: {e}")))?;
            if !is_http_or_https(&url) {
                return Err(err(format!(
                    "JWKS URL {}: expected an http:// or https:// URL",
                    shown(&url)
                )));
            }
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| err("a JWKS URL needs a tokio runtime"))?;
            let client = http_client(tls).map_err(|e| err(format!("JWKS URL {}: {e}", shown(&url))))?;
            let (keys, tries) = fetch_at_startup(&client, &url, settings.timeout).await?;
            let now = Instant::now();
            Ok(Arc::new(RemoteJwks {
                url,
                client,
                keys: ArcSwap::from_pointee(KeySet { generation: 1, keys }),
                loaded_at_ns: AtomicU64::new(0),
                base: now,
                last_attempt: Mutex::new(now),
                in_flight: AtomicBool::new(false),
                fetches: AtomicUsize::new(tries),
                failing: Mutex::new((0, None)),
                settings,
                runtime,
            }))
        }

        /// The keys in force; starts a background refresh when they are older
        /// than the refresh interval.
        /// Changes whenever new keys are installed.
        pub(super) fn generation(&self) -> usize {
            self.keys.load().generation
        }

        /// Keys in force.
        pub(super) fn key_count(&self) -> usize {
            self.keys.load().keys.len()
        }

        pub(super) fn current(self: &Arc<Self>) -> Arc<KeySet> {
            self.refresh_if_stale();
            self.keys.load_full()
        }

        /// Starts a background refresh when the keys in force are older than
        /// the refresh interval: on every verification, cache hits included,
        /// so a key removed upstream stops verifying within an interval
        /// (plus the cooldown) however hot its tokens are.
        pub(super) fn refresh_if_stale(self: &Arc<Self>) {
            let now = nanos(self.base.elapsed());
            let loaded = self.loaded_at_ns.load(Ordering::Relaxed);
            if now.saturating_sub(loaded) >= nanos(self.settings.refresh_every) {
                self.refresh_soon();
            }
        }

        /// One background fetch, unless one is running or the last attempt
        /// was within the cooldown. Failures keep the keys in force.
        pub(super) fn refresh_soon(self: &Arc<Self>) {
            if self
                .in_flight
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return;
            }
            let due = match self.last_attempt.lock() {
                Ok(mut last) if last.elapsed() >= self.settings.cooldown => {
                    *last = Instant::now();
                    true
                }
                _ => false,
            };
            if !due {
                self.in_flight.store(false, Ordering::Release);
                return;
            }
            /// Clears `in_flight` however the fetch ends: done, panicked, or
            /// dropped unrun by a runtime that has shut down.
            struct InFlight(Arc<RemoteJwks>);
            impl Drop for InFlight {
                fn drop(&mut self) {
                    self.0.in_flight.store(false, Ordering::Release);
                }
            }
            let guard = InFlight(Arc::clone(self));
            self.runtime.spawn(async move {
                let this = &guard.0;
                this.fetches.fetch_add(1, Ordering::Relaxed);
                let result = fetch(&this.client, &this.url, this.settings.timeout).await;
                count_fetch(result.is_ok());
                match result {
                    Ok(keys) => {
                        // One refresh at a time (`in_flight`): the counter
                        // only grows.
                        let generation = this.keys.load().generation.wrapping_add(1);
                        let count = keys.len();
                        this.keys.store(Arc::new(KeySet { generation, keys }));
                        this.loaded_at_ns.store(nanos(this.base.elapsed()), Ordering::Relaxed);
                        // Reset whole: the next incident's first failure
                        // is logged at once.
                        let failed = this.failing.lock().map_or(0, |mut f| std::mem::take(&mut *f).0);
                        if failed > 0 {
                            tracing::info!(
                                target: "ratelimit",
                                url = %shown(&this.url),
                                failed,
                                keys = count,
                                "JWKS refresh succeeded again"
                            );
                        }
                    }
                    // The first failure, then at most one line a minute: a
                    // certificate that stopped verifying is seen, not silent,
                    // and a provider down for hours is not a flood.
                    Err(e) => {
                        let due = this.failing.lock().ok().and_then(|mut f| {
                            f.0 += 1;
                            let due = f.1.is_none_or(|at| at.elapsed() >= LOG_EVERY);
                            due.then(|| {
                                f.1 = Some(Instant::now());
                                f.0
                            })
                        });
                        if let Some(failed) = due {
                            tracing::warn!(
                                target: "ratelimit",
                                url = %shown(&this.url),
                                failed,
                                keys_in_force = this.keys.load().keys.len(),
                                "JWKS refresh failed, the keys in force stay: {e}"
                            );
                        }
                    }
                }
                drop(guard);
            });
        }
    }
}

/// How a JWKS URL is fetched and refreshed.
#[cfg(feature = "service")]
#[cfg_attr(docsrs, doc(cfg(all(feature = "jwt", feature = "service"))))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JwksSettings {
    /// Refresh in the background after this long (default 10 min).
    pub refresh_every: Duration,
    /// Fetch at most once per this long, however many unknown `kid`s
    /// arrive (default 30 s).
    pub cooldown: Duration,
    /// Per-fetch timeout (default 2 s).
    pub timeout: Duration,
}

#[cfg(feature = "service")]
impl Default for JwksSettings {
    fn default() -> Self {
        JwksSettings {
            refresh_every: crate::defaults::JWKS_REFRESH,
            cooldown: crate::defaults::JWKS_COOLDOWN,
            timeout: Duration::from_secs(2),
        }
    }
}

#[cfg(feature = "service")]
impl JwtVerifier {
    /// A JWKS fetched from `url` (`http://` or `https://`), now, and
    /// refreshed in the background: every `refresh_every`, and when a token
    /// names an unknown `kid` (a key rotation), at most once per `cooldown`
    /// however many such tokens arrive. A failed refresh keeps the keys in
    /// force (and logs a `WARN` line with the URL and the reason). Fails
    /// when the first fetch fails (a verifier without keys would make every
    /// client anonymous), with the URL and the reason.
    ///
    /// `https://` verifies the server's certificate, hostname included,
    /// against the webpki roots; [`JwtVerifier::jwks_url_with_tls`] trusts a
    /// private CA instead.
    pub async fn jwks_url(url: &str, settings: JwksSettings) -> Result<Self, JwtConfigError> {
        Self::jwks_url_with_tls(url, settings, &crate::config::TlsConfig::default()).await
    }

    /// [`JwtVerifier::jwks_url`] whose `https://` trusts the CAs of
    /// `tls.ca_file` (and only them) when set, the webpki roots otherwise
    /// (what [`Config::jwt_verifier`](crate::config::Config::jwt_verifier)
    /// does with `[tls]`). The crypto provider is the application's process
    /// default if it installed one, else ring, never installed process-wide.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::config::TlsConfig;
    /// use ratelimit::jwt::{JwksSettings, JwtVerifier};
    ///
    /// let tls = TlsConfig::with_ca_file("/nonexistent/idp-ca.pem");
    /// let url = "https://idp.internal/.well-known/jwks.json";
    /// let err = JwtVerifier::jwks_url_with_tls(url, JwksSettings::default(), &tls)
    ///     .await
    ///     .unwrap_err();
    /// // The URL and the reason (here: the CA file is missing).
    /// assert!(err.to_string().contains(url) && err.to_string().contains("idp-ca.pem"), "{err}");
    /// # }
    /// ```
    pub async fn jwks_url_with_tls(
        url: &str,
        settings: JwksSettings,
        tls: &crate::config::TlsConfig,
    ) -> Result<Self, JwtConfigError> {
        Ok(Self::with_keys(Keys::Remote(
            remote::RemoteJwks::load(url, settings, tls).await?,
        )))
    }

    /// How many times the JWKS URL was fetched (for monitoring and tests);
    /// 0 for other key sources.
    pub fn jwks_fetches(&self) -> usize {
        match &self.keys {
            Keys::Remote(r) => r.fetches.load(std::sync::atomic::Ordering::Relaxed),
            _ => 0,
        }
    }
}

/// Keys by `kid` from a JWKS document; every key needs `kid` and `alg`.
fn parse_jwks(json: &str) -> Result<HashMap<String, PinnedKey>, JwtConfigError> {
    use jsonwebtoken::jwk::{AlgorithmParameters, PublicKeyUse};
    let set: JwkSet = serde_json::from_str(json).map_err(|e| err(format!("JWKS: {e}")))?;
    let mut keys = HashMap::new();
    let mut skipped = Vec::new();
    // Providers publish keys this verifier must not or cannot use (encryption
    // keys, symmetric keys, keys without `alg`); skip those rather than fail
    // the whole set, so one odd key cannot freeze the signing keys in force.
    for (i, jwk) in set.keys.iter().enumerate() {
        let name = jwk.common.key_id.clone().unwrap_or_else(|| format!("#{i}"));
        let Some(kid) = jwk.common.key_id.clone() else {
            skipped.push(format!("{name}: no `kid`"));
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            skipped.push(format!("{name}: an encryption key"));
            continue;
        }
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            // A published symmetric key would let anyone mint tokens.
            skipped.push(format!("{name}: a symmetric (oct) key"));
            continue;
        }
        let alg = match jwk.common.key_algorithm.map(Algorithm::try_from) {
            Some(Ok(alg)) => alg,
            Some(Err(e)) => {
                skipped.push(format!("{name}: {e}"));
                continue;
            }
            None => {
                skipped.push(format!("{name}: no `alg` (the algorithm is pinned per key)"));
                continue;
            }
        };
        match DecodingKey::from_jwk(jwk) {
            Ok(key) if !keys.contains_key(&kid) => {
                keys.insert(kid, PinnedKey { key, alg });
            }
            Ok(_) => skipped.push(format!("{name}: a duplicate kid")),
            Err(e) => skipped.push(format!("{name}: {e}")),
        }
    }
    if keys.is_empty() {
        return Err(err(format!("JWKS: no usable signing key ({})", skipped.join("; "))));
    }
    Ok(keys)
}

/// The token of a single `Authorization: Bearer <token>` header.
pub fn bearer_token(parts: &http::request::Parts) -> Option<&str> {
    crate::claims::bearer_of(&parts.headers)
}

#[cfg(test)]
mod tests {
    use super::JwtVerifier;
    use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
    use std::net::IpAddr;
    use std::time::Duration;

    const SECRET: &[u8] = b"unit-test-secret-of-some-length";

    fn token(sub: &str, secret: &[u8]) -> String {
        let exp = jsonwebtoken::get_current_timestamp() + 600;
        let claims = serde_json::json!({"sub": sub, "exp": exp});
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap()
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    /// Review (h-headers): a leeway longer than the time since 1970 (a
    /// config typo such as `leeway = "500000h"`, accepted at load) reaches
    /// jsonwebtoken's `now - leeway` (u64): a debug build panics there, a
    /// release build wraps and refuses every valid token as expired.
    #[test]
    fn review_a_leeway_longer_than_the_epoch_still_verifies_a_valid_token() {
        let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
            .unwrap()
            .leeway(Duration::from_secs(500_000 * 3600));
        assert!(v.verify(&token("u", SECRET)).is_some());
    }

    #[test]
    fn only_failures_use_the_budget() {
        let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
            .unwrap()
            .failed_checks_per_ip(2, Duration::from_secs(60), 100);
        // Twenty distinct good tokens from one address (a NAT): all verify.
        // (Kept: minting "u0" again a second later would give another
        // token, `exp` being part of it, and the test would flake.)
        let good: Vec<String> = (0..20).map(|i| token(&format!("u{i}"), SECRET)).collect();
        for t in &good {
            assert!(v.verify_from(t, ip("192.0.2.1")).is_some());
        }
        for i in 0..20 {
            assert!(v
                .verify_from(
                    &token(&format!("f{i}"), b"wrong-secret-of-some-length-too"),
                    ip("192.0.2.1")
                )
                .is_none());
        }
        assert_eq!(v.signature_checks(), 22, "20 good, then 2 failures, then none");
        assert_eq!(v.budget_refusals(), 18);
        // Other addresses, and the unbudgeted `verify`, are unaffected.
        assert!(v.verify_from(&token("other", SECRET), ip("192.0.2.2")).is_some());
        assert!(v.verify(&token("direct", SECRET)).is_some());
        // Past its budget, the address's new good tokens wait too (the
        // trade-off); its cached ones still verify.
        assert!(v.verify_from(&token("new", SECRET), ip("192.0.2.1")).is_none());
        assert!(v.verify_from(&good[0], ip("192.0.2.1")).is_some());
    }

    #[test]
    fn the_budget_refills_over_its_window() {
        let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
            .unwrap()
            .failed_checks_per_ip(2, Duration::from_millis(200), 100);
        let bad = |i: u32| token(&format!("f{i}"), b"wrong-secret-of-some-length-too");
        for i in 0..5 {
            assert!(v.verify_from(&bad(i), ip("2001:db8::")).is_none());
        }
        assert_eq!(v.signature_checks(), 2);
        std::thread::sleep(Duration::from_millis(150)); // at least one unit back (100 ms each)
        for i in 5..10 {
            assert!(v.verify_from(&bad(i), ip("2001:db8::")).is_none());
        }
        let checks = v.signature_checks();
        assert!((3..=4).contains(&checks), "{checks}");
    }

    #[test]
    fn a_failed_token_is_checked_once() {
        let v = JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap();
        let forged = token("x", b"wrong-secret-of-some-length-too");
        for _ in 0..100 {
            assert!(v.verify(&forged).is_none());
        }
        assert_eq!(v.signature_checks(), 1);
        // A token not yet valid (`nbf` ahead) is not remembered as failed.
        let now = jsonwebtoken::get_current_timestamp();
        let claims = serde_json::json!({"sub": "s", "exp": now + 600, "nbf": now + 300});
        let early = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        assert!(v.verify(&early).is_none());
        assert!(v.verify(&early).is_none());
        assert_eq!(v.signature_checks(), 3);
    }

    #[test]
    fn one_48_cannot_make_every_new_clients_token_anonymous() {
        // Default budget: 10 failed checks per address per minute, 10,000
        // addresses tracked. One forged token puts an address in debt for
        // 6 s, so one IPv6 /48 (65,536 /64s, each its own address as
        // limited) sending one forged token from each of 12,000 /64s (12,000
        // cheap requests, repeated every 6 s) fills the table and spends
        // every shard's shared overflow budget. A good client from another
        // network, with a fresh valid token, must still be verified.
        let v = JwtVerifier::hmac(SECRET, Algorithm::HS256).unwrap();
        for i in 0..12_000u32 {
            let addr = IpAddr::from([0x2001, 0x0db8, 0xaaaa, i as u16, 0, 0, 0, 0]);
            let forged = format!("eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.forged{i}");
            assert!(v.verify_from(&forged, Some(addr)).is_none());
        }
        let good = token("alice", SECRET);
        assert!(
            v.verify_from(&good, ip("2001:db8:bbbb:1::")).is_some(),
            "a client of another network is anonymous after one network's flood ({} refused unchecked)",
            v.budget_refusals()
        );
    }

    #[test]
    fn a_table_full_of_addresses_bounds_the_rest_together() {
        // One address per shard, then every new address shares its shard's
        // overflow budget: a flood from many addresses is bounded too.
        let v = JwtVerifier::hmac(SECRET, Algorithm::HS256)
            .unwrap()
            .failed_checks_per_ip(1, Duration::from_secs(60), 1);
        for i in 0..2000u32 {
            let addr = IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
            assert!(v
                .verify_from(&token(&format!("f{i}"), b"wrong-secret-of-some-length-too"), Some(addr))
                .is_none());
        }
        let checks = v.signature_checks();
        assert!(checks <= 2 * super::CACHE_SHARDS as u64, "{checks}");
    }

    #[test]
    fn an_address_level_eviction_does_not_forgive_a_networks_debt() {
        // Both levels keep their TATs in one table, each offset by its own
        // interval ("now" = elapsed + interval), and a full shard is
        // cleaned with the `now` of whichever level is inserting. With
        // per_ip = 1 per window (interval = the window) and per_network = 4
        // (interval = a quarter), an address-level insertion evicts a
        // network entry that is still 3 units in debt: the network gets
        // its whole budget back after recovering one unit.
        use super::{FailureBudget, CACHE_SHARDS};
        let window = Duration::from_secs(4);
        // Two entries per shard.
        let b = FailureBudget::new(1, window, 2 * CACHE_SHARDS).with_network(4, window, 48, 24);
        let level = b.network.unwrap();
        let net: IpAddr = "2001:db8:aaaa::".parse().unwrap();
        let net_key = b.hasher.hash_one((1u8, crate::key::prefix_of(net, 48, 24)));
        let shard = (net_key as usize) % CACHE_SHARDS;
        // Another network in the same shard, one failure (recovered in 1 s):
        // the shard is full, and this entry is rightly evicted later.
        let filler = (1u16..)
            .map(|i| IpAddr::from([0x2001, 0xdb8, i, 0, 0, 0, 0, 0]))
            .map(|a| b.hasher.hash_one((1u8, crate::key::prefix_of(a, 48, 24))))
            .find(|k| (*k as usize) % CACHE_SHARDS == shard && *k != net_key)
            .unwrap();
        assert!(b.take_cell(filler, level.rate).is_some());
        for i in 0..4 {
            assert!(b.take_cell(net_key, level.rate).is_some(), "unit {i}");
        }
        assert!(
            b.take_cell(net_key, level.rate).is_none(),
            "the network's budget is spent"
        );
        let spent = std::time::Instant::now();
        // One unit (1 s) recovers.
        std::thread::sleep(Duration::from_millis(1_100));
        // An address of another network lands in the network entry's shard
        // (full: one entry per shard) and takes an address-level unit.
        let other = (0u32..)
            .map(|i| IpAddr::from([198, 51, (i >> 8) as u8, i as u8]))
            .map(|a| b.hasher.hash_one((0u8, Some(a))))
            .find(|k| (*k as usize) % CACHE_SHARDS == shard)
            .unwrap();
        assert!(b.take_cell(other, b.address).is_some());
        let mut got = 0;
        while got < 10 && b.take_cell(net_key, level.rate).is_some() {
            got += 1;
        }
        // A slow machine may have slept longer: what it recovered, at most.
        let recovered = (spent.elapsed().as_millis() / 1_000) as usize;
        assert!(
            got <= recovered,
            "the network recovered {recovered} unit(s) but got {got} checks"
        );
    }
}
