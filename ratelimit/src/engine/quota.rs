//! `Quota`: how much a key may do, as a sustained rate and a burst.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const NANOS_PER_SEC: u64 = 1_000_000_000;
const NANOS_PER_DAY: u64 = 86_400 * NANOS_PER_SEC;

/// A sustained rate (`count` per `period`) and a burst capacity.
///
/// The engine is a GCRA: each admitted unit of cost pushes the key's
/// theoretical arrival time (TAT) forward by the *emission interval*
/// `T = period / count`; a request is admitted while the TAT stays within
/// `burst * T` of now. So:
///
/// * `burst` is the number of unit requests admitted back to back from idle
///   (the bucket's capacity, at least 1);
/// * afterwards one unit is regained every `T`;
/// * a fresh (or fully recovered) client can therefore get up to
///   `burst + count * t / period` requests in its first `t`.
///
/// The default burst is `count` (as `governor` does): `Quota::per_second(100)`
/// admits 100 requests at once from idle, then 100 per second.
///
/// `T` is rounded **up** to a whole nanosecond, so the limiter never admits
/// more than the stated rate (at most 1 ns per unit slower).
///
/// # Examples
///
/// ```
/// use ratelimit::Quota;
/// use std::time::Duration;
///
/// let q = Quota::per_second(100).with_burst(20);
/// assert_eq!(q.burst(), 20);
/// assert_eq!(q.emission_interval(), Duration::from_millis(10));
///
/// let parsed: Quota = "600/min".parse().unwrap();
/// assert_eq!(parsed, Quota::per_minute(600));
/// assert_eq!("100/30s".parse::<Quota>().unwrap().period(), Duration::from_secs(30));
/// assert!("600 per minute".parse::<Quota>().is_err());
/// ```
///
/// # Long windows
///
/// Periods of a day, a week or a month (exactly 30 days: GCRA needs a fixed
/// emission interval, and a calendar month is 28 to 31 days) are ordinary
/// periods: the arithmetic is in integer nanoseconds (`u128` where it
/// multiplies), so `"10000/d"` is exactly one unit every 8.64 s, and a
/// day-long quota never overflows. A daily quota with a small burst is a
/// slow, steady budget: 20 at once, then one every 8.64 s.
///
/// ```
/// use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
/// use std::time::Duration;
///
/// let daily: Quota = "10000/d".parse().unwrap();
/// assert_eq!(daily, Quota::per_day(10_000));
/// assert_eq!(daily.emission_interval(), Duration::from_millis(8_640));
/// assert_eq!("100000/week".parse::<Quota>().unwrap().emission_interval(), Duration::from_millis(6_048));
/// assert_eq!("1000000/month".parse::<Quota>().unwrap().period(), Duration::from_secs(30 * 86_400));
///
/// let clock = ManualClock::new();
/// let limiter = Limiter::new(MemoryStore::default(), clock.clone());
/// let q = daily.with_burst(20);
/// assert_eq!((0..25).filter(|_| limiter.check(&"k", &q).is_allowed()).count(), 20);
/// let d = limiter.check(&"k", &q);
/// assert_eq!(d.retry_after(), Duration::from_millis(8_640));
/// clock.advance(Duration::from_millis(8_640));
/// assert!(limiter.check(&"k", &q).is_allowed());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u32,
    period_ns: u64,
    interval_ns: u64,
    burst: u32,
}

impl Quota {
    /// `count` requests per second, burst `count`.
    ///
    /// # Panics
    ///
    /// If `count` is 0. Use [`Quota::new`] for values that come from outside.
    pub const fn per_second(count: u32) -> Quota {
        Self::const_new(count, NANOS_PER_SEC)
    }

    /// `count` requests per minute, burst `count`.
    ///
    /// # Panics
    ///
    /// If `count` is 0.
    pub const fn per_minute(count: u32) -> Quota {
        Self::const_new(count, 60 * NANOS_PER_SEC)
    }

