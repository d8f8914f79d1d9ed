use super::*;
use std::time::Duration;

/// The 64-bit path answers exactly as the 128-bit one wherever it
/// answers, over values at every edge (0, 1, the end of `u64`, the
/// largest TAT) and random ones.
#[test]
fn narrow_and_wide_decisions_agree() {
    let edges = [
        0,
        1,
        2,
        999,
        1_000_000_000,
        u64::MAX / 3,
        MAX_TAT - 1,
        MAX_TAT,
        u64::MAX,
    ];
    let quotas = [
        Quota::per_second(1),
        Quota::per_second(10).with_burst(5),
        Quota::per_second(u32::MAX).with_burst(u32::MAX),
        Quota::new(1, Duration::from_secs(u64::MAX / 2_000_000_000)).expect("quota"),
        Quota::new(3, Duration::from_secs(u64::MAX / 2_000_000_000))
            .expect("quota")
            .with_burst(u32::MAX),
    ];
    let costs = [0, 1, 2, 5, u32::MAX];
    let mut narrow = 0;
    let mut check = |stored: u64, now: u64, quota: &Quota, cost: u32| {
        let wide = decide_wide(stored, now, quota, cost);
        let (seen, _) = judge(stored, now, quota, cost);
        if matches!(seen, Seen::Debt(_)) {
            narrow += 1;
        }
        assert_eq!(
            decide(stored, now, quota, cost),
            wide,
            "stored {stored}, now {now}, {quota:?}, cost {cost}"
        );
    };
    for &stored in &edges {
        for &now in &edges {
            for quota in &quotas {
                for &cost in &costs {
                    check(stored, now, quota, cost);
                }
            }
        }
    }
    // Random values near a random now, as a live cell sees them.
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..200_000 {
        let now = next() >> (next() % 64);
        let stored = now.wrapping_add(next() >> (next() % 64)).wrapping_sub(next() >> 8);
        let quota = &quotas[(next() % quotas.len() as u64) as usize];
        // Small costs, and costs at and just past the burst.
        let cost = match next() % 4 {
            0 => quota.burst(),
            1 => quota.burst().saturating_add(1),
            _ => (next() % 7) as u32,
        };
        check(stored, now, quota, cost);
    }
    assert!(narrow > 50_000, "the 64-bit path answered only {narrow} times");
}

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
    let stored = cell;
    let earlier = t0 - back;
    let d = step(&mut cell, earlier, &quota, 1);
    assert!(d.is_denied(), "no capacity after stepping back {back} ns");
    assert_eq!(d.remaining(), 0);
    assert_eq!(cell, stored, "a denial writes nothing");
    // The debt is repaid on the new timeline: exactly when the old
    // timeline's first unit would have come back, and not before.
    assert_eq!(d.retry_after(), Duration::from_nanos(back + 100_000_000));
    assert_eq!(d.reset_after(), Duration::from_nanos(back + 500_000_000));
    let at = earlier + back + 100_000_000;
    assert!(step(&mut cell, at - 1, &quota, 1).is_denied());
    assert!(step(&mut cell, at, &quota, 1).is_allowed());
    assert!(step(&mut cell, at, &quota, 1).is_denied());
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
fn a_stale_now_never_lowers_the_tat() {
    // A decision made with an older `now` than the last writer's sees a
    // TAT beyond its capacity: it denies and writes nothing.
    let quota = q(1_000, 10); // T = 1 ms, capacity 10 ms
    let mut cell = 0;
    let fresh = 105_000_000;
    for _ in 0..10 {
        assert!(step(&mut cell, fresh, &quota, 1).is_allowed());
    }
    let stale = 100_000_000;
    let before = cell;
    assert!(step(&mut cell, stale, &quota, 1).is_denied());
    // Even a probe does not conform beyond capacity; it writes nothing.
    assert!(step(&mut cell, stale, &quota, 0).is_denied());
    assert_eq!(cell, before);
    assert!(step(&mut cell, fresh, &quota, 1).is_denied());
}

