//! Per-key limits on requests in flight: a rate bounds how often a client
//! starts requests, this bounds how many of them run at once.
//!
//! A [`ConcurrencyLimiter`] counts the permits each key holds. A
//! [`Permit`] is taken before a request runs and given back when it is
//! dropped (the response was sent, failed, or the request's future was
//! cancelled or panicked): there is no way to leak one short of
//! `mem::forget`.
//!
//! # Bounds
//!
//! A key has an entry only while it holds a permit: the entry goes when its
//! last permit is dropped, so a flood of keys that each make one quick
//! request leaves nothing behind, and no key is ever evicted while it has
//! requests in flight (so it can never come back with a fresh allowance).
//! At most `max_keys` keys have entries at once (memory reserved up front:
//! no allocation on the request path). Past that, keys without an entry
//! share one of [`OVERFLOW_SLOTS`] overflow counters, picked by the key's
//! hash, limited together at the requesting key's limit. A key whose
//! overflow counter is in use takes no entry of its own until that counter
//! drains, so a key's permits are never split between its entry and an
//! overflow counter (which would give it its limit twice).
//!
//! Each shard is a short critical section behind its own mutex (the key's
//! hash picks the shard; clients cannot aim at one, the hash is keyed):
//! a take or a give-back is a hash-map probe under it.
//!
//! ```
//! use std::sync::Arc;
//! use ratelimit::CellKey;
//! use ratelimit::concurrency::ConcurrencyLimiter;
//!
//! let limiter = Arc::new(ConcurrencyLimiter::new(10_000));
//! let key = CellKey::new(42, 0);
//! let first = limiter.try_acquire(key, 2).expect("room");
//! let second = limiter.try_acquire(key, 2).expect("room");
//! assert_eq!(second.remaining(), 0);
//! let busy = limiter.try_acquire(key, 2).unwrap_err();
//! assert_eq!(busy.limit(), 2);
//! drop(first);
//! assert!(limiter.try_acquire(key, 2).is_ok());
//! drop(second);
//! assert_eq!(limiter.in_flight(key), 0);
//! assert_eq!(limiter.len(), 0);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::sync::{AtomicU32, Mutex, Ordering};
use crate::CellKey;

/// The overflow counters keys share once `max_keys` keys hold permits.
pub const OVERFLOW_SLOTS: usize = 64;

/// Shards of the key table (a power of two).
const SHARDS: usize = 64;

/// Counts requests in flight per key, each bounded by a limit the caller
/// gives with each take (a profile's `concurrency`). See the [module
/// docs](self) for the bounds.
pub struct ConcurrencyLimiter {
    shards: Box<[Shard]>,
    /// Entries each shard may hold: its share of `max_keys`, twice over, as
    /// keyed hashes spread evenly but not exactly.
    shard_cap: usize,
    /// Entries in all shards, bounded by `max_keys`.
    entries: AtomicU32,
    max_keys: u32,
    overflow: Box<[AtomicU32]>,
}

struct Shard {
    /// Keyed hash of (route, client) to permits held. Never holds a 0.
    held: Mutex<HashMap<u64, u32, BuildHasherDefault<KeyedHash>>>,
}

/// The keys are keyed hashes already: used as they are.
#[derive(Default)]
struct KeyedHash(u64);

impl Hasher for KeyedHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A request's place in a [`ConcurrencyLimiter`], given back when dropped.
#[must_use = "a permit is given back when dropped"]
pub struct Permit {
    limiter: Arc<ConcurrencyLimiter>,
    key: u64,
    remaining: u32,
    /// Counted in the key's overflow counter (`slot(key)`), not in an entry
    /// of its own.
    overflowed: bool,
}

/// A take refused: the key already holds its limit of permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    limit: u32,
    overflow: bool,
}

impl Busy {
    /// The limit that refused.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether the key was counted in a shared overflow counter (the table
    /// was full of keys in flight).
    pub fn overflowed(&self) -> bool {
        self.overflow
    }
}

