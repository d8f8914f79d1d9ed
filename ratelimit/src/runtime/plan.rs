//! The configuration compiled for the request path: every route's limit
//! settled as far as the configuration alone settles it, once per
//! configuration generation, so that a request reads its route's plan by
//! index and looks nothing up by name.
//!
//! A route's plan is its cost, metering and shadow with `[routes."name"]`
//! applied, and its resolve chain cut to what a request can reach: the
//! `jwt` and `service` steps written before the first step that always
//! answers, then that step's profile, resolved. A `profile("name")` step
//! always answers when the configuration has the profile, so nothing after
//! it is reached; `default` is the route's `[routes]` profile, else the
//! default profile. Only a token's tier and a limit service's answer are
//! read per request (they come with the request).
//!
//! The plan lives in the [`Config`](crate::config::Config) it was compiled
//! from: a reload builds a new configuration and so a new plan, swapped in
//! whole with it, and a request that read one generation finishes on it.
//! `explain` compiles the same plans, so what it prints is what requests get.

use std::sync::OnceLock;

use crate::runtime::limits::{LimitParts, RouteConfig};
use crate::runtime::resolve::{Resolved, Step};

/// A step the plan asks of the request itself (its token, the limit
/// service's answer for its client); each may pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// The verified token's tier or numbers (`jwt`).
    Jwt,
    /// The limit service's cached answer for the client (`service`).
    Service,
}

/// A route as it is written, attribute or `[[rules]]` entry: what its
/// plan is compiled from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RouteSource<'a> {
    /// The stable route name (`[routes."name"]` applies to it).
    pub(crate) name: &'static str,
    /// Its cell namespace.
    pub(crate) id: u32,
    pub(crate) cost: u32,
    pub(crate) bytes_per_unit: Option<u32>,
    pub(crate) shadow: bool,
    /// Its resolve chain, in order.
    pub(crate) steps: &'a [Step],
}

/// One route's limit, compiled: what every request of the route gets but
/// the key, the token's and the limit service's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RoutePlan {
    /// The stable route name.
    pub(crate) name: &'static str,
    /// Its cell namespace.
    pub(crate) id: u32,
    /// Units per request (`[routes]` cost, else the route's own).
    pub(crate) cost: u32,
    /// Charged by the response's size (a `[routes]` cost turns it off).
    pub(crate) bytes_per_unit: Option<u32>,
    /// Never refuses.
    pub(crate) shadow: bool,
    /// The reachable steps that ask the request, in order.
    asks: [Option<Ask>; 2],
    /// What every request gets when no ask answers.
    pub(crate) settled: Resolved,
    /// A `profile("name")` step the configuration lacks was passed over.
    pub(crate) skipped_profile: bool,
    /// The chain reaches `default`, the step a `[routes]` profile answers
    /// (no `profile(..)` step before it answers first).
    pub(crate) reaches_default: bool,
}

impl RoutePlan {
    /// `route` compiled against `limits`.
    pub(crate) fn compile(limits: LimitParts<'_>, route: &RouteSource<'_>) -> RoutePlan {
        let overrides = limits.routes.get(route.name);
        let cost = overrides.and_then(|r| r.cost);
        let mut asks = [None; 2];
        let mut settled = None;
        let mut skipped_profile = false;
        // Until a `profile(..)` step answers first.
        let mut reaches_default = true;
        for step in route.steps {
            let ask = match step {
                Step::Jwt => Ask::Jwt,
                Step::Service => Ask::Service,
                Step::Profile(_) | Step::Default => match settled_by(limits, route.name, step) {
                    Some(answer) => {
                        settled = Some(answer);
                        reaches_default = *step == Step::Default;
                        break;
                    }
                    // Passed over, as a profile a reload removed.
                    None => {
                        skipped_profile = true;
                        continue;
                    }
                },
            };
            // The rule language refuses a step twice: two at most.
            if let Some(free) = asks.iter_mut().find(|a| a.is_none_or(|a| a == ask)) {
                *free = Some(ask);
            }
        }
        RoutePlan {
            name: route.name,
            id: route.id,
            cost: cost.unwrap_or(route.cost),
            // A `[routes]` cost is a number of units: it replaces the metering.
            bytes_per_unit: if cost.is_some() { None } else { route.bytes_per_unit },
            shadow: overrides.and_then(|r| r.shadow).unwrap_or(route.shadow),
            asks,
            reaches_default,
            // (A chain without `default`: the rule language refuses one.)
            settled: settled.unwrap_or_else(|| default_of(limits, overrides)),
            skipped_profile,
        }
    }

