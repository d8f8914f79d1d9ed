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
//! no allocation on the request path). A key without an entry takes one
//! whenever the table has room, so a flood of keys that has drained leaves
//! every newcomer its own limit. Past `max_keys`, keys without an entry
//! share one of [`OVERFLOW_SLOTS`] overflow counters, limited together at
//! the requesting key's limit, spread as the store's overflow cells are: by
//! the key's group (its client network) and route, else by route. So a
//! client that fills the table and then holds streams in overflow holds
//! its own network's counters, not a newcomer's of another network.
//!
//! The price of never locking a newcomer out: a key that took permits in
//! overflow while the table was full, and takes more after room returned,
//! holds up to twice its limit until those overflow permits end (its
//! entry's and its counter's). Reaching it needs the table full of keys in
//! flight, which one network cannot do alone when the store bounds its new
//! keys (`[store] new_keys_per_network`: past its budget, a network's new
//! clients take their permits on its shared cell, one key).
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

use crate::engine::sync::{AtomicU32, Mutex, Ordering};
use crate::CellKey;

/// The overflow counters keys share once `max_keys` keys hold permits (a
/// power of two, at most 2^16).
pub const OVERFLOW_SLOTS: usize = 4096;
const _: () = assert!(OVERFLOW_SLOTS.is_power_of_two() && OVERFLOW_SLOTS <= 1 << 16);

/// The most keys a table reserves room for (2^24: about 670 MB). A larger
/// `max_keys` is clamped to it.
pub const MAX_KEYS: usize = 1 << 24;

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

