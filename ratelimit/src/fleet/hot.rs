//! Hot and cold keys: the gate's Redis work grows with the keys that can
//! reach their limit, not with every active key.
//!
//! A key is **cold** on an instance while that instance holds it to its
//! share of the fleet budget, `budget / N` for N live instances (the
//! roster, read every round). A cold key is decided locally: its units
//! stay in the sync loop's history, it is never pushed or read, and it
//! costs Redis nothing. If every instance keeps a key cold, each admits
//! less than `budget / N` in any window, so the fleet admits less than the
//! budget.
//!
//! A key turns **hot** on an instance when the fleet refuses it there (at
//! its share, or at the budget). That round pushes what the instance used
//! of it while cold, into the slices it used it in, pushes and reads it
//! from then on, and marks it in the fleet's list of hot keys of the epoch
//! (`RPUSH`). Every instance reads the marks new since its last round
//! (`LRANGE` from where it left off) and, from its next round, pushes and
//! reads every marked key it serves, what it used of it while cold
//! included. A key stays hot on an instance for as long as the instance
//! keeps its history (it was requested within the window); a key still
//! hot re-marks itself once per epoch, so marks of the window's two epochs
//! cover it.
//!
//! The bound. While the key is cold elsewhere, what the other instances
//! used of it is at most their shares and not yet in Redis: so an instance
//! that turned a key hot still holds it to its share for [`HOLD_ROUNDS`]
//! rounds, long enough for every other instance to read the mark (within a
//! round) and push (in its next). After that, what any instance has not
//! pushed is what it admitted in the last round trip, the staleness term
//! of `docs/global.md`: the busiest window stays within `budget + (N - 1) ·
//! r · (S + RTT)`. A key new to an instance is held to its share until the
//! instance's round turns it hot, so its first requests there are bounded
//! by the share, not by the staleness term.

use std::sync::atomic::Ordering;

use super::delta::{ColdTakes, Take};
use super::gate::FleetGate;
use super::history::History;
use super::history::KeyHistory;
use super::ids::NONZERO;
use super::marks::hot_list;
use super::store::{Counter, OpResult, SyncOp};
use super::store::{FleetError, FleetStore};
use super::table::{pack, tag32, BACKLOG};
use super::visit::Works;
use crate::Clock;

/// Rounds an instance holds a key it turned hot to its share: the round
/// that marks it, the others' next round that reads the mark, and the one
/// after in which they have pushed what they used of it cold.
pub(super) const HOLD_ROUNDS: u64 = 3;

/// How many cold keys' histories a round loads ahead of the one it works
/// on. A round's cold keys are a few of a large map, each in lines of its
/// own: loads that do not wait on one another miss the cache together,
/// where one key's work between two lookups made them miss one after
/// another. A few keys' lines fit the first-level cache.
const AHEAD: usize = 16;

/// A push of what a hot key used while cold, into one slice.
pub(super) struct OwnPush {
    pub(super) key: u64,
    /// The operation.
    pub(super) op: usize,
    /// The slice.
    pub(super) slice: u64,
    /// The epoch of the counter it goes to.
    pub(super) epoch: u64,
}

impl FleetGate {
    /// The pushes of what each hot key used while it was cold here (its
    /// `own` units in the history), into the slices it used them in (so
    /// they count exactly as long as they were in the window). An instance
    /// that already reads the key and no longer reads those slices re-reads
    /// its whole window when it sees this round's mark (`HotKeys::after`).
    pub(super) fn cold_units_to_push(
        &self,
        ops: &mut Vec<SyncOp>,
        history: &History,
        hot: impl Iterator<Item = (u64, u32)>,
        s: u64,
    ) -> Vec<OwnPush> {
        let k = u64::from(self.window.slices());
        let mut pushes = Vec::new();
        for (key, route) in hot {
            let Some(h) = history.keys.get(&key).filter(|h| h.own_cold) else {
                continue;
            };
            for j in s.saturating_sub(k)..=s {
                let (_, units) = h.get(j);
                if units == 0 {
                    continue;
                }
                let epoch = self.window.epoch_of(j);
                pushes.push(OwnPush {
                    key,
                    op: ops.len(),
                    slice: j,
                    epoch,
                });
                ops.push(SyncOp::Add {
                    counter: Counter { route, key, epoch },
                    slice: self.window.slice_in_epoch(j),
                    delta: units,
                    // This instance never gave the counter a TTL.
                    expire: true,
                });
            }
        }
        pushes
    }
}

