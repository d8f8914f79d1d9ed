//! One sync round: push this instance's deltas and pull the fleet's totals
//! of the slices that may still change, keep the closed slices' totals in
//! the history (`history.rs`), and hand each key's estimate to the request
//! path through its slot. The background task that runs a round every
//! `sync_interval` is in `task.rs`.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use super::closed::Summed;
use super::delta::{hand_back, ColdTakes, Take};
use super::gate::FleetGate;
use super::history::{Histories, History, KeyHistory, Taken};
use super::hot::Kept;
use super::names::UNTRACKED;
use super::ration::{rank, Roster};
use super::store::{Counter, FleetError, FleetStore, OpResult, SyncOp};
use super::table::{pack, tag32, Closed, ROUND};
use super::visit::{Place, Tables, Visit};
use crate::Clock;

impl FleetGate {
    /// One sync round: push this instance's deltas, pull the fleet totals of
    /// the keys active recently, prepare the next epoch's table. What the
    /// background loop ([`spawn_sync`](Self::spawn_sync)) runs; tests call it
    /// directly.
    pub async fn sync_once<G: FleetStore, C: Clock>(&self, store: &G, clock: &C) -> Result<SyncReport, FleetError> {
        self.refresh_offset(clock);
        let wall = self.wall(clock.now());
        let s = self.window.locate(wall).slice;
        let epoch = self.window.epoch_of(s);
        let k = u64::from(self.window.slices());
        let round = self.round.load(Ordering::Relaxed);

        // The next epoch's table held epoch - 2, drained long ago.
        let next = &self.tables[((epoch + 1) % 3) as usize];
        if next.epoch.load(Ordering::Acquire) != epoch + 1 {
            next.reset(epoch + 1);
        }
        let current = &self.tables[(epoch % 3) as usize];
        if current.epoch.load(Ordering::Acquire) != epoch {
            // Far behind (a long outage): start this epoch afresh.
            current.reset(epoch);
        }
        let previous = Some(&self.tables[((epoch + 2) % 3) as usize])
            .filter(|t| epoch > 0 && t.epoch.load(Ordering::Acquire) == epoch - 1);

        // Out of its mutex for the round (requests never lock it); put back
        // however the round ends, a timeout's cancellation included.
        let mut history = Taken::new(&self.history);

        // Slices up to this one are final: every instance has pushed into
        // them, and none reads them again.
        let settle = self.settle_ns.load(Ordering::Relaxed);
        let final_slice = (wall.saturating_sub(settle) / self.window.slice_ns()).checked_sub(1);

        // 1. The keys of the round and their deltas (`visit.rs`).
        let tables = Tables { previous, current };
        let Visit {
            takes,
            mut cold_takes,
            mut work,
            taken_at,
        } = self.visit(
            &mut history,
            tables,
            Place {
                s,
                epoch,
                round,
                final_slice,
            },
            clock,
        );
        // The cold takes of active keys are kept while the round trip is
        // out; idle keys' after it, with the idle keys' pass.
        let cold_active = ColdTakes::new(cold_takes.extract_if(.., |t| work.at(t.work).active).collect());
        let cold_takes = ColdTakes::new(cold_takes);
        let len = (k + 2) as usize;

        // 2. The operations: the units hot keys used while cold first, then
        // every push, then the reads (of the same counters, so they include
        // this round's pushes).
        let mut ops: Vec<SyncOp> = Vec::with_capacity(takes.len() + work.len());
        let own_pushes = self.cold_units_to_push(&mut ops, &history, work.hot().map(|(&key, w, _)| (key, w.route)), s);
        let first_take = ops.len();
        for t in &takes {
            let epoch_of_take = self.window.epoch_of(t.slice);
            // One TTL per counter and instance is enough (it covers the
            // epoch and the window after it).
            let expire = history.keys.get(&t.key).and_then(|h| h.expire_epoch) < Some(epoch_of_take);
            // (A take of this list is a hot key's: it has operations.)
            let route = match work.get_with_ops(&t.key) {
                Some((w, key_ops)) => {
                    if let Some(key_ops) = key_ops {
                        key_ops.units += t.delta;
                        if let Some(free) = key_ops.pushed.iter_mut().find(|p| p.is_none()) {
                            *free = Some((t.slice, None));
                        }
                    }
                    w.route
                }
                None => 0,
            };
            ops.push(SyncOp::Add {
                counter: Counter {
                    route,
                    key: t.key,
                    epoch: epoch_of_take,
                },
                slice: self.window.slice_in_epoch(t.slice),
                delta: t.delta,
                expire,
            });
        }
        // Reads of the hot keys, rationed while rounds run long: the
        // busiest first.
        let unread = history
            .ration
            .unread(work.hot().filter(|(_, w, _)| w.active).map(|(&key, w, key_ops)| {
                let read_before = history.keys.get(&key).is_some_and(|h| h.read);
                (rank(w.refused, read_before, key_ops.units), key)
            }));
        for key in unread {
            if let Some((_, Some(key_ops))) = work.get_with_ops(&key) {
                key_ops.unread = true;
            }
        }
        for (&key, w, key_ops) in work.hot_mut().filter(|(_, w, key_ops)| w.active && !key_ops.unread) {
            let from = history
                .keys
                .get(&key)
                .and_then(|h| h.final_upto)
                .map_or(0, |f| f + 1)
                .max(s.saturating_sub(k));
            // The newest slices pushed this round need no read: the push
            // answers their totals.
            let mut end = Some(s);
            while let Some(e) = end.filter(|&e| e >= from && key_ops.pushed.iter().flatten().any(|&(p, _)| p == e)) {
                end = e.checked_sub(1);
            }
            let Some(end) = end else { continue };
            let mut first = from;
            for read in key_ops.reads.iter_mut() {
                if first > end {
                    break;
                }
                let e = self.window.epoch_of(first);
                let last = end.min(self.window.first_slice(e + 1) - 1);
                *read = Some((first, ops.len() as u32));
                ops.push(SyncOp::Read {
                    counter: Counter {
                        route: w.route,
                        key,
                        epoch: e,
                    },
                    slices: self.window.slice_in_epoch(first)..self.window.slice_in_epoch(last) + 1,
                });
                first = last + 1;
            }
        }

        // Counters a push may have recreated without a TTL get one now.
        let mut maintenance: Vec<(u64, usize)> = Vec::new();
        // (Only hot keys push, so only they have a counter to recreate.)
        for (&key, _, _) in work.hot().filter(|(_, w, _)| w.active) {
            if let Some(&(counter, slice)) = history.keys.get(&key).and_then(|h| h.reexpire.as_deref()) {
                maintenance.push((key, ops.len()));
                ops.push(SyncOp::Add {
                    counter,
                    slice,
                    delta: 0,
                    expire: true,
                });
            }
        }

        // The roster of live instances (joined once per epoch, read every
        // round: it sets the cold keys' share), then the fleet's hot keys:
        // those this instance holds hot and has not marked this epoch, and
        // the marks new since the last round.
        let roster = Roster::ops(&mut ops, epoch, history.roster.joined);
        let mark: Vec<u64> = work
            .hot()
            .filter(|(key, w, _)| w.active && history.keys.get(key).and_then(|h| h.marked) != Some(epoch))
            .map(|(&key, _, _)| key)
            .collect();
        let hot_ops = history.hot.ops(&mut ops, epoch, mark);

        // 3. One round trip, and meanwhile the active cold keys' part of
        // the round, which waits on nothing the store answers (its first
        // poll sends the pipelines: the store's own tasks carry them).
        // Cancelled at its await (its timeout, a shutdown), the round hands
        // its idle keys' cold takes back (`ColdTakes`), and the next one
        // visits every slot (handed-back units carry no mark).
        history.rescan = true;
        let started = std::time::Instant::now();
        let ttl = self.counter_ttl();
        // (A connection is made first: it progresses only while polled.)
        let ready = store.ready().await;
        let mut round_trip = std::pin::pin!(async {
            match ready {
                Ok(()) => store.sync(&ops, ttl).await,
                Err(e) => Err(e),
            }
        });
        let first = std::future::poll_fn(|cx| Poll::Ready(round_trip.as_mut().poll(cx))).await;
        let sent_in = started.elapsed();
        let cold_started = std::time::Instant::now();
        let cold_keys = self.keep_cold_keys(&mut history, &mut work, cold_active, Kept { s, len, taken_at, wall });
        let cold_took = cold_started.elapsed();
        // What the store took: rationing reads only helps when the store is
        // what makes rounds long (the loop's own work is per key requested,
        // and a read less does not shorten it).
        let (outcome, store_took) = match first {
            Poll::Ready(outcome) => (outcome, sent_in),
            Poll::Pending => {
                let back = std::time::Instant::now();
                match std::future::poll_fn(|cx| Poll::Ready(round_trip.as_mut().poll(cx))).await {
                    // Back during the cold keys' work: counted as the time
                    // outside that work (less than it took: the ration is
                    // for a store that keeps rounds long, and this one did
                    // not).
                    Poll::Ready(outcome) => (outcome, sent_in + back.elapsed()),
                    // Still out: it took the whole time, on a runtime
                    // whose other threads ran its tasks meanwhile; on a
                    // current-thread runtime they waited for that work,
                    // which does not count.
                    Poll::Pending => {
                        let outcome = round_trip.await;
                        let took = started.elapsed();
                        let alongside = tokio::runtime::Handle::try_current()
                            .is_ok_and(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread);
                        (
                            outcome,
                            if alongside {
                                took
                            } else {
                                took.saturating_sub(cold_took)
                            },
                        )
                    }
                }
            }
        };
        history.rescan = false;
        self.round.fetch_add(1, Ordering::Relaxed);
        let results = match outcome {
            Ok(r) if r.len() == ops.len() => r,
            other => {
                let e = match other {
                    Err(e) => e,
                    Ok(r) => FleetError::new(format!(
                        "store answered {} results for {} operations",
                        r.len(),
                        ops.len()
                    )),
                };
                for t in &takes {
                    if e.is_unsent() {
                        hand_back(t);
                    }
                }
                // The idle keys' cold takes, never sent, are handed back as
                // they drop: taken again next round. (The active keys' are
                // kept: their units are this instance's own whatever the
                // store answers.)
                // The next round pulls every key's window afresh; this
                // instance's own units in the history stay counted, and
                // every slot is visited (handed-back units carry no mark).
                history.forget_pulls();
                history.rescan = true;
                drop(history);
                return Err(self.fail(e));
            }
        };

        // 4. What came back.
        let mut report = SyncReport {
            keys: work.len(),
            operations: ops.len(),
            store_time: store_took,
            ..SyncReport::default()
        };
        let mut first_error: Option<FleetError> = None;
        let mut confirmed: Vec<&Take<'_>> = Vec::with_capacity(takes.len());
        for ((t, result), op) in takes.iter().zip(&results[first_take..]).zip(&ops[first_take..]) {
            match result {
                OpResult::Added(Some(total)) => {
                    confirmed.push(t);
                    if let Some((_, key_ops)) = work.get_with_ops(&t.key) {
                        // The slot learns the slice's total now, so the
                        // confirmation below never leaves it out (idle keys
                        // included).
                        if t.slice == t.word_slice {
                            t.slot.fleet[(t.slice & 1) as usize].store(pack(tag32(t.slice), *total), Ordering::Relaxed);
                        }
                        if let Some(key_ops) = key_ops {
                            match op {
                                SyncOp::Add {
                                    expire: false,
                                    counter,
                                    slice,
                                    ..
                                } if *total == t.delta => key_ops.recreated = Some((*counter, *slice)),
                                SyncOp::Add {
                                    expire: true, counter, ..
                                } => key_ops.expired = key_ops.expired.max(Some(counter.epoch)),
                                _ => {}
                            }
                            for p in key_ops.pushed.iter_mut().flatten() {
                                if p.0 == t.slice {
                                    p.1 = Some(*total);
                                }
                            }
                        }
                    }
                }
                // Applied, total unknown (a cluster pipeline recovered
                // after another key's error): kept as this instance's own,
                // counted until its slice leaves the window.
                OpResult::Added(None) => {
                    if let Some(w) = work.get_mut(&t.key) {
                        w.failed = true;
                    }
                    first_error.get_or_insert_with(|| FleetError::new("redis: a push applied without its total"));
                }
                OpResult::Failed(e) => {
                    // Refused: sent again next round. Anything else may have
                    // applied: never sent again, counted here as this
                    // instance's own until its slice leaves the window.
                    if e.is_unsent() {
                        hand_back(t);
                    }
                    first_error.get_or_insert_with(|| e.clone());
                    if let Some(w) = work.get_mut(&t.key) {
                        w.failed = true;
                    }
                }
                OpResult::Read(_) => {
                    first_error.get_or_insert_with(|| FleetError::new("store answered a read to a push"));
                    if let Some(w) = work.get_mut(&t.key) {
                        w.failed = true;
                    }
                }
            }
        }
        for &(key, i) in &maintenance {
            if let (OpResult::Failed(e), Some((w, key_ops))) = (&results[i], work.get_with_ops(&key)) {
                first_error.get_or_insert_with(|| e.clone());
                w.failed = true;
                if let (SyncOp::Add { counter, slice, .. }, Some(key_ops)) = (&ops[i], key_ops) {
                    key_ops.recreated = Some((*counter, *slice));
                }
            }
        }
        // The roster's own operations fail nothing: a refused join is sent
        // again, a failed read keeps the last count.
        if let Some(live) = history
            .roster
            .after(&roster, &results, self.live.load(Ordering::Relaxed))
        {
            self.live.store(live, Ordering::Relaxed);
        }
        let (new_marks, marked) = history.hot.after(hot_ops, &results);
        // With no key's operation in the round (every key cold), the
        // fleet's own ones tell whether the store answers.
        let keyed = match &results[..roster.first] {
            [] => &results[..],
            keyed => keyed,
        };
        if !keyed.is_empty() && keyed.iter().all(|r| matches!(r, OpResult::Failed(_))) {
            // Every operation failed (deltas already handed back where they
            // certainly did not apply): the whole gate is local-only.
            history.forget_pulls();
            history.rescan = true;
            drop(history);
            let e = first_error.unwrap_or_else(|| FleetError::new("every operation of the round failed"));
            return Err(self.fail(e));
        }
        // Keys that are idle, or failed, keep no history: they are pulled
        // whole when they are active and working again.
        // Idle keys keep their history while it still holds slices of the
        // window: the loop goes on ageing their closed sums (below).
        // (One part of the histories a round, each part every
        // `HISTORY_PARTS` rounds: an idle key's history may outlive the
        // window by that many rounds, and counts as it did at its end.)
        let History { keys, hot_here, .. } = &mut *history;
        let swept = keys.sweep(|key, h| h.active_until + k + 1 >= s || work.get(key).is_some_and(|w| w.active));
        hot_here.retain(|key| Histories::part(*key) != swept || keys.contains_key(key));
        // Idle cold keys' units, and what hot keys used while cold (`hot.rs`).
        let cold_takes = cold_takes.kept();
        self.keep_cold_units(
            &mut history,
            &mut work,
            &cold_takes,
            Kept { s, len, taken_at, wall },
            false,
        );
        self.after_cold_pushes(&mut history, &own_pushes, &results, &mut work, &mut first_error);
        for key in marked {
            if let Some(h) = history.keys.get_mut(&key) {
                h.marked = Some(epoch);
            }
        }
        let round_now = round & ROUND;
        let mut newly_hot = Vec::new();
        report.cold_keys = cold_keys;
        // The active hot keys (the cold ones are done).
        for (&key, w, key_ops) in work.hot_mut().filter(|(_, w, _)| w.active) {
            let h = history.keys.entry(key).or_insert_with(|| KeyHistory::new(len, s));
            h.advance(s);
            h.active_until = s;
            if w.hot && h.hot.is_none() {
                h.hot = Some(round_now);
                newly_hot.push(key);
            }
            h.reexpire = key_ops.recreated.map(Box::new);
            h.expire_epoch = if h.reexpire.is_some() {
                None
            } else {
                h.expire_epoch.max(key_ops.expired)
            };
            for &(slice, total) in key_ops.pushed.iter().flatten() {
                if let Some(total) = total {
                    h.set(slice, Some(total), None);
                }
            }
            report.hot_keys += 1;
            if key_ops.unread {
                // Not read, but its pushes answered the fleet's totals of
                // the slices they went to (recorded above), and its closed
                // sum is computed from the history with the read keys'
                // (below), so the slices between its last read and now keep
                // counting (a sum left as it was dropped them once they
                // left the slot's two open slices).
                report.unread_keys += 1;
                continue;
            }
            let reads = key_ops.reads;
            for &(first, i) in reads.iter().flatten() {
                match &results[i as usize] {
                    OpResult::Read(values) => {
                        for (j, v) in (first..).zip(values) {
                            h.set(j, Some(*v), None);
                        }
                    }
                    OpResult::Failed(e) => {
                        first_error.get_or_insert_with(|| e.clone());
                        w.failed = true;
                    }
                    OpResult::Added(_) => {
                        first_error.get_or_insert_with(|| FleetError::new("store answered a push to a read"));
                        w.failed = true;
                    }
                }
            }
            if w.failed {
                continue;
            }
            // The pulled totals of the open slices go to the slots holding
            // this instance's units in them (totals first, confirmations
            // next: a reader in between counts a delta twice, never not at
            // all).
            for j in [s.wrapping_sub(1), s] {
                if let Some(slot) = self.slot_of(j, epoch, w) {
                    let (pulled, _) = h.get(j);
                    slot.fleet[(j & 1) as usize].store(pack(tag32(j), pulled), Ordering::Relaxed);
                }
            }
            h.final_upto = final_slice.map(|f| f.min(s)).max(h.final_upto);
            h.read = true;
            report.pulled += 1;
        }
        for t in confirmed {
            if t.slice == t.word_slice {
                if let Some(h) = history.keys.get_mut(&t.key) {
                    h.date_own(&self.window, t.slice, taken_at, t.delta);
                }
            }
            t.confirm();
            report.pushed += t.delta;
        }
        history.hot_here.extend(newly_hot);
        // Idle keys (no longer pulled): their closed sums from what this
        // instance last knew, aged slice by slice, so what left the window
        // stops counting and what is still in it keeps counting.
        for (key, w) in work.idle() {
            let Some(h) = history.keys.get_mut(key) else { continue };
            // Back after idling, it counts as never read (others' use since
            // is unknown).
            h.read = false;
            let Some(slot) = w.current.or(w.previous) else { continue };
            h.advance(s);
            let held = if h.hot.is_some() { 0 } else { Closed::HELD };
            let release = h.release(&self.window, s, wall, false);
            slot.closed.store(
                Closed::released(s, h.closed_sum(&self.window, s, wall), release) | held,
                Ordering::Relaxed,
            );
        }
        // The cold keys' units leave their slots only now that every closed
        // sum holding them is written (active keys' above, with their
        // history; idle keys' just now). Confirmed before, an idle key's
        // backlog (left by an outage) was counted nowhere until its sum was
        // written: no longer in the slot's backlog, not yet in its sum.
        for t in &cold_takes {
            t.confirm();
        }
        // The closed sums: pulled totals plus this instance's units not in
        // them (the slice just closed from its slot; older ones as kept).
        // Unread keys too: their history holds the totals their pushes
        // answered and those last read, so the slices since their last read
        // keep counting (a sum left as it was dropped them).
        // (Cold keys' were written with their history, above.)
        let summed = Summed {
            s,
            epoch,
            wall,
            round_now,
        };
        // (Only hot keys have operations, so only they fail.)
        for (&key, w, key_ops) in work.hot().filter(|(_, w, _)| w.active) {
            let Some(slot) = w.current else { continue };
            if w.failed {
                slot.closed.store(Closed::degraded(s), Ordering::Relaxed);
                if let Some(p) = w.previous {
                    p.closed.store(Closed::degraded(s), Ordering::Relaxed);
                }
                report.failed_keys += 1;
                continue;
            }
            if let Some(h) = history.keys.get_mut(&key) {
                self.write_closed(h, w, key_ops.unread, slot, summed);
            }
        }
        for (key, _, _) in work.hot().filter(|(_, w, _)| w.failed) {
            if let Some(h) = history.keys.get_mut(key) {
                // Pulled whole, and its counter given a TTL again (someone
                // may have replaced it), when it works again.
                h.final_upto = None;
                h.expire_epoch = None;
            }
        }
        // The keys this round visited for what they used cold are done.
        history.to_visit.clear();
        // A key newly marked hot may have had units pushed into slices this
        // instance no longer reads: its next read takes the whole window (after this
        // round's reads, which set how far it has read).
        for key in new_marks {
            // For requests: a key hot elsewhere claims a slot here.
            self.tables[(epoch % 3) as usize].mark_fleet_hot(key);
            if let Some(h) = history.keys.get_mut(&key) {
                h.final_upto = None;
                if h.own_cold {
                    // Units it used cold, to push next round.
                    history.to_visit.push(key);
                }
            }
        }
        let failed_now = report.failed_keys > 0;
        let failed_before = std::mem::replace(&mut history.failed_before, failed_now);
        // Rounds that take more than half the interval ration the next
        // round's reads; fast ones lift the ration again.
        let took = store_took;
        history
            .ration
            .after_round(took, self.settings.sync_interval, report.pulled, work.len());
        // Keys the full table could not track, counted by requests in an
        // atomic and exported here (no metrics call on the request path).
        let untracked = self.status().untracked;
        if untracked > history.untracked_reported {
            metrics::counter!(UNTRACKED).increment(untracked - history.untracked_reported);
            history.untracked_reported = untracked;
        }
        drop(history);

        // 5. Health.
        self.round_succeeded(&report, first_error, failed_before, clock.now(), started);
        Ok(report)
    }

