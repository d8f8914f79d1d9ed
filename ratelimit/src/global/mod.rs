//! The fleet-wide gate (feature `redis`): a per-key limit shared by every
//! instance of a service, reconciled through a [`GlobalStore`] (Redis) by a
//! background loop, never on the request path.
//!
//! A request is admitted when the local GCRA admits it **and** the fleet's
//! estimated consumption of the key over the sliding window, plus this
//! instance's not-yet-confirmed requests, plus the request's cost, fits the
//! fleet budget: the quota's rate over the window (`600/min` with a `10s`
//! window is 100 per window). The window is cut into sub-epochs (slices,
//! 25 by default); the estimate is the sum of every slice the window
//! overlaps, so it never counts less than the true window holds (see
//! [`crate::window`] for the arithmetic and its property tests).
//!
//! Every `sync_interval`, one task per instance pushes this instance's
//! deltas (`HINCRBY` + `PEXPIRE`) and pulls the totals of the slices that
//! may still change (`HMGET`), in pipelines; closed slices are kept locally
//! once final. When a round fails (Redis down, slow, or refusing writes),
//! the gate goes **local-only** until a round succeeds: requests never
//! wait, and the fleet can then admit up to N times one instance's limit.
//! When only some keys fail (a key of the wrong type, a cluster node
//! down), only those keys are local-only. See `docs/global.md` for the
//! overshoot model and the exact failure behaviour.
//!
//! ```
//! use ratelimit::global::{FleetGate, FleetHealth, GateSettings, MemoryGlobalStore};
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
//! assert_eq!(gate.health(), FleetHealth::InForce);
//! # });
//! ```

mod gate;
mod ids;
mod redis;
mod store;
mod sync;
mod table;
#[cfg(feature = "redis-tls")]
pub(crate) mod tls;

use std::time::Duration;

pub use self::redis::{RedisSettings, RedisStore};
pub use gate::{FleetGate, FleetHealth, GateStatus, MAX_FLEET_BURST};
pub use store::{Counter, GlobalError, GlobalStore, MemoryGlobalStore, OpResult, SyncOp};
pub use sync::SyncReport;

/// Gauge: 1 while the whole gate is local-only (the last sync round failed,
/// or the sync loop stopped or stalled).
pub const DEGRADED: &str = "ratelimit_global_degraded";
/// Gauge: keys limited locally only because their part of the last round
/// failed.
pub const DEGRADED_KEYS: &str = "ratelimit_global_degraded_keys";
/// Key failures in sync rounds (an error reply, a value of the wrong type,
/// a node down), summed over rounds.
pub const FAILED_KEYS: &str = "ratelimit_global_failed_keys_total";
/// Sync rounds, by `result` (`ok`, `error`).
pub const SYNC_ROUNDS: &str = "ratelimit_global_sync_rounds_total";
/// Duration of successful sync rounds.
pub const SYNC_SECONDS: &str = "ratelimit_global_sync_seconds";
/// Keys the gate could not track (table full): limited locally only.
pub const UNTRACKED: &str = "ratelimit_global_untracked_total";

/// The default number of sub-epochs a window is cut in.
pub const DEFAULT_SUB_EPOCHS: u32 = 25;

/// The gate's settings.
#[derive(Clone)]
pub struct GateSettings {
    /// The sliding window (and epoch) length.
    pub window: Duration,
    /// Sub-epochs (slices) per window: `None` for
    /// [`DEFAULT_SUB_EPOCHS`], or fewer when the window is short (a slice
    /// is at least two sync intervals). More slices waste less of the
    /// budget (an instance alone gets at least `k / (k + 1)` of it) and
    /// cost more Redis memory per key (one hash field per slice).
    pub sub_epochs: Option<u32>,
    /// How often the sync loop runs.
    pub sync_interval: Duration,
    /// Keys tracked per epoch; beyond, new keys are limited locally only
    /// (and counted in `ratelimit_global_untracked_total`). Memory:
    /// 3 tables of `2 * max_keys` (rounded up to a power of two) slots of
    /// 64 bytes, plus the sync loop's history of active keys.
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
            .field("sub_epochs", &self.sub_epochs)
            .field("sync_interval", &self.sync_interval)
            .field("max_keys", &self.max_keys)
            .field("idle_rounds", &self.idle_rounds)
            .field("max_backoff", &self.max_backoff)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl GateSettings {
    /// Defaults (10 s window in 25 sub-epochs, 100 ms sync, 50,000 keys)
    /// with this secret.
    pub fn new(secret: &[u8]) -> GateSettings {
        GateSettings {
            window: Duration::from_secs(10),
            sub_epochs: None,
            sync_interval: Duration::from_millis(100),
            max_keys: 50_000,
            idle_rounds: 20,
            max_backoff: Duration::from_secs(5),
            secret: secret.to_vec(),
        }
    }

    /// The sub-epochs these settings give: the configured number, or the
    /// default capped so a slice spans at least two sync intervals.
    pub fn effective_sub_epochs(&self) -> u32 {
        self.sub_epochs.unwrap_or_else(|| {
            let fit = self.window.as_nanos() / self.sync_interval.as_nanos().max(1).saturating_mul(2);
            (fit.min(u128::from(DEFAULT_SUB_EPOCHS)) as u32).max(1)
        })
    }
}

/// Why a gate could not be built.
#[derive(Debug, Clone)]
pub struct GateError {
    message: String,
}

impl GateError {
    fn new(message: impl Into<String>) -> GateError {
        GateError {
            message: message.into(),
        }
    }
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GateError {}

#[cfg(test)]
mod tests;
