//! The fleet limit (feature `redis`, configured by the `[global]` section):
//! a per-key limit shared by every instance of a service, reconciled
//! through a [`FleetStore`] (Redis) by a background loop, never on the
//! request path. One word for it in the code and the docs: the fleet.
//!
//! A request is admitted when the local GCRA admits it **and** the fleet's
//! estimated consumption of the key over the sliding window, plus this
//! instance's not-yet-confirmed requests, plus the request's cost, fits the
//! fleet budget: the quota's rate over the window (`600/min` with a `10s`
//! window is 100 per window). The window is cut into sub-epochs (slices,
//! 25 by default); the estimate is the sum of every slice the window
//! overlaps, so it never counts less than the true window holds (see
//! [`SlidingWindow`] for the arithmetic and its property tests).
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
//! use ratelimit::fleet::{FleetGate, FleetHealth, GateSettings, MemoryFleetStore};
//! use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
//! use std::time::Duration;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let clock = ManualClock::new();
//! let settings = GateSettings::new(b"a fleet-wide secret, 16+ bytes").with_window(Duration::from_secs(10));
//! let gate = FleetGate::new(settings, &clock).unwrap();
//! let limiter = Limiter::new(MemoryStore::default(), clock.clone());
//! let quota = Quota::per_minute(600); // fleet budget: 100 per 10 s window
//! let store = MemoryFleetStore::new(); // Redis in production: RedisStore
//! assert!(gate.check(&limiter, 0, &"user-1", &quota, 1).is_allowed());
//! gate.sync_once(&store, &clock).await.unwrap(); // what the background loop does
//! assert_eq!(gate.health(), FleetHealth::InForce);
//! # });
//! ```

mod check;
mod closed;
mod delta;
mod gate;
mod health;
mod history;
mod hot;
mod ids;
mod marks;
mod names;
mod ration;
mod redis;
mod round;
mod settings;
mod settlement;
mod stacked;
mod store;
mod table;
mod task;
#[cfg(feature = "redis-tls")]
pub(crate) mod tls;
mod tracking;
mod visit;

pub use self::redis::{RedisSettings, RedisStore};
pub use crate::engine::window::{Fit, Position, SlidingWindow, WindowError, MAX_SLICES};
pub use check::FleetCheck;
pub use gate::{FleetGate, MAX_FLEET_BURST};
pub use health::{FleetHealth, GateStatus};
pub use round::SyncReport;
pub use settings::{GateError, GateSettings, DEFAULT_SUB_EPOCHS};
pub use store::{Counter, FleetError, FleetStore, MemoryFleetStore, OpResult, SyncOp};

#[cfg(test)]
mod hot_tests;
#[cfg(test)]
mod tests;
