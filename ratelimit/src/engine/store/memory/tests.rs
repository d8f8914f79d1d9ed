use super::*;

fn key(i: u64) -> CellKey {
    // Spread test keys like a real hash would.
    let hash = (i.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    CellKey::new(hash, 0)
}

fn charge(store: &MemoryStore, k: CellKey, now: u64, until: u64) -> Placement {
    store.update(k, now, |_| ((), Some(until))).expect("not refused").1
}

#[test]
fn stores_and_reads_back() {
    let store = MemoryStore::with_max_keys(100);
    assert_eq!(charge(&store, key(1), 10, 50), Placement::Own);
    let (seen, _) = store.update(key(1), 10, |tat| (tat, None)).unwrap();
    assert_eq!(seen, 50);
    let (fresh, _) = store.update(key(2), 10, |tat| (tat, None)).unwrap();
    assert_eq!(fresh, 0);
    assert_eq!(store.len(), 1, "a read of a new key does not insert it");
}

#[test]
fn sweep_evicts_only_recovered_cells() {
    let store = MemoryStore::with_max_keys(100);
    charge(&store, key(1), 0, 100);
    charge(&store, key(2), 0, 200);
    assert_eq!(store.sweep(99), 0);
    assert_eq!(store.sweep(100), 1);
    assert_eq!(store.len(), 1);
    let (tat, _) = store.update(key(2), 150, |t| (t, None)).unwrap();
    assert_eq!(tat, 200);
}

#[test]
fn full_store_charges_overflow_and_never_evicts_live_cells() {
    let store = MemoryStore::with_max_keys(64);
    for i in 0..64 {
        assert_eq!(charge(&store, key(i), 0, 1_000), Placement::Own);
    }
    for i in 64..640 {
        assert_eq!(charge(&store, key(i), 0, 1_000), Placement::Overflow);
    }
    assert_eq!(store.len(), 64);
    for i in 0..64 {
        let (tat, at) = store.update(key(i), 0, |t| (t, None)).unwrap();
        assert_eq!((tat, at), (1_000, Placement::Own), "key {i} kept its cell");
    }
    // Once recovered, new keys take over old cells instead of overflowing.
    assert_eq!(charge(&store, key(10_000), 1_000, 2_000), Placement::Own);
    assert_eq!(store.len(), 64);
}

fn grouped(i: u64, group: u64) -> CellKey {
    key(i).in_group(group)
}

#[test]
fn stats_count_overflow_group_charges_and_sweeps() {
    let store = MemoryStore::builder()
        .max_keys(4)
        .new_keys_per_group(Quota::per_minute(1))
        .build();
    let empty = store.stats();
    assert_eq!(
        (empty.keys, empty.max_keys, empty.overflowed, empty.grouped),
        (0, 4, 0, 0)
    );
    assert_eq!((empty.sweeps, empty.swept), (0, 0));
    assert_eq!(empty.memory_bytes, store.memory_bytes());
    // Group 7: one new key, then its shared cell (the budget cell and
    // the shared cell take two more slots).
    assert_eq!(charge(&store, grouped(1, 7), 0, 1_000), Placement::Own);
    assert_eq!(charge(&store, grouped(2, 7), 0, 1_000), Placement::Group);
    assert_eq!(charge(&store, grouped(3, 7), 0, 1_000), Placement::Group);
    assert_eq!(store.stats().grouped, 2);
    // Full of live cells: an ungrouped key overflows.
    assert_eq!(charge(&store, key(9), 0, 1_000), Placement::Own);
    assert_eq!(store.len(), 4);
    assert_eq!(charge(&store, key(10), 0, 1_000), Placement::Overflow);
    assert_eq!(charge(&store, key(11), 0, 1_000), Placement::Overflow);
    // A read of a new key (no charge) is no overflow.
    store.update(key(12), 0, |t| (t, None)).unwrap();
    let s = store.stats();
    assert_eq!((s.keys, s.overflowed, s.grouped), (4, 2, 2));
    // A whole sweep, and what it dropped.
    let swept = store.sweep(u64::MAX / 2);
    let s = store.stats();
    assert_eq!((s.sweeps, s.swept, s.keys), (1, swept as u64, 4 - swept));
    assert!(swept >= 3, "{swept}");
    // Part by part: one more whole sweep when the last part is done.
    for part in 0..store.sweep_parts() {
        store.sweep_part(part, u64::MAX / 2);
    }
    assert_eq!(store.stats().sweeps, 2);
}

#[test]
fn a_group_past_its_budget_of_new_keys_shares_one_cell() {
    let store = MemoryStore::builder()
        .max_keys(1_000)
        .new_keys_per_group(Quota::per_minute(3))
        .build();
    for i in 0..3 {
        assert_eq!(charge(&store, grouped(i, 77), 0, 1_000), Placement::Own);
    }
    // The fourth new key of group 77 lands on the group's shared cell,
    // whatever the key: they all see the one TAT.
    assert_eq!(charge(&store, grouped(3, 77), 0, 2_000), Placement::Group);
    let (tat, at) = store.update(grouped(4, 77), 0, |t| (t, None)).unwrap();
    assert_eq!(
        (tat, at),
        (0, Placement::Own),
        "a probe of a new key charges nothing, finds nothing"
    );
    let (tat, at) = store.update(grouped(5, 77), 0, |t| (t, Some(t + 1))).unwrap();
    assert_eq!((tat, at), (2_000, Placement::Group));
    // Known keys keep their own cells; other groups and ungrouped keys
    // are not affected.
    assert_eq!(charge(&store, grouped(0, 77), 0, 1_000), Placement::Own);
    assert_eq!(charge(&store, grouped(10, 78), 0, 1_000), Placement::Own);
    assert_eq!(charge(&store, key(11), 0, 1_000), Placement::Own);
    // The budget refills at its rate: one new key per 20 s.
    let later = 20_000_000_000;
    assert_eq!(charge(&store, grouped(12, 77), later, later + 1), Placement::Own);
    assert_eq!(charge(&store, grouped(13, 77), later, later + 1), Placement::Group);
    // Own cells, two group cells (budget and shared) per group used.
    assert_eq!(store.len(), 3 + 2 + 1 + 1 + 1 + 1);
}

#[test]
fn a_groups_shared_cell_is_per_route() {
    // The store finds cells by hash alone, so a derived cell must carry
    // its route in its hash: else a network's shared cell on one route
    // (say a strict login limit, spent) is the same cell on every route.
    let store = MemoryStore::builder()
        .max_keys(1_000)
        .new_keys_per_group(Quota::per_minute(2))
        .build();
    let on = |i: u64, route: u32| CellKey::new(key(i).hash(), route).in_group(77);
    assert_eq!(charge(&store, on(0, 0), 0, 1_000), Placement::Own);
    assert_eq!(charge(&store, on(1, 1), 0, 1_000), Placement::Own);
    // Route 0's third new key of group 77: the shared cell, charged.
    assert_eq!(charge(&store, on(2, 0), 0, 60_000_000_000), Placement::Group);
    assert_eq!(charge(&store, on(3, 0), 0, 60_000_000_000), Placement::Group);
    // Route 1's shared cell is its own: route 0's charge is not in it.
    let (tat, at) = store.update(on(4, 1), 0, |t| (t, Some(t + 1))).unwrap();
    assert_eq!(at, Placement::Group);
    assert_eq!(tat, 0, "route 1's new clients are not charged for route 0's");
}

#[test]
fn a_group_past_its_budget_in_a_full_store_overflows_into_its_own_cell() {
    // Group 77 spends its budget, then the store fills: its next new
    // key's shared cell finds no room and overflows. It must land on
    // the group's overflow cell, not on the route's cell that every
    // ungrouped key (claims, unknown peers) overflows into.
    let store = MemoryStore::builder()
        .max_keys(4)
        .new_keys_per_group(Quota::per_minute(1))
        .build();
    assert_eq!(charge(&store, grouped(0, 77), 0, 1_000), Placement::Own);
    assert_eq!(charge(&store, key(10), 0, 1_000), Placement::Own);
    assert_eq!(charge(&store, key(11), 0, 1_000), Placement::Own);
    assert_eq!(store.len(), 4, "full: three keys and group 77's budget");
    assert_eq!(charge(&store, grouped(1, 77), 0, 60_000_000_000), Placement::Overflow);
    let (tat, at) = store.update(key(12), 0, |t| (t, Some(t + 1))).unwrap();
    assert_eq!(at, Placement::Overflow);
    assert_eq!(tat, 0, "an ungrouped new key is not charged for group 77's flood");
}

#[test]
fn without_a_budget_groups_only_spread_overflow() {
    let store = MemoryStore::with_max_keys(4);
    for i in 0..40 {
        assert_eq!(
            charge(&store, grouped(i, 5), 0, 1_000),
            if i < 4 { Placement::Own } else { Placement::Overflow }
        );
    }
    // Group 5's overflow is one cell; a new key of another group almost
    // surely lands on another (4,096 cells): here, checked to be fresh.
    let (tat, at) = store.update(grouped(100, 6), 0, |t| (t, Some(t + 1))).unwrap();
    assert_eq!(at, Placement::Overflow);
    assert_eq!(tat, 0, "group 6 is not charged for group 5's flood");
    let (mine, at) = store.update(grouped(101, 5), 0, |t| (t, Some(t + 1))).unwrap();
    assert_eq!(
        (mine, at),
        (1_000, Placement::Overflow),
        "group 5's keys share its overflow cell"
    );
}

#[test]
fn ungrouped_overflow_shares_the_routes_cell() {
    let store = MemoryStore::with_max_keys(1);
    charge(&store, key(0), 0, 1_000);
    // 100 overflowing keys, one cell: minting keys gains nothing.
    let fresh = (1..=100)
        .filter(|&i| store.update(key(i), 0, |t| (t == 0, Some(1_000))).unwrap().0)
        .count();
    assert_eq!(fresh, 1, "only the first overflowing key found the cell fresh");
}

#[test]
fn refuse_policy_returns_none() {
    let store = MemoryStore::builder()
        .max_keys(1)
        .overflow(OverflowPolicy::Refuse)
        .build();
    charge(&store, key(1), 0, 100);
    assert!(store.update(key(2), 0, |_| ((), Some(100))).is_none());
}

#[test]
fn memory_is_about_32_bytes_per_key() {
    let store = MemoryStore::with_max_keys(1_000_000);
    let per_key = store.memory_bytes() as f64 / 1e6;
    assert!((32.0..33.0).contains(&per_key), "{per_key} bytes per key");
}

#[test]
fn absurd_max_keys_is_refused_with_a_reason() {
    let err = MemoryStore::builder().max_keys(usize::MAX).try_build().unwrap_err();
    assert!(err.to_string().contains("max_keys"), "{err}");
}

#[test]
fn a_tat_is_never_stored_as_busy() {
    let store = MemoryStore::with_max_keys(10);
    charge(&store, key(1), 0, u64::MAX);
    let (tat, _) = store.update(key(1), 0, |t| (t, None)).unwrap();
    assert_eq!(tat, MAX_TAT);
    charge(&store, key(1), 0, u64::MAX);
    let (tat, _) = store.update(key(1), 0, |t| (t, None)).unwrap();
    assert_eq!(tat, MAX_TAT);
}
