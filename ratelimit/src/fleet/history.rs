//! The sync loop's memory of each key: the fleet's totals per slice as this
//! instance last knew them (a ring of slice totals per key), kept across
//! rounds behind the gate's mutex. It knows nothing of the gate or of the
//! store's connection: the loop (`round.rs`) fills it and reads it.

use super::ids::{IdMap, IdSet};
use super::marks::HotKeys;
use super::ration::{ReadRation, Roster};
use super::store::Counter;
use super::table::{pack, unpack, Release};
use crate::engine::window::SlidingWindow;

/// The fleet's totals of one key per slice, as this instance knows them:
/// closed slices are pulled until final, then kept here.
#[derive(Debug)]
pub(super) struct KeyHistory {
    /// The newest slice in `ring`.
    newest: u64,
    /// By `slice & (len - 1)`, two words: the fleet total pulled (high
    /// half) and this instance's units not known to be part of it (low
    /// half: lost pushes); then this instance's units in the slice's total,
    /// by the quarter of the slice in which a round took them (16 bits
    /// each, saturating), so the oldest slice of the window stops counting
    /// them once that quarter has left the window (see
    /// [`Self::closed_sum`]). One allocation, a power of two long: a round
    /// visits many keys once each, so what it costs is cache misses and
    /// divisions.
    ring: Box<[[u64; 2]]>,
    /// Slices up to this one are final: every instance has pushed into
    /// them, so they are not pulled again.
    pub(super) final_upto: Option<u64>,
    /// The newest epoch whose counter this instance gave a TTL.
    pub(super) expire_epoch: Option<u64>,
    /// A counter to give a TTL again next round (see `Work::recreated`).
    /// Boxed: rare, and the map holds a history for every key.
    pub(super) reexpire: Option<Box<(Counter, u32)>>,
    /// The last slice in which the key was active (pulled).
    pub(super) active_until: u64,
    /// A round has read the key's window here (a key new to this
    /// instance, or back after idling, has only what its pushes answered).
    pub(super) read: bool,
    /// The round in which the key turned hot here (`None`: cold, decided
    /// locally and held to its share, never pushed or read).
    pub(super) hot: Option<u64>,
    /// The `own` units of the ring are a cold key's: never pushed, pushed
    /// (into the slices they came from) when the key turns hot.
    pub(super) own_cold: bool,
    /// The newest epoch in whose hot list this instance marked the key.
    pub(super) marked: Option<u64>,
    /// The slice in which the round last wrote the key's closed sum into
    /// its slot, while nothing since changed it (`None`: write it again).
    pub(super) summed: Option<u64>,
}

impl KeyHistory {
    pub(super) fn new(len: usize, slice: u64) -> KeyHistory {
        KeyHistory {
            newest: slice,
            ring: vec![[0; 2]; len.next_power_of_two()].into_boxed_slice(),
            final_upto: None,
            expire_epoch: None,
            reexpire: None,
            active_until: slice,
            read: false,
            hot: None,
            own_cold: false,
            marked: None,
            summed: None,
        }
    }

    pub(super) fn advance(&mut self, slice: u64) {
        let len = self.ring.len() as u64;
        if slice <= self.newest {
            return;
        }
        if slice - self.newest >= len {
            self.ring.fill([0; 2]);
        } else {
            for j in self.newest + 1..=slice {
                self.ring[(j & (len - 1)) as usize] = [0; 2];
            }
        }
        self.newest = slice;
    }

    /// A cold key active in the round of `slice`: its ring brought to the
    /// slice, and marked active there. (A cold key pushes nothing: no
    /// counter of its own to give a TTL again.)
    pub(super) fn active_cold(&mut self, slice: u64) {
        self.advance(slice);
        self.active_until = slice;
        self.reexpire = None;
    }

    /// A word of each cache line of the ring, for a round to load a few
    /// keys' rings ahead of the one it works on (a closed sum reads most of
    /// the ring: `k + 2` slices of 16 bytes).
    pub(super) fn touch(&self) -> u64 {
        self.ring.iter().step_by(4).fold(self.newest, |a, w| a ^ w[0])
    }

    /// The ring index of `slice`, while the ring holds it.
    fn index(&self, slice: u64) -> Option<usize> {
        let len = self.ring.len() as u64;
        (slice <= self.newest && slice + len > self.newest).then(|| (slice & (len - 1)) as usize)
    }

    pub(super) fn get(&self, slice: u64) -> (u64, u64) {
        self.index(slice).map_or((0, 0), |i| unpack(self.ring[i][0]))
    }

