//! Property tests of the GCRA through the public API (limiter, memory store
//! and manual clock): the admission bound over every interval, full recovery
//! after idling, and that the numbers a decision reports are exact.

use std::time::Duration;

use proptest::prelude::*;
use ratelimit::{Clock, Limiter, ManualClock, MemoryStore, Quota};

fn limiter() -> (Limiter<MemoryStore, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (Limiter::new(MemoryStore::with_max_keys(16), clock.clone()), clock)
}

/// Random quotas, from sub-microsecond to minute-long emission intervals.
fn quota() -> impl Strategy<Value = Quota> {
    (
        1u32..=2_000,
        prop_oneof![1u64..=1_000, 1_000u64..=60_000_000_000],
        1u32..=40,
    )
        .prop_map(|(count, period_ns, burst)| {
            Quota::new(count, Duration::from_nanos(period_ns))
                .unwrap()
                .with_burst(burst)
        })
}

/// Arrivals as (gap in units of T/4, cost); gaps are often 0 (bursts).
fn arrivals() -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec(
        (prop_oneof![3 => Just(0u64), 2 => 0u64..=8, 1 => 0u64..=400], 0u32..=6),
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn admitted_cost_never_exceeds_burst_plus_elapsed_over_t(quota in quota(), events in arrivals()) {
        let (limiter, clock) = limiter();
        let t = quota.emission_interval().as_nanos() as u64;
        let burst = u64::from(quota.burst());
        let mut admitted: Vec<(u64, u64)> = Vec::new(); // (time, cost)
        for (gap, cost) in events {
            clock.advance(Duration::from_nanos(gap.saturating_mul(t) / 4));
            let cost = cost.min(quota.burst() + 1);
            let d = limiter.check_n(&"k", &quota, cost);
            if d.is_allowed() {
                prop_assert!(cost <= quota.burst());
                admitted.push((clock.now(), u64::from(cost)));
            } else if cost > quota.burst() {
                prop_assert_eq!(d.retry_after(), Duration::MAX);
            }
        }
        // Every interval [t_i, t_j] between admitted arrivals.
        for i in 0..admitted.len() {
            let mut sum = 0;
            for &(tj, cj) in &admitted[i..] {
                sum += cj;
                let d = tj - admitted[i].0;
                prop_assert!(
                    sum <= burst + d / t,
                    "admitted {} in {} ns with T={} burst={}", sum, d, t, burst
                );
            }
        }
        // After idling burst*T past the last arrival, exactly `burst` unit
        // requests are admitted back to back, and no more.
        clock.advance(Duration::from_nanos(t * burst));
        for i in 0..burst {
            let d = limiter.check(&"k", &quota);
            prop_assert!(d.is_allowed(), "request {} of a full burst", i);
            prop_assert_eq!(u64::from(d.remaining()), burst - i - 1);
        }
        prop_assert!(limiter.check(&"k", &quota).is_denied());
    }

    #[test]
    fn reported_numbers_are_exact(quota in quota(), events in arrivals(), cost in 1u32..=6) {
        let (limiter, clock) = limiter();
        let t = quota.emission_interval().as_nanos() as u64;
        for (gap, c) in events {
            clock.advance(Duration::from_nanos(gap.saturating_mul(t) / 4));
            limiter.check_n(&"k", &quota, c.min(quota.burst()));
        }
        let cost = cost.min(quota.burst());
        let probe = limiter.check_n(&"k", &quota, 0);
        prop_assert!(probe.is_allowed());
        let remaining = probe.remaining();

        // `remaining` unit requests go through now, and not one more.
        for _ in 0..remaining {
            prop_assert!(limiter.check(&"k", &quota).is_allowed());
        }
        let denied = limiter.check_n(&"k", &quota, cost);
        prop_assert!(denied.is_denied());
        prop_assert_eq!(denied.remaining(), 0);

        // Retry-After is the exact wait: 1 ns earlier is still too early.
        let wait = denied.retry_after().as_nanos() as u64;
        prop_assert!(wait > 0);
        clock.advance(Duration::from_nanos(wait - 1));
        prop_assert!(limiter.check_n(&"k", &quota, cost).is_denied());
        clock.advance(Duration::from_nanos(1));
        let ok = limiter.check_n(&"k", &quota, cost);
        prop_assert!(ok.is_allowed());

        // Reset is when the bucket is full again: then `burst` units fit.
        clock.advance(ok.reset_after());
        prop_assert_eq!(limiter.check_n(&"k", &quota, 0).remaining(), quota.burst());
    }

    #[test]
    fn a_backward_clock_never_grants_extra_capacity(
        quota in quota(),
        used in 1u32..=40,
        back_ns in prop_oneof![Just(10_000_000_000u64), Just(3_600_000_000_000u64), 1u64..=1_000_000_000_000],
    ) {
        let (limiter, clock) = limiter();
        let used = used.min(quota.burst());
        for _ in 0..used {
            prop_assert!(limiter.check(&"k", &quota).is_allowed());
        }
        let before = limiter.check_n(&"k", &quota, 0).remaining();
        clock.rewind(Duration::from_nanos(back_ns));
        // However many requests follow the step, no more are admitted than
        // the bucket held before it.
        let admitted = (0..quota.burst() + 2).filter(|_| limiter.check(&"k", &quota).is_allowed()).count();
        prop_assert!(admitted as u32 <= before, "{} admitted after the step, {} remaining before", admitted, before);
    }
}
