//! The request path of the fleet gate: one table lookup, one cache line, no
//! I/O, no lock.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::history::History;
use super::ids::FleetHasher;
use super::names::{set_degraded, Reason};
use super::settings::{GateError, GateSettings};
use super::table::{Closed, Pending, Slot, Table, LOW};
use crate::store::CellKey;
use crate::window::{Fit, SlidingWindow};
use crate::{Check, Clock, Decision, Limiter, Quota, Store};

/// The state of a gate, for health checks and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateStatus {
    /// The whole gate is local-only: the last sync round failed, or the
    /// sync loop stopped or stalled.
    pub degraded: bool,
    /// Keys limited locally only because their part of the last round
    /// failed (an error reply, a value of the wrong type, a cluster node
    /// down), while the rest of the fleet limit holds.
    pub degraded_keys: u64,
    /// Successful rounds so far.
    pub rounds: u64,
    /// Failed rounds so far.
    pub failures: u64,
    /// Keys seen that the table could not track.
    pub untracked: u64,
}

/// Whether the fleet limit is in force: what a readiness probe asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetHealth {
    /// Every tracked key is limited fleet-wide.
    InForce,
    /// The fleet limit holds except for these keys, limited locally only.
    Partial {
        /// Keys limited locally only.
        local_only_keys: u64,
    },
    /// Every key is limited locally only (Redis unreachable or failing, or
    /// the sync loop not running): the fleet can admit up to N times one
    /// instance's limit.
    LocalOnly,
}

/// The fleet-wide gate: see the [module docs](super).
pub struct FleetGate {
    pub(super) window: SlidingWindow,
    pub(super) tables: [Table; 3],
    pub(super) hasher: FleetHasher,
    /// Wall clock minus the monotonic clock, in nanoseconds (slices are wall
    /// time, so instances agree on them; reading the wall clock per request
    /// would cost a system call's worth).
    offset: AtomicI64,
    /// The latest slice seen and its epoch, so most requests place
    /// themselves with a multiply and a compare instead of two divisions
    /// (hints: checked every time).
    slice_hint: AtomicU64,
    epoch_hint: AtomicU64,
    /// The last round failed as a whole.
    pub(super) degraded: AtomicBool,
    /// The sync loop stopped (panicked, aborted) or has not completed a
    /// round for longer than it should.
    pub(super) stalled: AtomicBool,
    /// Monotonic time (the limiter's clock) until which the last
    /// successful round's totals may be used.
    fresh_until: AtomicU64,
    /// Without a successful round for this long, the gate is local-only.
    stale_after_ns: AtomicU64,
    /// How long after a slice ends every instance has pushed into it.
    pub(super) settle_ns: AtomicU64,
    pub(super) degraded_keys: AtomicU64,
    pub(super) round: AtomicU64,
    pub(super) failures: AtomicU64,
    untracked: AtomicU64,
    /// The sync loop's own state (never touched by requests).
    pub(super) history: Mutex<History>,
    pub(super) last_error: Mutex<Option<String>>,
    pub(super) settings: GateSettings,
    /// The configured window in nanoseconds, for
    /// [`limits_locally`](Self::limits_locally).
    window_ns: u64,
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
pub(super) const NONZERO: u64 = 1;

/// The largest window.
const MAX_WINDOW: Duration = Duration::from_secs(3600);

pub use crate::window::MAX_FLEET_BURST;

/// The default round timeout until `spawn_sync` says otherwise.
const DEFAULT_ROUND_TIMEOUT: Duration = Duration::from_millis(250);

impl FleetGate {
    /// A gate with these settings; `clock` is the limiter's clock.
    pub fn new(settings: GateSettings, clock: &impl Clock) -> Result<FleetGate, GateError> {
        if settings.window > MAX_WINDOW || settings.window < Duration::from_millis(10) {
            return Err(GateError::new(format!("window: from 10ms to {MAX_WINDOW:?}")));
        }
        if settings.secret.len() < 16 {
            return Err(GateError::new("secret: at least 16 bytes, the same on every instance"));
        }
        if settings.idle_rounds == 0 {
            return Err(GateError::new("idle_rounds: at least 1"));
        }
        if settings.max_keys == 0 || settings.max_keys > 1 << 26 {
            return Err(GateError::new("max_keys: from 1 to 67108864"));
        }
        if settings.sync_interval.is_zero() || settings.sync_interval * 2 > settings.window {
            return Err(GateError::new("sync_interval: above zero and at most half the window"));
        }
        let sub_epochs = settings.effective_sub_epochs();
        // A slice at least two sync intervals long: every slice gets a
        // round, and the previous slice is still pulled while the others'
        // last pushes into it land.
        if settings.sync_interval * 2 * sub_epochs > settings.window {
            return Err(GateError::new(format!(
                "sub_epochs: {sub_epochs} slices of {:?} are shorter than two sync intervals ({:?}); use at most {}",
                settings.window / sub_epochs,
                settings.sync_interval * 2,
                (settings.window.as_nanos() / (settings.sync_interval.as_nanos() * 2)).max(1)
            )));
        }
        let window =
            SlidingWindow::new(settings.window, sub_epochs).map_err(|e| GateError::new(format!("sub_epochs: {e}")))?;
        let capacity = settings.max_keys.saturating_mul(2);
        let gate = FleetGate {
            window,
            tables: [Table::new(capacity), Table::new(capacity), Table::new(capacity)],
            hasher: FleetHasher::new(&settings.secret),
            offset: AtomicI64::new(0),
            slice_hint: AtomicU64::new(0),
            epoch_hint: AtomicU64::new(0),
            degraded: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            fresh_until: AtomicU64::new(0),
            stale_after_ns: AtomicU64::new(0),
            settle_ns: AtomicU64::new(0),
            degraded_keys: AtomicU64::new(0),
            round: AtomicU64::new(1),
            failures: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
            history: Mutex::new(History::default()),
            last_error: Mutex::new(None),
            window_ns: u64::try_from(settings.window.as_nanos()).unwrap_or(u64::MAX),
            settings,
        };
        gate.set_round_timeout(DEFAULT_ROUND_TIMEOUT);
        gate.mark_fresh(clock.now());
        gate.refresh_offset(clock);
        let epoch = gate.window.epoch(gate.wall(clock.now()));
        gate.tables[(epoch % 3) as usize].reset(epoch);
        gate.tables[((epoch + 1) % 3) as usize].reset(epoch + 1);
        Ok(gate)
    }

