//! The fleet-wide gate: several instances (separate limiters, gates and
//! stores) sharing one counter store, driven by a manual clock so every run
//! is the same; first in memory, then against real `redis-server` processes
//! (a single server and a 3-master cluster), then faults with the real sync
//! loop: the server paused, killed and restarted, a key holding garbage.

use crate::support::redis as redis_support;

use std::time::{Duration, Instant};

use ratelimit::fleet::{FleetGate, FleetHealth, FleetStore, GateSettings, MemoryFleetStore, RedisSettings, RedisStore};
use ratelimit::{Limiter, ManualClock, MemoryStore, Quota, SystemClock};
use redis_support::{RedisCluster, RedisServer};

const SECRET: &[u8] = b"fleet secret for the tests, 32 B";
const ROUTE: u32 = 7;
const KEY: &str = "user-42";
const WINDOW: Duration = Duration::from_secs(10);
const SYNC: Duration = Duration::from_millis(100);

/// 600/min = 10/s locally, burst 10; fleet budget 100 per 10 s window.
fn quota() -> Quota {
    Quota::per_minute(600).with_burst(10)
}

fn settings() -> GateSettings {
    GateSettings::new(SECRET)
        .with_window(WINDOW)
        .with_sync_interval(SYNC)
        .with_max_keys(1000)
}

/// The documented worst case: budget + (N - 1) * (b + r * S).
fn bound(n: usize) -> u64 {
    100 + (n as u64 - 1) * (10 + 1)
}

struct Fleet<G> {
    clock: ManualClock,
    instances: Vec<(Limiter<MemoryStore, ManualClock>, FleetGate, G)>,
}

impl<G: FleetStore> Fleet<G> {
    fn new(stores: Vec<G>) -> Self {
        let clock = ManualClock::new();
        let instances = stores
            .into_iter()
            .map(|store| {
                let limiter = Limiter::new(MemoryStore::default(), clock.clone());
                let gate = FleetGate::new(settings(), &clock).unwrap();
                (limiter, gate, store)
            })
            .collect();
        Fleet { clock, instances }
    }

    /// Runs `seconds` of traffic: each instance offers `rate` requests per
    /// second on one key (evenly, phases staggered) and syncs every 100 ms
    /// (staggered). Returns the admission times, in 10 ms steps.
    async fn run(&self, seconds: u64, rate: f64, key: &str) -> Vec<u64> {
        const STEP_MS: u64 = 10;
        let steps = seconds * 1000 / STEP_MS;
        let n = self.instances.len();
        let mut credit: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
        let mut admitted = Vec::new();
        for step in 0..steps {
            self.clock.advance(Duration::from_millis(STEP_MS));
            for (i, (limiter, gate, store)) in self.instances.iter().enumerate() {
                credit[i] += rate * STEP_MS as f64 / 1000.0;
                while credit[i] >= 1.0 {
                    credit[i] -= 1.0;
                    if gate.check(limiter, ROUTE, key, &quota(), 1).is_allowed() {
                        admitted.push(step);
                    }
                }
                let phase = (i as u64 * 10 / n as u64) % 10;
                if step % 10 == phase {
                    gate.sync_once(store, &self.clock).await.unwrap();
                }
            }
        }
        admitted
    }
}

/// The most admitted in any window of 10 s (sliding by 10 ms steps), after
/// the first window.
fn max_per_window(admitted: &[u64], steps: u64) -> u64 {
    let w = 1000; // 10 s in 10 ms steps
    (w..=steps)
        .map(|end| admitted.iter().filter(|&&t| t >= end - w && t < end).count() as u64)
        .max()
        .unwrap_or(0)
}

async fn fleet_holds<G: FleetStore>(stores: Vec<G>) -> u64 {
    let n = stores.len();
    let fleet = Fleet::new(stores);
    // Together 2x the budget: 20/s against 100 per 10 s.
    let admitted = fleet.run(40, 20.0 / n as f64, KEY).await;
    let worst = max_per_window(&admitted, 4000);
    assert!(
        worst <= bound(n),
        "{n} instances admitted {worst} in a window; bound {}",
        bound(n)
    );
    // And the fleet is not starved either.
    assert!(worst >= 90, "{n} instances admitted only {worst} in the busiest window");
    worst
}

