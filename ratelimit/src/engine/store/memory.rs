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
//! Why a stale updater's CAS does not land on another key's cell: **without
//! refunds, a slot's TAT only ever grows, across owners too** (`BUSY` aside,
//! which no CAS expects). Within one owner every charge writes
//! `max(stored, now) + n*T`, above the stored value. A takeover publishes
//! above the TAT it evicted. A sweep raises its shard's `evicted_high` mark
//! to the evicted TAT before it empties the key, and a claim of that empty
//! slot (which reads the key store, so sees the mark) publishes above the
//! mark. So a CAS that still finds the value the updater read means nothing
//! was written since: the key has not changed hands. (The mark is per
//! shard: after a test's `ManualClock` is stepped back past evicted TATs,
//! new keys in that shard start above the mark, i.e. limited a little more,
//! never less.)
//!
//! # Refunds
//!
//! A refund ([`Limiter::refund`](crate::Limiter::refund)) lowers
//! a TAT, which breaks "only grows", and the hole is real: an updater of
//! key K reads TAT `X` and stalls; K is refunded below `X`, recovers, is
//! swept; key K2 claims the slot (above the *evicted* TAT, which is now
//! below `X`) and its charges reach exactly `X`; the stalled CAS
//! `X -> f(X)` succeeds on K2's cell. What the protocol needs is that a new
//! owner's values never meet a value an old owner held; with refunds the
//! old owner's highest value is no longer the one evicted, and no per-slot
//! room is left to remember it (a bucket is one cache line of four keys and
//! four TATs). Bounding refunds does not close it either: any refund that
//! lowers a TAT makes the evicted value smaller than an earlier one, and
//! publishing new keys above the highest refunded TAT of a shard would start
//! every new client there in debt, up to a whole bucket of the refunded
//! quota (a day, for a daily quota).
//!
//! So the hit path checks instead of assuming: after a successful CAS it
//! loads the slot's key again (the same cache line it just wrote, one load;
//! debug builds did this already as an assertion). A key that is not its
//! own means the write landed on another key's cell, which held exactly the
//! value the CAS expected: the updater CASes that value back, counts it
//! ([`StoreStats::repaired`]) and redoes its update from the lookup, on its
//! own key. The check is reliable: the CAS read a value written after the
//! new owner's key store (release/acquire all the way), and no key store
//! can follow without the slot going through `BUSY`, which the CAS would
//! have failed on.
//!
//! What is left, and what it costs: the hand-back CAS fails only if the
//! new owner updated its cell from the misplaced value in the window between
//! the two CASes (a few instructions). Then one operation's delta stays on
//! the wrong cell: a charge of K (`n` units of K's interval) is also
//! charged to K2 (K2 is limited a little more for one bucket's time; K's
//! own cell is charged correctly by the redo), or a refund of K is handed
//! to K2 (K2 gets up to `n` of K's intervals it did not earn, once). All of
//! this needs, together: a refund of K while another update of K is in
//! flight, that update stalled (preempted) until K's refunded TAT has
//! passed, K swept and its slot claimed by K2, K2's TAT equal to the
//! nanosecond to the stale read, and a K2 update inside the two-CAS window.
//! The loom models (`tests/builds/loom_store.rs`) play the first five with a
//! `ManualClock`-like fixed `now`, where equal values are easy, and check
//! both keys end with the model's TATs.
//!
//! # Bounds
//!
//! The store holds at most `max_keys` cells: one counter over all shards,
//! incremented only while below the bound (each shard's table has room for
//! twice its fair share, so an uneven spread is absorbed). At the bound, or
//! when its probe window is full, a new key takes over a recovered cell in its
//! window, or sweeps a bounded stretch of its shard and retries once; failing
//! that it is charged to an overflow cell (or refused). A flood of new keys
//! never evicts a live (limited) client and never gets through unlimited.
//!
//! # Groups
//!
//! A key may belong to a group (the client's network: an IPv6 /48, an IPv4
//! /24). With [`MemoryStoreBuilder::new_keys_per_group`], each group may
//! bring only so many new keys into the table per window, counted in a GCRA
//! cell of the group's own; a new key past that budget is charged to a cell
//! the group shares on that route ([`Placement::Group`]). So one network
//! rotating addresses (a /48 holds 65,536 /64s) fills at most its budget of
//! cells, not the table, and is limited as one client beyond it. Only the
//! miss path (a key without a cell) reads the budget: a key already in the
//! table costs nothing more.
//!
//! Overflow is spread over 4,096 cells by the key's group and route, so when many
//! networks do fill the table, a new client shares an overflow cell with the
//! flood only if its network's cell is one the flood's networks landed on:
//! the collateral is a fraction. Keys without a group share their route's
//! overflow cell (spreading them by their own hash would give a client that
//! mints keys a fresh cell per key).

