//! The fleet-wide gate (feature `redis`): a per-key limit shared by every
//! instance of a service, reconciled through a [`GlobalStore`] (Redis) by a
//! background loop, never on the request path.
//!
//! A request is admitted when the local GCRA admits it **and** the fleet's
//! estimated consumption of the key over a sliding window, plus this
//! instance's not-yet-pushed requests, plus the request's cost, fits the
//! fleet budget: the quota's rate over the window (`600/min` with a `10s`
//! window is 100 per window). The estimate is the
//! [`SlidingWindow`] over the current and the
//! previous epoch's fleet totals, as last pulled.
//!
//! Every `sync_interval`, one task per instance pushes this instance's
//! deltas (`INCRBY` + `PEXPIRE`) and pulls the two totals of every key active
//! recently (`MGET`), in pipelines. When a round fails (Redis down, slow, or
//! answering garbage), the gate goes **local-only** until a round succeeds:
//! requests never wait, and the fleet can then admit up to N times one
//! instance's limit. See `docs/global.md` for the overshoot model and the
//! exact failure behaviour.
//!
//! ```
//! use ratelimit::global::{FleetGate, GateSettings, MemoryGlobalStore};
//! use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
//! use std::time::Duration;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let clock = ManualClock::new();
//! let settings = GateSettings { window: Duration::from_secs(10), ..GateSettings::new(b"a fleet-wide secret, 16+ bytes") };
//! let gate = FleetGate::new(settings, &clock).unwrap();
//! let limiter = Limiter::new(MemoryStore::default(), clock.clone());
//! let quota = Quota::per_minute(600); // fleet budget: 100 per 10 s window
//! let store = MemoryGlobalStore::new(); // Redis in production: RedisStore
//! assert!(gate.check(&limiter, 0, &"user-1", &quota, 1).is_allowed());
//! gate.sync_once(&store, &clock).await.unwrap(); // what the background loop does
//! # });
//! ```

mod redis;
mod store;
mod table;

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use self::redis::{RedisSettings, RedisStore};
pub use store::{GlobalError, GlobalStore, ItemResult, MemoryGlobalStore, SyncItem, Totals};
use table::{pack, unpack, Slot, Table, LOW};

use crate::store::CellKey;
use crate::window::SlidingWindow;
use crate::{Clock, Decision, Denial, Limiter, Quota, Store};

/// Gauge: 1 while the gate is local-only (the last sync round failed).
pub const DEGRADED: &str = "ratelimit_global_degraded";
/// Sync rounds, by `result` (`ok`, `error`).
pub const SYNC_ROUNDS: &str = "ratelimit_global_sync_rounds_total";
/// Duration of successful sync rounds.
pub const SYNC_SECONDS: &str = "ratelimit_global_sync_seconds";
/// Keys the gate could not track (table full): limited locally only.
pub const UNTRACKED: &str = "ratelimit_global_untracked_total";
/// Keys whose Redis value was unusable in a round.
pub const BAD_VALUES: &str = "ratelimit_global_bad_values_total";

