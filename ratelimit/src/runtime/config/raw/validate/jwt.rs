//! `[jwt]`: claim names, caps, and at most one key source with a fitting
//! algorithm.

use super::super::schema::RawJwt;
use super::super::spans::field;
use super::Ctx;
use crate::runtime::config::{ConfigError, JwtKeySource, JwtLimits, JwtVerification};

/// The longest `[jwt] leeway` accepted: a day.
const MAX_LEEWAY: std::time::Duration = std::time::Duration::from_secs(86_400);

pub(in crate::runtime::config::raw) fn jwt(j: RawJwt, ctx: &Ctx<'_>) -> Result<JwtLimits, ConfigError> {
    let at = field("jwt");
    let sources: Vec<(&str, JwtKeySource)> = [
        j.hmac_secret_env
            .clone()
            .map(|v| ("hmac_secret_env", JwtKeySource::HmacSecretEnv(v))),
        j.pem_file.clone().map(|v| ("pem_file", JwtKeySource::PemFile(v))),
        j.jwks_file.clone().map(|v| ("jwks_file", JwtKeySource::JwksFile(v))),
        j.jwks_url.clone().map(|v| ("jwks_url", JwtKeySource::JwksUrl(v))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let keys = match sources.as_slice() {
        [] => None,
        [(name, source)] => {
            let needs_alg = matches!(source, JwtKeySource::HmacSecretEnv(_) | JwtKeySource::PemFile(_));
            match (&j.algorithm, needs_alg) {
                (None, true) => {
                    return Err(ctx.error(
                        &at.key(name),
                        format!("{name} needs `algorithm` (the key's algorithm is pinned)"),
                    ));
                }
                (Some(a), true) => {
                    let hmac = a.starts_with("HS");
                    let is_hmac_source = matches!(source, JwtKeySource::HmacSecretEnv(_));
                    if hmac != is_hmac_source {
                        return Err(ctx.error(&at.key("algorithm"), format!("algorithm {a:?} does not fit {name}")));
                    }
                }
                (Some(_), false) => {
                    return Err(ctx.error(
                        &at.key("algorithm"),
                        format!("a JWKS pins the algorithm per key; remove `algorithm` with {name}"),
                    ));
                }
                (None, false) => {}
            }
            Some(source.clone())
        }
        [_, (second, _), ..] => {
            return Err(ctx.error(
                &at.key(second),
                "more than one key source: use exactly one of hmac_secret_env, pem_file, jwks_file, jwks_url",
            ));
        }
    };
    // A leeway is a clock skew allowance: beyond a day it is a mistake, and
    // beyond the time since 1970 it wraps jsonwebtoken's `now - leeway`.
    if j.leeway > MAX_LEEWAY {
        return Err(ctx.error(
            &at.key("leeway"),
            format!(
                "leeway {:?} is above the {} s allowed (it allows for clock skew, not for expired tokens)",
                j.leeway,
                MAX_LEEWAY.as_secs()
            ),
        ));
    }
    // Numbers from tokens are read only with their caps: both or neither,
    // and a rate or burst claim named without them is a mistake.
    match (j.max_rate, j.max_burst) {
        (Some(_), None) => {
            return Err(ctx.error(
                &at.key("max_rate"),
                "max_rate needs max_burst: together they cap the numbers a token may carry".to_owned(),
            ))
        }
        (None, Some(_)) => {
            return Err(ctx.error(
                &at.key("max_burst"),
                "max_burst needs max_rate: together they cap the numbers a token may carry".to_owned(),
            ))
        }
        _ => {}
    }
    if j.max_rate.is_none() {
        for (name, given) in [("rate_claim", &j.rate_claim), ("burst_claim", &j.burst_claim)] {
            if given.is_some() {
                return Err(ctx.error(
                    &at.key(name),
                    format!(
                        "{name}: reading numbers from tokens needs max_rate and max_burst (the most a token may \
                         ask for); without them only the tier claim is read"
                    ),
                ));
            }
        }
    }
    Ok(JwtLimits {
        tier_claim: j.tier_claim,
        rate_claim: j.rate_claim.unwrap_or_else(|| JwtLimits::DEFAULT_RATE_CLAIM.to_owned()),
        burst_claim: j
            .burst_claim
            .unwrap_or_else(|| JwtLimits::DEFAULT_BURST_CLAIM.to_owned()),
        max_rate: j.max_rate,
        max_burst: j.max_burst,
        verification: keys.map(|keys| JwtVerification {
            keys,
            algorithm: j.algorithm,
            issuer: j.issuer,
            audience: j.audience,
            leeway: j.leeway,
            jwks_refresh: j.jwks_refresh,
            jwks_cooldown: j.jwks_cooldown,
            max_failed_per_ip: j.max_failed_per_ip,
            max_failed_per_network: j.max_failed_per_network,
            max_failed_per_second: j.max_failed_per_second,
            failed_window: j.failed_window,
            max_failed_tracked: j.max_failed_tracked,
        }),
    })
}