    /// The closed part of the window at wall time `wall` in `slice`: slices
    /// `slice - k .. slice`, pulled totals plus this instance's units not in
    /// them, less this instance's units of the oldest slice that have
    /// certainly left the window by `wall`.
    ///
    /// Why: the oldest slice counts whole while part of it has left the
    /// window. Under load, an instance that spent its budget admits again
    /// when a slice drops out, at once, so the slices it refills hold
    /// clumps; a true window that just misses one clump held a slice less
    /// (measured: 91 of 100 for a lone instance, against the 96 of `k / (k
    /// + 1)`). Its own units are dated to a quarter slice (the round that
    /// took them ran after they were admitted), so they stop counting
    /// within a quarter slice plus a round of leaving; others' units still
    /// count whole until their slice leaves (they are not dated). Never
    /// below the true window: what is subtracted was admitted before
    /// `wall - W`, and the sum is used at `wall` or later.
    pub(super) fn closed_sum(&self, window: &SlidingWindow, slice: u64, wall: u64) -> u64 {
        let oldest = slice.saturating_sub(u64::from(window.slices()));
        let left = self.left_window(window, oldest, wall);
        window.closed_sum(slice, |j| {
            let (pulled, own) = self.get(j);
            let units = pulled + own;
            if j == oldest {
                units.saturating_sub(left)
            } else {
                units
            }
        })
    }

    /// What [`closed_sum`](Self::closed_sum) at `wall` in `slice` holds
    /// that leaves the window at a known time of `slice`: with
    /// `next_quarter`, this instance's units of the oldest slice dated to
    /// the quarter that leaves at the next quarter boundary (for a key the
    /// next round sums again), or, in the slice's last quarter or without
    /// `next_quarter`, everything the sum holds of the oldest slice, which
    /// leaves whole at the slice's end. Requests take it off once that time
    /// has come ([`Release`]): a unit stops counting within a quarter slice
    /// of leaving, whenever the rounds run.
    pub(super) fn release(&self, window: &SlidingWindow, slice: u64, wall: u64, next_quarter: bool) -> Release {
        let oldest = slice.saturating_sub(u64::from(window.slices()));
        let (pulled, own) = self.get(oldest);
        let held = (pulled + own).saturating_sub(self.left_window(window, oldest, wall));
        let quarter = (window.slice_ns() / QUARTERS).max(1);
        let into = wall.saturating_sub(slice.saturating_mul(window.slice_ns()));
        let next = into / quarter + 1;
        match self.index(oldest).filter(|_| next_quarter && next < QUARTERS) {
            Some(i) => {
                let dated = (self.ring[i][1] >> (16 * (next - 1))) & 0xffff;
                Release::at_quarter(next, dated.min(held))
            }
            None => Release::at_end(held),
        }
    }

    /// This instance's units of `slice` dated to quarters that ended at
    /// least a window before `wall`.
    fn left_window(&self, window: &SlidingWindow, slice: u64, wall: u64) -> u64 {
        let Some(i) = self.index(slice) else { return 0 };
        let v = self.ring[i][1];
        let quarter = window.slice_ns() / QUARTERS;
        let start = slice.saturating_mul(window.slice_ns());
        (0..QUARTERS)
            .filter(|&q| {
                start
                    .saturating_add((q + 1) * quarter)
                    .saturating_add(window.window_ns())
                    <= wall
            })
            .map(|q| (v >> (16 * q)) & 0xffff)
            .sum()
    }

    /// Records `units` of `slice`, now part of its pulled total, that a
    /// round took at wall time `taken` (so admitted no later): dated to the
    /// quarter of the slice `taken` falls in, if it falls in the slice.
    pub(super) fn date_own(&mut self, window: &SlidingWindow, slice: u64, taken: u64, units: u64) {
        let Some(i) = self.index(slice) else { return };
        let into = taken.wrapping_sub(slice.saturating_mul(window.slice_ns()));
        let q = into / (window.slice_ns() / QUARTERS).max(1);
        if q >= QUARTERS {
            return;
        }
        let shift = 16 * q;
        let dated = &mut self.ring[i][1];
        let sum = ((*dated >> shift) & 0xffff) + units;
        *dated = (*dated & !(0xffff << shift)) | (sum.min(0xffff) << shift);
    }

    pub(super) fn set(&mut self, slice: u64, pulled: Option<u64>, own: Option<u64>) {
        let Some(i) = self.index(slice) else { return };
        let (p, o) = unpack(self.ring[i][0]);
        self.ring[i][0] = pack(pulled.unwrap_or(p), own.unwrap_or(o));
    }
}