    /// The request's limit: the first ask that answers, else the settled
    /// profile. `ask` is called only for the steps reached.
    #[inline]
    pub(crate) fn resolve(&self, mut ask: impl FnMut(Ask) -> Option<Resolved>) -> Resolved {
        for a in self.asks.iter().flatten() {
            if let Some(answer) = ask(*a) {
                return answer;
            }
        }
        self.settled
    }

    /// What is wrong with a `[routes."name"]` profile of this route under
    /// `limits` that no request reaches: a `profile(..)` step answers
    /// before `default`, the only step such a profile answers, so the
    /// override (another profile than that step's) would silently change
    /// nothing.
    pub(crate) fn unreached_override(&self, limits: LimitParts<'_>) -> Option<String> {
        let profile = limits.routes.get(self.name)?.profile.as_deref()?;
        // (The profile the chain answers with anyway: redundant, not wrong.)
        if self.reaches_default || self.settled.profile == Some(profile) {
            return None;
        }
        Some(format!(
            "[routes.{:?}] profile = {profile:?} is never used: the chain answers at profile({:?}) before \
             `default`, the only step a [routes] profile answers (remove the line, or name the profile in the \
             chain)",
            self.name,
            self.settled.profile.unwrap_or_default()
        ))
    }

    /// [`unreached_override`](Self::unreached_override) of a `[routes]`
    /// section shared by `plans` (every route of its name): the first's
    /// message when none of them reaches the section's profile.
    pub(crate) fn unreached_by_all(
        mut plans: impl Iterator<Item = RoutePlan>,
        limits: LimitParts<'_>,
    ) -> Option<String> {
        let unused = plans.next()?.unreached_override(limits)?;
        plans.all(|p| p.unreached_override(limits).is_some()).then_some(unused)
    }

    /// Whether a request can reach `ask`.
    #[inline]
    #[cfg_attr(not(feature = "axum"), allow(dead_code))] // the runtime's
    pub(crate) fn asks(&self, ask: Ask) -> bool {
        self.asks.contains(&Some(ask))
    }
}

/// What a `profile(..)` or `default` step of route `route` answers under
/// `limits` (`None`: a profile it lacks, passed over); the steps that ask
/// the request are not settled here (`None`).
pub(crate) fn settled_by(limits: LimitParts<'_>, route: &str, step: &Step) -> Option<Resolved> {
    match step {
        Step::Profile(name) => limits.profiles.get(name).map(Resolved::of),
        Step::Default => Some(default_of(limits, limits.routes.get(route))),
        Step::Jwt | Step::Service => None,
    }
}

/// `default`: the route's `[routes]` profile, else the default profile.
fn default_of(limits: LimitParts<'_>, overrides: Option<&RouteConfig>) -> Resolved {
    overrides
        .and_then(|r| r.profile.as_deref())
        .and_then(|name| limits.profiles.get(name))
        .map_or_else(|| Resolved::of(limits.default), Resolved::of)
}

/// Every route's plan under one configuration: attribute routes by the
/// index the registry gave them, `[[rules]]` entries by position.
#[cfg_attr(not(feature = "axum"), allow(dead_code))] // the runtime's
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The attribute routes, by registry index.
    pub(crate) attribute: Box<[RoutePlan]>,
    /// The `[[rules]]` entries, in order.
    pub(crate) rules: Box<[RoutePlan]>,
}

