//! The fleet gate and its request path: one table lookup, one cache line,
//! no I/O, no lock. A check and a peek are one decision
//! ([`FleetGate::decide_at`]), charging or not; the key's slot is tracked
//! in `tracking.rs`, health in `health.rs`, refunds and extra charges in
//! `settlement.rs`, stacked limits in `stacked.rs`.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::check::FleetCheck;
use super::history::History;
use super::ids::{FleetHasher, NONZERO};
use super::settings::{GateError, GateSettings};
use super::table::{Closed, Slot, Slots, Table};
use crate::engine::store::CellKey;
use crate::engine::window::{Fit, SlidingWindow};
use crate::shared::defaults::OnOutage;
use crate::{Check, Clock, Decision, Limiter, Quota, Store};

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
    pub(super) fresh_until: AtomicU64,
    /// Without a successful round for this long, the gate is local-only.
    pub(super) stale_after_ns: AtomicU64,
    /// How long after a slice ends every instance has pushed into it.
    pub(super) settle_ns: AtomicU64,
    pub(super) degraded_keys: AtomicU64,
    pub(super) round: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) untracked: AtomicU64,
    /// Instances of the fleet, as the roster last read them (at least 1):
    /// a key the last round did not read is held to `1 / live` of its
    /// budget (see `ration.rs`).
    pub(super) live: AtomicU64,
    /// Keys the last round did not read (reads rationed).
    pub(super) unread_keys: AtomicU64,
    /// Keys the last round pushed and read.
    pub(super) hot_keys: AtomicU64,
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

/// Written first into a group's fleet id ([`FleetGate::group_id`]), so a
/// group's id and a key's are hashes of different inputs.
const GROUP_TAG: u8 = 0x67; // "g"

/// The largest window.
const MAX_WINDOW: Duration = Duration::from_secs(3600);

