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
use crate::{Clock, Decision, Limiter, Quota, Store};

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
        let claimed = table.slot(fleet_id, |fresh| {
            fresh.touched.store(touched(route, round), Ordering::Relaxed);
            if let Some(p) = previous {
                carry_over(p, fresh, slice, &self.window);
            }
        });
        match claimed {
            Some(slot) => {
                touch(slot, route, round);
                add_pending(slot, slice, cost);
            }
            None => {
                // Table full: limited locally only, and counted.
                // (The sync loop exports the count: no metrics call per
                // request.)
                self.untracked.fetch_add(1, Ordering::Relaxed);
            }
        }
        match (fit, used) {
            (Some(Fit::Fits { slack_ns }), Some(used)) => self.within_fleet(d, used, cost, slack_ns, quota, into),
            _ => d,
        }
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
