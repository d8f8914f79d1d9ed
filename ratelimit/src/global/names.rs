//! The names of the gate's metrics (the `metrics` crate's facade; the
//! application installs the recorder).

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
