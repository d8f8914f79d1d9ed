//! Tracking a key in the gate's tables: where a request falls (its slice,
//! its epoch, the epoch's table), the key's slot there (claimed on its
//! first admitted request of the epoch, carrying over what the previous
//! epoch's slot knew), and the admitted units counted in it for the sync
//! loop to push.

use std::sync::atomic::Ordering;

use super::gate::FleetGate;
use super::table::{touch, touch_refused, touched, Closed, Pending, Place, Slot, Slots, Table};
use crate::engine::window::SlidingWindow;

impl FleetGate {
    /// Where `now` falls; `None` when the sync loop has not prepared its
    /// epoch's table (the request is then limited locally only).
    #[inline]
    pub(super) fn place(&self, now: u64) -> Option<Place<'_>> {
        let (slice, into, epoch) = self.locate(self.wall(now));
        let table = &self.tables[(epoch % 3) as usize];
        if table.epoch.load(Ordering::Acquire) != epoch {
            return None;
        }
        Some(Place {
            slice,
            into,
            epoch,
            table,
        })
    }

    /// `fleet_id`'s slots at `place` (no claim).
    #[inline(always)]
    pub(super) fn slots<'g>(&'g self, place: Place<'g>, fleet_id: u64) -> Slots<'g> {
        let own = place.table.find(fleet_id);
        let previous = match own {
            Some(_) => None,
            None => self.previous_slot(place.epoch, fleet_id),
        };
        // A hot key claims from the reserve: not untracked.
        let untracked = own.is_none() && !place.table.open_to_cold() && !self.is_hot(&place, previous, fleet_id);
        Slots {
            place,
            own,
            previous,
            untracked,
        }
    }

    /// Counts an admitted request of `cost` for `fleet_id` at its slots,
    /// claiming the key's slot if it has none (its first admitted request
    /// of the epoch). An untracked key is counted as such, and claims
    /// nothing (the table is closed to it).
    #[inline(always)]
    pub(super) fn count(&self, at: &Slots<'_>, route: u32, fleet_id: u64, round: u64, cost: u32) {
        let slot = match at.own {
            Some(slot) => Some(slot),
            None if at.untracked => {
                self.untracked.fetch_add(1, Ordering::Relaxed);
                at.place.table.add_untracked(fleet_id, u64::from(cost));
                None
            }
            None => {
                let claimed = self.claim(&at.place, fleet_id, at.previous, route, round);
                if claimed.is_none() {
                    // No room in its probe window: the sketch counts it.
                    at.place.table.add_untracked(fleet_id, u64::from(cost));
                }
                claimed
            }
        };
        if let Some(slot) = slot {
            touch(slot, route, round);
            // Units first, then the mark: a round that clears the mark
            // before this one is set takes these units, or the mark brings
            // the slot to the next round.
            if add_pending(slot, at.place.slice, cost) {
                at.place.table.mark(slot);
            }
        }
    }

    /// Marks a request the fleet refused on the key's slot, so the next
    /// round reads it first, and turns it hot. A refused key has a slot:
    /// the fleet refuses only a key with units in the window (an empty
    /// window always fits one request), and those are counted in a slot.
    #[inline]
    pub(super) fn refused(&self, at: &Slots<'_>, route: u32, round: u64) {
        let (slot, table) = match (at.own, at.previous) {
            (Some(slot), _) => (slot, Some(at.place.table)),
            (None, Some(slot)) => (slot, self.previous_table(at.place.epoch)),
            (None, None) => return,
        };
        touch_refused(slot, route, round);
        if let Some(table) = table {
            table.mark(slot);
        }
    }

    /// Claims `fleet_id`'s slot in `place`'s table for its first request of
    /// the epoch, carrying over what the previous epoch's slot knew (from
    /// the reserve for a hot key once the table is closed to cold ones).
    /// `None` when its probe window is full: the key is limited locally
    /// only, and counted (the sync loop exports the count: no metrics call
    /// per request).
    fn claim<'t>(
        &self,
        place: &Place<'t>,
        fleet_id: u64,
        previous: Option<&Slot>,
        route: u32,
        round: u64,
    ) -> Option<&'t Slot> {
        let reserve = !place.table.open_to_cold() && self.is_hot(place, previous, fleet_id);
        self.claim_from(place, fleet_id, previous, route, round, reserve)
    }

    /// Claims `fleet_id`'s slot (from the reserve too when `reserve`),
    /// starting from what the previous epoch's slot knew and what the
    /// sketches counted of the key while it had no slot (dated now: more
    /// than it used, never less).
    fn claim_from<'t>(
        &self,
        place: &Place<'t>,
        fleet_id: u64,
        previous: Option<&Slot>,
        route: u32,
        round: u64,
        reserve: bool,
    ) -> Option<&'t Slot> {
        let slice = place.slice;
        let sketched = match previous {
            // Its units of the last epoch are in that slot.
            Some(_) => place.table.untracked_units(fleet_id),
            None => self.untracked_units(place, fleet_id),
        };
        let claimed = place.table.slot(fleet_id, reserve, |fresh| {
            fresh.touched.store(touched(route, round), Ordering::Relaxed);
            if let Some(p) = previous {
                carry_over(p, fresh, slice, &self.window);
            }
            if sketched > 0 {
                fresh.add_backlog(slice, sketched);
            }
        });
        if claimed.is_none() {
            self.untracked.fetch_add(1, Ordering::Relaxed);
        }
        claimed
    }

    /// Whether `fleet_id` is hot, as a request can tell: the fleet read it
    /// in the previous epoch (its slot there holds a sum read from the
    /// store), or a round of this epoch or the last read the fleet's mark.
    #[inline]
    fn is_hot(&self, place: &Place<'_>, previous: Option<&Slot>, fleet_id: u64) -> bool {
        previous.is_some_and(|p| Closed::is_read(p.closed.load(Ordering::Relaxed)))
            || place.table.fleet_hot(fleet_id)
            || self.previous_table(place.epoch).is_some_and(|t| t.fleet_hot(fleet_id))
    }

    /// What the sketches counted of `fleet_id` in the window: this
    /// epoch's, and the last one's (a key with no slot there; one with a
    /// slot there counts it in the slot).
    #[inline]
    pub(super) fn untracked_units(&self, place: &Place<'_>, fleet_id: u64) -> u64 {
        let before = self
            .previous_table(place.epoch)
            .map_or(0, |t| t.untracked_units(fleet_id));
        place.table.untracked_units(fleet_id) + before
    }

    /// A key the fleet refuses with no slot here (untracked, or counted
    /// only in the previous epoch's sketch) claims one, from the reserve if
    /// need be ([`claim`](Self::claim)'s). Refused there, it turns hot: from
    /// the next round its units (what the sketches counted among them) are
    /// pushed and the fleet's read, like any hot key's. Without a slot it
    /// could not turn hot, and what it used here would never reach the
    /// fleet's count while other instances read it hot. `false` when the
    /// reserve has no slot for it either (it stays held to its share by the
    /// sketch).
    pub(super) fn reserve(&self, at: &Slots<'_>, route: u32, fleet_id: u64, round: u64) -> bool {
        match self.claim_from(&at.place, fleet_id, at.previous, route, round, true) {
            Some(slot) => {
                at.place.table.mark(slot);
                true
            }
            None => false,
        }
    }

    /// The key's slot in the previous epoch's table, if that table still
    /// holds the previous epoch.
    #[inline]
    pub(super) fn previous_slot(&self, epoch: u64, fleet_id: u64) -> Option<&Slot> {
        self.previous_table(epoch)?.find(fleet_id)
    }

    /// The previous epoch's table, if it still holds that epoch.
    #[inline]
    pub(super) fn previous_table(&self, epoch: u64) -> Option<&Table> {
        let before = epoch.checked_sub(1)?;
        let table = &self.tables[((epoch + 2) % 3) as usize];
        (table.epoch.load(Ordering::Acquire) == before).then_some(table)
    }
}

