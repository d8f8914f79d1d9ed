//! Hot and cold keys (`hot.rs`) and the outage policy, with in-memory
//! stores and a manual clock: the arithmetic; `tests/processes/fleet.rs`
//! measures the limit from outside.

use std::time::Duration;

use super::tests::{gate, to_next_epoch};
use super::*;
use crate::shared::defaults::OnOutage;
use crate::{Denial, Limiter, ManualClock, MemoryStore, Quota};

/// Adds `n` instances to the roster of the epoch at `clock` (as `n` other
/// instances joining would).
async fn join_roster(store: &MemoryFleetStore, g: &FleetGate, clock: &ManualClock, n: u64) {
    use crate::Clock;
    let epoch = g.window.epoch_of(g.window.locate(g.wall(clock.now())).slice);
    let join = SyncOp::Add {
        counter: ration::roster(epoch),
        slice: 0,
        delta: n,
        expire: true,
    };
    store.sync(&[join], Duration::from_secs(60)).await.unwrap();
}

/// One gate with `settings`, its limiter and store, a second into an
/// epoch after a round that read `live` instances in the roster (it and
/// `live - 1` others).
struct Among {
    clock: ManualClock,
    g: FleetGate,
    limiter: Limiter<MemoryStore, ManualClock>,
    store: MemoryFleetStore,
}

async fn among(settings: GateSettings, live: u64) -> Among {
    let clock = ManualClock::new();
    let g = FleetGate::new(settings, &clock).unwrap();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let store = MemoryFleetStore::new();
    to_next_epoch(&clock, Duration::from_millis(1_000));
    join_roster(&store, &g, &clock, live - 1).await;
    g.sync_once(&store, &clock).await.unwrap();
    assert_eq!(g.status().live_instances, live);
    Among {
        clock,
        g,
        limiter,
        store,
    }
}

/// The unit tests' settings (a 10 s window).
fn settings() -> GateSettings {
    GateSettings::new(b"unit test fleet secret, 32 bytes").with_window(Duration::from_secs(10))
}

/// What the store holds of `key` on route 1 in the epoch at `clock`.
fn stored(store: &MemoryFleetStore, g: &FleetGate, clock: &ManualClock, key: &str) -> u64 {
    use crate::Clock;
    let epoch = g.window.epoch_of(g.window.locate(g.wall(clock.now())).slice);
    let counter = Counter {
        route: 1,
        key: g.fleet_id(1, key),
        epoch,
    };
    (0..25).map(|i| store.total(counter, i)).sum()
}

