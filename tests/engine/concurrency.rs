//! Concurrency: many threads on one key, many threads over many keys, with a
//! concurrent sweeper, never admit more than the GCRA bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use ratelimit::{Clock, Limiter, ManualClock, MemoryStore, Quota};

const THREADS: usize = 8;

#[test]
fn many_threads_on_one_new_key_with_a_frozen_clock_admit_exactly_burst() {
    for round in 0..20 {
        let clock = ManualClock::new();
        let limiter = Limiter::new(MemoryStore::with_max_keys(1_000), clock);
        let quota = Quota::per_hour(1).with_burst(500);
        let admitted = AtomicU64::new(0);
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..200 {
                        if limiter.check(&("hot", round), &quota).is_allowed() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 500, "round {round}");
    }
}

#[test]
fn weighted_costs_under_contention_sum_to_at_most_burst() {
    let limiter = Limiter::new(MemoryStore::with_max_keys(1_000), ManualClock::new());
    let quota = Quota::per_hour(1).with_burst(1_000);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS as u32 {
            let (limiter, admitted, quota) = (&limiter, &admitted, &quota);
            s.spawn(move || {
                for i in 0..500u32 {
                    let cost = 1 + (i + t) % 7;
                    if limiter.check_n(&7u64, quota, cost).is_allowed() {
                        admitted.fetch_add(u64::from(cost), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let total = admitted.load(Ordering::Relaxed);
    // Costs are at most 7, so the bucket is left with less than 7 units.
    assert!((994..=1_000).contains(&total), "admitted cost {total}");
}

/// Many threads over many keys while the clock moves and a sweeper evicts
/// recovered cells: per key, admitted <= burst + elapsed / T.
#[test]
fn many_threads_many_keys_with_a_moving_clock_and_a_sweeper_respect_the_bound() {
    const KEYS: usize = 2_000;
    let clock = ManualClock::new();
    let limiter = Limiter::new(MemoryStore::with_max_keys(KEYS * 2), clock.clone());
    let quota = Quota::per_second(100).with_burst(3); // T = 10 ms
    let t_ns = quota.emission_interval().as_nanos() as u64;
    let counts: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let start = clock.now();
    let workers_done = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (limiter, counts, quota, done) = (&limiter, &counts, &quota, &workers_done);
            s.spawn(move || {
                for round in 0..30 {
                    for k in 0..KEYS {
                        let k = (k * 7 + t * 13 + round) % KEYS;
                        if limiter.check(&(k as u64), quota).is_allowed() {
                            counts[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                done.fetch_add(1, Ordering::Release);
            });
        }
        // Time moves 100 ms in 40 steps while the workers run, so the bound
        // (3 + 10 per key) stays far below the 240 checks each key gets.
        let clock = &clock;
        s.spawn(move || {
            for _ in 0..40 {
                clock.advance(Duration::from_micros(2_500));
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let (limiter, done) = (&limiter, &workers_done);
        s.spawn(move || {
            while done.load(Ordering::Acquire) < THREADS as u64 {
                limiter.sweep();
                std::thread::yield_now();
            }
        });
    });
    let elapsed = clock.now() - start;
    assert_eq!(elapsed, 100_000_000);
    let bound = 3 + elapsed / t_ns;
    let checks_per_key = THREADS as u64 * 30;
    assert!(bound * 4 < checks_per_key, "the bound must be binding");
    for (k, c) in counts.iter().enumerate() {
        let c = c.load(Ordering::Relaxed);
        assert!(c <= bound, "key {k}: admitted {c} > bound {bound} over {elapsed} ns");
        assert!(c >= 3, "key {k}: admitted {c}, less than one burst");
    }
}

#[test]
fn frozen_clock_many_keys_admit_exactly_burst_each() {
    const KEYS: usize = 5_000;
    let limiter = Limiter::new(MemoryStore::with_max_keys(KEYS * 2), ManualClock::new());
    let quota = Quota::per_minute(60).with_burst(4);
    let counts: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (limiter, counts, quota) = (&limiter, &counts, &quota);
            s.spawn(move || {
                for round in 0..3 {
                    for k in 0..KEYS {
                        let k = (k + t * 977 + round * 31) % KEYS;
                        if limiter.check(&format!("user-{k}"), quota).is_allowed() {
                            counts[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    for (k, c) in counts.iter().enumerate() {
        assert_eq!(c.load(Ordering::Relaxed), 4, "key {k}");
    }
}

/// A store far smaller than the key population, so cells are constantly
/// swept, taken over and re-inserted under contention. With the refuse
/// policy nothing is charged to a shared cell, so per key the GCRA bound must
/// hold across every eviction and re-insertion.
#[test]
fn churning_a_tiny_store_never_breaks_the_per_key_bound() {
    const KEYS: usize = 300;
    let clock = ManualClock::new();
    let store = MemoryStore::builder()
        .max_keys(64)
        .overflow(ratelimit::OverflowPolicy::Refuse)
        .build();
    let limiter = Limiter::new(store, clock.clone());
    let quota = Quota::per_second(1_000).with_burst(2); // T = 1 ms
    let t_ns = quota.emission_interval().as_nanos() as u64;
    let counts: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let start = clock.now();
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (limiter, counts, quota, done) = (&limiter, &counts, &quota, &done);
            s.spawn(move || {
                for round in 0..200 {
                    for k in 0..KEYS {
                        let k = (k * 31 + t * 7 + round * 3) % KEYS;
                        if limiter.check(&(k as u32), quota).is_allowed() {
                            counts[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                done.fetch_add(1, Ordering::Release);
            });
        }
        // 10 ms in 40 steps: the bound (2 + 10 per key) is far below the
        // 800 checks each key gets.
        let clock = &clock;
        s.spawn(move || {
            for _ in 0..40 {
                clock.advance(Duration::from_micros(250));
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let (limiter, done) = (&limiter, &done);
        s.spawn(move || {
            while done.load(Ordering::Acquire) < 4 {
                limiter.sweep();
                std::thread::yield_now();
            }
        });
    });
    let elapsed = clock.now() - start;
    assert_eq!(elapsed, 10_000_000);
    let bound = 2 + elapsed / t_ns;
    assert!(bound * 4 < 800, "the bound must be binding");
    assert!(limiter.store().len() <= 64);
    let mut total = 0;
    for (k, c) in counts.iter().enumerate() {
        let c = c.load(Ordering::Relaxed);
        total += c;
        assert!(c <= bound, "key {k}: admitted {c} > bound {bound} over {elapsed} ns");
    }
    assert!(total > 0);
}
