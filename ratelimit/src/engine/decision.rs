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
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    limit: u32,
    /// The denial (low bits: 0 when admitted, else a [`Denial`]'s code) and
    /// the [`OVERFLOW`] and [`GROUPED`] bits. One word, not a `bool`, an
    /// `Option` and two more `bool`s: a decision of word-sized fields moves
    /// through the store's update in registers, where byte fields and
    /// their niches made the compiler copy it field by field.
    flags: u32,
    /// Unused capacity after this decision, in nanoseconds. `remaining()`
    /// divides it by the emission interval only when asked, keeping a
    /// division off the path of callers that never read it.
    slack_ns: u64,
    /// Never 0 (`remaining()` divides by it).
    interval_ns: u64,
    reset_after_ns: u64,
    /// 0 when admitted.
    retry_after_ns: u64,
    /// No unit is available sooner than this (the fleet's next unit, when
    /// the fleet is the tighter limit); 0: the local bucket's word.
    next_floor_ns: u64,
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

/// The bits of [`Decision::flags`] that hold the denial's code.
const DENIAL_BITS: u32 = 0b111;
/// Charged to (or refused by) a shared overflow cell.
const OVERFLOW: u32 = 1 << 3;
/// Charged to (or refused by) the key's group's shared cell.
const GROUPED: u32 = 1 << 4;

impl Denial {
    /// Never 0 (0 is "admitted"), and within [`DENIAL_BITS`].
    const fn code(self) -> u32 {
        match self {
            Denial::RateLimited => 1,
            Denial::CostExceedsBurst => 2,
            Denial::StoreFull => 3,
            Denial::FleetLimited => 4,
        }
    }

    const fn from_code(code: u32) -> Option<Denial> {
        match code {
            1 => Some(Denial::RateLimited),
            2 => Some(Denial::CostExceedsBurst),
            3 => Some(Denial::StoreFull),
            4 => Some(Denial::FleetLimited),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.is_allowed())
            .field("denial", &self.denial())
            .field("limit", &self.limit)
            .field("slack_ns", &self.slack_ns)
            .field("interval_ns", &self.interval_ns)
            .field("reset_after_ns", &self.reset_after_ns)
            .field("retry_after_ns", &self.retry_after_ns)
            .field("overflow", &self.is_overflow())
            .field("grouped", &self.is_grouped())
            .field("next_floor_ns", &self.next_floor_ns)
            .finish()
    }
}

impl Decision {
    /// An admitted request: charged, no denial, nothing to wait for.
    /// `limit` is the quota's burst, `slack_ns` the room left after it (in
    /// nanoseconds of the emission interval `interval_ns`), `reset_after_ns`
    /// the time until the key is fully recovered.
    #[inline(always)]
    pub(crate) fn admitted(limit: u32, slack_ns: u64, interval_ns: u64, reset_after_ns: u64) -> Decision {
        let d = Decision {
            limit,
            flags: 0,
            slack_ns,
            interval_ns,
            reset_after_ns,
            retry_after_ns: 0,
            next_floor_ns: 0,
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
            limit,
            flags: denial.code(),
            slack_ns,
            interval_ns,
            reset_after_ns,
            retry_after_ns,
            next_floor_ns: 0,
        };
        d.debug_check();
        d
    }

    /// A value to fill an array of decisions before they are made.
    #[inline]
    pub(crate) const fn placeholder() -> Decision {
        Decision {
            limit: 1,
            flags: 0,
            slack_ns: 0,
            interval_ns: 1,
            reset_after_ns: 0,
            retry_after_ns: 0,
            next_floor_ns: 0,
        }
    }

    /// This decision, for a key charged to (or refused by) the store's shared
    /// overflow bucket because the store was full of live keys.
    #[inline]
    pub(crate) fn overflowed(mut self) -> Decision {
        self.flags |= OVERFLOW;
        self
    }

    /// This decision, for a new key charged to (or refused by) its group's
    /// shared cell because the group had brought in its budget of new keys.
    #[inline]
    pub(crate) fn grouped(mut self) -> Decision {
        self.flags |= GROUPED;
        self
    }