    /// The settings.
    pub fn settings(&self) -> &GateSettings {
        &self.settings
    }

    /// Whether this gate limits `quota` locally only: a period longer than
    /// an hour whose burst the window cannot hold
    /// ([`window::limited_locally`](crate::window::limited_locally): a
    /// `10000/d` quota with burst 20 over a 10 s window). Its requests are
    /// decided by the local limiter alone and leave no fleet state; the
    /// fleet can admit up to N times one instance's limit for it.
    ///
    /// ```
    /// # use ratelimit::global::{FleetGate, GateSettings};
    /// # use ratelimit::Quota;
    /// let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &ratelimit::ManualClock::new()).unwrap();
    /// assert!(gate.limits_locally(&Quota::per_day(10_000).with_burst(20)));
    /// assert!(!gate.limits_locally(&Quota::per_minute(600)));
    /// ```
    #[inline]
    pub fn limits_locally(&self, quota: &Quota) -> bool {
        crate::window::limited_locally_ns(quota, self.window_ns)
    }

    /// The window arithmetic the gate runs.
    pub fn window(&self) -> &SlidingWindow {
        &self.window
    }

    /// Health and counts.
    pub fn status(&self) -> GateStatus {
        GateStatus {
            degraded: self.degraded.load(Ordering::Relaxed) || self.stalled.load(Ordering::Relaxed),
            degraded_keys: self.degraded_keys.load(Ordering::Relaxed),
            rounds: self.round.load(Ordering::Relaxed) - 1,
            failures: self.failures.load(Ordering::Relaxed),
            untracked: self.untracked.load(Ordering::Relaxed),
        }
    }

    /// Whether the fleet limit is in force, for a readiness probe.
    ///
    /// ```
    /// # use ratelimit::global::{FleetGate, FleetHealth, GateSettings};
    /// # let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &ratelimit::ManualClock::new()).unwrap();
    /// match gate.health() {
    ///     FleetHealth::InForce => {}
    ///     FleetHealth::Partial { local_only_keys } => eprintln!("{local_only_keys} keys limited locally"),
    ///     FleetHealth::LocalOnly => eprintln!("fleet limit off: {:?}", gate.last_error()),
    ///     // The enum is `#[non_exhaustive]`: a state added later.
    ///     other => eprintln!("fleet limit: {other:?}"),
    /// }
    /// ```
    pub fn health(&self) -> FleetHealth {
        let s = self.status();
        if s.degraded {
            FleetHealth::LocalOnly
        } else if s.degraded_keys > 0 {
            FleetHealth::Partial {
                local_only_keys: s.degraded_keys,
            }
        } else {
            FleetHealth::InForce
        }
    }

