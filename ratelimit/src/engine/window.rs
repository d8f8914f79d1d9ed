//! The arithmetic of the fleet gate's sliding window, pure and property
//! tested: this is the code the gate runs on every request, not a model of
//! it.
//!
//! Wall-clock time is cut into **slices** of `W / k` (the window `W` cut in
//! `k` slices; every instance of a fleet agrees on them because they are wall
//! time). The fleet counts each key's requests per slice. The consumption of
//! the last `W` at time `t` in slice `s` is estimated as the sum of slices
//! `s - k ..= s`: the current slice, the `k - 1` before it, and the whole of
//! the oldest slice the window still overlaps.
//!
//! ```text
//!  slice:   s-k   s-k+1  ...   s-1    s
//!         [--|--][-----] ... [-----][--|   ]
//!            ^ t - W                   ^ t
//! ```
//!
//! Every request inside the true window `(t - W, t]` lies in one of those
//! slices, so the estimate is **never less** than the true count, whatever
//! the alignment of traffic with slices or epochs (the two-epoch estimate
//! with a linear weight, which this replaces, forgot requests bunched late in
//! the previous epoch and let the fleet overshoot by a third). The price is
//! the part of slice `s - k` that already left the window: under sustained
//! load an instance alone gets `k / (k + 1)` of the budget in the worst
//! window (96.2% at the default `k = 25`, 400 ms slices of a 10 s window).
//!
//! Slices are grouped in **epochs** of `k` slices (one window): the unit of
//! storage (one Redis hash per key and epoch, one field per slice).
//!
//! ```
//! use ratelimit::fleet::SlidingWindow;
//! use std::time::Duration;
//!
//! let w = SlidingWindow::new(Duration::from_secs(10), 20).unwrap();
//! let now = 1_000 * 10_000_000_000 + 2_600_000_000; // 2.6 s into epoch 1000
//! let at = w.locate(now);
//! assert_eq!((w.epoch_of(at.slice), w.slice_in_epoch(at.slice)), (1_000, 5));
//! assert_eq!(at.into_slice, 100_000_000);
//! // The estimate covers slices s-20..=s: 21 slices, 10.5 s of history.
//! assert_eq!(w.covering(at.slice), at.slice - 20..=at.slice);
//! ```

use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use crate::Quota;

/// The most slices a window can be cut in.
pub const MAX_SLICES: u32 = 100;

/// The largest burst the fleet gate counts (its per-slice counters are 24
/// bits, with room for concurrent adds). A configuration with `[global]`
/// refuses profiles above it; a quota above it from elsewhere (a limit
/// service) is limited locally only.
pub const MAX_FLEET_BURST: u32 = 1 << 22;

/// The longest period the fleet gate always limits fleet-wide: an hour, the
/// longest window it takes. A quota with a longer period (per day, week or
/// month) whose burst the window cannot hold is limited locally only: see
/// [`limited_locally`].
pub(crate) const LONG_PERIOD: Duration = Duration::from_secs(3600);

const LONG_PERIOD_NS: u64 = 3_600_000_000_000;

/// Whether a fleet gate whose window is `window` limits `quota` locally
/// only (per instance; the fleet can then admit up to N times one
/// instance's limit): its period is longer than [`LONG_PERIOD`] (an hour)
/// **and** the window cannot hold its burst (`burst × T > window`, that is
/// the fleet budget `window / T` is less than the burst).
///
/// The gate's fleet budget is the rate over its window, `W / T`. For a
/// period of a day or more that is a sliver of the quota (`10000/d` over
/// 10 s: 1.16 units), so the gate would hold every key to about one request
/// per window fleet-wide and refuse the burst the profile grants; and no
/// window (at most an hour) can be as long as the period. Periods up to an
/// hour keep the gate's rule whatever their burst (`600/min` with burst
/// 1000 over 10 s: 100 per window fleet-wide), as a window as long as the
/// period is one setting away. A long period whose burst fits the window
/// (`10000/d` burst 20 over a 3-minute window: 20.8) is limited
/// fleet-wide.
///
pub(crate) fn limited_locally(quota: &Quota, window: Duration) -> bool {
    limited_locally_ns(quota, u64::try_from(window.as_nanos()).unwrap_or(u64::MAX))
}

