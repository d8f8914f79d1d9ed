//! `MemoryStore`: a bounded, lock-free table of GCRA cells.
//!
//! # Layout
//!
//! The table is split into shards; each shard is a fixed array of 64-byte
//! buckets (one cache line) of four slots. A slot is two `AtomicU64`s: the
//! key's 64-bit hash (`0`: no key) and its TAT (`BUSY`: the slot is empty or
//! changing hands).
//!
//! A key lives in one of `PROBE_BUCKETS` consecutive buckets from its home
//! bucket (wrapping within the shard). Lookups scan that window; they never
//! stop at an empty slot, so removing a cell never hides another one.
//!
//! # Concurrency
//!
//! * **Hit** (the hot path): find the key, read the TAT, check the key is
//!   still there, decide, CAS the TAT. No lock and no waiting, except behind
//!   the eviction of the key's own (fully recovered) cell, or the claim of
//!   its new one, for the other thread's two stores.
//! * **Insert** of a new key: under the home bucket's insert lock, re-scan,
//!   then claim an empty slot (CAS key `0 -> hash`, then publish the TAT). All
//!   inserts of one key share its home bucket, so the lock is what prevents two
//!   cells for one key. It is held for one window scan, never on the hit path.
//! * **Eviction** (sweep, or an insert taking over a recovered cell): CAS the
//!   TAT from a value `<= now` to `BUSY`, which makes the evictor the slot's
//!   only writer; then change the key; then publish the new TAT (or leave
//!   `BUSY` for an empty slot). An updater that raced with this sees `BUSY`,
//!   or a different key on its re-check, or fails its CAS.
//!
//! Why a stale updater's CAS can never land on another key's cell: **a
//! slot's TAT only ever grows, across owners too** (`BUSY` aside, which no
//! CAS expects). Within one owner every write is `max(stored, now) + n*T`,
//! above the stored value. A takeover publishes above the TAT it evicted. A
//! sweep raises its shard's `evicted_high` mark to the evicted TAT before it
//! empties the key, and a claim of that empty slot (which reads the key store,
//! so sees the mark) publishes above the mark. So a CAS that still finds the
//! value the updater read means nothing was written since: the key has not
//! changed hands. Debug builds and the loom models assert it after every CAS.
//! (The mark is per shard: after a test's `ManualClock` is stepped back past
//! evicted TATs, new keys in that shard start above the mark, i.e. limited a
//! little more, never less.)
//!
//! # Bounds
//!
//! The store holds at most `max_keys` cells: one counter over all shards,
//! incremented only while below the bound (each shard's table has room for
//! twice its fair share, so an uneven spread is absorbed). At the bound, or
//! when its probe window is full, a new key takes over a recovered cell in its
//! window, or sweeps a bounded stretch of its shard and retries once; failing
//! that it is charged to the route's overflow cell (or refused). A flood of
//! new keys never evicts a live (limited) client and never gets through
//! unlimited.

use crate::gcra::MAX_TAT;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::fmt;

use super::shard::{backoff, Bucket, Insert, Shard, BUSY, PROBE_BUCKETS, SLOTS_PER_BUCKET};
use super::{CellKey, Placement, Store};

/// Slots per key at the bound, as a ratio: the table is at most half full.
/// Linear probing clusters: filling 940,000 random keys to the bound across
/// 200 tables, 16-bucket windows at half load overflowed none, against 274
/// at 3/4 load (and 1 with 8-bucket windows at half load).
const SLOTS_PER_KEY_NUM: usize = 2;
const SLOTS_PER_KEY_DEN: usize = 1;
/// Per-route overflow cells; routes beyond this share cells by `route % N`.
const OVERFLOW_CELLS: usize = 256;
/// The largest `max_keys` a store accepts (128 GiB of table).
const MAX_SUPPORTED_KEYS: usize = 1 << 32;
/// What a full store does with a key it has no room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OverflowPolicy {
    /// Charge the key to a cell shared by every overflowing key of the same
    /// route, with the request's own quota: all new clients of that route
    /// together get one client's allowance until room frees up.
    #[default]
    SharedBucket,
    /// Deny the request ([`Denial::StoreFull`](crate::Denial::StoreFull)).
    Refuse,
}

