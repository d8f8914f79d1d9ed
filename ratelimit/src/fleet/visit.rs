//! A sync round's first step: which keys it visits and what it takes
//! from them. The slots marked since the last round (a bit per slot, set by
//! a key's first unit after a take, or by a refusal; every slot after a
//! failed round), and the keys hot here, so the round's own work grows
//! with the keys requested, not with the table. A cold key with nothing
//! new is skipped: its slot's closed sum stays conservative as it ages.

use std::sync::atomic::Ordering;

use super::delta::{take_unpushed, Take};
use super::gate::FleetGate;
use super::history::History;
use super::ids::IdMap;
use super::store::Counter;
use super::table::{read_touched, Slot, Table, ROUND};
use super::tracking::carry_over;
use crate::Clock;

/// A key in this round: what every key needs (most are cold), and what
/// only keys with operations need apart ([`HotWork`]): a round writes and
/// reads every key's `Work` several times, at a million keys tens of
/// megabytes where it was 184 bytes a key.
pub(super) struct Work<'a> {
    pub(super) route: u32,
    pub(super) active: bool,
    /// Its slot in the current epoch's table (the one requests read).
    pub(super) current: Option<&'a Slot>,
    /// Its slot in the previous epoch's table.
    pub(super) previous: Option<&'a Slot>,
    /// A request refused by the fleet since the last round (read first).
    pub(super) refused: bool,
    /// Pushed and read: it turned hot here, the fleet marked it hot, or the
    /// fleet refused it since the last round. A cold key is decided
    /// locally, held to its share of the budget.
    pub(super) hot: bool,
    pub(super) failed: bool,
    /// A cold key's units were kept and its closed sum written with them
    /// (`keep_cold_units`): nothing more of it this round.
    pub(super) summed: bool,
    /// Its pushes and reads: its place in [`Works`]' operations (hot keys
    /// only), or [`NO_OPS`].
    ops: u32,
}

const NO_OPS: u32 = u32::MAX;

/// The operations of a hot key in this round.
#[derive(Default)]
pub(super) struct HotWork {
    /// Its reads: (first slice, op index); at most two (the window's
    /// slices span two epochs at most).
    pub(super) reads: [Option<(u64, u32)>; 2],
    /// Units taken for a push this round (its priority for reads).
    pub(super) units: u64,
    /// Active, but not read this round (reads rationed).
    pub(super) unread: bool,
    /// Slices it pushes into this round (two at most: one per parity), and
    /// their totals once added.
    pub(super) pushed: [Option<(u64, Option<u64>)>; 2],
    /// The epoch whose counter this round gave a TTL.
    pub(super) expired: Option<u64>,
    /// A push without `PEXPIRE` found its field empty: the counter may have
    /// been created by it (evicted, flushed, lost in a failover).
    pub(super) recreated: Option<(Counter, u32)>,
}

/// The tables a round visits: the previous epoch's (while it holds that
/// epoch) and the current one.
#[derive(Clone, Copy)]
pub(super) struct Tables<'g> {
    pub(super) previous: Option<&'g Table>,
    pub(super) current: &'g Table,
}

/// Where a round is: its slice, epoch and number, and the newest slice
/// every instance has pushed into.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub(super) s: u64,
    pub(super) epoch: u64,
    pub(super) round: u64,
    pub(super) final_slice: Option<u64>,
}

/// The keys of a round, each once, in the order the visit met them: an
/// index from fleet id to place, and the keys in a vector. A round makes
/// several passes over every key; a vector walks them in order, where a map
/// of `Work`s would walk a table twice their number, and at a million keys
/// its buckets alone (about 200 bytes each) were memory the kernel had to
/// clear every round.
pub(super) struct Works<'g> {
    index: IdMap<u32>,
    keys: Vec<(u64, Work<'g>)>,
    /// The hot keys' operations, in the order of `hot`.
    ops: Vec<HotWork>,
    /// The places of the hot keys and of the idle ones, in order: a few of
    /// a round's keys, each of which several passes visit (where a pass
    /// over every key, a few hundred bytes each, ran through memory tens
    /// of megabytes long at a million keys).
    hot: Vec<u32>,
    idle: Vec<u32>,
}