/// A hasher for keys that are keyed hashes already (a client cannot aim
/// them at a bucket without the key): the key as it is, with no second
/// hash per lookup. Here and in the token verifier's caches.
#[derive(Default)]
pub(crate) struct KeyedHash(u64);

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
    /// The overflow counter it is counted in, when not in an entry of the
    /// key's own.
    overflow: Option<u16>,
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
    /// 64; at most [`MAX_KEYS`]), with its memory reserved now (about 40
    /// bytes a key).
    pub fn new(max_keys: usize) -> Self {
        let max_keys = max_keys.clamp(SHARDS, MAX_KEYS);
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

    /// The overflow counter of `key`: by its group and route, else its
    /// route's (not by the key's own hash: a client that mints keys would
    /// get a fresh counter per key). The store spreads its overflow cells
    /// the same way.
    fn slot(key: CellKey) -> usize {
        let spread = if key.group() != 0 {
            crate::engine::store::mix(key.group() ^ u64::from(key.route()).rotate_left(32))
        } else {
            crate::engine::store::mix(u64::from(key.route()))
        };
        (spread >> (64 - OVERFLOW_SLOTS.trailing_zeros())) as usize
    }

    /// Takes a permit for `key` if it holds fewer than `limit` (a limit of
    /// 0 refuses everything). The permit is given back when dropped.
    pub fn try_acquire(self: &Arc<Self>, key: CellKey, limit: u32) -> Result<Permit, Busy> {
        let hash = key.hash();
        let mut held = lock(&self.shard(hash).held);
        if let Some(n) = held.get_mut(&hash) {
            if *n >= limit {
                return Err(Busy { limit, overflow: false });
            }
            *n += 1;
            return Ok(self.permit(hash, None, limit - *n));
        }
        if limit == 0 {
            return Err(Busy { limit, overflow: false });
        }
        // A key with no entry takes one whenever the table has room (see
        // the module docs for what this costs a key already in overflow).
        if held.len() < self.shard_cap && self.claim_entry() {
            held.insert(hash, 1);
            return Ok(self.permit(hash, None, limit - 1));
        }
        drop(held);
        let slot = Self::slot(key);
        let counter = &self.overflow[slot];
        let mut n = counter.load(Ordering::Acquire);
        loop {
            if n >= limit {
                return Err(Busy { limit, overflow: true });
            }
            match counter.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                // A slot fits 16 bits (`OVERFLOW_SLOTS`): a permit stays small.
                Ok(_) => return Ok(self.permit(hash, Some(slot as u16), limit - n - 1)),
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

    fn permit(self: &Arc<Self>, key: u64, overflow: Option<u16>, remaining: u32) -> Permit {
        Permit {
            limiter: Arc::clone(self),
            key,
            remaining,
            overflow,
        }
    }

    fn release(&self, key: u64, overflow: Option<u16>) {
        if let Some(slot) = overflow {
            let before = self.overflow[usize::from(slot)].fetch_sub(1, Ordering::AcqRel);
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

    /// Permits `key` holds now: its own entry's, else its overflow
    /// counter's (which other keys of its network and route may share)
    /// when the table is full.
    /// A key without an entry, while the table has room, holds none: its
    /// next take would get an entry of its own.
    pub fn in_flight(&self, key: CellKey) -> u32 {
        let hash = key.hash();
        let held = lock(&self.shard(hash).held);
        if let Some(&n) = held.get(&hash) {
            return n;
        }
        if held.len() < self.shard_cap && self.entries.load(Ordering::Relaxed) < self.max_keys {
            return 0;
        }
        drop(held);
        self.overflow[Self::slot(key)].load(Ordering::Acquire)
    }

    /// Most keys with an entry of their own at once.
    pub fn max_keys(&self) -> usize {
        self.max_keys as usize
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

/// The key a request's permits are counted on once its rate was decided on
/// `cell`: the cell the store placed the `decision`'s charge in. That is
/// the client's own cell, or one it shares when the store limits it with
/// others: its network's once the network brought its budget of new keys
/// into the store, an overflow cell when the store was full. So a client
/// the store limits as one is one for its requests in flight too.
///
/// ```
/// use std::sync::Arc;
/// use ratelimit::concurrency::{placed_key, ConcurrencyLimiter};
/// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
///
/// // One new key per network and minute: the second address of the
/// // network is charged to the network's shared cell.
/// let store = MemoryStore::builder().new_keys_per_group(Quota::per_minute(1)).build();
/// let limiter = Limiter::new(store, ManualClock::new());
/// let table = Arc::new(ConcurrencyLimiter::new(1024));
/// let quota = Quota::per_second(10);
/// let network = 24;
/// let a = limiter.grouped_cell_key(1, "198.51.100.1", &network);
/// let b = limiter.grouped_cell_key(1, "198.51.100.2", &network);
/// let (da, db) = (limiter.check_all(&[Check::new(a, quota, 1)])[0], limiter.check_all(&[Check::new(b, quota, 1)])[0]);
/// assert_eq!(placed_key(a, &da), a, "its own cell");
/// assert!(db.is_grouped() && placed_key(b, &db) != b, "the network's cell");
/// let _held = table.try_acquire(placed_key(b, &db), 1).unwrap();
/// // Another new address of the network shares that cell, and its permit.
/// let c = limiter.grouped_cell_key(1, "198.51.100.3", &network);
/// let dc = limiter.check_all(&[Check::new(c, quota, 1)])[0];
/// assert!(table.try_acquire(placed_key(c, &dc), 1).is_err());
/// ```
pub fn placed_key(cell: CellKey, decision: &crate::Decision) -> CellKey {
    crate::engine::store::placed_cell(cell, crate::engine::limiter::placement_of(decision))
}

/// A poisoned shard (a panic while it was held, which the code under it
/// cannot raise) is still consistent: each critical section is one map
/// operation.
fn lock<T>(m: &Mutex<T>) -> crate::engine::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Permit {
    /// Permits the key had left when this one was taken.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Whether this permit is counted in a shared overflow counter.
    pub fn overflowed(&self) -> bool {
        self.overflow.is_some()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.release(self.key, self.overflow);
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("overflowed", &self.overflowed())
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

    /// Fills the table with keys of `network` holding one permit each.
    fn fill(limiter: &Arc<ConcurrencyLimiter>, network: u64) -> Vec<Permit> {
        let mut held = Vec::new();
        let mut k = 1u64;
        while limiter.len() < limiter.max_keys() {
            if let Ok(p) = limiter.try_acquire(key(spread(k)).in_group(network), 1) {
                held.push(p);
            }
            k += 1;
        }
        held
    }

    /// The lockout the old table had: a flood fills the table, then holds
    /// every overflow counter it reaches, then its table keys finish. Every
    /// newcomer gets an entry of its own (the table has room), whatever the
    /// flood still holds in overflow.
    #[test]
    fn once_the_table_has_room_every_newcomer_gets_its_own_entry() {
        let limiter = Arc::new(ConcurrencyLimiter::new(1024));
        let mut table = Vec::new();
        let mut overflow = Vec::new();
        // The flood: 64 networks, each filling the table in turn and then
        // taking its limit of 3 in overflow.
        for network in 1..=64u64 {
            table.extend(fill(&limiter, network));
            for k in 0..10_000u64 {
                match limiter.try_acquire(key(spread(k + (network << 32))).in_group(network), 3) {
                    Ok(p) => {
                        assert!(p.overflowed());
                        overflow.push(p);
                    }
                    Err(busy) => assert!(busy.overflowed()),
                }
            }
        }
        assert_eq!(limiter.overflowed(), 64 * 3, "each network's counter holds its limit");
        table.clear();
        assert!(limiter.is_empty());
        let mut admitted = 0;
        let mut newcomers = Vec::new();
        for k in 0..1000u64 {
            let newcomer = key(spread(k + (1 << 50))).in_group(1000 + k);
            // What a probe reports: none held (its take gets an entry).
            assert_eq!(limiter.in_flight(newcomer), 0);
            if let Ok(p) = limiter.try_acquire(newcomer, 3) {
                admitted += 1;
                assert!(!p.overflowed(), "its own entry");
                newcomers.push(p);
            }
        }
        assert_eq!(
            admitted, 1000,
            "every newcomer, with the flood's overflow permits still held"
        );
        // Even a key of a flooding network gets its own entry now: at most
        // its limit there, beside what its network holds in overflow.
        let flooder = key(spread(7)).in_group(1);
        let own: Vec<Permit> = (0..3).map(|_| limiter.try_acquire(flooder, 3).unwrap()).collect();
        assert!(own.iter().all(|p| !p.overflowed()));
        assert!(limiter.try_acquire(flooder, 3).is_err(), "its limit in its own entry");
        drop((own, newcomers, overflow));
        assert!(limiter.is_empty());
        assert_eq!(limiter.overflowed(), 0);
    }

    /// While the table is full, one network's keys in overflow hold its
    /// network's counter on its route, not another network's newcomer's.
    #[test]
    fn a_full_table_spreads_overflow_by_network_and_route() {
        let limiter = Arc::new(ConcurrencyLimiter::new(SHARDS));
        let _table = fill(&limiter, 9);
        let attacker = |k: u64, route: u32| CellKey::new(spread(k + (1 << 40)), route).in_group(1);
        let held: Vec<Permit> = (0..3)
            .map(|k| limiter.try_acquire(attacker(k, 1), 3).unwrap())
            .collect();
        assert!(held.iter().all(Permit::overflowed));
        assert!(
            limiter.try_acquire(attacker(99, 1), 3).is_err(),
            "the network's counter is full"
        );
        // The same network on another route has its own counter.
        assert!(limiter.try_acquire(attacker(99, 2), 3).is_ok());
        // Newcomers of other networks: all but those whose counter is the
        // attacker's (1 of 4,096) get theirs.
        let admitted = (2..1002u64)
            .filter(|&n| {
                limiter
                    .try_acquire(CellKey::new(spread(n << 20), 1).in_group(n), 3)
                    .is_ok()
            })
            .count();
        assert!(admitted >= 995, "{admitted} of 1000");
    }

    /// Random takes and drops over a small table, checked against a model:
    /// a key's own entry never holds more than its limit, a key with an
    /// entry is never sent to overflow, a refusal below the limit is an
    /// overflow counter's, and when every permit is dropped nothing is held.
    /// (A key's shard can be full before the table is: a key goes to
    /// overflow only when one of the two is.)
    #[test]
    fn the_table_agrees_with_a_model_under_random_traffic() {
        for seed in 1..=20u64 {
            let limiter = Arc::new(ConcurrencyLimiter::new(SHARDS));
            let mut held: Vec<(u64, Permit)> = Vec::new();
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for _ in 0..5_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 5 < 2 && !held.is_empty() {
                    let i = (x >> 8) as usize % held.len();
                    drop(held.swap_remove(i));
                    continue;
                }
                let k = (x >> 16) % 300 + 1;
                let network = k % 7;
                let cell = key(spread(k)).in_group(network);
                let own = held.iter().filter(|(h, p)| *h == k && !p.overflowed()).count() as u32;
                match limiter.try_acquire(cell, 2) {
                    Ok(p) => {
                        if !p.overflowed() {
                            assert!(own < 2, "seed {seed}: a third permit in its own entry");
                        } else {
                            assert_eq!(own, 0, "seed {seed}: overflow beside an entry");
                        }
                        held.push((k, p));
                    }
                    Err(busy) if busy.overflowed() => assert_eq!(own, 0, "seed {seed}"),
                    Err(_) => assert_eq!(own, 2, "seed {seed}: refused below its limit"),
                }
            }
            drop(held);
            assert!(limiter.is_empty());
            assert_eq!(limiter.overflowed(), 0);
        }
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
