//! One shard of the [`MemoryStore`](super::MemoryStore): its table of
//! buckets and the cell protocol on it (probe, claim, update, insert under
//! the occupancy bound, incremental sweep). The store owns the shards, the
//! bound and the overflow cells; this file owns what happens inside one
//! shard's table, which the loom models (`tests/builds/loom_store.rs`) explore.
//!
//! A hand-over (sweep, takeover, claim) publishes the new owner's TAT above
//! the one it evicted, so without refunds a slot's TAT only grows and a
//! stale CAS cannot land on the next owner's cell. A refund lowers a TAT,
//! so every update (the home-bucket fast path, [`Shard::update_at_home`],
//! and the general loop, `MemoryStore::place_slow`) also checks the key
//! after its CAS and hands a misplaced write back: see "Refunds" in
//! `memory.rs`.

use crate::engine::gcra::MAX_TAT;
use crate::engine::sync::{spin_loop, yield_now, AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Buckets an insert at the bound may sweep (one 2 KiB stretch of memory), so
/// a new key can find room freed anywhere in its shard, at a bounded cost.
pub(super) const INCREMENTAL_SWEEP_BUCKETS: usize = 32;

pub(super) const SLOTS_PER_BUCKET: usize = 4;
/// Buckets a key may live in, starting at its home bucket.
#[cfg(not(loom))]
pub(super) const PROBE_BUCKETS: usize = 16;
/// Under loom, one bucket: the model stays small enough to explore fully.
#[cfg(loom)]
pub(super) const PROBE_BUCKETS: usize = 1;
/// TAT of a slot that is empty or changing hands. Never a real TAT: the GCRA
/// never asks to store more than `MAX_TAT`, and the store caps it anyway.
pub(super) const BUSY: u64 = u64::MAX;

#[repr(align(64))]
pub(super) struct Bucket {
    pub(super) keys: [AtomicU64; SLOTS_PER_BUCKET],
    pub(super) tats: [AtomicU64; SLOTS_PER_BUCKET],
}

impl Bucket {
    pub(super) fn new() -> Self {
        Bucket {
            keys: std::array::from_fn(|_| AtomicU64::new(0)),
            tats: std::array::from_fn(|_| AtomicU64::new(BUSY)),
        }
    }
}

/// What a shard counts for operators ([`MemoryStore::stats`](crate::MemoryStore::stats) sums them):
/// per shard, on a cache line of their own, so a flood of new keys on every
/// core (the path that overflows, charges a group's shared cell or sweeps)
/// does not meet on one line; never written on the hit path. std's
/// atomics, not the loom-aware ones: statistics, not part of the cell
/// protocol the loom models check.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct ShardCounters {
    pub(super) overflowed: std::sync::atomic::AtomicU64,
    pub(super) grouped: std::sync::atomic::AtomicU64,
    pub(super) swept: std::sync::atomic::AtomicU64,
    pub(super) repaired: std::sync::atomic::AtomicU64,
}

impl ShardCounters {
    /// A misplaced write handed back (see "Refunds").
    pub(super) fn count_repaired(&self) {
        self.repaired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

pub(super) struct Shard {
    pub(super) buckets: Box<[Bucket]>,
    pub(super) insert_locks: Box<[AtomicBool]>,
    /// Where the next incremental sweep (run by inserts at the bound) starts.
    pub(super) sweep_cursor: AtomicUsize,
    /// The highest TAT the sweep has evicted from this shard. A claim of an
    /// empty slot publishes a TAT above it, so a slot's TAT only ever grows
    /// across owners (refunds aside: see "Refunds" in `memory.rs`).
    pub(super) evicted_high: AtomicU64,
    /// What this shard counts for operators (`MemoryStore::stats`).
    pub(super) counters: ShardCounters,
}

/// Waits a little for another thread to finish moving a slot: spin first,
/// then yield (the other thread may have been preempted mid-move).
pub(super) fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        spin_loop();
    } else {
        yield_now();
    }
}

