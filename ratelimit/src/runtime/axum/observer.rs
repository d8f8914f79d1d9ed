//! What the runtime reports about each decision: its metric series, a log
//! line for refusals (rate-gated), and warnings about routes whose chains
//! name what the configuration lacks.

use super::outcome::Outcome;
use super::route::Route;
use super::{
    log_gate::{LogGate, Once},
    series::{Metrics, Series},
};
use crate::Denial;

/// What the runtime reports: metric series and the gates of its log events.
#[derive(Debug, Default)]
pub(crate) struct Observer {
    metrics: Metrics,
    log_rejected: LogGate,
    log_misconfigured: LogGate,
    log_no_peer: Once,
    log_no_peer_shadow: Once,
}

impl Observer {
    /// Warns once that a request came without a peer address.
    pub(crate) fn no_peer(&self, route: &str, shadow: bool) {
        // Once for the 500s and once for shadow routes: a shadow route
        // first must not silence the 500s.
        let once = if shadow {
            &self.log_no_peer_shadow
        } else {
            &self.log_no_peer
        };
        if once.first() {
            tracing::error!(
                target: "ratelimit",
                route,
                answer = if shadow { "served (a shadow route), one bucket for every client" } else { "500" },
                "a request's key needs the client's address and the server gives no peer address. Serve with \
                 `into_make_service_with_connect_info::<SocketAddr>()` or insert `ratelimit::key::PeerAddr`; \
                 for tonic, enable ratelimit's `tonic` feature (plain TCP), and behind tonic's TLS map \
                 `TlsConnectInfo` to a `PeerAddr` (docs/http.md, gRPC). [ip] without_peer = \"shared\" limits \
                 every such request as one client instead"
            );
        }
    }

    /// Runs `f` with the metric series of (route, tier).
    fn series(&self, route: &Route<'_>, tier: Option<&'static str>, f: impl FnOnce(&Series)) {
        let (id, name) = (route.plan.id, route.plan.name);
        match route.series {
            Some(cache) => cache.with(&self.metrics, id, name, tier, f),
            None => self.metrics.with(id, name, tier, f),
        }
    }

    /// The in-flight gauge of (route, tier): a handle a permit holds.
    pub(crate) fn in_flight_gauge(&self, route: &Route<'_>, tier: Option<&'static str>) -> metrics::Gauge {
        let mut gauge = None;
        self.series(route, tier, |s| gauge = Some(s.in_flight.clone()));
        gauge.unwrap_or_else(metrics::Gauge::noop)
    }

    /// Counts a decision and logs a refusal (rate-gated).
    pub(crate) fn record(&self, route: &Route<'_>, outcome: &Outcome, now: impl FnOnce() -> u64) {
        let d = &outcome.decision;
        let in_flight = outcome.refused_in_flight();
        let record = |s: &Series| match (d.is_allowed() && !in_flight, outcome.shadow) {
            (true, _) => s.allowed.increment(1),
            // Served, but counted apart: each decision is counted once.
            (false, true) => s.shadow_rejected.increment(1),
            (false, false) => {
                s.rejected.increment(1);
                if in_flight && d.is_allowed() {
                    s.concurrency_rejected.increment(1);
                }
                s.retry_after.record(outcome.retry_after_secs() as f64);
            }
        };
        self.series(route, outcome.profile, record);
        if d.is_allowed() && !in_flight {
            return;
        }
        // The clock is read for refusals only: allowed requests need no time.
        let now = now();
        match d.denial() {
            Some(Denial::CostExceedsBurst) => {
                if let Some(suppressed) = self.log_misconfigured.pass(now) {
                    tracing::error!(
                        target: "ratelimit",
                        route = route.plan.name,
                        tier = outcome.profile.unwrap_or("custom"),
                        burst = d.limit(),
                        suppressed,
                        "the route's cost is above the burst of the limit that applies: every request is refused; \
                         lower the cost or raise the profile's burst"
                    );
                }
            }
            _ => {
                if let Some(suppressed) = self.log_rejected.pass(now) {
                    tracing::info!(
                        target: "ratelimit",
                        route = route.plan.name,
                        tier = outcome.profile.unwrap_or("custom"),
                        shadow = outcome.shadow,
                        store_full = d.denial() == Some(Denial::StoreFull),
                        fleet = d.denial() == Some(Denial::FleetLimited),
                        concurrency = in_flight && d.is_allowed(),
                        retry_after_s = outcome.retry_after_secs(),
                        suppressed,
                        "request over its limit"
                    );
                }
            }
        }
    }
}
