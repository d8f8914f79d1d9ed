//! The gate's per-key state: three fixed tables, one per epoch in turn
//! (`epoch % 3`), so a new epoch starts from an empty table the sync loop
//! prepared while the previous epoch ran, and no slot is ever freed under a
//! reader's feet. Lock-free: a slot is claimed by a CAS on its key word, and
//! its counters are atomics.
//!
//! A slot is one cache line: everything a request reads and writes.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::engine::window::SlidingWindow;

/// One key's state in one epoch.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Slot {
    /// The key's fleet id, `0` for an empty slot.
    pub(crate) key: AtomicU64,
    /// The route (high 32 bits), the sync round in which the key was last
    /// requested (low 31 bits, for idleness) and whether a request of that
    /// round was refused by the fleet (bit 31, for the read ration).
    pub(crate) touched: AtomicU64,
    /// The fleet's consumption in the window's closed slices, as the sync
    /// loop last computed it: `(slice tag, sum)` (see [`Closed`]).
    pub(crate) closed: AtomicU64,
    /// The fleet total of an open slice as last pulled, by slice parity:
    /// `(slice tag, total)`.
    pub(crate) fleet: [AtomicU64; 2],
    /// This instance's own requests in a slice, by slice parity (see
    /// [`Pending`]), and at [`BACKLOG`] the units of older slices that no
    /// round took before their word was reused (an outage): still counted,
    /// and pushed into the slice open when a round takes them.
    pub(crate) pending: [AtomicU64; 3],
}

/// The index of the backlog word in `Slot::pending` (its tag is unused).
pub(crate) const BACKLOG: usize = 2;

pub(crate) const LOW: u64 = 0xffff_ffff;

pub(crate) fn pack(high: u64, low: u64) -> u64 {
    (high.min(LOW) << 32) | low.min(LOW)
}

pub(crate) fn unpack(v: u64) -> (u64, u64) {
    (v >> 32, v & LOW)
}

/// The tag of a slice in a 32-bit field (its low half; slices are wall time
/// over at least 1 ms, so tags repeat after 49 days, far beyond any slot's
/// life of three windows).
#[inline(always)]
pub(crate) fn tag32(slice: u64) -> u64 {
    slice & LOW
}

/// A `closed` word: the sum of slices `s - k ..= s - 1` as known when it was
/// computed for slice `s`, or a mark that the key is local-only. Packed as a
/// 16-bit slice tag (ages of up to 2^15 slices; a window has at most 100),
/// a [`Release`] (16 bits) and the sum (32 bits: [`Closed::HELD`] and 31 bits
/// of units, or [`Closed::DEGRADED`]).
pub(crate) struct Closed;

impl Closed {
    /// The sum's value that marks a key whose last round failed.
    pub(crate) const DEGRADED: u64 = LOW;
    /// Never computed (a fresh slot).
    pub(crate) const UNKNOWN: u64 = 0;

    /// Set in the sum of a key whose fleet use the last round did not read
    /// (reads rationed): requests hold it to its fair share of the budget
    /// (budget / live instances) until a round reads it.
    pub(crate) const HELD: u64 = 1 << 31;

    pub(crate) fn word(slice: u64, sum: u64) -> u64 {
        Self::released(slice, sum, Release::NONE)
    }

    /// [`word`](Self::word) with units that leave the window at a known
    /// time of the slice, before the next round may run.
    pub(crate) fn released(slice: u64, sum: u64, release: Release) -> u64 {
        let w = (tag16(slice) << 48) | (release.0 << 32) | sum.min(Self::HELD - 1);
        // Never UNKNOWN: a sum of 0 with no release in a slice whose tag is
        // 0 carries a release of one unit at the slice's end instead (it
        // takes nothing from a sum of 0).
        if w == Self::UNKNOWN {
            Release::at_end(1).0 << 32
        } else {
            w
        }
    }

    /// [`word`](Self::word), marked [`HELD`](Self::HELD).
    pub(crate) fn held(slice: u64, sum: u64) -> u64 {
        Self::word(slice, sum) | Self::HELD
    }

    /// Whether a word (not degraded) holds its key to its fair share.
    #[inline(always)]
    pub(crate) fn is_held(word: u64) -> bool {
        let sum = word & LOW;
        sum != Self::DEGRADED && sum & Self::HELD != 0
    }

    /// Whether a word holds a sum the fleet read (the key was hot): not
    /// fresh, not degraded, not held to its share.
    #[inline(always)]
    pub(crate) fn is_read(word: u64) -> bool {
        let sum = word & LOW;
        word != Self::UNKNOWN && sum != Self::DEGRADED && sum & Self::HELD == 0
    }

