//! Settling a request after its check: refunds (units handed back, locally
//! and out of this instance's not yet pushed fleet count) and extra charges
//! (units charged without a check, locally and for the fleet).

use std::sync::atomic::Ordering;

use super::check::FleetCheck;
use super::gate::{FleetGate, MAX_FLEET_BURST};
use super::ids::NONZERO;
use super::table::{Pending, Slot};
use crate::engine::limiter::placement_of;
use crate::engine::window::Fit;
use crate::{Clock, Decision, Limiter, Quota, Store};

impl FleetGate {
    /// Hands back `request.local.cost` units of a request
    /// [`check_id`](Self::check_id) admitted (it cost less than it was
    /// charged, or its work failed); `charged_at` is a clock reading taken
    /// no later than that check. Locally through [`Limiter::refund`]
    /// (never more than the charge still holds, never before now), and the
    /// units that came back locally out of this instance's count of the
    /// key's units that the sync loop has not taken for a push yet, in the
    /// slice the charge was counted in (the current one or the one before;
    /// an older charge's units are pushed or out of the window, and the
    /// units pending now are other requests'). No I/O, no lock, no
    /// allocation; no slot is claimed for a key the table does not hold.
    ///
    /// Units already taken for a push (or pushed) stay counted fleet-wide
    /// until they leave the window: a refund after the push is
    /// conservative. Redis counters only grow by design (`INCRBY` of
    /// deltas that are never negative), and a negative delta would need a
    /// signed field in the pending word, which packs a tag and two 24-bit
    /// counts into one atomic: not worth it for what a refund is, the
    /// correction of one request within a sync interval or so.
    ///
    /// ```
    /// use ratelimit::fleet::{FleetCheck, FleetGate, GateSettings};
    /// use ratelimit::{Check, Clock, Limiter, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let settings = GateSettings::new(b"a fleet-wide secret, 16+ bytes").with_window(Duration::from_secs(10));
    /// let gate = FleetGate::new(settings, &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(60).with_burst(100); // fleet: 10 per 10 s
    /// let cell = limiter.cell_key(1, "user-1");
    /// let request = FleetCheck::new(Check::new(cell, quota, 10), 1, gate.fleet_id(1, "user-1"));
    /// let at = clock.now();
    /// assert!(gate.check_id(&limiter, &request).is_allowed());
    /// assert!(gate.peek_id(&limiter, &request.with_cost(1)).is_denied(), "the fleet's 10 are spent");
    /// gate.refund_id(&limiter, &request.with_cost(4), at); // it cost 6
    /// assert!(gate.check_id(&limiter, &request.with_cost(4)).is_allowed());
    /// ```
    pub fn refund_id<S: Store, C: Clock>(&self, limiter: &Limiter<S, C>, request: &FleetCheck, charged_at: u64) {
        let local = &request.local;
        let now = limiter.clock().now();
        let back = limiter.refund_cell_at(local.cell, &local.quota, local.cost, charged_at, now);
        self.take_back(request.fleet_id, &local.quota, back, charged_at, now);
    }