    /// The error of the last failed round or operation, while the gate (or
    /// some key) is degraded because of it.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Sets the longest a round may take: a round that has not succeeded
    /// for two sync intervals plus this makes the gate local-only.
    pub(super) fn set_round_timeout(&self, timeout: Duration) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let s = ns(self.settings.sync_interval);
        self.stale_after_ns
            .store(s.saturating_mul(2).saturating_add(ns(timeout)), Ordering::Relaxed);
        // Others push into a closed slice in their first round after it:
        // a sync interval, plus up to a round's own time, twice (the round
        // that pushes may start late because the one before ran long).
        // And one slice for wall clocks that disagree.
        self.settle_ns.store(
            s.saturating_add(ns(timeout).saturating_mul(2))
                .saturating_add(self.window.slice_ns()),
            Ordering::Relaxed,
        );
    }

    /// A round succeeded at `now`: its totals count for the next
    /// `stale_after`.
    pub(super) fn mark_stale(&self) {
        self.fresh_until.store(0, Ordering::Relaxed);
    }

    pub(super) fn mark_fresh(&self, now: u64) {
        let until = now.saturating_add(self.stale_after_ns.load(Ordering::Relaxed));
        self.fresh_until.store(until, Ordering::Relaxed);
    }

    pub(super) fn refresh_offset(&self, clock: &impl Clock) {
        let mono = clock.now() as i128;
        let wall = clock.wall_nanos() as i128;
        let offset = (wall - mono).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        self.offset.store(offset, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn wall(&self, now: u64) -> u64 {
        // Two's complement: adding the offset's bits wraps exactly as
        // adding a signed offset would (clocks are far from either end).
        now.wrapping_add(self.offset.load(Ordering::Relaxed) as u64)
    }

    /// The slice of a wall time, the nanoseconds into it, and its epoch.
    #[inline]
    pub(super) fn locate(&self, wall: u64) -> (u64, u64, u64) {
        let slice = self.slice_hint.load(Ordering::Relaxed);
        let epoch = self.epoch_hint.load(Ordering::Relaxed);
        let k = u64::from(self.window.slices());
        let start = slice.wrapping_mul(self.window.slice_ns());
        if let Some(into) = wall.checked_sub(start).filter(|&d| d < self.window.slice_ns()) {
            let first = epoch.wrapping_mul(k);
            if slice.wrapping_sub(first) < k {
                return (slice, into, epoch);
            }
        }
        let at = self.window.locate(wall);
        let epoch = self.window.epoch_of(at.slice);
        self.epoch_hint.store(epoch, Ordering::Relaxed);
        self.slice_hint.store(at.slice, Ordering::Relaxed);
        (at.slice, at.into_slice, epoch)
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
    /// [`Denial::FleetLimited`](crate::Denial::FleetLimited) and charges
    /// nothing locally.
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
        // bits); the fleet id sets the low bit (never 0).
        self.check_id(limiter, route, CellKey::new(id, route), id, quota, cost)
    }

    /// Whether the fleet estimate may be used at `now`: the last round
    /// succeeded and is recent. A stall is noticed here, by requests.
    #[inline]
    fn in_force(&self, now: u64) -> bool {
        // One load on the way through: a degraded or stopped gate sets it to
        // zero.
        let until = self.fresh_until.load(Ordering::Relaxed);
        if now <= until {
            return true;
        }
        if self.degraded.load(Ordering::Relaxed) || self.stalled.load(Ordering::Relaxed) {
            return false;
        }
        let age = now - until + self.stale_after_ns.load(Ordering::Relaxed);
        if !self.stalled.swap(true, Ordering::Relaxed) {
            if now <= self.fresh_until.load(Ordering::Relaxed) {
                // A round succeeded meanwhile: not stalled after all.
                self.stalled.store(false, Ordering::Relaxed);
                return true;
            }
            set_degraded(Some(Reason::Stalled));
            tracing::warn!(
                target: "ratelimit",
                since_ms = age / 1_000_000,
                "fleet gate: no successful sync round recently (sync loop stalled or stopped), limiting locally only"
            );
        }
        false
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
        // A cost above the burst never conforms: the local limiter says so.
        // Bursts beyond the gate's 24-bit counters are limited locally, and
        // so are long periods whose burst the window cannot hold (a daily
        // quota: the fleet budget would be about one unit per window).
        if cost > quota.burst() || quota.burst() > MAX_FLEET_BURST || self.limits_locally(quota) {
            return limiter.check_cell_at(cell, quota, cost, now);
        }
        let (slice, into, epoch) = self.locate(self.wall(now));
        let table = &self.tables[(epoch % 3) as usize];
        if table.epoch.load(Ordering::Acquire) != epoch {
            // The sync loop has not prepared this epoch: local only.
            return limiter.check_cell_at(cell, quota, cost, now);
        }
        // Local only (`None`) while the gate is degraded; admitted requests
        // are still counted, and pushed when the store is back.
        let in_force = self.in_force(now);
        let round = self.round.load(Ordering::Relaxed);
        if let Some(slot) = table.find(fleet_id) {
            // `None` also when this key's last round failed.
            let used = if in_force {
                self.used(slot, epoch, fleet_id, slice)
            } else {
                None
            };
            let fit = used.map(|used| self.window.fits(used, cost, quota.interval_ns(), into));
            if let Some(Fit::Exceeds { retry_ns }) = fit {
                touch(slot, route, round);
                return limiter.check_cell_at(cell, quota, 0, now).fleet_denied(retry_ns, cost);
            }
            let d = limiter.check_cell_at(cell, quota, cost, now);
            if d.is_allowed() {
                touch(slot, route, round);
                add_pending(slot, slice, cost);
                if let (Some(Fit::Fits { slack_ns }), Some(used)) = (fit, used) {
                    return self.within_fleet(d, used, cost, slack_ns, quota, into);
                }
            }
            return d;
        }
        // The key's first request here this epoch. What the previous epoch's
        // slot knew still counts (the sync loop has not moved it yet).
        let previous = self.previous_slot(epoch, fleet_id);
        let used = match (in_force, previous) {
            (false, _) => None,
            (true, Some(p)) => p.used(&self.window, slice),
            (true, None) => Some(0),
        };
        let fit = used.map(|used| self.window.fits(used, cost, quota.interval_ns(), into));
        if let Some(Fit::Exceeds { retry_ns }) = fit {
            if let Some(p) = previous {
                touch(p, route, round);
            }
            return limiter.check_cell_at(cell, quota, 0, now).fleet_denied(retry_ns, cost);
        }
        // Local first: a request the local limiter refuses leaves no fleet
        // state, so a refused flood cannot fill the table.
        let d = limiter.check_cell_at(cell, quota, cost, now);
        if d.is_denied() {
            return d;
        }
        if let Some(slot) = self.claim(table, fleet_id, previous, route, round, slice) {
            touch(slot, route, round);
            add_pending(slot, slice, cost);
        }
        match (fit, used) {
            (Some(Fit::Fits { slack_ns }), Some(used)) => self.within_fleet(d, used, cost, slack_ns, quota, into),
            _ => d,
        }
    }

    /// What [`check_id`](Self::check_id) would decide now, fleet budget
    /// included, charging nothing: neither the local cell (a
    /// [`Limiter::peek_cell`]) nor this instance's fleet counters, and
    /// without claiming a slot in the gate's table (a key the table does
    /// not hold is judged as a fresh one, plus what the previous epoch knew
    /// of it). No I/O, no lock, no allocation.
    ///
    /// ```
    /// use ratelimit::global::{FleetGate, GateSettings};
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let settings = GateSettings::new(b"a fleet-wide secret, 16+ bytes").with_window(Duration::from_secs(10));
    /// let gate = FleetGate::new(settings, &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(60).with_burst(100); // fleet: 10 per 10 s
    /// let (cell, id) = (limiter.cell_key(1, "user-1"), gate.fleet_id(1, "user-1"));
    /// for _ in 0..8 {
    ///     assert!(gate.check_id(&limiter, 1, cell, id, &quota, 1).is_allowed());
    /// }
    /// assert!(gate.peek_id(&limiter, 1, cell, id, &quota, 2).is_allowed());
    /// let d = gate.peek_id(&limiter, 1, cell, id, &quota, 3);
    /// assert_eq!(d.denial(), Some(ratelimit::Denial::FleetLimited), "3 more exceed the fleet's 10");
    /// assert!(gate.check_id(&limiter, 1, cell, id, &quota, 2).is_allowed(), "the peeks spent nothing");
    /// ```
    pub fn peek_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        route: u32,
        cell: CellKey,
        fleet_id: u64,
        quota: &Quota,
        cost: u32,
    ) -> Decision {
        let _ = route;
        limiter.store().prefetch(cell);
        let now = limiter.clock().now();
        let look = self.look(fleet_id | NONZERO, quota, cost, now);
        self.peek_looked(limiter, cell, quota, cost, now, &look)
    }

    /// Hands back `cost` units of a request [`check_id`](Self::check_id)
    /// admitted (it cost less than it was charged, or its work failed):
    /// locally through [`Limiter::refund_cell`] (never more than was
    /// charged, never before now), and out of this instance's count of the
    /// key's units that the sync loop has not taken for a push yet, in the
    /// current slice and then the one before. No I/O, no lock, no
    /// allocation; no slot is claimed for a key the table does not hold.
    ///
    /// Units already taken for a push (or pushed) stay counted fleet-wide
    /// until they leave the window: a refund after the push is
    /// conservative. Redis counters only grow by design (`INCRBY` of
    /// deltas that are never negative), and a negative delta would need a
    /// signed field in the pending word, which packs a tag and two 24-bit
    /// counts into one atomic: not worth it for what a refund is, the
    /// correction of one request within a sync interval or so.
    ///
    /// ```
    /// use ratelimit::global::{FleetGate, GateSettings};
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let settings = GateSettings::new(b"a fleet-wide secret, 16+ bytes").with_window(Duration::from_secs(10));
    /// let gate = FleetGate::new(settings, &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(60).with_burst(100); // fleet: 10 per 10 s
    /// let (cell, id) = (limiter.cell_key(1, "user-1"), gate.fleet_id(1, "user-1"));
    /// assert!(gate.check_id(&limiter, 1, cell, id, &quota, 10).is_allowed());
    /// assert!(gate.peek_id(&limiter, 1, cell, id, &quota, 1).is_denied(), "the fleet's 10 are spent");
    /// gate.refund_id(&limiter, 1, cell, id, &quota, 4); // it cost 6
    /// assert!(gate.check_id(&limiter, 1, cell, id, &quota, 4).is_allowed());
    /// ```
    pub fn refund_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        route: u32,
        cell: CellKey,
        fleet_id: u64,
        quota: &Quota,
        cost: u32,
    ) {
        let _ = route;
        let now = limiter.clock().now();
        limiter.refund_cell_at(cell, quota, cost, now);
        self.take_back(fleet_id, quota, cost, now);
    }

