//! A route a request is decided on, as the request path carries it.

use super::outcome::RouteName;
use super::series::RouteSeries;
use crate::runtime::plan::RoutePlan;

/// A route a request is decided on: its plan under the configuration the
/// request read, the name its responses carry, and its own metric handles
/// (attribute routes) if any.
#[derive(Clone, Copy)]
pub(crate) struct Route<'c> {
    pub(crate) plan: &'c RoutePlan,
    pub(crate) name: RouteName,
    pub(crate) series: Option<&'static RouteSeries>,
}
