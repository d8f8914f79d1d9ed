#![allow(unsafe_code)] // the counting allocator below; see Cargo.toml
//! The engine against `governor` 0.10 (keyed, dashmap store), side by side in
//! one run, then a summary table of ratios against the targets of issue 2.
//!
//! ```text
//! cargo bench --bench engine            # everything, then the summary
//! cargo bench --bench engine -- clock   # one group (the summary shows what ran)
//! cargo bench --bench engine -- stacked # stacked checks and peeks only (no A/B against governor)
//! cargo bench --bench engine -- floor   # 1M random-order str24 keys: ours, governor, the floor
//! ```
//!
//! The floor (issue 15) is the least a keyed GCRA check can cost: an
//! open-addressing lock-free table of (hash, TAT) pairs at the store's 32
//! bytes per key, one seeded hash, one CAS, the same clock, no eviction and
//! no bound. Every run prints our distance to it.
//!
//! Both limiters use their default clocks (both read the TSC through quanta)
//! and a quota that admits every request: the allowed path is what a busy
//! service runs. Keys are pre-inserted, so every check is a lookup hit.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use ratelimit::{CellKey, Check, Clock, Limiter, MemoryStore, Quota, SystemClock};

// ---- allocation accounting, for memory per key ----------------------------

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

// ---- per-decision times, recorded from criterion's own samples --------------

/// (bench id) -> per-iteration times of every sample criterion ran.
static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

fn record(id: &str, iters: u64, elapsed: Duration) {
    let per_iter = elapsed.as_nanos() as f64 / iters.max(1) as f64;
    SAMPLES.lock().unwrap().entry(id.to_owned()).or_default().push(per_iter);
}

fn median(id: &str) -> Option<f64> {
    let samples = SAMPLES.lock().unwrap();
    let mut v = samples.get(id)?.clone();
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

// ---- the contenders ---------------------------------------------------------

const RATE: u32 = 1_000_000_000;

fn ours_quota() -> Quota {
    Quota::per_second(RATE)
}

type Governor<K> = governor::DefaultKeyedRateLimiter<K>;

fn governor<K: std::hash::Hash + Eq + Clone>() -> Governor<K> {
    let rate = NonZeroU32::new(RATE).unwrap();
    governor::RateLimiter::keyed(governor::Quota::per_second(rate).allow_burst(rate))
}

fn u64_keys(n: usize) -> Vec<u64> {
    // Distinct, scattered values, like user ids or hashed addresses.
    (0..n as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
        .collect()
}

fn str_keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let s = format!("client-{i:017}");
            debug_assert_eq!(s.len(), 24);
            s
        })
        .collect()
}