/// A thousand keys that never reach their share cost the store nothing but
/// the round's fixed operations (the roster and the hot list); a key that
/// reaches its share on one instance turns hot there, pushes what it used
/// while cold, and the other instance, once it has read the mark, sees it:
/// together they admit no more than the budget.
#[tokio::test]
async fn cold_keys_cost_the_store_nothing_and_a_key_at_its_share_turns_hot() {
    let clock = ManualClock::new();
    let (a, b) = (gate(&clock), gate(&clock));
    let (la, lb) = (
        Limiter::new(MemoryStore::default(), clock.clone()),
        Limiter::new(MemoryStore::default(), clock.clone()),
    );
    let store = MemoryFleetStore::new();
    let q = Quota::per_minute(600).with_burst(1000); // 100 per window
    to_next_epoch(&clock, Duration::from_millis(1_000));
    for g in [&a, &b, &a] {
        g.sync_once(&store, &clock).await.unwrap();
    }
    assert_eq!(a.status().live_instances, 2);
    for i in 0..1000u32 {
        assert!(a.check(&la, 1, &i, &q, 1).is_allowed());
    }
    clock.advance(Duration::from_millis(100));
    let report = a.sync_once(&store, &clock).await.unwrap();
    assert_eq!(
        (report.cold_keys, report.hot_keys, report.pushed),
        (1000, 0, 0),
        "{report:?}"
    );
    // The roster's two reads and the hot list's two: nothing per key.
    assert_eq!(report.operations, 4, "{report:?}");

    // "k" on A: held to its share (50 of 100), then refused by the fleet.
    let on_a = (0..80).filter(|_| a.check(&la, 1, "k", &q, 1).is_allowed()).count();
    assert_eq!(on_a, 50);
    assert_eq!(a.check(&la, 1, "k", &q, 1).denial(), Some(Denial::FleetLimited));
    clock.advance(Duration::from_millis(100));
    let report = a.sync_once(&store, &clock).await.unwrap();
    assert_eq!(report.hot_keys, 1, "{report:?}");
    assert_eq!(
        stored(&store, &a, &clock, "k"),
        50,
        "what A used while cold is in the store"
    );
    // B used "k" while it was cold there: 30, within its share.
    let mut on_b = (0..30).filter(|_| b.check(&lb, 1, "k", &q, 1).is_allowed()).count();
    assert_eq!(on_b, 30);
    // B's next round reads A's mark, the one after pushes B's 30 and reads.
    for _ in 0..2 {
        clock.advance(Duration::from_millis(100));
        b.sync_once(&store, &clock).await.unwrap();
    }
    assert_eq!(stored(&store, &a, &clock, "k"), 80);
    // Rounds go on; both keep asking for more. Together they never pass the
    // budget in the window.
    let mut total = on_a + on_b;
    for _ in 0..20 {
        clock.advance(Duration::from_millis(100));
        a.sync_once(&store, &clock).await.unwrap();
        b.sync_once(&store, &clock).await.unwrap();
        total += (0..5).filter(|_| a.check(&la, 1, "k", &q, 1).is_allowed()).count();
        let more = (0..5).filter(|_| b.check(&lb, 1, "k", &q, 1).is_allowed()).count();
        on_b += more;
        total += more;
    }
    // The budget, plus what one instance admits in one round before the
    // other sees it (5 here: the staleness term of docs/global.md).
    assert!(total <= 105, "{total} admitted in one window of a budget of 100");
    assert!(total >= 95, "only {total} of 100 admitted: the hot key lost its budget");
    assert!(on_b > 30, "B never got more than its cold share once it read the key");
}

/// A flood of new keys fills what the tables hold for cold keys on both
/// instances; a key that turns hot afterwards still holds the fleet budget
/// (it escaped it before: each instance limited it locally only, 201 of
/// 100 measured from outside) and still gets it: untracked, it is counted
/// in the sketch and held to its share, then claims a slot from the
/// reserve, turns hot and gets what the fleet has left.
#[tokio::test]
async fn a_key_that_turns_hot_after_a_flood_of_new_keys_holds_the_fleet_budget() {
    let clock = ManualClock::new();
    let settings = || settings().with_max_keys(16);
    let (a, b) = (
        FleetGate::new(settings(), &clock).unwrap(),
        FleetGate::new(settings(), &clock).unwrap(),
    );
    let (la, lb) = (
        Limiter::new(MemoryStore::default(), clock.clone()),
        Limiter::new(MemoryStore::default(), clock.clone()),
    );
    let store = MemoryFleetStore::new();
    let q = Quota::per_minute(600).with_burst(1000); // 100 per window
    to_next_epoch(&clock, Duration::from_millis(1_000));
    for g in [&a, &b, &a] {
        g.sync_once(&store, &clock).await.unwrap();
    }
    assert_eq!(a.status().live_instances, 2);
    // The flood: 1,000 new keys on each, a request each.
    for i in 0..1000u32 {
        assert!(a.check(&la, 1, &i, &q, 1).is_allowed());
        assert!(b.check(&lb, 1, &(i + 1000), &q, 1).is_allowed());
    }
    let untracked = a.status().untracked;
    assert!(untracked >= 1000 - 16, "{untracked} of the flood untracked on A");
    clock.advance(Duration::from_millis(100));
    let report = a.sync_once(&store, &clock).await.unwrap();
    assert!(report.keys <= 16, "a round visits the tracked keys only: {report:?}");
    b.sync_once(&store, &clock).await.unwrap();
    // "k" on both, both asking for more than the budget, over one window.
    let (mut on_a, mut on_b) = (0, 0);
    for _ in 0..100 {
        on_a += (0..5).filter(|_| a.check(&la, 1, "k", &q, 1).is_allowed()).count();
        on_b += (0..5).filter(|_| b.check(&lb, 1, "k", &q, 1).is_allowed()).count();
        clock.advance(Duration::from_millis(100));
        a.sync_once(&store, &clock).await.unwrap();
        b.sync_once(&store, &clock).await.unwrap();
        if on_a + on_b >= 100 {
            break;
        }
    }
    let total = on_a + on_b;
    assert!(
        total <= 105,
        "{total} admitted ({on_a} + {on_b}) in one window of a budget of 100"
    );
    assert!(total >= 90, "only {total} of 100 admitted: the key lost its budget");
    let hot = (a.status().hot_keys, b.status().hot_keys);
    assert!(hot.0 >= 1 && hot.1 >= 1, "the key turned hot on both: {hot:?}");
}