/// The gate's settings.
#[derive(Clone)]
pub struct GateSettings {
    /// The sliding window (and epoch) length.
    pub window: Duration,
    /// How often the sync loop runs.
    pub sync_interval: Duration,
    /// Keys tracked per epoch; beyond, new keys are limited locally only
    /// (and counted in `ratelimit_global_untracked_total`). Memory:
    /// 3 tables of `2 * max_keys` (rounded up to a power of two) slots of
    /// 32 bytes.
    pub max_keys: usize,
    /// Rounds a key stays synced after its last request.
    pub idle_rounds: u64,
    /// The longest backoff after failed rounds.
    pub max_backoff: Duration,
    /// The secret the fleet ids of keys are derived from: the same on every
    /// instance, at least 16 bytes.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for GateSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateSettings")
            .field("window", &self.window)
            .field("sync_interval", &self.sync_interval)
            .field("max_keys", &self.max_keys)
            .field("idle_rounds", &self.idle_rounds)
            .field("max_backoff", &self.max_backoff)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl GateSettings {
    /// Defaults (10 s window, 100 ms sync, 50,000 keys) with this secret.
    pub fn new(secret: &[u8]) -> GateSettings {
        GateSettings {
            window: Duration::from_secs(10),
            sync_interval: Duration::from_millis(100),
            max_keys: 50_000,
            idle_rounds: 20,
            max_backoff: Duration::from_secs(5),
            secret: secret.to_vec(),
        }
    }
}

/// Why a gate could not be built.
#[derive(Debug, Clone)]
pub struct GateError(String);

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GateError {}

/// Keyed, fleet-stable hashing of keys: the folded-multiply construction of
/// ahash's portable path (and foldhash), under four 64-bit keys derived from
/// the shared secret with SipHash. Pure integer arithmetic, so every
/// instance computes the same id whatever its CPU; without the secret, ids
/// cannot be computed (or a client value guessed from one). A few
/// nanoseconds, where SipHash would be four times that on the request path.
#[derive(Clone)]
pub(crate) struct FleetHasher {
    keys: [u64; 4],
}

impl FleetHasher {
    fn new(secret: &[u8]) -> FleetHasher {
        let derive = |label: &[u8]| {
            let mut h = siphasher::sip::SipHasher24::new_with_keys(0, 0);
            h.write(label);
            h.write(secret);
            h.finish()
        };
        FleetHasher {
            keys: [
                derive(b"ratelimit fleet k0"),
                derive(b"ratelimit fleet k1"),
                derive(b"ratelimit fleet k2"),
                derive(b"ratelimit fleet k3"),
            ],
        }
    }

    pub(crate) fn hasher(&self) -> FleetHash {
        FleetHash {
            state: self.keys[0],
            pad: self.keys[1],
            extra: [self.keys[2], self.keys[3]],
        }
    }
}

const MULTIPLE: u64 = 6_364_136_223_846_793_005;

#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// The hasher of a fleet id (see [`FleetHasher`]).
pub(crate) struct FleetHash {
    state: u64,
    pad: u64,
    extra: [u64; 2],
}

impl FleetHash {
    #[inline(always)]
    fn update(&mut self, v: u64) {
        self.state = folded_multiply(v ^ self.state, MULTIPLE);
    }

