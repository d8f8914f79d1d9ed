//! Model checks of `MemoryStore`'s cell protocol with loom: every
//! interleaving of a few threads updating, inserting, taking over and
//! sweeping the same bucket.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p ratelimit --test builds --release
//! ```
//!
//! Under `--cfg loom` the store has one bucket of four slots, so the models
//! stay small enough to explore exhaustively. `scripts/test` runs them.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use ratelimit::{CellKey, MemoryStore, OverflowPolicy, Placement, Store};

const T: u64 = 10;
const NOW: u64 = 100;

fn key(hash: u64) -> CellKey {
    CellKey::new(hash, 0)
}

/// A GCRA with burst 1 and emission interval `T`, at time `NOW`: admits iff
/// the cell is recovered, and then charges it.
fn charge(store: &MemoryStore, k: CellKey) -> Option<(bool, Placement)> {
    store.update(k, NOW, |tat| {
        let tat = tat.max(NOW);
        if tat + T - NOW <= T {
            (true, Some(tat + T))
        } else {
            (false, None)
        }
    })
}

/// Explores the interleavings with up to `LOOM_MAX_PREEMPTIONS` (default
/// here: 3) preemptions, exhaustively: unbounded search of these models does
/// not finish; bugs that need more preemptions than that are rare.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

fn read(store: &MemoryStore, k: CellKey) -> u64 {
    store
        .update(k, NOW, |tat| (tat, None))
        .expect("reads are never refused")
        .0
}

/// Two requests of one new key race, the store has room: exactly one is
/// admitted and the key ends up with one cell.
#[test]
fn racing_first_requests_of_one_key_admit_exactly_one() {
    model(|| {
        let store = Arc::new(MemoryStore::builder().max_keys(2).build());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let store = store.clone();
                thread::spawn(move || charge(&store, key(7)).expect("room").0)
            })
            .collect();
        let admitted = handles.into_iter().map(|h| h.join().unwrap()).filter(|a| *a).count();
        assert_eq!(admitted, 1);
        assert_eq!(store.len(), 1);
        assert_eq!(read(&store, key(7)), NOW + T);
    });
}

/// A recovered key is charged while a sweeper evicts recovered cells: the
/// charge is never lost (a key cannot get a second request in `T`), and the
/// occupancy count matches the cells.
#[test]
fn an_update_racing_a_sweep_is_never_lost() {
    model(|| {
        let store = Arc::new(MemoryStore::builder().max_keys(2).build());
        // Key 5 was charged long ago and is recovered at NOW.
        store.update(key(5), 0, |_| ((), Some(NOW - 50))).expect("room");
        let updater = {
            let store = store.clone();
            thread::spawn(move || charge(&store, key(5)).expect("room"))
        };
        let sweeper = {
            let store = store.clone();
            thread::spawn(move || store.sweep(NOW))
        };
        let (admitted, placement) = updater.join().unwrap();
        let evicted = sweeper.join().unwrap();
        assert!(admitted);
        assert_eq!(placement, Placement::Own);
        // Whatever the order, the charge is in the key's cell now.
        assert_eq!(read(&store, key(5)), NOW + T);
        assert!(!charge(&store, key(5)).unwrap().0, "a second request within T");
        assert_eq!(store.len(), 1);
        assert!(evicted <= 1);
    });
}

/// The store is at its bound with one recovered cell (key 5). Key 5 is
/// charged while a new key 9 arrives and may take the recovered cell over.
/// Neither charge is lost and nothing is admitted unlimited: each admitted
/// request is recorded in its own cell or in the overflow cell.
#[test]
fn a_takeover_racing_an_update_loses_no_charge() {
    model(|| {
        let store = Arc::new(
            MemoryStore::builder()
                .max_keys(1)
                .overflow(OverflowPolicy::SharedBucket)
                .build(),
        );
        store.update(key(5), 0, |_| ((), Some(NOW - 50))).expect("room");
        let old = {
            let store = store.clone();
            thread::spawn(move || charge(&store, key(5)).expect("shared bucket"))
        };
        let new = {
            let store = store.clone();
            thread::spawn(move || charge(&store, key(9)).expect("shared bucket"))
        };
        let (old_ok, old_at) = old.join().unwrap();
        let (new_ok, new_at) = new.join().unwrap();
        assert_eq!(store.len(), 1, "exactly one cell, at the bound");
        for (ok, at, k) in [(old_ok, old_at, key(5)), (new_ok, new_at, key(9))] {
            if ok && at == Placement::Own {
                // Admitted into its own cell: unless the other key took the
                // cell over afterwards (impossible: it is live now), it holds.
                assert_eq!(read(&store, k), NOW + T);
            }
        }
        // Both were recovered or fresh, so both are admitted (one may be in
        // the overflow cell), and exactly one of them owns the single cell.
        assert!(old_ok && new_ok);
        let owners = [old_at, new_at].iter().filter(|p| **p == Placement::Own).count();
        assert_eq!(owners, 1);
        // The other one was charged to the overflow cell: it is now full.
        let overflowed = if old_at == Placement::Overflow { key(5) } else { key(9) };
        assert!(
            !charge(&store, overflowed).unwrap().0,
            "the overflow cell holds a charge"
        );
    });
}