/// Parts of a slice this instance dates its own units to.
const QUARTERS: u64 = 4;

/// The sync loop's own state, behind the gate's mutex (never locked by
/// requests, never held across an await).
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) keys: Histories,
    pub(super) failed_before: bool,
    /// Untracked keys already exported as a metric.
    pub(super) untracked_reported: u64,
    /// Keys read per round, while rounds run long.
    pub(super) ration: ReadRation,
    /// This instance in the roster of live instances.
    pub(super) roster: Roster,
    /// The fleet's hot keys, as read.
    pub(super) hot: HotKeys,
    /// Keys hot here (those whose history's `hot` is set): visited every
    /// round, requested or not.
    pub(super) hot_here: IdSet,
    /// The last round's takes and keys, to size the next one's.
    pub(super) sizes: (usize, usize),
    /// Keys to visit next round (marked hot by the fleet while this
    /// instance holds units of them it used cold).
    pub(super) to_visit: Vec<u64>,
    /// Visit every slot next round, marked or not (after a failed round).
    pub(super) rescan: bool,
}

/// Every key's history, in parts by fleet id, so that each round drops
/// the idle keys' histories of one part: going over all of them in one
/// round, once a slice, made that round 12 ms longer at a million keys
/// (each history in lines of its own), and a part grows (rehashing its
/// histories) a quarter as long at a time. An idle key's history may so
/// outlive the window by `HISTORY_PARTS` rounds (at the defaults, a slice,
/// as before); it counts then as it did at the window's end.
#[derive(Debug)]
pub(super) struct Histories {
    parts: Box<[IdMap<KeyHistory>]>,
    /// The part the next round sweeps.
    next: usize,
}

/// How many parts: each is swept every this many rounds.
pub(super) const HISTORY_PARTS: usize = 4;

impl Default for Histories {
    fn default() -> Histories {
        Histories {
            parts: (0..HISTORY_PARTS).map(|_| IdMap::default()).collect(),
            next: 0,
        }
    }
}

impl Histories {
    /// The part of a fleet id: its top bits (`IdMap`'s hash places keys by
    /// the bits from 32 on, and its control bytes take bits 25 to 31).
    pub(super) fn part(key: u64) -> usize {
        (key >> 60) as usize % HISTORY_PARTS
    }

    pub(super) fn get(&self, key: &u64) -> Option<&KeyHistory> {
        self.parts[Self::part(*key)].get(key)
    }

    pub(super) fn get_mut(&mut self, key: &u64) -> Option<&mut KeyHistory> {
        self.parts[Self::part(*key)].get_mut(key)
    }

    pub(super) fn contains_key(&self, key: &u64) -> bool {
        self.parts[Self::part(*key)].contains_key(key)
    }

    pub(super) fn entry(&mut self, key: u64) -> std::collections::hash_map::Entry<'_, u64, KeyHistory> {
        self.parts[Self::part(key)].entry(key)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut KeyHistory> {
        self.parts.iter_mut().flat_map(|p| p.values_mut())
    }

    /// Keeps the histories of the next part that `keep` keeps (the parts
    /// in turn, one a call); returns the part ([`part`](Self::part)).
    pub(super) fn sweep(&mut self, keep: impl FnMut(&u64, &mut KeyHistory) -> bool) -> usize {
        let part = self.next;
        self.next = (part + 1) % HISTORY_PARTS;
        self.parts[part].retain(keep);
        part
    }
}

/// The history, taken out of its mutex for a round and put back when
/// dropped.
pub(super) struct Taken<'a> {
    home: &'a std::sync::Mutex<History>,
    history: History,
}

impl<'a> Taken<'a> {
    pub(super) fn new(home: &'a std::sync::Mutex<History>) -> Taken<'a> {
        let history = std::mem::take(&mut *home.lock().unwrap_or_else(|e| e.into_inner()));
        Taken { home, history }
    }
}

impl std::ops::Deref for Taken<'_> {
    type Target = History;
    fn deref(&self) -> &History {
        &self.history
    }
}

impl std::ops::DerefMut for Taken<'_> {
    fn deref_mut(&mut self) -> &mut History {
        &mut self.history
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        *self.home.lock().unwrap_or_else(|e| e.into_inner()) = std::mem::take(&mut self.history);
    }
}

impl History {
    /// After a failed round: every key is pulled whole again; this
    /// instance's own units stay.
    pub(super) fn forget_pulls(&mut self) {
        for h in self.keys.values_mut() {
            h.final_upto = None;
        }
    }
}
