//! The GCRA decision: pure integer arithmetic on nanoseconds.
//!
//! One stored value per key, its theoretical arrival time (TAT). With
//! emission interval `T` and burst `b`, the tolerance is `tau = T * (b - 1)`.
//! For cost `n` at time `t`:
//!
//! ```text
//! tat = max(stored, t);  new = tat + n*T
//! admit iff new - t <= tau + T   (= b*T, the bucket's capacity in time)
//! ```
//!
//! All intermediate values are `u128`, so nothing overflows, whatever the
//! inputs; only the stored TAT saturates at `u64::MAX`.

use crate::decision::{Decision, Denial};
use crate::quota::Quota;

/// What the store should do with the cell after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// Leave the cell as it is (denied, or a zero-cost probe).
    Keep,
    /// Store this TAT. Always `> now` (short of `u64` saturation), so a cell
    /// that is written is live.
    Store(u64),
}

/// Decides a request of `cost` at `now` against a cell whose stored TAT is
/// `stored` (0 for a cell that does not exist yet: fully recovered).
#[inline]
pub(crate) fn decide(stored: u64, now: u64, quota: &Quota, cost: u32) -> (Decision, Write) {
    let t = u128::from(quota.interval_ns());
    let burst = quota.burst();
    let now128 = u128::from(now);
    let capacity = t * u128::from(burst); // tau + T

    // `stored - now` can exceed the capacity only when the clock stepped
    // backwards or the key's quota shrank (a tier change). Clamp to an empty
    // bucket: no extra capacity, and no lock-out longer than one full recovery.
    let tat = u128::from(stored).clamp(now128, now128 + capacity);
    // Persist a clamp even when denying, or the client would stay locked out
    // until the clock caught up with the old timeline.
    let clamped = u128::from(stored) > now128 + capacity;
    let keep = if clamped {
        Write::Store(saturate(tat))
    } else {
        Write::Keep
    };

    // Unused capacity once the TAT is `tat`; `tat - now <= capacity` holds
    // wherever this is called.
    let slack_at = |tat: u128| -> u64 { saturate(capacity - (tat - now128)) };
    let interval_ns = quota.interval_ns();

    if cost > burst {
        let decision = Decision {
            allowed: false,
            limit: burst,
            slack_ns: slack_at(tat),
            interval_ns,
            reset_after_ns: saturate(tat - now128),
            retry_after_ns: u64::MAX,
            denial: Some(Denial::CostExceedsBurst),
            overflow: false,
        };
        return (decision, keep);
    }

    let new = tat + u128::from(cost) * t;
    if new - now128 <= capacity {
        let decision = Decision {
            allowed: true,
            limit: burst,
            slack_ns: slack_at(new),
            interval_ns,
            reset_after_ns: saturate(new - now128),
            retry_after_ns: 0,
            denial: None,
            overflow: false,
        };
        let write = if cost == 0 { keep } else { Write::Store(saturate(new)) };
        (decision, write)
    } else {
        let decision = Decision {
            allowed: false,
            limit: burst,
            slack_ns: slack_at(tat),
            interval_ns,
            reset_after_ns: saturate(tat - now128),
            retry_after_ns: saturate(new - now128 - capacity),
            denial: Some(Denial::RateLimited),
            overflow: false,
        };
        (decision, keep)
    }
}

fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    fn q(per_sec: u32, burst: u32) -> Quota {
        Quota::per_second(per_sec).with_burst(burst)
    }

    /// Runs `decide` and applies its write, like a store would.
    fn step(cell: &mut u64, now: u64, quota: &Quota, cost: u32) -> Decision {
        let (d, w) = decide(*cell, now, quota, cost);
        if let Write::Store(tat) = w {
            assert!(tat > now, "a stored TAT is always in the future");
            *cell = tat;
        }
        d
    }

    #[test]
    fn burst_boundary_from_idle() {
        let quota = q(10, 5); // T = 100 ms
        let mut cell = 0;
        let now = 7 * S;
        for i in 0..5 {
            let d = step(&mut cell, now, &quota, 1);
            assert!(d.is_allowed(), "request {i} of the burst");
            assert_eq!(d.remaining(), 4 - i);
            assert_eq!(d.limit(), 5);
            assert_eq!(d.reset_after(), Duration::from_millis(100 * (u64::from(i) + 1)));
        }
        let d = step(&mut cell, now, &quota, 1);
        assert!(d.is_denied());
        assert_eq!(d.denial(), Some(Denial::RateLimited));
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after(), Duration::from_millis(500));
        assert_eq!(d.retry_after(), Duration::from_millis(100));
    }

    #[test]
    fn steady_rate_refills_one_per_interval() {
        let quota = q(10, 1);
        let mut cell = 0;
        let mut now = S;
        assert!(step(&mut cell, now, &quota, 1).is_allowed());
        // 1 ns short of T: still denied, and retry-after says exactly 1 ns.
        now += 100_000_000 - 1;
        let d = step(&mut cell, now, &quota, 1);
        assert!(d.is_denied());
        assert_eq!(d.retry_after(), Duration::from_nanos(1));
        now += 1;
        for _ in 0..100 {
            assert!(step(&mut cell, now, &quota, 1).is_allowed());
            assert!(step(&mut cell, now, &quota, 1).is_denied());
            now += 100_000_000;
        }
    }

    #[test]
    fn exact_values_after_partial_recovery() {
        let quota = q(10, 4); // T = 100 ms, capacity 400 ms
        let mut cell = 0;
        let t0 = 10 * S;
        for _ in 0..4 {
            assert!(step(&mut cell, t0, &quota, 1).is_allowed());
        }
        // 250 ms later: 2 units recovered (and half of a third).
        let now = t0 + 250_000_000;
        let d = step(&mut cell, now, &quota, 1);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 1);
        assert_eq!(d.reset_after(), Duration::from_millis(250));
        // Cost 2 now needs 50 ms more.
        let d = step(&mut cell, now, &quota, 2);
        assert!(d.is_denied());
        assert_eq!(d.remaining(), 1);
        assert_eq!(d.reset_after(), Duration::from_millis(250));
        assert_eq!(d.retry_after(), Duration::from_millis(50));
    }

    #[test]
    fn cost_equal_to_burst_is_admitted_only_from_full() {
        let quota = q(10, 5);
        let mut cell = 0;
        let d = step(&mut cell, S, &quota, 5);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after(), Duration::from_millis(500));
        let d = step(&mut cell, S + 100_000_000, &quota, 5);
        assert!(d.is_denied());
        assert_eq!(d.retry_after(), Duration::from_millis(400));
        assert!(step(&mut cell, S + 500_000_000, &quota, 5).is_allowed());
    }

    #[test]
    fn cost_above_burst_is_never_admitted() {
        let quota = q(10, 5);
        let mut cell = 0;
        let d = step(&mut cell, u64::MAX / 2, &quota, 6);
        assert!(d.is_denied());
        assert_eq!(d.denial(), Some(Denial::CostExceedsBurst));
        assert_eq!(d.retry_after(), Duration::MAX);
        assert_eq!(d.remaining(), 5, "an impossible request does not consume anything");
        assert_eq!(cell, 0);
    }

    #[test]
    fn zero_cost_is_a_probe() {
        let quota = q(10, 3);
        let mut cell = 0;
        step(&mut cell, S, &quota, 1);
        let before = cell;
        let d = step(&mut cell, S, &quota, 0);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 2);
        assert_eq!(cell, before);
    }

    fn backward_step_grants_nothing(back: u64) {
        let quota = q(10, 5);
        let mut cell = 0;
        let t0 = 100_000 * S;
        for _ in 0..5 {
            assert!(step(&mut cell, t0, &quota, 1).is_allowed());
        }
        let earlier = t0 - back;
        let d = step(&mut cell, earlier, &quota, 1);
        assert!(d.is_denied(), "no capacity after stepping back {back} ns");
        assert_eq!(d.remaining(), 0);
        // The client is not locked out for the length of the step: it recovers
        // from an empty bucket at the normal rate on the new timeline.
        assert_eq!(d.retry_after(), Duration::from_millis(100));
        assert!(step(&mut cell, earlier + 99_999_999, &quota, 1).is_denied());
        assert!(step(&mut cell, earlier + 100_000_000, &quota, 1).is_allowed());
        assert!(step(&mut cell, earlier + 100_000_000, &quota, 1).is_denied());
    }

    #[test]
    fn backward_clock_step_of_10s() {
        backward_step_grants_nothing(10 * S);
    }

    #[test]
    fn backward_clock_step_of_1h() {
        backward_step_grants_nothing(3600 * S);
    }

    #[test]
    fn backward_step_within_capacity_keeps_state() {
        let quota = q(10, 5);
        let mut cell = 0;
        let t0 = 50 * S;
        step(&mut cell, t0, &quota, 2);
        // 50 ms back: the TAT is still within capacity, nothing is clamped.
        let d = step(&mut cell, t0 - 50_000_000, &quota, 1);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 1);
    }

    #[test]
    fn u64_extremes_do_not_overflow() {
        let quotas = [
            Quota::new(1, Duration::from_nanos(u64::MAX))
                .unwrap()
                .with_burst(u32::MAX),
            Quota::new(u32::MAX, Duration::from_nanos(1))
                .unwrap()
                .with_burst(u32::MAX),
            Quota::per_hour(1),
            Quota::per_second(u32::MAX),
        ];
        for quota in quotas {
            for stored in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
                for now in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
                    for cost in [0, 1, 2, u32::MAX - 1, u32::MAX] {
                        let (d, w) = decide(stored, now, &quota, cost);
                        assert!(d.remaining() <= d.limit());
                        if let Write::Store(tat) = w {
                            assert!(tat >= now);
                            if d.is_denied() {
                                // Only a clamp after a backward step is written.
                                assert!(tat < stored);
                            }
                        }
                        if cost > quota.burst() {
                            assert!(d.is_denied());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn tier_change_keeps_the_tat() {
        // A premium client that used its 100-request burst moves to a 5-burst
        // tier: it is empty there, not refilled.
        let premium = q(100, 100);
        let standard = q(10, 5);
        let mut cell = 0;
        for _ in 0..100 {
            step(&mut cell, S, &premium, 1);
        }
        let d = step(&mut cell, S, &standard, 1);
        assert!(d.is_denied());
        assert_eq!(d.remaining(), 0);
    }
}