impl FleetGate {
    /// Marks keys hot for the whole fleet through `store` (their fleet
    /// ids, [`fleet_id`](Self::fleet_id)), as an instance the fleet refused
    /// them on does: every instance that reads the mark (this one in its
    /// next round) pushes and reads them from its round after, instead of
    /// holding them to their share. For keys known to be busy (a large
    /// tenant behind one key), so they never wait at their share; a mark
    /// lasts this epoch and the next, and instances that hold a key hot
    /// mark it again every epoch.
    ///
    /// ```
    /// use ratelimit::fleet::{FleetGate, GateSettings, MemoryFleetStore};
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let clock = ManualClock::new();
    /// let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let store = MemoryFleetStore::new();
    /// gate.mark_hot(&store, &clock, &[gate.fleet_id(1, "tenant-7")]).await.unwrap();
    /// gate.sync_once(&store, &clock).await.unwrap(); // reads the mark
    /// assert!(gate.check(&limiter, 1, "tenant-7", &Quota::per_minute(600), 1).is_allowed());
    /// let round = gate.sync_once(&store, &clock).await.unwrap();
    /// assert_eq!((round.hot_keys, round.pushed), (1, 1));
    /// # });
    /// ```
    pub async fn mark_hot<G: FleetStore, C: Clock>(
        &self,
        store: &G,
        clock: &C,
        fleet_ids: &[u64],
    ) -> Result<(), FleetError> {
        let epoch = self.window.epoch_of(self.window.locate(self.wall(clock.now())).slice);
        let mark = SyncOp::Append {
            counter: hot_list(epoch),
            ids: fleet_ids.iter().map(|id| id | NONZERO).collect(),
            expire: true,
        };
        match store.sync(&[mark], self.counter_ttl()).await?.first() {
            Some(OpResult::Added(_)) => Ok(()),
            Some(OpResult::Failed(e)) => Err(e.clone()),
            _ => Err(FleetError::new("the store answered a hot mark with something else")),
        }
    }
}

/// Where a round keeps its cold keys' units: the slice, the history ring's
/// length, and when the units were taken.
#[derive(Clone, Copy)]
pub(super) struct Kept {
    pub(super) s: u64,
    pub(super) len: usize,
    pub(super) taken_at: u64,
    /// The round's wall time (its closed sums are written at it).
    pub(super) wall: u64,
}

