//! `Limiter`: the engine's entry point, generic over where state lives and
//! where time comes from.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use crate::engine::clock::{Clock, SystemClock};
use crate::engine::decision::{Decision, Denial};
use crate::engine::gcra;
use crate::engine::quota::Quota;
use crate::engine::store::{CellKey, MemoryStore, Placement, Store};

mod settle;

/// A keyed GCRA rate limiter.
///
/// One limiter serves any number of keys and quotas; the quota is passed per
/// check, so limits can change at run time without losing any client's state.
/// A client keeps its theoretical arrival time when its quota changes, so a
/// tier change never hands out a fresh burst: moving to a smaller quota
/// leaves the client in debt, repaid at the new rate, and moving back refills
/// nothing. (Checks that should not share a bucket, such as two endpoints
/// with different limits, belong on different routes: see
/// [`cell_key`](Limiter::cell_key).)
///
/// Its verbs: [`check`](Limiter::check) and [`check_n`](Limiter::check_n)
/// charge one key on one limit; a [`Check`] (a cell, its quota, a cost) is
/// the request value of the rest: [`check_all`](Limiter::check_all) charges
/// one or several limits all or nothing, [`peek_all`](Limiter::peek_all)
/// answers without charging, [`refund`](Limiter::refund) and
/// [`charge`](Limiter::charge) settle a charge after the work.
///
/// Keys are hashed with a keyed 64-bit hash seeded randomly per limiter
/// (together with the route), and only the hash is stored.
///
/// # Examples
///
/// ```
/// use ratelimit::{Limiter, MemoryStore, Quota, SystemClock};
///
/// let limiter = Limiter::new(MemoryStore::default(), SystemClock::default());
/// let quota = Quota::per_second(100).with_burst(20);
///
/// let d = limiter.check(&"user-42", &quota);
/// assert!(d.is_allowed());
/// assert_eq!(d.limit(), 20);
/// assert_eq!(d.remaining(), 19);
///
/// // Weighted cost: an expensive call counts as 5.
/// let d = limiter.check_n(&42u64, &quota, 5);
/// assert_eq!(d.remaining(), 15);
/// ```
pub struct Limiter<S = MemoryStore, C = SystemClock> {
    store: S,
    clock: C,
    hasher: ahash::RandomState,
}

/// One limit of a stacked decision ([`Limiter::check_all`]): a cell, the
/// quota that applies to it and what the request costs there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    /// The cell ([`Limiter::cell_key`]).
    pub cell: CellKey,
    /// Its quota.
    pub quota: Quota,
    /// The request's cost on it.
    pub cost: u32,
}

/// What [`Limiter::check_all_at`] reads of each limit: a [`Check`], or a
/// value carrying one (the fleet gate's requests).
pub(crate) trait AsCheck {
    fn check(&self) -> &Check;
}

impl AsCheck for Check {
    fn check(&self) -> &Check {
        self
    }
}

impl Check {
    /// A check of `cost` on `cell` under `quota`.
    pub const fn new(cell: CellKey, quota: Quota, cost: u32) -> Check {
        Check { cell, quota, cost }
    }
}

/// The route used by [`Limiter::check`] and [`Limiter::check_n`].
pub const DEFAULT_ROUTE: u32 = 0;

impl<S: Store, C: Clock> Limiter<S, C> {
    /// A limiter over `store`, reading time from `clock`.
    pub fn new(store: S, clock: C) -> Self {
        Limiter {
            store,
            clock,
            hasher: ahash::RandomState::new(),
        }
    }

    /// Checks one request of cost 1 for `key` against `quota`, and charges it
    /// if admitted.
    #[inline]
    pub fn check<K: Hash + ?Sized>(&self, key: &K, quota: &Quota) -> Decision {
        self.check_n(key, quota, 1)
    }

