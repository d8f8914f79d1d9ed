//! A route as its metrics see it, and the most limits one decision
//! stacks. What a route does is its plan (`crate::plan`).

use super::observe::RouteSeries;

/// A route as its metrics see it: its name and cell namespace, and its own
/// metric handles (a `#[rate_limit]` route's `static`), else the runtime's
/// map is used (`[[rules]]` entries).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RouteSpec {
    /// The stable route name.
    pub(crate) name: &'static str,
    /// Its cell namespace.
    pub(crate) id: u32,
    /// The route's own metric handles, if any.
    pub(crate) series: Option<&'static RouteSeries>,
}

/// The most limits one decision stacks (attributes on a handler, or
/// `[[rules]]` entries that say `stack`); a longer stack of rules applies
/// its first eight.
pub(crate) const MAX_STACK: usize = 8;