impl<'g> Works<'g> {
    fn with_capacity(n: usize) -> Works<'g> {
        Works {
            index: IdMap::with_capacity_and_hasher(n, Default::default()),
            keys: Vec::with_capacity(n),
            ops: Vec::new(),
            hot: Vec::new(),
            idle: Vec::new(),
        }
    }

    /// The hot keys and their operations (a key's `hot` and `active` are
    /// final once the visit is done, and it lists them).
    pub(super) fn hot(&self) -> impl Iterator<Item = (&u64, &Work<'g>, &HotWork)> {
        self.hot.iter().zip(&self.ops).map(|(&i, ops)| {
            let (key, w) = &self.keys[i as usize];
            (key, w, ops)
        })
    }

    pub(super) fn hot_mut(&mut self) -> impl Iterator<Item = (&u64, &mut Work<'g>, &mut HotWork)> {
        // (The places ascend: each is split off what follows the last.)
        let (mut rest, mut base) = (&mut self.keys[..], 0);
        self.hot.iter().zip(&mut self.ops).map(move |(&i, ops)| {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(i as usize - base);
            let ((key, w), tail) = tail.split_first_mut().expect("a place of the round's keys");
            (rest, base) = (tail, i as usize + 1);
            (&*key, w, ops)
        })
    }

    /// `key`'s work and, for a hot key, its operations.
    pub(super) fn get_with_ops(&mut self, key: &u64) -> Option<(&mut Work<'g>, Option<&mut HotWork>)> {
        let &i = self.index.get(key)?;
        let w = &mut self.keys[i as usize].1;
        let ops = self.ops.get_mut(w.ops as usize);
        Some((w, ops))
    }

    /// The idle keys: visited, not requested within `idle_rounds`.
    pub(super) fn idle(&self) -> impl Iterator<Item = (&u64, &Work<'g>)> {
        self.idle.iter().map(|&i| {
            let (key, w) = &self.keys[i as usize];
            (key, w)
        })
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(super) fn contains_key(&self, key: &u64) -> bool {
        self.index.contains_key(key)
    }

    pub(super) fn get(&self, key: &u64) -> Option<&Work<'g>> {
        let &i = self.index.get(key)?;
        Some(&self.keys[i as usize].1)
    }

    pub(super) fn get_mut(&mut self, key: &u64) -> Option<&mut Work<'g>> {
        let &i = self.index.get(key)?;
        Some(&mut self.keys[i as usize].1)
    }

    /// `key`'s place and work, `new` the first time.
    fn entry(&mut self, key: u64, new: impl FnOnce() -> Work<'g>) -> (u32, &mut Work<'g>) {
        let next = self.keys.len() as u32;
        let i = *self.index.entry(key).or_insert(next);
        if i == next {
            self.keys.push((key, new()));
        }
        (i, &mut self.keys[i as usize].1)
    }

    /// The work at `place` (a take's [`work`](Take::work)).
    pub(super) fn at(&self, place: u32) -> &Work<'g> {
        &self.keys[place as usize].1
    }

    pub(super) fn at_mut(&mut self, place: u32) -> &mut Work<'g> {
        &mut self.keys[place as usize].1
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&u64, &Work<'g>)> {
        self.keys.iter().map(|(key, w)| (key, w))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut Work<'g>)> {
        self.keys.iter_mut().map(|(key, w)| (&*key, w))
    }
}

/// What the visit found: the deltas of hot keys (to push) and of cold ones
/// (kept here), the keys, and when the deltas were taken.
pub(super) struct Visit<'g> {
    pub(super) takes: Vec<Take<'g>>,
    pub(super) cold_takes: Vec<Take<'g>>,
    pub(super) work: Works<'g>,
    /// Every unit taken was admitted by then (dates them: `history.rs`).
    pub(super) taken_at: u64,
}

