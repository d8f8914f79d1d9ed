//! `explain`'s reading of a bearer token: decoded WITHOUT verification
//! (explain holds no secret and fetches nothing), its tier claim, and what
//! an offline check of its `exp`, `nbf`, `iss` and `aud` against `[jwt]`
//! finds: the usual reasons a valid-looking token is served as anonymous.

use std::fmt::Write as _;

use http::HeaderMap;
use serde_json::Value;

use super::request::Request;
use crate::runtime::claims::VerifiedClaims;
use crate::runtime::config::{Config, RuleConfig};

/// Whether `rule` reads claims (a `jwt` step, or a `jwt_claim` key), as the
/// runtime decides whether to verify a request's token.
pub(super) fn reads_claims(rule: &RuleConfig) -> bool {
    rule.resolve.contains(&crate::runtime::resolve::Step::Jwt) || rule.key_text().starts_with("jwt_claim:")
}

/// The bearer token of `authorization`, as the runtime reads it (one
/// header, the `Bearer` scheme), if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    crate::runtime::claims::bearer_of(headers)
}

/// The token's claims, read WITHOUT verifying anything.
#[cfg(feature = "jwt")]
fn unverified_claims(token: &str) -> Result<(String, VerifiedClaims), String> {
    let data =
        jsonwebtoken::dangerous::insecure_decode::<serde_json::Map<String, Value>>(token).map_err(|e| e.to_string())?;
    Ok((format!("{:?}", data.header.alg), VerifiedClaims::new(data.claims)))
}

#[cfg(not(feature = "jwt"))]
fn unverified_claims(_token: &str) -> Result<(String, VerifiedClaims), String> {
    Err("reading tokens needs the `jwt` feature of ratelimit".to_owned())
}