/// A deterministic Fisher-Yates shuffle (splitmix64): the same order every
/// run, no dependency.
fn shuffle<T>(v: &mut [T]) {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..v.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// 24-byte keys whose `String`s are visited in a random order: the strings'
/// bytes were allocated in creation order, so each check reads a key's bytes
/// from a line no recent check touched (a DRAM miss at 1M keys), as a
/// service sees clients arrive. The harder case of issue 15.
fn str_keys_random(n: usize) -> Vec<String> {
    let mut keys = str_keys(n);
    shuffle(&mut keys);
    keys
}

// ---- the floor ------------------------------------------------------------------

/// The floor of issue 15: what a keyed GCRA check costs with nothing but the
/// essentials. An open-addressing, lock-free table of (64-bit key hash, TAT)
/// pairs at 16 bytes a slot and half full (32 bytes per key, as the store),
/// one seeded hash of the key (ahash, as the store), one CAS, the same TSC
/// clock; no eviction, no bound, no groups, no overflow, no statistics.
/// Linear probing from the key's slot.
struct Floor {
    slots: Box<[FloorSlot]>,
    mask: usize,
    hasher: ahash::RandomState,
    clock: SystemClock,
    interval: u64,
    /// tau + T: the most a TAT may run ahead of now.
    limit: u64,
}

#[repr(C, align(16))]
struct FloorSlot {
    key: std::sync::atomic::AtomicU64,
    tat: std::sync::atomic::AtomicU64,
}

impl Floor {
    fn new(keys: usize, quota: &Quota) -> Floor {
        let n = (keys * 2).next_power_of_two();
        let slots = (0..n)
            .map(|_| FloorSlot {
                key: std::sync::atomic::AtomicU64::new(0),
                tat: std::sync::atomic::AtomicU64::new(0),
            })
            .collect();
        let interval = quota.emission_interval().as_nanos() as u64;
        Floor {
            slots,
            mask: n - 1,
            hasher: ahash::RandomState::new(),
            clock: SystemClock::default(),
            interval,
            limit: interval * u64::from(quota.burst()),
        }
    }

    #[inline]
    fn check<K: std::hash::Hash + ?Sized>(&self, key: &K) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
        let h = self.hasher.hash_one(key) | 1;
        let mut i = (h as usize) & self.mask;
        let slot = loop {
            let s = &self.slots[i];
            match s.key.load(Acquire) {
                k if k == h => break s,
                0 => match s.key.compare_exchange(0, h, AcqRel, Acquire) {
                    Ok(_) => break s,
                    Err(k) if k == h => break s,
                    Err(_) => {}
                },
                _ => {}
            }
            i = (i + 1) & self.mask;
        };
        let now = self.clock.now();
        let mut tat = slot.tat.load(Relaxed);
        loop {
            let new = tat.max(now) + self.interval;
            if new - now > self.limit {
                return false;
            }
            match slot.tat.compare_exchange_weak(tat, new, AcqRel, Relaxed) {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

fn run_floor<K: std::hash::Hash + ?Sized, Q: std::borrow::Borrow<K>>(
    floor: &Floor,
    keys: &[Q],
    start: usize,
    iters: u64,
) -> Duration {
    let mut i = start % keys.len();
    let t0 = Instant::now();
    for _ in 0..iters {
        black_box(floor.check(keys[i].borrow()));
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    t0.elapsed()
}

fn ours_store(keys: usize) -> MemoryStore {
    MemoryStore::with_max_keys(keys.max(1_000))
}

/// Runs `iters` checks over `keys` in order (wrapping), returns the elapsed time.
fn run_ours<K: std::hash::Hash + ?Sized, Q: std::borrow::Borrow<K>>(
    limiter: &Limiter,
    keys: &[Q],
    start: usize,
    iters: u64,
) -> Duration {
    let quota = ours_quota();
    let mut i = start % keys.len();
    let t0 = Instant::now();
    for _ in 0..iters {
        let d = limiter.check(keys[i].borrow(), &quota);
        black_box(d);
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    t0.elapsed()
}

fn run_governor<K: std::hash::Hash + Eq + Clone>(
    limiter: &Governor<K>,
    keys: &[K],
    start: usize,
    iters: u64,
) -> Duration {
    let mut i = start % keys.len();
    let t0 = Instant::now();
    for _ in 0..iters {
        let d = limiter.check_key(&keys[i]);
        let _ = black_box(d);
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    t0.elapsed()
}

/// Registers one criterion benchmark that runs `run(start, iters)` blocks
/// and records every sample for the summary under `id`.
fn bench_blocks(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    id: String,
    run: impl Fn(usize, u64) -> Duration,
) {
    g.bench_function(name, |b| {
        let mut pos = 0;
        b.iter_custom(|iters| {
            let e = run(pos, iters);
            pos += iters as usize;
            record(&id, iters, e);
            e
        })
    });
}

/// Both limiters over one key set (`label` names the group).
fn single_thread_group<K, Q>(c: &mut Criterion, label: &str, keys: &[Q])
where
    K: std::hash::Hash + ?Sized,
    Q: std::borrow::Borrow<K> + std::hash::Hash + Eq + Clone,
{
    let n = keys.len();
    let mut g = c.benchmark_group(label);
    let ours = Limiter::new(ours_store(n), SystemClock::default());
    run_ours::<K, Q>(&ours, keys, 0, n as u64);
    bench_blocks(&mut g, "ratelimit", format!("{label}/ratelimit"), |p, i| {
        run_ours::<K, Q>(&ours, keys, p, i)
    });
    drop(ours);
    let gov = governor::<Q>();
    run_governor(&gov, keys, 0, n as u64);
    bench_blocks(&mut g, "governor", format!("{label}/governor"), |p, i| {
        run_governor(&gov, keys, p, i)
    });
    g.finish();
}

fn single_thread(c: &mut Criterion) {
    for (n, label) in [(1usize, "1 key"), (10_000, "10k keys"), (1_000_000, "1M keys")] {
        single_thread_group::<u64, u64>(c, &format!("{label}, u64"), &u64_keys(n));
        single_thread_group::<str, String>(c, &format!("{label}, str24"), &str_keys(n));
    }
}

/// Two threads over 1M keys; the reported time is wall time / (2 * iters),
/// i.e. the aggregate time per decision, directly comparable with 1 thread.
fn two_threads(c: &mut Criterion) {
    let n = 1_000_000;
    let keys = u64_keys(n);
    let mut g = c.benchmark_group("1M keys, u64, 2 threads");
    {
        let limiter = Limiter::new(ours_store(n), SystemClock::default());
        run_ours::<u64, u64>(&limiter, &keys, 0, n as u64);
        g.bench_function("ratelimit", |b| {
            let mut pos = 0;
            b.iter_custom(|iters| {
                let e = std::thread::scope(|s| {
                    let t0 = Instant::now();
                    let a = s.spawn(|| run_ours::<u64, u64>(&limiter, &keys, pos, iters));
                    let b = s.spawn(|| run_ours::<u64, u64>(&limiter, &keys, pos + n / 2, iters));
                    a.join().unwrap();
                    b.join().unwrap();
                    t0.elapsed() / 2
                });
                pos += iters as usize;
                record("1M keys, u64, 2 threads/ratelimit", iters, e);
                e
            })
        });
    }
    {
        let limiter = governor::<u64>();
        run_governor(&limiter, &keys, 0, n as u64);
        g.bench_function("governor", |b| {
            let mut pos = 0;
            b.iter_custom(|iters| {
                let e = std::thread::scope(|s| {
                    let t0 = Instant::now();
                    let a = s.spawn(|| run_governor(&limiter, &keys, pos, iters));
                    let b = s.spawn(|| run_governor(&limiter, &keys, pos + n / 2, iters));
                    a.join().unwrap();
                    b.join().unwrap();
                    t0.elapsed() / 2
                });
                pos += iters as usize;
                record("1M keys, u64, 2 threads/governor", iters, e);
                e
            })
        });
    }
    g.finish();
}

fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock");
    let clock = SystemClock::default();
    g.bench_function("SystemClock::now (quanta TSC)", |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                black_box(clock.now());
            }
            let e = t0.elapsed();
            record("clock/SystemClock", iters, e);
            e
        })
    });
    g.bench_function("std::time::Instant::now", |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                black_box(Instant::now());
            }
            let e = t0.elapsed();
            record("clock/Instant", iters, e);
            e
        })
    });
    g.finish();
}

