//! The gate's metrics (names in [`crate::metrics`]; the `metrics` crate's
//! facade: the application installs the recorder), and the one place that
//! sets the degraded gauges, so the flag and its reason always agree.

use crate::shared::metrics::{DEGRADED_REASONS, GLOBAL_DEGRADED_REASON};
pub(crate) use crate::shared::metrics::{
    GLOBAL_DEGRADED as DEGRADED, GLOBAL_DEGRADED_KEYS as DEGRADED_KEYS, GLOBAL_FAILED_KEYS as FAILED_KEYS,
    GLOBAL_HOT_KEYS as HOT_KEYS, GLOBAL_LIVE_INSTANCES as LIVE_INSTANCES, GLOBAL_SYNCED_KEYS as SYNCED_KEYS,
    GLOBAL_SYNC_DURATION as SYNC_SECONDS, GLOBAL_SYNC_ROUNDS as SYNC_ROUNDS, GLOBAL_UNREAD_KEYS as UNREAD_KEYS,
    GLOBAL_UNTRACKED as UNTRACKED,
};

/// Why the gate limits locally only (the `reason` label of
/// [`GLOBAL_DEGRADED_REASON`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The last round failed: the store refused, errored or was unreachable.
    SyncError,
    /// The last round did not finish within its timeout.
    SyncTimeout,
    /// No round succeeded recently, noticed by requests.
    Stalled,
    /// The sync task ended (panicked or aborted).
    TaskStopped,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Reason::SyncError => "sync_error",
            Reason::SyncTimeout => "sync_timeout",
            Reason::Stalled => "stalled",
            Reason::TaskStopped => "task_stopped",
        }
    }
}

/// Sets the degraded flag (`None`: fleet-wide limits apply) and the reason
/// gauges: every reason's series exists from the first call, at 0 or 1.
pub(crate) fn set_degraded(reason: Option<Reason>) {
    metrics::gauge!(DEGRADED).set(if reason.is_some() { 1.0 } else { 0.0 });
    let current = reason.map(Reason::label);
    for r in DEGRADED_REASONS {
        let on = current == Some(*r);
        metrics::gauge!(GLOBAL_DEGRADED_REASON, "reason" => *r).set(if on { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_a_catalogued_label() {
        for r in [
            Reason::SyncError,
            Reason::SyncTimeout,
            Reason::Stalled,
            Reason::TaskStopped,
        ] {
            assert!(DEGRADED_REASONS.contains(&r.label()), "{r:?}");
        }
        assert_eq!(DEGRADED_REASONS.len(), 4);
    }
}