    /// Checks a request of weight `cost`. A cost above the quota's burst is
    /// denied with [`Denial::CostExceedsBurst`]: it could never conform. A
    /// cost of `0` charges nothing and reports the state (it is denied only
    /// while the key's debt exceeds the quota's capacity, e.g. right after a
    /// move to a smaller quota).
    #[inline]
    pub fn check_n<K: Hash + ?Sized>(&self, key: &K, quota: &Quota, cost: u32) -> Decision {
        self.check_cell(self.cell_key(DEFAULT_ROUTE, key), quota, cost)
    }

    /// The cell a (route, key) pair maps to, for callers that check the same
    /// key repeatedly or hash it elsewhere.
    #[inline]
    pub fn cell_key<K: Hash + ?Sized>(&self, route: u32, key: &K) -> CellKey {
        let mut h = self.hasher.build_hasher();
        route.hash(&mut h);
        key.hash(&mut h);
        // `CellKey::new` folds a hash of 0 onto 1 (0 marks empty slots).
        CellKey::new(h.finish(), route)
    }

    /// The cell of (route, key) as a member of `group` (the client's
    /// network, say): with a store that bounds the new keys per group
    /// ([`MemoryStoreBuilder::new_keys_per_group`](crate::MemoryStoreBuilder::new_keys_per_group)),
    /// a group past its budget shares one cell per route.
    ///
    /// ```
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let store = MemoryStore::builder().new_keys_per_group(Quota::per_minute(1)).build();
    /// let limiter = Limiter::new(store, ManualClock::new());
    /// let quota = Quota::per_minute(1);
    /// let net = "2001:db8:aaaa::/48";
    /// let first = limiter.grouped_cell_key(0, "2001:db8:aaaa:1::", &net);
    /// let second = limiter.grouped_cell_key(0, "2001:db8:aaaa:2::", &net);
    /// assert!(limiter.check_all(&[Check::new(first, quota, 1)])[0].is_allowed());
    /// let d = limiter.check_all(&[Check::new(second, quota, 1)])[0];
    /// assert!(d.is_allowed() && d.is_grouped(), "the network's shared cell");
    /// let third = limiter.grouped_cell_key(0, "2001:db8:aaaa:3::", &net);
    /// assert!(limiter.check_all(&[Check::new(third, quota, 1)])[0].is_denied(), "shares it, spent");
    /// ```
    #[inline]
    pub fn grouped_cell_key<K: Hash + ?Sized, G: Hash + ?Sized>(&self, route: u32, key: &K, group: &G) -> CellKey {
        let mut h = self.hasher.build_hasher();
        route.hash(&mut h);
        0x67u8.hash(&mut h); // "g": a group's hash never equals a key's
        group.hash(&mut h);
        // 0 means "no group".
        let g = h.finish().max(1);
        self.cell_key(route, key).in_group(g)
    }

    /// [`grouped_cell_key`](Self::grouped_cell_key), in `subgroup` of
    /// `group` (a subnet of the client's network): the subgroup may bring
    /// in at most a quarter of the group's new keys, so one subnet cannot
    /// spend its network's whole budget.
    #[inline]
    #[cfg_attr(not(feature = "axum"), allow(dead_code))] // the runtime's client keys
    pub(crate) fn subgrouped_cell_key<K: Hash + ?Sized, G: Hash + ?Sized, N: Hash + ?Sized>(
        &self,
        route: u32,
        key: &K,
        group: &G,
        subgroup: &N,
    ) -> CellKey {
        let mut h = self.hasher.build_hasher();
        0x73u8.hash(&mut h); // "s"
        subgroup.hash(&mut h);
        // 0 means "no subgroup".
        let s = (h.finish() as u32).max(1);
        self.grouped_cell_key(route, key, group).in_subgroup(s)
    }