// ---- stacked checks and peeks ------------------------------------------------------

const STACKED_KEYS: usize = 10_000;

/// Two cells per client (routes 1 and 2: an address limit and an account
/// limit, say), precomputed as the HTTP runtime does.
fn stacked_cells(limiter: &Limiter) -> Vec<(CellKey, CellKey)> {
    u64_keys(STACKED_KEYS)
        .iter()
        .map(|k| (limiter.cell_key(1, k), limiter.cell_key(2, k)))
        .collect()
}

#[derive(Clone, Copy)]
enum StackedOp {
    /// `check_all` of the first cell alone.
    Check,
    /// `check_all` of both cells (all or nothing, allowed path).
    CheckAll2,
    /// `peek_all` of the first cell alone.
    Peek,
}

fn run_stacked(limiter: &Limiter, cells: &[(CellKey, CellKey)], op: StackedOp, start: usize, iters: u64) -> Duration {
    let quota = ours_quota();
    let mut i = start % cells.len();
    let t0 = Instant::now();
    for _ in 0..iters {
        let (a, b) = cells[i];
        match op {
            StackedOp::Check => {
                black_box(limiter.check_all(&[Check::new(a, quota, 1)])[0]);
            }
            StackedOp::CheckAll2 => {
                black_box(limiter.check_all(&[Check::new(a, quota, 1), Check::new(b, quota, 1)]));
            }
            StackedOp::Peek => {
                black_box(limiter.peek_all(&[Check::new(a, quota, 1)])[0]);
            }
        }
        i += 1;
        if i == cells.len() {
            i = 0;
        }
    }
    t0.elapsed()
}