    pub(crate) fn degraded(slice: u64) -> u64 {
        (tag16(slice) << 48) | Self::DEGRADED
    }
}

/// The low 16 bits of a slice: a `closed` word's tag.
#[inline(always)]
fn tag16(slice: u64) -> u64 {
    slice & 0xffff
}

/// Units a closed sum holds that leave the window at a known time of the
/// slice the sum was computed in: this instance's own units of the oldest
/// slice dated to a quarter of it (they leave at a quarter boundary of the
/// current slice), or at the slice's end everything the sum still holds of
/// the oldest slice. Requests take them off once that time has come, so the
/// room they hold opens on time rather than at the next round (up to a sync
/// interval later). 2 bits of quarter boundary (1 to 3; 0: the slice's end)
/// and 14 bits of units (more are released as 16,383: never more than the
/// sum holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Release(u64);

impl Release {
    pub(crate) const NONE: Release = Release(0);
    const UNITS: u64 = (1 << 14) - 1;

    /// `units` leaving at quarter boundary `q` (1 to 3) of the slice.
    pub(crate) fn at_quarter(q: u64, units: u64) -> Release {
        debug_assert!((1..=3).contains(&q));
        Release(((q & 3) << 14) | units.min(Self::UNITS))
    }

    /// `units` leaving at the slice's end.
    pub(crate) fn at_end(units: u64) -> Release {
        Release(units.min(Self::UNITS))
    }

    /// The units released at `into` ns into the slice (`age` 0) or in a
    /// later slice (`age` 1 or more): the quarter boundary has passed.
    #[inline(always)]
    fn units(word: u64, age: u64, into: u64, slice_ns: u64) -> u64 {
        let r = (word >> 32) & 0xffff;
        let q = r >> 14;
        if age >= 1 || (q != 0 && into >= q * (slice_ns / 4)) {
            r & Self::UNITS
        } else {
            0
        }
    }
}

/// A `pending` word: a 16-bit slice tag, then this instance's units taken
/// for a push but not confirmed (24 bits: in flight, or lost to a push that
/// may or may not have applied), then units not yet taken (24 bits).
pub(crate) struct Pending;

impl Pending {
    pub(crate) const COUNT: u64 = (1 << 24) - 1;

    #[inline(always)]
    pub(crate) fn tag(slice: u64) -> u64 {
        slice & 0xffff
    }

    #[inline(always)]
    pub(crate) fn unpack(v: u64) -> (u64, u64, u64) {
        (v >> 48, (v >> 24) & Self::COUNT, v & Self::COUNT)
    }

    #[inline(always)]
    pub(crate) fn pack(tag: u64, unconfirmed: u64, unpushed: u64) -> u64 {
        (tag << 48) | (unconfirmed.min(Self::COUNT) << 24) | unpushed.min(Self::COUNT)
    }

    /// How many slices `tag` lies before `slice` (16-bit tags; a tag ahead
    /// reads as a large age).
    #[inline(always)]
    pub(crate) fn age(slice: u64, tag: u64) -> u64 {
        Self::tag(slice).wrapping_sub(tag) & 0xffff
    }

    /// This instance's units in `slice` (0 when the word holds another slice).
    #[inline(always)]
    pub(crate) fn units(v: u64, slice: u64) -> u64 {
        let (tag, unconfirmed, unpushed) = Self::unpack(v);
        if tag == Self::tag(slice) {
            unconfirmed + unpushed
        } else {
            0
        }
    }
}

impl Slot {
    /// The fleet total of `slice` as pulled, plus this instance's units in
    /// it not yet known to be part of that total.
    #[inline(always)]
    pub(crate) fn open_units(&self, slice: u64) -> u64 {
        let p = (slice & 1) as usize;
        let (tag, total) = unpack(self.fleet[p].load(Ordering::Relaxed));
        let fleet = if tag == tag32(slice) { total } else { 0 };
        fleet + Pending::units(self.pending[p].load(Ordering::Relaxed), slice)
    }

    /// The estimated consumption of the window at a time in `slice`
    /// (slices `slice - k ..= slice`, [`SlidingWindow::estimate`]); `None`
    /// when the key is local-only (its last round failed).
    #[inline(always)]
    pub(crate) fn used(&self, window: &SlidingWindow, slice: u64, into: u64) -> Option<u64> {
        self.used_with(window, self.closed.load(Ordering::Relaxed), slice, into)
    }