    /// Checks a precomputed cell (see [`cell_key`](Limiter::cell_key)).
    #[inline(always)]
    pub(crate) fn check_cell(&self, cell: CellKey, quota: &Quota, cost: u32) -> Decision {
        // No `Store::prefetch` before the clock here: the cell's address
        // does not depend on the clock, so the CPU starts its load early
        // anyway, and the extra load (a `black_box` to keep it) cost a
        // third of a decision at a million keys in `cargo bench --bench
        // engine -- floor` (1.9x the floor with it, 1.2x without).
        let now = self.clock.now();
        self.check_cell_at(cell, quota, cost, now)
    }

    /// [`check_cell`](Self::check_cell) at a clock reading taken by the
    /// caller (the fleet gate reads the clock once for both decisions).
    #[inline(always)]
    pub(crate) fn check_cell_at(&self, cell: CellKey, quota: &Quota, cost: u32, now: u64) -> Decision {
        // The store's update returns what the cell held (two words), and
        // the decision is described after it: a whole `Decision` returned
        // through the update was copied through the stack three times.
        // Inlined into the store's hit path.
        let result = self.store.update(
            cell,
            now,
            #[inline(always)]
            |stored| gcra::judge(stored, now, quota, cost),
        );
        match result {
            Some((seen, placement)) => Self::placed(gcra::decision(seen, now, quota, cost), placement),
            None => Self::store_full(quota),
        }
    }

    /// A decision, marked with where the store placed it.
    #[inline(always)]
    fn placed(decision: Decision, placement: Placement) -> Decision {
        match placement {
            Placement::Own => decision,
            Placement::Overflow => decision.overflowed(),
            Placement::Group => decision.grouped(),
        }
    }

    /// The refusal of a key the store had no room for.
    #[cold]
    fn store_full(quota: &Quota) -> Decision {
        Decision::refused(
            Denial::StoreFull,
            quota.burst(),
            0,
            quota.interval_ns(),
            0,
            quota.interval_ns(),
        )
    }

    /// The [`Decision`] that [`check`](Self::check) would give `key` now,
    /// without charging anything: "how much do I have left".
    ///
    /// ```
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
    /// let quota = Quota::per_minute(3);
    /// limiter.check(&"k", &quota);
    /// let probe = limiter.peek(&"k", &quota);
    /// assert!(probe.is_allowed());
    /// assert_eq!(probe.remaining(), 1, "what the next check would leave");
    /// assert_eq!(limiter.peek(&"k", &quota).remaining(), 1, "a peek spends nothing");
    /// let three = ratelimit::Check::new(limiter.cell_key(ratelimit::DEFAULT_ROUTE, "k"), quota, 3);
    /// assert!(limiter.peek_all(&[three])[0].is_denied(), "3 more would not fit");
    /// ```
    #[inline]
    pub fn peek<K: Hash + ?Sized>(&self, key: &K, quota: &Quota) -> Decision {
        self.peek_cell(self.cell_key(DEFAULT_ROUTE, key), quota, 1)
    }

    /// A peek of one cell (see [`peek_all`](Self::peek_all)).
    #[inline]
    pub(crate) fn peek_cell(&self, cell: CellKey, quota: &Quota, cost: u32) -> Decision {
        let now = self.clock.now();
        self.peek_cell_at(cell, quota, cost, now)
    }

    #[inline]
    pub(crate) fn peek_cell_at(&self, cell: CellKey, quota: &Quota, cost: u32, now: u64) -> Decision {
        // A decision whose write is dropped: the store is asked to keep the
        // cell as it is, so nothing is charged and no cell is made.
        let result = self
            .store
            .update(cell, now, |stored| (gcra::judge(stored, now, quota, cost).0, None));
        match result {
            Some((seen, placement)) => Self::placed(gcra::decision(seen, now, quota, cost), placement),
            None => Self::store_full(quota),
        }
    }