#[test]
fn backward_step_within_capacity_keeps_state() {
    let quota = q(10, 5);
    let mut cell = 0;
    let t0 = 50 * S;
    step(&mut cell, t0, &quota, 2);
    // 50 ms back: the TAT is still within capacity; state is kept.
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
        // Long windows: capacities of days to millennia.
        Quota::per_day(10_000).with_burst(20),
        Quota::per_week(1).with_burst(u32::MAX),
        "1/month".parse::<Quota>().unwrap().with_burst(u32::MAX),
        "1000000/month".parse::<Quota>().unwrap(),
    ];
    for quota in quotas {
        for stored in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            for now in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
                for cost in [0, 1, 2, u32::MAX - 1, u32::MAX] {
                    let (d, w) = decide(stored, now, &quota, cost);
                    assert!(d.remaining() <= d.limit());
                    if let Write::Store(tat) = w {
                        assert!(d.is_allowed(), "a denial writes nothing");
                        assert!(tat > now && tat <= MAX_TAT && tat >= stored);
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
    // A premium client that used its 100-request burst (1 s of debt at
    // 10 ms each) moves to a 5-burst tier (capacity 500 ms): it is in debt
    // there, not refilled, and going back to premium refills nothing.
    let premium = q(100, 100);
    let standard = q(10, 5);
    let mut cell = 0;
    for _ in 0..100 {
        step(&mut cell, S, &premium, 1);
    }
    let d = step(&mut cell, S, &standard, 1);
    assert!(d.is_denied());
    assert_eq!(d.remaining(), 0);
    assert_eq!(d.retry_after(), Duration::from_millis(600));
    assert!(
        step(&mut cell, S, &premium, 1).is_denied(),
        "no refill from switching back"
    );
    assert!(step(&mut cell, S + 599_999_999, &standard, 1).is_denied());
    assert!(step(&mut cell, S + 600_000_000, &standard, 1).is_allowed());
}

#[test]
fn a_refund_moves_back_by_its_cost_and_never_before_now() {
    let quota = q(10, 5); // T = 100 ms
    let now = 10 * S;
    let mut cell = 0;
    step(&mut cell, now, &quota, 3);
    assert_eq!(refund(cell, now, &quota, 1, now), Some(now + 200_000_000));
    // More than is owed: exactly full, not in credit, not 1 ns in debt.
    assert_eq!(refund(cell, now, &quota, 5, now), Some(now));
    let (d, _) = decide(now, now, &quota, 5);
    assert!(d.is_allowed(), "the whole burst fits after a full refund");
    // Time refilled part of it: only what is still owed comes back.
    assert_eq!(refund(cell, now + 250_000_000, &quota, 3, now), Some(now + 250_000_000));
    // Nothing to hand back: recovered, empty refund, no cell.
    assert_eq!(refund(cell, now + 300_000_000, &quota, 3, now), None);
    assert_eq!(refund(cell, now, &quota, 0, now), None);
    assert_eq!(refund(0, now, &quota, 3, now), None);
    // Extremes do not overflow.
    assert_eq!(refund(MAX_TAT, 0, &Quota::per_hour(1), u32::MAX, 0), Some(0));
    assert_eq!(
        refund(MAX_TAT, MAX_TAT - 1, &quota, u32::MAX, MAX_TAT - 1),
        Some(MAX_TAT - 1)
    );
    // A charge time past the end of `u64` (a clock that stepped back):
    // at most the cost comes back.
    let most = u64::from(u32::MAX) * 100_000_000;
    assert_eq!(refund(MAX_TAT, 0, &quota, u32::MAX, u64::MAX), Some(MAX_TAT - most));
    assert_eq!(refund(MAX_TAT, u64::MAX - 2, &quota, 1, 0), None);
}

#[test]
fn a_refund_gives_back_at_most_what_its_charge_still_holds() {
    let quota = q(10, 10); // T = 100 ms, capacity 1 s
    let t0 = 20 * S;
    let ms = 1_000_000;
    let mut cell = 0;
    step(&mut cell, t0, &quota, 10);
    // The case: the charge repaid by time, the bucket spent
    // again, then the old charge refunded: nothing comes back.
    let t1 = t0 + S;
    step(&mut cell, t1, &quota, 10);
    assert_eq!(cell, t1 + S);
    assert_eq!(refund(cell, t1, &quota, 10, t0), None);
    assert_eq!(refund(cell, t1 + 500 * ms, &quota, 10, t0), None);
    // Part way: 400 ms after a charge of 10 on a full bucket, 6 units
    // of it are still owed, and a later charge of 4 stays charged.
    let mut cell = 0;
    step(&mut cell, t0, &quota, 10);
    step(&mut cell, t0 + 400 * ms, &quota, 4);
    assert_eq!(cell, t0 + 1_400 * ms);
    assert_eq!(refund(cell, t0 + 400 * ms, &quota, 10, t0), Some(t0 + 800 * ms));
    // The last 3 units of it count as charged 700 ms in: at 400 ms
    // all 3 are owed, at 800 ms 2 of them.
    let at = last_units_charged_at(t0, &quota, 10, 3);
    assert_eq!(at, t0 + 700 * ms);
    assert_eq!(refund(cell, t0 + 400 * ms, &quota, 3, at), Some(t0 + 1_100 * ms));
    assert_eq!(refund(cell, t0 + 800 * ms, &quota, 3, at), Some(t0 + 1_200 * ms));
    assert_eq!(last_units_charged_at(t0, &quota, 10, 10), t0);
    assert_eq!(
        last_units_charged_at(t0, &quota, 3, 10),
        t0,
        "more than the charge: all of it"
    );
    assert_eq!(last_units_charged_at(u64::MAX - 1, &quota, u32::MAX, 0), u64::MAX);
    // A clock that stepped back since the charge: at most the cost.
    assert_eq!(refund(cell, t0, &quota, 2, t0 + 300 * ms), Some(t0 + 1_200 * ms));
}

mod refund_properties {
    use super::*;
    use proptest::prelude::*;

    /// One charge of the history: its parts (time, nanoseconds of TAT
    /// it added), in the reference history, and whether it was refunded.
    struct Charged {
        parts: Vec<(u64, u128)>,
        units: u32,
        refunded: bool,
    }

    /// The TAT of the history in which every charge is what is left of
    /// it after its refunds: the client's state had the charges been
    /// that much smaller in the first place.
    fn reference(charges: &[Charged]) -> u128 {
        let mut parts: Vec<(u64, u128)> = charges.iter().flat_map(|c| c.parts.iter().copied()).collect();
        parts.sort_by_key(|p| p.0);
        parts.iter().fold(0u128, |tat, &(at, ns)| tat.max(u128::from(at)) + ns)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        /// Over random histories of checks, extra charges (a request's
        /// settlement above its reservation), time steps and refunds
        /// (whole or partial, each charge at most once, as
        /// `ratelimit::axum::Charge` does), the cell never falls below the
        /// reference: no refund hands back capacity that time had repaid.
        #[test]
        fn a_refund_never_hands_back_more_than_a_smaller_charge_would_have_left(
            per_sec in 1u32..1_000,
            burst in 1u32..50,
            ops in proptest::collection::vec((0u8..4, 0u32..60, 0u64..3_000_000_000), 1..60),
        ) {
            let quota = q(per_sec, burst);
            let t = quota.interval_ns();
            let mut now = 1_000 * S;
            let mut cell = 0u64;
            let mut charges: Vec<Charged> = Vec::new();
            for (kind, a, dt) in ops {
                match kind {
                    // A check of `a` units.
                    0 => {
                        let before = cell.max(now);
                        let (d, w) = decide(cell, now, &quota, a);
                        if let Write::Store(tat) = w {
                            prop_assert!(d.is_allowed());
                            cell = tat;
                            charges.push(Charged { parts: vec![(now, u128::from(tat - before))], units: a, refunded: false });
                        }
                    }
                    // `a` more units forced onto the latest charge.
                    1 => {
                        if let Some(c) = charges.last_mut().filter(|c| !c.refunded) {
                            let before = cell.max(now);
                            if let Some(tat) = force(cell, now, &quota, a) {
                                let ns = u128::from(tat - before);
                                cell = tat;
                                c.parts.push((now, ns));
                                c.units += u32::try_from(ns / u128::from(t)).unwrap();
                            }
                        }
                    }
                    // Time passes.
                    2 => now += dt,
                    // A refund of part of a charge (`a` picks which and
                    // how much), at its last units' time.
                    _ => {
                        let open: Vec<usize> = (0..charges.len()).filter(|&i| !charges[i].refunded).collect();
                        if open.is_empty() {
                            continue;
                        }
                        let i = open[a as usize % open.len()];
                        let c = &mut charges[i];
                        let r = 1 + (a + dt as u32) % c.units.max(1);
                        let at = last_units_charged_at(c.parts[0].0, &quota, c.units, r);
                        let before = cell;
                        if let Some(tat) = refund(cell, now, &quota, r, at) {
                            prop_assert!(tat < before && tat >= now);
                            cell = tat;
                        }
                        // The reference's charge is smaller by what was
                        // handed back: the latest parts first.
                        let mut back = u128::from(before - cell);
                        for part in c.parts.iter_mut().rev() {
                            let take = back.min(part.1);
                            part.1 -= take;
                            back -= take;
                        }
                        prop_assert_eq!(back, 0, "handed back more than the charge added");
                        c.refunded = true;
                    }
                }
                let floor = u128::from(now);
                prop_assert!(
                    u128::from(cell).max(floor) >= reference(&charges).max(floor),
                    "cell {} below the reference {} at {}", cell, reference(&charges), now
                );
            }
        }
    }
}

#[test]
fn the_end_of_time_denies_instead_of_saturating() {
    let quota = q(10, 5);
    let mut cell = 0;
    let now = u64::MAX - 50_000_000; // less than one T from the end
    let d = step(&mut cell, now, &quota, 1);
    assert!(d.is_denied());
    assert_eq!(cell, 0);
    let d = step(&mut cell, u64::MAX, &quota, 1);
    assert!(d.is_denied());
}

/// A greedy client (it asks until refused, at every step) from idle
/// at `t0`, stepping by `step_ns` for `span_ns`: at every step its total
/// admitted is exactly `burst + floor(elapsed / T)`.
fn greedy_over(quota: &Quota, t0: u64, step_ns: u64, span_ns: u64) -> u64 {
    let t = quota.interval_ns();
    let burst = u64::from(quota.burst());
    let mut cell = 0;
    let mut admitted = 0u64;
    let mut now = t0;
    while now - t0 <= span_ns {
        while step(&mut cell, now, quota, 1).is_allowed() {
            admitted += 1;
        }
        assert_eq!(admitted, burst + (now - t0) / t, "at {} ns", now - t0);
        now += step_ns;
    }
    admitted
}

#[test]
fn a_daily_quota_admits_its_burst_then_one_per_8_64_s_over_a_whole_day() {
    const DAY: u64 = 86_400 * S;
    let quota = Quota::per_day(10_000).with_burst(20);
    assert_eq!(quota.interval_ns(), 8_640_000_000);
    let t0 = 1_000 * DAY; // a clock long past 0: nothing special about it

    // 20 at once, then refused until exactly 8.64 s later.
    let mut cell = 0;
    for i in 0..20 {
        assert!(step(&mut cell, t0, &quota, 1).is_allowed(), "burst request {i}");
    }
    let d = step(&mut cell, t0, &quota, 1);
    assert_eq!(d.denial(), Some(Denial::RateLimited));
    assert_eq!(d.retry_after(), Duration::from_millis(8_640));
    assert_eq!(d.reset_after(), Duration::from_millis(20 * 8_640));
    assert!(step(&mut cell, t0 + 8_640_000_000 - 1, &quota, 1).is_denied());
    assert!(step(&mut cell, t0 + 8_640_000_000, &quota, 1).is_allowed());
    assert!(step(&mut cell, t0 + 8_640_000_000, &quota, 1).is_denied());

    // Over the whole day, asked every second (and at a step that is no
    // divisor of T): exactly burst + floor(elapsed / T), checked by
    // counting at every step; 20 + 10,000 at the end of the day.
    assert_eq!(greedy_over(&quota, t0, S, DAY), 20 + 10_000);
    // (86,399 steps of 1.000000007 s: 9,999 intervals.)
    assert_eq!(greedy_over(&quota, t0, 1_000_000_007, DAY), 20 + 9_999);
    // On the interval's boundaries: 1 ns early refuses, on time admits.
    let mut cell = 0;
    let mut admitted = 0u64;
    for k in 0..=10_000u64 {
        let on_time = t0 + k * quota.interval_ns();
        if k > 0 {
            assert!(step(&mut cell, on_time - 1, &quota, 1).is_denied());
        }
        while step(&mut cell, on_time, &quota, 1).is_allowed() {
            admitted += 1;
        }
        assert_eq!(admitted, 20 + k);
    }
}

#[test]
fn a_weekly_quota_is_exact_over_a_whole_week() {
    const WEEK: u64 = 7 * 86_400 * S;
    let quota = Quota::per_week(100_000).with_burst(50);
    assert_eq!(quota.interval_ns(), 6_048_000_000);
    assert_eq!(greedy_over(&quota, 3 * WEEK, S, WEEK), 50 + 100_000);
    // The default burst: the whole week's count at once, then the rate.
    let full = Quota::per_week(100_000);
    let mut cell = 0;
    let now = WEEK;
    assert!(step(&mut cell, now, &full, 100_000).is_allowed());
    let d = step(&mut cell, now, &full, 1);
    assert!(d.is_denied());
    assert_eq!(d.retry_after(), Duration::from_millis(6_048));
    assert_eq!(d.reset_after(), Duration::from_secs(604_800));
}

#[test]
fn a_monthly_quota_is_thirty_days_exactly() {
    let quota: Quota = "1000000/month".parse().unwrap();
    assert_eq!(quota.interval_ns(), 2_592_000_000);
    let mut cell = 0;
    let now = 5 * S;
    assert!(step(&mut cell, now, &quota, 1_000_000).is_allowed());
    let d = step(&mut cell, now, &quota, 1);
    assert_eq!(d.reset_after(), Duration::from_secs(30 * 86_400));
    assert_eq!(d.retry_after(), Duration::from_millis(2_592));
    // A month later the bucket is full again, to the nanosecond.
    let month = 2_592_000 * S;
    assert!(step(&mut cell, now + month - 1, &quota, 1_000_000).is_denied());
    assert!(step(&mut cell, now + month, &quota, 1_000_000).is_allowed());
}
