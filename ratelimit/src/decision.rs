//! `Decision`: the outcome of one check, with what response headers need.

use std::time::Duration;

/// The outcome of [`Limiter::check`](crate::Limiter::check): admitted or not,
/// and the numbers that rate-limit headers carry.
///
/// A denial is a value, not an error.
///
/// ```
/// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
/// use std::time::Duration;
///
/// let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
/// let quota = Quota::per_second(10).with_burst(2);
/// let first = limiter.check(&"k", &quota);
/// assert!(first.is_allowed());
/// assert_eq!((first.limit(), first.remaining()), (2, 1));
/// assert_eq!(first.reset_after(), Duration::from_millis(100));
///
/// limiter.check(&"k", &quota);
/// let third = limiter.check(&"k", &quota);
/// assert!(!third.is_allowed());
/// assert_eq!(third.retry_after(), Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit: u32,
    /// Unused capacity after this decision, in nanoseconds. `remaining()`
    /// divides it by the emission interval only when asked, keeping a
    /// division off the path of callers that never read it.
    pub(crate) slack_ns: u64,
    pub(crate) interval_ns: u64,
    pub(crate) reset_after_ns: u64,
    pub(crate) retry_after_ns: u64,
    pub(crate) denial: Option<Denial>,
    pub(crate) overflow: bool,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Denial {
    /// The key has used its capacity; [`Decision::retry_after`] says when a
    /// request of the same cost will conform.
    RateLimited,
    /// The request costs more than the quota's burst: it can never conform,
    /// however long the client waits. [`Decision::retry_after`] is
    /// [`Duration::MAX`].
    CostExceedsBurst,
    /// The store was full of live keys and is configured to refuse new keys
    /// rather than charge them to the shared overflow bucket
    /// ([`OverflowPolicy::Refuse`](crate::OverflowPolicy::Refuse)).
    StoreFull,
    /// The key's fleet-wide budget is spent (feature `redis`): the local
    /// limit would have admitted it, other instances used the rest.
    /// Nothing was charged locally.
    FleetLimited,
}

impl Decision {
    /// Whether the request was admitted (and charged).
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the request was refused.
    pub const fn is_denied(&self) -> bool {
        !self.allowed
    }

    /// Why the request was refused; `None` when it was admitted.
    pub const fn denial(&self) -> Option<Denial> {
        self.denial
    }

    /// The quota's burst: the most a client can have in hand.
    pub const fn limit(&self) -> u32 {
        self.limit
    }

    /// Unit requests that would be admitted right now, after this decision.
    pub const fn remaining(&self) -> u32 {
        let units = self.slack_ns / self.interval_ns;
        if units < self.limit as u64 {
            units as u32
        } else {
            self.limit
        }
    }

    /// Time until the bucket is full again (the key is fully recovered).
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }

    /// Time until a request of this cost would conform; zero when admitted,
    /// [`Duration::MAX`] when it can never conform
    /// ([`Denial::CostExceedsBurst`], or a clock within one bucket's capacity
    /// of the end of `u64` nanoseconds).
    pub const fn retry_after(&self) -> Duration {
        if self.retry_after_ns == u64::MAX {
            Duration::MAX
        } else {
            Duration::from_nanos(self.retry_after_ns)
        }
    }

    /// This decision (a zero-cost look at the local cell) turned into a
    /// fleet-wide refusal: nothing charged, no room left, and a retry no
    /// earlier than the fleet's estimate.
    #[cfg(feature = "redis")]
    pub(crate) fn fleet_denied(mut self, retry_ns: u64) -> Decision {
        self.allowed = false;
        self.denial = Some(Denial::FleetLimited);
        self.slack_ns = 0;
        self.retry_after_ns = self.retry_after_ns.max(retry_ns);
        self
    }

    /// Reports the tighter of this decision's room and `slack_ns` (the
    /// fleet's room, in the same nanoseconds of emission interval).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn tightened(mut self, slack_ns: u64) -> Decision {
        self.slack_ns = self.slack_ns.min(slack_ns);
        self
    }

    /// Whether this key was charged to the shared overflow bucket because the
    /// store was full of live keys (see [`MemoryStore`](crate::MemoryStore)).
    pub const fn is_overflow(&self) -> bool {
        self.overflow
    }
}
