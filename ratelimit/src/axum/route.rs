//! Routes as the runtime sees them: a name, a cell namespace, a cost and
//! the needs of its chain.

use super::observe::RouteSeries;

/// A route as the runtime sees it: its name, cell namespace and defaults
/// (a `[routes."name"]` section overrides `cost` and `shadow`).
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec<'a> {
    /// The stable route name.
    pub name: &'a str,
    /// Its cell namespace ([`route_id`] of the name).
    pub id: u32,
    /// Units per request (with `bytes_per_unit`, the one unit reserved
    /// before the handler runs).
    pub cost: u32,
    /// `cost = response_bytes(per = N)`: the request is settled at one
    /// unit per `N` response bytes once its body has been sent.
    pub bytes_per_unit: Option<u32>,
    /// Never reject.
    pub shadow: bool,
    /// The chain has a `jwt` step: find verified claims even when the key
    /// is not a claim.
    pub wants_claims: bool,
    /// The chain has a `service` step: compute the client id.
    pub wants_service: bool,
    /// The route's own metric handles (`#[rate_limit]` routes), else the
    /// runtime's map is used.
    pub series: Option<&'a RouteSeries>,
    /// The profiles its chain names (checked against the configuration).
    pub profiles: &'a [&'a str],
}

/// The cell namespace of a route name (FNV-1a, 32-bit; never 0, which is
/// [`DEFAULT_ROUTE`](crate::DEFAULT_ROUTE)). A `const fn`, so
/// `#[rate_limit]` routes compute it at compile time.
pub const fn route_id(name: &str) -> u32 {
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

/// The most limits one decision stacks (attributes on a handler, or
/// `[[rules]]` entries that say `stack`); a longer stack of rules applies
/// its first eight.
pub(crate) const MAX_STACK: usize = 8;
