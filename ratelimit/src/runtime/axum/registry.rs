//! Every `#[rate_limit]` route of the program, registered at link time
//! (`inventory`: each expansion submits a static [`AttributeRoute`], and
//! the list is gathered before `main`), so that startup and every reload
//! check the routes against the configuration rather than the first request
//! finding a profile missing.
//!
//! `inventory` rather than `linkme`: its `submit!` works through a
//! re-export (`ratelimit::__private`), so a renamed dependency
//! (`crate = "..."`) needs nothing more, and it supports every platform
//! the runtime does.

use std::collections::BTreeMap;

use crate::runtime::config::Config;
use crate::runtime::limits::LimitParts;
use crate::runtime::plan::{Ask, RoutePlan, RouteSource};

/// One `#[rate_limit]` attribute, as it was written: what
/// [`RateLimit::routes`](super::RateLimit::routes) lists and what startup
/// checks against the configuration.
///
/// ```no_run
/// # async fn run(rate_limit: ratelimit::axum::RateLimit) {
/// for route in rate_limit.routes() {
///     println!("{} ({}): key {}, resolve [{}]", route.name(), route.handler(), route.key(), route.resolve().join(", "));
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct AttributeRoute {
    name: &'static str,
    handler: &'static str,
    key: &'static str,
    resolve: &'static [&'static str],
    /// The key and the steps in the rule language (`jwt_claim:sub`,
    /// `profile:gold`), for `explain`.
    rule_key: &'static str,
    rule_steps: &'static [&'static str],
    profiles: &'static [&'static str],
    cost: u32,
    bytes_per_unit: Option<u32>,
    shadow: bool,
    stacked: u8,
    file: &'static str,
    line: u32,
    /// Its rule's index into every plan (see [`all`]).
    slot: fn() -> &'static RouteSlot,
}

inventory::collect!(AttributeRoute);

/// Where an attribute route's plan is in every configuration's plan: its
/// place among the routes linked into the program ([`all`]), set once,
/// before any plan is compiled. One `static` per rule type, so a request
/// reaches its route's plan by index. Not a public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct RouteSlot(std::sync::atomic::AtomicU32);

impl RouteSlot {
    /// A slot not yet given its index. Not a public API.
    #[doc(hidden)]
    #[allow(clippy::new_without_default)]
    pub const fn new() -> RouteSlot {
        RouteSlot(std::sync::atomic::AtomicU32::new(u32::MAX))
    }

    /// The route's index in a plan (out of range until [`all`] ran: a rule
    /// type the registry does not list has no plan).
    #[inline]
    pub(crate) fn index(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed) as usize
    }
}

/// Every attribute route linked into the program, in the order of
/// [`routes_under`]: a route's place here is its index in every plan,
/// given to its rule type's slot the first time this is read.
pub(crate) fn all() -> &'static [&'static AttributeRoute] {
    static ALL: std::sync::OnceLock<Box<[&'static AttributeRoute]>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let routes = routes_under("");
        for (i, route) in routes.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            (route.slot)().0.store(i, std::sync::atomic::Ordering::Relaxed);
        }
        routes.into_boxed_slice()
    })
}