/// [`limited_locally`] with the window in nanoseconds: two compares and a
/// multiply, for the request path.
#[inline]
pub(crate) fn limited_locally_ns(quota: &Quota, window_ns: u64) -> bool {
    quota.period_ns() > LONG_PERIOD_NS
        && u128::from(quota.burst()) * u128::from(quota.interval_ns()) > u128::from(window_ns)
}

/// A window of fixed length cut in slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    slice_ns: u64,
    slices: u32,
}

/// Why a window cannot be built.
#[derive(Clone, PartialEq, Eq)]
pub struct WindowError {
    kind: WindowErrorKind,
}

crate::engine::errors::debug_as_display!(WindowError);

#[derive(Debug, Clone, PartialEq, Eq)]
enum WindowErrorKind {
    Slices,
    TooShort,
}

impl std::fmt::Display for WindowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            WindowErrorKind::Slices => write!(f, "the window is cut in 1 to {MAX_SLICES} slices"),
            WindowErrorKind::TooShort => f.write_str("each slice of the window must be at least 1 ms long"),
        }
    }
}

impl std::error::Error for WindowError {}

/// Where a wall time falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The slice's absolute index (wall nanoseconds / slice length).
    pub slice: u64,
    /// Nanoseconds since the slice began.
    pub into_slice: u64,
}

/// Whether a cost fits a budget, and what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// It fits; `slack_ns` is the budget left after it, in nanoseconds of
    /// the quota's emission interval (`slack_ns / T` more units fit).
    Fits {
        /// Room left after this request, in nanoseconds of emission interval.
        slack_ns: u64,
    },
    /// It does not fit before `retry_ns` have passed (an estimate: at least
    /// the next slice boundary, where the oldest slice drops out).
    Exceeds {
        /// Nanoseconds until it may fit.
        retry_ns: u64,
    },
}

impl SlidingWindow {
    /// A window of length `window` cut in `slices`; the length is rounded
    /// down to a whole number of nanoseconds per slice.
    pub fn new(window: Duration, slices: u32) -> Result<Self, WindowError> {
        if slices == 0 || slices > MAX_SLICES {
            return Err(WindowError {
                kind: WindowErrorKind::Slices,
            });
        }
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        let slice_ns = window_ns / u64::from(slices);
        if slice_ns < 1_000_000 {
            return Err(WindowError {
                kind: WindowErrorKind::TooShort,
            });
        }
        Ok(SlidingWindow { slice_ns, slices })
    }

    /// The window's length (a whole number of slices).
    pub fn length(&self) -> Duration {
        Duration::from_nanos(self.window_ns())
    }

    /// The window's length in nanoseconds.
    pub fn window_ns(&self) -> u64 {
        self.slice_ns * u64::from(self.slices)
    }

    /// A slice's length in nanoseconds.
    pub fn slice_ns(&self) -> u64 {
        self.slice_ns
    }

    /// Slices per window.
    #[inline]
    pub fn slices(&self) -> u32 {
        self.slices
    }

    /// The slice of a wall time, and how far into it.
    pub fn locate(&self, wall_ns: u64) -> Position {
        Position {
            slice: wall_ns / self.slice_ns,
            into_slice: wall_ns % self.slice_ns,
        }
    }

    /// The epoch (window-long group of slices) of a wall time.
    pub fn epoch(&self, wall_ns: u64) -> u64 {
        self.epoch_of(wall_ns / self.slice_ns)
    }

    /// The epoch that holds a slice.
    pub fn epoch_of(&self, slice: u64) -> u64 {
        slice / u64::from(self.slices)
    }

    /// A slice's place in its epoch, `0..slices`.
    pub fn slice_in_epoch(&self, slice: u64) -> u32 {
        (slice % u64::from(self.slices)) as u32
    }

    /// The first slice of an epoch.
    pub fn first_slice(&self, epoch: u64) -> u64 {
        epoch.saturating_mul(u64::from(self.slices))
    }

    /// The slices whose counts make up the estimate at a time in `slice`:
    /// `slice - k ..= slice` (fewer near the start of time).
    pub fn covering(&self, slice: u64) -> RangeInclusive<u64> {
        slice.saturating_sub(u64::from(self.slices))..=slice
    }

    /// The covered slices already closed at a time in `slice`: `slice - k ..
    /// slice`, all of [`covering`](Self::covering) but `slice` itself.
    pub fn closed(&self, slice: u64) -> Range<u64> {
        slice.saturating_sub(u64::from(self.slices))..slice
    }