    #[inline(always)]
    fn large_update(&mut self, v: u128) {
        let combined = folded_multiply((v as u64) ^ self.extra[0], ((v >> 64) as u64) ^ self.extra[1]);
        self.state = (self.state.wrapping_add(self.pad) ^ combined).rotate_left(23);
    }
}

impl Hasher for FleetHash {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Little-endian chunks of 16, then the tail, then the length: the
        // same on every platform.
        let mut chunks = bytes.chunks_exact(16);
        for c in &mut chunks {
            let mut b = [0u8; 16];
            b.copy_from_slice(c);
            self.large_update(u128::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 16];
            b[..rest.len()].copy_from_slice(rest);
            self.large_update(u128::from_le_bytes(b));
        }
        self.update(bytes.len() as u64);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.update(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.update(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.update(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.update(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.update(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let rot = (self.state & 63) as u32;
        folded_multiply(self.state, self.pad).rotate_left(rot)
    }
}

/// What one sync round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Keys in the round.
    pub keys: usize,
    /// Units pushed.
    pub pushed: u64,
    /// Keys whose totals were refreshed.
    pub pulled: usize,
    /// Keys whose stored values were unusable.
    pub bad_values: usize,
}

/// The state of a gate, for health checks and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateStatus {
    /// Local-only: the last sync round failed.
    pub degraded: bool,
    /// Successful rounds so far.
    pub rounds: u64,
    /// Failed rounds so far.
    pub failures: u64,
    /// Keys seen that the table could not track.
    pub untracked: u64,
}

/// The fleet-wide gate: see the [module docs](self).
pub struct FleetGate {
    window: SlidingWindow,
    window_ns: u64,
    tables: [Table; 3],
    hasher: FleetHasher,
    /// Wall clock minus the monotonic clock, in nanoseconds (epochs are wall
    /// time, so instances agree on them; reading the wall clock per request
    /// would cost a system call's worth).
    offset: AtomicI64,
    /// The latest epoch seen, so most requests find theirs with a multiply
    /// and a compare instead of a division (a hint: checked every time).
    epoch_hint: AtomicU64,
    degraded: AtomicBool,
    round: AtomicU64,
    failures: AtomicU64,
    untracked: AtomicU64,
    settings: GateSettings,
}

impl std::fmt::Debug for FleetGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetGate")
            .field("settings", &self.settings)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

/// Set in every fleet id, so none is 0 (an empty slot); the table places
/// keys by the high half.
const NONZERO: u64 = 1;

/// The largest window (the sliding estimate's arithmetic stays exact).
const MAX_WINDOW: Duration = Duration::from_secs(3600);

impl FleetGate {
    /// A gate with these settings; `clock` is the limiter's clock.
    pub fn new(settings: GateSettings, clock: &impl Clock) -> Result<FleetGate, GateError> {
        let window = SlidingWindow::new(settings.window).map_err(|e| GateError(format!("window: {e}")))?;
        if settings.window > MAX_WINDOW {
            return Err(GateError(format!("window: at most {MAX_WINDOW:?}")));
        }
        if settings.secret.len() < 16 {
            return Err(GateError(
                "secret: at least 16 bytes, the same on every instance".to_owned(),
            ));
        }
        if settings.max_keys == 0 || settings.max_keys > 1 << 26 {
            return Err(GateError("max_keys: from 1 to 67108864".to_owned()));
        }
        if settings.sync_interval.is_zero() || settings.sync_interval * 2 > settings.window {
            return Err(GateError(
                "sync_interval: above zero and at most half the window".to_owned(),
            ));
        }
        let capacity = settings.max_keys.saturating_mul(2);
        let gate = FleetGate {
            window_ns: u64::try_from(settings.window.as_nanos()).unwrap_or(u64::MAX),
            window,
            tables: [Table::new(capacity), Table::new(capacity), Table::new(capacity)],
            hasher: FleetHasher::new(&settings.secret),
            offset: AtomicI64::new(0),
            epoch_hint: AtomicU64::new(0),
            degraded: AtomicBool::new(false),
            round: AtomicU64::new(1),
            failures: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
            settings,
        };
        gate.refresh_offset(clock);
        let (epoch, _) = gate.epoch_of(gate.wall(clock.now()));
        gate.tables[(epoch % 3) as usize].reset(epoch);
        gate.tables[((epoch + 1) % 3) as usize].reset(epoch + 1);
        Ok(gate)
    }

    /// The settings.
    pub fn settings(&self) -> &GateSettings {
        &self.settings
    }

    /// Health and counts.
    pub fn status(&self) -> GateStatus {
        GateStatus {
            degraded: self.degraded.load(Ordering::Relaxed),
            rounds: self.round.load(Ordering::Relaxed) - 1,
            failures: self.failures.load(Ordering::Relaxed),
            untracked: self.untracked.load(Ordering::Relaxed),
        }
    }

    fn refresh_offset(&self, clock: &impl Clock) {
        let mono = clock.now() as i128;
        let wall = clock.wall_nanos() as i128;
        let offset = (wall - mono).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        self.offset.store(offset, Ordering::Relaxed);
    }

    fn wall(&self, now: u64) -> u64 {
        (now as i128 + i128::from(self.offset.load(Ordering::Relaxed))).clamp(0, i128::from(u64::MAX)) as u64
    }

    /// The epoch of a wall time and the nanoseconds into it.
    #[inline]
    fn epoch_of(&self, wall: u64) -> (u64, u64) {
        let hint = self.epoch_hint.load(Ordering::Relaxed);
        let start = hint.wrapping_mul(self.window_ns);
        if let Some(into) = wall.checked_sub(start).filter(|&d| d < self.window_ns) {
            return (hint, into);
        }
        let epoch = self.window.epoch(wall);
        self.epoch_hint.store(epoch, Ordering::Relaxed);
        (epoch, wall - epoch * self.window_ns)
    }

    /// The fleet id of `key` on `route`: the same on every instance with the
    /// same secret.
    pub fn fleet_id<K: Hash + ?Sized>(&self, route: u32, key: &K) -> u64 {
        let mut h = self.hasher.hasher();
        route.hash(&mut h);
        key.hash(&mut h);
        h.finish() | NONZERO
    }

    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn hasher(&self) -> &FleetHasher {
        &self.hasher
    }

    /// Decides a request of `cost` by `key` on `route`: the local limiter,
    /// then the fleet budget. A request refused by the fleet is denied with
    /// [`Denial::FleetLimited`] and charges nothing locally.
    pub fn check<K: Hash + ?Sized, S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        route: u32,
        key: &K,
        quota: &Quota,
        cost: u32,
    ) -> Decision {
        let mut h = self.hasher.hasher();
        route.hash(&mut h);
        key.hash(&mut h);
        let id = h.finish();
        // The local cell takes the hash as it is (the store uses all its
        // bits); the fleet id sets the top bit (never 0).
        self.check_id(limiter, route, CellKey::new(id, route), id, quota, cost)
    }

    /// [`check`](Self::check) with the local cell and the fleet id already
    /// computed (the HTTP runtime derives the fleet id from the raw key).
    pub fn check_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        route: u32,
        cell: CellKey,
        fleet_id: u64,
        quota: &Quota,
        cost: u32,
    ) -> Decision {
        limiter.store().prefetch(cell);
        let fleet_id = fleet_id | NONZERO;
        // The epoch rarely changes: start loading the likely slot too, before
        // the clock read.
        self.tables[(self.epoch_hint.load(Ordering::Relaxed) % 3) as usize].prefetch(fleet_id);
        let now = limiter.clock().now();
        let wall = self.wall(now);
        let (epoch, elapsed) = self.epoch_of(wall);
        let table = &self.tables[(epoch % 3) as usize];
        let slot = if table.epoch.load(Ordering::Acquire) == epoch {
            let slot = table.slot(fleet_id, |fresh| {
                fresh.touched.store(touched(route, 0), Ordering::Relaxed);
                self.carry_over(fresh, fleet_id, epoch);
            });
            if slot.is_none() {
                self.untracked.fetch_add(1, Ordering::Relaxed);
            }
            slot
        } else {
            // The sync loop has not prepared this epoch (it is not running,
            // or far behind): local only.
            None
        };
        let Some(slot) = slot else {
            return limiter.check_cell_at(cell, quota, cost, now);
        };
        // Requested this round (denied or not): keep its totals fresh.
        let now_touched = touched(route, self.round.load(Ordering::Relaxed));
        if slot.touched.load(Ordering::Relaxed) != now_touched {
            slot.touched.store(now_touched, Ordering::Relaxed);
        }
        let fleet = if self.degraded.load(Ordering::Relaxed) {
            None
        } else {
            Some(self.fleet_room(slot, elapsed, quota, cost))
        };
        match fleet {
            Some(Room::Denied { retry_ns }) => {
                // Report the local numbers (a zero-cost look charges
                // nothing), denied by the fleet.
                let mut d = limiter.check_cell_at(cell, quota, 0, now);
                d.allowed = false;
                d.denial = Some(Denial::FleetLimited);
                d.slack_ns = 0;
                d.retry_after_ns = retry_ns.max(d.retry_after_ns);
                d
            }
            room => {
                let mut d = limiter.check_cell_at(cell, quota, cost, now);
                if d.allowed {
                    slot.pending.fetch_add(u64::from(cost), Ordering::Relaxed);
                    // Report the tighter of the local and the fleet room.
                    if let Some(Room::Allowed { scaled_slack, window }) = room {
                        if scaled_slack < u128::from(d.slack_ns) * window {
                            d.slack_ns = u64::try_from(scaled_slack / window).unwrap_or(u64::MAX);
                        }
                    }
                }
                d
            }
        }
    }

