//! `[[rules]]` for the config-driven layer: a unique name, a path pattern,
//! methods, a key, a resolver chain that names only what is configured, and
//! a cost every profile of the chain admits.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::super::schema::RawRule;
use super::super::spans::field;
use super::profiles::profile_names;
use super::Ctx;
use crate::runtime::config::rules::{self, PathPattern, RuleConfig, MAX_STACK};
use crate::runtime::config::{ConfigError, Profile, RouteConfig};
use crate::runtime::resolve::Step;

/// What the rules may refer to.
pub(super) struct Known<'a> {
    pub(super) profiles: &'a BTreeMap<String, Profile>,
    pub(super) routes: &'a BTreeMap<String, RouteConfig>,
    pub(super) default_profile: &'a str,
    /// A `[jwt]` section is present.
    pub(super) jwt: bool,
    /// A `[service]` section is present.
    pub(super) service: bool,
}

pub(super) fn rules(raw: Vec<RawRule>, known: &Known<'_>, ctx: &Ctx<'_>) -> Result<Vec<RuleConfig>, ConfigError> {
    let mut rules = Vec::with_capacity(raw.len());
    let mut names = HashSet::new();
    let mut stacking = 0;
    for (i, r) in raw.into_iter().enumerate() {
        let entry = field("rules").index(i);
        let at = |key: &str, message: String| ctx.error(&entry.key(key), message);
        if r.stack {
            stacking += 1;
            // A stack applies at most MAX_STACK rules: with fewer rules
            // saying `stack` than that, no request can reach a longer one,
            // so no limit is ever dropped from a stack.
            if stacking >= MAX_STACK {
                return Err(at(
                    "stack",
                    format!(
                        "at most {} rules can say stack = true (one decision stacks at most {MAX_STACK} \
                         rules)",
                        MAX_STACK - 1
                    ),
                ));
            }
        }
        ratelimit_spec::route_name(&r.name).map_err(|e| at("name", e.to_string()))?;
        if !names.insert(r.name.clone()) {
            return Err(at("name", format!("rule name {:?} is used twice", r.name)));
        }
        let path = PathPattern::parse(&r.path).map_err(|e| at("path", e.to_string()))?;
        let methods = r
            .methods
            .iter()
            .map(|m| {
                http::Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                    .map_err(|_| at("methods", format!("invalid method {m:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key = rules::parse_key(&r.key).map_err(|e| at("key", e))?;
        let resolve = rules::parse_chain(&r.resolve).map_err(|e| at("resolve", e.to_string()))?;
        for step in &resolve {
            match step {
                Step::Profile(p) if !known.profiles.contains_key(p) => {
                    return Err(at(
                        "resolve",
                        format!(
                            "unknown profile {:?}; defined profiles: {}",
                            p,
                            profile_names(known.profiles)
                        ),
                    ));
                }
                Step::Jwt if !known.jwt => {
                    return Err(at(
                        "resolve",
                        "\"jwt\" needs a [jwt] section (claim names and caps)".to_owned(),
                    ));
                }
                Step::Service if !known.service => {
                    return Err(at("resolve", "\"service\" needs a [service] section".to_owned()));
                }
                _ => {}
            }
        }
        let own = r
            .cost
            .unwrap_or(ratelimit_spec::Cost::Units(ratelimit_spec::DEFAULT_COST));
        let rule = RuleConfig {
            name: crate::runtime::limits::intern(&r.name),
            path,
            methods,
            key,
            resolve,
            cost: own.reserved(),
            bytes_per_unit: own.bytes_per_unit(),
            shadow: r.shadow,
            stack: r.stack,
            key_text: Arc::from(r.key.trim()),
        };
        // What requests get (its plan: the cost with `[routes]` applied):
        // the profile its chain settles on must admit the cost, or every
        // request would be refused (token and service limits are checked
        // when they arrive, and logged). A missing default profile is
        // reported on its own.
        if let Some(default) = known.profiles.get(known.default_profile) {
            let limits = crate::runtime::limits::LimitParts {
                profiles: known.profiles,
                default,
                routes: known.routes,
                jwt: None,
            };
            let plan = rule.plan(limits);
            let settled = plan.settled;
            if plan.cost > settled.quota.burst() {
                return Err(at(
                    "cost",
                    format!(
                        "cost {} is above the burst {} of profile {:?}: every request would be refused",
                        plan.cost,
                        settled.quota.burst(),
                        settled.profile.unwrap_or_default()
                    ),
                ));
            }
        }
        rules.push(rule);
    }
    Ok(rules)
}
