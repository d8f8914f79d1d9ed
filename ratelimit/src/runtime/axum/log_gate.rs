//! Logs an attacker cannot flood: each event kind passes a gate (at most
//! one event per second, with a count of what was suppressed), and a
//! misconfiguration worth one line logs it once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One log event kind's gate: at most one event per `every_ns`.
#[derive(Debug)]
pub(crate) struct LogGate {
    next_ns: AtomicU64,
    suppressed: AtomicU64,
}

impl LogGate {
    pub(crate) const fn new() -> LogGate {
        LogGate {
            next_ns: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(suppressed since the last event)` when an event may be logged
    /// now (`now_ns` from any monotonic clock).
    pub(crate) fn pass(&self, now_ns: u64) -> Option<u64> {
        const EVERY_NS: u64 = 1_000_000_000;
        let next = self.next_ns.load(Ordering::Relaxed);
        if now_ns >= next
            && self
                .next_ns
                .compare_exchange(
                    next,
                    now_ns.saturating_add(EVERY_NS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Default for LogGate {
    fn default() -> Self {
        LogGate::new()
    }
}

/// A once-only flag for misconfigurations worth one log line.
#[derive(Debug, Default)]
pub(crate) struct Once(AtomicBool);

impl Once {
    pub(crate) const fn new() -> Once {
        Once(AtomicBool::new(false))
    }
    pub(crate) fn first(&self) -> bool {
        !self.0.load(Ordering::Relaxed) && !self.0.swap(true, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_lets_one_event_per_second_through() {
        let g = LogGate::new();
        assert_eq!(g.pass(5), Some(0));
        assert_eq!(g.pass(6), None);
        assert_eq!(g.pass(999_999_999), None);
        assert_eq!(g.pass(1_000_000_005), Some(2));
        let once = Once::new();
        assert!(once.first());
        assert!(!once.first());
    }
}
