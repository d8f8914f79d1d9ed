//! Stacked decisions ([`Limiter::check_all`]), peeks and refunds, against a
//! sequential model of GCRA (property test) and under contention (stress
//! test with real threads): when any limit refuses, none is charged; when
//! all admit, each is charged exactly its cost.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ratelimit::{Check, Clock, Decision, Limiter, ManualClock, MemoryStore, OverflowPolicy, Quota, Store};

/// The raw TAT of a cell (0: no cell), read through the store without
/// writing anything.
fn tat<C: Clock>(limiter: &Limiter<MemoryStore, C>, check: &Check) -> u64 {
    let now = limiter.clock().now();
    limiter
        .store()
        .update(check.cell, now, |t| (t, None))
        .expect("reads are never refused")
        .0
}

fn interval(q: &Quota) -> u64 {
    u64::try_from(q.emission_interval().as_nanos()).expect("test intervals fit u64")
}

/// The model: one TAT per cell, GCRA written out independently of the crate.
/// Returns the new TAT if a request of `cost` at `now` conforms.
fn model_decide(stored: u64, now: u64, q: &Quota, cost: u32) -> Option<u64> {
    if cost > q.burst() {
        return None;
    }
    let t = u128::from(interval(q));
    let base = u128::from(stored.max(now));
    let new = base + u128::from(cost) * t;
    if new - u128::from(now) > t * u128::from(q.burst()) {
        return None;
    }
    Some(if cost == 0 {
        stored
    } else {
        u64::try_from(new).expect("test TATs fit u64")
    })
}

/// Two TATs are the same state at `now` when both are recovered, or equal.
fn same_state(a: u64, b: u64, now: u64) -> bool {
    a.max(now) == b.max(now)
}

#[derive(Debug, Clone)]
struct Step {
    advance_ns: u64,
    /// (cell index, cost): 1 to 3 limits, cells may repeat across stacks
    /// (shared limits) and within one (the same cell charged twice).
    stack: Vec<(usize, u32)>,
}

fn quota_strategy() -> impl Strategy<Value = Quota> {
    // Emission intervals from 1 ms to 1 s, bursts from 1 to 8.
    (1u32..=20, 1u64..=1_000, 1u32..=8).prop_map(|(count, period_ms, burst)| {
        Quota::new(count, Duration::from_millis(period_ms * u64::from(count)))
            .expect("a valid quota")
            .with_burst(burst)
    })
}