    /// A key's first request in an epoch: its totals start from what the
    /// previous epoch's slot knew (pulled current, plus this instance's own
    /// requests not yet confirmed), as the previous total.
    fn carry_over(&self, fresh: &Slot, fleet_id: u64, epoch: u64) {
        let prev_table = &self.tables[((epoch + 2) % 3) as usize];
        if epoch == 0 || prev_table.epoch.load(Ordering::Acquire) != epoch - 1 {
            return;
        }
        if let Some(old) = prev_table.find(fleet_id) {
            let (_, cur) = unpack(old.fleet.load(Ordering::Relaxed));
            let (unconfirmed, unpushed) = unpack(old.pending.load(Ordering::Relaxed));
            fresh
                .fleet
                .store(pack(cur + unconfirmed + unpushed, 0), Ordering::Relaxed);
        }
    }

    /// Whether `cost` more fits the fleet budget, exactly in integers:
    /// `prev * (W - e) / W + cur + mine + cost <= W / T`, multiplied out.
    fn fleet_room(&self, slot: &Slot, elapsed: u64, quota: &Quota, cost: u32) -> Room {
        let w = u128::from(self.window_ns);
        let e = u128::from(elapsed.min(self.window_ns));
        let t = u128::from(quota.interval_ns().max(1));
        let (prev, cur) = unpack(slot.fleet.load(Ordering::Relaxed));
        let (unconfirmed, unpushed) = unpack(slot.pending.load(Ordering::Relaxed));
        let mine = u128::from(unconfirmed + unpushed);
        let used = u128::from(prev) * (w - e) + (u128::from(cur) + mine) * w;
        let need = used + u128::from(cost) * w;
        // Budget W/T scaled by W*T: W*W. The products stay far below 2^128
        // for windows up to an hour and any quota (T < 2^64, counts < 2^34).
        let budget = w * w;
        let scaled = need.saturating_mul(t);
        // A window shorter than the request's cost in emission intervals
        // (a slow profile: `5/min` over 10 s is 0.83) would give a budget
        // that never fits, refusing even an idle fleet: the budget is at
        // least the cost, that is, a request always fits when nothing else
        // is counted (see docs/global.md).
        if scaled <= budget || used == 0 {
            let budget = budget.max(scaled);
            // Room left after this request, scaled by W: (budget - scaled) / W
            // is in nanoseconds of the quota's emission interval (divided
            // only when it is tighter than the local room).
            return Room::Allowed {
                scaled_slack: budget - scaled,
                window: w,
            };
        }
        // Denied: when will it fit? The previous epoch's weight fades
        // linearly; past the epoch, this epoch's total becomes the previous.
        let budget_units = (self.window_ns as f64 / t as f64).max(f64::from(cost));
        let rest = budget_units - (cur as f64 + mine as f64 + f64::from(cost));
        let w_f = self.window_ns as f64;
        let e_f = e as f64;
        let retry = if rest >= 0.0 && prev > 0 {
            // prev * (W - e') / W <= rest  =>  e' >= W - rest * W / prev
            (w_f - rest * w_f / prev as f64 - e_f).max(0.0)
        } else {
            // Next epoch: (cur + mine) fades from there.
            let next_prev = cur as f64 + mine as f64;
            let room = budget_units - f64::from(cost);
            let into_next = if next_prev > 0.0 && room >= 0.0 {
                (w_f - room * w_f / next_prev).max(0.0)
            } else {
                0.0
            };
            (w_f - e_f) + into_next
        };
        Room::Denied {
            retry_ns: (retry as u64).clamp(1_000_000, self.window_ns.saturating_mul(2)),
        }
    }