async fn lone_instance_gets_the_budget<G: FleetStore>(store: G) -> u64 {
    let fleet = Fleet::new(vec![store]);
    let admitted = fleet.run(40, 20.0, "user-lone").await;
    // Every full window after the first: at least 90% of the budget.
    let w = 1000;
    let least = (w..=4000)
        .step_by(100)
        .map(|end| admitted.iter().filter(|&&t| t >= end - w && t < end).count() as u64)
        .min()
        .unwrap_or(0);
    assert!(least >= 90, "a lone instance got only {least} of 100 in a window");
    least
}

#[tokio::test]
async fn in_memory_four_instances_stay_within_the_bound_and_one_gets_its_budget() {
    let store = MemoryFleetStore::new();
    let worst = fleet_holds(vec![store.clone(), store.clone(), store.clone(), store.clone()]).await;
    let least = lone_instance_gets_the_budget(MemoryFleetStore::new()).await;
    println!(
        "in memory: 4 instances, busiest window {worst} (bound {}); lone instance, leanest window {least}",
        bound(4)
    );
}

#[tokio::test]
async fn eight_instances_in_memory() {
    let store = MemoryFleetStore::new();
    fleet_holds(vec![store; 8]).await;
}

fn redis_store(url: &str, cluster: bool) -> RedisStore {
    RedisStore::new(
        url,
        RedisSettings::default()
            .with_cluster(cluster)
            .with_prefix("rl".to_owned()),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_four_instances_stay_within_the_bound_and_keys_are_clean() {
    let server = RedisServer::start();
    let stores = (0..4).map(|_| redis_store(&server.url(), false)).collect();
    let worst = fleet_holds(stores).await;
    let least = lone_instance_gets_the_budget(redis_store(&server.url(), false)).await;
    println!(
        "redis: 4 instances, busiest window {worst} (bound {}); lone instance {least}",
        bound(4)
    );
    hygiene(&server.keys(), |k| {
        server.cli(&["PTTL", k]).trim().parse().unwrap_or(-3)
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_four_instances_stay_within_the_bound() {
    let cluster = RedisCluster::start();
    let stores = (0..4).map(|_| redis_store(&cluster.url(), true)).collect();
    let worst = fleet_holds(stores).await;
    println!(
        "redis cluster: 4 instances, busiest window {worst} (bound {})",
        bound(4)
    );
    let keys = cluster.keys();
    hygiene(&keys, |k| cluster.ttl(k));
    // Keys of one shard share a hash tag (the shard alone), so a pipeline
    // never crosses slots, whatever routes it carries.
    assert!(keys.iter().all(|k| k.starts_with("{rl:")));

    // Several routes and many keys in one round.
    let store = redis_store(&cluster.url(), true);
    let clock = ManualClock::new();
    let gate = FleetGate::new(settings(), &clock).unwrap();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let ids: Vec<u64> = (1..=5u32)
        .flat_map(|route| (0..40u32).map(move |k| (route, k)))
        .map(|(route, k)| gate.fleet_id(route, &k))
        .collect();
    gate.mark_hot(&store, &clock, &ids).await.unwrap();
    gate.sync_once(&store, &clock).await.unwrap();
    for route in 1..=5u32 {
        for k in 0..40u32 {
            assert!(gate.check(&limiter, route, &k, &quota(), 1).is_allowed());
        }
    }
    let report = gate
        .sync_once(&store, &clock)
        .await
        .expect("a multi-route round on the cluster");
    assert_eq!((report.keys, report.pushed), (200, 200));
    // The hot keys' counters spread over the masters: a round's pipelines
    // go to every one of them, not to one.
    let epoch = ratelimit::fleet::SlidingWindow::new(WINDOW, 20)
        .unwrap()
        .epoch(ratelimit::Clock::wall_nanos(&clock));
    let counters: std::collections::HashSet<String> = (1..=5u32)
        .flat_map(|route| (0..40u32).map(move |k| (route, k)))
        .map(|(route, k)| store.key(route, gate.fleet_id(route, &k), epoch))
        .collect();
    let per_master: Vec<usize> = cluster
        .nodes
        .iter()
        .map(|n| n.keys().iter().filter(|k| counters.contains(*k)).count())
        .collect();
    println!("the 200 hot keys' counters per master: {per_master:?}");
    assert_eq!(per_master.iter().sum::<usize>(), 200, "{per_master:?}");
    assert!(
        per_master.iter().all(|&n| n > 0),
        "every master holds some of the hot keys' counters: {per_master:?}"
    );

    // A key holding garbage on the cluster: the round still succeeds.
    let bad = store.key(1, gate.fleet_id(1, &7u32), epoch);
    let out = std::process::Command::new("redis-cli")
        .args(["-c", "-p", &cluster.nodes[0].port.to_string(), "SET", &bad, "garbage"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK"));
    assert!(gate.check(&limiter, 1, &7u32, &quota(), 1).is_allowed());
    assert!(gate.check(&limiter, 2, &7u32, &quota(), 1).is_allowed());
    let report = gate.sync_once(&store, &clock).await;
    assert!(report.is_ok(), "a garbage key failed the cluster round: {report:?}");
}

/// No key holds a raw client value; every key has a TTL; the shape is
/// `{prefix:route:shard}:fleet-id:epoch`.
fn hygiene(keys: &[String], ttl_ms: impl Fn(&str) -> i64) {
    assert!(!keys.is_empty(), "the fleet test wrote no keys");
    for k in keys {
        assert!(!k.contains(KEY) && !k.contains("user"), "raw client value in {k}");
        // A key's counters, the roster of live instances (one count), or
        // the list of hot keys (fleet ids).
        assert!(
            k.starts_with("{rl:")
                && (k.contains(&format!("}}:{ROUTE:08x}:"))
                    || k.starts_with("{rl:0}:instances:")
                    || k.starts_with("{rl:0}:hot:")),
            "unexpected key {k}"
        );
        let ttl = ttl_ms(k);
        assert!(ttl > 0, "key {k} has no TTL ({ttl})");
        assert!(ttl <= 30_000, "key {k} lives {ttl} ms, more than 3 windows");
    }
}

/// A gate with the real sync loop and the system clock, on a 2 s window.
fn live_gate(url: &str) -> (std::sync::Arc<FleetGate>, Limiter<MemoryStore, SystemClock>) {
    let clock = SystemClock::default();
    let settings = settings()
        .with_window(Duration::from_secs(2))
        .with_sync_interval(Duration::from_millis(50))
        .with_max_backoff(Duration::from_millis(200));
    let gate = std::sync::Arc::new(FleetGate::new(settings, &clock).unwrap());
    let store = RedisStore::new(
        url,
        RedisSettings::default()
            .with_response_timeout(Duration::from_millis(100))
            .with_connect_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    // A round: a connection attempt (2 x 200 ms at most), then the replies.
    gate.spawn_sync(store, clock.clone(), Duration::from_millis(500));
    (gate, Limiter::new(MemoryStore::default(), clock))
}

async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Requests are decided at once whatever Redis does: the slowest of 200.
fn slowest_decision(gate: &FleetGate, limiter: &Limiter<MemoryStore, SystemClock>) -> Duration {
    let q = Quota::per_second(1000);
    (0..200)
        .map(|i| {
            let start = Instant::now();
            let _ = gate.check(limiter, ROUTE, &i, &q, 1);
            start.elapsed()
        })
        .max()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_degrades_to_local_and_recovers() {
    let server = RedisServer::start();
    let (gate, limiter) = live_gate(&server.url());
    wait_for("first successful round", Duration::from_secs(5), || {
        gate.status().rounds >= 2
    })
    .await;
    assert!(!gate.status().degraded);

    server.pause();
    wait_for("the gate notices", Duration::from_secs(5), || gate.status().degraded).await;
    // Still deciding, locally and at once, while Redis is frozen for many
    // sync intervals.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(600) {
        assert!(slowest_decision(&gate, &limiter) < Duration::from_millis(200));
        assert!(gate
            .check(&limiter, ROUTE, "during", &Quota::per_second(1000), 1)
            .is_allowed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gate.status().degraded);
    let failures = gate.status().failures;
    assert!(failures >= 1);

    server.resume();
    wait_for("recovery after SIGCONT", Duration::from_secs(10), || {
        !gate.status().degraded
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_degrades_to_local_and_a_restart_recovers() {
    let mut server = RedisServer::start();
    let (gate, limiter) = live_gate(&server.url());
    wait_for("first successful round", Duration::from_secs(5), || {
        gate.status().rounds >= 2
    })
    .await;
    assert!(gate.check(&limiter, ROUTE, KEY, &quota(), 1).is_allowed());

    server.kill();
    wait_for("the gate notices", Duration::from_secs(5), || gate.status().degraded).await;
    assert!(slowest_decision(&gate, &limiter) < Duration::from_millis(200));
    assert!(gate.check(&limiter, ROUTE, "while-down", &quota(), 1).is_allowed());

    server.restart();
    wait_for("recovery after restart", Duration::from_secs(15), || {
        !gate.status().degraded
    })
    .await;
    // Deltas from during the outage reach the new server.
    wait_for("keys written again", Duration::from_secs(5), || {
        !server.keys().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holding_garbage_is_skipped_without_failing_the_round() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), false);
    let clock = ManualClock::new();
    let gate = FleetGate::new(settings(), &clock).unwrap();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let q = quota();
    // Hot keys (cold ones never reach Redis): marked, and the mark read.
    let ids = [gate.fleet_id(ROUTE, "good"), gate.fleet_id(ROUTE, KEY)];
    gate.mark_hot(&store, &clock, &ids).await.unwrap();
    gate.sync_once(&store, &clock).await.unwrap();
    assert!(gate.check(&limiter, ROUTE, "good", &q, 1).is_allowed());
    assert!(gate.check(&limiter, ROUTE, KEY, &q, 1).is_allowed());
    gate.sync_once(&store, &clock).await.unwrap();

    // Someone writes garbage into this key's counter.
    let epoch = ratelimit::fleet::SlidingWindow::new(WINDOW, 20)
        .unwrap()
        .epoch(ratelimit::Clock::wall_nanos(&clock));
    let bad = store.key(ROUTE, gate.fleet_id(ROUTE, KEY), epoch);
    assert_eq!(server.cli(&["SET", &bad, "not a number"]).trim(), "OK");

    assert!(gate.check(&limiter, ROUTE, KEY, &q, 1).is_allowed());
    assert!(gate.check(&limiter, ROUTE, "good", &q, 1).is_allowed());
    let report = gate.sync_once(&store, &clock).await.expect("the round still succeeds");
    assert!(report.failed_keys >= 1, "{report:?}");
    assert_eq!(report.pushed, 1, "the good key's delta went through: {report:?}");
    assert!(!gate.status().degraded, "one bad key does not degrade the gate");
    assert_eq!(
        gate.health(),
        ratelimit::fleet::FleetHealth::Partial { local_only_keys: 1 },
        "the bad key alone is limited locally"
    );
    assert!(gate.last_error().unwrap_or_default().contains("WRONGTYPE"));
    // The bad key is not left without a TTL: a key whose round failed is
    // treated as new, and its next push sets the TTL again.
    assert!(gate.check(&limiter, ROUTE, KEY, &q, 1).is_allowed());
    gate.sync_once(&store, &clock)
        .await
        .expect("the next round succeeds too");
    let ttl: i64 = server.cli(&["PTTL", &bad]).trim().parse().unwrap();
    assert!(ttl > 0, "garbage key without TTL");
}

/// Marks the keys of [`spend`] hot through `marker`, a store on the same
/// server, as another instance would (cold keys never reach Redis), and
/// waits until the gate has read the marks.
async fn mark(gate: &FleetGate, marker: &RedisStore, tag: &str, n: u32) {
    let ids: Vec<u64> = (0..n).map(|i| gate.fleet_id(ROUTE, &format!("{tag}-{i}"))).collect();
    gate.mark_hot(marker, &SystemClock::default(), &ids).await.unwrap();
    let seen = gate.status().rounds;
    wait_for("the marks read", Duration::from_secs(5), || {
        gate.status().rounds >= seen + 2
    })
    .await;
}

/// Spends `n` requests of distinct keys, so every round has pushes (of the
/// keys [`mark`] made hot).
fn spend(gate: &FleetGate, limiter: &Limiter<MemoryStore, SystemClock>, tag: &str, n: u32) {
    for i in 0..n {
        let _ = gate.check(limiter, ROUTE, &format!("{tag}-{i}"), &quota(), 1);
    }
}

/// `CONFIG SET maxmemory 1` under `noeviction`: Redis answers every write
/// with OOM. Every instance used to stay silent and admit N times the
/// budget; now the keys concerned are local-only, the status and the last
/// error say why, and recovery is automatic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refusing_writes_with_oom_is_visible_and_recovers() {
    let server = RedisServer::start();
    let (gate, limiter) = live_gate(&server.url());
    let marker = redis_store(&server.url(), false);
    wait_for("first successful round", Duration::from_secs(5), || {
        gate.status().rounds >= 2
    })
    .await;
    mark(&gate, &marker, "before", 5).await;
    mark(&gate, &marker, "during", 5).await;
    spend(&gate, &limiter, "before", 5);
    wait_for("keys written", Duration::from_secs(5), || !server.keys().is_empty()).await;
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]).trim(),
        "OK"
    );
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(), "OK");
    let seen = gate.status().rounds;
    spend(&gate, &limiter, "during", 5);
    wait_for("the refusal is noticed", Duration::from_secs(5), || {
        gate.status().degraded_keys >= 5
    })
    .await;
    assert!(gate.status().rounds > seen);
    assert!(
        matches!(gate.health(), FleetHealth::Partial { .. }),
        "{:?}",
        gate.health()
    );
    let error = gate.last_error().unwrap_or_default();
    assert!(error.contains("OOM"), "the warning names the Redis error: {error}");
    // A degraded key is limited locally: its fleet budget no longer binds
    // (100 per window), its local limit does (burst 10).
    let admitted = (0..30)
        .filter(|_| gate.check(&limiter, ROUTE, "during-0", &quota(), 1).is_allowed())
        .count();
    assert!(admitted <= 10, "local limit: {admitted}");
    assert!(slowest_decision(&gate, &limiter) < Duration::from_millis(200));

    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "0"]).trim(), "OK");
    wait_for("recovery when writes succeed", Duration::from_secs(5), || {
        gate.health() == FleetHealth::InForce
    })
    .await;
    assert!(gate.last_error().is_none());
    // What was refused during the outage reached Redis afterwards.
    let fields: u64 = server
        .keys()
        .iter()
        .map(|k| server.cli(&["HLEN", k]).trim().parse::<u64>().unwrap_or(0))
        .sum();
    assert!(fields > 0);
}

/// A replica answers every write with READONLY (a failover pointed the
/// instances at the old primary): visible, local-only, recovered when it is
/// promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answering_readonly_is_visible_and_recovers() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    let (gate, limiter) = live_gate(&replica.url());
    let marker = redis_store(&replica.url(), false);
    wait_for("first successful round", Duration::from_secs(5), || {
        gate.status().rounds >= 2
    })
    .await;
    mark(&gate, &marker, "ro", 5).await;
    let port = primary.port.to_string();
    assert_eq!(replica.cli(&["REPLICAOF", "127.0.0.1", &port]).trim(), "OK");
    spend(&gate, &limiter, "ro", 5);
    wait_for("READONLY is noticed", Duration::from_secs(5), || {
        gate.status().degraded_keys >= 5
    })
    .await;
    let error = gate.last_error().unwrap_or_default();
    assert!(error.contains("READONLY"), "{error}");
    assert!(!gate.status().degraded, "reads still work: the gate itself is up");

    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]).trim(), "OK");
    spend(&gate, &limiter, "ro", 5);
    wait_for("recovery after promotion", Duration::from_secs(5), || {
        gate.health() == FleetHealth::InForce
    })
    .await;
}