    /// How long a counter (and a roster or a hot list) lives in the store:
    /// the epoch and the window after it, a slice and a second more.
    pub(super) fn counter_ttl(&self) -> Duration {
        self.window.length() * 2 + Duration::from_nanos(self.window.slice_ns()) + Duration::from_secs(1)
    }
}

/// What one sync round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Keys in the round.
    pub keys: usize,
    /// Units pushed and confirmed.
    pub pushed: u64,
    /// Keys whose totals were refreshed.
    pub pulled: usize,
    /// Keys with a failed operation (an error reply such as OOM, READONLY,
    /// MISCONF, NOPERM or WRONGTYPE; an unusable reply; a cluster node
    /// down): limited locally only until a round succeeds for them.
    pub failed_keys: usize,
    /// Redis operations in the round.
    pub operations: usize,
    /// Active keys not read this round: rounds ran long (a flood of keys),
    /// so reads are rationed, keys refused by the fleet and then the
    /// busiest first. Their closed sums come from the totals their pushes
    /// answered and those last read, and until a round reads them they are
    /// held to their fair share of the budget (budget / live instances).
    pub unread_keys: usize,
    /// Active keys pushed and read this round (see the module docs).
    pub hot_keys: usize,
    /// Active keys decided locally, held to their share of the budget:
    /// neither pushed nor read.
    pub cold_keys: usize,
    /// How long the store took to answer, leaving out the round's own work
    /// done while the reply was on the wire: what rations the next round's
    /// reads when it passes half the sync interval.
    pub store_time: Duration,
}