    /// [`refund_id`](Self::refund_id) of the charge that `charged` (the
    /// admitted decision) reports, handed back locally to the cell the
    /// store placed it in (the key's own, or a shared overflow or group
    /// cell: see [`Limiter::refund_placed`]).
    pub fn refund_placed_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        cell: CellKey,
        fleet_id: u64,
        quota: &Quota,
        cost: u32,
        charged: &Decision,
    ) {
        let now = limiter.clock().now();
        limiter.refund_placed_at(cell, quota, cost, charged, now);
        self.take_back(fleet_id, quota, cost, now);
    }

    /// Takes `cost` units out of this instance's not yet pushed fleet count
    /// of the key (the current slice, then the previous one).
    fn take_back(&self, fleet_id: u64, quota: &Quota, cost: u32, now: u64) {
        // A quota the gate limits locally only was never counted.
        if cost == 0 || quota.burst() > MAX_FLEET_BURST || self.limits_locally(quota) {
            return;
        }
        let fleet_id = fleet_id | NONZERO;
        let (slice, _, epoch) = self.locate(self.wall(now));
        let table = &self.tables[(epoch % 3) as usize];
        if table.epoch.load(Ordering::Acquire) != epoch {
            return;
        }
        if let Some(slot) = table.find(fleet_id) {
            let left = take_back_pending(slot, slice, u64::from(cost));
            take_back_pending(slot, slice.wrapping_sub(1), left);
        }
    }

    /// Charges `cost` more units of a request already admitted, without a
    /// check (a settlement after the work: see `ratelimit::axum::Charge`):
    /// locally (into debt if need be) and in this instance's fleet count of
    /// the key, pushed with the next round. A key with no slot in the
    /// current epoch's table (the epoch turned since its request) claims one
    /// as a check would; a full table leaves it local only (and counted as
    /// untracked). The fleet counts what was charged locally (the local
    /// charge stops at one bucket of debt beyond a spent bucket), at most
    /// [`MAX_FLEET_BURST`] units. No I/O, no lock, no allocation.
    ///
    /// ```
    /// use ratelimit::global::{FleetGate, GateSettings};
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(60);
    /// let cell = limiter.cell_key(1, "user-1");
    /// let id = gate.fleet_id(1, "user-1");
    /// assert!(gate.check_id(&limiter, 1, cell, id, &quota, 1).is_allowed());
    /// gate.charge_more_id(&limiter, 1, cell, id, &quota, 59); // it cost 60
    /// assert!(limiter.peek_cell(cell, &quota, 1).is_denied());
    /// ```
    pub fn charge_more_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        route: u32,
        cell: CellKey,
        fleet_id: u64,
        quota: &Quota,
        cost: u32,
    ) {
        self.charge_more_counted(limiter, route, cell, fleet_id, quota, cost);
    }

    /// [`charge_more_id`](Self::charge_more_id), returning the units charged
    /// locally (what a later refund may hand back).
    pub(crate) fn charge_more_counted<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        route: u32,
        cell: CellKey,
        fleet_id: u64,
        quota: &Quota,
        cost: u32,
    ) -> u32 {
        if cost == 0 {
            return 0;
        }
        let now = limiter.clock().now();
        let charged = limiter.charge_cell_at(cell, quota, cost, now);
        if charged == 0 || quota.burst() > MAX_FLEET_BURST || self.limits_locally(quota) {
            return charged;
        }
        let fleet_id = fleet_id | NONZERO;
        let (slice, _, epoch) = self.locate(self.wall(now));
        let table = &self.tables[(epoch % 3) as usize];
        if table.epoch.load(Ordering::Acquire) != epoch {
            return charged;
        }
        let round = self.round.load(Ordering::Relaxed);
        // Into the key's slot of this epoch; a settlement that ends after
        // the epoch turned (a long download) claims one as a check would,
        // so the units still reach the fleet's count. What was charged
        // locally (at most two buckets), within the pending word's headroom.
        self.count(route, fleet_id, slice, epoch, round, charged.min(MAX_FLEET_BURST));
        charged
    }

    /// Several limits as one all-or-nothing decision, each also held to its
    /// fleet budget: `local[i]` is the `i`th limit's local check (cell,
    /// quota, cost) and `fleet[i]` its `(route, fleet_id)`. Every limit is
    /// looked at first (locally and against the fleet estimate, as
    /// [`peek_id`](Self::peek_id)); if any refuses, nothing is charged,
    /// locally or in the fleet counters, and no table slot is claimed.
    /// Otherwise the local limits are charged as
    /// [`Limiter::check_all_into`] does (a limit that refuses in a race
    /// hands the earlier ones back), and then each limit's units are counted
    /// for the fleet. The decisions go to `out`; returns whether the request
    /// is admitted. No I/O, no lock, no allocation.
    ///
    /// Like [`check_id`](Self::check_id), the fleet look and the count are
    /// not one atomic step: requests admitted concurrently by this instance
    /// may together pass the fleet budget by what they cost.
    ///
    /// # Panics
    ///
    /// When `fleet` or `out` is shorter than `local`.
    ///
    /// ```
    /// use ratelimit::global::{FleetGate, GateSettings};
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let settings = GateSettings::new(b"a fleet-wide secret, 16+ bytes").with_window(Duration::from_secs(10));
    /// let gate = FleetGate::new(settings, &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let per_user = Quota::per_minute(60).with_burst(100); // fleet: 10 per 10 s
    /// let per_ip = Quota::per_minute(600).with_burst(100); // fleet: 100 per 10 s
    /// let local = [
    ///     Check::new(limiter.cell_key(1, "user-1"), per_user, 1),
    ///     Check::new(limiter.cell_key(2, "203.0.113.9"), per_ip, 1),
    /// ];
    /// let fleet = [(1, gate.fleet_id(1, "user-1")), (2, gate.fleet_id(2, "203.0.113.9"))];
    /// let mut out = [limiter.peek(&"", &per_user); 2];
    /// for _ in 0..10 {
    ///     assert!(gate.check_all_id(&limiter, &fleet, &local, &mut out));
    /// }
    /// assert!(!gate.check_all_id(&limiter, &fleet, &local, &mut out), "the user's fleet budget is spent");
    /// assert_eq!(out[0].denial(), Some(ratelimit::Denial::FleetLimited));
    /// assert_eq!(limiter.peek_cell(local[1].cell, &per_ip, 0).remaining(), 90, "the address was not charged");
    /// ```
    pub fn check_all_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        fleet: &[(u32, u64)],
        local: &[Check],
        out: &mut [Decision],
    ) -> bool {
        assert!(
            fleet.len() >= local.len() && out.len() >= local.len(),
            "check_all_id: one fleet id and one decision per check"
        );
        for c in local {
            limiter.store().prefetch(c.cell);
        }
        let now = limiter.clock().now();
        // Look at every limit, fleet included; any refusal charges nothing.
        let mut refused = false;
        for ((c, &(_, id)), d) in local.iter().zip(fleet).zip(out.iter_mut()) {
            let look = self.look(id | NONZERO, &c.quota, c.cost, now);
            *d = self.peek_looked(limiter, c.cell, &c.quota, c.cost, now, &look);
            refused |= d.is_denied();
        }
        if refused {
            for (c, d) in local.iter().zip(out.iter_mut()) {
                if d.is_allowed() {
                    // Charged nothing: its room as it is.
                    *d = limiter.peek_cell_at(c.cell, &c.quota, 0, now);
                }
            }
            return false;
        }
        // Charge locally, all or nothing (a race hands back what it took).
        if !limiter.check_all_at(local, out, now) {
            return false;
        }
        // Then count each limit for the fleet, and report its room where
        // the fleet's is tighter.
        let round = self.round.load(Ordering::Relaxed);
        for ((c, &(route, id)), d) in local.iter().zip(fleet).zip(out.iter_mut()) {
            let look = self.look(id | NONZERO, &c.quota, c.cost, now);
            if let Some((slice, epoch)) = look.counted {
                self.count(route, id | NONZERO, slice, epoch, round, c.cost);
            }
            if let (Some(Fit::Fits { slack_ns }), Some(used)) = (look.fit, look.used) {
                *d = self.within_fleet(*d, used, c.cost, slack_ns, &c.quota, look.into);
            }
        }
        true
    }

    /// The fleet's view of a request of `cost` on `fleet_id` at `now`,
    /// writing nothing (but the slice hints).
    #[inline]
    fn look(&self, fleet_id: u64, quota: &Quota, cost: u32, now: u64) -> Look {
        let local_only = Look {
            fit: None,
            used: None,
            into: 0,
            counted: None,
        };
        // As `check_id`: a cost above the burst is the local limiter's to
        // refuse; bursts beyond the gate's counters are limited locally.
        // And a long-period quota whose burst the window cannot hold.
        if cost > quota.burst() || quota.burst() > MAX_FLEET_BURST || self.limits_locally(quota) {
            return local_only;
        }
        let (slice, into, epoch) = self.locate(self.wall(now));
        let table = &self.tables[(epoch % 3) as usize];
        if table.epoch.load(Ordering::Acquire) != epoch {
            return local_only;
        }
        let in_force = self.in_force(now);
        let used = if !in_force {
            None
        } else if let Some(slot) = table.find(fleet_id) {
            self.used(slot, epoch, fleet_id, slice)
        } else {
            match self.previous_slot(epoch, fleet_id) {
                Some(p) => p.used(&self.window, slice),
                None => Some(0),
            }
        };
        Look {
            fit: used.map(|used| self.window.fits(used, cost, quota.interval_ns(), into)),
            used,
            into,
            counted: Some((slice, epoch)),
        }
    }

    /// The decision a look gives, charging nothing.
    #[inline]
    fn peek_looked<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        cell: CellKey,
        quota: &Quota,
        cost: u32,
        now: u64,
        look: &Look,
    ) -> Decision {
        if let Some(Fit::Exceeds { retry_ns }) = look.fit {
            return limiter.peek_cell_at(cell, quota, 0, now).fleet_denied(retry_ns, cost);
        }
        let d = limiter.peek_cell_at(cell, quota, cost, now);
        match (d.is_allowed(), look.fit, look.used) {
            (true, Some(Fit::Fits { slack_ns }), Some(used)) => {
                self.within_fleet(d, used, cost, slack_ns, quota, look.into)
            }
            _ => d,
        }
    }

    /// Counts an admitted request of `cost` for `fleet_id` in `slice`,
    /// claiming the key's slot if it has none (as `check_id` does).
    fn count(&self, route: u32, fleet_id: u64, slice: u64, epoch: u64, round: u64, cost: u32) {
        let table = &self.tables[(epoch % 3) as usize];
        if let Some(slot) = table.find(fleet_id) {
            touch(slot, route, round);
            add_pending(slot, slice, cost);
            return;
        }
        let previous = self.previous_slot(epoch, fleet_id);
        if let Some(slot) = self.claim(table, fleet_id, previous, route, round, slice) {
            touch(slot, route, round);
            add_pending(slot, slice, cost);
        }
    }

    /// Claims `fleet_id`'s slot in `table` for its first request of the
    /// epoch, carrying over what the previous epoch's slot knew. `None`
    /// when the table is full: the key is limited locally only, and counted
    /// (the sync loop exports the count: no metrics call per request).
    fn claim<'t>(
        &self,
        table: &'t Table,
        fleet_id: u64,
        previous: Option<&Slot>,
        route: u32,
        round: u64,
        slice: u64,
    ) -> Option<&'t Slot> {
        let claimed = table.slot(fleet_id, |fresh| {
            fresh.touched.store(touched(route, round), Ordering::Relaxed);
            if let Some(p) = previous {
                carry_over(p, fresh, slice, &self.window);
            }
        });
        if claimed.is_none() {
            self.untracked.fetch_add(1, Ordering::Relaxed);
        }
        claimed
    }

    /// An admitted decision reporting the fleet's room when it is tighter;
    /// when the fleet has less than one unit left, its next unit is not
    /// sooner than the fleet's window lets one in (the `t` a client reads).
    #[inline]
    fn within_fleet(&self, d: Decision, used: u64, cost: u32, slack_ns: u64, quota: &Quota, into: u64) -> Decision {
        let d = d.tightened(slack_ns);
        if slack_ns >= quota.interval_ns() {
            return d;
        }
        match self
            .window
            .fits(used.saturating_add(u64::from(cost)), 1, quota.interval_ns(), into)
        {
            Fit::Exceeds { retry_ns } => d.next_unit_no_sooner(retry_ns),
            Fit::Fits { .. } => d,
        }
    }

    /// A slot's estimate ([`SlidingWindow::estimate`] on what the slot
    /// holds); a slot just claimed by another thread (its carry over not
    /// written yet) also counts what the previous epoch's slot knew.
    #[inline]
    fn used(&self, slot: &Slot, epoch: u64, fleet_id: u64, slice: u64) -> Option<u64> {
        let closed = slot.closed.load(Ordering::Relaxed);
        let here = slot.used_with(&self.window, closed, slice)?;
        if closed == Closed::UNKNOWN {
            if let Some(p) = self.previous_slot(epoch, fleet_id) {
                return p.used(&self.window, slice).map(|before| before + here);
            }
        }
        Some(here)
    }

    /// The key's slot in the previous epoch's table, if that table still
    /// holds the previous epoch.
    #[inline]
    pub(super) fn previous_slot(&self, epoch: u64, fleet_id: u64) -> Option<&Slot> {
        let before = epoch.checked_sub(1)?;
        let table = &self.tables[((epoch + 2) % 3) as usize];
        if table.epoch.load(Ordering::Acquire) != before {
            return None;
        }
        table.find(fleet_id)
    }
}

