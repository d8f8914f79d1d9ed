//! `Quota`: how much a key may do, as a sustained rate and a burst.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const NANOS_PER_SEC: u64 = 1_000_000_000;

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
        let units = [
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
                    write!(f, "{n}{name}")?;
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
    /// `"100/30s"`, `"1/500ms"`. Units (the same as durations in a
    /// configuration take, one table): `ns`, `us`/`µs`, `ms`,
    /// `s`/`sec`/`second`, `m`/`min`/`minute`, `h`/`hr`/`hour`, `d`/`day`
    /// (plurals accepted). The burst defaults to `count`; set it with
    /// [`Quota::with_burst`].
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
        let unit_ns = crate::units::unit_ns(unit.trim()).ok_or_else(|| err(ErrorKind::Unit))?;
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaError {
    kind: ErrorKind,
    input: Option<String>,
}

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
                crate::units::UNIT_NAMES
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
        ] {
            let shown = q.to_string();
            let rate = shown.split(" (").next().unwrap();
            assert_eq!(rate.parse::<Quota>().unwrap(), q, "{shown}");
        }
        assert_eq!(Quota::per_minute(600).to_string(), "600/min (burst 600)");
        assert_eq!(
            "100/30s".parse::<Quota>().unwrap().with_burst(5).to_string(),
            "100/30s (burst 5)"
        );
    }
}
