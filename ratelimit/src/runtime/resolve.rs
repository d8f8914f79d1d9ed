//! How much: the parts of a request's quota that come with the request.
//!
//! A route's chain (`resolve = [jwt, profile("standard"), default]`) is
//! compiled once per configuration into the route's plan: its
//! `profile(..)` and `default` steps are settled there, by the
//! configuration alone. What is resolved per request is what the request
//! brings: a verified token's limit ([`JwtTier`]) and a limit service's
//! answer ([`Service`], feature `service`), each a [`Resolver`] that answers
//! or passes to the next step.
//!
//! ```
//! use ratelimit::config::Config;
//! use ratelimit::resolve::{JwtTier, ResolveContext, Resolver};
//! use ratelimit::claims::VerifiedClaims;
//!
//! let config = Config::from_toml_str(r#"
//!     default_profile = "standard"
//!     [profiles.standard]
//!     rate = "60/min"
//!     [profiles.premium]
//!     rate = "600/min"
//!     [jwt]
//!     max_rate = "6000/min"
//!     max_burst = 100
//! "#).unwrap();
//!
//! let anonymous = ResolveContext::new(&config, "users.get", None);
//! assert_eq!(JwtTier.resolve(&anonymous), None, "no token: the next step answers");
//!
//! let claims = VerifiedClaims::from_json(r#"{"sub": "u1", "ratelimit_tier": "premium"}"#).unwrap();
//! let premium = ResolveContext::new(&config, "users.get", Some(&claims));
//! assert_eq!(JwtTier.resolve(&premium).map(|r| r.quota.count()), Some(600));
//! ```

pub use ratelimit_spec::Step;
use serde_json::Value;

use crate::runtime::claims::VerifiedClaims;
pub use crate::runtime::limits::{LimitParts, LimitTable};
use crate::Quota;

/// What a resolver answers: the quota, the profile it came from (for
/// metrics and the `RateLimit-Policy` name), if any, and the profile's
/// limit on requests in flight, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// The quota to check against.
    pub quota: Quota,
    /// The profile's name, or `None` for numbers carried by a token.
    pub profile: Option<&'static str>,
    /// Requests of one client that may be in flight at once
    /// (`[profiles.NAME] concurrency`); `None`: not limited.
    pub concurrency: Option<u32>,
}

impl Resolved {
    /// Numbers that come from no profile (a token's, a limit service's):
    /// a quota, and no limit on requests in flight.
    pub fn numbers(quota: Quota) -> Self {
        Resolved {
            quota,
            profile: None,
            concurrency: None,
        }
    }

    pub(crate) fn of(p: &crate::runtime::limits::Profile) -> Self {
        Resolved {
            quota: p.quota,
            profile: Some(p.name),
            concurrency: p.concurrency,
        }
    }
}

/// What a resolver sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct ResolveContext<'a> {
    limits: LimitParts<'a>,
    route: &'a str,
    claims: Option<&'a VerifiedClaims>,
    client: Option<u64>,
    #[cfg(feature = "service")]
    service: Option<&'a crate::runtime::service::ServiceCache<crate::runtime::service::BoxLimitService>>,
}

impl<'a> ResolveContext<'a> {
    /// The context of one request on `route`, with its verified claims,
    /// resolved against `limits` (the running [`Config`](crate::config::Config)).
    pub fn new(limits: &'a impl LimitTable, route: &'a str, claims: Option<&'a VerifiedClaims>) -> Self {
        let limits = limits.limits();
        ResolveContext {
            limits,
            route,
            claims,
            client: None,
            #[cfg(feature = "service")]
            service: None,
        }
    }

    /// The limit service the `service` step of a `#[rate_limit]` chain asks
    /// (the HTTP runtime passes the one built from `[service]`).
    #[cfg(feature = "service")]
    #[must_use]
    pub fn with_service(
        mut self,
        service: Option<&'a crate::runtime::service::ServiceCache<crate::runtime::service::BoxLimitService>>,
    ) -> Self {
        self.service = service;
        self
    }

