//! Time sources: the `Clock` trait, the system clock, and a manual clock for tests.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of time for the limiter.
///
/// # Contract
///
/// * [`now`](Clock::now) is a monotonic reading in nanoseconds from an
///   arbitrary origin fixed for the clock's lifetime. It should never go
///   backwards; if it does, the engine still grants no extra capacity
///   (clients stay limited until the clock catches up).
/// * [`wall_nanos`](Clock::wall_nanos) is wall-clock time, nanoseconds since
///   the Unix epoch. Only fleet-wide windows use it (they must agree across
///   machines); per-key decisions never do, so wall-clock jumps cannot grant
///   capacity.
/// * Both are called on the request path: they must not block or allocate.
pub trait Clock: Send + Sync {
    /// Monotonic nanoseconds since this clock's origin.
    fn now(&self) -> u64;

    /// Wall-clock nanoseconds since the Unix epoch.
    fn wall_nanos(&self) -> u64 {
        system_wall_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> u64 {
        (**self).now()
    }
    fn wall_nanos(&self) -> u64 {
        (**self).wall_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> u64 {
        (**self).now()
    }
    fn wall_nanos(&self) -> u64 {
        (**self).wall_nanos()
    }
}

fn system_wall_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The production clock: the CPU's time-stamp counter through `quanta`
/// (calibrated against the OS monotonic clock), falling back to the OS
/// monotonic clock where no invariant TSC exists.
///
/// Measured on the 2-core CI machine (`cargo bench --bench engine -- clock`):
/// 11 to 15 ns per reading, against 18 to 27 ns for
/// `std::time::Instant::now()`; the clock is the largest fixed cost of a
/// decision, so this matters.
///
/// ```
/// use ratelimit::{Clock, SystemClock};
///
/// let clock = SystemClock::default();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Clone)]
pub struct SystemClock {
    clock: quanta::Clock,
}

impl SystemClock {
    /// A new system clock. Calibration happens once per process.
    pub fn new() -> Self {
        SystemClock {
            clock: quanta::Clock::new(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SystemClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemClock").finish_non_exhaustive()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> u64 {
        // Same conversion as governor's QuantaClock: raw counter scaled to ns.
        self.clock.delta_as_nanos(0, self.clock.raw())
    }
}

/// A clock that moves only when told to: for tests, yours and ours.
///
/// Clones share the same time, so a test can keep one handle and give another
/// to the limiter. Wall time moves with monotonic time from a fixed start.
///
/// ```
/// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
/// let quota = Quota::per_second(1).with_burst(1);
/// assert!(limiter.check(&1u64, &quota).is_allowed());
/// assert!(limiter.check(&1u64, &quota).is_denied());
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.check(&1u64, &quota).is_allowed());
/// ```
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

struct ManualInner {
    now: AtomicU64,
    wall_origin: u64,
}

/// Where a new [`ManualClock`] starts: far enough from 0 that tests can step
/// it backwards, and at a round wall time (2026-01-01T00:00:00Z).
const MANUAL_START_NS: u64 = 1_000_000 * 1_000_000_000;
const MANUAL_WALL_ORIGIN_NS: u64 = 1_767_225_600 * 1_000_000_000 - MANUAL_START_NS;

impl ManualClock {
    /// A manual clock at a fixed starting point (1,000,000 s after its
    /// origin, so it can be stepped back; wall time 2026-01-01T00:00:00Z).
    pub fn new() -> Self {
        Self::starting_at(MANUAL_START_NS)
    }

    /// A manual clock whose monotonic reading starts at `nanos`.
    pub fn starting_at(nanos: u64) -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                now: AtomicU64::new(nanos),
                wall_origin: MANUAL_WALL_ORIGIN_NS,
            }),
        }
    }

    /// Moves time forward (saturating at `u64::MAX`).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .inner
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_add(by)));
    }

    /// Moves time backward (saturating at 0), to test clock steps.
    pub fn rewind(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .inner
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(by)));
    }

    /// Sets the monotonic reading to `nanos`.
    pub fn set(&self, nanos: u64) {
        self.inner.now.store(nanos, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("now", &self.now()).finish()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.inner.now.load(Ordering::SeqCst)
    }

    fn wall_nanos(&self) -> u64 {
        self.inner.wall_origin.saturating_add(self.now())
    }
}

/// Either the system clock or a manual one, chosen at run time: what the
/// HTTP runtime uses so one concrete limiter type serves production and tests
/// (a branch per reading, no dynamic dispatch).
#[derive(Debug, Clone)]
pub enum AnyClock {
    /// [`SystemClock`].
    System(SystemClock),
    /// [`ManualClock`].
    Manual(ManualClock),
}

impl Default for AnyClock {
    fn default() -> Self {
        AnyClock::System(SystemClock::default())
    }
}

impl From<SystemClock> for AnyClock {
    fn from(c: SystemClock) -> Self {
        AnyClock::System(c)
    }
}

impl From<ManualClock> for AnyClock {
    fn from(c: ManualClock) -> Self {
        AnyClock::Manual(c)
    }
}

impl Clock for AnyClock {
    #[inline]
    fn now(&self) -> u64 {
        match self {
            AnyClock::System(c) => c.now(),
            AnyClock::Manual(c) => c.now(),
        }
    }
    fn wall_nanos(&self) -> u64 {
        match self {
            AnyClock::System(c) => c.wall_nanos(),
            AnyClock::Manual(c) => c.wall_nanos(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_both_ways_and_shares_time() {
        let a = ManualClock::new();
        let b = a.clone();
        let start = a.now();
        a.advance(Duration::from_secs(2));
        assert_eq!(b.now(), start + 2_000_000_000);
        b.rewind(Duration::from_secs(3));
        assert_eq!(a.now(), start - 1_000_000_000);
        a.set(5);
        assert_eq!(b.now(), 5);
        a.advance(Duration::MAX);
        assert_eq!(a.now(), u64::MAX);
    }

    #[test]
    fn manual_wall_time_starts_in_2026() {
        let c = ManualClock::new();
        assert_eq!(c.wall_nanos(), 1_767_225_600 * 1_000_000_000);
    }

    #[test]
    fn system_clock_is_monotonic_and_ticks() {
        let c = SystemClock::new();
        let mut last = c.now();
        for _ in 0..10_000 {
            let n = c.now();
            assert!(n >= last);
            last = n;
        }
        let before = c.now();
        std::thread::sleep(Duration::from_millis(5));
        let elapsed = c.now() - before;
        assert!(elapsed >= 4_000_000, "elapsed {elapsed} ns");
        assert!(c.wall_nanos() > 1_700_000_000 * 1_000_000_000);
    }
}