use crate::engine::gcra::MAX_TAT;
use crate::engine::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::Quota;
use std::fmt;

use super::shard::{backoff, Bucket, Insert, Shard, BUSY};
use super::{CellKey, Placement, Store};

mod builder;
mod groups;
mod stats;

pub use builder::{MemoryStoreBuilder, StoreConfigError};
use groups::group_cell;
pub use stats::StoreStats;

/// Slots per key at the bound, as a ratio: the table is at most half full.
/// Linear probing clusters: filling 940,000 random keys to the bound across
/// 200 tables, 16-bucket windows at half load overflowed none, against 274
/// at 3/4 load (and 1 with 8-bucket windows at half load).
const SLOTS_PER_KEY_NUM: usize = 2;
const SLOTS_PER_KEY_DEN: usize = 1;
/// Overflow cells, picked by a key's group (or its hash): a flood from `n`
/// networks spends about `n` of them, not every new client's.
const OVERFLOW_CELLS: usize = 4096;
/// The largest `max_keys` a store accepts (128 GiB of table).
const MAX_SUPPORTED_KEYS: usize = 1 << 32;
/// What a full store does with a key it has no room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OverflowPolicy {
    /// Charge the key to a shared overflow cell, with the request's own
    /// quota: the new clients that land on one cell together get one
    /// client's allowance until room frees up. A key with a
    /// [group](CellKey::group) (the HTTP runtime groups address and header
    /// keys by network) lands on one of 4,096 cells picked by its group and route;
    /// a key without one shares its route's cell.
    #[default]
    SharedBucket,
    /// Deny the request ([`Denial::StoreFull`](crate::Denial::StoreFull)).
    Refuse,
}

/// A counter on a cache line of its own (written only by inserts and sweeps).
#[repr(align(64))]
struct Occupied(AtomicUsize);

/// Whole sweeps, counted by the sweeper (one writer).
#[derive(Default)]
struct Counters {
    sweeps: std::sync::atomic::AtomicU64,
}

/// Not padded to a cache line: overflow is the degraded path, and 4,096
/// padded cells would cost 256 KiB per store.
struct OverflowCell(AtomicU64);

/// A bijective 64-bit mix (the splitmix64 finalizer): derived cell keys and
/// overflow indices do not correlate with the bits that pick shards.
#[inline]
pub(crate) const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The overflow cell of `key`: by its group and route, else its route's.
fn overflow_index(key: CellKey) -> usize {
    if key.group() != 0 {
        // The top bits of the mix: OVERFLOW_CELLS is a power of two.
        // The route too: a network's overflow on one route must not
        // be charged, with that route's quota, to its others.
        (mix(key.group() ^ u64::from(key.route()).rotate_left(32)) >> (64 - OVERFLOW_CELLS.trailing_zeros())) as usize
    } else {
        key.route() as usize % OVERFLOW_CELLS
    }
}

/// Tags the key of an overflow cell (see [`placed_cell`]).
const OVERFLOW_TAG: u64 = 0x6f76_6572_666c_2d31; // "overfl-1"

