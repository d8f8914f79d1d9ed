//! `Limiter`: the engine's entry point, generic over where state lives and
//! where time comes from.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use crate::clock::{Clock, SystemClock};
use crate::decision::{Decision, Denial};
use crate::gcra::{self, Write};
use crate::quota::Quota;
use crate::store::{CellKey, MemoryStore, Placement, Store};

/// A keyed GCRA rate limiter.
///
/// One limiter serves any number of keys and quotas; the quota is passed per
/// check, so limits can change at run time without losing any client's state.
/// A client keeps its theoretical arrival time when its quota changes, so a
/// tier change never hands out a fresh burst: moving to a smaller quota
/// leaves the client in debt, repaid at the new rate, and moving back refills
/// nothing. (Checks that should not share a bucket, such as two endpoints
/// with different limits, belong on different routes: see
/// [`check_route`](Limiter::check_route).)
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
        self.check_route(DEFAULT_ROUTE, key, quota, 1)
    }

    /// Checks a request of weight `cost`. A cost above the quota's burst is
    /// denied with [`Denial::CostExceedsBurst`]: it could never conform. A
    /// cost of `0` charges nothing and reports the state (it is denied only
    /// while the key's debt exceeds the quota's capacity, e.g. right after a
    /// move to a smaller quota).
    #[inline]
    pub fn check_n<K: Hash + ?Sized>(&self, key: &K, quota: &Quota, cost: u32) -> Decision {
        self.check_route(DEFAULT_ROUTE, key, quota, cost)
    }

    /// Checks `key` on `route`: the same client value on two routes has two
    /// independent cells, and each route has its own overflow cell.
    ///
    /// ```
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
    /// let quota = Quota::per_minute(1);
    /// assert!(limiter.check_route(1, "10.0.0.1", &quota, 1).is_allowed());
    /// assert!(limiter.check_route(1, "10.0.0.1", &quota, 1).is_denied());
    /// assert!(limiter.check_route(2, "10.0.0.1", &quota, 1).is_allowed());
    /// ```
    #[inline]
    pub fn check_route<K: Hash + ?Sized>(&self, route: u32, key: &K, quota: &Quota, cost: u32) -> Decision {
        let cell = self.cell_key(route, key);
        self.check_cell(cell, quota, cost)
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
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let store = MemoryStore::builder().new_keys_per_group(Quota::per_minute(1)).build();
    /// let limiter = Limiter::new(store, ManualClock::new());
    /// let quota = Quota::per_minute(1);
    /// let net = "2001:db8:aaaa::/48";
    /// let first = limiter.grouped_cell_key(0, "2001:db8:aaaa:1::", &net);
    /// let second = limiter.grouped_cell_key(0, "2001:db8:aaaa:2::", &net);
    /// assert!(limiter.check_cell(first, &quota, 1).is_allowed());
    /// let d = limiter.check_cell(second, &quota, 1);
    /// assert!(d.is_allowed() && d.is_grouped(), "the network's shared cell");
    /// let third = limiter.grouped_cell_key(0, "2001:db8:aaaa:3::", &net);
    /// assert!(limiter.check_cell(third, &quota, 1).is_denied(), "shares it, spent");
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

    /// Checks a precomputed cell (see [`cell_key`](Limiter::cell_key)).
    #[inline]
    pub fn check_cell(&self, cell: CellKey, quota: &Quota, cost: u32) -> Decision {
        // Start loading the cell before reading the clock: the two overlap.
        self.store.prefetch(cell);
        let now = self.clock.now();
        self.check_cell_at(cell, quota, cost, now)
    }

    /// [`check_cell`](Self::check_cell) at a clock reading taken by the
    /// caller (the fleet gate reads the clock once for both decisions).
    pub(crate) fn check_cell_at(&self, cell: CellKey, quota: &Quota, cost: u32, now: u64) -> Decision {
        let result = self.store.update(cell, now, |stored| {
            let (decision, write) = gcra::decide(stored, now, quota, cost);
            let write = match write {
                Write::Keep => None,
                Write::Store(tat) => Some(tat),
            };
            (decision, write)
        });
        match result {
            Some((decision, Placement::Own)) => decision,
            Some((decision, Placement::Overflow)) => decision.overflowed(),
            Some((decision, Placement::Group)) => decision.grouped(),
            None => Decision::refused(
                Denial::StoreFull,
                quota.burst(),
                0,
                quota.interval_ns(),
                0,
                quota.interval_ns(),
            ),
        }
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