    /// Checks one limit, or several as one decision, all or nothing: every
    /// check is charged if every one admits, and none is charged otherwise. The
    /// decisions come back in order; the request is admitted exactly when
    /// all of them are (the refusing ones say why and how long to wait; the
    /// others, charged nothing, report the room they have now).
    ///
    /// Typical use: a per-second burst limit on the client's address and a
    /// daily quota on its account, on the same request.
    ///
    /// ```
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
    /// let burst = Quota::per_second(10).with_burst(20);
    /// let daily: Quota = "3/d".parse().unwrap();
    /// let checks = [
    ///     Check::new(limiter.cell_key(1, "203.0.113.9"), burst, 1),
    ///     Check::new(limiter.cell_key(2, "user-42"), daily, 1),
    /// ];
    /// for _ in 0..3 {
    ///     assert!(limiter.check_all(&checks).iter().all(|d| d.is_allowed()));
    /// }
    /// let [ip, account] = limiter.check_all(&checks);
    /// assert!(account.is_denied(), "the daily quota is spent");
    /// assert!(ip.is_allowed() && ip.remaining() == 17, "and the burst was not charged");
    /// ```
    #[inline]
    pub fn check_all<const N: usize>(&self, checks: &[Check; N]) -> [Decision; N] {
        let mut out = [Decision::placeholder(); N];
        self.check_all_into(checks, &mut out);
        out
    }

    /// The decisions [`check_all`](Self::check_all) would give `checks`
    /// now, each on its own, without charging anything: "how much is left"
    /// (a cost of 0 reports the room without asking for any). It never
    /// writes and never brings a new key into the store, so probes cannot
    /// fill it. (A key the store has no cell for is judged as a fresh one:
    /// if a check would find the store full, or the key's group over its
    /// budget of new keys, the check is charged to a shared cell that the
    /// peek does not see.)
    ///
    /// ```
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
    /// let quota = Quota::per_minute(10);
    /// let five = Check::new(limiter.cell_key(1, "user-42"), quota, 5);
    /// limiter.check_all(&[five]);
    /// let [room] = limiter.peek_all(&[Check { cost: 0, ..five }]);
    /// assert_eq!(room.remaining(), 5);
    /// assert!(limiter.peek_all(&[Check { cost: 6, ..five }])[0].is_denied());
    /// ```
    #[inline]
    pub fn peek_all<const N: usize>(&self, checks: &[Check; N]) -> [Decision; N] {
        let now = self.clock.now();
        checks.map(|c| self.peek_cell_at(c.cell, &c.quota, c.cost, now))
    }

    /// [`check_all`](Self::check_all) for a number of limits known at run
    /// time: the decisions go to `out` (as long as `checks`); returns whether
    /// the request is admitted (and every check charged).
    ///
    /// # Panics
    ///
    /// When `out` is shorter than `checks`.
    pub fn check_all_into(&self, checks: &[Check], out: &mut [Decision]) -> bool {
        assert!(out.len() >= checks.len(), "check_all_into: one decision per check");
        // One limit: all or nothing is its own check (one store update).
        if let [c] = checks {
            out[0] = self.check_cell(c.cell, &c.quota, c.cost);
            return out[0].is_allowed();
        }
        for c in checks {
            self.store.prefetch(c.cell);
        }
        let now = self.clock.now();
        self.check_all_at(checks, out, now)
    }