/// A key the fleet marked hot claims a slot on an instance whose table is
/// closed to cold keys, on its first request there: it is pushed and read
/// from that instance's next round, not held to its share by the sketch
/// while what it used elsewhere is in the store.
#[tokio::test]
async fn a_key_hot_elsewhere_takes_a_slot_from_the_reserve() {
    let Among {
        clock,
        g,
        limiter,
        store,
    } = among(settings().with_max_keys(16), 2).await;
    let q = Quota::per_minute(600).with_burst(1000);
    for i in 0..200u32 {
        g.check(&limiter, 1, &i, &q, 1);
    }
    let id = g.fleet_id(1, "k");
    fn table<'g>(g: &'g FleetGate, clock: &ManualClock) -> &'g table::Table {
        use crate::Clock;
        let epoch = g.window.epoch_of(g.window.locate(g.wall(clock.now())).slice);
        &g.tables[(epoch % 3) as usize]
    }
    assert!(!table(&g, &clock).open_to_cold());
    // Another instance marks "k" hot; this one reads the mark.
    g.mark_hot(&store, &clock, &[id]).await.unwrap();
    clock.advance(Duration::from_millis(100));
    g.sync_once(&store, &clock).await.unwrap();
    assert!(g.check(&limiter, 1, "k", &q, 1).is_allowed());
    assert!(
        table(&g, &clock).find(id | ids::NONZERO).is_some(),
        "no slot for a key hot in the fleet"
    );
    // A cold key still gets none.
    assert!(g.check(&limiter, 1, "cold", &q, 1).is_allowed());
    assert!(table(&g, &clock).find(g.fleet_id(1, "cold") | ids::NONZERO).is_none());
}