    /// `count` requests per hour, burst `count`.
    ///
    /// # Panics
    ///
    /// If `count` is 0.
    pub const fn per_hour(count: u32) -> Quota {
        Self::const_new(count, 3600 * NANOS_PER_SEC)
    }

    /// `count` requests per day (86,400 s), burst `count`.
    ///
    /// ```
    /// use ratelimit::Quota;
    /// use std::time::Duration;
    ///
    /// const DAILY: Quota = Quota::per_day(10_000).with_burst(20);
    /// assert_eq!(DAILY.emission_interval(), Duration::from_millis(8_640));
    /// assert_eq!(DAILY.to_string(), "10000/d (burst 20)");
    /// ```
    ///
    /// # Panics
    ///
    /// If `count` is 0.
    pub const fn per_day(count: u32) -> Quota {
        Self::const_new(count, NANOS_PER_DAY)
    }

    /// `count` requests per week (7 days, 604,800 s), burst `count`.
    ///
    /// ```
    /// use ratelimit::Quota;
    /// use std::time::Duration;
    ///
    /// const WEEKLY: Quota = Quota::per_week(100_000);
    /// assert_eq!(WEEKLY.emission_interval(), Duration::from_millis(6_048));
    /// assert_eq!(WEEKLY, "100000/week".parse().unwrap());
    /// assert_eq!(WEEKLY.to_string(), "100000/week (burst 100000)");
    /// ```
    ///
    /// # Panics
    ///
    /// If `count` is 0.
    pub const fn per_week(count: u32) -> Quota {
        Self::const_new(count, 7 * NANOS_PER_DAY)
    }

    const fn const_new(count: u32, period_ns: u64) -> Quota {
        assert!(count > 0, "a quota's count must be at least 1");
        Quota {
            count,
            period_ns,
            interval_ns: emission_interval(count, period_ns),
            burst: count,
        }
    }

    /// `count` requests per `period`, burst `count`; refuses a zero count or a
    /// period shorter than a nanosecond.
    ///
    /// ```
    /// use ratelimit::Quota;
    /// use std::time::Duration;
    ///
    /// let q = Quota::new(100, Duration::from_secs(30)).unwrap();
    /// assert_eq!(q.to_string(), "100/30s (burst 100)");
    /// assert!(Quota::new(0, Duration::from_secs(1)).is_err());
    /// ```
    pub fn new(count: u32, period: Duration) -> Result<Quota, QuotaError> {
        if count == 0 {
            return Err(QuotaError::new(ErrorKind::ZeroCount, None));
        }
        let period_ns =
            u64::try_from(period.as_nanos()).map_err(|_| QuotaError::new(ErrorKind::PeriodTooLong, None))?;
        if period_ns == 0 {
            return Err(QuotaError::new(ErrorKind::ZeroPeriod, None));
        }
        Ok(Quota {
            count,
            period_ns,
            interval_ns: emission_interval(count, period_ns),
            burst: count,
        })
    }

    /// The same rate with a different burst (bucket capacity).
    ///
    /// # Panics
    ///
    /// If `burst` is 0. Use [`Quota::try_with_burst`] for values that come
    /// from outside.
    #[must_use]
    pub const fn with_burst(self, burst: u32) -> Quota {
        assert!(burst > 0, "a quota's burst must be at least 1");
        Quota { burst, ..self }
    }

    /// The same rate with a different burst; refuses 0.
    pub fn try_with_burst(self, burst: u32) -> Result<Quota, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::new(ErrorKind::ZeroBurst, None));
        }
        Ok(Quota { burst, ..self })
    }

    /// Requests per [`period`](Quota::period).
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The period over which [`count`](Quota::count) requests are allowed.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The bucket's capacity: requests admitted back to back from idle.
    pub const fn burst(&self) -> u32 {
        self.burst
    }

    /// `T`, the time that one unit of cost occupies (`period / count`,
    /// rounded up to a nanosecond).
    pub const fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }

    pub(crate) const fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// The period in nanoseconds.
    pub(crate) const fn period_ns(&self) -> u64 {
        self.period_ns
    }
}