/// The sync task killed (aborted, as a panic would end it): the gate says
/// it is local-only at once, and limits locally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sync_task_is_reported() {
    let server = RedisServer::start();
    let clock = SystemClock::default();
    let gate = std::sync::Arc::new(FleetGate::new(settings(), &clock).unwrap());
    let task = gate.spawn_sync(
        redis_store(&server.url(), false),
        clock.clone(),
        Duration::from_millis(500),
    );
    wait_for("first successful round", Duration::from_secs(5), || {
        gate.status().rounds >= 2
    })
    .await;
    assert_eq!(gate.health(), FleetHealth::InForce);
    task.abort();
    let _ = task.await;
    assert_eq!(gate.health(), FleetHealth::LocalOnly);
    assert!(gate.last_error().unwrap_or_default().contains("sync task"));
}

/// A cluster master down: only the keys in its slots are local-only; the
/// round goes on for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_down_degrades_only_its_keys() {
    let mut cluster = RedisCluster::start();
    let store = RedisStore::new(
        &cluster.url(),
        RedisSettings::default()
            .with_cluster(true)
            .with_response_timeout(Duration::from_millis(300))
            .with_connect_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let clock = ManualClock::new();
    let gate = FleetGate::new(settings(), &clock).unwrap();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let ids: Vec<u64> = (0..64u32).map(|k| gate.fleet_id(ROUTE, &k)).collect();
    gate.mark_hot(&store, &clock, &ids).await.unwrap();
    gate.sync_once(&store, &clock).await.unwrap();
    for k in 0..64u32 {
        assert!(gate.check(&limiter, ROUTE, &k, &quota(), 1).is_allowed());
    }
    let report = gate.sync_once(&store, &clock).await.expect("a healthy round");
    assert_eq!((report.keys, report.failed_keys), (64, 0));

    cluster.nodes[2].kill();
    clock.advance(Duration::from_millis(100));
    for k in 0..64u32 {
        assert!(gate.check(&limiter, ROUTE, &k, &quota(), 1).is_allowed());
    }
    let report = gate.sync_once(&store, &clock).await.expect("the round goes on");
    assert!(
        report.failed_keys > 0 && report.failed_keys < 64,
        "only the dead node's keys fail: {report:?}"
    );
    assert!(!gate.status().degraded);
    assert!(
        matches!(gate.health(), FleetHealth::Partial { local_only_keys } if local_only_keys == report.failed_keys as u64)
    );
}