fn step_strategy(cells: usize) -> impl Strategy<Value = Step> {
    let cost = prop_oneof![3 => Just(1u32), 1 => Just(0u32), 2 => 0u32..=10];
    let advance = prop_oneof![2 => Just(0u64), 3 => 0u64..2_000_000_000];
    (advance, proptest::collection::vec((0..cells, cost), 1..=3))
        .prop_map(|(advance_ns, stack)| Step { advance_ns, stack })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// After every step: a refused stack left every cell in the state it
    /// had; an admitted one charged each of its cells exactly `cost * T`
    /// beyond `max(stored, now)` (in order, for a cell listed twice); the
    /// outcome and every cell match a sequential model of GCRA.
    #[test]
    fn a_stack_is_charged_whole_or_not_at_all(
        quotas in proptest::collection::vec(quota_strategy(), 4),
        steps in proptest::collection::vec(step_strategy(4), 1..60),
    ) {
        let clock = ManualClock::new();
        let limiter = Limiter::new(MemoryStore::default(), clock.clone());
        let cells: Vec<Check> = quotas
            .iter()
            .enumerate()
            .map(|(i, q)| Check::new(limiter.cell_key(1, &i), *q, 0))
            .collect();
        let mut model = vec![0u64; cells.len()];
        let mut out: [Decision; 3] = [limiter.peek(&"unused", &quotas[0]); 3];
        for step in steps {
            clock.advance(Duration::from_nanos(step.advance_ns));
            let now = clock.now();
            let checks: Vec<Check> = step
                .stack
                .iter()
                .map(|&(i, cost)| Check { cost, ..cells[i] })
                .collect();
            let before: Vec<u64> = cells.iter().map(|c| tat(&limiter, c)).collect();

            // The model: apply the stack in order to a copy; keep it only
            // if every limit conforms.
            let mut next = model.clone();
            let mut conforms = true;
            for &(i, cost) in &step.stack {
                match model_decide(next[i], now, &quotas[i], cost) {
                    Some(t) => next[i] = t,
                    None => conforms = false,
                }
            }
            // A peek of the stack's limits, one by one, charges nothing.
            for c in &checks {
                let _ = limiter.peek_all(&[Check::new(c.cell, c.quota, c.cost)])[0];
            }
            let after_peek: Vec<u64> = cells.iter().map(|c| tat(&limiter, c)).collect();
            prop_assert_eq!(&after_peek, &before, "a peek wrote");

            let admitted = limiter.check_all_into(&checks, &mut out);
            prop_assert_eq!(admitted, conforms, "outcome at {:?}", step);
            prop_assert_eq!(
                out[..checks.len()].iter().all(|d| d.is_allowed()),
                admitted,
                "the decisions agree with the outcome: {:?}", &out[..checks.len()]
            );
            let after: Vec<u64> = cells.iter().map(|c| tat(&limiter, c)).collect();
            if admitted {
                model = next;
            }
            for i in 0..cells.len() {
                if !admitted {
                    prop_assert!(
                        same_state(after[i], before[i], now),
                        "refused, yet cell {} went from {} to {} (now {})", i, before[i], after[i], now
                    );
                }
                prop_assert!(
                    same_state(after[i], model[i], now),
                    "cell {}: store {} model {} (now {})", i, after[i], model[i], now
                );
                if admitted {
                    // Exactly cost * T (summed over its checks) beyond
                    // max(stored, now), where it was charged at all.
                    let charged: u64 = step
                        .stack
                        .iter()
                        .filter(|&&(j, _)| j == i)
                        .map(|&(_, cost)| u64::from(cost) * interval(&quotas[i]))
                        .sum();
                    if charged > 0 {
                        prop_assert_eq!(after[i], before[i].max(now) + charged);
                    } else {
                        prop_assert_eq!(after[i], before[i]);
                    }
                }
            }
        }
    }
}