/// Compiles `config`'s plan (before any request reads it), then warns
/// about each of `routes` whose chain has a step that never answers
/// under `config` (a `jwt` step without a `[jwt]` section, a `service` step
/// without a limit service, `has_service`: a silent fall-through would hide
/// a missing section), or answers with limits that refuse every request
/// they apply to (a tier naming a profile whose burst is below the route's
/// cost, token numbers capped below it). At startup and at each reload,
/// off the request path.
pub(crate) fn compile_and_warn(routes: &[&'static AttributeRoute], config: &Config, has_service: bool) {
    let plan = config.plan(compile);
    for route in routes {
        let Some(p) = plan.attribute.get((route.slot)().index()) else {
            continue;
        };
        if p.asks(Ask::Jwt) && config.jwt.is_none() {
            tracing::warn!(
                target: "ratelimit",
                route = p.name,
                "the route's `jwt` step needs a [jwt] section (claim names and caps): it never answers"
            );
        }
        if p.asks(Ask::Service) && !has_service {
            tracing::warn!(
                target: "ratelimit",
                route = p.name,
                "the route's `service` step needs a [service] section: it never answers"
            );
        }
        // A token's tier or a service's answer can name any profile.
        let asks = (p.asks(Ask::Jwt) && config.jwt.is_some()) || (p.asks(Ask::Service) && has_service);
        let small: Vec<&str> = config
            .profiles()
            .values()
            .filter(|f| f.quota.burst() < p.cost)
            .map(|f| f.name)
            .collect();
        if asks && !small.is_empty() {
            tracing::warn!(
                target: "ratelimit",
                route = p.name,
                cost = p.cost,
                profiles = small.join(", "),
                "the route's cost is above the burst of profiles a token's tier or the limit service may name: \
                 every request they apply to is refused"
            );
        }
        let capped = config.jwt.as_ref().and_then(|j| j.max_burst).filter(|&b| b < p.cost);
        if let (true, Some(max_burst)) = (p.asks(Ask::Jwt), capped) {
            tracing::warn!(
                target: "ratelimit",
                route = p.name,
                cost = p.cost,
                max_burst,
                "the route's cost is above [jwt] max_burst: every request whose token carries numbers is refused"
            );
        }
    }
}

/// The plans of every attribute route under `limits`, by index (what a
/// configuration's plan holds of them).
pub(crate) fn compile(limits: LimitParts<'_>) -> Box<[RoutePlan]> {
    all().iter().map(|route| route.plan(limits)).collect()
}

impl AttributeRoute {
    /// What the expansion registers. Not a public API.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub const fn __new(
        name: &'static str,
        handler: &'static str,
        key: &'static str,
        resolve: &'static [&'static str],
        rule_key: &'static str,
        rule_steps: &'static [&'static str],
        profiles: &'static [&'static str],
        cost: u32,
        bytes_per_unit: Option<u32>,
        shadow: bool,
        stacked: u8,
        file: &'static str,
        line: u32,
        slot: fn() -> &'static RouteSlot,
    ) -> AttributeRoute {
        AttributeRoute {
            name,
            handler,
            key,
            resolve,
            rule_key,
            rule_steps,
            profiles,
            cost,
            bytes_per_unit,
            shadow,
            stacked,
            file,
            line,
            slot,
        }
    }

    /// The route name (`name = "..."`, else the handler's path).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The handler's path (`my_crate::users::get_user`).
    pub fn handler(&self) -> &'static str {
        self.handler
    }

    /// The key as written (`ip`, `jwt_claim("sub")`, `custom(ByTenant)`).
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// The resolve steps as written (`jwt`, `profile("standard")`,
    /// `default`).
    pub fn resolve(&self) -> &'static [&'static str] {
        self.resolve
    }

    /// The profiles the chain names (its `profile("...")` steps).
    pub fn profiles(&self) -> &'static [&'static str] {
        self.profiles
    }

    /// The units a request reserves (`cost = N`; 1 for a cost by the
    /// response's size).
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// `cost = response_bytes(per = N)`: `Some(N)`.
    pub fn bytes_per_unit(&self) -> Option<u32> {
        self.bytes_per_unit
    }

    /// `shadow`.
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// Its place among the limits stacked on its handler: 1 for the first
    /// (or only) attribute, 2 for the one below it, and so on.
    pub fn stacked(&self) -> u8 {
        self.stacked
    }

    /// Its resolve chain in the rule language (the expansion registers
    /// only steps the spec accepted).
    pub(crate) fn steps(&self) -> Vec<ratelimit_spec::Step> {
        self.rule_steps
            .iter()
            .filter_map(|s| ratelimit_spec::step_text(s).ok())
            .collect()
    }

    /// The route compiled against `limits` (see `crate::runtime::plan`).
    pub(crate) fn plan(&self, limits: LimitParts<'_>) -> RoutePlan {
        let steps = self.steps();
        RoutePlan::compile(
            limits,
            &RouteSource {
                name: self.name,
                id: crate::runtime::plan::route_id(self.name),
                cost: self.cost,
                bytes_per_unit: self.bytes_per_unit,
                shadow: self.shadow,
                steps: &steps,
            },
        )
    }

    /// Where the attribute is written: the source file and line.
    pub fn location(&self) -> (&'static str, u32) {
        (self.file, self.line)
    }
}

