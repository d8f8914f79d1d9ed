//! Reserve, then settle: a handler that learns its real cost only after its
//! work (rows scanned, tokens generated, an upstream call that failed) takes
//! a [`Charge`] and settles it.

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::request::Parts;

use super::outcome::{Held, Outcome};
use super::RateLimit;
use crate::Quota;

/// What a `#[rate_limit]` route charged for a request before its handler
/// ran, to settle once the real cost is known.
///
/// Take it as a handler argument: the attribute sees it and keeps the
/// reservation for it (a route without a `Charge` argument keeps nothing).
/// [`settle`](Self::settle) charges the difference when the request cost
/// more (into debt if need be, the work being done, but at most one
/// bucket's worth beyond a spent bucket) or hands back the surplus
/// when it cost less; [`refund`](Self::refund) hands it all back (the
/// upstream call failed). Both go to the cell the reservation was charged
/// to, the client's own or a shared one (a full store's overflow, a network
/// past its budget of new keys): a shared cell never makes a request
/// cheaper. A hand-back never returns more than the charge still holds
/// against the client: time repays a charge from the moment it was made,
/// so a reservation held until the bucket refilled gives nothing back (see
/// [`Limiter::refund`](crate::Limiter::refund)). Dropped
/// unsettled, the charge stands. With stacked attributes, every limit is
/// settled to the same cost. Through the fleet gate, the fleet's count of
/// the key follows the settlement (see `docs/http.md`, reserve then
/// settle).
///
/// ```no_run
/// use axum::{routing::post, Json, Router};
/// use ratelimit::axum::{Charge, RateLimit};
/// use ratelimit::rate_limit;
///
/// // Reserve 10 units (the most a search costs), settle the real cost.
/// #[rate_limit(key = ip, resolve = [default], cost = 10)]
/// async fn search(charge: Charge, Json(q): Json<String>) -> String {
///     let hits = q.len() as u32; // the work
///     match hits {
///         0 => charge.refund(),          // nothing found: free
///         n => charge.settle(n.min(10)), // 1 unit per hit
///     }
///     format!("{hits} hits")
/// }
/// let app: Router<RateLimit> = Router::new().route("/search", post(search));
/// # let _ = app;
/// ```
#[derive(Debug)]
pub struct Charge {
    rt: RateLimit,
    limits: Vec<Reserved>,
}

/// One limit's part of a reservation.
#[derive(Debug, Clone, Copy)]
struct Reserved {
    held: Held,
    quota: Quota,
    cost: u32,
    /// Charged by the response's size: bytes per unit.
    bytes_per_unit: Option<u32>,
    /// What this limit has really been charged so far (the reservation,
    /// then what a metered body has added): the most a settlement hands back.
    so_far: u32,
    /// The units the response's size has come to so far (the reservation
    /// until the body is metered).
    seen: u32,
    /// The admitted decision: where the store placed the charge.
    decision: crate::Decision,
    /// A clock reading taken before the check: time repays the charge
    /// from then on, which bounds what a refund may hand back.
    charged_at: u64,
}

/// What `Admit` leaves in the request's extensions for a [`Charge`].
#[derive(Debug, Clone)]
pub(crate) struct Reservation(pub(crate) Option<Charge>);

impl Clone for Charge {
    fn clone(&self) -> Self {
        // Extensions must be `Clone`; a cloned reservation would settle
        // twice, so a clone holds nothing (settling it does nothing).
        Charge {
            rt: self.rt.clone(),
            limits: Vec::new(),
        }
    }
}

impl Charge {
    /// A reservation of the limits of `outcomes` that charged the request;
    /// `charged_at`: a clock reading taken before they were decided.
    pub(crate) fn reserve(rt: &RateLimit, outcomes: &[Outcome], charged_at: u64) -> Charge {
        let limits = outcomes
            .iter()
            .filter(|o| o.decision.is_allowed() && o.cost > 0)
            .map(|o| Reserved {
                held: o.held,
                quota: o.quota,
                cost: o.cost,
                bytes_per_unit: o.bytes_per_unit,
                so_far: o.cost,
                seen: o.cost,
                decision: o.decision,
                charged_at,
            })
            .collect();
        Charge { rt: rt.clone(), limits }
    }