    /// The closed part of the estimate at a time in `slice`: the sum of
    /// `count` over [`closed`](Self::closed). The fleet gate's sync loop
    /// computes it each round from the slice totals it knows, and hands it to
    /// requests, which add the open slice with [`estimate`](Self::estimate).
    pub fn closed_sum(&self, slice: u64, count: impl FnMut(u64) -> u64) -> u64 {
        self.closed(slice).map(count).sum()
    }

    /// The estimated consumption of the window at a time in `slice`, what
    /// [`fits`](Self::fits) is asked about: `closed_sum`, the sum over the
    /// closed slices (from [`closed_sum`](Self::closed_sum)), plus the open
    /// slice's count, `count(slice)`. Never below what the true window holds
    /// (property tested). No loop: the gate runs it on every request.
    ///
    /// ```
    /// # use ratelimit::fleet::SlidingWindow;
    /// # use std::time::Duration;
    /// let w = SlidingWindow::new(Duration::from_secs(10), 4).unwrap();
    /// let count = |slice: u64| slice; // 1 in slice 1, 2 in slice 2, ...
    /// let closed = w.closed_sum(10, count); // slices 6..10
    /// assert_eq!(w.estimate(10, closed, count), 6 + 7 + 8 + 9 + 10);
    /// assert_eq!(w.estimate(10, closed, count), w.covering(10).sum::<u64>());
    /// ```
    #[inline(always)]
    pub fn estimate(&self, slice: u64, closed_sum: u64, count: impl FnOnce(u64) -> u64) -> u64 {
        closed_sum + count(slice)
    }

