//! One request's limit through the fleet gate: the local check and the
//! key's fleet identity, what the gate's `*_id` methods take.

use crate::Check;

/// One limit of a request through the [`FleetGate`](super::FleetGate): the
/// local check (the key's cell, the quota, the request's cost: an engine
/// [`Check`]) and the key's identity in the fleet (its route and its fleet
/// id). What [`check_id`](super::FleetGate::check_id),
/// [`peek_id`](super::FleetGate::peek_id),
/// [`refund_id`](super::FleetGate::refund_id),
/// [`refund_placed_id`](super::FleetGate::refund_placed_id) and
/// [`charge_more_id`](super::FleetGate::charge_more_id) take, and
/// [`check_all_id`](super::FleetGate::check_all_id) a slice of.
///
/// ```
/// use ratelimit::global::{FleetCheck, FleetGate, GateSettings};
/// use ratelimit::{Check, Clock, Limiter, ManualClock, MemoryStore, Quota};
///
/// let clock = ManualClock::new();
/// let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &clock).unwrap();
/// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
/// let quota = Quota::per_minute(60);
/// // The key "user-1" on route 1: its local cell and its fleet id.
/// let (cell, id) = (limiter.cell_key(1, "user-1"), gate.fleet_id(1, "user-1"));
/// let request = FleetCheck::new(Check::new(cell, quota, 1), 1, id);
/// let at = clock.now();
/// assert!(gate.check_id(&limiter, &request).is_allowed());
/// // The same limit at another cost (a settlement, a refund).
/// let refund = request.with_cost(1);
/// assert_eq!((refund.local.cell, refund.route, refund.fleet_id), (cell, 1, id));
/// gate.refund_id(&limiter, &refund, at);
/// assert_eq!(limiter.peek_cell(cell, &quota, 0).remaining(), 60);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetCheck {
    /// The local check: the cell ([`Limiter::cell_key`](crate::Limiter::cell_key)),
    /// its quota and the request's cost there. The quota also sets the
    /// fleet budget (its rate over the gate's window).
    pub local: Check,
    /// The route the key is limited on: kept with the key's slot, it names
    /// the key's counters in the store (with the fleet id).
    pub route: u32,
    /// The key's fleet id ([`FleetGate::fleet_id`](super::FleetGate::fleet_id)):
    /// the same on every instance with the same secret.
    pub fleet_id: u64,
}

impl FleetCheck {
    /// The check `local`, for the key `fleet_id` on `route`.
    pub const fn new(local: Check, route: u32, fleet_id: u64) -> FleetCheck {
        FleetCheck { local, route, fleet_id }
    }

    /// The same limit at a cost of `cost` (a refund, a settlement).
    #[must_use]
    pub const fn with_cost(mut self, cost: u32) -> FleetCheck {
        self.local.cost = cost;
        self
    }
}

impl crate::limiter::AsCheck for FleetCheck {
    fn check(&self) -> &Check {
        &self.local
    }
}