/// The cell a charge of `key` was placed in, as a key of its own: the key's
/// cell, its group's shared cell on its route ([`Placement::Group`]), or
/// the overflow cell it shares ([`Placement::Overflow`]). What else is
/// counted per client (requests in flight) is counted there too, so a
/// client the store limits as one is one for that as well. The group stays
/// on the key (what is spread by network stays spread).
pub(crate) fn placed_cell(key: CellKey, placement: Placement) -> CellKey {
    let cell = match placement {
        Placement::Own => return key,
        Placement::Group if key.group() != 0 => group_cell(key.group(), key.route()),
        Placement::Group => return key,
        Placement::Overflow => CellKey::new(
            mix(OVERFLOW_TAG ^ overflow_index(key) as u64) ^ u64::from(key.route()),
            key.route(),
        ),
    };
    cell.in_group(key.group())
}

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
    group_budget: Option<Quota>,
    /// A subgroup's share of `group_budget`: a quarter.
    subgroup_budget: Option<Quota>,
    counters: Counters,
}

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
            .field("group_budget", &self.group_budget)
            .finish()
    }
}

impl MemoryStore {
    /// Most keys held at once, by default.
    pub const DEFAULT_MAX_KEYS: usize = 100_000;

    /// A builder with the defaults: 100,000 keys, shared overflow bucket.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder::new()
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

    /// The overflow cell of `key`: by its group, else its route's.
    ///
    /// Not by the key's own hash: a client that mints keys would then get a
    /// fresh overflow cell per key, 4,096 clients' allowance. A group is
    /// what it cannot mint cheaply (networks), so spreading by group gives
    /// a flood only as many cells as it has networks.
    fn overflow_cell(&self, key: CellKey) -> &AtomicU64 {
        &self.overflow[overflow_index(key)].0
    }

    fn update_overflow<T, F>(&self, key: CellKey, mut f: F) -> (T, Placement)
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        let cell = self.overflow_cell(key);
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

impl MemoryStore {
    /// [`Store::update`], with overflow (or refusal, per the policy) into
    /// `overflow`'s cell when given, else `None` when the key finds no room.
    /// (A group's shared cell overflows into the cell of the group's key,
    /// not into the route's cell of ungrouped keys.)
    ///
    /// Split in two: the common case (the key sits in its home bucket and
    /// its cell is not changing hands) is a straight line inlined into the
    /// caller, the rest ([`place_slow`](Self::place_slow)) a call. At a
    /// million keys a decision waits on two cache misses (the key's bytes
    /// and its bucket); fewer instructions between them let the CPU start
    /// the next request's miss while this one's is outstanding, which is
    /// what the bench's floor does (`docs/engine.md`, "Against the floor").
    #[inline(always)]
    fn place<T, F>(&self, key: CellKey, now: u64, overflow: Option<CellKey>, mut f: F) -> Option<(T, Placement)>
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        let hash = key.hash(); // never 0: `CellKey::new` guarantees it
        let shard = self.shard(hash);
        let home = shard.home(hash);
        if let Some(out) = shard.update_at_home(home, hash, &mut f) {
            return Some((out, Placement::Own));
        }
        self.place_slow(key, now, overflow, shard, home, f)
    }

