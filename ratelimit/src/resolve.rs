//! How much: choosing a request's quota with a chain of resolvers.
//!
//! A route's chain is tried in order and the first answer wins; the chain
//! ends with a resolver that always answers ([`DefaultProfile`]), which the types
//! enforce: [`Chain`] is only [`FinalResolver`] when its tail is. Each
//! resolver is a concrete type, so a chain like `jwt, profile("standard"),
//! default` is one monomorphized value with no dynamic dispatch:
//!
//! ```
//! use ratelimit::config::Config;
//! use ratelimit::resolve::{Chain, DefaultProfile, FinalResolver, JwtTier, NamedProfile, ResolveContext};
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
//! let chain = Chain(JwtTier, Chain(NamedProfile::new("standard"), DefaultProfile));
//!
//! let anonymous = ResolveContext::new(&config, "users.get", None);
//! assert_eq!(chain.resolve_final(&anonymous).profile, Some("standard"));
//!
//! let claims = VerifiedClaims::from_json(r#"{"sub": "u1", "ratelimit_tier": "premium"}"#).unwrap();
//! let premium = ResolveContext::new(&config, "users.get", Some(&claims));
//! assert_eq!(chain.resolve_final(&premium).quota.count(), 600);
//! ```

use serde_json::Value;

use crate::claims::VerifiedClaims;
pub use crate::limits::{LimitParts, LimitTable};
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

    pub(crate) fn of(p: &crate::limits::Profile) -> Self {
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
    service: Option<&'a crate::service::ServiceCache<crate::service::BoxLimitService>>,
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
        service: Option<&'a crate::service::ServiceCache<crate::service::BoxLimitService>>,
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

    /// The route's settings under `[routes."name"]`, if it has any.
    ///
    /// ```
    /// use ratelimit::config::Config;
    /// use ratelimit::resolve::ResolveContext;
    ///
    /// let config = Config::from_toml_str(r#"
    ///     [profiles.standard]
    ///     rate = "60/min"
    ///     [routes."users.export"]
    ///     cost = 5
    /// "#).unwrap();
    /// let export = ResolveContext::new(&config, "users.export", None);
    /// assert_eq!(export.overrides().and_then(|r| r.cost), Some(5));
    /// assert!(ResolveContext::new(&config, "users.get", None).overrides().is_none());
    /// ```
    pub fn overrides(&self) -> Option<&'a crate::limits::RouteConfig> {
        self.limits.routes.get(self.route)
    }

    /// The verified claims, if any.
    pub(crate) fn claims(&self) -> Option<&'a VerifiedClaims> {
        self.claims
    }

    pub(crate) fn profile(&self, name: &str) -> Option<Resolved> {
        self.limits.profiles.get(name).map(Resolved::of)
    }
}

/// A step of a chain: answers, or passes to the next step.
pub trait Resolver: Send + Sync {
    /// The quota for this request, or `None` to let the next resolver decide.
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved>;
}

/// A resolver that always answers: the end of every chain.
#[diagnostic::on_unimplemented(
    message = "`{Self}` can end a resolver chain only if it always answers",
    note = "end the chain with `default`, e.g. `resolve = [jwt, profile(\"standard\"), default]`"
)]
pub trait FinalResolver: Send + Sync {
    /// The quota for this request.
    fn resolve_final(&self, ctx: &ResolveContext<'_>) -> Resolved;
}

/// `A`, and if it has no answer, `B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain<A, B>(pub A, pub B);

impl<A: Resolver, B: Resolver> Resolver for Chain<A, B> {
    #[inline]
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved> {
        self.0.resolve(ctx).or_else(|| self.1.resolve(ctx))
    }
}

impl<A: Resolver, B: FinalResolver> FinalResolver for Chain<A, B> {
    #[inline]
    fn resolve_final(&self, ctx: &ResolveContext<'_>) -> Resolved {
        self.0.resolve(ctx).unwrap_or_else(|| self.1.resolve_final(ctx))
    }
}

/// The route's profile from `[routes."name"] profile = ...` if set, else the
/// configuration's `default_profile`. Always answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DefaultProfile;

impl FinalResolver for DefaultProfile {
    fn resolve_final(&self, ctx: &ResolveContext<'_>) -> Resolved {
        let route_profile = ctx.overrides().and_then(|r| r.profile.as_deref());
        route_profile
            .and_then(|name| ctx.profile(name))
            .unwrap_or_else(|| Resolved::of(ctx.limits.default))
    }
}

impl Resolver for DefaultProfile {
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved> {
        Some(self.resolve_final(ctx))
    }
}

/// A named profile from the configuration. Falls through when the running
/// configuration has no such profile (after a reload removed it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedProfile {
    name: std::borrow::Cow<'static, str>,
}