/// A key that turns hot while a flood fills the tables, on four instances
/// in turn (each below its share in the first epoch, so each counts it in
/// its sketch only), keeps the fleet budget across the epoch boundary: an
/// instance that refuses it with no slot claims one and turns it hot, so
/// what it counted reaches the fleet's count. (Before, the instances that
/// read the key hot in the store admitted 140 in a window: the others'
/// sketch units never reached it.)
#[tokio::test]
async fn a_hot_key_keeps_the_budget_across_epochs_while_a_flood_fills_the_tables() {
    use crate::Clock;
    let clock = ManualClock::new();
    let settings = || settings().with_max_keys(64);
    let gates: Vec<FleetGate> = (0..4).map(|_| FleetGate::new(settings(), &clock).unwrap()).collect();
    let limiters: Vec<_> = (0..4)
        .map(|_| Limiter::new(MemoryStore::default(), clock.clone()))
        .collect();
    let store = MemoryFleetStore::new();
    let q = Quota::per_minute(600).with_burst(1000); // 100 per window
    to_next_epoch(&clock, Duration::from_millis(9_700));
    for _ in 0..2 {
        for g in &gates {
            g.sync_once(&store, &clock).await.unwrap();
        }
    }
    clock.advance(Duration::from_millis(300));
    let start = clock.now();
    let (mut admitted, mut flood, mut turn) = (Vec::new(), 0u32, 0usize);
    // 30 s: the key once a second from 0.5 s, twice its budget from 5.3 s,
    // round robin; 10 new keys a round on each instance (the first
    // instance's table still takes the key at 0.5 s, the others' no longer
    // do), and keys that come back once a second.
    for round in 0..300u64 {
        for (g, l) in gates.iter().zip(&limiters) {
            for _ in 0..10 {
                flood += 1;
                g.check(l, 2, &flood, &q, 1);
            }
            // Keys that come back: once a second each.
            for c in 0..20 {
                g.check(l, 3, &(c + 100 * (round % 10)), &q, 1);
            }
        }
        for half in 0..2u64 {
            let t = round * 100 + half * 50;
            if t >= 5_300 || (t >= 500 && t % 1_000 == 500) {
                let i = turn % 4;
                turn += 1;
                if gates[i].check(&limiters[i], 1, "k", &q, 1).is_allowed() {
                    admitted.push(clock.now() - start);
                }
            }
            clock.advance(Duration::from_millis(50 - 10 * half));
        }
        for g in &gates {
            g.sync_once(&store, &clock).await.unwrap();
        }
        clock.advance(Duration::from_millis(10));
    }
    assert!(
        gates.iter().all(|g| g.status().untracked > 0),
        "the flood filled the tables"
    );
    let w = 10_000_000_000u64;
    let busiest = admitted
        .iter()
        .map(|&t| admitted.iter().filter(|&&u| u >= t && u < t + w).count())
        .max()
        .unwrap_or(0);
    assert!(busiest <= 105, "busiest window {busiest} of a budget of 100");
    assert!(busiest >= 90, "busiest window {busiest}: the key lost its budget");
}

/// The sketch's error cannot refuse an honest key: with the tables full of
/// a flood's keys, each new key that sends a few requests is still
/// admitted (its two counters are shared with a few flood keys at most).
#[test]
fn untracked_honest_keys_are_not_refused_by_the_sketch() {
    let clock = ManualClock::new();
    let g = FleetGate::new(settings().with_max_keys(1024), &clock).unwrap();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let q = Quota::per_minute(600).with_burst(1000);
    // 20,000 flood keys (the cold part holds 1,024), then 2,000 keys that
    // send 10 requests each, within their budget of 100.
    for i in 0..20_000u32 {
        g.check(&limiter, 1, &i, &q, 1);
    }
    let refused = (0..2_000u32)
        .map(|i| (0..10).filter(|_| g.check(&limiter, 2, &i, &q, 1).is_denied()).count())
        .sum::<usize>();
    assert_eq!(refused, 0, "honest untracked keys refused by the sketch's error");
}

/// A key whose share is below one request (more live instances than units
/// in the budget) gets one request per window while cold (an empty window
/// always fits one), then the fleet's refusal turns it hot, and it gets the
/// budget the fleet has left.
#[tokio::test]
async fn a_key_whose_share_is_below_one_request_still_turns_hot() {
    let Among {
        clock,
        g,
        limiter,
        store,
    } = among(settings(), 20).await;
    let q = Quota::per_minute(60).with_burst(100); // 10 per window
    assert!(g.check(&limiter, 1, "k", &q, 1).is_allowed());
    assert_eq!(g.check(&limiter, 1, "k", &q, 1).denial(), Some(Denial::FleetLimited));
    let mut admitted = 1;
    for _ in 0..6 {
        clock.advance(Duration::from_millis(100));
        g.sync_once(&store, &clock).await.unwrap();
        admitted += (0..3).filter(|_| g.check(&limiter, 1, "k", &q, 1).is_allowed()).count();
    }
    assert_eq!(g.status().hot_keys, 1);
    assert!(admitted >= 9, "a hot key read by its instance got {admitted} of 10");
    assert!(admitted <= 10, "{admitted} of 10");
}