/// Eight threads, each stacking a shared limit A (burst 1000) with its own
/// limit B_i (burst 100), and some single checks on A, with time frozen so
/// nothing refills: at the end every cell's TAT accounts for exactly the
/// costs of the admitted decisions that included it. No partial charge
/// survives a race, and no refund hands back more than its own charge.
#[test]
fn stacked_checks_under_contention_account_exactly() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 2_000;
    let clock = ManualClock::new();
    let limiter = Arc::new(Limiter::new(MemoryStore::default(), clock.clone()));
    let shared = Quota::per_second(10).with_burst(1_000);
    let own = Quota::per_second(10).with_burst(100);
    let a = limiter.cell_key(1, "shared");
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let limiter = limiter.clone();
            std::thread::spawn(move || {
                let b = limiter.cell_key(2, &t);
                // (units admitted on A, units admitted on B_t)
                let (mut on_a, mut on_b) = (0u64, 0u64);
                for r in 0..ROUNDS {
                    // Costs 1..=3 on A and 1..=4 on B: both run out, at
                    // different moments for different threads.
                    let cost_a = 1 + (r % 3) as u32;
                    let cost_b = 1 + ((r + t) % 4) as u32;
                    if r % 5 == 4 {
                        if limiter.check_all(&[Check::new(a, shared, 1)])[0].is_allowed() {
                            on_a += 1;
                        }
                        continue;
                    }
                    let mut out = [limiter.peek_all(&[Check::new(a, shared, 0)])[0]; 2];
                    let checks = [Check::new(a, shared, cost_a), Check::new(b, own, cost_b)];
                    let admitted = limiter.check_all_into(&checks, &mut out);
                    // Refused: the limit that refused says so; the other,
                    // charged nothing, may report room.
                    assert_eq!(admitted, out.iter().all(|d| d.is_allowed()), "{out:?}");
                    if admitted {
                        on_a += u64::from(cost_a);
                        on_b += u64::from(cost_b);
                    }
                }
                (b, on_a, on_b)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let now = clock.now();
    let t = interval(&shared);
    let units = |check: Check| (tat(&limiter, &check).saturating_sub(now)) / t;
    let total_a: u64 = results.iter().map(|r| r.1).sum();
    assert_eq!(
        units(Check::new(a, shared, 0)),
        total_a,
        "A's charges are the admitted ones"
    );
    assert!(total_a <= 1_000, "never past the burst: {total_a}");
    for (b, _, on_b) in &results {
        assert_eq!(
            units(Check::new(*b, own, 0)),
            *on_b,
            "B's charges are the admitted ones"
        );
        assert!(*on_b <= 100);
    }
    // The shared limit ran out (the single checks of cost 1 fill it to
    // the last unit or so): the threads did contend for it.
    assert!(total_a > 990, "A was used up: {total_a}");
}

#[test]
fn a_refund_hands_back_at_most_what_was_charged_and_never_before_now() {
    let clock = ManualClock::new();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let q = Quota::per_second(10).with_burst(10); // T = 100 ms
    let cell = limiter.cell_key(0, "k");
    let c = Check::new(cell, q, 0);
    let now = clock.now();
    let [charged] = limiter.check_all(&[Check::new(cell, q, 4)]);
    assert!(charged.is_allowed());
    assert_eq!(tat(&limiter, &c), now + 400_000_000);
    // Handing back 10 of a charge of 4 gives back the 4, and no more: the
    // cell is recovered, not in credit.
    limiter.refund(&Check::new(cell, q, 10), &charged, now);
    assert!(tat(&limiter, &c) <= now);
    assert_eq!(limiter.peek_all(&[Check::new(cell, q, 0)])[0].remaining(), 10);
    assert!(
        limiter.check_all(&[Check::new(cell, q, 10)])[0].is_allowed(),
        "the whole burst, once"
    );
    assert!(limiter.check_all(&[Check::new(cell, q, 1)])[0].is_denied());

    // An old charge: time has refilled part of it; the refund gives back
    // only what is still owed.
    limiter.refund(&Check::new(cell, q, 10), &charged, now);
    let charged_at = clock.now();
    let [charged] = limiter.check_all(&[Check::new(cell, q, 3)]);
    assert!(charged.is_allowed()); // owes 300 ms
    clock.advance(Duration::from_millis(250)); // 2.5 units refilled
    let now = clock.now();
    limiter.refund(&Check::new(cell, q, 3), &charged, charged_at);
    assert_eq!(tat(&limiter, &c).max(now), now, "nothing beyond what time refilled");
    assert_eq!(
        limiter.peek_all(&[Check::new(cell, q, 0)])[0].remaining(),
        10,
        "full, not 10.5"
    );
    assert!(limiter.check_all(&[Check::new(cell, q, 10)])[0].is_allowed());
    assert!(
        limiter.check_all(&[Check::new(cell, q, 1)])[0].is_denied(),
        "no credit left over"
    );

    // A partial refund of a charge moves the TAT back by exactly cost * T.
    clock.advance(Duration::from_secs(5));
    let now = clock.now();
    let [charged] = limiter.check_all(&[Check::new(cell, q, 6)]);
    assert!(charged.is_allowed());
    limiter.refund(&Check::new(cell, q, 2), &charged, now);
    assert_eq!(tat(&limiter, &c), now + 400_000_000);
    assert_eq!(limiter.peek_all(&[Check::new(cell, q, 0)])[0].remaining(), 6);
    // A refund of 0 changes nothing.
    limiter.refund(&Check::new(cell, q, 0), &charged, now);
    assert_eq!(tat(&limiter, &c), now + 400_000_000);
}

/// Issue 26, item 3: a refund of a charge that time has already repaid
/// gives nothing back, even when later charges put the cell in debt again.
#[test]
fn a_late_refund_hands_back_nothing_that_time_already_refilled() {
    let clock = ManualClock::new();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let q = Quota::per_second(10).with_burst(10); // T = 100 ms
    let cell = limiter.cell_key(0, "k");
    let charged_at = clock.now();
    let [charged] = limiter.check_all(&[Check::new(cell, q, 10)]);
    assert!(charged.is_allowed());
    clock.advance(Duration::from_secs(1)); // the charge is repaid
    assert!(
        limiter.check_all(&[Check::new(cell, q, 10)])[0].is_allowed(),
        "the refilled bucket"
    );
    limiter.refund(&Check::new(cell, q, 10), &charged, charged_at);
    assert!(
        limiter.check_all(&[Check::new(cell, q, 1)])[0].is_denied(),
        "the late refund handed back what time had refilled"
    );
}

/// Issue 26, item 2: an extra charge of a request placed on its group's
/// shared cell goes to that cell; when the cell has recovered and was swept
/// since (a slow stream outlived it), to where a check of the key would go
/// now: a request never escapes its cost.
#[test]
fn an_extra_charge_of_a_grouped_request_is_never_lost() {
    let clock = ManualClock::new();
    let store = MemoryStore::builder().new_keys_per_group(Quota::per_minute(1)).build();
    let limiter = Limiter::new(store, clock.clone());
    let q = Quota::per_hour(10); // T = 6 min
    let key = |i: u32| limiter.grouped_cell_key(0, &i, "net");
    assert!(limiter.check_all(&[Check::new(key(0), q, 1)])[0].is_allowed());
    let d = limiter.check_all(&[Check::new(key(1), q, 1)])[0];
    assert!(d.is_allowed() && d.is_grouped());
    limiter.charge(&Check::new(key(1), q, 4), &d);
    let next = limiter.check_all(&[Check::new(key(2), q, 1)])[0];
    assert!(next.is_grouped());
    assert_eq!(next.remaining(), 4, "10 - 5 - 1: the group cell paid the extra 4");
    // Two hours on, the group cell has recovered and is swept.
    clock.advance(Duration::from_secs(2 * 3600));
    limiter.store().sweep(clock.now());
    limiter.charge(&Check::new(key(1), q, 9), &d);
    let after = limiter.check_all(&[Check::new(key(1), q, 1)])[0];
    assert!(after.is_allowed());
    assert_eq!(after.remaining(), 0, "the 9 were charged where the key's checks go now");
}

#[test]
fn a_refund_for_a_key_without_a_cell_makes_none() {
    let limiter = Limiter::new(MemoryStore::with_max_keys(10), ManualClock::new());
    let q = Quota::per_minute(10);
    let charged = limiter.check(&"present", &q);
    assert!(charged.is_allowed());
    assert_eq!(limiter.store().len(), 1);
    // (An admitted decision placed on its own cell, as the absent key's
    // would have been.)
    let absent = Check::new(limiter.cell_key(ratelimit::DEFAULT_ROUTE, "absent"), q, 5);
    limiter.refund(&absent, &charged, limiter.clock().now());
    assert_eq!(limiter.store().len(), 1, "no cell made for a refund");
    assert_eq!(
        limiter.peek(&"absent", &q).remaining(),
        9,
        "and no credit: a fresh key's room"
    );
    // A peek makes none either.
    let _ = limiter.peek_all(&[Check::new(limiter.cell_key(ratelimit::DEFAULT_ROUTE, "another"), q, 3)])[0];
    assert_eq!(limiter.store().len(), 1);
}

#[test]
fn a_refund_of_an_overflowed_charge_goes_back_to_the_overflow_cell() {
    let clock = ManualClock::new();
    let store = MemoryStore::builder()
        .max_keys(1)
        .overflow(OverflowPolicy::SharedBucket)
        .build();
    let limiter = Limiter::new(store, clock.clone());
    let q = Quota::per_minute(10).with_burst(3);
    assert!(limiter.check(&"resident", &q).is_allowed());
    // The store is full of a live cell: new keys share the route's
    // overflow cell.
    let newcomer = limiter.cell_key(ratelimit::DEFAULT_ROUTE, "newcomer");
    let d = limiter.check_all(&[Check::new(newcomer, q, 3)])[0];
    assert!(d.is_allowed() && d.is_overflow());
    assert!(limiter.check(&"another", &q).is_denied(), "the overflow cell is spent");
    // With the charge's decision, the units go back where they were
    // charged; no cell of the newcomer's is made.
    limiter.refund(&Check::new(newcomer, q, 2), &d, clock.now());
    assert_eq!(limiter.store().len(), 1);
    let again = limiter.check(&"another", &q);
    assert!(
        again.is_allowed() && again.is_overflow(),
        "the overflow cell has room again"
    );
    assert!(limiter.check(&"another", &q).is_allowed());
    assert!(limiter.check(&"another", &q).is_denied(), "two handed back, not more");
    // A denied decision charged nothing and hands nothing back.
    let denied = limiter.check_all(&[Check::new(newcomer, q, 1)])[0];
    assert!(denied.is_denied());
    limiter.refund(&Check::new(newcomer, q, 3), &denied, clock.now());
    assert!(limiter.check(&"another", &q).is_denied());
    // The resident's own cell was not touched.
    assert_eq!(
        limiter.peek_all(&[Check::new(limiter.cell_key(ratelimit::DEFAULT_ROUTE, "resident"), q, 0)])[0].remaining(),
        2
    );
}

/// A stacked check whose first limit went to the overflow cell and whose
/// second refuses: all or nothing holds for the shared cell too.
#[test]
fn a_refused_stack_leaves_the_overflow_cell_uncharged() {
    let clock = ManualClock::new();
    let store = MemoryStore::builder()
        .max_keys(1)
        .overflow(OverflowPolicy::SharedBucket)
        .build();
    let limiter = Limiter::new(store, clock.clone());
    let q = Quota::per_minute(10).with_burst(3);
    let resident = limiter.cell_key(1, "resident");
    assert!(limiter.check_all(&[Check::new(resident, q, 3)])[0].is_allowed()); // live, spent
    let newcomer = limiter.cell_key(1, "newcomer");
    // The same cell twice: each look fits, the second charge does not.
    let checks = [Check::new(newcomer, q, 2), Check::new(newcomer, q, 2)];
    let [first, second] = limiter.check_all(&checks);
    assert!(first.is_allowed() && second.is_denied(), "{first:?} {second:?}");
    let d = limiter.check_all(&[Check::new(newcomer, q, 3)])[0];
    assert!(
        d.is_allowed() && d.is_overflow(),
        "the overflow cell was handed its 2 back"
    );
}

#[test]
fn peek_reports_what_check_would_decide() {
    let clock = ManualClock::new();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let q = Quota::per_second(10).with_burst(5);
    for cost in [0, 1, 3, 5, 6] {
        for _ in 0..3 {
            let p = limiter.peek_all(&[Check::new(limiter.cell_key(ratelimit::DEFAULT_ROUTE, "k"), q, cost)])[0];
            let d = limiter.check_n(&"k", &q, cost);
            assert_eq!(p, d, "cost {cost}");
        }
        clock.advance(Duration::from_millis(170));
    }
}