    /// The invariants every constructor and change keeps (debug builds).
    #[inline(always)]
    fn debug_check(&self) {
        debug_assert!(
            self.flags & !(DENIAL_BITS | OVERFLOW | GROUPED) == 0 && self.flags & DENIAL_BITS <= 4,
            "no such flags: {self:?}"
        );
        debug_assert!(
            !self.is_allowed() || self.retry_after_ns == 0,
            "admitted with a retry: {self:?}"
        );
        debug_assert!(self.interval_ns > 0, "no emission interval: {self:?}");
        debug_assert!(
            self.denial() != Some(Denial::CostExceedsBurst) || self.retry_after_ns == u64::MAX,
            "a cost above the burst never conforms: {self:?}"
        );
    }

    /// Whether the request was admitted (and charged).
    pub const fn is_allowed(&self) -> bool {
        self.flags & DENIAL_BITS == 0
    }

    /// Whether the request was refused.
    pub const fn is_denied(&self) -> bool {
        !self.is_allowed()
    }

    /// Why the request was refused; `None` when it was admitted.
    pub const fn denial(&self) -> Option<Denial> {
        Denial::from_code(self.flags & DENIAL_BITS)
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

    /// Time until at least one more unit of quota is available to the key:
    /// what the `t` parameter of the `RateLimit` field carries
    /// (draft-ietf-httpapi-ratelimit-headers-10: "the number of seconds
    /// until additional quota associated with the quota policy is made
    /// available"). Zero when the bucket is full: no more quota is coming.
    ///
    /// For GCRA the bucket refills continuously, one unit per emission
    /// interval `T`; this is the time until the next unit, not until the
    /// bucket is full ([`reset_after`](Self::reset_after)). With capacity
    /// `burst * T` and `d = TAT - now`:
    ///
    /// ```text
    /// d == 0             0                     (full)
    /// 0 < d <= capacity  T - (capacity - d) % T
    /// d > capacity       d - capacity + T      (in debt: the debt first)
    /// ```
    ///
    /// A refusal by the store ([`Denial::StoreFull`]) or by the fleet
    /// ([`Denial::FleetLimited`]) has no local bucket to read: there it is
    /// [`retry_after`](Self::retry_after), the estimate of when this
    /// request fits. For a refused request of cost 1 or more it is never
    /// later than `retry_after` (a zero-cost probe conforms before the next
    /// unit is back), so a `Retry-After` derived from that is never earlier
    /// than `t`.
    ///
    /// ```
    /// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
    /// let quota = Quota::per_second(10).with_burst(3); // T = 100 ms
    /// limiter.check(&"k", &quota);
    /// let d = limiter.check(&"k", &quota);
    /// assert_eq!(d.reset_after(), Duration::from_millis(200)); // full again
    /// assert_eq!(d.next_unit_after(), Duration::from_millis(100)); // one more
    /// ```
    pub fn next_unit_after(&self) -> Duration {
        if matches!(self.denial(), Some(Denial::StoreFull | Denial::FleetLimited)) {
            return self.retry_after();
        }
        if self.reset_after_ns == 0 {
            return Duration::ZERO;
        }
        let t = u128::from(self.interval_ns);
        let capacity = t * u128::from(self.limit);
        let d = u128::from(self.reset_after_ns);
        let wait = if d <= capacity {
            t - (capacity - d) % t
        } else {
            d - capacity + t
        };
        let wait = wait.max(u128::from(self.next_floor_ns));
        Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
    }

    /// Time until another request of `cost` would conform after this one:
    /// the retry of a refusal, or, when admitted, until the room left has
    /// grown to `cost` units (a limit that admitted a request may still
    /// refuse the client's next).
    #[cfg(feature = "axum")]
    pub(crate) fn wait_for(&self, cost: u32) -> Duration {
        if self.is_denied() {
            return self.retry_after();
        }
        let need = u128::from(self.interval_ns) * u128::from(cost);
        let wait = need.saturating_sub(u128::from(self.slack_ns));
        // Not sooner than the fleet's next unit (what `t` says), when the
        // room left is short of `cost`.
        let wait = if wait > 0 {
            wait.max(u128::from(self.next_floor_ns))
        } else {
            0
        };
        Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
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
    /// fleet-wide refusal of a request of `cost`: nothing charged, no room
    /// left, and a retry no earlier than the fleet's estimate nor than the
    /// time the local bucket needs for `cost` units.
    #[cfg(feature = "redis")]
    pub(crate) fn fleet_denied(mut self, retry_ns: u64, cost: u32) -> Decision {
        let capacity = u128::from(self.interval_ns) * u128::from(self.limit);
        let local = (u128::from(self.reset_after_ns) + u128::from(cost) * u128::from(self.interval_ns))
            .saturating_sub(capacity);
        let local = u64::try_from(local).unwrap_or(u64::MAX);
        self.flags = (self.flags & !DENIAL_BITS) | Denial::FleetLimited.code();
        self.slack_ns = 0;
        self.retry_after_ns = self.retry_after_ns.max(retry_ns).max(local);
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

    /// This decision, with no unit available sooner than `ns` from now (the
    /// fleet's next unit, when the fleet has less than one left).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn next_unit_no_sooner(mut self, ns: u64) -> Decision {
        self.next_floor_ns = self.next_floor_ns.max(ns);
        self
    }

    /// Whether this key was charged to the shared overflow bucket because the
    /// store was full of live keys (see [`MemoryStore`](crate::MemoryStore)).
    pub const fn is_overflow(&self) -> bool {
        self.flags & OVERFLOW != 0
    }

    /// Whether this new key was charged to its group's shared cell because
    /// its group (its network) had already brought its budget of new keys
    /// into the store (see [`MemoryStoreBuilder::new_keys_per_group`](crate::MemoryStoreBuilder::new_keys_per_group)).
    pub const fn is_grouped(&self) -> bool {
        self.flags & GROUPED != 0
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

    use crate::engine::gcra::decide;
    use crate::Quota;

    const MS: u64 = 1_000_000;

    /// Decides `cost` at `now` on a cell holding `stored` (what the store
    /// does, without a store).
    fn at(stored: u64, now: u64, quota: &Quota, cost: u32) -> Decision {
        decide(stored, now, quota, cost).0
    }

    #[test]
    fn next_unit_of_a_full_bucket_is_zero() {
        let quota = Quota::per_second(10).with_burst(3);
        // A fresh key probed at cost 0, and a cost above the burst on a
        // fresh key: full, nothing more is coming.
        assert_eq!(at(0, 5_000 * MS, &quota, 0).next_unit_after(), Duration::ZERO);
        let never = at(0, 5_000 * MS, &quota, 4);
        assert_eq!(never.denial(), Some(Denial::CostExceedsBurst));
        assert_eq!((never.remaining(), never.next_unit_after()), (3, Duration::ZERO));
    }

    #[test]
    fn next_unit_is_one_interval_after_a_whole_number_of_units() {
        let quota = Quota::per_second(10).with_burst(3); // T = 100 ms
        let now = 5_000 * MS;
        // After one request from idle: TAT = now + T; 2 left, the third in T.
        let d = at(0, now, &quota, 1);
        assert_eq!((d.remaining(), d.reset_after()), (2, Duration::from_millis(100)));
        assert_eq!(d.next_unit_after(), Duration::from_millis(100));
        // Two requests' worth in hand: reset 200 ms, next unit still 100 ms.
        let d = at(now + 100 * MS, now, &quota, 1);
        assert_eq!((d.remaining(), d.reset_after()), (1, Duration::from_millis(200)));
        assert_eq!(d.next_unit_after(), Duration::from_millis(100));
    }

    #[test]
    fn next_unit_between_units_is_the_rest_of_the_interval() {
        let quota = Quota::per_second(10).with_burst(4); // T = 100 ms
        let now = 5_000 * MS;
        // TAT 250 ms ahead: 1.5 units free, so 1 whole; the next in 50 ms.
        let d = at(now + 250 * MS, now, &quota, 0);
        assert_eq!(d.remaining(), 1);
        assert_eq!(d.next_unit_after(), Duration::from_millis(50));
        // 1 ns short of full: the last unit comes back in 1 ns.
        let d = at(now + 1, now, &quota, 0);
        assert_eq!((d.remaining(), d.next_unit_after()), (3, Duration::from_nanos(1)));
    }

    #[test]
    fn next_unit_of_an_empty_bucket_and_of_a_refusal() {
        let quota = Quota::per_second(10).with_burst(3); // capacity 300 ms
        let now = 5_000 * MS;
        // Empty: TAT exactly one capacity ahead.
        let empty = now + 300 * MS;
        let d = at(empty, now, &quota, 1);
        assert_eq!(d.denial(), Some(Denial::RateLimited));
        assert_eq!(d.next_unit_after(), Duration::from_millis(100));
        assert_eq!(d.retry_after(), Duration::from_millis(100));
        // Cost 2 on the empty bucket: the next unit in T, this request in 2T.
        let d = at(empty, now, &quota, 2);
        assert_eq!(d.next_unit_after(), Duration::from_millis(100));
        assert_eq!(d.retry_after(), Duration::from_millis(200));
        // 0.5 units free, cost 1: both 50 ms.
        let d = at(now + 250 * MS, now, &quota, 3);
        assert_eq!(d.next_unit_after(), Duration::from_millis(50));
        assert_eq!(d.retry_after(), Duration::from_millis(250));
        // In debt beyond capacity (a move to a smaller quota): the debt, then T.
        let d = at(now + 1_000 * MS, now, &quota, 1);
        assert_eq!(d.next_unit_after(), Duration::from_millis(800));
        assert_eq!(d.retry_after(), Duration::from_millis(800));
        // A cost above the burst never conforms, but units still come back.
        let d = at(empty, now, &quota, 4);
        assert_eq!(
            (d.next_unit_after(), d.retry_after()),
            (Duration::from_millis(100), Duration::MAX)
        );
    }

    #[test]
    fn next_unit_is_never_after_the_retry() {
        let quota = Quota::per_second(7).with_burst(5);
        let t = quota.interval_ns();
        let now = 1_000_000 * MS;
        for ahead in (0..=12 * t).step_by((t / 7) as usize) {
            for cost in 1..=6 {
                let d = at(now + ahead, now, &quota, cost);
                if d.is_denied() {
                    assert!(d.next_unit_after() <= d.retry_after(), "{ahead} {cost}: {d:?}");
                }
                if d.denial() == Some(Denial::RateLimited) {
                    assert!(d.next_unit_after() > Duration::ZERO, "an empty bucket refills");
                }
                assert!(d.next_unit_after() <= Duration::from_nanos(t.max(ahead.saturating_sub(5 * t) + t)));
            }
        }
    }

    #[test]
    fn next_unit_at_u64_extremes_does_not_overflow() {
        let quotas = [
            Quota::new(1, Duration::from_nanos(u64::MAX))
                .unwrap()
                .with_burst(u32::MAX),
            Quota::new(u32::MAX, Duration::from_nanos(1))
                .unwrap()
                .with_burst(u32::MAX),
            Quota::new(1, Duration::from_nanos(u64::MAX)).unwrap(),
            Quota::per_second(u32::MAX),
        ];
        for quota in quotas {
            for stored in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
                for now in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
                    for cost in [0, 1, u32::MAX] {
                        let d = at(stored, now, &quota, cost);
                        let next = d.next_unit_after();
                        if d.is_denied() && cost > 0 {
                            assert!(next <= d.retry_after(), "{d:?}");
                        }
                    }
                }
            }
        }
        // Hand-built extremes: the largest debt and interval.
        let d = Decision::refused(Denial::RateLimited, u32::MAX, 0, u64::MAX, u64::MAX, u64::MAX);
        assert_eq!(d.next_unit_after(), Duration::from_nanos(u64::MAX));
        let d = Decision::refused(Denial::RateLimited, 1, 0, u64::MAX, u64::MAX, u64::MAX);
        assert_eq!(d.next_unit_after(), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn refusals_without_a_bucket_report_their_retry() {
        let full = Decision::refused(Denial::StoreFull, 3, 0, 100, 0, 100);
        assert_eq!(full.next_unit_after(), Duration::from_nanos(100));
    }

    #[test]
    #[cfg(feature = "redis")]
    fn a_fleet_refusal_waits_for_the_fleet_and_for_the_local_bucket() {
        // Local: T = 100, burst 3, TAT 250 ahead (0.5 units free); a probe.
        let probe = Decision::admitted(3, 50, 100, 250);
        // The fleet says 30: the local bucket needs 50 for one unit, 150 for 2.
        let d = probe.fleet_denied(30, 2);
        assert_eq!(d.denial(), Some(Denial::FleetLimited));
        assert_eq!((d.remaining(), d.retry_after()), (0, Duration::from_nanos(150)));
        assert_eq!(d.next_unit_after(), d.retry_after());
        // The fleet is later than the local bucket: the fleet's estimate.
        let d = probe.fleet_denied(1_000, 1);
        assert_eq!(d.retry_after(), Duration::from_nanos(1_000));
        // Extremes saturate.
        let d = Decision::admitted(u32::MAX, 0, u64::MAX, u64::MAX).fleet_denied(u64::MAX, u32::MAX);
        assert_eq!(d.retry_after(), Duration::MAX);
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