fn stacked_limiter() -> (Limiter, Vec<(CellKey, CellKey)>) {
    let limiter = Limiter::new(ours_store(2 * STACKED_KEYS), SystemClock::default());
    let cells = stacked_cells(&limiter);
    // Every cell exists: lookups hit, as on a busy service.
    run_stacked(&limiter, &cells, StackedOp::CheckAll2, 0, STACKED_KEYS as u64);
    (limiter, cells)
}

fn stacked(c: &mut Criterion) {
    let (limiter, cells) = stacked_limiter();
    let mut g = c.benchmark_group("stacked");
    for (name, op) in [
        ("check_cell", StackedOp::Check),
        ("check_all of 2", StackedOp::CheckAll2),
        ("peek_cell", StackedOp::Peek),
    ] {
        bench_blocks(&mut g, name, format!("stacked/{name}"), |p, i| {
            run_stacked(&limiter, &cells, op, p, i)
        });
    }
    g.finish();
}

/// Interleaved A/B of the stacked decision and the peek against a single
/// check, over 10k clients with both cells present.
fn stacked_summary() {
    let (limiter, cells) = stacked_limiter();
    let (limiter, cells) = (&limiter, &cells[..]);
    let run = |op| move |p, i| run_stacked(limiter, cells, op, p, i);
    println!();
    println!(
        "=== stacked and peek, {STACKED_KEYS} clients, interleaved A/B ({AB_ROUNDS} blocks of {AB_BLOCK}): median ns per decision ==="
    );
    println!("{:<36} {:>8} {:>8} {:>7}", "A vs B", "A", "B", "A/B");
    let (a, b, r) = interleaved(AB_ROUNDS, AB_BLOCK, run(StackedOp::CheckAll2), run(StackedOp::Check));
    println!("{:<36} {a:>8.1} {b:>8.1} {r:>6.2}x", "check_all of 2 vs check_cell");
    let (a, b, r) = interleaved(AB_ROUNDS, AB_BLOCK, run(StackedOp::Peek), run(StackedOp::Check));
    println!("{:<36} {a:>8.1} {b:>8.1} {r:>6.2}x", "peek_cell vs check_cell");
    // No target: what a stacked pair (a look at both cells, then a charge
    // of both) and a peek cost next to one check.
}

// ---- memory per key -----------------------------------------------------------

struct Memory {
    ours_u64: f64,
    ours_str: f64,
    governor_u64: f64,
    governor_str: f64,
}

fn memory_per_key() -> Memory {
    let n = 1_000_000;
    let u64s = u64_keys(n);
    let strs = str_keys(n);
    let per_key = |before: isize| (live_bytes() - before) as f64 / n as f64;

    let before = live_bytes();
    let ours = Limiter::new(ours_store(n), SystemClock::default());
    run_ours::<u64, u64>(&ours, &u64s, 0, n as u64);
    assert_eq!(ours.store().len(), n, "every key has its own cell");
    let ours_u64 = per_key(before);
    drop(ours);

    let before = live_bytes();
    let ours = Limiter::new(ours_store(n), SystemClock::default());
    run_ours::<str, String>(&ours, &strs, 0, n as u64);
    let ours_str = per_key(before);
    drop(ours);

    let before = live_bytes();
    let gov = governor::<u64>();
    run_governor(&gov, &u64s, 0, n as u64);
    let governor_u64 = per_key(before);
    drop(gov);

    // governor owns its keys: clone them in, as a service would.
    let before = live_bytes();
    let gov = governor::<String>();
    for k in &strs {
        let _ = gov.check_key(&k.clone());
    }
    let governor_str = per_key(before);
    drop(gov);

    Memory {
        ours_u64,
        ours_str,
        governor_u64,
        governor_str,
    }
}