const fn emission_interval(count: u32, period_ns: u64) -> u64 {
    // Round up: never admit faster than the configured rate.
    let t = period_ns.div_ceil(count as u64);
    if t == 0 {
        1
    } else {
        t
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("count", &self.count)
            .field("period", &self.period())
            .field("burst", &self.burst)
            .field("emission_interval", &self.emission_interval())
            .finish()
    }
}

impl fmt::Display for Quota {
    /// `count/period (burst b)`, the rate part in the syntax
    /// [`FromStr`](Quota::from_str) parses, with the period in the largest
    /// whole unit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.count)?;
        let p = self.period_ns;
        // A month (30 days) before a week: 30 days are not whole weeks, and
        // 210 days read better as 7 months than as 30 weeks.
        let units = [
            (30 * NANOS_PER_DAY, "month"),
            (7 * NANOS_PER_DAY, "week"),
            (NANOS_PER_DAY, "d"),
            (3600 * NANOS_PER_SEC, "h"),
            (60 * NANOS_PER_SEC, "min"),
            (NANOS_PER_SEC, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ];
        for (size, name) in units {
            if p.is_multiple_of(size) {
                let n = p / size;
                if n == 1 {
                    write!(f, "{name}")?;
                } else {
                    // "2weeks", "7months"; the short units as they are ("30s").
                    let plural = if name.len() > 3 { "s" } else { "" };
                    write!(f, "{n}{name}{plural}")?;
                }
                break;
            }
        }
        write!(f, " (burst {})", self.burst)
    }
}

impl FromStr for Quota {
    type Err = QuotaError;

    /// Parses `"<count>/<period>"`: `"600/min"`, `"10/s"`, `"5000/h"`,
    /// `"100/30s"`, `"1/500ms"`, `"10000/d"`, `"100000/week"`,
    /// `"1000000/month"`. Units (the same as durations in a configuration
    /// take, one table): `ns`, `us`/`µs`, `ms`, `s`/`sec`/`second`,
    /// `m`/`min`/`minute`, `h`/`hr`/`hour`, `d`/`day`, `w`/`week`, `month`
    /// (plurals accepted). A month is exactly 30 days (2,592,000 s): a
    /// calendar month is not a fixed length, and GCRA needs a fixed emission
    /// interval. `m` is a minute; there is no `mo`. The burst defaults to
    /// `count`; set it with [`Quota::with_burst`].
    fn from_str(s: &str) -> Result<Quota, QuotaError> {
        let input = s.to_owned();
        let err = |kind| QuotaError::new(kind, Some(input.clone()));
        let (count, period) = s.trim().split_once('/').ok_or_else(|| err(ErrorKind::Syntax))?;
        let count = count.trim();
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(ErrorKind::Syntax));
        }
        let count: u32 = count.parse().map_err(|_| err(ErrorKind::CountTooLarge))?;
        if count == 0 {
            return Err(err(ErrorKind::ZeroCount));
        }
        let period = period.trim();
        let digits = period.bytes().take_while(|b| b.is_ascii_digit()).count();
        let (multiplier, unit) = period.split_at(digits);
        let multiplier: u64 = if multiplier.is_empty() {
            1
        } else {
            multiplier.parse().map_err(|_| err(ErrorKind::PeriodTooLong))?
        };
        if multiplier == 0 {
            return Err(err(ErrorKind::ZeroPeriod));
        }
        let unit_ns = crate::engine::units::unit_ns(unit.trim()).ok_or_else(|| err(ErrorKind::Unit))?;
        let period_ns = multiplier
            .checked_mul(unit_ns)
            .ok_or_else(|| err(ErrorKind::PeriodTooLong))?;
        Ok(Quota {
            count,
            period_ns,
            interval_ns: emission_interval(count, period_ns),
            burst: count,
        })
    }
}

