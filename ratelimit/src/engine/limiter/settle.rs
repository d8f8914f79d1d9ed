//! Settling a charge after the check: refunds (what a charge still holds,
//! never more) and extra charges, on the key's own cell or the shared cell
//! the store placed it on.

use super::{placement_of, Check, Limiter};
use crate::engine::clock::Clock;
use crate::engine::decision::Decision;
use crate::engine::gcra;
use crate::engine::quota::Quota;
use crate::engine::store::{CellKey, Placement, Store};

impl<S: Store, C: Clock> Limiter<S, C> {
    /// Hands back what `check` was charged by the admitted decision
    /// `charged` (a request that cost less than it was charged, or whose
    /// work failed), to the cell the store placed that charge in: the key's
    /// own cell, or the shared cell a key the store had no room for
    /// ([`Decision::is_overflow`]) or a group past its budget of new keys
    /// ([`Decision::is_grouped`]) was charged to. `check.cost` is the units
    /// to hand back; `charged_at` is a reading of this limiter's clock taken
    /// no later than the check that charged them (`limiter.clock().now()`
    /// before it). A denied `charged` charged nothing: nothing is handed back.
    ///
    /// A refund hands back at most what that charge still holds against the
    /// key: the key's TAT moves back by
    /// `min(cost * T, charged_at + cost * T - now)` (nothing once time has
    /// repaid the charge), and never to before now. So a charge held until
    /// time refilled the bucket, then refunded after the bucket was spent
    /// again, refills nothing a second time. The bound is exact for a
    /// charge that found the bucket full; one that sat behind debt may get
    /// back less than a perfect ledger would (the cell keeps no history of
    /// what was ahead of it). To refund the last `r` units of a charge of
    /// `n`, pass `charged_at + (n - r) * T`: they are the last to be repaid.
    /// A cell that recovered and was swept since gets nothing back, and no
    /// cell is made.
    ///
    /// Refunding what was never charged hands back capacity the client did
    /// not earn: pass only the admitted decision of the check that charged
    /// `check`. The other decisions of a refused [`check_all`](Self::check_all)
    /// report room but charged nothing, and so do [`peek_all`](Self::peek_all)'s.
    ///
    /// ```
    /// use ratelimit::{Check, Clock, Limiter, ManualClock, MemoryStore, Quota, DEFAULT_ROUTE};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(10);
    /// let cell = limiter.cell_key(DEFAULT_ROUTE, "k");
    /// let at = limiter.clock().now();
    /// let [d] = limiter.check_all(&[Check::new(cell, quota, 8)]);
    /// assert_eq!(d.remaining(), 2);
    /// limiter.refund(&Check::new(cell, quota, 5), &d, at); // it cost 3
    /// assert_eq!(limiter.peek_all(&[Check::new(cell, quota, 0)])[0].remaining(), 7);
    ///
    /// // A charge that time has repaid: its refund gives nothing back.
    /// let at = limiter.clock().now();
    /// let [d] = limiter.check_all(&[Check::new(cell, quota, 7)]);
    /// clock.advance(Duration::from_secs(60)); // the bucket is full again
    /// limiter.check_n(&"k", &quota, 10);
    /// limiter.refund(&Check::new(cell, quota, 7), &d, at);
    /// assert!(limiter.peek(&"k", &quota).is_denied());
    ///
    /// // A charge the store placed on the shared overflow cell goes back there.
    /// let store = ratelimit::MemoryStore::builder()
    ///     .max_keys(1)
    ///     .overflow(ratelimit::OverflowPolicy::SharedBucket)
    ///     .build();
    /// let limiter = Limiter::new(store, ManualClock::new());
    /// let quota = Quota::per_minute(3);
    /// limiter.check(&"resident", &quota); // the store is full
    /// let newcomer = Check::new(limiter.cell_key(DEFAULT_ROUTE, "newcomer"), quota, 3);
    /// let at = limiter.clock().now();
    /// let [d] = limiter.check_all(&[newcomer]);
    /// assert!(d.is_allowed() && d.is_overflow(), "charged to the shared overflow cell");
    /// assert!(limiter.check(&"another", &quota).is_denied(), "which is spent");
    /// limiter.refund(&newcomer, &d, at); // the work failed
    /// assert!(limiter.check(&"another", &quota).is_allowed(), "handed back to it");
    /// ```
    #[inline]
    pub fn refund(&self, check: &Check, charged: &Decision, charged_at: u64) {
        let now = self.clock.now();
        self.refund_placed_at(check.cell, &check.quota, check.cost, charged, charged_at, now);
    }

    /// A refund to `cell`, the key's own, at `now`: the whole units it
    /// handed back (what the fleet gate may take out of its count).
    pub(crate) fn refund_cell_at(&self, cell: CellKey, quota: &Quota, cost: u32, charged_at: u64, now: u64) -> u32 {
        if cost == 0 {
            return 0;
        }
        // A key with no cell has nothing to hand back (and gets none made).
        self.store
            .update(cell, now, |stored| refunded(stored, now, quota, cost, charged_at))
            .map_or(0, |(units, _)| units)
    }

