//! Sliding-window estimates from two fixed epochs: the arithmetic of the
//! fleet-wide gate (issue 5), pure and separately tested.
//!
//! Time is cut into epochs of length `W` (wall-clock nanoseconds, so every
//! instance of a fleet agrees on the epoch). A counter per epoch gives the
//! total of the current epoch and of the previous one. The consumption over
//! the last `W` is estimated as
//!
//! ```text
//! estimate = previous * (W - elapsed) / W + current      (elapsed = now mod W)
//! ```
//!
//! i.e. the previous epoch's total weighted by how much of it still lies
//! inside the sliding window. The weight is rounded up, so the estimate errs
//! towards admitting less.
//!
//! ```
//! use ratelimit::window::SlidingWindow;
//! use std::time::Duration;
//!
//! let w = SlidingWindow::new(Duration::from_secs(10)).unwrap();
//! // 2.5 s into an epoch: 75% of the previous epoch still counts.
//! let now = 1_000 * 10_000_000_000 + 2_500_000_000;
//! assert_eq!(w.estimate(now, 100, 20), 75 + 20);
//! assert_eq!(w.epoch(now), 1_000);
//! ```

use std::time::Duration;

/// The epoch arithmetic of a sliding window of fixed length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    window_ns: u64,
}

/// A window of zero length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroWindow;

impl std::fmt::Display for ZeroWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the window must be longer than zero")
    }
}

impl std::error::Error for ZeroWindow {}

impl SlidingWindow {
    /// A window of length `window` (at least 1 ns; saturates at `u64::MAX` ns).
    pub fn new(window: Duration) -> Result<Self, ZeroWindow> {
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        if window_ns == 0 {
            return Err(ZeroWindow);
        }
        Ok(SlidingWindow { window_ns })
    }

    /// The window's length.
    pub fn length(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// The epoch that contains wall time `now_ns`.
    pub fn epoch(&self, now_ns: u64) -> u64 {
        now_ns / self.window_ns
    }

    /// Time since the current epoch began.
    pub fn elapsed_in_epoch(&self, now_ns: u64) -> Duration {
        Duration::from_nanos(now_ns % self.window_ns)
    }

    /// The estimated consumption over the last window at `now_ns`, from the
    /// previous and current epochs' totals. Never less than `current`, never
    /// more than `previous + current`; saturates instead of overflowing.
    pub fn estimate(&self, now_ns: u64, previous: u64, current: u64) -> u64 {
        let w = u128::from(self.window_ns);
        let remaining = w - u128::from(now_ns % self.window_ns);
        let weighted = (u128::from(previous) * remaining).div_ceil(w);
        u64::try_from(weighted).unwrap_or(u64::MAX).saturating_add(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const W: u64 = 10_000_000_000;

    fn w() -> SlidingWindow {
        SlidingWindow::new(Duration::from_nanos(W)).unwrap()
    }

    #[test]
    fn weights_and_epochs() {
        let w = w();
        let base = 7 * W;
        assert_eq!(
            w.estimate(base, 100, 0),
            100,
            "at the start the whole previous epoch counts"
        );
        assert_eq!(w.estimate(base + W / 2, 100, 30), 50 + 30);
        assert_eq!(
            w.estimate(base + W - 1, 100, 30),
            1 + 30,
            "rounded up: never zero while it still counts"
        );
        assert_eq!(w.epoch(base + W - 1), 7);
        assert_eq!(w.epoch(base + W), 8);
        assert_eq!(w.elapsed_in_epoch(base + 3), Duration::from_nanos(3));
        assert!(SlidingWindow::new(Duration::ZERO).is_err());
        assert_eq!(w.estimate(u64::MAX, u64::MAX, u64::MAX), u64::MAX);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]

        #[test]
        fn bounded_by_its_inputs(now in any::<u64>(), prev in 0u64..1 << 40, cur in 0u64..1 << 40) {
            let e = w().estimate(now, prev, cur);
            prop_assert!(e >= cur && e <= prev + cur);
        }

        /// Across an epoch boundary the estimate moves by at most the
        /// rounding of one nanosecond's worth of the old previous epoch.
        #[test]
        fn continuous_at_epoch_boundaries(epoch in 1u64..1_000_000, prev in 0u64..1 << 30, cur in 0u64..1 << 30) {
            let w = w();
            let boundary = epoch * W;
            let before = w.estimate(boundary - 1, prev, cur);
            // After the boundary, the current epoch becomes the previous one.
            let after = w.estimate(boundary, cur, 0);
            prop_assert!(before.abs_diff(after) <= prev.div_ceil(W) + 1, "{} vs {}", before, after);
        }

        /// Uniform traffic of `rate` per window: the estimate is the exact
        /// count of the last window, up to rounding.
        #[test]
        fn exact_for_uniform_traffic(epoch in 1u64..1_000_000, rate in 1u64..1_000_000, at in 0u64..W) {
            let w = w();
            let now = epoch * W + at;
            // Events at k * W / rate: the current epoch holds those before `at`.
            let current = (u128::from(at) * u128::from(rate)).div_ceil(u128::from(W)) as u64;
            let e = w.estimate(now, rate, current);
            prop_assert!(e.abs_diff(rate) <= 2, "estimate {} for {} per window", e, rate);
        }
    }
}