// ---- interleaved A/B: the verdicts ---------------------------------------------

/// Alternates `rounds` blocks of `block` decisions between `a` and `b`.
/// Returns the median ns per decision of each and the median of the
/// per-round ratios `a/b`. Pairing adjacent blocks cancels the slow drift of
/// a shared machine, which separate criterion runs, seconds apart, pick up as
/// a difference between the contenders.
fn interleaved(
    rounds: usize,
    block: u64,
    mut a: impl FnMut(usize, u64) -> Duration,
    mut b: impl FnMut(usize, u64) -> Duration,
) -> (f64, f64, f64) {
    let (mut ta, mut tb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut pos = 0;
    for _ in 0..rounds {
        let x = a(pos, block).as_nanos() as f64 / block as f64;
        let y = b(pos, block).as_nanos() as f64 / block as f64;
        ta.push(x);
        tb.push(y);
        ratios.push(x / y);
        pos += block as usize;
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(|x, y| x.total_cmp(y));
        v[v.len() / 2]
    };
    (med(ta), med(tb), med(ratios))
}

const AB_ROUNDS: usize = 41;
const AB_BLOCK: u64 = 100_000;

fn ab_row(scenario: &str, target: f64, ours: f64, gov: f64, ratio: f64) {
    let verdict = if ratio <= target { "met" } else { "MISSED" };
    println!(
        "{scenario:<28} {ours:>10.1} {gov:>10.1} {ratio:>6.2}x {:>8}  {verdict}",
        format!("<={target}x")
    );
}

/// Wraps a single-threaded block runner into one that runs the block on two
/// threads at once (from two distant key positions) and reports wall time / 2:
/// the aggregate time per decision, comparable with the 1-thread figure.
fn on_two_threads(n: usize, run: impl Fn(usize, u64) -> Duration + Sync) -> impl FnMut(usize, u64) -> Duration {
    move |p, i| {
        std::thread::scope(|s| {
            let t0 = Instant::now();
            let x = s.spawn(|| run(p, i));
            let y = s.spawn(|| run(p + n / 2, i));
            x.join().unwrap();
            y.join().unwrap();
            t0.elapsed() / 2
        })
    }
}

/// One key set: 1 thread (with the target), 2 threads, and our scaling.
fn ab_scenario<K, Q>(label: &str, target: f64, keys: &[Q])
where
    K: std::hash::Hash + ?Sized,
    Q: std::borrow::Borrow<K> + std::hash::Hash + Eq + Clone + Send + Sync,
{
    let n = keys.len();
    let ours = Limiter::new(ours_store(n), SystemClock::default());
    let gov = governor::<Q>();
    run_ours::<K, Q>(&ours, keys, 0, n as u64);
    run_governor(&gov, keys, 0, n as u64);
    let ours_1 = |p, i| run_ours::<K, Q>(&ours, keys, p, i);
    let gov_1 = |p, i| run_governor(&gov, keys, p, i);

    let (a1, b1, r1) = interleaved(AB_ROUNDS, AB_BLOCK, ours_1, gov_1);
    ab_row(&format!("{label}, 1 thread"), target, a1, b1, r1);
    let (a2, b2, r2) = interleaved(AB_ROUNDS, AB_BLOCK, on_two_threads(n, ours_1), on_two_threads(n, gov_1));
    println!(
        "{:<28} {a2:>10.1} {b2:>10.1} {r2:>6.2}x {:>8}",
        format!("{label}, 2 threads"),
        "-"
    );
    // Scaling: 1-thread time / 2-thread aggregate time, per adjacent pair.
    let (_, _, scale) = interleaved(AB_ROUNDS, AB_BLOCK, ours_1, on_two_threads(n, ours_1));
    let (_, _, g_scale) = interleaved(AB_ROUNDS, AB_BLOCK, gov_1, on_two_threads(n, gov_1));
    let verdict = if n < 1_000_000 {
        ""
    } else if scale >= 1.6 {
        "met (target >=1.6x)"
    } else {
        "MISSED (target >=1.6x)"
    };
    println!(
        "{:<28} 2 threads give {scale:.2}x the 1-thread throughput (governor {g_scale:.2}x) {verdict}",
        format!("{label}, scaling"),
    );
}

/// Issue 15's harder case: 1M distinct 24-byte keys in random order, every
/// one already present, against governor and against the floor, each pair
/// interleaved.
fn floor_summary() {
    const N: usize = 1_000_000;
    println!();
    println!(
        "=== 1M str24 keys, random order, all present (issue 15): interleaved A/B, {AB_ROUNDS} blocks of {AB_BLOCK}, \
         median ns per decision ==="
    );
    let keys = str_keys_random(N);
    let quota = ours_quota();
    let ours = Limiter::new(ours_store(N), SystemClock::default());
    let gov = governor::<String>();
    let floor = Floor::new(N, &quota);
    run_ours::<str, String>(&ours, &keys, 0, N as u64);
    run_governor(&gov, &keys, 0, N as u64);
    run_floor::<str, String>(&floor, &keys, 0, N as u64);
    let ours_1 = |p, i| run_ours::<str, String>(&ours, &keys, p, i);
    let (a, g, r) = interleaved(AB_ROUNDS, AB_BLOCK, ours_1, |p, i| run_governor(&gov, &keys, p, i));
    println!(
        "{:<28} {:>10} {:>10} {:>7} {:>8}  verdict",
        "A vs B", "A", "B", "A/B", "target"
    );
    ab_row("ratelimit vs governor", 0.55, a, g, r);
    let (a, f, r) = interleaved(AB_ROUNDS, AB_BLOCK, ours_1, |p, i| {
        run_floor::<str, String>(&floor, &keys, p, i)
    });
    ab_row("ratelimit vs floor", 1.15, a, f, r);
    let (f, g, r) = interleaved(
        AB_ROUNDS,
        AB_BLOCK,
        |p, i| run_floor::<str, String>(&floor, &keys, p, i),
        |p, i| run_governor(&gov, &keys, p, i),
    );
    println!("{:<28} {f:>10.1} {g:>10.1} {r:>6.2}x {:>8}", "floor vs governor", "-");
}

fn ab_summary() {
    println!();
    println!("=== interleaved A/B, {AB_ROUNDS} alternating blocks of {AB_BLOCK}: median ns per decision ===");
    println!(
        "{:<28} {:>10} {:>10} {:>7} {:>8}  verdict",
        "scenario", "ratelimit", "governor", "ratio", "target"
    );
    // One hot key: issue 15's target (issue 2's was 0.7x).
    for (n, label, target) in [
        (1usize, "1 key", 0.6),
        (10_000, "10k keys", 0.7),
        (1_000_000, "1M keys", 0.5),
    ] {
        ab_scenario::<u64, u64>(&format!("{label}, u64"), target, &u64_keys(n));
        ab_scenario::<str, String>(&format!("{label}, str24"), target, &str_keys(n));
    }
}

// ---- summary ------------------------------------------------------------------

fn summary(memory: &Memory) {
    println!();
    println!("=== criterion runs (sequential, seconds apart): median ns per decision ===");
    println!(
        "{:<28} {:>10} {:>10} {:>7} {:>8}  verdict",
        "scenario", "ratelimit", "governor", "ratio", "target"
    );
    let rows = [
        ("1 key, u64", 0.7),
        ("1 key, str24", 0.7),
        ("10k keys, u64", 0.7),
        ("10k keys, str24", 0.7),
        ("1M keys, u64", 0.5),
        ("1M keys, str24", 0.5),
        ("1M keys, u64, 2 threads", f64::NAN),
    ];
    for (scenario, target) in rows {
        let (Some(ours), Some(gov)) = (
            median(&format!("{scenario}/ratelimit")),
            median(&format!("{scenario}/governor")),
        ) else {
            continue;
        };
        let ratio = ours / gov;
        let (target_s, verdict) = if target.is_nan() {
            ("-".to_owned(), "")
        } else if ratio <= target {
            (format!("<={target}x"), "met")
        } else {
            (format!("<={target}x"), "MISSED")
        };
        println!("{scenario:<28} {ours:>10.1} {gov:>10.1} {ratio:>6.2}x {target_s:>8}  {verdict}");
    }
    if let (Some(one), Some(two)) = (
        median("1M keys, u64/ratelimit"),
        median("1M keys, u64, 2 threads/ratelimit"),
    ) {
        let scale = one / two;
        let verdict = if scale >= 1.6 { "met" } else { "MISSED" };
        println!("2-thread scaling over 1M u64 keys: {scale:.2}x single-thread throughput (target >=1.6x) {verdict}");
        if let (Some(g1), Some(g2)) = (
            median("1M keys, u64/governor"),
            median("1M keys, u64, 2 threads/governor"),
        ) {
            println!("  (governor: {:.2}x)", g1 / g2);
        }
    }
    if let (Some(q), Some(i)) = (median("clock/SystemClock"), median("clock/Instant")) {
        println!("clock: SystemClock::now {q:.1} ns, std Instant::now {i:.1} ns");
    }
    println!();
    println!("=== memory per key at 1M keys (bytes, allocator-counted) ===");
    let verdict = |b: f64| if b <= 40.0 { "met" } else { "MISSED" };
    println!(
        "u64 keys:      ratelimit {:>6.1}   governor {:>6.1}   target <=40 {}",
        memory.ours_u64,
        memory.governor_u64,
        verdict(memory.ours_u64)
    );
    println!(
        "24-byte keys:  ratelimit {:>6.1}   governor {:>6.1}   target <=40 {}",
        memory.ours_str,
        memory.governor_str,
        verdict(memory.ours_str)
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(40)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = clocks, single_thread, two_threads, stacked
}

fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench") && !std::env::args().any(|a| a == "--test" || a == "--list")
}

/// `ENGINE_BENCH_PROFILE=ours|floor|governor ENGINE_BENCH_N=<n>`: only `n`
/// decisions over the 1M random-order str24 keys (after one pass that
/// inserts them all), for `valgrind --tool=callgrind --cache-sim=yes`: run
/// with two values of `n` and divide the difference of the counts by the
/// difference of the `n`s for instructions and simulated cache misses per
/// decision (`docs/performance.md`).
fn profile_run(which: &str) {
    const N: usize = 1_000_000;
    let n: u64 = std::env::var("ENGINE_BENCH_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let keys = str_keys_random(N);
    match which {
        "floor" => {
            let floor = Floor::new(N, &ours_quota());
            run_floor::<str, String>(&floor, &keys, 0, N as u64);
            black_box(run_floor::<str, String>(&floor, &keys, 0, n));
        }
        "governor" => {
            let gov = governor::<String>();
            run_governor(&gov, &keys, 0, N as u64);
            black_box(run_governor(&gov, &keys, 0, n));
        }
        _ => {
            let ours = Limiter::new(ours_store(N), SystemClock::default());
            run_ours::<str, String>(&ours, &keys, 0, N as u64);
            black_box(run_ours::<str, String>(&ours, &keys, 0, n));
        }
    }
}

fn main() {
    if let Ok(which) = std::env::var("ENGINE_BENCH_PROFILE") {
        profile_run(&which);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    let memory = memory_per_key();
    // Summaries only under `cargo bench` (which passes `--bench`): `cargo
    // test --benches` (scripts/test) runs each bench once, a smoke test whose
    // timings mean nothing.
    if measuring() {
        summary(&memory);
        // `-- stacked` asks for the stacked rows only: the A/B against
        // governor takes minutes and is not about them.
        // `-- floor` the random-order comparison with the floor only.
        let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
        let only = |name: &str| filter.as_deref().is_some_and(|f| name.contains(f));
        if filter.is_none() || !(only("stacked") || only("floor")) {
            ab_summary();
        }
        if filter.is_none() || only("floor") {
            floor_summary();
        }
        if filter.is_none() || only("stacked") {
            stacked_summary();
        }
    }
}