impl ConcurrencyLimiter {
    /// A limiter for at most `max_keys` keys in flight at once (at least
    /// 64; at most `u32::MAX`), with its memory reserved now (about 40 bytes
    /// a key).
    pub fn new(max_keys: usize) -> Self {
        let max_keys = max_keys.clamp(SHARDS, u32::MAX as usize);
        let shard_cap = (max_keys / SHARDS).saturating_mul(2);
        let shards = (0..SHARDS)
            .map(|_| Shard {
                held: Mutex::new(HashMap::with_capacity_and_hasher(
                    shard_cap,
                    BuildHasherDefault::default(),
                )),
            })
            .collect();
        ConcurrencyLimiter {
            shards,
            shard_cap,
            entries: AtomicU32::new(0),
            max_keys: max_keys as u32,
            overflow: (0..OVERFLOW_SLOTS).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn shard(&self, key: u64) -> &Shard {
        // The high bits pick the shard; the map uses the whole hash.
        &self.shards[(key >> 58) as usize % SHARDS]
    }

    fn slot(key: u64) -> usize {
        (key as usize) % OVERFLOW_SLOTS
    }

    /// Takes a permit for `key` if it holds fewer than `limit` (a limit of
    /// 0 refuses everything). The permit is given back when dropped.
    pub fn try_acquire(self: &Arc<Self>, key: CellKey, limit: u32) -> Result<Permit, Busy> {
        let hash = key.hash();
        let slot = Self::slot(hash);
        let mut held = lock(&self.shard(hash).held);
        if let Some(n) = held.get_mut(&hash) {
            if *n >= limit {
                return Err(Busy { limit, overflow: false });
            }
            *n += 1;
            return Ok(self.permit(hash, false, limit - *n));
        }
        if limit == 0 {
            return Err(Busy { limit, overflow: false });
        }
        // A key with no entry may take one only while its overflow counter
        // is idle: otherwise some of its permits may be counted there. (The
        // counter is raised for this key only under this shard's lock, and
        // given back without it: a stale non-zero only sends it to the
        // overflow counter, never past its limit.)
        if self.overflow[slot].load(Ordering::Acquire) == 0 && held.len() < self.shard_cap && self.claim_entry() {
            held.insert(hash, 1);
            return Ok(self.permit(hash, false, limit - 1));
        }
        let counter = &self.overflow[slot];
        let mut n = counter.load(Ordering::Acquire);
        loop {
            if n >= limit {
                return Err(Busy { limit, overflow: true });
            }
            match counter.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(self.permit(hash, true, limit - n - 1)),
                Err(now) => n = now,
            }
        }
    }

    /// Counts one more entry if the table has room.
    fn claim_entry(&self) -> bool {
        let mut n = self.entries.load(Ordering::Relaxed);
        loop {
            if n >= self.max_keys {
                return false;
            }
            match self
                .entries
                .compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
    }

    fn permit(self: &Arc<Self>, key: u64, overflowed: bool, remaining: u32) -> Permit {
        Permit {
            limiter: Arc::clone(self),
            key,
            remaining,
            overflowed,
        }
    }

    fn release(&self, key: u64, overflowed: bool) {
        if overflowed {
            let before = self.overflow[Self::slot(key)].fetch_sub(1, Ordering::AcqRel);
            debug_assert!(before > 0, "an overflow permit given back twice");
            return;
        }
        let mut held = lock(&self.shard(key).held);
        match held.get_mut(&key) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                held.remove(&key);
                self.entries.fetch_sub(1, Ordering::Relaxed);
            }
            None => debug_assert!(false, "a permit of a key with no entry"),
        }
    }

    /// Permits `key` holds now (its own entry, else its overflow counter's,
    /// which other keys may share).
    pub fn in_flight(&self, key: CellKey) -> u32 {
        let hash = key.hash();
        if let Some(&n) = lock(&self.shard(hash).held).get(&hash) {
            return n;
        }
        self.overflow[Self::slot(hash)].load(Ordering::Acquire)
    }

    /// Keys with an entry of their own (holding at least one permit).
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed) as usize
    }

    /// Whether no key has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Permits held in the overflow counters, all together.
    pub fn overflowed(&self) -> u32 {
        self.overflow.iter().map(|c| c.load(Ordering::Acquire)).sum()
    }
}

