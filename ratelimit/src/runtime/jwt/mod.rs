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
//!   changes), so one forged token repeated costs one check; and public-key
//!   checks that fail are budgeted: the process may run
//!   [`failed_checks_per_second`](JwtVerifier::failed_checks_per_second)
//!   of them, and each client address, subnet and network has a share
//!   ([`JwtVerifier::failed_checks_per_ip`],
//!   [`JwtVerifier::failed_checks_per_network`]). A client past its share is
//!   still checked while half the process budget is left, so a valid token
//!   from behind a NAT that also sent forgeries verifies unless the process
//!   is under a flood that costs CPU. HMAC tokens are always checked (a
//!   check costs less than the bookkeeping). Tokens already verified and
//!   cached stay verified.
//!
//! Keys: an HMAC secret (from an environment variable), a PEM public key, a
//! JWKS document (each key with a `kid`; its `alg`, or the one its key type
//! implies), or a JWKS URL refreshed in the background with a cooldown.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::engine::concurrency::KeyedHash;
use crate::runtime::claims::VerifiedClaims;

mod budget;
mod error;
mod jwks;
mod keys;
mod outcome;
mod settings;

use budget::FailureBudget;
pub use error::JwtConfigError;
pub use jwks::JwksSettings;
use keys::{parse_jwks, PinnedKey};

/// The longest token examined; longer ones are anonymous without parsing.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;
const CACHE_SHARDS: usize = 16;

/// Verified tokens by a 128-bit keyed hash of the token: claims, `exp`, and
/// the generation of the key set that verified them.
type TokenCacheShard = Mutex<HashMap<TokenId, (VerifiedClaims, u64, usize), BuildHasherDefault<KeyedHash>>>;
/// Tokens that failed their signature check, keyed like the verified ones:
/// until when (seconds) the failure is remembered, and under which key set.
type FailedCacheShard = Mutex<HashMap<TokenId, (u64, usize), BuildHasherDefault<KeyedHash>>>;

/// A token's identity in the caches: two independent keyed hashes of its
/// bytes. The first picks the shard, the second the map's bucket, as it is
/// ([`KeyedHash`]: hashing a keyed hash again, SipHash on every request,
/// buys nothing; the first half's bits are the same for every token of a
/// shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TokenId(u64, u64);

impl std::hash::Hash for TokenId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.1);
    }
}

/// How long a failed token is remembered (at most; a key set change ends it).
const FAILED_TTL_SECS: u64 = 60;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; if something did, the data
    // (counters and caches) is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn err(message: impl Into<String>) -> JwtConfigError {
    JwtConfigError::new(message)
}