    /// Charges `check.cost` more units, without a check, to where the
    /// admitted decision `charged` of `check`'s cell placed its charge: a
    /// request that turned out to cost more than it was charged, settled
    /// after its work is done. The key may go into debt (it then waits until
    /// it is repaid at the quota's rate); nothing is refused. A request
    /// charged to a shared cell (the store's overflow cell, or a group past
    /// its budget of new keys) pays its real cost there, as it would on a
    /// cell of its own: a shared cell never makes a request cheaper (a group
    /// cell that recovered and was swept since the check is replaced by
    /// where a check of the key would go now). A denied `charged` charged
    /// nothing: nothing more is charged either. Pass only the admitted
    /// decision of the check that charged `check`: the other decisions of a
    /// refused [`check_all`](Self::check_all), and [`peek_all`](Self::peek_all)'s,
    /// charged nothing and placed nothing.
    ///
    /// ```
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, OverflowPolicy, Quota, DEFAULT_ROUTE};
    ///
    /// let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
    /// let quota = Quota::per_minute(10);
    /// let one = Check::new(limiter.cell_key(DEFAULT_ROUTE, "k"), quota, 1);
    /// let [d] = limiter.check_all(&[one]);
    /// limiter.charge(&Check { cost: 12, ..one }, &d); // it cost 13 in the end
    /// assert!(limiter.peek_all(&[one])[0].is_denied(), "3 units of debt, then one more to wait for");
    ///
    /// let store = MemoryStore::builder().max_keys(1).overflow(OverflowPolicy::SharedBucket).build();
    /// let limiter = Limiter::new(store, ManualClock::new());
    /// let quota = Quota::per_minute(3);
    /// limiter.check(&"resident", &quota); // the store is full
    /// let newcomer = Check::new(limiter.cell_key(DEFAULT_ROUTE, "newcomer"), quota, 1);
    /// let [d] = limiter.check_all(&[newcomer]);
    /// assert!(d.is_allowed() && d.is_overflow());
    /// limiter.charge(&Check { cost: 2, ..newcomer }, &d); // it cost 3 in the end
    /// assert!(limiter.check(&"another", &quota).is_denied(), "the overflow cell paid it");
    /// ```
    #[inline]
    pub fn charge(&self, check: &Check, charged: &Decision) {
        if charged.is_allowed() {
            let now = self.clock.now();
            self.charge_placed_at(check.cell, &check.quota, check.cost, placement_of(charged), now);
        }
    }

    /// Charges `cost` more units at `now` to the cell `placement` names
    /// (the key's own, or the shared cell its check was placed in): the
    /// whole units it really charged (fewer than `cost` when the debt cap
    /// stopped it), so a later refund hands back no more than was taken.
    pub(crate) fn charge_placed_at(
        &self,
        cell: CellKey,
        quota: &Quota,
        cost: u32,
        placement: Placement,
        now: u64,
    ) -> u32 {
        if cost == 0 {
            return 0;
        }
        let t = quota.interval_ns().max(1);
        let force = |stored: u64| {
            let write = gcra::force(stored, now, quota, cost);
            let charged = write.map_or(0, |tat| (tat.saturating_sub(stored.max(now)) / t).min(u64::from(cost)));
            (charged as u32, write)
        };
        let shared = match placement {
            Placement::Own => None,
            // A shared cell that is there (a group cell swept since the
            // check reads 0 and is not made again by `update_shared`).
            shared => self
                .store
                .update_shared(cell, shared, now, |stored| {
                    let (charged, write) = force(stored);
                    ((stored != 0).then_some(charged), write)
                })
                .flatten(),
        };
        // Gone (a slow stream outlived it): charged where a check of the
        // key would go now, so a request never escapes its cost.
        shared.unwrap_or_else(|| self.store.update(cell, now, force).map_or(0, |(charged, _)| charged))
    }

    /// [`refund`](Self::refund) of `cost` units on `cell` at `now`: the
    /// whole units it handed back.
    pub(crate) fn refund_placed_at(
        &self,
        cell: CellKey,
        quota: &Quota,
        cost: u32,
        charged: &Decision,
        charged_at: u64,
        now: u64,
    ) -> u32 {
        if cost == 0 || charged.is_denied() {
            return 0;
        }
        match placement_of(charged) {
            Placement::Own => self.refund_cell_at(cell, quota, cost, charged_at, now),
            shared => self
                .store
                .update_shared(cell, shared, now, |stored| {
                    refunded(stored, now, quota, cost, charged_at)
                })
                .unwrap_or(0),
        }
    }
}

/// A store update's body for a refund: the write, and the whole units it
/// hands back.
fn refunded(stored: u64, now: u64, quota: &Quota, cost: u32, charged_at: u64) -> (u32, Option<u64>) {
    let write = gcra::refund(stored, now, quota, cost, charged_at);
    let back = write.map_or(0, |tat| (stored - tat) / quota.interval_ns().max(1));
    (u32::try_from(back).unwrap_or(u32::MAX), write)
}
