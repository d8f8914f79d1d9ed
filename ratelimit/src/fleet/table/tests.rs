use super::*;

#[test]
fn claims_finds_and_resets() {
    let t = Table::new(64, 64);
    let mut fresh = 0;
    let a = t.slot(5, false, |_| fresh += 1).unwrap() as *const Slot;
    assert_eq!(t.slot(5, false, |_| fresh += 1).unwrap() as *const Slot, a);
    assert_eq!(fresh, 1);
    assert!(t.find(6).is_none());
    assert_eq!(t.occupied().count(), 1);
    // Same home slot (the high half): the next slot.
    assert!(t.slot(6, false, |_| ()).is_some());
    assert!(t.find(6).is_some());
    assert_eq!(t.occupied().count(), 2);
    t.reset(9);
    assert_eq!(t.occupied().count(), 0);
    assert_eq!(t.epoch.load(Ordering::Relaxed), 9);
    assert_eq!(std::mem::size_of::<Slot>(), 64);
}

#[test]
fn a_full_probe_window_refuses() {
    let t = Table::new(64, 64);
    for k in 1..=64u64 {
        assert!(t.slot(k << 38, false, |_| ()).is_some());
    }
    assert!(t.slot(65 << 38, false, |_| ()).is_none());
    assert!(
        t.slot(65 << 38, true, |_| ()).is_none(),
        "the reserve probes the same window"
    );
    assert_eq!(pack(1 << 40, 3), (LOW << 32) | 3);
    assert_eq!(unpack(pack(7, 9)), (7, 9));
}

/// Past its cold keys, a table claims only from the reserve; keys already
/// in it are found either way, and a reset opens it again.
#[test]
fn past_its_cold_keys_a_table_claims_only_from_the_reserve() {
    let t = Table::new(64, 2);
    assert!(t.slot(1 << 40, false, |_| ()).is_some());
    assert!(t.open_to_cold());
    assert!(t.slot(2 << 40, false, |_| ()).is_some());
    assert!(!t.open_to_cold());
    assert!(t.slot(3 << 40, false, |_| ()).is_none(), "closed to a cold key");
    assert!(t.slot(1 << 40, false, |_| ()).is_some(), "a key it holds is found");
    assert!(t.slot(3 << 40, true, |_| ()).is_some(), "the reserve");
    assert_eq!(t.occupied().count(), 3);
    t.reset(1);
    assert!(t.open_to_cold());
    assert!(t.slot(4 << 40, false, |_| ()).is_some());
}

#[test]
fn the_estimate_of_a_slot() {
    let s = Slot::default();
    let k = 20;
    let w = SlidingWindow::new(std::time::Duration::from_secs(10), k as u32).unwrap();
    // Fresh: only what the slot holds.
    assert_eq!(s.used(&w, 100, 0), Some(0));
    s.pending[0].store(Pending::pack(Pending::tag(100), 2, 3), Ordering::Relaxed);
    s.fleet[0].store(pack(tag32(100), 10), Ordering::Relaxed);
    assert_eq!(s.used(&w, 100, 0), Some(15));
    // A stale pending word (another slice of the same parity) is not counted.
    assert_eq!(s.used(&w, 102, 0), Some(0));
    // Closed sums, current and one boundary late.
    s.closed.store(Closed::word(100, 40), Ordering::Relaxed);
    assert_eq!(s.used(&w, 100, 0), Some(55));
    s.fleet[1].store(pack(tag32(101), 4), Ordering::Relaxed);
    assert_eq!(s.used(&w, 101, 0), Some(40 + 15 + 4));
    // Several boundaries late (an idle key): the old sum and what the
    // slot still holds.
    assert_eq!(s.used(&w, 105, 0), Some(40 + 15));
    // A window later, nothing it knew counts.
    assert_eq!(s.used(&w, 100 + k + 1, 0), Some(0));
    // The backlog counts while its newest slice is in the window.
    s.add_backlog(100 + k, 6);
    assert_eq!(s.used(&w, 100 + k + 1, 0), Some(6));
    assert_eq!(s.used(&w, 100 + 2 * k + 1, 0), Some(0));
    // A sum tagged one slice ahead of the request counts as current.
    s.closed.store(Closed::word(101, 40), Ordering::Relaxed);
    s.pending[BACKLOG].store(0, Ordering::Relaxed);
    assert_eq!(s.used(&w, 100, 0), Some(40 + 15));
    s.closed.store(Closed::degraded(100), Ordering::Relaxed);
    assert_eq!(s.used(&w, 100, 0), None);
}

#[test]
fn a_release_takes_units_off_the_sum_once_its_time_has_come() {
    let s = Slot::default();
    let w = SlidingWindow::new(std::time::Duration::from_secs(10), 20).unwrap();
    let quarter = w.slice_ns() / 4;
    // 5 units leave at the second quarter boundary of slice 100.
    s.closed
        .store(Closed::released(100, 40, Release::at_quarter(2, 5)), Ordering::Relaxed);
    assert_eq!(s.used(&w, 100, 2 * quarter - 1), Some(40));
    assert_eq!(s.used(&w, 100, 2 * quarter), Some(35));
    // In a later slice (no round since), they have left too.
    assert_eq!(s.used(&w, 101, 0), Some(35));
    // 12 units leave at the slice's end: not before.
    s.closed.store(
        Closed::released(100, 40, Release::at_end(12)) | Closed::HELD,
        Ordering::Relaxed,
    );
    assert!(Closed::is_held(s.closed.load(Ordering::Relaxed)));
    assert_eq!(s.used(&w, 100, w.slice_ns() - 1), Some(40));
    assert_eq!(s.used(&w, 101, 0), Some(28));
    // Never more than the sum.
    s.closed
        .store(Closed::released(100, 3, Release::at_end(12)), Ordering::Relaxed);
    assert_eq!(s.used(&w, 101, 0), Some(0));
    // A word of nothing in a slice tagged 0 is not a fresh slot's.
    assert_ne!(Closed::word(1 << 16, 0), Closed::UNKNOWN);
    // 16-bit tags: a sum from the slice before, across a wrap.
    s.closed.store(Closed::word((1 << 16) - 1, 7), Ordering::Relaxed);
    assert_eq!(s.used(&w, 1 << 16, 0), Some(7));
}