    /// One sync round: push this instance's deltas, pull fleet totals of the
    /// keys active recently, prepare the next epoch's table. What the
    /// background loop ([`spawn_sync`](Self::spawn_sync)) runs; tests call it
    /// directly.
    pub async fn sync_once<G: GlobalStore, C: Clock>(&self, store: &G, clock: &C) -> Result<SyncReport, GlobalError> {
        self.refresh_offset(clock);
        let now = clock.now();
        let (epoch, _) = self.epoch_of(self.wall(now));
        let round = self.round.load(Ordering::Relaxed);
        // The next epoch's table held epoch - 2, drained long ago.
        let next = &self.tables[((epoch + 1) % 3) as usize];
        if next.epoch.load(Ordering::Acquire) != epoch + 1 {
            next.reset(epoch + 1);
        }
        let current = &self.tables[(epoch % 3) as usize];
        if current.epoch.load(Ordering::Acquire) != epoch {
            // Far behind (a long outage): start this epoch afresh.
            current.reset(epoch);
        }
        let previous = &self.tables[((epoch + 2) % 3) as usize];
        let mut items = Vec::new();
        let mut slots: Vec<(&Slot, u64)> = Vec::new();
        if let Some(before) = epoch.checked_sub(1) {
            if previous.epoch.load(Ordering::Acquire) == before {
                self.collect(previous, before, false, round, &mut items, &mut slots);
            }
        }
        self.collect(current, epoch, true, round, &mut items, &mut slots);
        let ttl = self.settings.window * 3;
        let started = std::time::Instant::now();
        let outcome = store.sync(&items, ttl).await;
        self.round.fetch_add(1, Ordering::Relaxed);
        let results = match outcome {
            Ok(r) if r.len() == items.len() => r,
            Ok(r) => {
                return Err(self.fail(GlobalError::new(format!(
                    "store answered {} results for {} keys",
                    r.len(),
                    items.len()
                ))))
            }
            Err(e) => {
                if e.is_unsent() {
                    // Nothing reached the store: hand the deltas back, to go
                    // in the next round (they cannot be counted twice).
                    for (slot, delta) in &slots {
                        if *delta > 0 {
                            update(&slot.pending, |(unconfirmed, unpushed)| {
                                (unconfirmed.saturating_sub(*delta), unpushed + delta)
                            });
                        }
                    }
                }
                return Err(self.fail(e));
            }
        };
        let mut report = SyncReport {
            keys: items.len(),
            ..SyncReport::default()
        };
        for (((slot, delta), result), item) in slots.iter().zip(&results).zip(&items) {
            // Totals first, then the confirmation: a reader in between counts
            // the delta twice (conservative), never not at all.
            match result.totals {
                Totals::Known { previous, current } => {
                    // The pulled current includes what was just pushed.
                    slot.fleet.store(pack(previous, current), Ordering::Relaxed);
                    report.pulled += 1;
                }
                Totals::Unknown if result.pushed && *delta > 0 => {
                    // Pushed but not pulled (a previous-epoch drain, or an
                    // unusable reply): add it to the known current total.
                    update(&slot.fleet, |(prev, cur)| (prev, cur + delta));
                }
                Totals::Unknown => {}
            }
            if result.pushed && *delta > 0 {
                // Confirmed: no longer this instance's own to count.
                update(&slot.pending, |(unconfirmed, unpushed)| {
                    (unconfirmed.saturating_sub(*delta), unpushed)
                });
                report.pushed += delta;
            }
            let unusable_pull = item.pull && result.totals == Totals::Unknown;
            if (!result.pushed && *delta > 0) || unusable_pull {
                report.bad_values += 1;
            }
        }
        if report.bad_values > 0 {
            metrics::counter!(BAD_VALUES).increment(report.bad_values as u64);
        }
        if self.degraded.swap(false, Ordering::Relaxed) {
            tracing::info!(target: "ratelimit", "fleet gate: sync recovered, fleet-wide limits apply again");
        }
        metrics::gauge!(DEGRADED).set(0.0);
        metrics::counter!(SYNC_ROUNDS, "result" => "ok").increment(1);
        metrics::histogram!(SYNC_SECONDS).record(started.elapsed().as_secs_f64());
        Ok(report)
    }