/// Why a quota could not be built or parsed.
///
/// The message names the input and what was expected, so it can be shown to
/// an operator as is.
#[derive(Clone, PartialEq, Eq)]
pub struct QuotaError {
    kind: ErrorKind,
    input: Option<String>,
}

crate::engine::errors::debug_as_display!(QuotaError);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    Syntax,
    Unit,
    ZeroCount,
    ZeroBurst,
    ZeroPeriod,
    CountTooLarge,
    PeriodTooLong,
}

impl QuotaError {
    fn new(kind: ErrorKind, input: Option<String>) -> Self {
        QuotaError { kind, input }
    }
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(input) = &self.input {
            write!(f, "invalid rate {input:?}: ")?;
        }
        match self.kind {
            ErrorKind::Syntax => write!(
                f,
                "expected \"<count>/<period>\" such as \"600/min\", \"10/s\", \"5000/h\" or \"100/30s\""
            ),
            ErrorKind::Unit => write!(
                f,
                "unknown period unit; expected one of {}, optionally preceded by a number (\"30s\")",
                crate::engine::units::UNIT_NAMES
            ),
            ErrorKind::ZeroCount => write!(
                f,
                "the count must be at least 1 (a rate of 0 would block every request)"
            ),
            ErrorKind::ZeroBurst => write!(f, "the burst must be at least 1"),
            ErrorKind::ZeroPeriod => write!(f, "the period must be longer than zero"),
            ErrorKind::CountTooLarge => write!(f, "the count must be at most {}", u32::MAX),
            ErrorKind::PeriodTooLong => write!(
                f,
                "the period must be at most {} nanoseconds (about 584 years)",
                u64::MAX
            ),
        }
    }
}

