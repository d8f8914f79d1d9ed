//! The time units of the configuration: one table for the period of a rate
//! (`"600/min"`, `"1/2d"`, `"100000/week"`) and for a duration (`"250ms"`,
//! `"1d"`), so the two can never accept different spellings.
//!
//! A **month** is exactly 30 days (2,592,000 s). A calendar month is not a
//! fixed length (28 to 31 days), and GCRA needs a fixed emission interval
//! (`period / count`), so `"1000000/month"` means a million per 30 days,
//! whatever the calendar says. A week is 7 days. There is no `mo` or `m`
//! for a month: `m` is a minute.

const NS: u64 = 1;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
const MIN: u64 = 60 * S;
const H: u64 = 3_600 * S;
const D: u64 = 86_400 * S;
const WEEK: u64 = 7 * D;
/// 30 days: a fixed length (see the module docs).
const MONTH: u64 = 30 * D;

/// Every accepted spelling and its length in nanoseconds.
const UNITS: &[(&str, u64)] = &[
    ("ns", NS),
    ("us", US),
    ("µs", US),
    ("ms", MS),
    ("millis", MS),
    ("millisecond", MS),
    ("milliseconds", MS),
    ("s", S),
    ("sec", S),
    ("secs", S),
    ("second", S),
    ("seconds", S),
    ("m", MIN),
    ("min", MIN),
    ("mins", MIN),
    ("minute", MIN),
    ("minutes", MIN),
    ("h", H),
    ("hr", H),
    ("hrs", H),
    ("hour", H),
    ("hours", H),
    ("d", D),
    ("day", D),
    ("days", D),
    ("w", WEEK),
    ("week", WEEK),
    ("weeks", WEEK),
    ("month", MONTH),
    ("months", MONTH),
];

/// The canonical spellings, for messages.
pub(crate) const UNIT_NAMES: &str = "ns, us, ms, s, min, h, d, week, month";

/// The length of one `unit` in nanoseconds; `None` for an unknown unit.
pub(crate) fn unit_ns(unit: &str) -> Option<u64> {
    UNITS.iter().find(|(name, _)| *name == unit).map(|&(_, ns)| ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_canonical_unit_is_in_the_table() {
        for name in UNIT_NAMES.split(", ") {
            assert!(unit_ns(name).is_some(), "{name}");
        }
        assert_eq!(unit_ns("d"), Some(86_400 * S));
        assert_eq!(unit_ns("m"), unit_ns("min"));
        assert_eq!(unit_ns("w"), Some(604_800 * S));
        assert_eq!(unit_ns("week"), unit_ns("w"));
        assert_eq!(unit_ns("weeks"), unit_ns("w"));
        // A month is exactly 30 days: GCRA needs a fixed length.
        assert_eq!(unit_ns("month"), Some(2_592_000 * S));
        assert_eq!(unit_ns("months"), unit_ns("month"));
        // `m` is a minute, never a month; `mo` is not a unit.
        assert_eq!(unit_ns("m"), Some(60 * S));
        assert_eq!(unit_ns("mo"), None);
        assert_eq!(unit_ns("mon"), None);
        assert_eq!(unit_ns("Month"), None);
        assert_eq!(unit_ns(""), None);
        assert_eq!(unit_ns("S"), None, "units are case-sensitive");
    }
}