/// What the fleet makes of a request before it is charged (`FleetGate::look`).
struct Look {
    /// `None`: limited locally only (degraded, epoch not prepared, a burst
    /// beyond the gate's counters, a cost above the burst).
    fit: Option<Fit>,
    used: Option<u64>,
    into: u64,
    /// Where an admitted request is counted: `(slice, epoch)`, or `None`
    /// when the fleet does not track it.
    counted: Option<(u64, u64)>,
}

/// Takes up to `units` out of the slot's not-yet-taken count for `slice`
/// (never below zero, never out of units a round took for a push); returns
/// what it could not take.
fn take_back_pending(slot: &Slot, slice: u64, units: u64) -> u64 {
    if units == 0 {
        return 0;
    }
    let p = (slice & 1) as usize;
    let tag = Pending::tag(slice);
    let mut taken = 0;
    let _ = slot.pending[p].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
        let (t, unconfirmed, unpushed) = Pending::unpack(v);
        taken = if t == tag { unpushed.min(units) } else { 0 };
        (taken > 0).then(|| Pending::pack(t, unconfirmed, unpushed - taken))
    });
    units - taken
}

/// The `touched` word: the route (high half) and the round of the last
/// request (low half).
pub(super) fn touched(route: u32, round: u64) -> u64 {
    (u64::from(route) << 32) | (round & LOW)
}