// ---- through the HTTP runtime: `[global]` in the configuration -------------

mod over_http {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use http_body_util::BodyExt;
    use ratelimit::axum::RateLimit;
    use ratelimit::config::{Config, FleetSecret};
    use ratelimit::key::PeerAddr;
    use ratelimit::rate_limit;
    use tower::ServiceExt;

    #[rate_limit(key = ip, resolve = [default], name = "fleet")]
    async fn fleet() -> &'static str {
        "ok"
    }

    async fn instance(url: &str, clock: &ManualClock) -> (RateLimit, axum::routing::RouterIntoService<Body>) {
        // 60/min: a fleet budget of 10 per 10 s window; burst 100 locally,
        // so only the fleet limit binds.
        let toml = format!(
            "[profiles.standard]\nrate = \"60/min\"\nburst = 100\n[global]\nredis_url = \"{url}\"\nsync_interval = \"50ms\"\nwindow = \"10s\"\n"
        );
        let mut config = Config::from_toml_str(&toml).unwrap();
        if let Some(g) = config.global.as_mut() {
            g.key_secret = Some(FleetSecret(SECRET.to_vec()));
        }
        let rl = RateLimit::builder(config)
            .routes_in(module_path!())
            .clock(clock.clone())
            .build()
            .await
            .unwrap();
        let app = Router::new()
            .route("/fleet", get(fleet))
            .with_state(rl.clone())
            .into_service();
        (rl, app)
    }

    fn request() -> ::http::Request<Body> {
        let mut r = ::http::Request::get("/fleet").body(Body::empty()).unwrap();
        r.extensions_mut().insert(PeerAddr("192.0.2.77:1".parse().unwrap()));
        r
    }

    async fn rounds_after(rl: &RateLimit, at_least: u64) {
        let gate = rl.gate().expect("[global] builds a gate");
        let start = Instant::now();
        while gate.status().rounds < at_least {
            assert!(start.elapsed() < Duration::from_secs(5), "no sync round");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_instances_share_one_fleet_budget() {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        let (a, app_a) = instance(&server.url(), &clock).await;
        let (b, app_b) = instance(&server.url(), &clock).await;
        // Both in the roster: two live instances.
        rounds_after(&a, 3).await;
        rounds_after(&b, 3).await;
        assert_eq!(a.gate().unwrap().status().live_instances, 2);

        let mut statuses = Vec::new();
        for _ in 0..6 {
            statuses.push(app_a.clone().oneshot(request()).await.unwrap().status().as_u16());
        }
        assert_eq!(
            statuses,
            [vec![200; 5], vec![429]].concat(),
            "a key new to instance A: held to its share of the fleet budget of 10"
        );
        let r = app_a.clone().oneshot(request()).await.unwrap();
        assert_eq!(r.status(), 429);
        assert!(r.headers().contains_key("retry-after"));
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&body).contains("fleet-wide"),
            "a fleet rejection says so"
        );

        // The refusal turned the key hot on A: A pushes its 5 and marks it;
        // B, which has not seen the key yet, admits one (within its share),
        // then reads the mark, pushes, reads the key, and holds it to its
        // share (5 of A's and 1 of its own) while others may push.
        let seen = a.gate().unwrap().status().rounds;
        rounds_after(&a, seen + 2).await;
        assert_eq!(app_b.clone().oneshot(request()).await.unwrap().status(), 200);
        let seen = b.gate().unwrap().status().rounds;
        rounds_after(&b, seen + 2).await;
        assert_eq!(app_b.clone().oneshot(request()).await.unwrap().status(), 429);
        assert_eq!(b.gate().unwrap().status().hot_keys, 1);
        assert!(!server.keys().is_empty());
        assert!(
            server.keys().iter().all(|k| !k.contains("192.0.2.77")),
            "no raw address in Redis"
        );
    }

    #[rate_limit(key = jwt_claim("sub"), resolve = [default], name = "fleet.sub")]
    async fn by_sub() -> &'static str {
        "ok"
    }

    /// A verified `sub` spelled as a string or as a number is one client
    /// to the fleet too (one fleet id, the digits as text), as it is to the
    /// local limit and the limit service (`tests/http/routes.rs`); `"042"`
    /// is another client.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_spelled_as_a_string_or_a_number_has_one_fleet_budget() {
        let server = RedisServer::start();
        let (rl, _) = instance(&server.url(), &ManualClock::new()).await;
        let app = Router::new()
            .route("/sub", get(by_sub))
            .with_state(rl.clone())
            .into_service();
        let as_sub = |sub: serde_json::Value| {
            let mut r = ::http::Request::get("/sub").body(Body::empty()).unwrap();
            r.extensions_mut().insert(PeerAddr("192.0.2.78:1".parse().unwrap()));
            let claims = ratelimit::claims::VerifiedClaims::from_json(&serde_json::json!({ "sub": sub }).to_string());
            r.extensions_mut().insert(claims.unwrap());
            r
        };
        // The fleet budget is 10 a window, the local burst 100: only a
        // shared fleet id stops the eleventh.
        let mut statuses = Vec::new();
        for i in 0..11 {
            let sub = if i % 2 == 0 {
                serde_json::json!("42")
            } else {
                serde_json::json!(42)
            };
            statuses.push(app.clone().oneshot(as_sub(sub)).await.unwrap().status().as_u16());
        }
        assert_eq!(
            statuses,
            [vec![200; 10], vec![429]].concat(),
            "\"42\" and 42 share one fleet budget"
        );
        let r = app.clone().oneshot(as_sub(serde_json::json!(42))).await.unwrap();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&body).contains("fleet-wide"),
            "a fleet rejection"
        );
        assert_eq!(
            app.clone()
                .oneshot(as_sub(serde_json::json!("042")))
                .await
                .unwrap()
                .status(),
            200,
            "\"042\" is another client"
        );
    }

    #[tokio::test]
    async fn a_missing_fleet_secret_is_refused_at_startup() {
        let toml = "[profiles.standard]\nrate = \"60/min\"\n[global]\nredis_url = \"redis://127.0.0.1:1/\"\nkey_secret_env = \"RATELIMIT_TEST_SECRET_THAT_IS_NOT_SET\"\n";
        let err = RateLimit::builder(Config::from_toml_str(toml).unwrap())
            .routes_in(module_path!())
            .build()
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("RATELIMIT_TEST_SECRET_THAT_IS_NOT_SET"),
            "{err}"
        );
        // Redis being down at startup is not an error: the gate starts local-only.
        let mut config = Config::from_toml_str(toml).unwrap();
        config.global.as_mut().unwrap().key_secret = Some(FleetSecret(SECRET.to_vec()));
        assert!(RateLimit::builder(config)
            .routes_in(module_path!())
            .build()
            .await
            .is_ok());
    }
}
