//! `[profiles]`, `default_profile` and `[routes]`.

use std::collections::BTreeMap;

use super::super::schema::{RawProfile, RawRoute};
use super::super::spans::field;
use super::Ctx;
use crate::runtime::config::{ConfigError, Profile, RouteConfig};

/// The names of the profiles, for messages: `a, b`.
pub(super) fn profile_names(profiles: &BTreeMap<String, Profile>) -> String {
    profiles.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// The longest bucket capacity a profile may have: 2^62 ns, about 146
/// years, so `now + capacity` stays far below the end of u64 nanoseconds.
const MAX_CAPACITY_NS: u128 = 1 << 62;
const NS_PER_YEAR: u128 = 365 * 86_400 * 1_000_000_000;

/// Every profile, with its burst applied.
pub(super) fn profiles(
    raw: BTreeMap<String, RawProfile>,
    ctx: &Ctx<'_>,
) -> Result<BTreeMap<String, Profile>, ConfigError> {
    if raw.is_empty() {
        return Err(ctx.missing(
            "profiles",
            "no profiles: define at least one, e.g. [profiles.standard] rate = \"600/min\"",
        ));
    }
    raw.into_iter()
        .map(|(name, p)| {
            let quota = match p.burst {
                Some(b) => p.rate.with_burst(b),
                None => p.rate,
            };
            // The engine keeps a bucket's capacity (burst × emission
            // interval) in u64 nanoseconds above the clock: one that does
            // not fit would refuse even a fresh client's first request.
            let capacity = quota.interval_ns() as u128 * u128::from(quota.burst());
            if capacity > MAX_CAPACITY_NS {
                return Err(ctx.error(
                    &field("profiles").key(&name).key("burst"),
                    format!(
                        "burst {} at this rate takes {} years to refill; at most {} years are supported: \
                         lower the burst or raise the rate",
                        quota.burst(),
                        capacity / NS_PER_YEAR,
                        MAX_CAPACITY_NS / NS_PER_YEAR
                    ),
                ));
            }
            let profile = Profile {
                name: crate::runtime::limits::intern(&name),
                quota,
                concurrency: p.concurrency,
            };
            Ok((name, profile))
        })
        .collect()
}

/// The profile used when nothing else applies: the one named, or the only one.
pub(super) fn default_profile(
    raw: Option<String>,
    profiles: &BTreeMap<String, Profile>,
    ctx: &Ctx<'_>,
) -> Result<String, ConfigError> {
    match raw {
        Some(name) if profiles.contains_key(&name) => Ok(name),
        Some(name) => Err(ctx.error(
            &field("default_profile"),
            format!(
                "unknown profile {name:?}; defined profiles: {}",
                profile_names(profiles)
            ),
        )),
        None if profiles.len() == 1 => Ok(profiles.keys().next().cloned().unwrap_or_default()),
        None => Err(ctx.missing(
            "default_profile",
            format!(
                "missing: name the profile used when nothing else applies; defined profiles: {}",
                profile_names(profiles)
            ),
        )),
    }
}

/// Per-route overrides: a known profile, and a cost its burst admits.
pub(super) fn routes(
    raw: BTreeMap<String, RawRoute>,
    profiles: &BTreeMap<String, Profile>,
    default_profile: &str,
    ctx: &Ctx<'_>,
) -> Result<BTreeMap<String, RouteConfig>, ConfigError> {
    let mut routes = BTreeMap::new();
    for (name, r) in raw {
        let at = field("routes").key(&name);
        if let Some(p) = &r.profile {
            if !profiles.contains_key(p) {
                return Err(ctx.error(
                    &at.key("profile"),
                    format!("unknown profile {p:?}; defined profiles: {}", profile_names(profiles)),
                ));
            }
        }
        let profile = r.profile.as_deref().unwrap_or(default_profile);
        let cost = r.cost.unwrap_or(1);
        if let Some(p) = profiles.get(profile) {
            if cost > p.quota.burst() {
                return Err(ctx.error(
                    &at.key("cost"),
                    format!(
                        "cost {cost} is above the burst {} of profile {profile:?}: every request would be refused",
                        p.quota.burst()
                    ),
                ));
            }
        }
        routes.insert(
            name,
            RouteConfig {
                profile: r.profile,
                shadow: r.shadow,
                cost: r.cost,
            },
        );
    }
    Ok(routes)
}
