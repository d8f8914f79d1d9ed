//! The delta rule on a slot's `pending` words: a round takes a word's
//! unpushed units for a push ("unconfirmed", counted throughout), then
//! confirms them once the store's total includes them, or hands back those
//! that certainly did not apply (see "The rule for deltas that fail to
//! push" in `docs/global.md`).

use std::sync::atomic::Ordering;

use super::table::{Pending, Slot, BACKLOG};

/// A delta taken from a slot for this round.
pub(super) struct Take<'a> {
    pub(super) key: u64,
    pub(super) slot: &'a Slot,
    /// The word it came from (a slice parity, or the backlog).
    pub(super) parity: usize,
    /// The slice the word holds (its tag).
    pub(super) word_slice: u64,
    /// The slice it is pushed into: its own while the others still read
    /// it, else the open one (later, so it stays counted longer).
    pub(super) slice: u64,
    pub(super) delta: u64,
    /// The last take from an active key's slot in the current table: a
    /// cold key's closed sum can be written once it is kept.
    pub(super) sums: bool,
    /// The key's place among the round's keys (`Works::at`).
    pub(super) work: u32,
}

/// Takes a word's unpushed units for a push: moves them to "unconfirmed"
/// in one step, so they are counted throughout. Returns the slice the word
/// holds (for the backlog, the newest slice its units came from) and the
/// units. A backlog whose newest slice left the window is dropped whole.
pub(super) fn take_unpushed(slot: &Slot, parity: usize, now: u64, k: u64) -> Option<(u64, u64)> {
    if parity == BACKLOG {
        let v = slot.pending[BACKLOG].load(Ordering::Relaxed);
        if v != 0 && Pending::age(now, Pending::unpack(v).0) > k {
            let _ = slot.pending[BACKLOG].compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
            return None;
        }
    }
    let before = slot.pending[parity]
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
            let (tag, unconfirmed, unpushed) = Pending::unpack(v);
            (unpushed > 0).then(|| Pending::pack(tag, unconfirmed + unpushed, 0))
        })
        .ok()?;
    let (tag, _, unpushed) = Pending::unpack(before);
    // A word never holds a slice ahead of now (16-bit tags, slots live
    // three epochs at most).
    let age = Pending::age(now, tag);
    Some((now - age.min(now), unpushed))
}

impl Take<'_> {
    /// The store confirmed the delta (its total, which includes it, is in
    /// the slot): it leaves "unconfirmed".
    pub(super) fn confirm(&self) {
        let _ = self.slot.pending[self.parity].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
            let (tag, unconfirmed, unpushed) = Pending::unpack(v);
            self.holds(tag)
                .then(|| Pending::pack(tag, unconfirmed.saturating_sub(self.delta), unpushed))
        });
    }

    /// Whether the word still holds this take's slice (the backlog always
    /// does).
    fn holds(&self, tag: u64) -> bool {
        self.parity == BACKLOG || tag == Pending::tag(self.word_slice)
    }
}

/// A round's takes from cold keys, kept in the history once the round has
/// its store's answer ([`kept`](Self::kept)). Dropped before that (the
/// round failed, or was cancelled at its await by its timeout or a
/// shutdown), they are handed back: never pushed, they would otherwise be
/// neither in the history nor in the slot once its word holds a newer
/// slice, and the key's share would undercount them for the rest of the
/// window.
pub(super) struct ColdTakes<'a> {
    takes: Vec<Take<'a>>,
    kept: bool,
}

impl<'a> ColdTakes<'a> {
    pub(super) fn new(takes: Vec<Take<'a>>) -> ColdTakes<'a> {
        ColdTakes { takes, kept: false }
    }

    /// The takes, now kept (the caller records them): not handed back.
    pub(super) fn kept(mut self) -> Vec<Take<'a>> {
        self.kept = true;
        std::mem::take(&mut self.takes)
    }
}

impl Drop for ColdTakes<'_> {
    fn drop(&mut self) {
        if !self.kept {
            for t in &self.takes {
                hand_back(t);
            }
        }
    }
}

/// Hands a delta that certainly did not apply back to "not yet pushed"
/// (to the backlog if its word now holds a newer slice).
pub(super) fn hand_back(t: &Take<'_>) {
    let back = t.slot.pending[t.parity].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
        let (tag, unconfirmed, unpushed) = Pending::unpack(v);
        t.holds(tag)
            .then(|| Pending::pack(tag, unconfirmed.saturating_sub(t.delta), unpushed + t.delta))
    });
    if back.is_err() {
        t.slot.add_backlog(t.word_slice, t.delta);
    }
}