/// A counter on a cache line of its own (written only by inserts and sweeps).
#[repr(align(64))]
struct Occupied(AtomicUsize);

#[repr(align(64))]
struct OverflowCell(AtomicU64);

/// The embedded, in-process [`Store`]: bounded, lock-free on the hit path.
///
/// * **Memory** is allocated once, up front: 32 bytes per key of `max_keys`
///   (the default 100,000 keys take 3.2 MB), whatever the keys are. It never grows, whatever clients send.
/// * **Keys** are 64-bit keyed hashes; raw client values are never stored.
/// * **Eviction** only ever drops cells whose TAT is `<= now` (fully
///   recovered), through [`sweep`](Store::sweep) or when a new key takes over
///   a recovered cell. A limited client is never evicted, so it can never get
///   a fresh bucket by waiting for eviction.
/// * **When full of live cells**, new keys follow the [`OverflowPolicy`].
///
/// ```
/// use ratelimit::{Limiter, MemoryStore, OverflowPolicy, SystemClock};
///
/// let store = MemoryStore::builder()
///     .max_keys(1_000_000)
///     .overflow(OverflowPolicy::SharedBucket)
///     .build();
/// assert_eq!(store.max_keys(), 1_000_000);
/// let limiter = Limiter::new(store, SystemClock::default());
/// ```
pub struct MemoryStore {
    shards: Box<[Shard]>,
    /// Occupied slots (live cells plus recovered ones not yet swept), over all
    /// shards: one counter, so the bound is exact whatever the spread of keys
    /// over shards. Only inserts and sweeps touch it, never the hit path.
    occupied: Occupied,
    shard_shift: u32,
    overflow: Box<[OverflowCell]>,
    policy: OverflowPolicy,
    max_keys: usize,
}

/// Configures a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder {
    max_keys: usize,
    policy: OverflowPolicy,
    shards: Option<usize>,
}

impl MemoryStoreBuilder {
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

    /// Allocates the store, or explains why the configuration is refused.
    pub fn try_build(self) -> Result<MemoryStore, StoreConfigError> {
        let max_keys = self.max_keys;
        if max_keys > MAX_SUPPORTED_KEYS {
            return Err(StoreConfigError { max_keys });
        }
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
        })
    }
}

/// A [`MemoryStore`] configuration that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfigError {
    max_keys: usize,
}

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

impl Default for MemoryStore {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("max_keys", &self.max_keys)
            .field("len", &self.len())
            .field("shards", &self.shards.len())
            .field("policy", &self.policy)
            .finish()
    }
}

impl MemoryStore {
    /// Most keys held at once, by default.
    pub const DEFAULT_MAX_KEYS: usize = 100_000;

    /// A builder with the defaults: 100,000 keys, shared overflow bucket.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            max_keys: Self::DEFAULT_MAX_KEYS,
            policy: OverflowPolicy::default(),
            shards: None,
        }
    }

    /// A store holding at most `max_keys` keys, otherwise default.
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self::builder().max_keys(max_keys).build()
    }

    /// Cells held now: live ones plus recovered ones not yet swept. Never
    /// more than [`max_keys`](MemoryStore::max_keys).
    pub fn len(&self) -> usize {
        Store::len(self)
    }

    /// Whether no cell is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configured key bound.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The overflow policy.
    pub fn overflow_policy(&self) -> OverflowPolicy {
        self.policy
    }

    /// Bytes held by the table, overflow cells included (fixed at build).
    pub fn memory_bytes(&self) -> usize {
        let shards: usize = self
            .shards
            .iter()
            .map(|s| {
                s.buckets.len() * std::mem::size_of::<Bucket>()
                    + s.insert_locks.len() * std::mem::size_of::<AtomicBool>()
            })
            .sum();
        std::mem::size_of::<Self>()
            + shards
            + self.shards.len() * std::mem::size_of::<Shard>()
            + self.overflow.len() * std::mem::size_of::<OverflowCell>()
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        // `checked_shr` handles the single-shard case (shift by 64).
        let i = hash.checked_shr(self.shard_shift).unwrap_or(0) as usize;
        &self.shards[i]
    }

    fn update_overflow<T, F>(&self, route: u32, mut f: F) -> (T, Placement)
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        let cell = &self.overflow[route as usize % OVERFLOW_CELLS].0;
        let mut current = cell.load(Ordering::Acquire);
        loop {
            let (out, write) = f(current);
            let Some(tat) = write else {
                return (out, Placement::Overflow);
            };
            match cell.compare_exchange_weak(current, tat, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return (out, Placement::Overflow),
                Err(actual) => current = actual,
            }
        }
    }
}

