//! Read rationing: sync rounds slower than half the interval ration the next
//! round's reads (pushes are never skipped), and fast rounds lift the ration
//! again. Keys refused by the fleet are read first (they are at their
//! budget, and push nothing), then the busiest. A key not read keeps the
//! estimate it had (its last closed sum still counts) and is held to its
//! fair share of the budget, `budget / live instances`, until a round reads
//! it: what other instances used of it is not seen meanwhile, and if every
//! instance that cannot read it keeps to its share, together they stay
//! within the budget. The live instances are counted in a roster in the
//! store (each instance joins it once per epoch).

use std::time::Duration;

use super::store::{Counter, OpResult, SyncOp};

/// A key's priority for reads: refused by the fleet since the last round
/// first (at its budget here, so what the others used decides its next
/// request), then a key this instance has never read (new here, or back
/// after idling: what other instances used of it is unknown, and a key
/// that moves between instances would get its share on each), then by the
/// units it pushed this round.
pub(super) fn rank(refused: bool, read_before: bool, units: u64) -> u64 {
    if refused {
        u64::MAX
    } else if !read_before {
        u64::MAX - 1
    } else {
        units.min(u64::MAX - 2)
    }
}

/// The roster's counter of `epoch`: fleet id 0, which no key has (every
/// fleet id has its low bit set), so it never meets a client key's.
pub(crate) fn roster(epoch: u64) -> Counter {
    Counter {
        route: 0,
        key: 0,
        epoch,
    }
}

/// The roster of live instances, as the sync loop keeps it: the epoch this
/// instance last joined (one `HINCRBY` per epoch), and the one it joined
/// before that.
#[derive(Debug, Default)]
pub(super) struct Roster {
    pub(super) joined: Option<u64>,
    joined_before: Option<u64>,
}

/// A round's roster operations: where they start in the round's list, and
/// which they are.
#[derive(Debug)]
pub(super) struct RosterOps {
    /// The index of the first (every operation before it is a key's).
    pub(super) first: usize,
    join: Option<(usize, u64)>,
    read: Option<usize>,
    /// The round's epoch.
    epoch: u64,
}

impl Roster {
    /// Appends the round's roster operations to `ops`: a join, once per
    /// epoch; a read of this epoch's and the previous one's counts (every
    /// round: the count sets every cold key's share).
    pub(super) fn ops(ops: &mut Vec<SyncOp>, epoch: u64, joined: Option<u64>) -> RosterOps {
        let first = ops.len();
        let join = (joined != Some(epoch)).then(|| {
            ops.push(SyncOp::Add {
                counter: roster(epoch),
                slice: 0,
                delta: 1,
                expire: true,
            });
            (first, epoch)
        });
        let read = Some(ops.len());
        for e in [epoch.saturating_sub(1), epoch] {
            ops.push(SyncOp::Read {
                counter: roster(e),
                slices: 0..1,
            });
        }
        RosterOps {
            first,
            join,
            read,
            epoch,
        }
    }

    /// After the round: records the join, and returns the live instances
    /// (at least 1), given the count the gate holds (`last`), if the
    /// roster was read. A join whose reply was lost is sent again: the
    /// count may then be one too high, which only makes the share smaller.
    ///
    /// The count read is the larger of the two epochs' (an instance whose
    /// first round of this epoch has not run yet joined the one before),
    /// each with this instance on top where its own join is not in it. It
    /// replaces `last` only when it is a complete view: this instance
    /// joined both epochs, so joins were being written throughout. Else it
    /// can only raise `last`:
    ///
    /// * a store that refuses writes (out of memory, a read-only replica)
    ///   still answers reads, but every instance's join may be refused,
    ///   and once the epoch of their last joins is over the counts say one
    ///   instance (measured from outside before: with
    ///   `on_outage = "share"`, a key got 159 of 100 in a window of a
    ///   read-only Redis, its instances each holding it to the whole
    ///   budget);
    /// * after such an outage, the epoch before holds no joins: the first
    ///   instance back would read itself alone;
    /// * an instance that starts during one reads the others' earlier
    ///   joins, and takes them.
    ///
    /// A roster that does not count this instance although it joined was
    /// lost (a failover to a replica that had not seen it, a flush, an
    /// eviction): it joins again, and the count is not lowered on it.
    pub(super) fn after(&mut self, ops: &RosterOps, results: &[OpResult], last: u64) -> Option<u64> {
        if let Some((i, epoch)) = ops.join {
            if let Some(OpResult::Added(Some(_))) = results.get(i) {
                if self.joined != Some(epoch) {
                    self.joined_before = self.joined;
                }
                self.joined = Some(epoch);
            }
        }
        let i = ops.read?;
        let count = |r: Option<&OpResult>| match r {
            Some(OpResult::Read(v)) => v.first().copied(),
            _ => None,
        };
        let (before, now) = (count(results.get(i)), count(results.get(i + 1)));
        if before.is_none() && now.is_none() {
            return None;
        }
        let epoch = ops.epoch;
        let previous = epoch.checked_sub(1);
        // Whether each count holds this instance's own join; where it does
        // not, the instance is counted on top (it is live).
        let joined = self.joined == Some(epoch);
        let joined_previous = if joined { self.joined_before } else { self.joined };
        let in_before = previous.is_some() && joined_previous == previous;
        if joined && now == Some(0) {
            self.joined = None;
        }
        let read = (before.unwrap_or(0) + u64::from(!in_before))
            .max(now.unwrap_or(0) + u64::from(!joined))
            .max(1);
        let complete = joined && in_before && before.is_some() && now.is_some_and(|n| n > 0);
        Some(if complete { read } else { read.max(last) })
    }
}

