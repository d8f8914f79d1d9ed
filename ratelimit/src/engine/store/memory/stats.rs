//! What a [`MemoryStore`] reports of itself: occupancy and counters.

use super::MemoryStore;

/// A snapshot of a [`MemoryStore`]'s occupancy and counters (what the HTTP
/// runtime exports as the `ratelimit_store_*` metrics).
///
/// ```
/// use ratelimit::{Limiter, ManualClock, MemoryStore, OverflowPolicy, Quota};
///
/// let store = MemoryStore::builder().max_keys(1).overflow(OverflowPolicy::SharedBucket).build();
/// let limiter = Limiter::new(store, ManualClock::new());
/// let quota = Quota::per_second(1);
/// limiter.check(&"alice", &quota);
/// limiter.check(&"bob", &quota); // no room: the shared overflow cell
/// let stats = limiter.store().stats();
/// assert_eq!((stats.keys, stats.max_keys, stats.overflowed), (1, 1, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Cells held now (live plus recovered, not yet swept).
    pub keys: usize,
    /// The key bound.
    pub max_keys: usize,
    /// Bytes of the table (fixed at build).
    pub memory_bytes: usize,
    /// Requests charged to a shared overflow cell, or refused, because the
    /// store had no room for their key.
    pub overflowed: u64,
    /// Requests of new keys charged to their group's shared cell (the
    /// group's new-key budget was spent).
    pub grouped: u64,
    /// Whole sweeps ([`Store::sweep`](crate::Store::sweep), or the last part of a
    /// [`Store::sweep_part`](crate::Store::sweep_part) series).
    pub sweeps: u64,
    /// Recovered cells dropped by sweeps, and by the bounded sweep a new
    /// key runs when the store is full (not the cells new keys take over
    /// one by one).
    pub swept: u64,
    /// Hit-path writes that found, right after their compare-and-swap,
    /// that the slot had changed hands (possible only after a refund: see
    /// the module docs) and were handed back to the cell's new owner. Zero
    /// in practice; counted so a test or an operator can see it happen.
    pub repaired: u64,
}

impl MemoryStore {
    /// Occupancy and counters, now (a few relaxed loads).
    pub fn stats(&self) -> StoreStats {
        use std::sync::atomic::Ordering::Relaxed;
        let mut stats = StoreStats {
            keys: self.len(),
            max_keys: self.max_keys,
            memory_bytes: self.memory_bytes(),
            overflowed: 0,
            grouped: 0,
            sweeps: self.counters.sweeps.load(Relaxed),
            swept: 0,
            repaired: 0,
        };
        for s in self.shards.iter() {
            stats.overflowed += s.counters.overflowed.load(Relaxed);
            stats.grouped += s.counters.grouped.load(Relaxed);
            stats.swept += s.counters.swept.load(Relaxed);
            stats.repaired += s.counters.repaired.load(Relaxed);
        }
        stats
    }
}
