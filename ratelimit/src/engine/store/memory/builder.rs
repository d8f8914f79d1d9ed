//! Building a [`MemoryStore`]: its bound, overflow policy, shards and
//! group budget, checked before anything is allocated.

use std::fmt;

use super::super::shard::{Bucket, Shard, ShardCounters, PROBE_BUCKETS, SLOTS_PER_BUCKET};
use super::groups::subgroup_share;
use super::{
    Counters, MemoryStore, Occupied, OverflowCell, OverflowPolicy, MAX_SUPPORTED_KEYS, OVERFLOW_CELLS,
    SLOTS_PER_KEY_DEN, SLOTS_PER_KEY_NUM,
};
use crate::engine::sync::{AtomicBool, AtomicU64, AtomicUsize};
use crate::Quota;

/// Configures a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder {
    max_keys: usize,
    policy: OverflowPolicy,
    shards: Option<usize>,
    group_budget: Option<Quota>,
}

impl MemoryStoreBuilder {
    /// The defaults ([`MemoryStore::builder`]): 100,000 keys, shared
    /// overflow bucket.
    pub(super) fn new() -> Self {
        MemoryStoreBuilder {
            max_keys: MemoryStore::DEFAULT_MAX_KEYS,
            policy: OverflowPolicy::default(),
            shards: None,
            group_budget: None,
        }
    }

    /// The most keys held at once (at least 1; default 100,000). Memory is
    /// `32 bytes × max_keys`, allocated when the store is built.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// What happens to new keys when the store is full of live keys.
    pub fn overflow(mut self, policy: OverflowPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Bounds the new keys one [group](crate::CellKey::group) brings into the
    /// store to `budget` (a burst of new keys, refilled at its rate): a
    /// group's new key past it is charged to the group's shared cell on its
    /// route ([`Placement::Group`](crate::Placement::Group)), not given a cell of its own. Keys
    /// already in the store are not affected, nor keys without a group.
    /// Off by default.
    ///
    /// ```
    /// use ratelimit::{CellKey, MemoryStore, Placement, Quota, Store};
    ///
    /// let store = MemoryStore::builder()
    ///     .new_keys_per_group(Quota::per_minute(2))
    ///     .build();
    /// let charge = |key: u64| store.update(CellKey::new(key, 0).in_group(7), 0, |_| ((), Some(1_000))).unwrap().1;
    /// assert_eq!(charge(1), Placement::Own);
    /// assert_eq!(charge(2), Placement::Own);
    /// assert_eq!(charge(3), Placement::Group, "the group's third new key this minute");
    /// assert_eq!(charge(1), Placement::Own, "known keys keep their cells");
    /// ```
    ///
    /// A key in a [subgroup](crate::CellKey::in_subgroup) (a subnet of the
    /// network) first spends its subgroup's share, a quarter of `budget`
    /// (rate and burst, rounded up), and the group's budget only when the
    /// share admits it: one subgroup flooding new keys leaves the group's
    /// other subgroups at least three quarters of the budget.
    ///
    /// ```
    /// use ratelimit::{CellKey, MemoryStore, Placement, Quota, Store};
    ///
    /// let store = MemoryStore::builder().new_keys_per_group(Quota::per_minute(8)).build();
    /// let charge = |key: u64, subnet: u32| {
    ///     let key = CellKey::new(key, 0).in_group(7).in_subgroup(subnet);
    ///     store.update(key, 0, |_| ((), Some(1_000))).unwrap().1
    /// };
    /// let own = (1..100).filter(|&k| charge(k, 1) == Placement::Own).count();
    /// assert_eq!(own, 2, "subnet 1: its share, a quarter of 8");
    /// assert_eq!(charge(1000, 2), Placement::Own, "subnet 2 still has its own");
    /// ```
    pub fn new_keys_per_group(mut self, budget: Quota) -> Self {
        self.group_budget = Some(budget);
        self
    }

    /// The number of shards, rounded down to a power of two, between 1 and
    /// 64. The default scales with `max_keys` (one shard per 16,384 keys).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards.max(1));
        self
    }

    /// Allocates the store.
    ///
    /// # Panics
    ///
    /// If `max_keys` is above 2^32 (use [`try_build`](Self::try_build) to
    /// get the error as a value).
    pub fn build(self) -> MemoryStore {
        self.try_build().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether [`try_build`](Self::try_build) would succeed, without
    /// allocating anything (what a configuration checker asks: a store of a
    /// billion keys is 32 GB).
    pub fn validate(&self) -> Result<(), StoreConfigError> {
        if self.max_keys > MAX_SUPPORTED_KEYS {
            return Err(StoreConfigError {
                max_keys: self.max_keys,
            });
        }
        Ok(())
    }

    /// Allocates the store, or explains why the configuration is refused.
    pub fn try_build(self) -> Result<MemoryStore, StoreConfigError> {
        self.validate()?;
        let max_keys = self.max_keys;
        let wanted = self.shards.unwrap_or(max_keys / 16_384).clamp(1, 64);
        let shard_count = 1usize << wanted.ilog2();
        let shards = (0..shard_count)
            .map(|i| {
                let share = max_keys / shard_count + usize::from(i < max_keys % shard_count);
                let slots = (share * SLOTS_PER_KEY_NUM).div_ceil(SLOTS_PER_KEY_DEN);
                // Tiny shards get a whole probe window, so a few keys never
                // collide into overflow.
                let buckets = slots.div_ceil(SLOTS_PER_BUCKET).max(PROBE_BUCKETS);
                Shard {
                    buckets: (0..buckets).map(|_| Bucket::new()).collect(),
                    insert_locks: (0..buckets).map(|_| AtomicBool::new(false)).collect(),
                    sweep_cursor: AtomicUsize::new(0),
                    evicted_high: AtomicU64::new(0),
                    counters: ShardCounters::default(),
                }
            })
            .collect();
        Ok(MemoryStore {
            shards,
            occupied: Occupied(AtomicUsize::new(0)),
            shard_shift: 64 - shard_count.trailing_zeros(),
            overflow: (0..OVERFLOW_CELLS).map(|_| OverflowCell(AtomicU64::new(0))).collect(),
            policy: self.policy,
            max_keys,
            group_budget: self.group_budget,
            subgroup_budget: self.group_budget.as_ref().map(subgroup_share),
            counters: Counters::default(),
        })
    }
}

/// A [`MemoryStore`] configuration that cannot be built.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreConfigError {
    max_keys: usize,
}

crate::engine::errors::debug_as_display!(StoreConfigError);

impl fmt::Display for StoreConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "max_keys = {} is above the supported {} (each key reserves 32 bytes up front)",
            self.max_keys, MAX_SUPPORTED_KEYS
        )
    }
}

impl std::error::Error for StoreConfigError {}