    /// [`used`](Self::used) with the `closed` word already loaded, at
    /// `into` ns into `slice`.
    #[inline(always)]
    pub(crate) fn used_with(&self, window: &SlidingWindow, closed: u64, slice: u64, into: u64) -> Option<u64> {
        let k = u64::from(window.slices());
        let sum = closed & LOW;
        if sum == Closed::DEGRADED {
            return None;
        }
        let tag = closed >> 48;
        let age = tag16(slice).wrapping_sub(tag) & 0xffff;
        // A sum tagged ahead of this slice (a request that read the clock
        // just before the sync loop wrote a newer sum, or a wall clock
        // stepped back) is the freshest there is: use it as current.
        let age = if age >= 1 << 15 { 0 } else { age };
        // What has left the window since the sum was computed.
        let sum = (sum & !Closed::HELD).saturating_sub(Release::units(closed, age, into, window.slice_ns()));
        let before = slice.wrapping_sub(1);
        let known = if closed == Closed::UNKNOWN || age > k {
            // A fresh key, or everything the sum counted has left the
            // window: only what this slot holds.
            self.open_units(before)
        } else if age == 0 {
            sum
        } else {
            // Computed `age` slices ago (the sync loop has not seen the
            // boundary yet, or the key is idle here and no longer pulled):
            // the sum still holds every slice of the window it covered (and
            // some that left it: conservative), plus the slice it was
            // computed in and this instance's own units since.
            let at = slice.wrapping_sub(age);
            sum + self.open_units(at) + if age >= 2 { self.open_units(before) } else { 0 }
        };
        // The closed slices (and the backlog: units of slices still in the
        // window, counted as the newest they came from), plus the open one.
        let closed_sum = known + self.backlog_units(slice, k);
        Some(window.estimate(slice, closed_sum, |open| self.open_units(open)))
    }

    /// The backlog's units, while the newest slice they came from is still
    /// in the window at `slice`.
    #[inline(always)]
    pub(crate) fn backlog_units(&self, slice: u64, k: u64) -> u64 {
        let v = self.pending[BACKLOG].load(Ordering::Relaxed);
        if v == 0 {
            return 0;
        }
        let (tag, unconfirmed, unpushed) = Pending::unpack(v);
        if Pending::age(slice, tag) <= k {
            unconfirmed + unpushed
        } else {
            0
        }
    }

    /// Adds units of `slice` to the backlog (tagged with the newest slice
    /// it holds: its units count, conservatively, as that slice's).
    pub(crate) fn add_backlog(&self, slice: u64, units: u64) {
        let _ = self.pending[BACKLOG].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
            let (tag, unconfirmed, backlog) = Pending::unpack(v);
            let newest = if v == 0 || Pending::age(slice, tag) < 1 << 15 {
                Pending::tag(slice)
            } else {
                tag
            };
            Some(Pending::pack(newest, unconfirmed, backlog + units))
        });
    }
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
    /// One bit per slot: something for the sync loop since it last looked
    /// (units to take, a refusal), so a round visits the keys requested
    /// since the last one, not every slot of the table.
    dirty: Box<[AtomicU64]>,
    /// Slots claimed this epoch.
    claimed: AtomicUsize,
    /// Claims past which the table is closed to cold keys (`max_keys`): the
    /// slots left are the reserve of keys that reached their share of the
    /// fleet budget here or are hot, so that no flood of keys that stay
    /// cold can leave such a key without a slot.
    open_to_cold: usize,
    /// The units of the keys the table had no slot for this epoch: a
    /// count-min sketch of two rows (each key adds to one counter per row,
    /// and the smaller of its two is never below what it used), so an
    /// untracked key is still held to its share of the fleet budget. A row
    /// has four counters per slot: the keys it counts are a flood's, more
    /// than the table holds, and what other keys add to a key's counters
    /// is the sketch's error (a flood's units spread over the row).
    untracked: Box<[AtomicU32]>,
    /// A row's width, less one (a power of two).
    row_mask: usize,
    /// The keys the fleet marked hot, as the rounds of this epoch read the
    /// marks: a Bloom filter (two bits a key, as many bits as slots), so
    /// that a request of a key hot elsewhere claims a slot (from the
    /// reserve if need be) and is pushed and read like any hot key.
    fleet_hot: Box<[AtomicU64]>,
}

/// The sketch's counters per row, per slot of the table.
const SKETCH_PER_SLOT: usize = 4;

/// How many slots a key may probe before it is counted as untracked. At
/// most half full, linear probing almost never needs more than a few; 64
/// makes "untracked" a sign of a full table, not of bad luck.
const PROBE: usize = 64;

