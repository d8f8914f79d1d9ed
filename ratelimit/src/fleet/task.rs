//! The background task: a sync round every `sync_interval`, one at a time,
//! each under a timeout, with exponential backoff and jitter after failures;
//! and the watch that turns the gate local-only if the task stops.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::gate::FleetGate;
use super::names::{set_degraded, Reason};
use super::store::{FleetError, FleetStore};
use crate::Clock;

impl FleetGate {
    /// Spawns the sync loop on the current tokio runtime: a round every
    /// `sync_interval` (one at a time), each under `timeout`; after a
    /// failure, exponential backoff with jitter up to `max_backoff`. The task
    /// ends when the gate is dropped. If it stops otherwise (it panicked, or
    /// its handle was aborted), the gate goes local-only and says so.
    pub fn spawn_sync<G: FleetStore, C: Clock + Clone + 'static>(
        self: &Arc<Self>,
        store: G,
        clock: C,
        timeout: Duration,
    ) -> tokio::task::JoinHandle<()> {
        self.set_round_timeout(timeout);
        self.mark_fresh(clock.now());
        let weak = Arc::downgrade(self);
        let interval = self.settings.sync_interval;
        let max_backoff = self.settings.max_backoff;
        set_degraded(None);
        tokio::spawn(async move {
            let _watch = Watch(weak.clone());
            let mut failures = 0u32;
            let mut jitter = Jitter::new();
            // The first failure logs in `fail`; repeats at most every 10 s.
            let mut last_log = std::time::Instant::now();
            let mut suppressed = 0u64;
            loop {
                let wait = if failures == 0 {
                    let Some(gate) = weak.upgrade() else { return };
                    aligned_wait(gate.wall(clock.now()), interval)
                } else {
                    let backoff = interval.saturating_mul(1 << failures.min(16)).min(max_backoff);
                    backoff.mul_f64(jitter.next_between(0.5, 1.5))
                };
                tokio::time::sleep(wait).await;
                let Some(gate) = weak.upgrade() else { return };
                let result = match tokio::time::timeout(timeout, gate.sync_once(&store, &clock)).await {
                    Ok(r) => r,
                    Err(_) => Err(gate.fail_because(
                        FleetError::new(format!("sync round took longer than {timeout:?}")),
                        Reason::SyncTimeout,
                    )),
                };
                match result {
                    Ok(_) => failures = 0,
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        if failures == 1 {
                            // `fail` logged this one (or the stall that
                            // came first did): the repeats count from here.
                            last_log = std::time::Instant::now();
                            suppressed = 0;
                        } else if last_log.elapsed() >= Duration::from_secs(10) {
                            // At most one line every 10 s while it keeps failing.
                            tracing::warn!(target: "ratelimit", error = %e, failures, suppressed, "fleet gate: sync still failing");
                            last_log = std::time::Instant::now();
                            suppressed = 0;
                        } else {
                            suppressed += 1;
                        }
                    }
                }
            }
        })
    }
}

/// The wait from wall time `wall` (ns) to the next round: until a
/// tenth of `interval` before the next wall-clock multiple of it, and at
/// least a quarter interval. Why: a closed sum's release of units leaving
/// the window falls on quarter-slice boundaries, which are multiples of the
/// interval at the default sub-epochs; a round just before one takes the
/// units admitted in the quarter that ends there and dates them to it,
/// where a round just after would date them a quarter late (held in the
/// sum that much longer: measured, a lone instance got 94 of 100 in its
/// leanest 10 s window with rounds at any phase). Every instance rounds at
/// the same wall times, a Redis round trip apart.
fn aligned_wait(wall: u64, interval: Duration) -> Duration {
    let every = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX).max(1);
    // A tenth: a loaded machine wakes a timer several ms late.
    let lead = every / 10;
    // The first target at least a quarter interval away.
    let earliest = wall.saturating_add(every / 4).saturating_add(lead);
    let next = (earliest / every).saturating_add(1).saturating_mul(every) - lead;
    Duration::from_nanos(next.saturating_sub(wall))
}

/// Dropped with the sync task: if the gate outlives it (a panic, an aborted
/// task), the gate goes local-only and says why.
struct Watch(Weak<FleetGate>);

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(gate) = self.0.upgrade() {
            let why = if std::thread::panicking() {
                "the sync task panicked"
            } else {
                "the sync task stopped"
            };
            gate.stalled.store(true, Ordering::Relaxed);
            gate.mark_stale();
            gate.failures.fetch_add(1, Ordering::Relaxed);
            gate.set_last_error(Some(why.to_owned()));
            set_degraded(Some(Reason::TaskStopped));
            tracing::error!(target: "ratelimit", "fleet gate: {why}; limiting locally only from now on");
        }
    }
}

/// xorshift jitter for the backoff (no need for a cryptographic RNG).
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Jitter(seed | 1)
    }
    fn next_between(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rounds_fall_just_before_multiples_of_the_interval() {
        let ms = |n: u64| n * 1_000_000;
        let every = std::time::Duration::from_millis(100);
        // From anywhere, to 10 ms before the next multiple of 100 ms.
        assert_eq!(super::aligned_wait(ms(1_000), every).as_millis(), 90);
        assert_eq!(super::aligned_wait(ms(1_030), every).as_millis(), 60);
        // Less than a quarter interval before it: the one after.
        assert_eq!(super::aligned_wait(ms(1_080), every).as_millis(), 110);
        assert_eq!(super::aligned_wait(ms(1_096), every).as_millis(), 94);
    }
}