/// A store that is down.
struct Down;

impl FleetStore for Down {
    async fn sync(&self, _: &[SyncOp], _: Duration) -> Result<Vec<OpResult>, FleetError> {
        Err(FleetError::unsent("redis: connection refused"))
    }
}

/// With `on_outage = "share"`, a key is held to its last known share while
/// the store is down (4 live instances: a quarter of the burst at once);
/// with `"local"` it gets the local limit, as before.
#[tokio::test]
async fn on_outage_share_holds_each_key_to_its_last_known_share() {
    for (policy, expected) in [(OnOutage::Local, 100), (OnOutage::Share, 25)] {
        let Among { clock, g, limiter, .. } = among(settings().with_on_outage(policy), 4).await;
        clock.advance(Duration::from_millis(100));
        assert!(g.sync_once(&Down, &clock).await.is_err());
        assert_eq!(g.health(), FleetHealth::LocalOnly);
        let q = Quota::per_minute(600).with_burst(100);
        let admitted = (0..200)
            .filter(|_| g.check(&limiter, 1, "k", &q, 1).is_allowed())
            .count();
        assert_eq!(admitted, expected, "{policy:?}");
        // And at the rate: a quarter of it with "share".
        clock.advance(Duration::from_secs(4));
        let later = (0..200)
            .filter(|_| g.check(&limiter, 1, "k", &q, 1).is_allowed())
            .count();
        assert_eq!(later, expected * 40 / 100, "{policy:?}");
    }
}

/// A charge after the decision (a response's size settled after it was
/// sent) can take a cold key past its share without any refusal: it turns
/// the key hot like a refusal does, so the fleet sees those units (they
/// were left on this instance, and another one admitted its own share on
/// top of them).
#[tokio::test]
async fn a_settled_charge_past_the_share_turns_the_key_hot() {
    use crate::Check;
    let Among {
        clock,
        g,
        limiter,
        store,
    } = among(settings(), 2).await;
    let q = Quota::per_minute(60).with_burst(100); // 10 per window
    let request = FleetCheck::new(Check::new(limiter.cell_key(1, "k"), q, 1), 1, g.fleet_id(1, "k"));
    let d = g.check_id(&limiter, &request);
    assert!(d.is_allowed());
    g.charge_more_id(&limiter, &request.with_cost(7), &d);
    clock.advance(Duration::from_millis(100));
    let report = g.sync_once(&store, &clock).await.unwrap();
    assert_eq!(report.hot_keys, 1, "{report:?}");
    assert_eq!(
        stored(&store, &g, &clock, "k"),
        8,
        "the settled units reached the store"
    );
}

/// A store that never answers: a round against it waits until cancelled.
struct Hangs;

impl FleetStore for Hangs {
    async fn sync(&self, _: &[SyncOp], _: Duration) -> Result<Vec<OpResult>, FleetError> {
        std::future::pending().await
    }
}