    /// [`refund_id`](Self::refund_id) of the charge that `charged` (the
    /// admitted decision) reports, handed back locally to the cell the
    /// store placed it in (the key's own, or a shared overflow or group
    /// cell: see [`Limiter::refund`]).
    pub fn refund_placed_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        charged: &Decision,
        charged_at: u64,
    ) {
        let local = &request.local;
        let now = limiter.clock().now();
        let back = limiter.refund_placed_at(local.cell, &local.quota, local.cost, charged, charged_at, now);
        self.take_back(request.counted_id(charged), &local.quota, back, charged_at, now);
    }

    /// Takes `units` out of this instance's not yet pushed fleet count of
    /// the key, in the slice a charge made at `charged_at` was counted in,
    /// when that is the current slice or the one before.
    fn take_back(&self, fleet_id: u64, quota: &Quota, units: u32, charged_at: u64, now: u64) {
        // A quota the gate limits locally only was never counted.
        if units == 0 || quota.burst() > MAX_FLEET_BURST || self.limits_locally(quota) {
            return;
        }
        let Some(place) = self.place(now) else {
            return;
        };
        let charged_in = self.window.locate(self.wall(charged_at)).slice;
        if place.slice.wrapping_sub(charged_in) > 1 {
            return;
        }
        if let Some(slot) = place.table.find(fleet_id | NONZERO) {
            take_back_pending(slot, charged_in, u64::from(units));
        }
    }

    /// Charges `request.local.cost` more units of a request already
    /// admitted, without a check (a settlement after the work: see
    /// `ratelimit::axum::Charge`): locally (into debt if need be) and in
    /// this instance's fleet count of the key, pushed with the next round.
    /// A key with no slot in the current epoch's table (the epoch turned
    /// since its request) claims one as a check would; a full table leaves
    /// it local only (and counted as untracked). The fleet counts what was
    /// charged locally (the local charge stops at one bucket of debt beyond
    /// a spent bucket), at most [`MAX_FLEET_BURST`] units. No I/O, no lock,
    /// no allocation.
    ///
    /// ```
    /// use ratelimit::fleet::{FleetCheck, FleetGate, GateSettings};
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(60);
    /// let cell = limiter.cell_key(1, "user-1");
    /// let request = FleetCheck::new(Check::new(cell, quota, 1), 1, gate.fleet_id(1, "user-1"));
    /// let d = gate.check_id(&limiter, &request);
    /// assert!(d.is_allowed());
    /// gate.charge_more_id(&limiter, &request.with_cost(59), &d); // it cost 60
    /// assert!(limiter.peek_all(&[Check::new(cell, quota, 1)])[0].is_denied());
    /// ```
    pub fn charge_more_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        charged: &Decision,
    ) {
        self.charge_more_counted(limiter, request, charged);
    }

    /// [`charge_more_id`](Self::charge_more_id), returning the units charged
    /// locally (what a later refund may hand back).
    pub(crate) fn charge_more_counted<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        charged: &Decision,
    ) -> u32 {
        let local = &request.local;
        if local.cost == 0 || charged.is_denied() {
            return 0;
        }
        let now = limiter.clock().now();
        let fleet_id = request.counted_id(charged);
        let charged = limiter.charge_placed_at(local.cell, &local.quota, local.cost, placement_of(charged), now);
        if charged == 0 || local.quota.burst() > MAX_FLEET_BURST || self.limits_locally(&local.quota) {
            return charged;
        }
        let Some(place) = self.place(now) else {
            return charged;
        };
        let round = self.round.load(Ordering::Relaxed);
        // Into the key's slot of this epoch; a settlement that ends after
        // the epoch turned (a long download) claims one as a check would,
        // so the units still reach the fleet's count. What was charged
        // locally (at most two buckets), within the pending word's headroom.
        let at = self.slots(place, fleet_id);
        self.count(&at, request.route, fleet_id, round, charged.min(MAX_FLEET_BURST));
        // A charge after the decision can take a key past its share (a
        // cold key is held to it at admission only): if the next request
        // would be refused, mark the key as a refusal would, so the next
        // round turns it hot and the fleet sees these units.
        let after = self.look(fleet_id, &local.quota, 1, now);
        if let (Some(Fit::Exceeds { .. }), Some(at)) = (after.fit, &after.at) {
            self.refused(at, request.route, round);
        }
        charged
    }
}

/// Takes up to `units` out of the slot's not-yet-taken count for `slice`
/// (never below zero, never out of units a round took for a push); returns
/// what it could not take.
fn take_back_pending(slot: &Slot, slice: u64, units: u64) -> u64 {
    if units == 0 {
        return 0;
    }
    let p = (slice & 1) as usize;
    let tag = Pending::tag(slice);
    let mut taken = 0;
    let _ = slot.pending[p].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
        let (t, unconfirmed, unpushed) = Pending::unpack(v);
        taken = if t == tag { unpushed.min(units) } else { 0 };
        (taken > 0).then(|| Pending::pack(t, unconfirmed, unpushed - taken))
    });
    units - taken
}