impl NamedProfile {
    /// The profile called `name`.
    pub fn new(name: &str) -> Self {
        NamedProfile {
            name: std::borrow::Cow::Owned(name.to_owned()),
        }
    }

    /// The profile called `name`, in a `const` (what `#[rate_limit]`
    /// generates for `profile("name")`).
    pub const fn from_static(name: &'static str) -> Self {
        NamedProfile {
            name: std::borrow::Cow::Borrowed(name),
        }
    }

    /// The profile's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Resolver for NamedProfile {
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved> {
        ctx.profile(&self.name)
    }
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
pub struct Service<S>(pub std::sync::Arc<crate::service::ServiceCache<S>>);

#[cfg(feature = "service")]
impl<S: crate::service::LimitService> Resolver for Service<S> {
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
fn service_answer(ctx: &ResolveContext<'_>, answer: crate::service::ServiceAnswer) -> Option<Resolved> {
    use crate::service::ServiceAnswer;
    match answer {
        ServiceAnswer::Tier { tier } => ctx.profile(&tier),
        ServiceAnswer::Limits { rpm, burst } => {
            let quota = Quota::per_minute(rpm.max(1));
            let burst = burst.unwrap_or(quota.burst()).max(1);
            Some(Resolved::numbers(quota.with_burst(burst)))
        }
    }
}

/// A step of a `[[rules]]` chain: one of the built-in resolvers, chosen by
/// the configuration, dispatched with a `match` (no trait object).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnyStep {
    /// `"jwt"`.
    Jwt(JwtTier),
    /// `"service"` (answers only with the `service` feature).
    Service,
    /// `"profile:<name>"`.
    Profile(NamedProfile),
    /// `"default"`.
    Default(DefaultProfile),
}

impl AnyStep {
    /// The resolver a spec step names.
    pub(crate) fn from_spec(step: &ratelimit_spec::Step) -> AnyStep {
        use ratelimit_spec::Step;
        match step {
            Step::Jwt => AnyStep::Jwt(JwtTier),
            Step::Service => AnyStep::Service,
            Step::Profile(name) => AnyStep::Profile(NamedProfile::new(name)),
            Step::Default => AnyStep::Default(DefaultProfile),
        }
    }
}

impl Resolver for AnyStep {
    #[inline]
    fn resolve(&self, ctx: &ResolveContext<'_>) -> Option<Resolved> {
        match self {
            AnyStep::Jwt(r) => r.resolve(ctx),
            #[cfg(feature = "service")]
            AnyStep::Service => ConfiguredService.resolve(ctx),
            #[cfg(not(feature = "service"))]
            AnyStep::Service => None,
            AnyStep::Profile(r) => r.resolve(ctx),
            AnyStep::Default(r) => r.resolve(ctx),
        }
    }
}

/// The chain of a `[[rules]]` entry: its steps in order. It ends with
/// `default` (the spec checks it when the configuration is loaded), and
/// answers with the default profile anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnyChain {
    steps: Vec<AnyStep>,
}

impl AnyChain {
    /// The chain of validated spec steps.
    pub(crate) fn from_spec(steps: &[ratelimit_spec::Step]) -> AnyChain {
        AnyChain {
            steps: steps.iter().map(AnyStep::from_spec).collect(),
        }
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[AnyStep] {
        &self.steps
    }

    /// The chain has a `jwt` step.
    pub fn wants_claims(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, AnyStep::Jwt(_)))
    }

    /// The chain has a `service` step.
    pub fn wants_service(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, AnyStep::Service))
    }
}

impl FinalResolver for AnyChain {
    fn resolve_final(&self, ctx: &ResolveContext<'_>) -> Resolved {
        self.steps
            .iter()
            .find_map(|s| s.resolve(ctx))
            .unwrap_or_else(|| DefaultProfile.resolve_final(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

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

    fn jwt_then_default(config: &Config, route: &str, c: Option<&VerifiedClaims>) -> Resolved {
        Chain(JwtTier, DefaultProfile).resolve_final(&ResolveContext::new(config, route, c))
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

    #[test]
    fn a_missing_profile_falls_through() {
        let config = Config::from_toml_str(CONFIG).unwrap();
        let ctx = ResolveContext::new(&config, "get", None);
        assert_eq!(NamedProfile::new("gone").resolve(&ctx), None);
        let r = Chain(NamedProfile::new("gone"), DefaultProfile).resolve_final(&ctx);
        assert_eq!(r.profile, Some("standard"));
    }
}