    pub(crate) fn check_all_at<T: AsCheck>(&self, checks: &[T], out: &mut [Decision], now: u64) -> bool {
        // Look first: a request some limit refuses charges nothing, and
        // touches no cell (the common way a stacked request is refused).
        let mut refused = false;
        for (c, d) in checks.iter().map(AsCheck::check).zip(out.iter_mut()) {
            *d = self.peek_cell_at(c.cell, &c.quota, c.cost, now);
            refused |= d.is_denied();
        }
        if !refused {
            // Then charge in order; a limit that refuses now (another
            // request took the room since the look) hands back what the
            // earlier ones were charged.
            for i in 0..checks.len() {
                let c = checks[i].check();
                out[i] = self.check_cell_at(c.cell, &c.quota, c.cost, now);
                if out[i].is_denied() {
                    // Each to where it was charged (its own cell, or the
                    // overflow or group cell the store put it in).
                    for (earlier, d) in checks[..i].iter().map(AsCheck::check).zip(out[..i].iter()) {
                        self.refund_placed_at(earlier.cell, &earlier.quota, earlier.cost, d, now, now);
                    }
                    refused = true;
                    break;
                }
            }
            if !refused {
                return true;
            }
        }
        // The limits that did not refuse report their room as it is: nothing
        // was charged to them.
        for (c, d) in checks.iter().map(AsCheck::check).zip(out.iter_mut()) {
            if d.is_allowed() {
                *d = self.peek_cell_at(c.cell, &c.quota, 0, now);
            }
        }
        false
    }

    /// Drops every fully recovered cell now; returns how many. Cheap to call
    /// from a timer; see also `spawn_sweeper` (feature `tokio`).
    pub fn sweep(&self) -> usize {
        self.store.sweep(self.clock.now())
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(feature = "tokio")]
impl<S: Store + 'static, C: Clock + 'static> Limiter<S, C> {
    /// Spawns a tokio task that sweeps recovered cells every `every`, one
    /// store part at a time with a yield in between, so it never holds a
    /// runtime thread for more than one shard's scan. The task ends when the
    /// limiter is dropped (it holds only a weak reference).
    ///
    /// Sweeping is housekeeping, not correctness: without it a full store
    /// still reuses recovered cells when new keys arrive.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime (as `tokio::spawn` does).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::{Limiter, MemoryStore, SystemClock};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let limiter = Arc::new(Limiter::new(MemoryStore::default(), SystemClock::default()));
    /// let sweeper = limiter.spawn_sweeper(Duration::from_secs(10));
    /// drop(limiter); // the sweeper notices and stops
    /// # sweeper.await.unwrap();
    /// # }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn spawn_sweeper(self: &std::sync::Arc<Self>, every: std::time::Duration) -> tokio::task::JoinHandle<()> {
        let weak = std::sync::Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let parts = match weak.upgrade() {
                    Some(limiter) => limiter.store.sweep_parts(),
                    None => return,
                };
                for part in 0..parts {
                    match weak.upgrade() {
                        Some(limiter) => {
                            let now = limiter.clock.now();
                            limiter.store.sweep_part(part, now);
                        }
                        None => return,
                    }
                    tokio::task::yield_now().await;
                }
            }
        })
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for Limiter<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Where the store placed the charge an admitted `charged` reports.
pub(crate) fn placement_of(charged: &Decision) -> Placement {
    if charged.is_overflow() {
        Placement::Overflow
    } else if charged.is_grouped() {
        Placement::Group
    } else {
        Placement::Own
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::ManualClock;

    /// A tenant's subnet brings in at most a quarter of its network's new
    /// keys, then shares the network's cell; another subnet of the same
    /// network still gets cells of its own.
    #[test]
    fn a_subgroup_brings_in_a_quarter_of_its_groups_new_keys() {
        let store = MemoryStore::builder().new_keys_per_group(Quota::per_minute(4)).build();
        let limiter = Limiter::new(store, ManualClock::new());
        let quota = Quota::per_minute(1);
        let net = "2001:db8:aaaa::/48";
        let check = |addr: &str, subnet: &str| {
            limiter.check_cell(limiter.subgrouped_cell_key(0, addr, &net, &subnet), &quota, 1)
        };
        assert!(!check("2001:db8:aaaa:101::", "2001:db8:aaaa:100::/56").is_grouped());
        assert!(check("2001:db8:aaaa:102::", "2001:db8:aaaa:100::/56").is_grouped());
        assert!(!check("2001:db8:aaaa:201::", "2001:db8:aaaa:200::/56").is_grouped());
    }
}