/// Takes one unit of the occupancy bound, if any is left.
fn reserve(occupied: &AtomicUsize, cap: usize) -> bool {
    let mut current = occupied.load(Ordering::Relaxed);
    while current < cap {
        match occupied.compare_exchange_weak(current, current + 1, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
    false
}

/// Releases a bucket's insert lock on drop.
struct InsertGuard<'a>(&'a AtomicBool);

impl Drop for InsertGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

pub(super) enum Insert {
    Done,
    /// The key appeared meanwhile: update it instead.
    Present,
    /// No room: sweep, charge the overflow cell, or refuse.
    Full,
}

impl Shard {
    #[inline]
    pub(super) fn home(&self, hash: u64) -> usize {
        // Multiply-shift maps the low 32 bits onto the bucket count without a
        // division and without requiring a power of two (no memory wasted).
        (((hash & 0xffff_ffff) * self.buckets.len() as u64) >> 32) as usize
    }

    #[inline]
    pub(super) fn window(&self, home: usize) -> impl Iterator<Item = &Bucket> {
        let n = self.buckets.len();
        (0..PROBE_BUCKETS.min(n)).map(move |i| {
            let mut b = home + i;
            if b >= n {
                b -= n;
            }
            &self.buckets[b]
        })
    }

    #[inline]
    pub(super) fn find(&self, home: usize, hash: u64) -> Option<(&Bucket, usize)> {
        for bucket in self.window(home) {
            for (i, key) in bucket.keys.iter().enumerate() {
                if key.load(Ordering::Acquire) == hash {
                    return Some((bucket, i));
                }
            }
        }
        None
    }

    /// The hit path of an update, straight-line: `hash` in its home
    /// bucket, its cell not changing hands, the CAS not raced. Same
    /// protocol as the general loop in `MemoryStore::place_slow` (read the
    /// TAT, re-check the key, CAS, re-check the key after it); `None`
    /// whenever any step does not go the plain way, and the caller starts
    /// over on the general path, which calls `f` again (the `Store`
    /// contract allows it: only the last call's result counts). A write
    /// that landed on another key's cell has been handed back by then.
    #[inline(always)]
    pub(super) fn update_at_home<T>(
        &self,
        home: usize,
        hash: u64,
        f: &mut impl FnMut(u64) -> (T, Option<u64>),
    ) -> Option<T> {
        let bucket = &self.buckets[home];
        let i = bucket.keys.iter().position(|k| k.load(Ordering::Acquire) == hash)?;
        let current = bucket.tats[i].load(Ordering::Acquire);
        if current == BUSY || bucket.keys[i].load(Ordering::Acquire) != hash {
            return None;
        }
        let (out, write) = f(current);
        let Some(tat) = write else {
            return Some(out);
        };
        let tat = tat.min(MAX_TAT);
        bucket.tats[i]
            .compare_exchange(current, tat, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        if bucket.keys[i].load(Ordering::Acquire) == hash {
            return Some(out);
        }
        // Our write landed on another key's cell, which held exactly
        // `current`: hand it back (see "Refunds" in `memory.rs`).
        let _ = bucket.tats[i].compare_exchange(tat, current, Ordering::AcqRel, Ordering::Relaxed);
        self.counters.count_repaired();
        None
    }

    fn lock(&self, home: usize) -> InsertGuard<'_> {
        let lock = &self.insert_locks[home];
        let mut spins = 0;
        while lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            backoff(&mut spins);
        }
        InsertGuard(lock)
    }

    /// Makes the evictor the only writer of a recovered slot: CAS its TAT
    /// from `t <= now` to `BUSY`, returning `t`. `None` if the slot is not a
    /// recovered cell (or another thread got there first).
    #[inline]
    pub(super) fn take_recovered(bucket: &Bucket, i: usize, now: u64) -> Option<u64> {
        if bucket.keys[i].load(Ordering::Acquire) == 0 {
            return None;
        }
        let t = bucket.tats[i].load(Ordering::Acquire);
        let taken = t != BUSY
            && t <= now
            && bucket.tats[i]
                .compare_exchange(t, BUSY, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        taken.then_some(t)
    }

    /// Inserts `hash` with `tat` unless it is present; called with the
    /// decision already made against a fresh cell.
    pub(super) fn insert(
        &self,
        home: usize,
        hash: u64,
        tat: u64,
        now: u64,
        occupied: &AtomicUsize,
        cap: usize,
    ) -> Insert {
        let _guard = self.lock(home);
        if self.find(home, hash).is_some() {
            return Insert::Present;
        }
        if reserve(occupied, cap) {
            for bucket in self.window(home) {
                for (i, key) in bucket.keys.iter().enumerate() {
                    if key.load(Ordering::Relaxed) == 0
                        && key
                            .compare_exchange(0, hash, Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok()
                    {
                        // The slot's TAT is BUSY (empty); only we may write
                        // it. Publish above anything ever evicted here (the
                        // sweep raised the mark before emptying the key we
                        // just replaced, and our CAS read that store).
                        let floor = self.evicted_high.load(Ordering::Acquire);
                        let tat = tat.max(floor.saturating_add(1)).min(MAX_TAT);
                        bucket.tats[i].store(tat, Ordering::Release);
                        return Insert::Done;
                    }
                }
            }
            // The window is full: give the unit back.
            occupied.fetch_sub(1, Ordering::AcqRel);
        }
        // At the bound, or the window is full: take over a recovered cell.
        for bucket in self.window(home) {
            for i in 0..SLOTS_PER_BUCKET {
                if let Some(evicted) = Self::take_recovered(bucket, i, now) {
                    bucket.keys[i].store(hash, Ordering::Release);
                    // `tat > now >= evicted` already; the max makes the
                    // slot's "only grows" rule explicit.
                    let tat = tat.max(evicted.saturating_add(1)).min(MAX_TAT);
                    bucket.tats[i].store(tat, Ordering::Release);
                    return Insert::Done;
                }
            }
        }
        Insert::Full
    }

    pub(super) fn sweep(&self, now: u64, occupied: &AtomicUsize) -> usize {
        self.sweep_range(0, self.buckets.len(), now, occupied)
    }

    /// Sweeps the next `INCREMENTAL_SWEEP_BUCKETS` buckets after the cursor.
    pub(super) fn sweep_some(&self, now: u64, occupied: &AtomicUsize) -> usize {
        let n = self.buckets.len();
        let step = INCREMENTAL_SWEEP_BUCKETS.min(n);
        let start = self.sweep_cursor.fetch_add(step, Ordering::Relaxed) % n;
        let end = start + step;
        if end <= n {
            self.sweep_range(start, end, now, occupied)
        } else {
            self.sweep_range(start, n, now, occupied) + self.sweep_range(0, end - n, now, occupied)
        }
    }

    pub(super) fn sweep_range(&self, start: usize, end: usize, now: u64, occupied: &AtomicUsize) -> usize {
        let mut evicted = 0;
        for bucket in &self.buckets[start..end] {
            for i in 0..SLOTS_PER_BUCKET {
                if let Some(t) = Self::take_recovered(bucket, i, now) {
                    // Raise the mark before the key store that publishes the
                    // empty slot, so its next claimer sees it.
                    self.evicted_high.fetch_max(t, Ordering::AcqRel);
                    // Empty: key 0, TAT left BUSY.
                    bucket.keys[i].store(0, Ordering::Release);
                    // Give the unit back at once, so inserts waiting on the
                    // bound see the room.
                    occupied.fetch_sub(1, Ordering::AcqRel);
                    evicted += 1;
                }
            }
        }
        evicted
    }
}