/// The ABA race: key 5's updater reads TAT 100, then a sweep evicts key 5
/// (recovered at 100) and key 9 is inserted into the same slot wanting TAT
/// 100, exactly the value the updater expects. The claim publishes above the
/// evicted TAT, so the updater's CAS cannot land on key 9's cell (had it
/// landed, the store would have handed the value back and counted it in
/// `repaired`, which stays 0), and key 5's charge ends up in key 5's own
/// cell. With the claim's floor removed, this model fails.
///
/// The sweep and the insert run on one thread, in the order the race needs:
/// with a third thread the model took 6 to 10 CPU minutes of CI for
/// interleavings of the sweep with the insert, which the next model checks
/// on their own.
#[test]
fn a_stale_cas_never_lands_on_another_keys_cell() {
    model(|| {
        let store = Arc::new(MemoryStore::builder().max_keys(4).build());
        store.update(key(5), 0, |_| ((), Some(NOW))).expect("room");
        let updater = {
            let store = store.clone();
            thread::spawn(move || charge(&store, key(5)).expect("room"))
        };
        let takeover = {
            let store = store.clone();
            thread::spawn(move || {
                store.sweep(NOW);
                // Key 9's first request stores exactly the TAT key 5 had.
                store.update(key(9), NOW, |_| ((), Some(NOW))).expect("room");
            })
        };
        let (admitted, placement) = updater.join().unwrap();
        takeover.join().unwrap();
        assert!(admitted);
        assert_eq!(placement, Placement::Own);
        assert_eq!(read(&store, key(5)), NOW + T, "key 5's charge is in key 5's cell");
        // Key 9 holds what it asked for, or one more if it took key 5's swept
        // slot (claims publish above the evicted TAT); never key 5's charge.
        let nine = read(&store, key(9));
        assert!([NOW, NOW + 1].contains(&nine), "key 9 holds {nine}");
        assert!(store.len() <= 2);
        // Without refunds no CAS ever lands on another key's cell, so the
        // store never had to hand a value back.
        assert_eq!(store.stats().repaired, 0, "a stale CAS landed on key 9's cell");
    });
}

/// A sweep races a new key's first request while a recovered key waits to
/// be evicted: the new key holds what it asked for (one more if it took the
/// swept slot), or nothing if the sweep dropped it (it was recovered at
/// NOW); the occupancy count matches the cells either way.
#[test]
fn a_sweep_racing_a_new_key_keeps_the_count() {
    model(|| {
        let store = Arc::new(MemoryStore::builder().max_keys(4).build());
        store.update(key(5), 0, |_| ((), Some(NOW))).expect("room");
        let sweeper = {
            let store = store.clone();
            thread::spawn(move || store.sweep(NOW))
        };
        let inserter = {
            let store = store.clone();
            thread::spawn(move || store.update(key(9), NOW, |_| ((), Some(NOW))).expect("room"))
        };
        sweeper.join().unwrap();
        let ((), placement) = inserter.join().unwrap();
        assert_eq!(placement, Placement::Own);
        let nine = read(&store, key(9));
        assert!([0, NOW, NOW + 1].contains(&nine), "key 9 holds {nine}");
        let five = read(&store, key(5));
        assert!([0, NOW].contains(&five), "key 5 holds {five}");
        assert_eq!(store.len(), usize::from(nine != 0) + usize::from(five != 0));
    });
}

