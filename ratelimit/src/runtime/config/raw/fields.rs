//! Field deserializers: each parses and checks one value, so that serde
//! reports a mistake at that value's span.

use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

use super::named::fresh;
use crate::engine::store::OverflowPolicy;
use crate::runtime::config::rules;
use crate::runtime::config::HeaderStyle;
use crate::runtime::key::ForwardedHeader;
use crate::Quota;

const ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

pub(super) fn opt_algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let alg = String::deserialize(d)?;
    if !ALGORITHMS.contains(&alg.as_str()) {
        return Err(fresh(format!(
            "unknown algorithm {alg:?}: expected one of {}",
            ALGORITHMS.join(", ")
        )));
    }
    Ok(Some(alg))
}

pub(super) fn opt_http_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    http_url(d).map(Some)
}

pub(super) fn quota<'de, D: Deserializer<'de>>(d: D) -> Result<Quota, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(fresh)
}

pub(super) fn opt_quota<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Quota>, D::Error> {
    quota(d).map(Some)
}

/// A whole number in `1..=max`, or an error naming the range (`what`: "a
/// whole number", "a prefix length").
fn ranged<'de, D: Deserializer<'de>>(d: D, max: i64, what: &str) -> Result<i64, D::Error> {
    let n = i64::deserialize(d)?;
    if !(1..=max).contains(&n) {
        return Err(fresh(format!("expected {what} from 1 to {max}, got {n}")));
    }
    Ok(n)
}

/// `[store] new_keys_per_network`: a rate such as `"256/min"` (its count is
/// also the burst), or `"off"`.
pub(super) fn new_keys_budget<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Quota>, D::Error> {
    let text = String::deserialize(d)?;
    if text.trim() == "off" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|e| {
        fresh(format!(
            "{e}; expected a rate of new keys such as \"256/min\", or \"off\""
        ))
    })
}

/// A rule's `cost`: a whole number of units (`cost = 5`), or a cost kind
/// of the rule language as a string (`cost = "response_bytes:1024"`).
pub(super) fn opt_cost<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ratelimit_spec::Cost>, D::Error> {
    struct CostVisitor;
    impl<'de> serde::de::Visitor<'de> for CostVisitor {
        type Value = ratelimit_spec::Cost;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a whole number of units, or \"response_bytes:<bytes per unit>\"")
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
            match u32::try_from(n) {
                Ok(units) if units >= 1 => Ok(ratelimit_spec::Cost::Units(units)),
                _ => Err(fresh(format!(
                    "expected a whole number from 1 to {}, got {n}",
                    u32::MAX
                ))),
            }
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
            match u32::try_from(n) {
                Ok(units) if units >= 1 => Ok(ratelimit_spec::Cost::Units(units)),
                _ => Err(fresh(format!(
                    "expected a whole number from 1 to {}, got {n}",
                    u32::MAX
                ))),
            }
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            ratelimit_spec::cost_text(text).map_err(fresh)
        }
    }
    d.deserialize_any(CostVisitor).map(Some)
}

pub(super) fn positive_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d, i64::from(u32::MAX), "a whole number").map(|n| n as u32)
}

pub(super) fn opt_positive_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    positive_u32(d).map(Some)
}

/// `[store] max_keys_in_flight`: at most 2^24 keys (about 670 MB, reserved
/// when the first concurrency limit is used: a typo of a few digits must
/// fail at load, not abort the process at its first request).
pub(super) fn max_keys_in_flight<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, 1 << 24, "a whole number").map(|n| n as usize)
}

pub(super) fn max_keys<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, 1 << 32, "a whole number").map(|n| n as usize)
}

pub(super) fn opt_prefix<'de, const MAX: u8, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    ranged(d, i64::from(MAX), "a prefix length").map(|n| Some(n as u8))
}

/// `"250ms"`, `"10s"`, `"5min"`, `"1h"`, `"1d"`, `"1week"`, `"1month"` (30
/// days): a whole number and a unit
/// of the table rates use (`crate::engine::units`); must be longer than zero.
pub(in crate::runtime::config) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = t.split_at(digits);
    let units = crate::engine::units::UNIT_NAMES;
    if n.is_empty() {
        return Err(format!(
            "invalid duration {text:?}: expected a whole number and a unit ({units}), such as \"250ms\" or \"10s\""
        ));
    }
    let unit = unit.trim();
    let Some(unit_ns) = crate::engine::units::unit_ns(unit) else {
        return Err(if unit.is_empty() {
            format!("invalid duration {text:?}: missing unit; expected one of {units} (\"{n}s\")")
        } else {
            format!("invalid duration {text:?}: unknown unit {unit:?}; expected one of {units}")
        });
    };
    let too_long = || format!("invalid duration {text:?}: too long");
    let n: u64 = n.parse().map_err(|_| too_long())?;
    let ns = n.checked_mul(unit_ns).ok_or_else(too_long)?;
    if ns == 0 {
        return Err(format!("invalid duration {text:?}: must be longer than zero"));
    }
    Ok(Duration::from_nanos(ns))
}

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(fresh)
}

pub(super) fn cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let items = Vec::<String>::deserialize(d)?;
    items
        .iter()
        .map(|s| {
            let s = s.trim();
            // A bare address means that one host.
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    fresh(format!(
                        "invalid CIDR {s:?}: expected an address or network such as \"10.0.0.0/8\" or \"2001:db8::/32\""
                    ))
                })
        })
        .collect()
}