impl FleetGate {
    /// The keys of the round at `at` and their deltas, hot keys' apart.
    pub(super) fn visit<'g, C: Clock>(
        &'g self,
        history: &mut History,
        tables: Tables<'g>,
        at: Place,
        clock: &C,
    ) -> Visit<'g> {
        let Place {
            s,
            epoch,
            round,
            final_slice,
        } = at;
        let k = u64::from(self.window.slices());
        // Sized as the last round's: a map grown key by key rehashes every
        // entry at each doubling.
        let mut takes: Vec<Take<'g>> = Vec::with_capacity(history.sizes.0);
        let mut work = Works::with_capacity(history.sizes.1);
        let idle = self.settings.idle_rounds;
        // The slots with something new since the last round (after a failed
        // round, every slot: units it handed back carry no mark), then the
        // keys hot here and those the fleet marked hot while this instance
        // holds units of them it used cold.
        let full_scan = std::mem::take(&mut history.rescan);
        // (Copied: a round that fails or is cancelled leaves them for the
        // next one; a round that succeeds clears them.)
        let mut hot_here = history.to_visit.clone();
        hot_here.extend(history.hot_here.iter().copied());
        let current = tables.current;
        let tables: Vec<(&Table, bool)> = tables
            .previous
            .into_iter()
            .map(|t| (t, false))
            .chain([(current, true)])
            .collect();
        let enter = |key: u64, slot, is_current: bool, takes: &mut Vec<Take<'g>>, work: &mut Works<'g>| {
            let taken = takes.len();
            for parity in 0..3 {
                if let Some((word_slice, delta)) = take_unpushed(slot, parity, s, k) {
                    // Into its own slice while the others still read it;
                    // else into the oldest one they read (later, so
                    // counted longer, never less).
                    let slice = match final_slice {
                        Some(f) if word_slice <= f => f + 1,
                        _ => word_slice,
                    };
                    takes.push(Take {
                        key,
                        slot,
                        parity,
                        word_slice,
                        slice,
                        delta,
                        sums: false,
                        // (Known once the key has its place, below.)
                        work: 0,
                    });
                }
            }
            let (route, last, refused) = read_touched(slot.touched.load(Ordering::Relaxed));
            let age = (round & ROUND).wrapping_sub(last) & ROUND;
            let active = age <= idle;
            // The current table's slot is visited after the previous one's.
            if is_current && active && takes.len() > taken {
                if let Some(t) = takes.last_mut() {
                    t.sums = true;
                }
            }
            // A cold key with nothing new since the last round needs
            // nothing of it: its slot's closed sum stays conservative as it
            // ages (everything it counted was used before it was written).
            let wanted = takes.len() > taken
                || (refused && age <= 1)
                || work.contains_key(&key)
                || history.hot_here.contains(&key)
                || history.hot.is_hot(key, epoch);
            if !wanted {
                return;
            }
            let (place, w) = work.entry(key, || Work {
                route,
                active: false,
                current: None,
                previous: None,
                refused: false,
                hot: false,
                failed: false,
                summed: false,
                ops: NO_OPS,
            });
            w.active |= active;
            // Refused in this round or the one before (requests count the
            // round a round ahead once its reply is in).
            w.refused |= refused && age <= 1;
            if is_current {
                w.current = Some(slot);
            } else {
                w.previous = Some(slot);
            }
            for t in &mut takes[taken..] {
                t.work = place;
            }
        };
        for &(table, is_current) in &tables {
            if full_scan {
                for (key, slot) in table.occupied() {
                    enter(key, slot, is_current, &mut takes, &mut work);
                }
                // The marks are covered.
                table.take_marked().for_each(drop);
            } else {
                for (key, slot) in table.take_marked() {
                    enter(key, slot, is_current, &mut takes, &mut work);
                }
            }
        }
        for key in hot_here {
            for &(table, is_current) in &tables {
                let seen = work.get(&key).is_some_and(|w| {
                    if is_current {
                        w.current.is_some()
                    } else {
                        w.previous.is_some()
                    }
                });
                if let Some(slot) = table.find(key).filter(|_| !seen) {
                    enter(key, slot, is_current, &mut takes, &mut work);
                }
            }
        }
        // Every unit taken was admitted by now (dates them: `history.rs`).
        let taken_at = self.wall(clock.now());
        // Active keys get a slot in the current table, so requests find
        // their estimate there from the first round of an epoch.
        for (&key, w) in work.iter_mut() {
            if w.active && w.current.is_none() {
                let previous = w.previous;
                let last = previous.map_or(0, |p| p.touched.load(Ordering::Relaxed));
                // Hot keys may take the reserve; cold ones only what the
                // table holds for cold keys (a flood's keys cannot carry
                // themselves into every epoch's table).
                let hot = history.hot_here.contains(&key) || w.refused || history.hot.is_hot(key, epoch);
                w.current = current.slot(key, hot, |fresh| {
                    fresh.touched.store(last, Ordering::Relaxed);
                    // What requests see until this round writes the slot.
                    if let Some(p) = previous {
                        carry_over(p, fresh, s, &self.window);
                    }
                });
            }
        }

        // Hot keys are pushed and read; cold ones stay here (`hot.rs`
        // explains why that holds the limit): a key is hot once it turned
        // hot here (for as long as this instance keeps its history), when
        // the fleet marked
        // it hot, or when the fleet refused it since the last round (at its
        // share here, or at the budget).
        // (`hot_here` holds the keys whose history says hot: a small set,
        // where the histories are a map of every key.)
        let Works {
            keys, hot, idle, ops, ..
        } = &mut work;
        for (i, (key, w)) in keys.iter_mut().enumerate() {
            w.hot = history.hot_here.contains(key) || w.refused || history.hot.is_hot(*key, epoch);
            if w.hot {
                hot.push(i as u32);
                w.ops = ops.len() as u32;
                ops.push(HotWork::default());
            }
            if !w.active {
                idle.push(i as u32);
            }
        }
        history.sizes = (takes.len(), work.len());
        // The hot keys' takes out (a few), the cold ones left in place (most).
        let mut cold_takes = takes;
        let takes: Vec<Take<'g>> = cold_takes.extract_if(.., |t| work.at(t.work).hot).collect();
        Visit {
            takes,
            cold_takes,
            work,
            taken_at,
        }
    }
}
