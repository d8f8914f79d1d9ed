//! One request's limit through the fleet gate: the local check and the
//! key's fleet identity, what the gate's `*_id` methods take.

use super::ids::NONZERO;
use crate::{Check, Decision};

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
/// use ratelimit::fleet::{FleetCheck, FleetGate, GateSettings};
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
/// assert_eq!(limiter.peek_all(&[Check::new(cell, quota, 0)])[0].remaining(), 60);
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
    /// The fleet id of the key's group ([`FleetGate::group_id`](super::FleetGate::group_id):
    /// its network, when the cell is grouped), or 0 for none. A request the
    /// local limiter places on a shared cell (its group's, once the group
    /// brought its budget of new keys in, or an overflow cell) is held to
    /// and counted on this id for the fleet too: the fleet limits the
    /// group's shared cell as one client, as each instance does.
    pub group_id: u64,
}

impl FleetCheck {
    /// The check `local`, for the key `fleet_id` on `route`.
    pub const fn new(local: Check, route: u32, fleet_id: u64) -> FleetCheck {
        FleetCheck {
            local,
            route,
            fleet_id,
            group_id: 0,
        }
    }

    /// The same check for a key of the group `group_id`
    /// ([`FleetGate::group_id`](super::FleetGate::group_id)).
    #[must_use]
    pub const fn in_group(mut self, group_id: u64) -> FleetCheck {
        self.group_id = group_id;
        self
    }

    /// The fleet id the request `placed` is held to and counted on: the
    /// group's when the local limiter placed it on a shared cell and the key
    /// has a group, else the key's own (with [`NONZERO`] set).
    #[inline]
    pub(super) fn counted_id(&self, placed: &Decision) -> u64 {
        self.counted_id_or(placed, &|| self.group_id)
    }

    /// [`counted_id`](Self::counted_id) with the group's fleet id from
    /// `group`, called only for a request placed on a shared cell (the HTTP
    /// runtime computes it then: a keyed hash of the network).
    #[inline]
    pub(super) fn counted_id_or(&self, placed: &Decision, group: &impl Fn() -> u64) -> u64 {
        if placed.is_grouped() || placed.is_overflow() {
            let group_id = group();
            if group_id != 0 {
                return group_id | NONZERO;
            }
        }
        self.fleet_id | NONZERO
    }

    /// The same limit at a cost of `cost` (a refund, a settlement).
    #[must_use]
    pub const fn with_cost(mut self, cost: u32) -> FleetCheck {
        self.local.cost = cost;
        self
    }
}

impl crate::engine::limiter::AsCheck for FleetCheck {
    fn check(&self) -> &Check {
        &self.local
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::tests::gate;
    use crate::{Clock, Denial, Limiter, ManualClock, MemoryStore, Quota};

    /// Keys of one network past its new keys share the network's cell: the
    /// fleet holds that cell to one budget too (the group's fleet id), and a
    /// request the group's budget refuses hands the cell its units back.
    #[test]
    fn a_shared_cell_is_held_to_one_fleet_budget() {
        let clock = ManualClock::new();
        let gate = gate(&clock);
        let limiter = Limiter::new(
            MemoryStore::builder().new_keys_per_group(Quota::per_hour(1)).build(),
            clock.clone(),
        );
        // 100 per 10 s window fleet-wide, a burst of 1,000 locally.
        let quota = Quota::per_minute(600).with_burst(1_000);
        let network = "198.51.100.0/24";
        let group = gate.group_id(1, network);
        let request = |key: u32| {
            let cell = limiter.grouped_cell_key(1, &key, network);
            FleetCheck::new(Check::new(cell, quota, 1), 1, gate.fleet_id(1, &key)).in_group(group)
        };
        // The network's one new key has a cell and a fleet budget of its own.
        let own = (0..150)
            .filter(|_| gate.check_id(&limiter, &request(0)).is_allowed())
            .count();
        assert_eq!(own, 100);
        // Each later key is new and shares the network's cell: before, each
        // had its own fleet budget (50 keys, 150 admitted); now they share one.
        let mut shared = 0;
        for key in 1..=50 {
            for _ in 0..3 {
                let d = gate.check_id(&limiter, &request(key));
                assert!(d.is_grouped() || d.denial() == Some(Denial::FleetLimited), "{d:?}");
                shared += usize::from(d.is_allowed());
            }
        }
        assert_eq!(shared, 100, "the network's shared cell past one fleet budget");
        // The fleet's refusals charged the shared cell nothing.
        let cell = limiter.grouped_cell_key(1, &1u32, network);
        let charged = limiter.check_cell(cell, &quota, 1);
        assert!(charged.is_grouped());
        assert_eq!(charged.remaining(), 899);
        // A refund of a grouped charge goes back to the group's fleet count
        // (here a unit the fleet counted for an earlier request).
        gate.refund_placed_id(&limiter, &request(7), &charged, clock.now());
        assert!(gate.check_id(&limiter, &request(8)).is_allowed());
        assert!(gate.check_id(&limiter, &request(9)).is_denied());
    }
}