/// The request's token, when one of `rules` reads claims: its unverified
/// claims, with what it would meet written to `out`.
pub(super) fn read_token<'r>(
    config: &Config,
    request: &Request,
    mut rules: impl Iterator<Item = &'r RuleConfig>,
    out: &mut String,
) -> Option<VerifiedClaims> {
    let token = bearer(&request.headers)?;
    if !rules.any(reads_claims) {
        out.push_str("token: a bearer token, not read here (no jwt step, and the key is not a claim)\n");
        return None;
    }
    let (alg, claims) = match unverified_claims(token) {
        Ok(read) => read,
        Err(e) => {
            let _ = writeln!(out, "token: not a readable JWT ({e}): the request is anonymous");
            return None;
        }
    };
    let _ = writeln!(
        out,
        "token: a bearer token ({alg}), decoded WITHOUT verification: its claims below would apply only if the \
         token verifies (signature, exp, iss/aud); otherwise the request is anonymous"
    );
    if let Some(j) = &config.jwt {
        match claims.get(&j.tier_claim) {
            Some(v) => {
                let _ = writeln!(out, "  tier claim {}: {v} (unverified)", j.tier_claim);
            }
            None => {
                let _ = writeln!(out, "  tier claim {}: absent", j.tier_claim);
            }
        }
    }
    offline_checks(config, &claims, unix_now(), out);
    Some(claims)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `exp`, `nbf`, `iss` and `aud` against `[jwt]` at `now` (seconds since
/// 1970), as the verifier checks them: what would make the token anonymous
/// whatever its signature.
pub(super) fn offline_checks(config: &Config, claims: &VerifiedClaims, now: u64, out: &mut String) {
    let verification = config.jwt.as_ref().and_then(|j| j.verification.as_ref());
    let leeway = verification.map_or(0, |v| v.leeway.as_secs());
    let line = match claims.get("exp").map(Value::as_u64) {
        None => "exp: absent: the token would be anonymous (exp is required)".to_owned(),
        Some(None) => "exp: not a whole number of seconds: the token would be anonymous".to_owned(),
        Some(Some(exp)) if exp.saturating_add(leeway) < now => format!(
            "exp: expired {} s ago (leeway {leeway} s): the token would be anonymous",
            now - exp
        ),
        Some(Some(exp)) => format!("exp: expires in {} s", exp.saturating_sub(now)),
    };
    let _ = writeln!(out, "  {line}");
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64) {
        if nbf > now.saturating_add(leeway) {
            let _ = writeln!(
                out,
                "  nbf: not valid for another {} s: the token would be anonymous until then",
                nbf - now
            );
        }
    }
    let Some(v) = verification else {
        out.push_str("  iss, aud: not checked here: [jwt] names no key source (an upstream layer verifies)\n");
        return;
    };
    if !v.issuer.is_empty() {
        // Each issuer with or without its trailing slash, as the verifier.
        let bare = |s: &str| s.trim_end_matches('/').to_owned();
        let line = match claims.get("iss").and_then(Value::as_str) {
            None => format!(
                "iss: absent, but [jwt] issuer is {:?}: the token would be anonymous",
                v.issuer
            ),
            Some(iss) if v.issuer.iter().any(|i| bare(i) == bare(iss)) => format!("iss: {iss:?} is accepted"),
            Some(iss) => format!(
                "iss: {iss:?} is not [jwt] issuer {:?}: the token would be anonymous (write the issuer exactly as \
                 the provider's tokens do)",
                v.issuer
            ),
        };
        let _ = writeln!(out, "  {line}");
    }
    if !v.audience.is_empty() {
        let auds: Vec<&str> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.as_str()],
            Some(Value::Array(all)) => all.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let line = if auds.is_empty() {
            format!(
                "aud: absent, but [jwt] audience is {:?}: the token would be anonymous",
                v.audience
            )
        } else if auds.iter().any(|a| v.audience.iter().any(|want| want == a)) {
            format!("aud: {auds:?} includes an accepted audience")
        } else {
            format!(
                "aud: {auds:?} has none of [jwt] audience {:?}: the token would be anonymous",
                v.audience
            )
        };
        let _ = writeln!(out, "  {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
        [profiles.standard]
        rate = "60/min"
        [jwt]
        hmac_secret_env = "UNUSED_IN_THIS_TEST"
        algorithm = "HS256"
        issuer = ["https://tenant.auth.example/"]
        audience = ["api"]
    "#;

    fn checks(claims: &str, now: u64) -> String {
        let config = Config::from_toml_str(CONFIG).unwrap();
        let mut out = String::new();
        offline_checks(&config, &VerifiedClaims::from_json(claims).unwrap(), now, &mut out);
        out
    }

    #[test]
    fn what_would_make_a_token_anonymous_is_said() {
        let ok = checks(
            r#"{"exp": 1100, "iss": "https://tenant.auth.example", "aud": ["web", "api"]}"#,
            1000,
        );
        assert_eq!(
            ok,
            "  exp: expires in 100 s\n  iss: \"https://tenant.auth.example\" is accepted\n  aud: [\"web\", \"api\"] \
             includes an accepted audience\n"
        );
        let bad = checks(
            r#"{"exp": 900, "nbf": 2000, "iss": "https://other.example", "aud": "web"}"#,
            1000,
        );
        assert!(
            bad.contains("exp: expired 100 s ago (leeway 30 s): the token would be anonymous"),
            "{bad}"
        );
        assert!(bad.contains("nbf: not valid for another 1000 s"), "{bad}");
        assert!(
            bad.contains("iss: \"https://other.example\" is not [jwt] issuer"),
            "{bad}"
        );
        assert!(
            bad.contains("aud: [\"web\"] has none of [jwt] audience [\"api\"]"),
            "{bad}"
        );
        let absent = checks("{}", 1000);
        assert!(absent.contains("exp: absent"), "{absent}");
        assert!(absent.contains("iss: absent"), "{absent}");
        assert!(absent.contains("aud: absent"), "{absent}");
    }
}