impl Table {
    /// A table of `capacity` slots (rounded up to a power of two), open to
    /// cold keys for its first `open_to_cold` claims of an epoch.
    pub(crate) fn new(capacity: usize, open_to_cold: usize) -> Table {
        let capacity = capacity.next_power_of_two().max(PROBE);
        Table {
            epoch: AtomicU64::new(u64::MAX),
            slots: (0..capacity).map(|_| Slot::default()).collect(),
            mask: capacity - 1,
            dirty: (0..capacity.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            claimed: AtomicUsize::new(0),
            open_to_cold: open_to_cold.min(capacity),
            untracked: (0..2 * SKETCH_PER_SLOT * capacity).map(|_| AtomicU32::new(0)).collect(),
            row_mask: SKETCH_PER_SLOT * capacity - 1,
            fleet_hot: (0..capacity / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// `key`'s two bits in [`fleet_hot`](Self::fleet_hot): other bits of
    /// the fleet id than the table's and the sketch's.
    #[inline]
    fn hot_bits(&self, key: u64) -> [(usize, u64); 2] {
        let mask = self.mask;
        [(key >> 7) as usize & mask, (key >> 40) as usize & mask].map(|bit| (bit / 64, 1 << (bit % 64)))
    }

    /// Records that the fleet marked `key` hot (a round read the mark).
    pub(crate) fn mark_fleet_hot(&self, key: u64) {
        for (word, bit) in self.hot_bits(key) {
            self.fleet_hot[word].fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Whether the fleet marked `key` hot, as far as this table knows (a
    /// false positive, rare and not one a client can aim at, only lets a
    /// cold key take a slot from the reserve).
    #[inline]
    pub(crate) fn fleet_hot(&self, key: u64) -> bool {
        self.hot_bits(key)
            .iter()
            .all(|&(word, bit)| self.fleet_hot[word].load(Ordering::Relaxed) & bit != 0)
    }

    /// `key`'s counter in each row of the sketch: bits of the fleet id (a
    /// keyed hash a client cannot aim) that do not overlap (widths are at
    /// most 2^30) and leave out bit 0 (`NONZERO`, always set).
    #[inline]
    fn counters(&self, key: u64) -> [&AtomicU32; 2] {
        let (a, b) = (
            (key >> 1) as usize & self.row_mask,
            (key >> 33) as usize & self.row_mask,
        );
        [&self.untracked[a], &self.untracked[self.row_mask + 1 + b]]
    }

    /// What `key` used this epoch while it had no slot here: at least what
    /// it did (more when other keys share both its counters).
    #[inline]
    pub(crate) fn untracked_units(&self, key: u64) -> u64 {
        let [a, b] = self.counters(key);
        u64::from(a.load(Ordering::Relaxed).min(b.load(Ordering::Relaxed)))
    }

    /// Counts `units` of `key`, which has no slot here. Saturating: a
    /// counter that wrapped would read as a key that used nothing.
    #[inline]
    pub(crate) fn add_untracked(&self, key: u64, units: u64) {
        let units = u32::try_from(units).unwrap_or(u32::MAX);
        for c in self.counters(key) {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_add(units)));
        }
    }

    /// Whether a cold key may still claim a slot this epoch.
    #[inline]
    pub(crate) fn open_to_cold(&self) -> bool {
        self.claimed.load(Ordering::Relaxed) < self.open_to_cold
    }

    /// Marks `slot` (one of this table's) for the sync loop's next round:
    /// an RMW on a word shared by 64 slots, once per key and round (when
    /// its first unit since the last round's take lands, or a refusal).
    #[inline]
    pub(crate) fn mark(&self, slot: &Slot) {
        let i = (slot as *const Slot as usize).wrapping_sub(self.slots.as_ptr() as usize) / std::mem::size_of::<Slot>();
        if let Some(word) = self.dirty.get(i / 64) {
            let bit = 1u64 << (i % 64);
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::AcqRel);
            }
        }
    }

    /// The occupied slots marked since the last call, unmarked as they are
    /// read (a slot marked again meanwhile comes back next time).
    pub(crate) fn take_marked(&self) -> impl Iterator<Item = (u64, &Slot)> {
        self.dirty.iter().enumerate().flat_map(move |(w, word)| {
            let mut bits = if word.load(Ordering::Relaxed) == 0 {
                0
            } else {
                word.swap(0, Ordering::AcqRel)
            };
            std::iter::from_fn(move || {
                while bits != 0 {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let slot = &self.slots[w * 64 + b];
                    match slot.key.load(Ordering::Acquire) {
                        0 => continue,
                        k => return Some((k, slot)),
                    }
                }
                None
            })
        })
    }

    /// The key's slot, claiming a free one if needed (from the reserve
    /// only for a key that may use it, `reserve`); `None` when its probe
    /// window is full, or the table is closed to a cold key (the key is then
    /// held to its share by the local limiter, and counted). `fresh` is
    /// called with a newly claimed slot before it is returned.
    pub(crate) fn slot(&self, key: u64, reserve: bool, fresh: impl FnOnce(&Slot)) -> Option<&Slot> {
        let start = home(key) & self.mask;
        for i in 0..PROBE {
            let slot = &self.slots[(start + i) & self.mask];
            let k = slot.key.load(Ordering::Acquire);
            if k == key {
                return Some(slot);
            }
            if k == 0 {
                if !reserve && !self.open_to_cold() {
                    return None;
                }
                match slot.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.claimed.fetch_add(1, Ordering::Relaxed);
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
    #[inline]
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
                s.touched.store(0, Ordering::Relaxed);
                s.closed.store(Closed::UNKNOWN, Ordering::Relaxed);
                for f in &s.fleet {
                    f.store(0, Ordering::Relaxed);
                }
                for p in &s.pending {
                    p.store(0, Ordering::Relaxed);
                }
                s.key.store(0, Ordering::Release);
            }
        }
        for word in self.dirty.iter() {
            word.store(0, Ordering::Relaxed);
        }
        self.claimed.store(0, Ordering::Relaxed);
        for c in self.untracked.iter() {
            c.store(0, Ordering::Relaxed);
        }
        for word in self.fleet_hot.iter() {
            word.store(0, Ordering::Relaxed);
        }
        self.epoch.store(epoch, Ordering::Release);
    }
}

/// Where a request falls in the gate's tables: its slice, the nanoseconds
/// into it, its epoch, and that epoch's table (prepared by the sync loop).
#[derive(Clone, Copy)]
pub(super) struct Place<'g> {
    pub(super) slice: u64,
    pub(super) into: u64,
    pub(super) epoch: u64,
    pub(super) table: &'g Table,
}

/// A key's slots at a [`Place`]: its own in the epoch's table, or, while it
/// has none, the previous epoch's (what the sync loop has not moved yet).
#[derive(Clone, Copy)]
pub(super) struct Slots<'g> {
    pub(super) place: Place<'g>,
    pub(super) own: Option<&'g Slot>,
    /// Only looked up when the key has no slot of its own.
    pub(super) previous: Option<&'g Slot>,
    /// No slot of its own, and the table closed to cold keys: the key's
    /// units are counted in the table's sketch, and it is held to its share
    /// until it reaches it (then it claims a slot from the reserve).
    pub(super) untracked: bool,
}

/// The round bits of the `touched` word (rounds wrap after 2^31: 68 years
/// at 1 s, 248 days at 10 ms; idleness is a difference of a few rounds).
pub(crate) const ROUND: u64 = 0x7fff_ffff;

/// The `touched` word's mark of a request refused by the fleet in its round.
pub(crate) const REFUSED: u64 = 1 << 31;

/// The `touched` word: the route (high half) and the round of the last
/// request (low 31 bits).
pub(super) fn touched(route: u32, round: u64) -> u64 {
    (u64::from(route) << 32) | (round & ROUND)
}

/// The route, the round of the last request, and whether a request of that
/// round was refused by the fleet.
pub(super) fn read_touched(v: u64) -> (u32, u64, bool) {
    ((v >> 32) as u32, v & ROUND, v & REFUSED != 0)
}

/// Marks a key as requested this round (kept synced), with one store at
/// most per round (a refusal's mark, if any, stays for the round).
#[inline]
pub(super) fn touch(slot: &Slot, route: u32, round: u64) {
    let now = touched(route, round);
    if slot.touched.load(Ordering::Relaxed) & !REFUSED != now {
        slot.touched.store(now, Ordering::Relaxed);
    }
}

/// [`touch`] for a request the fleet refused: the key is at its fleet
/// budget, so the next round reads it first (a refused key pushes nothing,
/// and would otherwise rank below every key that did).
#[inline]
pub(super) fn touch_refused(slot: &Slot, route: u32, round: u64) {
    let now = touched(route, round) | REFUSED;
    if slot.touched.load(Ordering::Relaxed) != now {
        slot.touched.store(now, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