pub(super) fn overflow<'de, D: Deserializer<'de>>(d: D) -> Result<OverflowPolicy, D::Error> {
    match String::deserialize(d)?.as_str() {
        "shared" => Ok(OverflowPolicy::SharedBucket),
        "refuse" => Ok(OverflowPolicy::Refuse),
        other => Err(fresh(format!(
            "unknown overflow policy {other:?}: expected \"shared\" or \"refuse\""
        ))),
    }
}

pub(super) fn forwarded_header<'de, D: Deserializer<'de>>(d: D) -> Result<ForwardedHeader, D::Error> {
    match String::deserialize(d)?.to_ascii_lowercase().as_str() {
        "x-forwarded-for" => Ok(ForwardedHeader::XForwardedFor),
        "forwarded" => Ok(ForwardedHeader::Forwarded),
        other => Err(fresh(format!(
            "unknown forwarded header {other:?}: expected \"x-forwarded-for\" or \"forwarded\""
        ))),
    }
}

/// `[ip] without_peer`: `"error"` (a 500 naming the fix) or `"shared"` (one
/// bucket for every request without a peer address): `true` for shared.
pub(super) fn without_peer<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match String::deserialize(d)?.as_str() {
        "error" => Ok(false),
        "shared" => Ok(true),
        other => Err(fresh(format!(
            "unknown value {other:?}: expected \"error\" (answer 500, naming the missing connect info) or \
             \"shared\" (one bucket for every request without a peer address)"
        ))),
    }
}

pub(super) fn header_style<'de, D: Deserializer<'de>>(d: D) -> Result<HeaderStyle, D::Error> {
    match String::deserialize(d)?.as_str() {
        "draft-06" => Ok(HeaderStyle::Draft06),
        "structured" => Ok(HeaderStyle::Structured),
        "both" => Ok(HeaderStyle::Both),
        "none" => Ok(HeaderStyle::None),
        // The old name of "structured": it named a draft revision that was
        // not the one implemented. Refused rather than mapped, so a file
        // written against it says what it gets.
        "draft-11" => Err(fresh(
            "header style \"draft-11\" is now \"structured\": the RateLimit-Policy and RateLimit fields of \
             draft-ietf-httpapi-ratelimit-headers-10",
        )),
        other => Err(fresh(format!(
            "unknown header style {other:?}: expected \"draft-06\", \"structured\", \"both\" or \"none\""
        ))),
    }
}

pub(super) fn claim_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    rules::check_claim_path(&name).map_err(|e| fresh(e.to_string()))?;
    Ok(name)
}

pub(super) fn opt_claim_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    claim_name(d).map(Some)
}

pub(super) fn http_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = String::deserialize(d)?;
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    // Credentials in the authority are not sent (the client takes none from
    // a URL) and would be copied into every error and log line that names it.
    let authority = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or_default());
    if authority.is_some_and(|a| a.contains('@')) {
        return Err(fresh(
            "a URL with credentials (user:password@) is refused: they would not be sent, and would be logged \
             wherever the URL is; put the service behind a network that needs none, or terminate auth beside it"
                .to_owned(),
        ));
    }
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(url),
        _ => Err(fresh(format!(
            "invalid URL {url:?}: expected http:// or https:// and a host"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_take_every_unit_rates_take() {
        for (text, want) in [
            ("7ns", Duration::from_nanos(7)),
            ("7us", Duration::from_micros(7)),
            ("7µs", Duration::from_micros(7)),
            ("7ms", Duration::from_millis(7)),
            ("7s", Duration::from_secs(7)),
            ("7sec", Duration::from_secs(7)),
            ("7m", Duration::from_secs(420)),
            ("7min", Duration::from_secs(420)),
            ("7minutes", Duration::from_secs(420)),
            ("7h", Duration::from_secs(7 * 3600)),
            ("7hours", Duration::from_secs(7 * 3600)),
            ("1d", Duration::from_secs(86_400)),
            ("2days", Duration::from_secs(2 * 86_400)),
            ("1w", Duration::from_secs(604_800)),
            ("2weeks", Duration::from_secs(2 * 604_800)),
            ("1month", Duration::from_secs(2_592_000)),
            (" 10 s ", Duration::from_secs(10)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
        // Every unit a rate's period takes, a duration takes too.
        for unit in crate::engine::units::UNIT_NAMES.split(", ") {
            let rate: crate::Quota = format!("1/3{unit}").parse().expect("a rate");
            assert_eq!(parse_duration(&format!("3{unit}")), Ok(rate.period()), "{unit}");
        }
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert_eq!(
            parse_duration("3y").unwrap_err(),
            "invalid duration \"3y\": unknown unit \"y\"; expected one of ns, us, ms, s, min, h, d, week, month"
        );
        assert_eq!(
            parse_duration("30").unwrap_err(),
            "invalid duration \"30\": missing unit; expected one of ns, us, ms, s, min, h, d, week, month (\"30s\")"
        );
        assert!(parse_duration("s")
            .unwrap_err()
            .contains("expected a whole number and a unit"));
        assert!(parse_duration("1.5s").unwrap_err().contains("unknown unit \".5s\""));
        assert!(parse_duration("0s").unwrap_err().contains("longer than zero"));
        assert!(parse_duration("99999999999999999999d")
            .unwrap_err()
            .contains("too long"));
        assert!(parse_duration("999999999999d").unwrap_err().contains("too long"));
    }
}
