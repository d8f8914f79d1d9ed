//! The gate's per-key state: three fixed tables, one per epoch in turn
//! (`epoch % 3`), so a new epoch starts from an empty table the sync loop
//! prepared while the previous epoch ran, and no slot is ever freed under a
//! reader's feet. Lock-free: a slot is claimed by a CAS on its key word, and
//! its counters are atomics.

use std::sync::atomic::{AtomicU64, Ordering};

/// One key's state in one epoch: 32 bytes, aligned so that a slot never
/// straddles two cache lines (one miss per request, not two).
#[derive(Debug, Default)]
#[repr(align(32))]
pub(crate) struct Slot {
    /// The key's fleet id, `0` for an empty slot.
    pub(crate) key: AtomicU64,
    /// Low 32 bits: this instance's requests not yet taken for a push. High
    /// 32 bits: taken for a push and not yet confirmed (in flight, or lost to
    /// a failed push: still counted here, never sent again).
    pub(crate) pending: AtomicU64,
    /// The fleet totals as last pulled: previous epoch (high 32 bits) and
    /// this epoch (low 32 bits), saturating.
    pub(crate) fleet: AtomicU64,
    /// The route (high 32 bits) and the sync round in which the key was
    /// last requested (low 32 bits, for idleness).
    pub(crate) touched: AtomicU64,
}

pub(crate) const LOW: u64 = 0xffff_ffff;

pub(crate) fn pack(high: u64, low: u64) -> u64 {
    (high.min(LOW) << 32) | low.min(LOW)
}

pub(crate) fn unpack(v: u64) -> (u64, u64) {
    (v >> 32, v & LOW)
}

/// A key's home slot: the hash's high half, so the table does not place keys
/// in step with the local store (which indexes by the low bits of the same
/// hash for `FleetGate::check`); in step, the two lines of a request share
/// cache sets and evict each other.
#[inline(always)]
fn home(key: u64) -> usize {
    (key >> 32) as usize
}

/// A fixed-size open-addressing table of slots.
#[derive(Debug)]
pub(crate) struct Table {
    /// The epoch the table holds, or `u64::MAX` while it is unprepared.
    pub(crate) epoch: AtomicU64,
    slots: Box<[Slot]>,
    mask: usize,
}

/// How many slots a key may probe before it is counted as untracked. At
/// most half full, linear probing almost never needs more than a few; 64
/// makes "untracked" a sign of a full table, not of bad luck.
const PROBE: usize = 64;

impl Table {
    pub(crate) fn new(capacity: usize) -> Table {
        let capacity = capacity.next_power_of_two().max(PROBE);
        Table {
            epoch: AtomicU64::new(u64::MAX),
            slots: (0..capacity).map(|_| Slot::default()).collect(),
            mask: capacity - 1,
        }
    }

    /// The key's slot, claiming a free one if needed; `None` when its probe
    /// window is full (the key is then limited locally only, and counted).
    /// `fresh` is called with a newly claimed slot before it is returned.
    pub(crate) fn slot(&self, key: u64, fresh: impl FnOnce(&Slot)) -> Option<&Slot> {
        let start = home(key) & self.mask;
        for i in 0..PROBE {
            let slot = &self.slots[(start + i) & self.mask];
            let k = slot.key.load(Ordering::Acquire);
            if k == key {
                return Some(slot);
            }
            if k == 0 {
                match slot.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        fresh(slot);
                        return Some(slot);
                    }
                    Err(other) if other == key => return Some(slot),
                    Err(_) => continue,
                }
            }
        }
        None
    }

    /// Starts loading the key's first slot (a plain read; its value is not
    /// used), so the cache miss overlaps other work.
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        let slot = &self.slots[home(key) & self.mask];
        std::hint::black_box(slot.key.load(Ordering::Relaxed));
    }

    /// The key's slot if present (no claim).
    pub(crate) fn find(&self, key: u64) -> Option<&Slot> {
        let start = home(key) & self.mask;
        for i in 0..PROBE {
            let slot = &self.slots[(start + i) & self.mask];
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return Some(slot),
                0 => return None,
                _ => {}
            }
        }
        None
    }

    /// Occupied slots.
    pub(crate) fn occupied(&self) -> impl Iterator<Item = (u64, &Slot)> {
        self.slots.iter().filter_map(|s| match s.key.load(Ordering::Acquire) {
            0 => None,
            k => Some((k, s)),
        })
    }

    /// Empties the table and labels it for `epoch`. Only the sync loop calls
    /// it, for a table no request uses (two epochs old).
    pub(crate) fn reset(&self, epoch: u64) {
        self.epoch.store(u64::MAX, Ordering::Release);
        for s in self.slots.iter() {
            if s.key.load(Ordering::Relaxed) != 0 {
                s.pending.store(0, Ordering::Relaxed);
                s.fleet.store(0, Ordering::Relaxed);
                s.touched.store(0, Ordering::Relaxed);
                s.key.store(0, Ordering::Release);
            }
        }
        self.epoch.store(epoch, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_finds_and_resets() {
        let t = Table::new(64);
        let mut fresh = 0;
        let a = t.slot(5, |_| fresh += 1).unwrap() as *const Slot;
        assert_eq!(t.slot(5, |_| fresh += 1).unwrap() as *const Slot, a);
        assert_eq!(fresh, 1);
        assert!(t.find(6).is_none());
        assert_eq!(t.occupied().count(), 1);
        // Same home slot (the high half): the next slot.
        assert!(t.slot(6, |_| ()).is_some());
        assert!(t.find(6).is_some());
        assert_eq!(t.occupied().count(), 2);
        t.reset(9);
        assert_eq!(t.occupied().count(), 0);
        assert_eq!(t.epoch.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn a_full_probe_window_refuses() {
        let t = Table::new(64);
        for k in 1..=64u64 {
            assert!(t.slot(k << 38, |_| ()).is_some());
        }
        assert!(t.slot(65 << 38, |_| ()).is_none());
        assert_eq!(pack(1 << 40, 3), (LOW << 32) | 3);
        assert_eq!(unpack(pack(7, 9)), (7, 9));
    }
}