impl Store for MemoryStore {
    #[inline]
    fn prefetch(&self, key: CellKey) {
        // A plain load of the home bucket's line; its result is not used,
        // only the cache fill it starts (stable Rust has no prefetch
        // intrinsic that is safe to call).
        let shard = self.shard(key.hash());
        let bucket = &shard.buckets[shard.home(key.hash())];
        std::hint::black_box(bucket.keys[0].load(Ordering::Relaxed));
    }

    #[inline]
    fn update<T, F>(&self, key: CellKey, now: u64, mut f: F) -> Option<(T, Placement)>
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        let hash = key.hash(); // never 0: `CellKey::new` guarantees it
        let shard = self.shard(hash);
        let home = shard.home(hash);
        let mut swept = false;
        let mut spins = 0;
        'lookup: loop {
            if let Some((bucket, i)) = shard.find(home, hash) {
                loop {
                    let current = bucket.tats[i].load(Ordering::Acquire);
                    if current == BUSY {
                        // Being filled for this key, or being emptied.
                        backoff(&mut spins);
                        continue 'lookup;
                    }
                    // Re-check the key after reading the TAT: the TAT must be
                    // this key's, not that of a key that took the slot over.
                    if bucket.keys[i].load(Ordering::Acquire) != hash {
                        continue 'lookup;
                    }
                    let (out, write) = f(current);
                    let Some(tat) = write else {
                        return Some((out, Placement::Own));
                    };
                    let tat = tat.min(MAX_TAT);
                    match bucket.tats[i].compare_exchange(current, tat, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => {
                            // A slot's TAT only grows, across owners too, so
                            // a CAS that found the value we read found our
                            // key's cell (see the module docs). Checked where
                            // it is cheap to: tests and the loom models.
                            #[cfg(any(debug_assertions, loom))]
                            assert_eq!(
                                bucket.keys[i].load(Ordering::Acquire),
                                hash,
                                "a CAS landed on another key's cell"
                            );
                            return Some((out, Placement::Own));
                        }
                        Err(_) => continue,
                    }
                }
            }
            // A new key. Decide against a fresh cell first: a denial or a
            // zero-cost probe needs no cell, so it cannot fill the table.
            let (out, write) = f(0);
            let Some(tat) = write else {
                return Some((out, Placement::Own));
            };
            match shard.insert(home, hash, tat.min(MAX_TAT), now, &self.occupied.0, self.max_keys) {
                Insert::Done => return Some((out, Placement::Own)),
                Insert::Present => continue,
                Insert::Full => {
                    // At the bound with no recovered cell nearby: sweep a
                    // bounded stretch of the shard once, then try again.
                    if !swept {
                        swept = true;
                        if shard.sweep_some(now, &self.occupied.0) > 0 {
                            continue;
                        }
                    }
                    return match self.policy {
                        OverflowPolicy::SharedBucket => Some(self.update_overflow(key.route(), f)),
                        OverflowPolicy::Refuse => None,
                    };
                }
            }
        }
    }

    fn sweep(&self, now: u64) -> usize {
        (0..self.shards.len()).map(|i| self.sweep_part(i, now)).sum()
    }

    fn sweep_parts(&self) -> usize {
        self.shards.len()
    }

    fn sweep_part(&self, part: usize, now: u64) -> usize {
        self.shards.get(part).map_or(0, |s| s.sweep(now, &self.occupied.0))
    }

    fn len(&self) -> usize {
        self.occupied.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> CellKey {
        // Spread test keys like a real hash would.
        let hash = (i.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        CellKey::new(hash, 0)
    }

    fn charge(store: &MemoryStore, k: CellKey, now: u64, until: u64) -> Placement {
        store.update(k, now, |_| ((), Some(until))).expect("not refused").1
    }

    #[test]
    fn stores_and_reads_back() {
        let store = MemoryStore::with_max_keys(100);
        assert_eq!(charge(&store, key(1), 10, 50), Placement::Own);
        let (seen, _) = store.update(key(1), 10, |tat| (tat, None)).unwrap();
        assert_eq!(seen, 50);
        let (fresh, _) = store.update(key(2), 10, |tat| (tat, None)).unwrap();
        assert_eq!(fresh, 0);
        assert_eq!(store.len(), 1, "a read of a new key does not insert it");
    }

    #[test]
    fn sweep_evicts_only_recovered_cells() {
        let store = MemoryStore::with_max_keys(100);
        charge(&store, key(1), 0, 100);
        charge(&store, key(2), 0, 200);
        assert_eq!(store.sweep(99), 0);
        assert_eq!(store.sweep(100), 1);
        assert_eq!(store.len(), 1);
        let (tat, _) = store.update(key(2), 150, |t| (t, None)).unwrap();
        assert_eq!(tat, 200);
    }

    #[test]
    fn full_store_charges_overflow_and_never_evicts_live_cells() {
        let store = MemoryStore::with_max_keys(64);
        for i in 0..64 {
            assert_eq!(charge(&store, key(i), 0, 1_000), Placement::Own);
        }
        for i in 64..640 {
            assert_eq!(charge(&store, key(i), 0, 1_000), Placement::Overflow);
        }
        assert_eq!(store.len(), 64);
        for i in 0..64 {
            let (tat, at) = store.update(key(i), 0, |t| (t, None)).unwrap();
            assert_eq!((tat, at), (1_000, Placement::Own), "key {i} kept its cell");
        }
        // Once recovered, new keys take over old cells instead of overflowing.
        assert_eq!(charge(&store, key(10_000), 1_000, 2_000), Placement::Own);
        assert_eq!(store.len(), 64);
    }

    #[test]
    fn refuse_policy_returns_none() {
        let store = MemoryStore::builder()
            .max_keys(1)
            .overflow(OverflowPolicy::Refuse)
            .build();
        charge(&store, key(1), 0, 100);
        assert!(store.update(key(2), 0, |_| ((), Some(100))).is_none());
    }

    #[test]
    fn memory_is_about_32_bytes_per_key() {
        let store = MemoryStore::with_max_keys(1_000_000);
        let per_key = store.memory_bytes() as f64 / 1e6;
        assert!((32.0..33.0).contains(&per_key), "{per_key} bytes per key");
    }

    #[test]
    fn absurd_max_keys_is_refused_with_a_reason() {
        let err = MemoryStore::builder().max_keys(usize::MAX).try_build().unwrap_err();
        assert!(err.to_string().contains("max_keys"), "{err}");
    }

    #[test]
    fn a_tat_is_never_stored_as_busy() {
        let store = MemoryStore::with_max_keys(10);
        charge(&store, key(1), 0, u64::MAX);
        let (tat, _) = store.update(key(1), 0, |t| (t, None)).unwrap();
        assert_eq!(tat, MAX_TAT);
        charge(&store, key(1), 0, u64::MAX);
        let (tat, _) = store.update(key(1), 0, |t| (t, None)).unwrap();
        assert_eq!(tat, MAX_TAT);
    }
}