    /// The units charged before the handler ran (of stacked limits, the
    /// first one that charged; 0 when nothing was charged, e.g. a shadow
    /// route's refused request).
    pub fn charged(&self) -> u32 {
        self.limits.first().map_or(0, |l| l.cost)
    }

    /// Settles the request at `actual` units: charges `actual - charged`
    /// more, or hands back `charged - actual`.
    pub fn settle(self, actual: u32) {
        for l in &self.limits {
            self.settle_one(l, actual);
        }
    }

    /// Whether a limit of the reservation is charged by the response's
    /// size (a [`Metered`](super::meter::Metered) body settles it).
    pub(crate) fn is_metered(&self) -> bool {
        self.limits.iter().any(|l| l.bytes_per_unit.is_some())
    }

    /// Charges the limits metered by the response's size up to what
    /// `bytes` of it cost (`max(1, ceil(bytes / per))` units each), as the
    /// body goes out: a client's debt shows in its next decision while a
    /// long download is still running. Never hands anything back.
    pub(crate) fn meter_to(&mut self, bytes: u64) {
        for i in 0..self.limits.len() {
            let l = self.limits[i];
            let Some(per) = l.bytes_per_unit else { continue };
            let due = crate::runtime::config::Cost::units_for(bytes, per);
            // Only what was really charged counts (the debt cap stops a
            // huge size short), so a settlement never hands back units not
            // taken. `seen` is how far the size has been metered.
            if due > l.seen {
                let charged = self.charge_extra(&l, due - l.seen);
                self.limits[i].seen = due;
                self.limits[i].so_far = l.so_far.saturating_add(charged);
            }
        }
    }

    /// Settles the limits metered by the response's size once `bytes` of
    /// the body have been sent: charges what is still due, or hands back
    /// what was charged beyond it (a body whose size was charged up front
    /// and that the client left part way). The other limits of a stack
    /// keep their charge.
    pub(crate) fn settle_response(mut self, bytes: u64) {
        self.meter_to(bytes);
        for l in &self.limits {
            let Some(per) = l.bytes_per_unit else { continue };
            let due = crate::runtime::config::Cost::units_for(bytes, per);
            if due < l.so_far {
                self.hand_back(l, l.so_far - due);
            }
        }
    }

    /// Charges `units` more to a limit, unchecked, to the cell its
    /// reservation went to: the client's own, or the shared cell (a full
    /// store's overflow, a network past its budget of new keys) it would
    /// otherwise escape its size on, one unit a request. Returns the units
    /// really charged.
    fn charge_extra(&self, l: &Reserved, units: u32) -> u32 {
        self.rt
            .inner
            .fleet
            .charge_more(&self.rt.inner.limiter, &l.held, &l.quota, units, &l.decision)
    }

    /// Hands back the last `units` of what a limit was charged: the last
    /// of its units to be repaid by time, so they count as charged
    /// `so_far - units` intervals after the reservation.
    fn hand_back(&self, l: &Reserved, units: u32) {
        let at = crate::engine::gcra::last_units_charged_at(l.charged_at, &l.quota, l.so_far, units);
        self.rt
            .inner
            .fleet
            .refund(&self.rt.inner.limiter, &l.held, &l.quota, units, &l.decision, at);
    }

    fn settle_one(&self, l: &Reserved, actual: u32) {
        if actual < l.cost {
            self.hand_back(l, l.cost - actual);
        } else if actual > l.cost {
            self.charge_extra(l, actual - l.cost);
        }
    }

    /// Hands back everything charged (the request's work failed, or was
    /// not the client's to pay for).
    pub fn refund(self) {
        self.settle(0);
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Charge {
    type Rejection = Response;

    fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> impl std::future::Future<Output = Result<Self, Self::Rejection>> + Send {
        let found = parts.extensions.remove::<Reservation>().and_then(|r| r.0);
        std::future::ready(found.ok_or_else(no_reservation))
    }
}

/// A `Charge` argument on a handler the attribute did not reserve for: a
/// programming error, answered 500 (never served uncharged silently).
fn no_reservation() -> Response {
    tracing::error!(
        target: "ratelimit",
        "a handler takes a ratelimit::axum::Charge but its request has no reservation: the Charge argument needs \
         the handler's own #[rate_limit] attribute"
    );
    (
        http::StatusCode::INTERNAL_SERVER_ERROR,
        "ratelimit: Charge without a #[rate_limit] reservation",
    )
        .into_response()
}