    /// Adds a table's keys to a round: those with unpushed requests, and
    /// (for the current epoch) those requested in the last `idle_rounds`.
    fn collect<'a>(
        &self,
        table: &'a Table,
        table_epoch: u64,
        pull: bool,
        round: u64,
        items: &mut Vec<SyncItem>,
        slots: &mut Vec<(&'a Slot, u64)>,
    ) {
        for (key, slot) in table.occupied() {
            let delta = take_unpushed(slot);
            let (route, last) = unpack(slot.touched.load(Ordering::Relaxed));
            let active = pull && last + self.settings.idle_rounds >= round & LOW;
            if delta > 0 || active {
                items.push(SyncItem {
                    route: route as u32,
                    key,
                    epoch: table_epoch,
                    delta,
                    pull: active,
                });
                slots.push((slot, delta));
            }
        }
    }

    fn fail(&self, e: GlobalError) -> GlobalError {
        self.failures.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(SYNC_ROUNDS, "result" => "error").increment(1);
        metrics::gauge!(DEGRADED).set(1.0);
        if !self.degraded.swap(true, Ordering::Relaxed) {
            tracing::warn!(target: "ratelimit", error = %e, "fleet gate: sync failed, limiting locally only until it recovers");
        }
        e
    }

    /// Spawns the sync loop on the current tokio runtime: a round every
    /// `sync_interval` (one at a time), each under `timeout`; after a
    /// failure, exponential backoff with jitter up to `max_backoff`. The task
    /// ends when the gate is dropped.
    pub fn spawn_sync<G: GlobalStore, C: Clock + Clone + 'static>(
        self: &Arc<Self>,
        store: G,
        clock: C,
        timeout: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let interval = self.settings.sync_interval;
        let max_backoff = self.settings.max_backoff;
        metrics::gauge!(DEGRADED).set(0.0);
        tokio::spawn(async move {
            let mut failures = 0u32;
            let mut jitter = Jitter::new();
            // The first failure logs in `fail`; repeats at most every 10 s.
            let mut last_log = std::time::Instant::now();
            let mut suppressed = 0u64;
            loop {
                let wait = if failures == 0 {
                    interval
                } else {
                    let backoff = interval.saturating_mul(1 << failures.min(16)).min(max_backoff);
                    backoff.mul_f64(jitter.next_between(0.5, 1.5))
                };
                tokio::time::sleep(wait).await;
                let Some(gate) = weak.upgrade() else { return };
                let result = match tokio::time::timeout(timeout, gate.sync_once(&store, &clock)).await {
                    Ok(r) => r,
                    Err(_) => Err(gate.fail(GlobalError::new(format!("sync round took longer than {timeout:?}")))),
                };
                match result {
                    Ok(_) => failures = 0,
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        // At most one line every 10 s while it keeps failing.
                        if last_log.elapsed() >= Duration::from_secs(10) {
                            tracing::warn!(target: "ratelimit", error = %e, failures, suppressed, "fleet gate: sync still failing");
                            last_log = std::time::Instant::now();
                            suppressed = 0;
                        } else {
                            suppressed += 1;
                        }
                    }
                }
            }
        })
    }
}

