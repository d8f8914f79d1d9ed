//! The memory bound: attacker-chosen keys cannot grow the store, cannot evict
//! a limited client, and cannot get through unlimited.

use std::time::Duration;

use ratelimit::{Denial, Limiter, ManualClock, MemoryStore, OverflowPolicy, Quota};

const CAP: usize = 1_000;

fn limiter(policy: OverflowPolicy) -> (Limiter<MemoryStore, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let store = MemoryStore::builder().max_keys(CAP).overflow(policy).build();
    (Limiter::new(store, clock.clone()), clock)
}

#[test]
fn ten_times_the_cap_in_distinct_keys_keeps_the_count_at_the_cap() {
    let (limiter, clock) = limiter(OverflowPolicy::SharedBucket);
    let quota = Quota::per_minute(10);
    for i in 0..CAP * 10 {
        limiter.check(&format!("attacker-{i}"), &quota);
        assert!(
            limiter.store().len() <= CAP,
            "after {i} keys: {}",
            limiter.store().len()
        );
        if i % 100 == 0 {
            clock.advance(Duration::from_millis(1));
        }
    }
    assert_eq!(limiter.store().len(), CAP);
    // Sweeping while every cell is live evicts nothing.
    assert_eq!(limiter.sweep(), 0);
    assert_eq!(limiter.store().len(), CAP);
}

#[test]
fn a_limited_key_is_never_evicted_and_never_gets_a_fresh_bucket() {
    let (limiter, clock) = limiter(OverflowPolicy::SharedBucket);
    let strict = Quota::per_hour(2);
    assert!(limiter.check(&"victim-of-its-own-abuse", &strict).is_allowed());
    assert!(limiter.check(&"victim-of-its-own-abuse", &strict).is_allowed());
    assert!(limiter.check(&"victim-of-its-own-abuse", &strict).is_denied());

    // A flood of short-lived keys that recover quickly, with sweeps and time
    // passing: their cells churn, the limited key's cell must survive.
    let loose = Quota::per_second(1_000).with_burst(1);
    for round in 0..20 {
        for i in 0..CAP {
            limiter.check(&(round, i), &loose);
        }
        clock.advance(Duration::from_secs(1));
        limiter.sweep();
        let d = limiter.check(&"victim-of-its-own-abuse", &strict);
        assert!(d.is_denied(), "round {round}: the limited key got capacity back");
        assert!(!d.is_overflow(), "round {round}: the limited key lost its cell");
    }
    // It recovers on its own schedule: one unit per 30 minutes.
    clock.advance(Duration::from_secs(30 * 60));
    assert!(limiter.check(&"victim-of-its-own-abuse", &strict).is_allowed());
}

#[test]
fn the_overflow_bucket_limits_new_keys_when_the_store_is_full() {
    let (limiter, _clock) = limiter(OverflowPolicy::SharedBucket);
    let quota = Quota::per_hour(5);
    for i in 0..CAP {
        assert!(!limiter.check(&i, &quota).is_overflow());
    }
    // The store is full of live cells: new keys share one bucket of 5.
    let mut admitted = 0;
    for i in CAP..CAP * 3 {
        let d = limiter.check(&i, &quota);
        assert!(d.is_overflow());
        if d.is_allowed() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5);
    // Routes have separate overflow cells.
    assert!(limiter.check_all(&[ratelimit::Check::new(limiter.cell_key(9, &"newcomer"), quota, 1)])[0].is_allowed());
    // Keys that already had cells keep them.
    let d = limiter.check(&0usize, &quota);
    assert!(!d.is_overflow());
    assert_eq!(d.remaining(), 3);
}

#[test]
fn the_refuse_policy_denies_new_keys_when_full() {
    let (limiter, clock) = limiter(OverflowPolicy::Refuse);
    let quota = Quota::per_second(1);
    for i in 0..CAP {
        assert!(limiter.check(&i, &quota).is_allowed());
    }
    let d = limiter.check(&"one too many", &quota);
    assert!(d.is_denied());
    assert_eq!(d.denial(), Some(Denial::StoreFull));
    assert!(d.retry_after() > Duration::ZERO);
    // Once cells recover, there is room again.
    clock.advance(Duration::from_secs(1));
    assert!(limiter.check(&"one too many", &quota).is_allowed());
}

#[test]
fn recovered_cells_are_reused_without_a_sweep() {
    let (limiter, clock) = limiter(OverflowPolicy::SharedBucket);
    let quota = Quota::per_second(10).with_burst(1);
    // Each round, a whole new population of CAP keys replaces the previous
    // one, which has fully recovered. No sweeper runs: inserts take over
    // recovered cells near them or sweep a bounded stretch of the table.
    for round in 0..10 {
        let own = (0..CAP)
            .filter(|i| {
                let d = limiter.check(&(round, *i), &quota);
                d.is_allowed() && !d.is_overflow()
            })
            .count();
        assert!(
            own >= CAP * 95 / 100,
            "round {round}: only {own} of {CAP} new keys got a cell"
        );
        assert!(limiter.store().len() <= CAP);
        clock.advance(Duration::from_millis(100));
    }
}

#[test]
fn sweep_drops_exactly_the_recovered_cells() {
    let (limiter, clock) = limiter(OverflowPolicy::SharedBucket);
    let fast = Quota::per_second(10).with_burst(1); // recovers in 100 ms
    let slow = Quota::per_minute(1).with_burst(1); // recovers in 60 s
    for i in 0..300u32 {
        limiter.check(&i, if i % 3 == 0 { &slow } else { &fast });
    }
    assert_eq!(limiter.store().len(), 300);
    clock.advance(Duration::from_millis(99));
    assert_eq!(limiter.sweep(), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.sweep(), 200);
    assert_eq!(limiter.store().len(), 100);
    for i in (0..300u32).step_by(3) {
        assert!(limiter.check(&i, &slow).is_denied(), "key {i} kept its state");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_background_sweeper_drops_recovered_cells_and_stops_with_the_limiter() {
    let clock = ManualClock::new();
    let limiter = std::sync::Arc::new(Limiter::new(MemoryStore::with_max_keys(100_000), clock.clone()));
    let quota = Quota::per_second(10).with_burst(1);
    for i in 0..50_000u32 {
        limiter.check(&i, &quota);
    }
    let sweeper = limiter.spawn_sweeper(Duration::from_millis(5));
    clock.advance(Duration::from_secs(1));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !limiter.store().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the sweeper did not run");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(limiter);
    tokio::time::timeout(Duration::from_secs(10), sweeper)
        .await
        .expect("the sweeper stops once the limiter is dropped")
        .unwrap();
}