impl std::error::Error for QuotaError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!("600/min".parse::<Quota>().unwrap(), Quota::per_minute(600));
        assert_eq!("10/s".parse::<Quota>().unwrap(), Quota::per_second(10));
        assert_eq!("5000/h".parse::<Quota>().unwrap(), Quota::per_hour(5000));
        let q: Quota = "100/30s".parse().unwrap();
        assert_eq!(q.count(), 100);
        assert_eq!(q.period(), Duration::from_secs(30));
        assert_eq!(q.emission_interval(), Duration::from_millis(300));
        assert_eq!(
            " 1 / 500ms ".parse::<Quota>().unwrap().emission_interval(),
            Duration::from_millis(500)
        );
        assert_eq!("2/day".parse::<Quota>().unwrap().period(), Duration::from_secs(86_400));
        assert_eq!("10000/d".parse::<Quota>().unwrap(), Quota::per_day(10_000));
        assert_eq!("100000/week".parse::<Quota>().unwrap(), Quota::per_week(100_000));
        assert_eq!("100000/w".parse::<Quota>().unwrap(), Quota::per_week(100_000));
        assert_eq!(
            "1/2weeks".parse::<Quota>().unwrap().period(),
            Duration::from_secs(14 * 86_400)
        );
        assert_eq!(
            "1000000/month".parse::<Quota>().unwrap().period(),
            Duration::from_secs(2_592_000)
        );
        assert_eq!(
            "3/2months".parse::<Quota>().unwrap().period(),
            Duration::from_secs(2 * 2_592_000)
        );
    }

    #[test]
    fn long_periods_have_exact_emission_intervals() {
        for (rate, interval_ns, period_s) in [
            ("10000/d", 8_640_000_000, 86_400),
            ("100000/week", 6_048_000_000, 604_800),
            ("1000000/month", 2_592_000_000, 2_592_000),
            ("1/month", 2_592_000 * NANOS_PER_SEC, 2_592_000),
        ] {
            let q: Quota = rate.parse().unwrap();
            assert_eq!(q.interval_ns(), interval_ns, "{rate}");
            // Exact: no rounding, so count * T is the period to the nanosecond.
            assert_eq!(u64::from(q.count()) * q.interval_ns(), q.period_ns(), "{rate}");
            assert_eq!(q.period(), Duration::from_secs(period_s), "{rate}");
        }
        // Not exact: rounded up, never faster than the rate.
        let q: Quota = "7/d".parse().unwrap();
        assert_eq!(q.interval_ns(), 12_342_857_142_858);
        assert!(u64::from(q.count()) * q.interval_ns() >= q.period_ns());
    }

    #[test]
    fn refuses_everything_else_with_a_reason() {
        for (bad, needle) in [
            ("", "expected"),
            ("600", "expected"),
            ("/min", "expected"),
            ("-1/s", "expected"),
            ("1.5/s", "expected"),
            ("abc/s", "expected"),
            ("0/s", "at least 1"),
            ("10/fortnight", "unit"),
            ("10/mo", "unit"),
            ("10/Month", "unit"),
            ("1/0week", "longer than zero"),
            ("1/0month", "longer than zero"),
            ("1/99999999month", "at most"),
            ("10/", "unit"),
            ("10/0s", "longer than zero"),
            ("99999999999/s", "at most"),
            ("1/99999999999999999999d", "at most"),
            ("1/999999999999d", "at most"),
        ] {
            let err = bad.parse::<Quota>().unwrap_err().to_string();
            assert!(err.contains(needle), "{bad:?} gave {err:?}");
            assert!(err.contains(&format!("{bad:?}")), "{err:?} names the input");
        }
    }

    #[test]
    fn emission_interval_rounds_up() {
        // 3/s: 333_333_333.33 ns rounds up, never admitting faster than 3/s.
        assert_eq!(Quota::per_second(3).interval_ns(), 333_333_334);
        assert_eq!(Quota::new(u32::MAX, Duration::from_nanos(1)).unwrap().interval_ns(), 1);
    }

    #[test]
    fn burst_defaults_to_count_and_can_change() {
        assert_eq!(Quota::per_second(100).burst(), 100);
        assert_eq!(Quota::per_second(100).with_burst(20).burst(), 20);
        assert!(Quota::per_second(1).try_with_burst(0).is_err());
    }

    #[test]
    fn the_displayed_rate_parses_back() {
        for q in [
            Quota::per_minute(600),
            "100/30s".parse::<Quota>().unwrap(),
            Quota::new(3, Duration::from_nanos(1_500)).unwrap(),
            Quota::new(7, Duration::from_micros(2)).unwrap(),
            Quota::new(1, Duration::from_nanos(u64::MAX)).unwrap(),
            Quota::per_hour(5000),
            Quota::per_day(10_000),
            "1/2d".parse::<Quota>().unwrap(),
            Quota::per_week(100_000),
            "1/3weeks".parse::<Quota>().unwrap(),
            "1000000/month".parse::<Quota>().unwrap(),
            "1/12months".parse::<Quota>().unwrap(),
            "5/36h".parse::<Quota>().unwrap(),
        ] {
            let shown = q.to_string();
            let rate = shown.split(" (").next().unwrap();
            assert_eq!(rate.parse::<Quota>().unwrap(), q, "{shown}");
        }
        assert_eq!(Quota::per_minute(600).to_string(), "600/min (burst 600)");
        assert_eq!(Quota::per_day(10_000).to_string(), "10000/d (burst 10000)");
        assert_eq!("1/2d".parse::<Quota>().unwrap().to_string(), "1/2d (burst 1)");
        assert_eq!(Quota::per_week(100_000).to_string(), "100000/week (burst 100000)");
        assert_eq!("1/14d".parse::<Quota>().unwrap().to_string(), "1/2weeks (burst 1)");
        assert_eq!(
            "1000000/30d".parse::<Quota>().unwrap().to_string(),
            "1000000/month (burst 1000000)"
        );
        assert_eq!("1/210d".parse::<Quota>().unwrap().to_string(), "1/7months (burst 1)");
        assert_eq!("1/36h".parse::<Quota>().unwrap().to_string(), "1/36h (burst 1)");
        assert_eq!(
            "100/30s".parse::<Quota>().unwrap().with_burst(5).to_string(),
            "100/30s (burst 5)"
        );
    }
}
