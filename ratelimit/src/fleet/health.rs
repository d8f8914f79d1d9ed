//! The gate's health: whether the fleet limit is in force, the counts a
//! readiness probe and the metrics read, and when the last round's totals
//! stop counting (a stalled or stopped sync loop, noticed by requests).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::gate::FleetGate;
use super::names::{
    set_degraded, Reason, DEGRADED_KEYS, FAILED_KEYS, HOT_KEYS, LIVE_INSTANCES, SYNCED_KEYS, SYNC_ROUNDS, SYNC_SECONDS,
    UNREAD_KEYS,
};
use super::round::SyncReport;
use super::store::FleetError;

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
    /// Keys the last round did not read because rounds run long (reads
    /// rationed): each is held to its fair share of the fleet budget
    /// (budget / live instances) until a round reads it.
    pub unread_keys: u64,
    /// Live instances in the fleet's roster, as the last round read it (1
    /// until a round has): a cold key is held to `budget / live_instances`.
    pub live_instances: u64,
    /// Active keys the last round pushed and read (hot: they reached their
    /// share of the budget on some instance); the others are cold, decided
    /// locally at no cost to the store.
    pub hot_keys: u64,
}

/// Whether the fleet limit is in force: what a readiness probe asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetHealth {
    /// Every tracked key is limited fleet-wide.
    InForce,
    /// Every tracked key is limited fleet-wide, but sync rounds run long
    /// (a flood of keys, a slow Redis) and the last one did not read these
    /// keys: each is held to its fair share of the budget (budget / live
    /// instances) until a round reads it, so a client of one of them may
    /// get less than its budget.
    Rationed {
        /// Keys the last round did not read.
        unread_keys: u64,
    },
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

impl FleetGate {
    /// Health and counts.
    pub fn status(&self) -> GateStatus {
        GateStatus {
            degraded: self.degraded.load(Ordering::Relaxed) || self.stalled.load(Ordering::Relaxed),
            degraded_keys: self.degraded_keys.load(Ordering::Relaxed),
            rounds: self.round.load(Ordering::Relaxed) - 1,
            failures: self.failures.load(Ordering::Relaxed),
            untracked: self.untracked.load(Ordering::Relaxed),
            unread_keys: self.unread_keys.load(Ordering::Relaxed),
            live_instances: self.live.load(Ordering::Relaxed),
            hot_keys: self.hot_keys.load(Ordering::Relaxed),
        }
    }

    /// Whether the fleet limit is in force, for a readiness probe.
    ///
    /// ```
    /// # use ratelimit::fleet::{FleetGate, FleetHealth, GateSettings};
    /// # let gate = FleetGate::new(GateSettings::new(b"a fleet-wide secret, 16+ bytes"), &ratelimit::ManualClock::new()).unwrap();
    /// match gate.health() {
    ///     FleetHealth::InForce => {}
    ///     FleetHealth::Rationed { unread_keys } => eprintln!("{unread_keys} keys held to their fair share"),
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
        } else if s.unread_keys > 0 {
            FleetHealth::Rationed {
                unread_keys: s.unread_keys,
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

    /// The last round's totals count no more (a failed round, a stopped
    /// loop): requests decide locally until a round succeeds.
    pub(super) fn mark_stale(&self) {
        self.fresh_until.store(0, Ordering::Relaxed);
    }

    /// A round succeeded at `now`: its totals count for the next
    /// `stale_after`.
    pub(super) fn mark_fresh(&self, now: u64) {
        let until = now.saturating_add(self.stale_after_ns.load(Ordering::Relaxed));
        self.fresh_until.store(until, Ordering::Relaxed);
    }

    /// Whether the fleet estimate may be used at `now`: the last round
    /// succeeded and is recent. A stall is noticed here, by requests.
    #[inline]
    pub(super) fn in_force(&self, now: u64) -> bool {
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
}

/// A failed round's bookkeeping: the error, the counters, degraded mode and
/// its one log line.
impl FleetGate {
    pub(super) fn set_last_error(&self, e: Option<String>) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = e;
        }
    }

    pub(super) fn fail(&self, e: FleetError) -> FleetError {
        let reason = if e.is_timeout() {
            Reason::SyncTimeout
        } else {
            Reason::SyncError
        };
        self.fail_because(e, reason)
    }

    /// Marks the round failed, for `reason`.
    pub(super) fn fail_because(&self, e: FleetError, reason: Reason) -> FleetError {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.degraded_keys.store(0, Ordering::Relaxed);
        metrics::counter!(SYNC_ROUNDS, "result" => "error").increment(1);
        set_degraded(Some(reason));
        self.set_last_error(Some(e.to_string()));
        let was = self.degraded.swap(true, Ordering::Relaxed);
        // A stall that requests noticed first (a round that hangs until its
        // timeout) was logged then: one incident, one line.
        let noticed = self.stalled.load(Ordering::Relaxed);
        self.mark_stale();
        if !was && !noticed {
            tracing::warn!(target: "ratelimit", error = %e, "fleet gate: sync failed, limiting locally only until it recovers");
        }
        e
    }
}

impl FleetGate {
    /// A successful round's bookkeeping: the counts, the gauges, the last
    /// error, the recovery's log line; `now` on the limiter's clock,
    /// `started` when the round's store call began.
    pub(super) fn round_succeeded(
        &self,
        report: &SyncReport,
        first_error: Option<FleetError>,
        failed_before: bool,
        now: u64,
        started: std::time::Instant,
    ) {
        let failed_now = report.failed_keys > 0;
        self.degraded_keys.store(report.failed_keys as u64, Ordering::Relaxed);
        metrics::gauge!(DEGRADED_KEYS).set(report.failed_keys as f64);
        self.unread_keys.store(report.unread_keys as u64, Ordering::Relaxed);
        metrics::gauge!(UNREAD_KEYS).set(report.unread_keys as f64);
        self.hot_keys.store(report.hot_keys as u64, Ordering::Relaxed);
        metrics::gauge!(HOT_KEYS).set(report.hot_keys as f64);
        metrics::gauge!(LIVE_INSTANCES).set(self.live.load(Ordering::Relaxed) as f64);
        if failed_now {
            metrics::counter!(FAILED_KEYS).increment(report.failed_keys as u64);
            let e = first_error.map_or_else(|| "unknown".to_owned(), |e| e.to_string());
            if !failed_before {
                tracing::warn!(
                    target: "ratelimit",
                    error = %e,
                    keys = report.failed_keys,
                    "fleet gate: the store refused part of a sync round; those keys are limited locally only until it succeeds"
                );
            }
            self.set_last_error(Some(e));
        } else if failed_before {
            tracing::info!(target: "ratelimit", "fleet gate: every key is synced again");
        }
        self.mark_fresh(now);
        let was_degraded = self.degraded.swap(false, Ordering::Relaxed);
        let was_stalled = self.stalled.swap(false, Ordering::Relaxed);
        if was_degraded || was_stalled {
            tracing::info!(target: "ratelimit", "fleet gate: sync recovered, fleet-wide limits apply again");
        }
        if !failed_now {
            self.set_last_error(None);
        }
        set_degraded(None);
        metrics::gauge!(SYNCED_KEYS).set(report.keys as f64);
        metrics::counter!(SYNC_ROUNDS, "result" => "ok").increment(1);
        metrics::histogram!(SYNC_SECONDS).record(started.elapsed().as_secs_f64());
    }
}