/// The `touched` word: the route (high half) and the round of the last
/// request (low half).
fn touched(route: u32, round: u64) -> u64 {
    (u64::from(route) << 32) | (round & LOW)
}

/// Applies `f` to a packed (high, low) pair atomically, saturating each
/// half at 32 bits.
/// Applies `f` to a packed (high, low) pair atomically, saturating each
/// half at 32 bits; returns the pair before.
fn update(cell: &AtomicU64, f: impl Fn((u64, u64)) -> (u64, u64)) -> (u64, u64) {
    let before = cell.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
        let (high, low) = f(unpack(v));
        Some(pack(high, low))
    });
    // The closure always answers, so this is always `Ok`.
    unpack(before.unwrap_or_else(|v| v))
}

/// Takes the key's unpushed requests for a push: moves them from the low
/// half (unpushed) to the high half (unconfirmed) in one step, so they are
/// counted throughout.
fn take_unpushed(slot: &Slot) -> u64 {
    update(&slot.pending, |(unconfirmed, unpushed)| (unconfirmed + unpushed, 0)).1
}

enum Room {
    Allowed { scaled_slack: u128, window: u128 },
    Denied { retry_ns: u64 },
}

/// xorshift jitter for the backoff (no need for a cryptographic RNG).
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Jitter(seed | 1)
    }
    fn next_between(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, MemoryStore};

    fn gate(clock: &ManualClock) -> FleetGate {
        let settings = GateSettings {
            window: Duration::from_secs(10),
            ..GateSettings::new(b"unit test fleet secret, 32 bytes")
        };
        FleetGate::new(settings, clock).unwrap()
    }

    #[test]
    fn a_profile_slower_than_the_window_is_not_refused_by_an_idle_fleet() {
        let clock = ManualClock::new();
        let g = gate(&clock);
        let limiter = Limiter::new(MemoryStore::default(), clock.clone());
        // 5/min over a 10 s window: 0.83 per window; one still fits.
        let slow = Quota::per_minute(5);
        assert!(g.check(&limiter, 1, "k", &slow, 1).is_allowed());
        let second = g.check(&limiter, 1, "k", &slow, 1);
        assert_eq!(second.denial(), Some(Denial::FleetLimited));
        assert!(second.retry_after() > Duration::ZERO);
    }

    #[test]
    fn the_fleet_budget_is_the_rate_over_the_window() {
        let clock = ManualClock::new();
        let g = gate(&clock);
        let limiter = Limiter::new(MemoryStore::default(), clock.clone());
        // 600/min with burst 1000 locally; 100 per 10 s fleet-wide.
        let q = Quota::per_minute(600).with_burst(1000);
        let admitted = (0..150)
            .filter(|_| g.check(&limiter, 1, "k", &q, 1).is_allowed())
            .count();
        assert_eq!(admitted, 100);
        // A fleet denial charges nothing locally and says why.
        let d = g.check(&limiter, 1, "k", &q, 1);
        assert_eq!(d.denial(), Some(Denial::FleetLimited));
        assert_eq!(g.status().untracked, 0);
    }

    #[test]
    fn fleet_ids_are_stable_and_keyed() {
        let clock = ManualClock::new();
        let a = gate(&clock);
        let b = gate(&clock);
        assert_eq!(a.fleet_id(1, "user"), b.fleet_id(1, "user"), "same secret, same id");
        assert_ne!(a.fleet_id(1, "user"), a.fleet_id(2, "user"), "routes differ");
        let other = FleetGate::new(
            GateSettings {
                window: Duration::from_secs(10),
                ..GateSettings::new(b"another secret of 32 bytes......")
            },
            &clock,
        )
        .unwrap();
        assert_ne!(
            a.fleet_id(1, "user"),
            other.fleet_id(1, "user"),
            "another secret, another id"
        );
        assert!(FleetGate::new(GateSettings::new(b"short"), &clock).is_err());
    }
}