/// A round cancelled at its await (its timeout, a shutdown) hands its cold
/// keys' units back, and the next round keeps them: the key's window still
/// counts them once its slot's words hold newer slices. Before, they were
/// neither kept nor in the slot, and a lone instance admitted the whole
/// budget again.
#[tokio::test]
async fn a_cancelled_round_hands_its_cold_keys_units_back() {
    let Among {
        clock,
        g,
        limiter,
        store,
    } = among(settings(), 1).await;
    // The fleet budget is 100 per 10 s; the local burst never limits.
    let q = Quota::per_minute(600).with_burst(1_000);
    for _ in 0..30 {
        assert!(g.check(&limiter, 1, "cold", &q, 1).is_allowed());
    }
    let cancelled = tokio::time::timeout(Duration::from_millis(20), g.sync_once(&Hangs, &clock)).await;
    assert!(cancelled.is_err(), "the round against a silent store was cancelled");
    // Three slices on (a slot's words hold two), a round a slice.
    for _ in 0..3 {
        clock.advance(Duration::from_millis(400));
        g.sync_once(&store, &clock).await.unwrap();
    }
    let mut more = 0;
    let refused = loop {
        let d = g.check(&limiter, 1, "cold", &q, 1);
        if d.is_denied() {
            break d;
        }
        more += 1;
        assert!(more <= 100, "admitted past the budget");
    };
    assert_eq!(refused.denial(), Some(Denial::FleetLimited));
    assert_eq!(more, 70, "the 30 units of the cancelled round still count");
}

/// A store that refuses writes still answers reads: the instances' joins
/// are refused, and once the epoch of their last joins is over the roster
/// reads empty. The live count is the last one an instance was counted in,
/// not one, so `on_outage = "share"` still holds each key to a quarter;
/// and after the outage it is lowered only once the roster holds a whole
/// epoch of joins again.
#[tokio::test]
async fn a_roster_this_instance_could_not_join_keeps_the_last_count() {
    let Among { clock, g, store, .. } = among(settings(), 4).await;
    store.fail_writes(Some("READONLY You can't write against a read only replica."));
    for _ in 0..3 {
        to_next_epoch(&clock, Duration::from_millis(1_000));
        let _ = g.sync_once(&store, &clock).await;
        assert_eq!(g.status().live_instances, 4, "the roster was read empty");
    }
    // Writes again. The epoch before holds no joins (the others' first
    // rounds of this epoch may not have run yet): not a view of the fleet.
    store.fail_writes(None);
    to_next_epoch(&clock, Duration::from_millis(1_000));
    g.sync_once(&store, &clock).await.unwrap();
    assert_eq!(g.status().live_instances, 4, "alone in a roster of one epoch");
    // A whole epoch of joins: alone, as it is.
    to_next_epoch(&clock, Duration::from_millis(1_000));
    g.sync_once(&store, &clock).await.unwrap();
    assert_eq!(g.status().live_instances, 1, "alone in the roster of two epochs");
}

/// An instance that starts while the store refuses writes takes the
/// others' earlier joins rather than counting itself alone (it holds cold
/// keys to a quarter, not to the whole budget); and a roster that lost this
/// instance's join (a failover to a replica that had not seen it, a flush)
/// does not lower the count: the instance joins again.
#[tokio::test]
async fn a_roster_read_without_this_instance_never_lowers_the_count() {
    let clock = ManualClock::new();
    let store = MemoryFleetStore::new();
    to_next_epoch(&clock, Duration::from_millis(1_000));
    let g = FleetGate::new(settings(), &clock).unwrap();
    join_roster(&store, &g, &clock, 3).await;
    store.fail_writes(Some("OOM command not allowed when used memory > 'maxmemory'."));
    let _ = g.sync_once(&store, &clock).await;
    assert_eq!(
        g.status().live_instances,
        4,
        "the others' joins, read while its own was refused"
    );

    // Lost: a store that never saw the joins (as after a failover).
    let Among { clock, g, .. } = among(settings(), 4).await;
    let lost = MemoryFleetStore::new();
    clock.advance(Duration::from_millis(100));
    g.sync_once(&lost, &clock).await.unwrap();
    assert_eq!(g.status().live_instances, 4, "a roster without its own join");
    clock.advance(Duration::from_millis(100));
    g.sync_once(&lost, &clock).await.unwrap();
    assert_eq!(
        lost.total(
            ration::roster(
                g.window
                    .epoch_of(g.window.locate(g.wall(crate::Clock::now(&clock))).slice)
            ),
            0
        ),
        1,
        "joined again"
    );
    assert_eq!(g.status().live_instances, 4);
}