/// The fewest keys a rationed round still reads.
pub(super) const MIN_READS: usize = 256;

/// Keys read per round, while rounds run long.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReadRation {
    /// `None`: all.
    budget: Option<usize>,
}

impl ReadRation {
    /// The keys not to read this round, of the active keys given as
    /// `(units pushed this round, key)`: beyond the budget, the least busy.
    /// Empty (and nothing collected) while reads are not rationed.
    pub(super) fn unread(&self, active: impl Iterator<Item = (u64, u64)>) -> Vec<u64> {
        let Some(budget) = self.budget else {
            return Vec::new();
        };
        let mut active: Vec<(u64, u64)> = active.collect();
        if active.len() <= budget {
            return Vec::new();
        }
        active.sort_unstable_by(|a, b| b.cmp(a));
        active[budget..].iter().map(|&(_, key)| key).collect()
    }

    /// After a round of `keys` keys that took `took` and read `read` of
    /// them: rations the next round's reads when it took more than half the
    /// interval, doubles the ration (lifting it once it covers every key)
    /// when it took less than a quarter.
    pub(super) fn after_round(&mut self, took: Duration, interval: Duration, read: usize, keys: usize) {
        self.budget = if took * 2 > interval {
            let budget = (read / 2).max(MIN_READS);
            if self.budget.is_none() {
                tracing::warn!(
                    target: "ratelimit",
                    active = keys,
                    took_ms = took.as_millis() as u64,
                    "fleet gate: sync rounds run longer than half the interval; reading the busiest {budget} keys per round"
                );
            }
            Some(budget)
        } else if took * 4 < interval {
            self.budget
                .and_then(|b| (b.saturating_mul(2) < keys).then(|| b.saturating_mul(2)))
        } else {
            self.budget
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_rounds_ration_reads_and_fast_ones_lift_the_ration() {
        let ms = Duration::from_millis;
        let mut r = ReadRation::default();
        assert!(r.unread([(1, 10), (2, 20)].into_iter()).is_empty());
        r.after_round(ms(60), ms(100), 2_000, 3_000);
        assert_eq!(r.budget, Some(1_000));
        let active = (0..1_200u64).map(|key| (key, key));
        let unread = r.unread(active);
        assert_eq!(unread.len(), 200);
        assert!(unread.iter().all(|&key| key < 200), "the least busy are not read");
        // A key refused by the fleet pushes nothing, and is read first.
        let active = (0..1_200u64).map(|key| (rank(key == 3, key != 5, key), key));
        let unread = r.unread(active);
        assert!(!unread.contains(&3), "a refused key fell out of the ration");
        assert!(!unread.contains(&5), "a key never read fell out of the ration");
        assert_eq!(unread.len(), 200);
        r.after_round(ms(60), ms(100), 100, 3_000);
        assert_eq!(r.budget, Some(MIN_READS));
        r.after_round(ms(30), ms(100), MIN_READS, 3_000);
        assert_eq!(r.budget, Some(MIN_READS), "between a quarter and a half: kept");
        r.after_round(ms(10), ms(100), MIN_READS, 3_000);
        assert_eq!(r.budget, Some(2 * MIN_READS));
        r.after_round(ms(10), ms(100), MIN_READS, 2 * MIN_READS);
        assert_eq!(r.budget, None, "lifted once it covers every key");
    }
}
