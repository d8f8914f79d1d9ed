//! A round's closed sums: what requests read of a key's window (its
//! closed slices, pulled totals plus this instance's own units), written
//! into the key's slot once the round knows them.

use std::sync::atomic::Ordering;

use super::gate::FleetGate;
use super::history::KeyHistory;
use super::hot::HOLD_ROUNDS;
use super::table::{Closed, Pending, Slot, ROUND};
use super::visit::Work;

impl FleetGate {
    /// Writes a hot key's closed sum (`h`'s) into its slot in the current
    /// table (`slot`): pulled totals plus this instance's units not in them
    /// (the slice just closed from its slot; older ones as kept).
    /// `unread`: the round did not read it (reads rationed).
    pub(super) fn write_closed(&self, h: &mut KeyHistory, w: &Work<'_>, unread: bool, slot: &Slot, at: Summed) {
        let Summed {
            s,
            epoch,
            wall,
            round_now,
        } = at;
        let last = s.wrapping_sub(1);
        // Held to its share: not read this round; or turned hot so
        // recently that other instances may not have pushed what they used
        // of it while it was cold (`hot.rs`).
        let held = unread || h.hot.is_some_and(|r| round_now.wrapping_sub(r) & ROUND < HOLD_ROUNDS);
        if let Some(holder) = self.slot_of(last, epoch, w) {
            h.set(
                last,
                None,
                Some(Pending::units(
                    holder.pending[(last & 1) as usize].load(Ordering::Relaxed),
                    last,
                )),
            );
        }
        // A hot key is summed again next round: its release is the next
        // quarter's.
        let release = h.release(&self.window, s, wall, true);
        let held = if held { Closed::HELD } else { 0 };
        slot.closed.store(
            Closed::released(s, h.closed_sum(&self.window, s, wall), release) | held,
            Ordering::Relaxed,
        );
        h.summed = Some(s);
    }

    /// A cold key's closed sum, held to its share; its release waits for
    /// the slice's end. Written once per slice while its closed slices do
    /// not change (its new units are in the open slice, which requests
    /// count from the slot).
    pub(super) fn write_cold_closed(&self, h: &mut KeyHistory, slot: &Slot, s: u64, wall: u64) {
        if h.summed == Some(s) {
            return;
        }
        let release = h.release(&self.window, s, wall, false);
        slot.closed.store(
            Closed::released(s, h.closed_sum(&self.window, s, wall), release) | Closed::HELD,
            Ordering::Relaxed,
        );
        h.summed = Some(s);
    }

    /// The slot holding this instance's units of `slice`: the current
    /// epoch's, or the previous epoch's for its last slices.
    pub(super) fn slot_of<'a>(&self, slice: u64, epoch: u64, w: &Work<'a>) -> Option<&'a Slot> {
        if self.window.epoch_of(slice) == epoch {
            w.current
        } else {
            w.previous
        }
    }
}

/// Where a round writes closed sums ([`FleetGate::write_closed`]).
#[derive(Clone, Copy)]
pub(super) struct Summed {
    pub(super) s: u64,
    pub(super) epoch: u64,
    pub(super) wall: u64,
    pub(super) round_now: u64,
}