    /// The route name this request is resolved for.
    pub fn route(&self) -> &'a str {
        self.route
    }

    /// The client's identifier for the limit service (see
    /// `ratelimit::service`): a stable hash of the client key agreed with
    /// the service, never the raw value.
    #[must_use]
    pub fn with_client(mut self, id: u64) -> Self {
        self.client = Some(id);
        self
    }

    /// The verified claims, if any.
    pub(crate) fn claims(&self) -> Option<&'a VerifiedClaims> {
        self.claims
    }

    pub(crate) fn profile(&self, name: &str) -> Option<Resolved> {
        self.limits.profiles.get(name).map(Resolved::of)
    }
}

/// A step of a chain that asks the request: answers, or passes to the next
/// step.
pub trait Resolver: Send + Sync {
    /// The quota for this request, or `None` to let the next resolver decide.
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved>;
}

/// Limits carried by verified claims (`[jwt]` in the configuration): a tier
/// claim naming a profile, or a rate claim (requests per minute) with an
/// optional burst claim, capped by `max_rate` and `max_burst`. Falls through
/// without claims, without a `[jwt]` section, or when the tier names no
/// profile and there are no usable numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JwtTier;

impl Resolver for JwtTier {
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved> {
        let claims = ctx.claims?;
        let jwt = ctx.limits.jwt?;
        if let Some(tier) = claims.get(&jwt.tier_claim).and_then(Value::as_str) {
            if let Some(found) = ctx.profile(tier) {
                return Some(found);
            }
        }
        // Numbers are read only under caps.
        let (Some(max_rate), Some(max_burst)) = (jwt.max_rate, jwt.max_burst) else {
            return None;
        };
        let rpm = claims.get(&jwt.rate_claim)?.as_u64().filter(|&n| n >= 1)?;
        let rpm = u32::try_from(rpm).unwrap_or(u32::MAX);
        let mut quota = Quota::per_minute(rpm);
        // Faster than the cap (shorter emission interval): use the cap.
        if quota.emission_interval() < max_rate.emission_interval() {
            quota = max_rate;
        }
        let burst = claims
            .get(&jwt.burst_claim)
            .and_then(Value::as_u64)
            .filter(|&b| b >= 1)
            .map_or(quota.burst(), |b| u32::try_from(b).unwrap_or(u32::MAX));
        Some(Resolved::numbers(quota.with_burst(burst.clamp(1, max_burst))))
    }
}

/// Limits from an external service (feature `service`): the cached answer
/// for the request's client (see [`ResolveContext::with_client`]), or no
/// answer on a miss while the fetch runs in the background. A tier names a
/// profile (an unknown one falls through); numbers are used as given.
#[cfg(feature = "service")]
#[cfg_attr(docsrs, doc(cfg(feature = "service")))]
#[derive(Debug)]
pub struct Service<S>(pub std::sync::Arc<crate::runtime::service::ServiceCache<S>>);

#[cfg(feature = "service")]
impl<S: crate::runtime::service::LimitService> Resolver for Service<S> {
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved> {
        service_answer(ctx, self.0.get(ctx.client?)?)
    }
}

/// The `service` step of `#[rate_limit]` and config rules: the cached answer
/// of the limit service configured in `[service]` (see
/// [`ResolveContext::with_service`]); falls through when none is configured,
/// on a miss, or when the request has no client id.
#[cfg(feature = "service")]
#[cfg_attr(docsrs, doc(cfg(feature = "service")))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConfiguredService;

#[cfg(feature = "service")]
impl Resolver for ConfiguredService {
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved> {
        service_answer(ctx, ctx.service?.get(ctx.client?)?)
    }
}

