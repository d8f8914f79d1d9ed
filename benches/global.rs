//! The fleet gate's cost: `check` through the gate against the same limiter
//! without it, interleaved in one run (target: at most 1.3x), beside two
//! floors: the local check placed by the fleet id's hash (`fleet id only`)
//! and that plus one atomic add on the key's line of a second table (`+ one
//! add`, what counting each admitted request outside the local cell costs
//! at the least: `LeanFloor`), and one sync
//! round for 1k, 10k and 100k active keys against a `redis-server` on
//! loopback that the bench starts itself.
//!
//! And the gate at the scale of a user base (`scale`): one instance with
//! 1k, 100k and 1M active keys of which 1% reach their limit, against its
//! own `redis-server`: rounds (`turn ms`: the slowest of those in the
//! first tenth of an epoch), Redis commands per round (from `INFO
//! commandstats`) and memory per tracked key.
//!
//! `cargo bench --bench global` (`RATELIMIT_BENCH_PARTS=ab,rounds,scale`
//! picks the summaries, `RATELIMIT_BENCH_SCALE=1000,100000` the scale rows,
//! `RATELIMIT_BENCH_COLD_EVERY=1,10` how often a cold key is requested, in
//! rounds, `RATELIMIT_BENCH_MAX_KEYS=50000` the cold keys a table holds
//! (every active key by default), `RATELIMIT_BENCH_ROUNDS=30` how many rounds a scale row
//! measures (6), `RATELIMIT_BENCH_AB_KEYS=1` or `10000` one row of the A/B,
//! for a profiler).

// The bench uses only part of the suites' Redis fixture.
#[allow(dead_code)]
#[path = "../tests/support/redis.rs"]
mod redis_support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use ratelimit::fleet::{FleetGate, GateSettings, MemoryFleetStore, RedisSettings, RedisStore};
use ratelimit::{Check, Limiter, MemoryStore, Quota, SystemClock};

const SECRET: &[u8] = b"bench fleet secret of 32 bytes..";

/// The largest burst the gate counts: with a new key every 2^20 checks
/// (see `key`), it never limits, and the gate's arithmetic and table run in
/// full.
fn quota() -> Quota {
    Quota::per_second(ratelimit::fleet::MAX_FLEET_BURST).with_burst(ratelimit::fleet::MAX_FLEET_BURST)
}

/// The key of the `n`th check: one key (a new one every 2^20 checks, so no
/// bucket runs dry), or `keys` keys in turn.
fn key(n: u64, keys: u64) -> u64 {
    if keys == 1 {
        n >> 20
    } else {
        n % keys
    }
}

/// The gate's sync loop on a runtime of its own, against an in-memory
/// store: a gate whose loop is not running turns local-only after a few
/// sync intervals, and would measure the wrong path.
fn run_sync(gate: &std::sync::Arc<FleetGate>) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio: {e}"));
    let _guard = rt.enter();
    gate.spawn_sync(MemoryFleetStore::new(), SystemClock::default(), Duration::from_secs(1));
    rt
}

fn gate(max_keys: usize) -> (FleetGate, Limiter<MemoryStore, SystemClock>) {
    let clock = SystemClock::default();
    let settings = GateSettings::new(SECRET)
        // An hour: no epoch turns during a run (the sync loop is not running
        // here to prepare the next table).
        .with_window(Duration::from_secs(3600))
        .with_sync_interval(Duration::from_millis(100))
        .with_max_keys(max_keys);
    let gate = FleetGate::new(settings, &clock).unwrap_or_else(|e| panic!("gate: {e}"));
    (
        gate,
        Limiter::new(MemoryStore::with_max_keys(max_keys.max(1024)), clock),
    )
}

fn bench(c: &mut Criterion) {
    let (g, limiter_gate) = gate(20_000);
    let g = std::sync::Arc::new(g);
    let _sync = run_sync(&g);
    let limiter = Limiter::new(MemoryStore::with_max_keys(40_000), SystemClock::default());
    let q = quota();
    let mut group = c.benchmark_group("global");
    for (name, keys) in [("1 key", 1u64), ("10k keys", 10_000)] {
        let mut i = 0u64;
        group.bench_function(format!("{name}/local only"), |b| {
            b.iter(|| {
                i += 1;
                black_box(limiter.check_n(&key(i, keys), &q, 1))
            })
        });
        let mut i = 0u64;
        group.bench_function(format!("{name}/with the fleet gate"), |b| {
            b.iter(|| {
                i += 1;
                let d = g.check(&limiter_gate, 0, &key(i, keys), &q, 1);
                debug_assert!(d.is_allowed());
                black_box(d)
            })
        });
    }
    group.finish();
}

