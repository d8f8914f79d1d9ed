//! A tour of the engine in about three seconds of real time.
//!
//! ```text
//! cargo run --example engine_demo
//! ```
//!
//! Two clients share a `10/s, burst 5` quota: a polite one (4 requests a
//! second) and a greedy one (as fast as it can). A third, on another route
//! limited to `1/min`, invents a new key for every request, against a store
//! capped at 1,000 keys: once the store is full of its live keys, the flood is
//! charged to the route's one shared overflow bucket.

use std::time::{Duration, Instant};

use ratelimit::{Check, Limiter, MemoryStore, Quota, SystemClock};

fn main() {
    let store = MemoryStore::with_max_keys(1_000);
    println!("store: {store:?}, {} KiB reserved", store.memory_bytes() / 1024);
    let limiter = Limiter::new(store, SystemClock::default());
    let quota: Quota = "10/s".parse().expect("a valid rate");
    let quota = quota.with_burst(5);
    let signup = Quota::per_minute(1);
    const SIGNUP_ROUTE: u32 = 1;
    println!("quota: {quota}; the key-rotating client's route: {signup}\n");

    let start = Instant::now();
    let mut polite = (0u32, 0u32);
    let mut greedy = (0u32, 0u32);
    let mut attacker = (0u32, 0u32, 0u32);
    let mut next_polite = start;
    let mut second = 1;
    let mut attacker_key = 0u64;

    println!(
        "{:>4} {:>16} {:>18} {:>34}",
        "sec", "polite ok/denied", "greedy ok/denied", "attacker ok/denied/overflowed"
    );
    while second <= 3 {
        let now = Instant::now();
        if now >= next_polite {
            let d = limiter.check(&"polite-client", &quota);
            if d.is_allowed() {
                polite.0 += 1;
            } else {
                polite.1 += 1;
            }
            next_polite += Duration::from_millis(250);
        }

        let d = limiter.check(&"greedy-client", &quota);
        if d.is_allowed() {
            greedy.0 += 1;
        } else {
            greedy.1 += 1;
        }

        attacker_key += 1;
        let cell = limiter.cell_key(SIGNUP_ROUTE, &format!("attacker-{attacker_key}"));
        let [d] = limiter.check_all(&[Check::new(cell, signup, 1)]);
        if d.is_allowed() {
            attacker.0 += 1;
        } else {
            attacker.1 += 1;
        }
        if d.is_overflow() {
            attacker.2 += 1;
        }

        if start.elapsed() >= Duration::from_secs(second) {
            println!(
                "{second:>4} {:>16} {:>18} {:>34}",
                format!("{}/{}", polite.0, polite.1),
                format!("{}/{}", greedy.0, greedy.1),
                format!("{}/{}/{}", attacker.0, attacker.1, attacker.2),
            );
            polite = (0, 0);
            greedy = (0, 0);
            attacker = (0, 0, 0);
            second += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }

    let d = limiter.check(&"greedy-client", &quota);
    println!(
        "\ngreedy client's next decision: allowed={} limit={} remaining={} reset={:?} retry_after={:?}",
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        d.reset_after(),
        d.retry_after()
    );
    println!(
        "keys held: {} of 1000 after {} distinct attacker keys",
        limiter.store().len(),
        attacker_key
    );
    println!(
        "\nThe polite client never noticed; the greedy one got its burst of 5, then 10/s. \
         The key-rotating client got a fresh bucket per key until the store was full of its \
         live keys; after that its new keys shared one overflow bucket (1/min), memory stayed \
         at the cap, and no existing client lost its state."
    );
}
