//! Model checks of `ConcurrencyLimiter` with loom: permits of one key taken
//! and given back on several threads, with the table full so that keys
//! overflow, are never lost and never given back twice, and a key never
//! holds more than its limit.
#![cfg(loom)]

use std::sync::Arc;

use loom::thread;
use ratelimit::concurrency::ConcurrencyLimiter;
use ratelimit::CellKey;

/// Two threads take a permit of one key with room for one: exactly one
/// gets it; once both are done, nothing is held.
#[test]
fn two_takes_of_the_last_permit_admit_one() {
    loom::model(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(64));
        let key = CellKey::new(7, 0);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || limiter.try_acquire(key, 1).map(drop).is_ok())
            })
            .collect();
        let taken = handles.into_iter().map(|h| h.join().unwrap()).filter(|t| *t).count();
        // Both may succeed only if the first gave its permit back first.
        assert!(taken >= 1);
        assert_eq!(limiter.in_flight(key), 0);
        assert!(limiter.is_empty());
    });
}

/// A key holds a permit while another thread gives back the last permit
/// of an overflowed key on the same overflow counter, and a third take
/// races both: the counters end at zero and the held key never exceeded
/// its limit of 2.
#[test]
fn a_give_back_racing_takes_on_an_overflow_counter_loses_nothing() {
    loom::model(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(64));
        // A key in flight on its own entry, and the table full (64 keys,
        // one per shard: the shard is the hash's top 6 bits)...
        let own = CellKey::new(1 << 58 | 1, 0);
        let held = limiter.try_acquire(own, 2).expect("room");
        let fillers: Vec<_> = (0..64u64)
            .filter(|&s| s != 1)
            .map(|s| limiter.try_acquire(CellKey::new(s << 58 | 1, 0), 1).expect("room"))
            .collect();
        assert_eq!(limiter.len(), 64);
        // ...so two new keys without a network, on one route, share that
        // route's overflow counter.
        let a = CellKey::new(2 << 58 | 5, 0);
        let b = CellKey::new(3 << 58 | 5, 0);
        let spilled = limiter.try_acquire(a, 1).expect("room");
        assert!(spilled.overflowed());
        let giver = thread::spawn(move || drop(spilled));
        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let p = limiter.try_acquire(b, 2).ok();
                assert!(limiter.in_flight(b) <= 2);
                drop(p);
            })
        };
        let second = limiter.try_acquire(own, 2).expect("one more of its 2");
        assert!(limiter.try_acquire(own, 2).is_err(), "its limit of 2");
        giver.join().unwrap();
        taker.join().unwrap();
        drop((held, second, fillers));
        assert_eq!(limiter.in_flight(own), 0);
        // Their counter (both have no entry: `in_flight` reads it; summing
        // all 4,096 counters is more loads than a loom model may branch on).
        assert_eq!(limiter.in_flight(a), 0);
        assert_eq!(limiter.in_flight(b), 0);
        assert!(limiter.is_empty());
    });
}