pub use crate::engine::window::MAX_FLEET_BURST;

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
        // `max_keys` cold keys, and as many slots again for the reserve
        // (keys at their share, hot keys) and for short probes.
        let (capacity, cold) = (settings.max_keys.saturating_mul(2), settings.max_keys);
        let gate = FleetGate {
            window,
            tables: [
                Table::new(capacity, cold),
                Table::new(capacity, cold),
                Table::new(capacity, cold),
            ],
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
            live: AtomicU64::new(1),
            unread_keys: AtomicU64::new(0),
            hot_keys: AtomicU64::new(0),
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
    /// an hour whose burst the window cannot hold (a `10000/d` quota with
    /// burst 20 over a 10 s window). Its requests are
    /// decided by the local limiter alone and leave no fleet state; the
    /// fleet can admit up to N times one instance's limit for it.
    ///
    /// ```
    /// # use ratelimit::fleet::{FleetGate, GateSettings};
    /// # use ratelimit::Quota;
    /// let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &ratelimit::ManualClock::new()).unwrap();
    /// assert!(gate.limits_locally(&Quota::per_day(10_000).with_burst(20)));
    /// assert!(!gate.limits_locally(&Quota::per_minute(600)));
    /// ```
    #[inline]
    pub fn limits_locally(&self, quota: &Quota) -> bool {
        crate::engine::window::limited_locally_ns(quota, self.window_ns)
    }

    /// The window arithmetic the gate runs.
    pub fn window(&self) -> &SlidingWindow {
        &self.window
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
        let local = Check::new(CellKey::new(id, route), *quota, cost);
        self.check_id(limiter, &FleetCheck::new(local, route, id))
    }

    /// [`check`](Self::check) with the local cell and the fleet id already
    /// computed (the HTTP runtime derives the fleet id from the raw key):
    /// the local limiter, then the fleet budget, for `request`.
    ///
    /// ```
    /// use ratelimit::fleet::{FleetCheck, FleetGate, GateSettings};
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let settings = GateSettings::new(b"a fleet-wide secret, 16+ bytes").with_window(Duration::from_secs(10));
    /// let gate = FleetGate::new(settings, &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(60).with_burst(100); // fleet: 10 per 10 s
    /// let cell = limiter.cell_key(1, "user-1");
    /// let request = FleetCheck::new(Check::new(cell, quota, 1), 1, gate.fleet_id(1, "user-1"));
    /// for _ in 0..10 {
    ///     assert!(gate.check_id(&limiter, &request).is_allowed());
    /// }
    /// let d = gate.check_id(&limiter, &request);
    /// assert_eq!(d.denial(), Some(ratelimit::Denial::FleetLimited), "the fleet's 10 are spent");
    /// assert_eq!(limiter.peek_all(&[Check::new(cell, quota, 0)])[0].remaining(), 90, "the refusal charged nothing");
    /// ```
    #[inline]
    pub fn check_id<S: Store, C: Clock>(&self, limiter: &Limiter<S, C>, request: &FleetCheck) -> Decision {
        self.decide(limiter, request, &|| request.group_id, Mode::Check)
    }

    /// [`check_id`](Self::check_id) for a request whose group's fleet id
    /// `group` computes, called only if the local limiter places the
    /// request on a shared cell (most requests never need it).
    #[cfg(feature = "axum")]
    #[inline]
    pub(crate) fn check_id_in<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        group: &impl Fn() -> u64,
    ) -> Decision {
        self.decide(limiter, request, group, Mode::Check)
    }

    /// [`peek_id`](Self::peek_id) with the group as in
    /// [`check_id_in`](Self::check_id_in).
    #[cfg(feature = "axum")]
    #[inline]
    pub(crate) fn peek_id_in<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        group: &impl Fn() -> u64,
    ) -> Decision {
        self.decide(limiter, request, group, Mode::Peek)
    }

    /// What [`check_id`](Self::check_id) would decide now, fleet budget
    /// included, charging nothing: neither the local cell (a
    /// [`Limiter::peek_all`]) nor this instance's fleet counters, and
    /// without claiming a slot in the gate's table (a key the table does
    /// not hold is judged as a fresh one, plus what the previous epoch knew
    /// of it). No I/O, no lock, no allocation.
    ///
    /// ```
    /// use ratelimit::fleet::{FleetCheck, FleetGate, GateSettings};
    /// use ratelimit::{Check, Limiter, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let settings = GateSettings::new(b"a fleet-wide secret, 16+ bytes").with_window(Duration::from_secs(10));
    /// let gate = FleetGate::new(settings, &clock).unwrap();
    /// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    /// let quota = Quota::per_minute(60).with_burst(100); // fleet: 10 per 10 s
    /// let cell = limiter.cell_key(1, "user-1");
    /// let request = FleetCheck::new(Check::new(cell, quota, 1), 1, gate.fleet_id(1, "user-1"));
    /// for _ in 0..8 {
    ///     assert!(gate.check_id(&limiter, &request).is_allowed());
    /// }
    /// assert!(gate.peek_id(&limiter, &request.with_cost(2)).is_allowed());
    /// let d = gate.peek_id(&limiter, &request.with_cost(3));
    /// assert_eq!(d.denial(), Some(ratelimit::Denial::FleetLimited), "3 more exceed the fleet's 10");
    /// assert!(gate.check_id(&limiter, &request.with_cost(2)).is_allowed(), "the peeks spent nothing");
    /// ```
    #[inline]
    pub fn peek_id<S: Store, C: Clock>(&self, limiter: &Limiter<S, C>, request: &FleetCheck) -> Decision {
        self.decide(limiter, request, &|| request.group_id, Mode::Peek)
    }

    /// [`decide_at`](Self::decide_at) now, the key's cell and its likely
    /// slot loading meanwhile.
    #[inline(always)]
    fn decide<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        group: &impl Fn() -> u64,
        mode: Mode,
    ) -> Decision {
        limiter.store().prefetch(request.local.cell);
        // The epoch rarely changes: start loading the likely slot too, before
        // the clock read.
        self.tables[(self.epoch_hint.load(Ordering::Relaxed) % 3) as usize].prefetch(request.fleet_id | NONZERO);
        let now = limiter.clock().now();
        self.decide_at(limiter, request, group, mode, now)
    }

    /// The decision on `request` at `now`: refused by the fleet when its
    /// cost does not fit the fleet budget (charging nothing locally), else
    /// the local limiter's. [`Mode::Check`] charges an admitted request
    /// locally and counts it for the fleet (claiming the key's slot on its
    /// first admitted request of the epoch); [`Mode::Peek`] writes nothing
    /// (but the slice hints).
    #[inline(always)]
    pub(super) fn decide_at<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        group: &impl Fn() -> u64,
        mode: Mode,
        now: u64,
    ) -> Decision {
        let Check { cell, quota, cost } = request.local;
        let fleet_id = request.fleet_id | NONZERO;
        let local = |cost| match mode {
            Mode::Check => limiter.check_cell_at(cell, &quota, cost, now),
            Mode::Peek => limiter.peek_cell_at(cell, &quota, cost, now),
        };
        let look = self.look(fleet_id, &quota, cost, now);
        if let Some(Fit::Exceeds { retry_ns }) = look.fit {
            if let (Mode::Check, Some(at)) = (mode, &look.at) {
                let round = self.round.load(Ordering::Relaxed);
                // No slot, in this epoch or the last (what it used is in the
                // sketches): one from the reserve, and the fleet decides it
                // there (refusing it, which turns it hot).
                if at.own.is_none() && at.previous.is_none() && self.reserve(at, request.route, fleet_id, round) {
                    return self.decide_tracked(limiter, request, group, now);
                }
                // Kept synced, read first and turned hot: the key is
                // requested, and at its fleet budget (or its share) here.
                self.refused(at, request.route, round);
            }
            return local(0).fleet_denied(retry_ns, cost);
        }
        // Local first: a request the local limiter refuses leaves no fleet
        // state, so a refused flood cannot fill the table. While the fleet
        // is out of reach with `on_outage = "share"`, the local limiter
        // holds the key to its last known share (`Look::local_cost`).
        // (Called here directly: the closure, called on three paths, is
        // not inlined, and the common path would pay a call.)
        let d = match mode {
            Mode::Check => limiter.check_cell_at(cell, &quota, look.local_cost, now),
            Mode::Peek => limiter.peek_cell_at(cell, &quota, look.local_cost, now),
        };
        if d.is_denied() {
            return d;
        }
        // Placed on a shared cell (its group's, or an overflow cell): the
        // fleet holds the group to one budget too, as the cell does here.
        let counted = request.counted_id_or(&d, group);
        let (fleet_id, look) = if counted == fleet_id {
            (fleet_id, look)
        } else {
            let group = self.look(counted, &quota, cost, now);
            if let Some(Fit::Exceeds { retry_ns }) = group.fit {
                if let (Mode::Check, Some(at)) = (mode, &group.at) {
                    self.refused(at, request.route, self.round.load(Ordering::Relaxed));
                    // Nothing charged: hand the shared cell its units back
                    // (charged this instant, so all of them).
                    limiter.refund_placed_at(cell, &quota, look.local_cost, &d, now, now);
                }
                return local(0).fleet_denied(retry_ns, cost);
            }
            (counted, group)
        };
        if let (Mode::Check, Some(at)) = (mode, &look.at) {
            // Counted even while local only (`fit` is `None`): pushed when
            // the store is back.
            self.count(at, request.route, fleet_id, self.round.load(Ordering::Relaxed), cost);
        }
        self.within(d, &look, &quota, cost)
    }

    /// [`decide_at`](Self::decide_at) again for a key that just claimed a
    /// slot from the reserve (so, once only): the fleet decides it now.
    #[cold]
    #[inline(never)]
    fn decide_tracked<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        request: &FleetCheck,
        group: &dyn Fn() -> u64,
        now: u64,
    ) -> Decision {
        self.decide_at(limiter, request, &|| group(), Mode::Check, now)
    }

    /// The fleet id of `group` (a client's network) on `route`: what a
    /// [`FleetCheck`] of a key in that group carries
    /// ([`FleetCheck::in_group`]), so that requests the local limiter places
    /// on the group's shared cell are limited as one client fleet-wide.
    /// Never equal to a key's [`fleet_id`](Self::fleet_id) for the same
    /// value.
    ///
    /// ```
    /// use ratelimit::fleet::{FleetGate, GateSettings};
    /// use ratelimit::ManualClock;
    ///
    /// let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &ManualClock::new()).unwrap();
    /// let network: std::net::IpAddr = "203.0.113.0".parse().unwrap();
    /// assert_ne!(gate.group_id(1, &network), gate.fleet_id(1, &network));
    /// ```
    pub fn group_id<G: Hash + ?Sized>(&self, route: u32, group: &G) -> u64 {
        let mut h = self.hasher.hasher();
        h.write_u8(GROUP_TAG);
        route.hash(&mut h);
        group.hash(&mut h);
        h.finish() | NONZERO
    }

    /// The fleet's view of a request of `cost` on `fleet_id` at `now`,
    /// writing nothing (but the slice hints).
    #[inline]
    pub(super) fn look(&self, fleet_id: u64, quota: &Quota, cost: u32, now: u64) -> Look<'_> {
        // A cost above the burst never conforms: the local limiter says so.
        // Bursts beyond the gate's 24-bit counters are limited locally, and
        // so are long periods whose burst the window cannot hold (a daily
        // quota: the fleet budget would be about one unit per window).
        if cost > quota.burst() || quota.burst() > MAX_FLEET_BURST || self.limits_locally(quota) {
            return Look::local_only(cost);
        }
        // The sync loop has not prepared this epoch: local only.
        let Some(place) = self.place(now) else {
            return Look::local_only(cost);
        };
        // Local only (`None`) while the gate is degraded.
        let in_force = self.in_force(now);
        let live = || self.live.load(Ordering::Relaxed).max(1);
        let at = self.slots(place, fleet_id);
        let used = match (in_force, at.own) {
            (false, _) => None,
            // `None` also when this key's last round failed.
            (true, Some(slot)) => self.used(slot, place.epoch, fleet_id, place.slice, place.into),
            // No slot here this epoch. What the previous epoch's slot knew
            // still counts (the sync loop has not moved it yet), and what
            // the sketches counted while it had no slot: in this epoch,
            // when the table holds no more cold keys (a flood of new keys
            // filled it), and in the last one if it had no slot there
            // either. Held to its share, until the fleet refuses it there
            // and it claims a slot from the reserve (`decide_at`).
            (true, None) => match at.previous {
                Some(p) => p.used(&self.window, place.slice, place.into).map(|used| {
                    let held = Closed::is_held(p.closed.load(Ordering::Relaxed));
                    (used + place.table.untracked_units(fleet_id), held)
                }),
                None => Some((self.untracked_units(&place, fleet_id), true)),
            },
        };
        let Some((used, held)) = used else {
            // The store out of reach (or this key's part of the last round
            // failed): the local limiter alone, holding the key to its last
            // known share with `on_outage = "share"` (each request charged
            // `live` times its cost, at most the burst).
            let local_cost = match self.settings.on_outage {
                OnOutage::Share => cost
                    .saturating_mul(u32::try_from(live()).unwrap_or(u32::MAX))
                    .min(quota.burst()),
                OnOutage::Local => cost,
            };
            return Look {
                local_cost,
                at: Some(at),
                ..Look::local_only(cost)
            };
        };
        // A key whose fleet use the last round did not read is held to its
        // fair share: `budget / live`, that is the emission interval times
        // `live` (its slack in the quota's own nanoseconds divided back).
        let share = if held { live() } else { 1 };
        let interval_ns = quota.interval_ns().saturating_mul(share);
        let fit = match self.window.fits(used, cost, interval_ns, place.into) {
            // (A division costs more than the rest of the arithmetic: only
            // for a key held to its share among several instances.)
            Fit::Fits { slack_ns } if share > 1 => Fit::Fits {
                slack_ns: slack_ns / share,
            },
            exceeds => exceeds,
        };
        Look {
            fit: Some(fit),
            used: Some(used),
            interval_ns,
            into: place.into,
            local_cost: cost,
            at: Some(at),
        }
    }

    /// An admitted decision `d` with the fleet's room where `look` found
    /// the fleet's tighter ([`within_fleet`](Self::within_fleet)).
    #[inline]
    pub(super) fn within(&self, d: Decision, look: &Look<'_>, quota: &Quota, cost: u32) -> Decision {
        match (look.fit, look.used) {
            (Some(Fit::Fits { slack_ns }), Some(used)) => {
                self.within_fleet(d, used, cost, slack_ns, quota, look.interval_ns, look.into)
            }
            _ => d,
        }
    }

    /// An admitted decision reporting the fleet's room when it is tighter;
    /// when the fleet has less than one unit left, its next unit is not
    /// sooner than the fleet's window lets one in (the `t` a client reads).
    /// `interval_ns`: the emission interval the fleet held the key to (the
    /// quota's, or a multiple for a key held to its fair share).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn within_fleet(
        &self,
        d: Decision,
        used: u64,
        cost: u32,
        slack_ns: u64,
        quota: &Quota,
        interval_ns: u64,
        into: u64,
    ) -> Decision {
        let d = d.tightened(slack_ns);
        if slack_ns >= quota.interval_ns() {
            return d;
        }
        match self
            .window
            .fits(used.saturating_add(u64::from(cost)), 1, interval_ns, into)
        {
            Fit::Exceeds { retry_ns } => d.next_unit_no_sooner(retry_ns),
            Fit::Fits { .. } => d,
        }
    }

    /// A slot's estimate ([`SlidingWindow::estimate`] on what the slot
    /// holds), and whether the key is held to its fair share (its fleet use
    /// not read: [`Closed::HELD`]); a slot just claimed by another thread
    /// (its carry over not written yet) also counts what the previous
    /// epoch's slot knew.
    #[inline]
    fn used(&self, slot: &Slot, epoch: u64, fleet_id: u64, slice: u64, into: u64) -> Option<(u64, bool)> {
        let closed = slot.closed.load(Ordering::Relaxed);
        let here = slot.used_with(&self.window, closed, slice, into)?;
        if closed == Closed::UNKNOWN {
            if let Some(p) = self.previous_slot(epoch, fleet_id) {
                let held = Closed::is_held(p.closed.load(Ordering::Relaxed));
                return p.used(&self.window, slice, into).map(|before| (before + here, held));
            }
            // New here, not yet seen by a round: cold.
            return Some((here, true));
        }
        Some((here, Closed::is_held(closed)))
    }
}