/// The route read as a `[[rules]]` entry (its key and chain in the rule
/// language), and the line `explain` prints for it.
pub(crate) fn as_rule(route: &AttributeRoute) -> Result<(String, crate::runtime::config::RuleConfig), String> {
    let rule = crate::runtime::config::RuleConfig::of_attribute(
        route.name,
        route.rule_key,
        route.rule_steps,
        route.cost,
        route.bytes_per_unit,
        route.shadow,
    )?;
    let line = format!(
        "attribute route: {:?} (#[rate_limit] on {}, {}:{}{}): key = {}, resolve = [{}]",
        route.name,
        route.handler,
        route.file,
        route.line,
        if route.stacked > 1 {
            format!(
                "; stacked limit #{} of its handler: one decision with the others",
                route.stacked
            )
        } else {
            String::new()
        },
        route.key,
        route.resolve.join(", ")
    );
    Ok((line, rule))
}

/// Every attribute route linked into this program whose handler's path
/// starts with `prefix` (every route for `""`), by route name, then
/// handler.
pub(crate) fn routes_under(prefix: &str) -> Vec<&'static AttributeRoute> {
    let mut routes: Vec<&'static AttributeRoute> = inventory::iter::<AttributeRoute>
        .into_iter()
        .filter(|r| r.handler.starts_with(prefix))
        .collect();
    routes.sort_by(|a, b| (a.name, a.handler, a.stacked).cmp(&(b.name, b.handler, b.stacked)));
    routes
}