/// A configuration's plan, compiled on first use (the runtime uses it at
/// startup and at each reload, before any request sees the
/// configuration). A copy of the configuration starts without one: its
/// rules may be changed before it is used.
#[derive(Default)]
pub(crate) struct PlanCell(pub(crate) OnceLock<Plan>);

impl Clone for PlanCell {
    fn clone(&self) -> Self {
        PlanCell::default()
    }
}

impl PartialEq for PlanCell {
    /// Derived from the configuration, so never a difference of its own.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PlanCell {}

impl std::fmt::Debug for PlanCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "compiled"
        } else {
            "not compiled"
        })
    }
}

/// The cell namespace of a route name (FNV-1a, 32-bit; never 0, which is
/// [`DEFAULT_ROUTE`](crate::DEFAULT_ROUTE)).
pub(crate) const fn route_id(name: &str) -> u32 {
    let bytes = name.as_bytes();
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u32).wrapping_mul(0x0100_0193);
        i += 1;
    }
    if h == 0 {
        1
    } else {
        h
    }
}

/// The cell namespace of a `[[rules]]` entry: distinct from an attribute
/// route of the same name, so a request limited by both is charged once in
/// each.
pub(crate) fn rule_route_id(name: &str) -> u32 {
    route_id(name).rotate_left(16) ^ 0x5bd1_e995
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::config::Config;

    fn plan(config: &Config, steps: &[Step], cost: u32) -> RoutePlan {
        let source = RouteSource {
            name: "r",
            id: route_id("r"),
            cost,
            bytes_per_unit: Some(100),
            shadow: false,
            steps,
        };
        RoutePlan::compile(crate::runtime::limits::LimitTable::limits(config), &source)
    }

    const CONFIG: &str = r#"
        default_profile = "a"
        [profiles.a]
        rate = "3/s"
        [profiles.c]
        rate = "10/s"
    "#;

    #[test]
    fn a_profile_step_settles_the_chain_and_default_is_never_reached() {
        let config = Config::from_toml_str(CONFIG).unwrap();
        let p = plan(&config, &[Step::Profile("c".into()), Step::Default], 5);
        assert_eq!(p.settled.profile, Some("c"));
        assert!(!p.reaches_default);
        assert_eq!(p.resolve(|_| panic!("nothing to ask")).quota.burst(), 10);
        // A profile the configuration lacks is passed over.
        let p = plan(&config, &[Step::Jwt, Step::Profile("gone".into()), Step::Default], 1);
        assert!(p.skipped_profile && p.asks(Ask::Jwt) && !p.asks(Ask::Service));
        assert_eq!(p.settled.profile, Some("a"));
        assert!(p.reaches_default);
        // Steps after the settling one are not asked.
        let p = plan(&config, &[Step::Default, Step::Jwt], 1);
        assert!(!p.asks(Ask::Jwt));
    }

    #[test]
    fn asks_run_in_order_until_one_answers() {
        let config = Config::from_toml_str(CONFIG).unwrap();
        let p = plan(&config, &[Step::Service, Step::Jwt, Step::Default], 1);
        let mut asked = Vec::new();
        let r = p.resolve(|a| {
            asked.push(a);
            (a == Ask::Jwt).then(|| Resolved::numbers(crate::Quota::per_second(7)))
        });
        assert_eq!(asked, [Ask::Service, Ask::Jwt]);
        assert_eq!(r.quota.count(), 7);
    }

    #[test]
    fn routes_overrides_are_applied_once() {
        let config = Config::from_toml_str(&format!(
            "{CONFIG}\n[routes.r]\ncost = 2\nshadow = true\nprofile = \"c\"\n"
        ))
        .unwrap();
        let p = plan(&config, &[Step::Default], 5);
        assert_eq!((p.cost, p.bytes_per_unit, p.shadow), (2, None, true));
        assert_eq!(p.settled.profile, Some("c"));
    }
}