    /// Whether `cost` more units fit when `used` units are estimated in the
    /// window, for a quota of emission interval `interval_ns`: the fleet
    /// budget is `W / T` units, compared exactly as `(used + cost) * T <= W`.
    ///
    /// A budget below one request (a profile slower than the window: `5/min`
    /// over 10 s is 0.83) would refuse even an idle fleet, so with nothing
    /// used a request always fits. `into_slice` (from [`locate`](Self::locate))
    /// dates the retry estimate.
    #[inline]
    pub fn fits(&self, used: u64, cost: u32, interval_ns: u64, into_slice: u64) -> Fit {
        let t = u128::from(interval_ns.max(1));
        let w = u128::from(self.window_ns());
        let need = (u128::from(used) + u128::from(cost)).saturating_mul(t);
        if need <= w {
            return Fit::Fits {
                slack_ns: u64::try_from(w - need).unwrap_or(u64::MAX),
            };
        }
        if used == 0 {
            return Fit::Fits { slack_ns: 0 };
        }
        // Room opens no earlier than the next boundary, where the oldest
        // slice drops out; if that slice alone is not enough, the excess
        // drains no faster than the rate (an estimate, clamped to the
        // window and one slice).
        let to_boundary = self.slice_ns - into_slice.min(self.slice_ns - 1);
        let drain = u64::try_from(need - w).unwrap_or(u64::MAX);
        let most = self.window_ns().saturating_add(self.slice_ns);
        Fit::Exceeds {
            retry_ns: to_boundary.max(drain).min(most),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const W: u64 = 10_000_000_000;

    fn w(k: u32) -> SlidingWindow {
        SlidingWindow::new(Duration::from_nanos(W), k).unwrap()
    }

    #[test]
    fn slices_epochs_and_limits() {
        let w = w(20);
        assert_eq!(w.slice_ns(), 500_000_000);
        let base = 7 * W;
        assert_eq!(w.locate(base + W - 1).slice, 7 * 20 + 19);
        assert_eq!(w.epoch(base + W - 1), 7);
        assert_eq!(w.epoch(base + W), 8);
        assert_eq!(w.first_slice(8), 160);
        assert_eq!(w.covering(5), 0..=5, "near the start of time");
        assert_eq!(w.closed(5), 0..5);
        assert_eq!(w.closed(100), 80..100);
        assert_eq!(w.closed_sum(100, |_| 1), 20);
        assert_eq!(w.estimate(100, w.closed_sum(100, |_| 1), |_| 1), 21, "k + 1 slices");
        assert!(SlidingWindow::new(Duration::from_secs(1), 0).is_err());
        assert!(SlidingWindow::new(Duration::from_secs(1), MAX_SLICES + 1).is_err());
        assert!(SlidingWindow::new(Duration::from_millis(10), 20).is_err());
        // 600/min: T = 100 ms, budget 100 per 10 s.
        let t = 100_000_000;
        assert_eq!(w.fits(99, 1, t, 0), Fit::Fits { slack_ns: 0 });
        assert_eq!(w.fits(90, 1, t, 0), Fit::Fits { slack_ns: 9 * t });
        assert!(matches!(w.fits(100, 1, t, 0), Fit::Exceeds { retry_ns } if retry_ns == 500_000_000));
        // Slower than the window: one fits when nothing is counted.
        assert_eq!(w.fits(0, 1, 20 * W, 0), Fit::Fits { slack_ns: 0 });
        assert!(matches!(w.fits(1, 1, 20 * W, 0), Fit::Exceeds { .. }));
        // Extremes do not overflow.
        assert!(
            matches!(w.fits(u64::MAX, u32::MAX, u64::MAX, u64::MAX), Fit::Exceeds { retry_ns } if retry_ns <= W + W / 20)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The estimate never undercounts: every event of the true window
        /// `(t - W, t]` lies in a covered slice, at any alignment.
        #[test]
        fn never_below_the_true_window(
            k in 1u32..=MAX_SLICES,
            events in proptest::collection::vec(0u64..5 * W, 0..200),
            t in W..5 * W,
        ) {
            let w = SlidingWindow::new(Duration::from_nanos(W), k).unwrap();
            let wn = w.window_ns();
            let slice = w.locate(t).slice;
            let in_window = events.iter().filter(|&&e| e + wn > t && e <= t).count() as u64;
            // Counted per slice, as the fleet counts; summed by the code the
            // gate runs (the sync loop's closed sum, the request's estimate).
            let count = |s: u64| events.iter().filter(|&&e| w.locate(e).slice == s).count() as u64;
            let estimate = w.estimate(slice, w.closed_sum(slice, count), count);
            prop_assert!(estimate >= in_window, "estimate {} < true {}", estimate, in_window);
            let covered = w.covering(slice);
            let in_covered = events.iter().filter(|&&e| covered.contains(&w.locate(e).slice)).count() as u64;
            prop_assert_eq!(estimate, in_covered, "the estimate is the covered slices' count");
        }

        /// Admitting by the estimate holds the budget in every true window,
        /// whatever the arrival times, and an instance alone still gets at
        /// least `k / (k + 1)` of it under load.
        #[test]
        fn admission_holds_every_true_window(
            k in 2u32..=40,
            gaps in proptest::collection::vec(0u64..300_000_000, 50..600),
            rate in 1u64..200,
        ) {
            let w = SlidingWindow::new(Duration::from_nanos(W), k).unwrap();
            let wn = w.window_ns();
            let t_ns = wn / rate; // budget: `rate` per window
            let mut counts = std::collections::HashMap::<u64, u64>::new();
            let mut admitted = Vec::new();
            let mut now = 3 * W + 7;
            for gap in gaps {
                now += gap;
                let at = w.locate(now);
                let count = |s: u64| counts.get(&s).copied().unwrap_or(0);
                let used = w.estimate(at.slice, w.closed_sum(at.slice, count), count);
                if let Fit::Fits { .. } = w.fits(used, 1, t_ns, at.into_slice) {
                    *counts.entry(at.slice).or_default() += 1;
                    admitted.push(now);
                }
            }
            let budget = (wn / t_ns).max(1) as usize;
            for (i, &start) in admitted.iter().enumerate() {
                let n = admitted[i..].iter().take_while(|&&e| e < start + wn).count();
                prop_assert!(n <= budget, "{} admitted in one window, budget {}", n, budget);
            }
        }
    }

    #[test]
    fn long_periods_whose_burst_the_window_cannot_hold_are_limited_locally() {
        let w = Duration::from_secs(10);
        let daily = Quota::per_day(10_000).with_burst(20);
        assert!(limited_locally(&daily, w));
        assert!(!limited_locally(&daily, Duration::from_secs(180)));
        assert!(!limited_locally(&Quota::per_minute(600).with_burst(1000), w));
        assert!(!limited_locally(&Quota::per_hour(5000), w));
    }
}