/// A GCRA at `now` with emission interval `T` and burst `burst`: admits a
/// request of cost 1 iff it fits, and then charges it.
fn charge_at(store: &MemoryStore, k: CellKey, now: u64, burst: u64) -> Option<(bool, Placement)> {
    store.update(k, now, |tat| {
        let new = tat.max(now) + T;
        if new - now <= burst * T {
            (true, Some(new))
        } else {
            (false, None)
        }
    })
}

/// What `Limiter::refund` does with a charge made at `now`: the TAT
/// moves back by `units * T`, never to `now` or before; a key with no cell
/// gets none.
fn refund_at(store: &MemoryStore, k: CellKey, now: u64, units: u64) {
    let _ = store.update(k, now, |tat| {
        let back = tat.saturating_sub(units * T).max(now + 1);
        ((), (tat > now && back < tat).then_some(back))
    });
}

/// One thread charges key 5 and hands the charge back (a request whose
/// stacked check refused it later, or that settled for less) while another
/// charges key 5: the final TAT is the sequential model's whatever the
/// interleaving (the refund gives back exactly the first thread's unit, or
/// nothing it was not charged), and never both charges are admitted past
/// the burst.
#[test]
fn a_refund_racing_a_charge_gives_back_exactly_its_own_unit() {
    model(|| {
        let store = Arc::new(MemoryStore::builder().max_keys(4).build());
        // Key 5 holds one unit of a burst of 2 at NOW.
        store.update(key(5), NOW, |_| ((), Some(NOW + T))).expect("room");
        let refunder = {
            let store = store.clone();
            thread::spawn(move || {
                let (admitted, _) = charge_at(&store, key(5), NOW, 2).expect("room");
                if admitted {
                    refund_at(&store, key(5), NOW, 1);
                }
                admitted
            })
        };
        let charger = {
            let store = store.clone();
            thread::spawn(move || charge_at(&store, key(5), NOW, 2).expect("room").0)
        };
        let first = refunder.join().unwrap();
        let second = charger.join().unwrap();
        // The bucket had room for one more: at least one of them got it, and
        // both only when the refund came between them.
        assert!(first || second);
        let tat = read(&store, key(5));
        assert_eq!(tat, NOW + T + if second { T } else { 0 }, "only the kept charge stays");
        assert_eq!(store.len(), 1);
        assert_eq!(store.stats().repaired, 0, "one key: nothing to repair");
    });
}

/// The refund ABA: an updater of key 5 reads TAT `NOW + 2T`; key 5 is then
/// refunded down to `NOW + 1`, swept once recovered, and key 9 is inserted
/// into the freed slot wanting exactly `NOW + 2T`, the value the stale
/// updater expects. Its CAS succeeds on key 9's cell; the store sees the
/// key changed, hands key 9 its value back and redoes the update on key 5.
/// Both keys end with the model's TATs.
#[test]
fn a_stale_cas_after_a_refund_and_a_takeover_is_handed_back() {
    model(|| {
        let store = Arc::new(MemoryStore::builder().max_keys(4).build());
        let later = NOW + 1;
        store.update(key(5), NOW, |_| ((), Some(NOW + 2 * T))).expect("room");
        let updater = {
            let store = store.clone();
            thread::spawn(move || charge_at(&store, key(5), NOW, 3).expect("room"))
        };
        let other = {
            let store = store.clone();
            thread::spawn(move || {
                refund_at(&store, key(5), NOW, 2);
                store.sweep(later);
                store.update(key(9), later, |_| ((), Some(NOW + 2 * T))).expect("room");
            })
        };
        let (admitted, placement) = updater.join().unwrap();
        other.join().unwrap();
        assert!(admitted);
        assert_eq!(placement, Placement::Own);
        assert_eq!(
            read(&store, key(9)),
            NOW + 2 * T,
            "key 9 holds what it was given, no more"
        );
        // Key 5: charged before the refund (NOW + 3T - 2T), between the
        // refund and the sweep (NOW + 1 + T), or after the sweep as a new
        // key (NOW + T; claims start above the evicted NOW + 1).
        let five = read(&store, key(5));
        assert!([NOW + T, NOW + 1 + T].contains(&five), "key 5 holds {five}");
        assert!(store.stats().repaired <= 1);
    });
}