#[cfg(feature = "service")]
fn service_answer(ctx: &ResolveContext<'_>, answer: crate::runtime::service::ServiceAnswer) -> Option<Resolved> {
    use crate::runtime::service::ServiceAnswer;
    match answer {
        ServiceAnswer::Tier { tier } => ctx.profile(&tier),
        ServiceAnswer::Limits { rpm, burst } => {
            let quota = Quota::per_minute(rpm.max(1));
            let burst = burst.unwrap_or(quota.burst()).max(1);
            Some(Resolved::numbers(quota.with_burst(burst)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::config::Config;

    const CONFIG: &str = r#"
        default_profile = "standard"
        [profiles.standard]
        rate = "60/min"
        [profiles.premium]
        rate = "600/min"
        [profiles.internal]
        rate = "6000/min"
        [routes.export]
        profile = "internal"
        [jwt]
        tier_claim = "plan.tier"
        max_rate = "1200/min"
        max_burst = 50
    "#;

    fn claims(json: &str) -> VerifiedClaims {
        VerifiedClaims::from_json(json).unwrap()
    }

    /// `resolve = [jwt, default]` on `route`, as its plan decides it.
    fn jwt_then_default(config: &Config, route: &'static str, c: Option<&VerifiedClaims>) -> Resolved {
        use crate::runtime::plan::{RoutePlan, RouteSource};
        let source = RouteSource {
            name: route,
            id: 1,
            cost: 1,
            bytes_per_unit: None,
            shadow: false,
            steps: &[Step::Jwt, Step::Default],
        };
        let plan = RoutePlan::compile(crate::runtime::limits::LimitTable::limits(config), &source);
        plan.resolve(|_| JwtTier.resolve(&ResolveContext::new(config, route, c)))
    }

    #[test]
    fn tiers_numbers_caps_and_fallthrough() {
        let config = Config::from_toml_str(CONFIG).unwrap();
        let r = jwt_then_default(&config, "get", Some(&claims(r#"{"plan": {"tier": "premium"}}"#)));
        assert_eq!((r.quota.count(), r.profile), (600, Some("premium")));
        // Unknown tier, no numbers: falls through to the default.
        let r = jwt_then_default(&config, "get", Some(&claims(r#"{"plan": {"tier": "platinum"}}"#)));
        assert_eq!(r.profile, Some("standard"));
        // Direct numbers, within the cap.
        let r = jwt_then_default(
            &config,
            "get",
            Some(&claims(r#"{"ratelimit_rpm": 300, "ratelimit_burst": 10}"#)),
        );
        assert_eq!((r.quota, r.profile), (Quota::per_minute(300).with_burst(10), None));
        // Numbers above the cap are capped, rate and burst.
        let r = jwt_then_default(
            &config,
            "get",
            Some(&claims(r#"{"ratelimit_rpm": 1000000, "ratelimit_burst": 9999}"#)),
        );
        assert_eq!(r.quota, "1200/min".parse::<Quota>().unwrap().with_burst(50));
        // Without caps in [jwt], numbers in tokens are not read.
        let tiers_only = Config::from_toml_str(
            &CONFIG
                .replace("max_rate = \"1200/min\"", "")
                .replace("max_burst = 50", ""),
        )
        .unwrap();
        let r = jwt_then_default(&tiers_only, "get", Some(&claims(r#"{"ratelimit_rpm": 300}"#)));
        assert_eq!(r.profile, Some("standard"));
        // Garbage numbers are ignored.
        for bad in [
            r#"{"ratelimit_rpm": 0}"#,
            r#"{"ratelimit_rpm": -5}"#,
            r#"{"ratelimit_rpm": "lots"}"#,
            r#"{"ratelimit_rpm": 1.5}"#,
        ] {
            let r = jwt_then_default(&config, "get", Some(&claims(bad)));
            assert_eq!(r.profile, Some("standard"), "{bad}");
        }
        // No claims (anonymous): the default; the route override applies.
        assert_eq!(jwt_then_default(&config, "get", None).profile, Some("standard"));
        assert_eq!(jwt_then_default(&config, "export", None).profile, Some("internal"));
    }

    #[test]
    fn claims_by_dotted_path() {
        let c = claims(r#"{"sub": "u1", "org": {"id": 42, "name": ""}, "n": 1.5, "list": [1]}"#);
        assert_eq!(c.get_text("sub").as_deref(), Some("u1"));
        assert_eq!(c.get_text("org.id").as_deref(), Some("42"));
        assert_eq!(c.get_text("org.name"), None);
        assert_eq!(c.get_text("n"), None);
        assert_eq!(c.get_text("list"), None);
        assert_eq!(c.get_text("org..id"), None);
        assert_eq!(c.get_text(""), None);
        assert_eq!(c.get_text("sub.x"), None);
    }
}