impl FleetGate {
    /// Cold keys' units stay here: in the history as this instance's own
    /// (what the key pushes when it turns hot), and in the slot as the
    /// slice's total. The caller confirms the takes once every closed sum
    /// holding them is written (totals first, confirmations next, as for
    /// pushes).
    pub(super) fn keep_cold_units(
        &self,
        history: &mut History,
        work: &mut Works<'_>,
        cold_takes: &[Take<'_>],
        at: Kept,
        active: bool,
    ) {
        let Kept { s, len, taken_at, wall } = at;
        for (i, t) in cold_takes.iter().enumerate() {
            if i % AHEAD == 0 {
                // The next few keys' histories and slots loaded together
                // (see `AHEAD`).
                for t in cold_takes.iter().skip(i).take(AHEAD) {
                    std::hint::black_box(history.keys.get(&t.key).map(KeyHistory::touch));
                    std::hint::black_box(t.slot.closed.load(Ordering::Relaxed));
                }
            }
            let h = history.keys.entry(t.key).or_insert_with(|| KeyHistory::new(len, s));
            if active {
                h.active_cold(s);
            } else {
                h.advance(s);
            }
            let (_, own) = h.get(t.word_slice);
            h.set(t.word_slice, None, Some(own + t.delta));
            h.date_own(&self.window, t.word_slice, taken_at, t.delta);
            h.own_cold = true;
            if t.word_slice < s {
                // Into a closed slice: its sum changes (and is written
                // again, also when a take of the key's previous slot comes
                // after the one that wrote it: `keep_cold_keys`).
                h.summed = None;
                work.at_mut(t.work).summed = false;
            }
            if t.parity != BACKLOG {
                let (pulled, own) = h.get(t.word_slice);
                t.slot.fleet[(t.word_slice & 1) as usize]
                    .store(pack(tag32(t.word_slice), pulled + own), Ordering::Relaxed);
            }
            if t.sums {
                // Its last units of the round are in: its closed sum now,
                // while its history is in the cache (a round visits many
                // keys, each once).
                self.write_cold_closed(h, t.slot, s, wall);
                work.at_mut(t.work).summed = active;
            }
        }
    }

    /// The active cold keys' part of a round, none of which waits on the
    /// store (the round runs it while its round trip is out): their units
    /// kept ([`keep_cold_units`](Self::keep_cold_units)), their histories
    /// brought to this slice, their closed sums written, and only then
    /// their takes confirmed. Returns how many keys.
    pub(super) fn keep_cold_keys(
        &self,
        history: &mut History,
        work: &mut Works<'_>,
        takes: ColdTakes<'_>,
        at: Kept,
    ) -> usize {
        let takes = takes.kept();
        self.keep_cold_units(history, work, &takes, at, true);
        let mut keys = 0;
        for (&key, w) in work.iter().filter(|(_, w)| w.active && !w.hot) {
            keys += 1;
            if w.summed {
                // Done with its units (most keys: one lookup of their
                // history, not two).
                continue;
            }
            let h = history.keys.entry(key).or_insert_with(|| KeyHistory::new(at.len, at.s));
            h.active_cold(at.s);
            // Nothing later in the round changes a cold key's history: its
            // closed sum now, while its history is at hand.
            if let Some(slot) = w.current {
                self.write_cold_closed(h, slot, at.s, at.wall);
            }
        }
        for t in &takes {
            t.confirm();
        }
        keys
    }

    /// What hot keys used while cold, after the round: pushed (their own
    /// units now in the totals the reads bring back), or kept to push again
    /// (refused), or kept as this instance's own and never sent again (may
    /// have applied).
    pub(super) fn after_cold_pushes(
        &self,
        history: &mut History,
        own_pushes: &[OwnPush],
        results: &[OpResult],
        work: &mut Works<'_>,
        first_error: &mut Option<FleetError>,
    ) {
        for push in own_pushes {
            let Some(h) = history.keys.get_mut(&push.key) else {
                continue;
            };
            match &results[push.op] {
                OpResult::Added(Some(_)) => {
                    // In the totals the reads (after it) bring back.
                    h.set(push.slice, None, Some(0));
                    h.own_cold = false;
                    if let Some((_, Some(key_ops))) = work.get_with_ops(&push.key) {
                        key_ops.expired = key_ops.expired.max(Some(push.epoch));
                    }
                }
                // Refused: sent again next round.
                OpResult::Failed(e) if e.is_unsent() => {
                    first_error.get_or_insert_with(|| e.clone());
                    if let Some(w) = work.get_mut(&push.key) {
                        w.failed = true;
                    }
                }
                // May have applied: never sent again, counted here as this
                // instance's own until their slices leave the window.
                other => {
                    h.own_cold = false;
                    if let OpResult::Failed(e) = other {
                        first_error.get_or_insert_with(|| e.clone());
                    }
                    if let Some(w) = work.get_mut(&push.key) {
                        w.failed = true;
                    }
                }
            }
        }
    }
}