/// A poisoned shard (a panic while it was held, which the code under it
/// cannot raise) is still consistent: each critical section is one map
/// operation.
fn lock<T>(m: &Mutex<T>) -> crate::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Permit {
    /// Permits the key had left when this one was taken.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Whether this permit is counted in a shared overflow counter.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.release(self.key, self.overflowed);
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("overflowed", &self.overflowed)
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimiter")
            .field("max_keys", &self.max_keys)
            .field("keys", &self.len())
            .field("overflowed", &self.overflowed())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn key(hash: u64) -> CellKey {
        CellKey::new(hash, 0)
    }

    /// A hash with every bit in play, as keyed hashes are.
    fn spread(n: u64) -> u64 {
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    #[test]
    fn a_key_holds_at_most_its_limit_and_gets_them_back() {
        let limiter = Arc::new(ConcurrencyLimiter::new(1000));
        let permits: Vec<_> = (0..3).map(|_| limiter.try_acquire(key(9), 3).unwrap()).collect();
        assert_eq!(permits.iter().map(Permit::remaining).collect::<Vec<_>>(), [2, 1, 0]);
        assert_eq!(limiter.try_acquire(key(9), 3).unwrap_err().limit(), 3);
        // Another key is not affected.
        assert!(limiter.try_acquire(key(10), 3).is_ok());
        assert_eq!(limiter.in_flight(key(9)), 3);
        drop(permits);
        assert_eq!(limiter.in_flight(key(9)), 0);
        assert!(limiter.is_empty());
    }

    #[test]
    fn a_limit_of_zero_refuses() {
        let limiter = Arc::new(ConcurrencyLimiter::new(1000));
        assert!(limiter.try_acquire(key(1), 0).is_err());
        assert!(limiter.is_empty());
    }

    /// A full table sends new keys to the overflow counters; a key in
    /// flight there takes no entry of its own until its counter drains, so
    /// its limit is never counted twice.
    #[test]
    fn overflowed_keys_share_a_counter_and_never_split() {
        let limiter = Arc::new(ConcurrencyLimiter::new(SHARDS));
        // Fill the table: keys whose hashes land in every shard.
        let mut held = Vec::new();
        let mut k = 1u64;
        while limiter.len() < SHARDS {
            if let Ok(p) = limiter.try_acquire(key(spread(k)), 1) {
                held.push(p);
            }
            k += 1;
        }
        let newcomer = key(spread(1 << 40));
        let first = limiter.try_acquire(newcomer, 2).unwrap();
        assert!(first.overflowed());
        // Room again, but the newcomer's counter is in use: still overflow.
        held.clear();
        assert!(limiter.is_empty());
        let second = limiter.try_acquire(newcomer, 2).unwrap();
        assert!(second.overflowed());
        assert!(limiter.try_acquire(newcomer, 2).is_err(), "its limit, not twice");
        drop((first, second));
        assert_eq!(limiter.overflowed(), 0);
        let own = limiter.try_acquire(newcomer, 2).unwrap();
        assert!(!own.overflowed());
    }

    /// Threads take and drop permits of a few keys at random while the
    /// table overflows: no key ever holds more than its limit, and when all
    /// are done nothing is held.
    #[test]
    fn permits_are_never_lost_or_given_back_twice_under_threads() {
        let limiter = Arc::new(ConcurrencyLimiter::new(SHARDS));
        let limit = 3;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let limiter = &limiter;
                s.spawn(move || {
                    let mut mine: Vec<Permit> = Vec::new();
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for _ in 0..20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if x % 3 == 0 && !mine.is_empty() {
                            let i = (x >> 8) as usize % mine.len();
                            drop(mine.swap_remove(i));
                        } else {
                            // 200 keys over a table of 64: many overflow.
                            let k = key(spread((x >> 16) % 200 + 1));
                            if let Ok(p) = limiter.try_acquire(k, limit) {
                                assert!(limiter.in_flight(k) <= limit);
                                mine.push(p);
                            }
                        }
                    }
                });
            }
        });
        assert!(limiter.is_empty());
        assert_eq!(limiter.overflowed(), 0);
    }
}
