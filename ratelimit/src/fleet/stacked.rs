//! Stacked limits through the fleet gate: several limits of one request as
//! one all-or-nothing decision, each also held to its fleet budget.

use std::sync::atomic::Ordering;

use super::check::FleetCheck;
use super::gate::{FleetGate, Mode};
use crate::{Clock, Decision, Limiter, Store};

impl FleetGate {
    /// Several limits as one all-or-nothing decision, each also held to its
    /// fleet budget: `checks[i]` is the `i`th limit (its local check, its
    /// route and fleet id). Every limit is looked at first (locally and
    /// against the fleet estimate, as [`peek_id`](Self::peek_id)); if any
    /// refuses, nothing is charged, locally or in the fleet counters, and
    /// no table slot is claimed. Otherwise the local limits are charged as
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
    /// When `out` is shorter than `checks`.
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
    /// let per_user = Quota::per_minute(60).with_burst(100); // fleet: 10 per 10 s
    /// let per_ip = Quota::per_minute(600).with_burst(100); // fleet: 100 per 10 s
    /// let (user, ip) = (limiter.cell_key(1, "user-1"), limiter.cell_key(2, "203.0.113.9"));
    /// let checks = [
    ///     FleetCheck::new(Check::new(user, per_user, 1), 1, gate.fleet_id(1, "user-1")),
    ///     FleetCheck::new(Check::new(ip, per_ip, 1), 2, gate.fleet_id(2, "203.0.113.9")),
    /// ];
    /// let mut out = [limiter.peek(&"", &per_user); 2];
    /// for _ in 0..10 {
    ///     assert!(gate.check_all_id(&limiter, &checks, &mut out));
    /// }
    /// assert!(!gate.check_all_id(&limiter, &checks, &mut out), "the user's fleet budget is spent");
    /// assert_eq!(out[0].denial(), Some(ratelimit::Denial::FleetLimited));
    /// assert_eq!(limiter.peek_all(&[Check::new(ip, per_ip, 0)])[0].remaining(), 90, "the address was not charged");
    /// ```
    pub fn check_all_id<S: Store, C: Clock>(
        &self,
        limiter: &Limiter<S, C>,
        checks: &[FleetCheck],
        out: &mut [Decision],
    ) -> bool {
        assert!(out.len() >= checks.len(), "check_all_id: one decision per check");
        for c in checks {
            limiter.store().prefetch(c.local.cell);
        }
        let now = limiter.clock().now();
        // Look at every limit, fleet included; any refusal charges nothing.
        let mut refused = false;
        for (c, d) in checks.iter().zip(out.iter_mut()) {
            *d = self.decide_at(limiter, c, &|| c.group_id, Mode::Peek, now);
            refused |= d.is_denied();
        }
        if refused {
            for (c, d) in checks.iter().zip(out.iter_mut()) {
                if d.is_allowed() {
                    // Charged nothing: its room as it is.
                    *d = limiter.peek_cell_at(c.local.cell, &c.local.quota, 0, now);
                }
            }
            return false;
        }
        // Charge locally, all or nothing (a race hands back what it took).
        if !limiter.check_all_at(checks, out, now) {
            return false;
        }
        // Then count each limit for the fleet, and report its room where
        // the fleet's is tighter.
        let round = self.round.load(Ordering::Relaxed);
        for (c, d) in checks.iter().zip(out.iter_mut()) {
            let (fleet_id, quota, cost) = (c.counted_id(d), &c.local.quota, c.local.cost);
            let look = self.look(fleet_id, quota, cost, now);
            if let Some(at) = &look.at {
                self.count(at, c.route, fleet_id, round, cost);
            }
            *d = self.within(*d, &look, quota, cost);
        }
        true
    }
}