/// The keys a verifier holds (the fetcher of a JWKS URL builds its own
/// key sets: it sits below the verifier, and the key material below both).
enum Keys {
    Single(PinnedKey),
    ByKid(HashMap<String, PinnedKey>),
    Remote(std::sync::Arc<jwks::RemoteJwks>),
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
    /// Public-key tokens refused unchecked: the failed-check budget had no
    /// room for them.
    budget_refusals: AtomicU64,
    /// Each check's outcome.
    outcomes: outcome::Counts,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            Keys::Single(k) => format!("one {:?} key", k.alg),
            Keys::ByKid(m) => format!("{} keys by kid", m.len()),
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
            Keys::Remote(remote) => remote.key_count(),
        }
    }

    fn with_keys(keys: Keys) -> Self {
        JwtVerifier {
            keys,
            issuer: None,
            audience: None,
            leeway: crate::shared::defaults::JWT_LEEWAY,
            hasher: (ahash::RandomState::new(), ahash::RandomState::new()),
            cache: (0..CACHE_SHARDS).map(|_| Mutex::new(HashMap::default())).collect(),
            cache_per_shard: 10_000 / CACHE_SHARDS,
            failed: (0..CACHE_SHARDS).map(|_| Mutex::new(HashMap::default())).collect(),
            budget: FailureBudget::new(
                crate::shared::defaults::JWT_MAX_FAILED_PER_IP,
                crate::shared::defaults::JWT_FAILED_WINDOW,
                crate::shared::defaults::JWT_MAX_FAILED_TRACKED,
            ),
            signature_checks: AtomicU64::new(0),
            budget_refusals: AtomicU64::new(0),
            outcomes: outcome::Counts::default(),
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

    /// Accepted issuers (`iss` must be one of them), each with or without a
    /// trailing slash: providers differ in whether theirs has one (Auth0's
    /// does), and `https://idp/` and `https://idp` name one issuer.
    #[must_use]
    pub fn issuer(mut self, issuers: &[&str]) -> Self {
        let mut all = Vec::with_capacity(issuers.len() * 2);
        for issuer in issuers {
            let bare = issuer.trim_end_matches('/');
            all.extend([bare.to_owned(), format!("{bare}/")]);
        }
        self.issuer = Some(all);
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

    /// Each client address's share of failed public-key checks: `per_ip`
    /// at once and `per_ip` more per `window` (default 10 per minute), with
    /// budgets for up to `max_tracked` clients at once (default 10,000;
    /// beyond, new ones share overflow budgets, spread by network). Past
    /// its share, an address's tokens are checked only while half the
    /// process budget is left ([`failed_checks_per_second`](Self::failed_checks_per_second)),
    /// else anonymous without a check, except those already verified and
    /// cached. HMAC tokens are never budgeted. Applies to
    /// [`verify_from`](Self::verify_from) and
    /// [`verify_request_from`](Self::verify_request_from), which the HTTP
    /// runtime calls with the client's address (after `[ip]` trusted proxies
    /// and prefix aggregation).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit::jwt::JwtVerifier;
    /// use jsonwebtoken::Algorithm;
    ///
    /// let pem = b"-----BEGIN PUBLIC KEY-----
    /// MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAER0g1olFDqJQhTjHOX7vRWP/DJW+O
    /// dRNB1avKtG1LrAWkz6k/8hD9qG9GZSETAzl2ib08+Tz2RT6bALUUD97uWw==
    /// -----END PUBLIC KEY-----";
    /// let v = JwtVerifier::pem(pem, Algorithm::ES256)
    ///     .unwrap()
    ///     .failed_checks_per_ip(2, Duration::from_secs(60), 1000)
    ///     .failed_checks_per_second(10);
    /// let peer = Some("203.0.113.9".parse().unwrap());
    /// for i in 0..100 {
    ///     let forged = format!("eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.forged{i}");
    ///     assert!(v.verify_from(&forged, peer).is_none());
    /// }
    /// // Its share (2), then the process's spare half (5, less the 2).
    /// assert_eq!(v.signature_checks(), 5);
    /// ```
    #[must_use]
    pub fn failed_checks_per_ip(mut self, per_ip: u32, window: Duration, max_tracked: usize) -> Self {
        self.budget = self.budget.with_address(per_ip, window, max_tracked);
        self
    }

    /// The share of failed public-key checks of all the addresses of one
    /// client network (an IPv6 /`ipv6_prefix`, an IPv4 /`ipv4_prefix`):
    /// `per_network` at once and as many more per `window` (default 100 per
    /// minute per /48 or /24). Each subnet of it (an IPv6 prefix 8 bits
    /// longer, a /56 of a /48; an IPv4 address) may spend at most a quarter
    /// of it, and the network is charged only by checks its subnets and
    /// addresses admitted: one tenant of a shared /48 flooding from its own
    /// /56 leaves the others three quarters of the network's share.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit::jwt::JwtVerifier;
    /// use jsonwebtoken::Algorithm;
    ///
    /// let pem = b"-----BEGIN PUBLIC KEY-----
    /// MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAER0g1olFDqJQhTjHOX7vRWP/DJW+O
    /// dRNB1avKtG1LrAWkz6k/8hD9qG9GZSETAzl2ib08+Tz2RT6bALUUD97uWw==
    /// -----END PUBLIC KEY-----";
    /// let v = JwtVerifier::pem(pem, Algorithm::ES256)
    ///     .unwrap()
    ///     .failed_checks_per_network(12, Duration::from_secs(60), 48, 24)
    ///     .failed_checks_per_second(1_000);
    /// let mut checks_per_subnet = Vec::new();
    /// for subnet in 0..2u16 {
    ///     let before = v.signature_checks();
    ///     for host in 0..100u16 {
    ///         let forged = format!("eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.forged{subnet}-{host}");
    ///         let addr = std::net::IpAddr::from([0x2001, 0xdb8, 0xaaaa, subnet << 8 | host, 0, 0, 0, 0]);
    ///         assert!(v.verify_from(&forged, Some(addr)).is_none());
    ///     }
    ///     checks_per_subnet.push(v.signature_checks() - before);
    /// }
    /// // Each /56 within its share (3 of the /48's 12), then the process's
    /// // spare: the second /56 is not starved by the first.
    /// assert!(checks_per_subnet[1] >= 3, "{checks_per_subnet:?}");
    /// ```
    #[must_use]
    pub fn failed_checks_per_network(
        mut self,
        per_network: u32,
        window: Duration,
        ipv6_prefix: u8,
        ipv4_prefix: u8,
    ) -> Self {
        self.budget.set_network(per_network, window, ipv6_prefix, ipv4_prefix);
        self
    }

    /// The process-wide budget of failed public-key checks: `per_second` at
    /// once and per second (default 1,000: a few percent of a core for
    /// RS256). Bounds what a flood of forged tokens from any number of
    /// networks costs; below half of it, only clients within their share
    /// are checked.
    ///
    /// ```
    /// use ratelimit::jwt::JwtVerifier;
    /// use jsonwebtoken::Algorithm;
    ///
    /// let pem = b"-----BEGIN PUBLIC KEY-----
    /// MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAER0g1olFDqJQhTjHOX7vRWP/DJW+O
    /// dRNB1avKtG1LrAWkz6k/8hD9qG9GZSETAzl2ib08+Tz2RT6bALUUD97uWw==
    /// -----END PUBLIC KEY-----";
    /// let v = JwtVerifier::pem(pem, Algorithm::ES256).unwrap().failed_checks_per_second(20);
    /// for i in 0..1_000u32 {
    ///     let forged = format!("eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.forged{i}");
    ///     // One /48 each: 2001:db8:<i>::/48.
    ///     let addr = std::net::IpAddr::V6((0x2001_0db8_u128 << 96 | u128::from(i) << 80).into());
    ///     assert!(v.verify_from(&forged, Some(addr)).is_none());
    /// }
    /// assert!(v.signature_checks() <= 21, "{}", v.signature_checks());
    /// ```
    #[must_use]
    pub fn failed_checks_per_second(mut self, per_second: u32) -> Self {
        self.budget.set_process(per_second);
        self
    }

    /// The claims of `token` if it verifies; `None` (anonymous) otherwise.
    /// No per-address budget applies (the failed-token cache does); on a
    /// request path, use [`verify_from`](Self::verify_from).
    pub fn verify(&self, token: &str) -> Option<VerifiedClaims> {
        self.verify_for(token.as_bytes(), None)
    }

    /// [`verify`](Self::verify) for a token from `client` (the client's
    /// address as it is limited; `None` when the request has no peer
    /// address, all such requests sharing one budget): a token that needs a
    /// signature check is refused unchecked when `client` has used its
    /// budget of failed checks ([`failed_checks_per_ip`](Self::failed_checks_per_ip)).
    pub fn verify_from(&self, token: &str, client: Option<IpAddr>) -> Option<VerifiedClaims> {
        self.verify_for(token.as_bytes(), Some(client))
    }

    /// `client`: `None` for no budget, else the address whose budget applies.
    /// `token` is checked to be text only past the caches: a hit is the
    /// bytes of a token that was checked when it was verified.
    fn verify_for(&self, token: &[u8], client: Option<Option<IpAddr>>) -> Option<VerifiedClaims> {
        use outcome::Verification as V;
        let fail = |outcome: V| self.outcomes.record(outcome);
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return fail(V::Malformed);
        }
        let now = jsonwebtoken::get_current_timestamp();
        let id = TokenId(self.hasher.0.hash_one(token), self.hasher.1.hash_one(token));
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

        let Some(token) = crate::runtime::claims::token_text(token) else {
            return fail(V::Malformed);
        };
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return fail(V::Malformed);
        };
        let remote_keys;
        let pinned = match (&self.keys, header.kid.as_deref()) {
            (Keys::Single(k), _) => k,
            (Keys::ByKid(keys), Some(kid)) => match keys.get(kid) {
                Some(k) => k,
                None => return fail(V::UnknownKey),
            },
            (Keys::Remote(remote), Some(kid)) => {
                remote_keys = remote.current();
                match remote_keys.keys.get(kid) {
                    Some(k) => k,
                    None => {
                        // Unknown kid: maybe a rotation. Refresh in the
                        // background, at most once per cooldown; this token
                        // is anonymous either way.
                        remote.refresh_soon();
                        return fail(V::UnknownKey);
                    }
                }
            }
            (Keys::ByKid(_) | Keys::Remote(_), None) => return fail(V::UnknownKey),
        };
        if header.alg != pinned.alg {
            return fail(V::BadSignature);
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
        // HMAC: a check costs less than budgeting it.
        let budgeted = !matches!(pinned.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512);
        let taken = match client {
            Some(client) if budgeted => match self.budget.take(client) {
                Some(taken) => Some(taken),
                None => {
                    self.budget_refusals.fetch_add(1, Ordering::Relaxed);
                    return fail(V::NotChecked);
                }
            },
            _ => None,
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
                return fail(V::of_error(&e));
            }
        };
        if let Some(taken) = taken {
            self.budget.give_back(taken);
        }
        let Some(exp) = data.claims.get("exp").and_then(Value::as_u64) else {
            return fail(V::Malformed);
        };
        self.outcomes.record(V::Verified);
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

    /// How many tokens past the caches met each outcome, by the labels of
    /// `ratelimit_jwt_verifications_total{result}`: `verified`, `expired`,
    /// `not_yet_valid`, `wrong_issuer`, `wrong_audience`, `unknown_key`,
    /// `bad_signature`, `malformed`, `not_checked` (the failed-check budget).
    ///
    /// ```
    /// use ratelimit::jwt::JwtVerifier;
    ///
    /// let verifier = JwtVerifier::hmac(b"a long random secret", jsonwebtoken::Algorithm::HS256).unwrap();
    /// assert!(verifier.verify("not.a.token").is_none());
    /// assert!(verifier.verifications().contains(&("malformed", 1)));
    /// ```
    pub fn verifications(&self) -> [(&'static str, u64); 9] {
        self.outcomes.snapshot()
    }

    /// Identifies the key set in force: changes when a JWKS URL refresh
    /// installs new keys.
    fn key_generation(&self) -> usize {
        match &self.keys {
            Keys::Remote(r) => r.generation(),
            _ => 0,
        }
    }

    /// The claims of the request's `Authorization: Bearer` token, if exactly
    /// one such header is present and the token verifies.
    pub fn verify_request(&self, parts: &http::request::Parts) -> Option<VerifiedClaims> {
        self.verify_for(crate::runtime::claims::bearer_bytes(&parts.headers)?, None)
    }

    /// [`verify_request`](Self::verify_request) under `client`'s budget of
    /// failed checks (see [`verify_from`](Self::verify_from)).
    pub fn verify_request_from(&self, parts: &http::request::Parts, client: Option<IpAddr>) -> Option<VerifiedClaims> {
        self.verify_for(crate::runtime::claims::bearer_bytes(&parts.headers)?, Some(client))
    }
}

/// The token of a single `Authorization: Bearer <token>` header.
pub fn bearer_token(parts: &http::request::Parts) -> Option<&str> {
    crate::runtime::claims::bearer_of(&parts.headers)
}

#[cfg(test)]
mod tests;
