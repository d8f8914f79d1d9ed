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
//! Keys: an HMAC secret (from an environment variable), a PEM public key, or
//! a JWKS document (each key with a `kid` and an `alg`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::resolve::VerifiedClaims;

/// The longest token examined; longer ones are anonymous without parsing.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;
const CACHE_SHARDS: usize = 16;

/// Verified tokens by a 128-bit keyed hash of the token: claims and `exp`.
type TokenCacheShard = Mutex<HashMap<(u64, u64), (VerifiedClaims, u64)>>;

/// Why a verifier could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfigError(String);

impl std::fmt::Display for JwtConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JwtConfigError {}

fn err(message: impl Into<String>) -> JwtConfigError {
    JwtConfigError(message.into())
}

struct PinnedKey {
    key: DecodingKey,
    alg: Algorithm,
}

enum Keys {
    Single(PinnedKey),
    ByKid(HashMap<String, PinnedKey>),
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
            leeway: Duration::from_secs(30),
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
        let pem = std::fs::read(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        Self::pem(&pem, alg).map_err(|e| err(format!("{}: {e}", path.display())))
    }

    /// A JWKS document. Every key needs a `kid` and an `alg` (the algorithm
    /// is pinned per key); tokens must name their key's `kid`.
    pub fn jwks(json: &str) -> Result<Self, JwtConfigError> {
        let set: JwkSet = serde_json::from_str(json).map_err(|e| err(format!("JWKS: {e}")))?;
        let mut keys = HashMap::new();
        for (i, jwk) in set.keys.iter().enumerate() {
            let kid = jwk
                .common
                .key_id
                .clone()
                .ok_or_else(|| err(format!("JWKS key {i}: no `kid`")))?;
            let alg = jwk
                .common
                .key_algorithm
                .ok_or_else(|| err(format!("JWKS key {kid:?}: no `alg` (the algorithm is pinned per key)")))
                .and_then(|a| Algorithm::try_from(a).map_err(|e| err(format!("JWKS key {kid:?}: {e}"))))?;
            let key = DecodingKey::from_jwk(jwk).map_err(|e| err(format!("JWKS key {kid:?}: {e}")))?;
            if keys.insert(kid.clone(), PinnedKey { key, alg }).is_some() {
                return Err(err(format!("JWKS: duplicate kid {kid:?}")));
            }
        }
        if keys.is_empty() {
            return Err(err("JWKS: no keys"));
        }
        Ok(Self::with_keys(Keys::ByKid(keys)))
    }

    /// A JWKS document from a file.
    pub fn jwks_file(path: impl AsRef<Path>) -> Result<Self, JwtConfigError> {
        let path = path.as_ref();
        let json = std::fs::read_to_string(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
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
        if let Ok(cache) = shard.lock() {
            if let Some((claims, exp)) = cache.get(&id) {
                if *exp > now {
                    return Some(claims.clone());
                }
            }
        }

        let header = jsonwebtoken::decode_header(token).ok()?;
        let pinned = match &self.keys {
            Keys::Single(k) => k,
            Keys::ByKid(keys) => keys.get(header.kid.as_deref()?)?,
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
                cache.retain(|_, (_, e)| *e > now);
                if cache.len() >= self.cache_per_shard {
                    cache.clear();
                }
            }
            cache.insert(id, (claims.clone(), exp));
        }
        Some(claims)
    }

    /// The claims of the request's `Authorization: Bearer` token, if exactly
    /// one such header is present and the token verifies.
    pub fn verify_request(&self, parts: &http::request::Parts) -> Option<VerifiedClaims> {
        self.verify(bearer_token(parts)?)
    }
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