/// What is wrong with `routes` under `config`, one line per problem naming
/// the route, its handler and where it is written: a profile the chain
/// names that the configuration lacks, a cost above the burst of the
/// profile every request of the route can reach (every request would be
/// refused: its plan, see `crate::runtime::plan`), and two handlers
/// registering one route name.
pub(crate) fn check(routes: &[&'static AttributeRoute], config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_name: BTreeMap<&str, &AttributeRoute> = BTreeMap::new();
    for route in routes {
        let at = || {
            format!(
                "#[rate_limit] route {:?} (handler {}, {}:{})",
                route.name, route.handler, route.file, route.line
            )
        };
        if let Some(first) = by_name.insert(route.name, route) {
            if first.handler != route.handler {
                problems.push(format!(
                    "{}: the name is also the route of handler {} ({}:{}); route names are unique (they key \
                     buckets, [routes] overrides and metrics): give one of them its own `name = \"...\"`",
                    at(),
                    first.handler,
                    first.file,
                    first.line
                ));
            }
        }
        for profile in route.profiles {
            if config.profile(profile).is_none() {
                problems.push(format!(
                    "{}: profile({profile:?}) is not a profile of the configuration (it has {})",
                    at(),
                    known_profiles(config)
                ));
            }
        }
        // What requests get: the route's plan under this configuration
        // (its cost with `[routes]` applied). The profile its chain settles
        // on must admit its cost (a missing profile is reported above).
        let plan = route.plan(crate::runtime::limits::LimitTable::limits(config));
        let settled = plan.settled;
        if !plan.skipped_profile && plan.cost > settled.quota.burst() {
            problems.push(format!(
                "{}: cost {} is above the burst {} of profile {:?}: every request would be refused",
                at(),
                plan.cost,
                settled.quota.burst(),
                settled.profile.unwrap_or_default()
            ));
        }
    }
    problems
}

/// The `[routes."name"]` profiles of `config` that no request reaches: every
/// route of that name (`routes`' attribute routes and the `[[rules]]`
/// entries: they share the section) answers at a `profile(..)` step before
/// `default`, the only step such a profile answers. One line each.
pub(crate) fn unreached_overrides(routes: &[&'static AttributeRoute], config: &Config) -> Vec<String> {
    let limits = crate::runtime::limits::LimitTable::limits(config);
    config
        .routes()
        .keys()
        .filter_map(|name| {
            let attribute = routes
                .iter()
                .filter(|r| r.name == name.as_str())
                .map(|r| r.plan(limits));
            let rules = config
                .rules
                .iter()
                .filter(|r| r.name == name.as_str())
                .map(|r| r.plan(limits));
            RoutePlan::unreached_by_all(attribute.chain(rules), limits)
        })
        .collect()
}

/// The `[routes."name"]` sections of `config` that name no route this
/// program has: neither a `#[rate_limit]` route linked into it (any
/// application's: a section for another's route is not a typo) nor a
/// `[[rules]]` entry. A typo there would start the server with the override
/// applying to nothing, and renaming a handler would orphan its section:
/// one line each, with the closest route names.
pub(crate) fn orphan_overrides(config: &Config) -> Vec<String> {
    let mut known: Vec<&str> = routes_under("").iter().map(|r| r.name()).collect();
    known.extend(config.rules.iter().map(|r| r.name));
    known.sort_unstable();
    known.dedup();
    config
        .routes()
        .keys()
        .filter(|name| known.binary_search(&name.as_str()).is_err())
        .map(|name| {
            let close = closest(name, &known);
            let hint = match close.as_slice() {
                [] if known.is_empty() => "this program has no route yet".to_owned(),
                [] => format!("its routes: {}", quoted(&known, 12)),
                close => format!("did you mean {}?", quoted(close, 3)),
            };
            format!(
                "[routes.{name:?}] names no route: no #[rate_limit] route and no [[rules]] entry is called {name:?} \
                 (the override would apply to nothing); {hint}"
            )
        })
        .collect()
}

/// The names within a small edit distance of `name`, closest first.
fn closest<'a>(name: &str, known: &[&'a str]) -> Vec<&'a str> {
    let most = (name.chars().count() / 3).clamp(1, 4);
    let mut near: Vec<(usize, &str)> = known
        .iter()
        // A route named by its handler's path (`app::public`) is also near
        // its handler's name (`[routes."pubic"]`, `[routes."public"]`).
        .map(|k| {
            let handler = k.rsplit("::").next().unwrap_or(k);
            (edit_distance(name, k).min(edit_distance(name, handler)), *k)
        })
        .filter(|(d, _)| *d <= most)
        .collect();
    near.sort_unstable();
    near.into_iter().map(|(_, k)| k).collect()
}

/// Levenshtein distance, by characters (route names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

fn quoted(names: &[&str], at_most: usize) -> String {
    let mut out: Vec<String> = names.iter().take(at_most).map(|n| format!("{n:?}")).collect();
    if names.len() > at_most {
        out.push(format!("and {} more", names.len() - at_most));
    }
    out.join(", ")
}

fn known_profiles(config: &Config) -> String {
    let names: Vec<String> = config.profiles().keys().map(|n| format!("{n:?}")).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_route() {
        assert_eq!(edit_distance("todos.craete", "todos.create"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        let known = ["todos.create", "todos.list", "users.get"];
        assert_eq!(closest("todos.craete", &known), ["todos.create"]);
        assert_eq!(closest("todos.lists", &known), ["todos.list"]);
        assert!(closest("billing", &known).is_empty());
    }
}