/// Marks a key as requested this round (kept synced), with one store at
/// most per round.
#[inline]
fn touch(slot: &Slot, route: u32, round: u64) {
    let now = touched(route, round);
    if slot.touched.load(Ordering::Relaxed) != now {
        slot.touched.store(now, Ordering::Relaxed);
    }
}

/// Counts an admitted request of `cost` in `slice`, as not yet pushed.
#[inline]
fn add_pending(slot: &Slot, slice: u64, cost: u32) {
    let p = (slice & 1) as usize;
    let tag = Pending::tag(slice);
    let v = slot.pending[p].load(Ordering::Relaxed);
    let (t, _, unpushed) = Pending::unpack(v);
    // Half the field as headroom for concurrent adds (costs are at most
    // MAX_FLEET_BURST, a quarter of it).
    if t == tag && unpushed + u64::from(cost) <= Pending::COUNT / 2 {
        // The common case: one atomic add to the low field (a sync loop
        // taking the field meanwhile moves it whole, and a request that
        // re-tags the word for a newer slice gets this unit: a slice late,
        // never lost).
        slot.pending[p].fetch_add(u64::from(cost), Ordering::AcqRel);
        return;
    }
    let before = slot.pending[p].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
        let (t, unconfirmed, unpushed) = Pending::unpack(v);
        Some(if t == tag {
            Pending::pack(tag, unconfirmed, unpushed + u64::from(cost))
        } else {
            // The word held the slice two before, normally drained by the
            // sync loop during the last one.
            Pending::pack(tag, 0, u64::from(cost))
        })
    });
    if let Ok(old) = before {
        let (t, _, unpushed) = Pending::unpack(old);
        if t != tag && unpushed > 0 {
            // No round took them (an outage): kept, counted and pushed
            // later, never lost. (Units a round took are in flight: a push
            // that comes back unsent hands them to the backlog.)
            slot.add_backlog(slice.wrapping_sub(Pending::age(slice, t)), unpushed);
        }
    }
}

/// A fresh slot starts from what the previous epoch's slot knew: its
/// estimate of the window so far, as the closed sum for this slice, until
/// the sync loop writes the slot.
pub(super) fn carry_over(previous: &Slot, fresh: &Slot, slice: u64, window: &SlidingWindow) {
    let carried = match previous.used(window, slice) {
        Some(used) => Closed::word(slice, used.saturating_sub(previous.open_units(slice))),
        None => Closed::degraded(slice),
    };
    fresh.closed.store(carried, Ordering::Relaxed);
}
