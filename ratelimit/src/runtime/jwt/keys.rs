//! Key material: a key pinned to its algorithm, and a JWKS document parsed
//! into keys by `kid`.

use std::collections::HashMap;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};

use super::{err, JwtConfigError};

/// A key and the one algorithm tokens signed with it may name.
pub(super) struct PinnedKey {
    pub(super) key: DecodingKey,
    pub(super) alg: Algorithm,
}

// A JWKS URL's refreshes compare sets.
impl PinnedKey {
    /// The same algorithm and the same key material (its family and bytes:
    /// an RSA modulus and exponent, an EC or Ed25519 point, a DER key).
    fn same_as(&self, other: &PinnedKey) -> bool {
        use jsonwebtoken::DecodingKeyKind;
        let material = match (self.key.kind(), other.key.kind()) {
            (DecodingKeyKind::SecretOrDer(a), DecodingKeyKind::SecretOrDer(b)) => a == b,
            (DecodingKeyKind::RsaModulusExponent { n, e }, DecodingKeyKind::RsaModulusExponent { n: n2, e: e2 }) => {
                n == n2 && e == e2
            }
            _ => false,
        };
        self.alg == other.alg && self.key.family() == other.key.family() && material
    }
}

/// Whether two key sets hold the same keys: the same `kid`s, each with the
/// same algorithm and key material. A refresh that fetched the same set
/// changes nothing a verification depends on.
pub(super) fn same_keys(a: &HashMap<String, PinnedKey>, b: &HashMap<String, PinnedKey>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(kid, k)| b.get(kid).is_some_and(|other| k.same_as(other)))
}

/// The algorithm a key without `alg` is pinned to: RS256 for an RSA key,
/// ES256 or ES384 by an EC key's curve, EdDSA for an Ed25519 key; none for
/// other curves. A token signed otherwise with such a key (PS256, say) has
/// another `alg` in its header and is refused, as for any pinned key.
fn implied_algorithm(params: &jsonwebtoken::jwk::AlgorithmParameters) -> Option<Algorithm> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve};
    match params {
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Some(Algorithm::ES256),
            EllipticCurve::P384 => Some(Algorithm::ES384),
            _ => None,
        },
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => Some(Algorithm::EdDSA),
        _ => None,
    }
}

/// Keys by `kid` from a JWKS document; every key needs a `kid`, and an
/// `alg` or a key type that implies one.
pub(super) fn parse_jwks(json: &str) -> Result<HashMap<String, PinnedKey>, JwtConfigError> {
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
            // No `alg` (Entra ID publishes its keys so): the algorithm its
            // key type and curve imply, pinned like a written one.
            None => match implied_algorithm(&jwk.algorithm) {
                Some(alg) => alg,
                None => {
                    skipped.push(format!("{name}: no `alg`, and its key type implies none"));
                    continue;
                }
            },
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