fn ab() {
    const ROUNDS: usize = 31;
    const BLOCK: u64 = 200_000;
    // Separate limiters, sized alike: the two paths hash keys differently,
    // and one store would hold both sets.
    let (g, limiter_gate) = gate(20_000);
    let g = std::sync::Arc::new(g);
    let _sync = run_sync(&g);
    let limiter = Limiter::new(MemoryStore::with_max_keys(40_000), SystemClock::default());
    let limiter_lean = Limiter::new(MemoryStore::with_max_keys(40_000), SystemClock::default());
    let floor = LeanFloor::new(20_000);
    let q = quota();
    println!();
    println!("=== interleaved A/B, {ROUNDS} alternating blocks of {BLOCK} checks: median ns per check ===");
    println!(
        "{:<14}{:>12}{:>16}{:>9}{:>9}  {:<8}{:>14}{:>13}{:>9}",
        "", "local only", "with the gate", "ratio", "target", "", "fleet id only", "+ one add", "ratio"
    );
    let only = std::env::var("RATELIMIT_BENCH_AB_KEYS").ok();
    for (name, keys) in [("1 key", 1u64), ("10k keys", 10_000)] {
        if only.as_deref().is_some_and(|k| k != keys.to_string()) {
            continue;
        }
        let (mut local, mut gated, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut lean, mut lean_ratios, mut hashed) = (Vec::new(), Vec::new(), Vec::new());
        let mut denied = 0u64;
        for round in 0..ROUNDS as u64 {
            let start = Instant::now();
            for i in 0..BLOCK {
                black_box(limiter.check_n(&key(round << 20 | i, keys), &q, 1));
            }
            let a = start.elapsed().as_nanos() as f64 / BLOCK as f64;
            // The least a gate that counts every admitted request outside
            // the local cell can cost: the key's fleet id (one keyed hash,
            // which also places the local cell), the local check, and one
            // atomic add on the key's line of a second table (no epoch, no
            // estimate, no claim: see `LeanFloor`).
            let start = Instant::now();
            for i in 0..BLOCK {
                let k = key(round << 20 | i, keys);
                let id = g.fleet_id(0, &k);
                let d = limiter_lean.check_all(&[Check::new(ratelimit::CellKey::new(id, 0), q, 1)])[0];
                if d.is_allowed() {
                    floor.count(id);
                }
                black_box(d);
            }
            let c = start.elapsed().as_nanos() as f64 / BLOCK as f64;
            // The same without the add: the fleet id's hash in place of the
            // store's own.
            let start = Instant::now();
            for i in 0..BLOCK {
                let k = key(round << 20 | i, keys);
                let id = g.fleet_id(0, &k);
                black_box(limiter_lean.check_all(&[Check::new(ratelimit::CellKey::new(id, 0), q, 1)])[0]);
            }
            let e = start.elapsed().as_nanos() as f64 / BLOCK as f64;
            hashed.push(e / a);
            let start = Instant::now();
            for i in 0..BLOCK {
                let d = g.check(&limiter_gate, 0, &key(round << 20 | i, keys), &q, 1);
                denied += u64::from(d.is_denied());
                black_box(d);
            }
            let b = start.elapsed().as_nanos() as f64 / BLOCK as f64;
            local.push(a);
            gated.push(b);
            ratios.push(b / a);
            lean.push(c);
            lean_ratios.push(c / a);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let ratio = median(&mut ratios);
        // The gate's own path ran: its table holds the keys, and the fleet
        // estimate admitted every check.
        assert_eq!(denied, 0, "the bench's quota limited some checks");
        assert!(
            g.status().rounds > 0 && !g.status().degraded,
            "the gate was not in force: {:?}",
            g.status()
        );
        let lean_ratio = median(&mut lean_ratios);
        println!(
            "{:<14}{:>12.1}{:>16.1}{:>8.2}x{:>9}  {:<8}{:>13.2}x{:>13.1}{:>8.2}x",
            name,
            median(&mut local),
            median(&mut gated),
            ratio,
            "<=1.3x",
            if ratio <= 1.3 { "met" } else { "NOT met" },
            median(&mut hashed),
            median(&mut lean),
            lean_ratio
        );
    }
}

/// The `+ one add` column: a table of one-line slots, sized as the
/// gate's (twice `max_keys`, a power of two), placed by the fleet id's high
/// half as the gate places keys, where a request adds one unit with one
/// atomic add. What a gate that counted each admitted unit off the local
/// cell would pay at the least, whatever else it did (a lease, an allowance
/// the sync loop computes): the ratio the 1.3x target is to be read
/// against.
struct LeanFloor {
    slots: Vec<Line>,
    mask: usize,
}

#[repr(align(64))]
struct Line(std::sync::atomic::AtomicU64);

impl LeanFloor {
    fn new(max_keys: usize) -> LeanFloor {
        let n = (max_keys * 2).next_power_of_two();
        LeanFloor {
            slots: (0..n).map(|_| Line(std::sync::atomic::AtomicU64::new(0))).collect(),
            mask: n - 1,
        }
    }

    #[inline]
    fn count(&self, id: u64) {
        self.slots[(id >> 32) as usize & self.mask]
            .0
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A store on the bench's `redis-server`, with timeouts long enough for a
/// round of 100,000 keys.
fn loopback_store(server: &redis_support::RedisServer) -> RedisStore {
    RedisStore::new(
        &server.url(),
        RedisSettings::default()
            .with_response_timeout(Duration::from_secs(30))
            .with_connect_timeout(Duration::from_secs(5)),
    )
    .unwrap_or_else(|e| panic!("store: {e}"))
}

/// A comma-separated list of numbers from the environment variable `name`,
/// or `default`.
fn env_list(name: &str, default: &[u64]) -> Vec<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// One sync round with every key hot (push every key's delta, pull every
/// key's totals) against a loopback Redis.
fn sync_rounds() {
    let server = redis_support::RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio: {e}"));
    let store = loopback_store(&server);
    println!();
    println!(
        "=== one sync round against redis-server on loopback, every key hot (HINCRBY + PEXPIRE + HMGET per key, 16 pipelines) ==="
    );
    println!(
        "{:<12}{:>14}{:>14}{:>14}",
        "active keys", "median ms", "min ms", "max ms"
    );
    for keys in [1_000u64, 10_000, 100_000] {
        let (g, limiter) = gate(keys as usize);
        let clock = SystemClock::default();
        let q = quota();
        // Every key hot (a cold key never reaches Redis): marked, and the
        // marks read.
        let ids: Vec<u64> = (0..keys).map(|k| g.fleet_id(0, &k)).collect();
        rt.block_on(async {
            g.mark_hot(&store, &clock, &ids).await?;
            g.sync_once(&store, &clock).await.map(drop)
        })
        .unwrap_or_else(|e| panic!("marks: {e}"));
        let mut times = Vec::new();
        for round in 0..6 {
            for k in 0..keys {
                black_box(g.check(&limiter, 0, &k, &q, 1));
            }
            let start = Instant::now();
            let report = rt
                .block_on(g.sync_once(&store, &clock))
                .unwrap_or_else(|e| panic!("sync: {e}"));
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            assert_eq!((report.keys as u64, report.hot_keys as u64), (keys, keys));
            if round > 0 {
                times.push(ms);
            }
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{:<12}{:>14.1}{:>14.1}{:>14.1}",
            keys,
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
}

/// Redis commands run so far (the sum of `INFO commandstats` calls).
fn commands(server: &redis_support::RedisServer) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

/// One instance, `keys` active keys of which 1% are hot (offered more than
/// their fleet budget every round), the rest cold (one request every round,
/// or every tenth: once a second, still active), a round every 100 ms
/// against a loopback `redis-server`: what a round costs Redis and the
/// instance, once every key has been requested (`round ms`, `max ms`), and
/// while a tenth of the keys are new each round (`churn ms`, the rounds
/// before).
fn scale() {
    let rows = env_list("RATELIMIT_BENCH_SCALE", &[1_000, 100_000, 1_000_000]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio: {e}"));
    println!();
    println!("=== the gate at scale: one instance, 1% of the active keys hot, a round every 100 ms, loopback redis-server ===");
    println!(
        "{:<12}{:>8}{:>14}{:>12}{:>12}{:>12}{:>12}{:>12}{:>14}{:>12}{:>12}",
        "active keys",
        "hot",
        "cold every",
        "round ms",
        "max ms",
        "turn ms",
        "churn ms",
        "cmds/round",
        "cmds/hot key",
        "unread",
        "B/key"
    );
    // 600/min: a fleet budget of 100 per 10 s window; a hot key is offered
    // 150 a round.
    let q = Quota::per_minute(600).with_burst(100);
    let everies = env_list("RATELIMIT_BENCH_COLD_EVERY", &[1, 10]);
    let measured = env_list("RATELIMIT_BENCH_ROUNDS", &[6])
        .first()
        .copied()
        .unwrap_or(6)
        .max(1);
    for (keys, every) in rows.iter().flat_map(|&k| everies.iter().map(move |&e| (k, e.max(1)))) {
        let server = redis_support::RedisServer::start();
        let store = loopback_store(&server);
        let clock = SystemClock::default();
        let limiter = Limiter::new(MemoryStore::with_max_keys(keys as usize * 2), clock.clone());
        let hot = keys / 100;
        let before = rss();
        // `RATELIMIT_BENCH_MAX_KEYS`: the cold keys a table holds (every
        // active key by default); past it keys are counted in the sketch,
        // and rounds never visit them.
        let max_keys = env_list("RATELIMIT_BENCH_MAX_KEYS", &[keys])[0] as usize;
        let settings = GateSettings::new(SECRET)
            .with_sync_interval(Duration::from_millis(100))
            .with_max_keys(max_keys);
        let g = FleetGate::new(settings, &clock).unwrap_or_else(|e| panic!("gate: {e}"));
        let (mut times, mut cmds, mut unread) = (Vec::new(), Vec::new(), 0);
        // Rounds in the first tenth of an epoch (by the wall clock, as the
        // gate counts epochs), apart: the slowest of them. Each active key
        // takes a slot in the new epoch's table then, and a hot key is read
        // in both epochs' counters while the old epoch's last slices may
        // still change.
        let window = g.window().window_ns();
        let early_in_epoch = || {
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            wall % window < window / 10
        };
        let mut early_rounds = Vec::new();
        // Six rounds (`RATELIMIT_BENCH_ROUNDS`) measured once every key has
        // been requested (the first `every` rounds bring new keys: see the
        // churn column).
        let warm = every.max(2);
        let mut churn = Vec::new();
        for round in 0..warm + measured {
            let started = Instant::now();
            for k in 0..keys {
                let offered = if k < hot {
                    150
                } else {
                    u64::from((k + round) % every == 0)
                };
                for _ in 0..offered {
                    black_box(g.check(&limiter, 0, &k, &q, 1));
                }
            }
            let c0 = commands(&server);
            let early = early_in_epoch();
            let t = Instant::now();
            let report = rt
                .block_on(g.sync_once(&store, &clock))
                .unwrap_or_else(|e| panic!("sync: {e}"));
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            // The INFO call itself counts one.
            let c = commands(&server).saturating_sub(c0 + 1);
            if round >= 1 && round < warm {
                churn.push(ms);
            }
            if round >= warm && early {
                early_rounds.push(ms);
            }
            if round >= warm {
                times.push(ms);
                cmds.push(c);
                unread = unread.max(report.unread_keys);
            }
            if let Some(rest) = Duration::from_millis(100).checked_sub(started.elapsed()) {
                std::thread::sleep(rest);
            }
        }
        let per_key = rss().saturating_sub(before) / keys.max(1);
        times.sort_by(f64::total_cmp);
        cmds.sort_unstable();
        let median_cmds = cmds[cmds.len() / 2];
        churn.sort_by(f64::total_cmp);
        let churn = match churn.get(churn.len() / 2) {
            Some(ms) if every > 1 => format!("{ms:.1}"),
            _ => "-".to_owned(),
        };
        let turn = early_rounds
            .iter()
            .copied()
            .max_by(f64::total_cmp)
            .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}"));
        println!(
            "{:<12}{:>8}{:>14}{:>12.1}{:>12.1}{:>12}{:>12}{:>12}{:>14.1}{:>12}{:>12}",
            keys,
            hot,
            format!("{every} round{}", if every == 1 { "" } else { "s" }),
            times[times.len() / 2],
            times[times.len() - 1],
            turn,
            churn,
            median_cmds,
            median_cmds as f64 / hot.max(1) as f64,
            unread,
            per_key
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Summaries only under `cargo bench` (which passes `--bench`), not in
    // the `cargo test --benches` smoke run.
    if std::env::args().any(|a| a == "--bench") && !std::env::args().any(|a| a == "--test" || a == "--list") {
        let parts = std::env::var("RATELIMIT_BENCH_PARTS").unwrap_or_else(|_| "ab,rounds,scale".to_owned());
        let part = |name: &str| parts.split(',').any(|p| p.trim() == name);
        if part("ab") {
            ab();
        }
        if part("rounds") {
            sync_rounds();
        }
        if part("scale") {
            scale();
        }
    }
}
