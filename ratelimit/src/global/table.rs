//! The gate's per-key state: three fixed tables, one per epoch in turn
//! (`epoch % 3`), so a new epoch starts from an empty table the sync loop
//! prepared while the previous epoch ran, and no slot is ever freed under a
//! reader's feet. Lock-free: a slot is claimed by a CAS on its key word, and
//! its counters are atomics.

use std::sync::atomic::{AtomicU64, Ordering};

/// One key's state in one epoch.
#[derive(Debug, Default)]
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

/// A fixed-size open-addressing table of slots.
#[derive(Debug)]
pub(crate) struct Table {
    /// The epoch the table holds, or `u64::MAX` while it is unprepared.
    pub(crate) epoch: AtomicU64,
    slots: Box<[Slot]>,
    mask: usize,
}

/// How many slots a key may probe before it is counted as untracked.
const PROBE: usize = 16;

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
        let start = (key as usize) & self.mask;
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

    /// The key's slot if present (no claim).
    pub(crate) fn find(&self, key: u64) -> Option<&Slot> {
        let start = (key as usize) & self.mask;
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
        t.reset(9);
        assert_eq!(t.occupied().count(), 0);
        assert_eq!(t.epoch.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn a_full_probe_window_refuses() {
        let t = Table::new(16);
        for k in 1..=16u64 {
            assert!(t.slot(k << 4, |_| ()).is_some());
        }
        assert!(t.slot(17 << 4, |_| ()).is_none());
        assert_eq!(pack(1 << 40, 3), (LOW << 32) | 3);
        assert_eq!(unpack(pack(7, 9)), (7, 9));
    }
}
