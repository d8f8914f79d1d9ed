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
    /// Always `denial.is_none()`: kept as its own field so `is_allowed` is
    /// one load.
    allowed: bool,
    limit: u32,
    /// Unused capacity after this decision, in nanoseconds. `remaining()`
    /// divides it by the emission interval only when asked, keeping a
    /// division off the path of callers that never read it.
    slack_ns: u64,
    /// Never 0 (`remaining()` divides by it).
    interval_ns: u64,
    reset_after_ns: u64,
    /// 0 when admitted.
    retry_after_ns: u64,
    /// `Some` exactly when refused.
    denial: Option<Denial>,
    overflow: bool,
    grouped: bool,
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
    /// An admitted request: charged, no denial, nothing to wait for.
    /// `limit` is the quota's burst, `slack_ns` the room left after it (in
    /// nanoseconds of the emission interval `interval_ns`), `reset_after_ns`
    /// the time until the key is fully recovered.
    #[inline(always)]
    pub(crate) fn admitted(limit: u32, slack_ns: u64, interval_ns: u64, reset_after_ns: u64) -> Decision {
        let d = Decision {
            allowed: true,
            limit,
            slack_ns,
            interval_ns,
            reset_after_ns,
            retry_after_ns: 0,
            denial: None,
            overflow: false,
            grouped: false,
        };
        d.debug_check();
        d
    }

    /// A refused request, for `denial`: nothing charged; a request of the
    /// same cost conforms in `retry_after_ns` (`u64::MAX`: never).
    #[inline]
    pub(crate) fn refused(
        denial: Denial,
        limit: u32,
        slack_ns: u64,
        interval_ns: u64,
        reset_after_ns: u64,
        retry_after_ns: u64,
    ) -> Decision {
        let d = Decision {
            allowed: false,
            limit,
            slack_ns,
            interval_ns,
            reset_after_ns,
            retry_after_ns,
            denial: Some(denial),
            overflow: false,
            grouped: false,
        };
        d.debug_check();
        d
    }

    /// This decision, for a key charged to (or refused by) the store's shared
    /// overflow bucket because the store was full of live keys.
    #[inline]
    pub(crate) fn overflowed(mut self) -> Decision {
        self.overflow = true;
        self
    }

    /// This decision, for a new key charged to (or refused by) its group's
    /// shared cell because the group had brought in its budget of new keys.
    #[inline]
    pub(crate) fn grouped(mut self) -> Decision {
        self.grouped = true;
        self
    }

    /// The invariants every constructor and change keeps (debug builds).
    #[inline(always)]
    fn debug_check(&self) {
        debug_assert_eq!(
            self.allowed,
            self.denial.is_none(),
            "refused exactly when there is a denial: {self:?}"
        );
        debug_assert!(
            !self.allowed || self.retry_after_ns == 0,
            "admitted with a retry: {self:?}"
        );
        debug_assert!(self.interval_ns > 0, "no emission interval: {self:?}");
        debug_assert!(
            self.denial != Some(Denial::CostExceedsBurst) || self.retry_after_ns == u64::MAX,
            "a cost above the burst never conforms: {self:?}"
        );
    }

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
        self.debug_check();
        self
    }

    /// Reports the tighter of this decision's room and `slack_ns` (the
    /// fleet's room, in the same nanoseconds of emission interval).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn tightened(mut self, slack_ns: u64) -> Decision {
        self.slack_ns = self.slack_ns.min(slack_ns);
        self.debug_check();
        self
    }

    /// Whether this key was charged to the shared overflow bucket because the
    /// store was full of live keys (see [`MemoryStore`](crate::MemoryStore)).
    pub const fn is_overflow(&self) -> bool {
        self.overflow
    }

    /// Whether this new key was charged to its group's shared cell because
    /// its group (its network) had already brought its budget of new keys
    /// into the store (see [`MemoryStoreBuilder::new_keys_per_group`](crate::MemoryStoreBuilder::new_keys_per_group)).
    pub const fn is_grouped(&self) -> bool {
        self.grouped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_own_the_invariants() {
        let a = Decision::admitted(10, 3_000, 1_000, 7_000);
        assert!(a.is_allowed() && a.denial().is_none());
        assert_eq!((a.limit(), a.remaining(), a.retry_after()), (10, 3, Duration::ZERO));
        assert_eq!(a.reset_after(), Duration::from_nanos(7_000));
        let r = Decision::refused(Denial::RateLimited, 10, 0, 1_000, 9_000, 500);
        assert!(r.is_denied());
        assert_eq!(
            (r.denial(), r.retry_after()),
            (Some(Denial::RateLimited), Duration::from_nanos(500))
        );
        let o = r.overflowed();
        assert!(o.is_overflow() && !r.is_overflow());
        assert_eq!(
            (o.denial(), o.retry_after(), o.limit()),
            (r.denial(), r.retry_after(), r.limit())
        );
        let never = Decision::refused(Denial::CostExceedsBurst, 10, 0, 1_000, 0, u64::MAX);
        assert_eq!(never.retry_after(), Duration::MAX);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a cost above the burst never conforms")]
    fn a_cost_above_the_burst_with_a_retry_is_refused_in_debug_builds() {
        let _ = Decision::refused(Denial::CostExceedsBurst, 10, 0, 1_000, 0, 5);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "no emission interval")]
    fn a_zero_interval_is_refused_in_debug_builds() {
        let _ = Decision::admitted(10, 0, 0, 0);
    }
}
