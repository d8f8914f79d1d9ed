//! What a decision sends back: the rate-limit headers on every limited
//! response, and the 429 with `Retry-After` and a problem+json body.

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};

use crate::config::{HeaderStyle, ResponseConfig};
use crate::{Decision, Denial, Quota};

/// `RateLimit-Limit` (draft-ietf-httpapi-ratelimit-headers up to -06).
pub static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining` (up to draft -06).
pub static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset` (up to draft -06).
pub static RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// `RateLimit-Policy` (draft -11 structured field).
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft -11 structured field).
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The longest `Retry-After` sent: a request that can never conform (its
/// cost is above the burst) is told to come back in a day, not in 584
/// years.
const MAX_RETRY_SECS: u64 = 86_400;

/// The result of one limited request, carried from the decision to the
/// response.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub(crate) decision: Decision,
    pub(crate) quota: Quota,
    pub(crate) profile: Option<Arc<str>>,
    pub(crate) shadow: bool,
    pub(crate) style: HeaderStyle,
    /// Claims this crate verified for the request, handed to the handler.
    pub(crate) claims: Option<crate::claims::VerifiedClaims>,
    /// Whether the token was looked at for this decision.
    pub(crate) claims_checked: bool,
}

impl Outcome {
    /// The engine's decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The profile the limit came from (`None` for numbers carried by a
    /// token or the limit service).
    pub fn profile(&self) -> Option<&str> {
        self.profile.as_deref()
    }

    /// Whether the request is turned away (denied, and not a shadow route).
    pub fn rejects(&self) -> bool {
        self.decision.is_denied() && !self.shadow
    }

    pub(crate) fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.decision.retry_after()).clamp(1, MAX_RETRY_SECS)
    }

    /// Adds this outcome's rate-limit headers, unless `headers` already
    /// reports a tighter limit (fewer remaining) from another rule.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        let remaining = u64::from(self.decision.remaining());
        if existing_remaining(headers, self.style).is_some_and(|r| r <= remaining) {
            return;
        }
        self.write_headers_over(headers);
    }

    /// Adds this outcome's rate-limit headers, replacing any there (the
    /// handler's own response: no other rule has run inside it).
    pub(crate) fn write_headers_over(&self, headers: &mut HeaderMap) {
        let remaining = u64::from(self.decision.remaining());
        let reset = ceil_secs(self.decision.reset_after());
        if matches!(self.style, HeaderStyle::Draft06 | HeaderStyle::Both) {
            headers.insert(RATELIMIT_LIMIT.clone(), number(u64::from(self.decision.limit())));
            headers.insert(RATELIMIT_REMAINING.clone(), number(remaining));
            headers.insert(RATELIMIT_RESET.clone(), number(reset));
        }
        if matches!(self.style, HeaderStyle::Draft11 | HeaderStyle::Both) {
            let name = self.policy_name();
            let window = ceil_secs(self.quota.emission_interval().saturating_mul(self.quota.burst())).max(1);
            let mut policy = String::with_capacity(48);
            let mut state = String::with_capacity(48);
            // Writing to a String cannot fail.
            let _ = write!(policy, "{name};q={};w={window}", self.quota.burst());
            let _ = write!(state, "{name};r={remaining};t={reset}");
            if let (Ok(p), Ok(s)) = (HeaderValue::from_str(&policy), HeaderValue::from_str(&state)) {
                headers.insert(RATELIMIT_POLICY.clone(), p);
                headers.insert(RATELIMIT.clone(), s);
            }
        }
    }

    /// The draft -11 policy name: the profile, as a structured-field string.
    fn policy_name(&self) -> String {
        let raw = self.profile.as_deref().unwrap_or("custom");
        let mut out = String::with_capacity(raw.len() + 2);
        out.push('"');
        for c in raw.chars().filter(|c| (' '..='~').contains(c)) {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }

    /// The 429 response: rate-limit headers, `Retry-After` in whole seconds
    /// (rounded up, at least 1) and a problem+json body.
    pub fn rejection(&self, body: &ResponseConfig) -> Response<Bytes> {
        let retry = self.retry_after_secs();
        let detail = match self.decision.denial() {
            Some(Denial::CostExceedsBurst) => {
                "This request costs more than the limit's burst, so it can never be admitted.".to_owned()
            }
            Some(Denial::FleetLimited) => {
                format!("The fleet-wide rate limit for this client is exhausted; retry in {retry} s.")
            }
            Some(Denial::StoreFull) => {
                format!("The rate limiter is at capacity for new clients; retry in {retry} s.")
            }
            _ => format!("Rate limit exceeded; retry in {retry} s."),
        };
        let json = serde_json::json!({
            "type": body.problem_type,
            "title": body.problem_title,
            "status": 429,
            "detail": detail,
            "retry_after": retry,
        });
        let mut response = Response::new(Bytes::from(json.to_string()));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        headers.insert(RETRY_AFTER, number(retry));
        self.write_headers(headers);
        response
    }
}

/// Whole seconds, rounded up (`Duration::MAX`, a wait that never ends,
/// saturates rather than wrapping to zero).
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The remaining count another rule already put on the response.
fn existing_remaining(headers: &HeaderMap, style: HeaderStyle) -> Option<u64> {
    if matches!(style, HeaderStyle::Draft06 | HeaderStyle::Both) {
        // Only a complete set counts: a lone `RateLimit-Remaining` (from an
        // upstream, say) must not leave the client without Limit and Reset.
        let v = headers.get(&RATELIMIT_REMAINING)?;
        if !headers.contains_key(&RATELIMIT_LIMIT) || !headers.contains_key(&RATELIMIT_RESET) {
            return None;
        }
        return v.to_str().ok()?.trim().parse().ok();
    }
    if !headers.contains_key(&RATELIMIT_POLICY) {
        return None;
    }
    // `"name";r=..;t=..`: the parameters follow the quoted name, which
    // may itself contain `;r=`.
    let v = headers.get(&RATELIMIT)?.to_str().ok()?;
    let params = &v[v.rfind('"').map_or(0, |i| i + 1)..];
    params
        .split(';')
        .find_map(|p| p.trim().strip_prefix("r="))
        .and_then(|r| r.trim().parse().ok())
}

/// A header value for a number. Small numbers (the common case) come from a
/// table of static values, so cloning them does not allocate.
pub(crate) fn number(n: u64) -> HeaderValue {
    const TABLE: usize = 1024;
    static SMALL: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    let table = SMALL.get_or_init(|| {
        (0..TABLE)
            .map(|i| HeaderValue::from_static(Box::leak(i.to_string().into_boxed_str())))
            .collect()
    });
    match usize::try_from(n).ok().and_then(|i| table.get(i)) {
        Some(v) => v.clone(),
        None => HeaderValue::from(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        // A wait that never ends saturates (it overflowed, or wrapped to 0).
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
        assert_eq!(ceil_secs(Duration::from_secs(u64::MAX)), u64::MAX);
    }

    #[test]
    fn numbers() {
        assert_eq!(number(0), "0");
        assert_eq!(number(1023), "1023");
        assert_eq!(number(1024), "1024");
        assert_eq!(number(u64::MAX), u64::MAX.to_string().as_str());
    }
}