    /// [`place`](Self::place) after the home bucket's fast path found
    /// nothing it could settle: the whole probe window, new keys, the
    /// group budget, the bound and overflow.
    #[inline(never)]
    fn place_slow<T, F>(
        &self,
        key: CellKey,
        now: u64,
        overflow: Option<CellKey>,
        shard: &Shard,
        home: usize,
        mut f: F,
    ) -> Option<(T, Placement)>
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        let hash = key.hash();
        let mut swept = false;
        let mut budgeted = false;
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
                            // The CAS found the value we read; without
                            // refunds that proves the slot did not change
                            // hands, with them it does not (see "Refunds" in
                            // the module docs): look at the key again (same
                            // cache line, just written).
                            if bucket.keys[i].load(Ordering::Acquire) == hash {
                                return Some((out, Placement::Own));
                            }
                            // Our write landed on another key's cell, which
                            // held exactly `current`: hand it back, and do
                            // our update again on our own key. (If its owner
                            // already moved on from our value, the CAS fails
                            // and the value stays: see the module docs.)
                            let _ = bucket.tats[i].compare_exchange(tat, current, Ordering::AcqRel, Ordering::Relaxed);
                            shard.counters.count_repaired();
                            continue 'lookup;
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
            // A new key of a group spends one unit of the group's budget of
            // new keys (once, even if the insert below finds it arrived
            // meanwhile), or is charged to the group's shared cell.
            if !budgeted && key.group() != 0 {
                budgeted = true;
                if let Some(budget) = &self.group_budget {
                    if !self.admits_new_key(key, now, budget) {
                        let shared = group_cell(key.group(), key.route());
                        return self
                            .place(shared, now, overflow.map(|_| key), f)
                            .map(|(out, placed)| match placed {
                                Placement::Own => {
                                    shard
                                        .counters
                                        .grouped
                                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    (out, Placement::Group)
                                }
                                other => (out, other),
                            });
                    }
                }
            }
            match shard.insert(home, hash, tat.min(MAX_TAT), now, &self.occupied.0, self.max_keys) {
                Insert::Done => return Some((out, Placement::Own)),
                Insert::Present => continue,
                Insert::Full => {
                    // At the bound with no recovered cell nearby: sweep a
                    // bounded stretch of the shard once, then try again.
                    if !swept {
                        swept = true;
                        let freed = shard.sweep_some(now, &self.occupied.0);
                        if freed > 0 {
                            shard
                                .counters
                                .swept
                                .fetch_add(freed as u64, std::sync::atomic::Ordering::Relaxed);
                            continue;
                        }
                    }
                    // A request's own key with no room (not a group's budget
                    // cell, which passes no overflow cell).
                    if overflow.is_some() {
                        shard
                            .counters
                            .overflowed
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    return match self.policy {
                        OverflowPolicy::SharedBucket => overflow.map(|of| self.update_overflow(of, f)),
                        OverflowPolicy::Refuse => None,
                    };
                }
            }
        }
    }
}

impl MemoryStore {
    /// `swept` cells of `shard`, counted.
    fn counted(shard: &Shard, swept: usize) -> usize {
        if swept > 0 {
            shard
                .counters
                .swept
                .fetch_add(swept as u64, std::sync::atomic::Ordering::Relaxed);
        }
        swept
    }
}

impl Store for MemoryStore {
    #[inline(always)]
    fn prefetch(&self, key: CellKey) {
        // A plain load of the home bucket's line; its result is not used,
        // only the cache fill it starts (stable Rust has no prefetch
        // intrinsic that is safe to call).
        let shard = self.shard(key.hash());
        let bucket = &shard.buckets[shard.home(key.hash())];
        std::hint::black_box(bucket.keys[0].load(Ordering::Relaxed));
    }

    #[inline(always)]
    fn update<T, F>(&self, key: CellKey, now: u64, f: F) -> Option<(T, Placement)>
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        self.place(key, now, Some(key), f)
    }

    fn update_shared<T, F>(&self, key: CellKey, placement: Placement, now: u64, mut f: F) -> Option<T>
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        match placement {
            // The overflow cells always exist; which one is the key's does
            // not depend on the store's state.
            Placement::Overflow => Some(self.update_overflow(key, f).0),
            Placement::Group if key.group() != 0 => {
                let shared = group_cell(key.group(), key.route());
                // Only a cell that is there: a write for a missing one
                // (`stored` 0) is dropped, so no cell is made.
                self.place(shared, now, None, |stored| {
                    let (out, write) = f(stored);
                    (out, write.filter(|_| stored != 0))
                })
                .map(|(out, _)| out)
            }
            _ => None,
        }
    }

    fn sweep(&self, now: u64) -> usize {
        let swept = self
            .shards
            .iter()
            .map(|s| Self::counted(s, s.sweep(now, &self.occupied.0)))
            .sum();
        self.counters.sweeps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        swept
    }

    fn sweep_parts(&self) -> usize {
        self.shards.len()
    }

    fn sweep_part(&self, part: usize, now: u64) -> usize {
        let swept = self
            .shards
            .get(part)
            .map_or(0, |s| Self::counted(s, s.sweep(now, &self.occupied.0)));
        if part + 1 == self.shards.len() {
            self.counters.sweeps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        swept
    }

    fn len(&self) -> usize {
        self.occupied.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
