//! The gate's settings, and why a gate could not be built.

use std::time::Duration;

use crate::shared::defaults::OnOutage;

/// The default number of sub-epochs a window is cut in.
pub const DEFAULT_SUB_EPOCHS: u32 = 25;

/// The gate's settings.
#[derive(Clone)]
#[non_exhaustive]
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
    /// Cold keys tracked per epoch; beyond, new keys are counted in a
    /// sketch and held to their share of the budget (and counted in
    /// `ratelimit_global_untracked_total`), and a key at its share or hot
    /// takes a slot from the reserve (as many slots again). Memory: 3
    /// tables of `2 * max_keys` (rounded up to a power of two) slots of 96
    /// bytes (the slot, its sketch's counters, a filter bit), plus the sync
    /// loop's history of active keys.
    pub max_keys: usize,
    /// Rounds a key stays synced after its last request.
    pub idle_rounds: u64,
    /// The longest backoff after failed rounds.
    pub max_backoff: Duration,
    /// The secret the fleet ids of keys are derived from: the same on every
    /// instance, at least 16 bytes.
    pub secret: Vec<u8>,
    /// What a key is limited to while the store is out of reach
    /// (`[global] on_outage`).
    pub on_outage: OnOutage,
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
            .field("on_outage", &self.on_outage)
            .finish()
    }
}

impl GateSettings {
    /// Defaults (10 s window in 25 sub-epochs, 100 ms sync, 50,000 keys)
    /// with this secret.
    pub fn new(secret: &[u8]) -> GateSettings {
        GateSettings {
            window: crate::shared::defaults::GLOBAL_WINDOW,
            sub_epochs: None,
            sync_interval: crate::shared::defaults::GLOBAL_SYNC_INTERVAL,
            max_keys: crate::shared::defaults::GLOBAL_MAX_KEYS,
            idle_rounds: 20,
            max_backoff: Duration::from_secs(5),
            secret: secret.to_vec(),
            on_outage: OnOutage::Local,
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

crate::shared::setters::with!(GateSettings {
    with_window => window: Duration,
    with_sub_epochs => sub_epochs: u32 as some,
    with_sync_interval => sync_interval: Duration,
    with_max_keys => max_keys: usize,
    with_idle_rounds => idle_rounds: u64,
    with_max_backoff => max_backoff: Duration,
    with_on_outage => on_outage: OnOutage,
});

/// Why a gate could not be built.
#[derive(Clone)]
pub struct GateError {
    message: String,
}

crate::engine::errors::debug_as_display!(GateError);

impl GateError {
    pub(super) fn new(message: impl Into<String>) -> GateError {
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