/// Whether a decision charges ([`FleetGate::check_id`]) or only looks
/// ([`FleetGate::peek_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Charge an admitted request, locally and in the fleet count.
    Check,
    /// Charge nothing, claim nothing.
    Peek,
}

/// What the fleet makes of a request before it is charged (`FleetGate::look`).
#[derive(Clone, Copy)]
pub(super) struct Look<'g> {
    /// `None`: limited locally only (degraded, epoch not prepared, a burst
    /// beyond the gate's counters, a cost above the burst).
    pub(super) fit: Option<Fit>,
    pub(super) used: Option<u64>,
    /// The emission interval the fleet holds the key to: the quota's, or
    /// `live` times it while the key is held to its fair share.
    pub(super) interval_ns: u64,
    pub(super) into: u64,
    /// The cost the local limiter charges: the request's, or more while the
    /// store is out of reach with `on_outage = "share"`.
    pub(super) local_cost: u32,
    /// Where an admitted request is counted, or `None` when the fleet does
    /// not track it.
    pub(super) at: Option<Slots<'g>>,
}

impl Look<'_> {
    /// A request of `cost` the fleet leaves to the local limiter, counting
    /// nothing.
    const fn local_only(cost: u32) -> Look<'static> {
        Look {
            fit: None,
            used: None,
            interval_ns: 0,
            into: 0,
            local_cost: cost,
            at: None,
        }
    }
}
