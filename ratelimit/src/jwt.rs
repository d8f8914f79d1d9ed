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
//!   pays for one signature check, not one per request. Failures are not
//!   cached: a forged token cannot fill the cache.
//!
//! Keys: an HMAC secret (from an environment variable), a PEM public key, a
//! JWKS document (each key with a `kid` and an `alg`), or, with the `service`
//! feature too, a JWKS URL refreshed in the background with a cooldown.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::claims::VerifiedClaims;

/// The longest token examined; longer ones are anonymous without parsing.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;
const CACHE_SHARDS: usize = 16;

/// Verified tokens by a 128-bit keyed hash of the token: claims and `exp`.
/// Verified tokens by a 128-bit keyed hash of the token: claims, `exp`, and
/// the generation of the key set that verified them.
type TokenCacheShard = Mutex<HashMap<(u64, u64), (VerifiedClaims, u64, usize)>>;

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
    fn with_keys(keys: Keys) -> Self {
        JwtVerifier {
            keys,
            issuer: None,
            audience: None,
            leeway: crate::defaults::JWT_LEEWAY,
            hasher: (ahash::RandomState::new(), ahash::RandomState::new()),
            cache: (0..CACHE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            cache_per_shard: 10_000 / CACHE_SHARDS,
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

    /// How many verified tokens are remembered (default 10,000).
    #[must_use]
    pub fn cache_capacity(mut self, tokens: usize) -> Self {
        self.cache_per_shard = tokens.div_ceil(CACHE_SHARDS).max(1);
        self
    }

    /// The claims of `token` if it verifies; `None` (anonymous) otherwise.
    pub fn verify(&self, token: &str) -> Option<VerifiedClaims> {
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
        validation.leeway = self.leeway.as_secs();
        validation.validate_nbf = true;
        validation.validate_aud = self.audience.is_some();
        if let Some(aud) = &self.audience {
            validation.set_audience(aud);
        }
        if let Some(iss) = &self.issuer {
            validation.set_issuer(iss);
        }
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &pinned.key, &validation).ok()?;
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

    use crate::service::{http_client, http_get, HttpClient as Client};

    async fn fetch(
        client: &Client,
        url: &http::Uri,
        timeout: Duration,
    ) -> Result<HashMap<String, PinnedKey>, JwtConfigError> {
        let (status, body) = http_get(client, url.clone(), 1 << 20, timeout)
            .await
            .map_err(|e| err(format!("JWKS {url}: {e}")))?;
        if status != http::StatusCode::OK {
            return Err(err(format!("JWKS {url}: status {status}")));
        }
        let text = std::str::from_utf8(&body).map_err(|_| err(format!("JWKS {url}: not UTF-8")))?;
        parse_jwks(text)
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
        settings: super::JwksSettings,
        runtime: tokio::runtime::Handle,
    }

    impl RemoteJwks {
        pub(super) async fn load(url: &str, settings: super::JwksSettings) -> Result<Arc<Self>, JwtConfigError> {
            let url: http::Uri = url.parse().map_err(|e| err(format!("JWKS URL {url:?}: {e}")))?;
            if url.scheme_str() != Some("http") {
                return Err(err(format!(
                    "JWKS URL {url}: only http:// is supported (terminate TLS beside the service)"
                )));
            }
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| err("a JWKS URL needs a tokio runtime"))?;
            let client = http_client();
            let keys = fetch(&client, &url, settings.timeout).await?;
            let now = Instant::now();
            Ok(Arc::new(RemoteJwks {
                url,
                client,
                keys: ArcSwap::from_pointee(KeySet { generation: 1, keys }),
                loaded_at_ns: AtomicU64::new(0),
                base: now,
                last_attempt: Mutex::new(now),
                in_flight: AtomicBool::new(false),
                fetches: AtomicUsize::new(1),
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
                if let Ok(keys) = fetch(&this.client, &this.url, this.settings.timeout).await {
                    // One refresh at a time (`in_flight`): the counter
                    // only grows.
                    let generation = this.keys.load().generation.wrapping_add(1);
                    this.keys.store(Arc::new(KeySet { generation, keys }));
                    this.loaded_at_ns.store(nanos(this.base.elapsed()), Ordering::Relaxed);
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
    /// A JWKS fetched from `url` (plain `http://`), now, and refreshed in the
    /// background: every `refresh_every`, and when a token names an unknown
    /// `kid` (a key rotation), at most once per `cooldown` however many such
    /// tokens arrive. A failed refresh keeps the keys in force. Fails when the
    /// first fetch fails (a verifier without keys would make every client
    /// anonymous).
    pub async fn jwks_url(url: &str, settings: JwksSettings) -> Result<Self, JwtConfigError> {
        Ok(Self::with_keys(Keys::Remote(
            remote::RemoteJwks::load(url, settings).await?,
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
    let mut values = parts.headers.get_all(http::header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let value = value.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}