/// Counts an admitted request of `cost` in `slice`, as not yet pushed;
/// true when they are the word's first units since a round took it (the
/// slot then needs the next round).
#[inline]
fn add_pending(slot: &Slot, slice: u64, cost: u32) -> bool {
    let p = (slice & 1) as usize;
    let tag = Pending::tag(slice);
    let v = slot.pending[p].load(Ordering::Relaxed);
    let (t, _, unpushed) = Pending::unpack(v);
    // Half the field as headroom for concurrent adds (costs are at most
    // MAX_FLEET_BURST, a quarter of it).
    if t == tag && unpushed + u64::from(cost) <= Pending::COUNT / 2 {
        // The common case: one atomic add to the low field (a sync loop
        // taking the field meanwhile moves it whole, and a request that
        // re-tags the word for a newer slice gets this unit: a slice late,
        // never lost).
        let before = slot.pending[p].fetch_add(u64::from(cost), Ordering::AcqRel);
        return before & Pending::COUNT == 0;
    }
    let before = slot.pending[p].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
        let (t, unconfirmed, unpushed) = Pending::unpack(v);
        Some(if t == tag {
            Pending::pack(tag, unconfirmed, unpushed + u64::from(cost))
        } else {
            // The word held the slice two before, normally drained by the
            // sync loop during the last one.
            Pending::pack(tag, 0, u64::from(cost))
        })
    });
    let Ok(old) = before else { return true };
    let (t, _, unpushed) = Pending::unpack(old);
    if t != tag && unpushed > 0 {
        // No round took them (an outage): kept, counted and pushed later,
        // never lost. (Units a round took are in flight: a push that comes
        // back unsent hands them to the backlog.)
        slot.add_backlog(slice.wrapping_sub(Pending::age(slice, t)), unpushed);
    }
    t != tag || unpushed == 0
}

/// A fresh slot starts from what the previous epoch's slot knew: its
/// estimate of the window so far, as the closed sum for this slice, until
/// the sync loop writes the slot.
pub(super) fn carry_over(previous: &Slot, fresh: &Slot, slice: u64, window: &SlidingWindow) {
    let held = Closed::is_held(previous.closed.load(Ordering::Relaxed));
    let carried = match previous.used(window, slice, 0) {
        Some(used) if held => Closed::held(slice, used.saturating_sub(previous.open_units(slice))),
        Some(used) => Closed::word(slice, used.saturating_sub(previous.open_units(slice))),
        None => Closed::degraded(slice),
    };
    fresh.closed.store(carried, Ordering::Relaxed);
}
