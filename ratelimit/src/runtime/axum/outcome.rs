//! What a decision sends back: the rate-limit headers on every limited
//! response, and the 429 with `Retry-After` and a problem+json body.
//!
//! The structured fields follow draft-ietf-httpapi-ratelimit-headers-10:
//! `RateLimit-Policy` ("a non-empty List of Quota Policy Items ... The Item
//! value MUST be a String") and `RateLimit` (a List of Service Limit Items),
//! one member per limit that applied to the request, matched by name.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};

use crate::runtime::config::{HeaderStyle, ResponseConfig};
use crate::{Decision, Denial, Quota};

mod lists;
pub(crate) use lists::{append_member, policy_name};

/// `RateLimit-Limit` (draft-ietf-httpapi-ratelimit-headers up to -06).
pub static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining` (up to draft -06).
pub static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset` (up to draft -06).
pub static RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// `RateLimit-Policy` (a structured List, draft-ietf-httpapi-ratelimit-headers-10).
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (a structured List, draft-ietf-httpapi-ratelimit-headers-10).
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The longest `Retry-After` sent for a request that can never conform
/// (its cost is above the burst): come back in a day, not in 584 years.
/// (A quota slower than one unit a day can still send a longer one: see
/// [`Outcome::retry_after_secs`].)
const MAX_RETRY_SECS: u64 = 86_400;

/// The largest Integer a structured field can carry (RFC 9651, 3.3.1).
const SF_MAX_INTEGER: u64 = 999_999_999_999_999;

/// The route a decision was made for: an attribute's name, or a
/// `[[rules]]` entry's (interned with the configuration: no allocation and
/// no reference count either way).
#[derive(Debug, Clone, Copy)]
pub(crate) enum RouteName {
    Static(&'static str),
    Rule(&'static str),
}

/// The result of one limited request, carried from the decision to the
/// response.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub(crate) decision: Decision,
    /// What the request cost (its next one costs the same).
    pub(crate) cost: u32,
    /// Charged by the response's size: bytes per unit (`cost` is then the
    /// unit reserved before the handler ran).
    pub(crate) bytes_per_unit: Option<u32>,
    pub(crate) quota: Quota,
    pub(crate) profile: Option<&'static str>,
    pub(crate) route: RouteName,
    pub(crate) shadow: bool,
    pub(crate) style: HeaderStyle,
    /// Claims this crate verified for the request, handed to the handler.
    pub(crate) claims: Option<crate::runtime::claims::VerifiedClaims>,
    /// Whether the token was looked at for this decision.
    pub(crate) claims_checked: bool,
    /// Where it was charged: what a later settlement ([`Charge`](super::Charge))
    /// adjusts.
    pub(crate) held: Held,
    /// The limit's requests in flight, when it has a concurrency limit.
    pub(crate) in_flight: Option<InFlight>,
    /// The key needed the client's address and the server gave none (it was
    /// not served with connect info): answered 500, nothing decided.
    pub(crate) no_peer: bool,
}

/// The bucket a decision charged: its cell, route and fleet id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub(crate) cell: crate::CellKey,
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) route_id: u32,
    /// 0 without a fleet gate.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fleet_id: u64,
    /// The key's network: a request the store places on the network's
    /// shared cell is counted on the network's fleet id, computed then
    /// (most requests never need it).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) network: Option<std::net::IpAddr>,
}

impl Outcome {
    /// An outcome of nothing, left where one was taken from
    /// ([`std::mem::replace`]).
    pub(crate) fn vacant() -> Outcome {
        Outcome {
            decision: crate::Decision::placeholder(),
            cost: 0,
            bytes_per_unit: None,
            quota: crate::Quota::per_second(1),
            profile: None,
            route: RouteName::Static(""),
            shadow: false,
            style: HeaderStyle::default(),
            claims: None,
            claims_checked: false,
            held: Held {
                cell: crate::CellKey::new(1, 0),
                route_id: 0,
                fleet_id: 0,
                network: None,
            },
            in_flight: None,
            no_peer: false,
        }
    }

    /// The engine's decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The profile the limit came from (`None` for numbers carried by a
    /// token or the limit service).
    pub fn profile(&self) -> Option<&str> {
        self.profile
    }

    /// The route's name: the attribute's `name` (or the handler's path), or
    /// the `[[rules]]` entry's.
    pub fn route(&self) -> &str {
        match self.route {
            RouteName::Static(route) => route,
            RouteName::Rule(rule) => rule,
        }
    }

    /// What the request cost before it was served (for a route charged
    /// by its response's size, the unit reserved; the settlement follows
    /// when the body has been sent).
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// `cost = response_bytes(per = N)`: `Some(N)`.
    pub fn bytes_per_unit(&self) -> Option<u32> {
        self.bytes_per_unit
    }

    /// The quota that applied.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The name of this limit in `RateLimit-Policy`, `RateLimit` and the
    /// 429 body's `violated-policies`: `<route>/<profile>` (`<route>/custom`
    /// for numbers from a token or the limit service).
    ///
    /// The route is part of the name because a policy is a bucket: two
    /// routes on the same profile (a `[[rules]]` entry and the attribute
    /// beneath it) are two buckets, and a response that lists both must
    /// tell them apart. Bytes outside printable ASCII, and `%`, `"`, `\` (and
    /// `/` in the profile) are percent-encoded, so the name is a valid
    /// structured-field String without escapes, and different (route,
    /// profile) pairs never share a name.
    pub fn policy_name(&self) -> String {
        match self.route {
            RouteName::Static(route) => policy_name(route, self.profile),
            // A `[[rules]]` entry may share its name with an attribute
            // route (they are different buckets): `@`, which route names
            // cannot contain, keeps their policies apart.
            RouteName::Rule(rule) => {
                let mut name = String::with_capacity(rule.len() + 16);
                name.push('@');
                name.push_str(&policy_name(rule, self.profile));
                name
            }
        }
    }

    /// Whether the request is turned away (denied by the rate or the
    /// concurrency, and not a shadow route; or not decided at all, its key
    /// needing a client address the server did not give).
    pub fn rejects(&self) -> bool {
        self.no_peer || ((self.decision.is_denied() || self.refused_in_flight()) && !self.shadow)
    }

    /// The limit on this client's requests in flight, when the profile sets
    /// one (`concurrency`): (limit, permits left after this request).
    pub fn concurrency(&self) -> Option<(u32, u32)> {
        self.in_flight.map(|c| (c.limit, c.remaining))
    }

    /// `t`: whole seconds, rounded up, until at least one more unit of this
    /// limit is available ([`Decision::next_unit_after`]); 0 when the bucket
    /// is full.
    fn reset_secs(&self) -> u64 {
        ceil_secs(self.decision.next_unit_after()).min(SF_MAX_INTEGER)
    }

    /// `Retry-After` in whole seconds: the decision's retry, rounded up, at
    /// least 1 (a day, [`MAX_RETRY_SECS`], for a request that can never
    /// conform; otherwise the real wait, however long), and never earlier than `t`
    /// (draft-10: "the Retry-After field value SHOULD NOT reference a point
    /// in time earlier than the reset parameter").
    pub(crate) fn retry_after_secs(&self) -> u64 {
        let retry = match self.decision.denial() {
            // Refused by its requests in flight only: a permit comes back
            // when one of them ends, which no one can tell in advance; the
            // shortest wait a whole number of seconds can say.
            None if self.refused_in_flight() => 1,
            // It can never conform: come back in a day, not in 584 years.
            Some(Denial::CostExceedsBurst) => MAX_RETRY_SECS,
            // The real wait, however long (a day-long quota's can be).
            _ => ceil_secs(self.decision.retry_after()).clamp(1, SF_MAX_INTEGER),
        };
        retry.max(self.reset_secs())
    }

    /// Whole seconds until this limit would admit the client's next request
    /// (of the same cost), 0 for a shadow limit (it never refuses): an
    /// outer limit's share of a refusal from beneath.
    pub(crate) fn outer_wait_secs(&self) -> u64 {
        if self.shadow {
            return 0;
        }
        ceil_secs(self.decision.wait_for(self.cost)).min(SF_MAX_INTEGER)
    }

    /// Adds this outcome's rate-limit headers to a response that another
    /// limit may already have reported on (the layer's rule, around a
    /// `#[rate_limit]` handler or any service):
    ///
    /// * `RateLimit-Limit`, `-Remaining`, `-Reset`: unless the response
    ///   already reports a tighter limit (fewer remaining);
    /// * `RateLimit-Policy` and `RateLimit`: this limit's member is added to
    ///   the Lists already there ("more than one quota policy can affect a
    ///   given request");
    /// * `Retry-After` (a refusal from beneath): raised to the time this
    ///   limit needs before it admits the client's next request of the same
    ///   cost, as the client cannot be served before then.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        if self.style.draft06() {
            let remaining = u64::from(self.decision.remaining());
            if existing_remaining(headers).is_none_or(|r| r > remaining) {
                self.write_draft06(headers);
            }
        }
        if self.style.structured() {
            let name = self.policy_name();
            append_member(headers, &RATELIMIT_POLICY, &name, &self.policy_member(&name));
            append_member(headers, &RATELIMIT, &name, &self.limit_member(&name));
            self.write_in_flight(headers);
        }
        raise_retry_after(headers, self.outer_wait_secs());
    }

    /// Adds this outcome's rate-limit headers, replacing any there (the
    /// handler's own response: no other rule has run inside it).
    pub(crate) fn write_headers_over(&self, headers: &mut HeaderMap) {
        if self.style.draft06() {
            self.write_draft06(headers);
        }
        if self.style.structured() {
            let name = self.policy_name();
            let policy = self.policy_member(&name);
            let limit = self.limit_member(&name);
            if let (Ok(p), Ok(l)) = (HeaderValue::from_str(&policy), HeaderValue::from_str(&limit)) {
                headers.insert(RATELIMIT_POLICY.clone(), p);
                headers.insert(RATELIMIT.clone(), l);
            }
            self.write_in_flight(headers);
        }
    }

    fn write_draft06(&self, headers: &mut HeaderMap) {
        write_triple(headers, self.triple());
    }

    /// `RateLimit-Limit`, `-Remaining` and `-Reset` of this limit. Refused
    /// by the concurrency (a shadow route's), the triple describes that:
    /// the next permit comes when one of the client's requests ends, said
    /// as 1 s.
    pub(crate) fn triple(&self) -> Triple {
        if let Some(c) = self.in_flight.filter(|c| c.refused && !self.decision.is_denied()) {
            return Triple {
                limit: c.limit,
                remaining: 0,
                reset: 1,
            };
        }
        Triple {
            limit: self.decision.limit(),
            remaining: self.decision.remaining(),
            reset: ceil_secs(self.decision.reset_after()),
        }
    }

    /// This limit's Quota Policy Item: `"<name>";q=<burst>;w=<seconds>`.
    /// `q` is the burst (the most a client can have in hand) and `w` the
    /// seconds the bucket takes to refill it, so `q/w` is the sustained
    /// rate ("The "w" parameter value conveys a time window applicable to
    /// the quota", at least 1: "a non-negative, non-zero, Integer").
    fn policy_member(&self, name: &str) -> String {
        let window =
            ceil_secs(self.quota.emission_interval().saturating_mul(self.quota.burst())).clamp(1, SF_MAX_INTEGER);
        let mut out = String::with_capacity(name.len() + 32);
        // Writing to a String cannot fail.
        let _ = write!(out, "\"{name}\";q={};w={window}", self.quota.burst());
        out
    }

    /// This limit's Service Limit Item: `"<name>";r=<remaining>;t=<seconds>`,
    /// with `t` the seconds until the next unit ("the number of seconds
    /// until additional quota associated with the quota policy is made
    /// available"), left out when the bucket is full (no more is coming).
    fn limit_member(&self, name: &str) -> String {
        let mut out = String::with_capacity(name.len() + 32);
        let _ = write!(out, "\"{name}\";r={}", self.decision.remaining());
        let reset = self.reset_secs();
        if reset > 0 {
            let _ = write!(out, ";t={reset}");
        }
        out
    }

    /// The 429 response: rate-limit headers, `Retry-After` in whole seconds
    /// (rounded up, at least 1, never earlier than `t`) and a problem+json
    /// body with the draft's `violated-policies` member.
    pub fn rejection(&self, body: &ResponseConfig) -> Response<Bytes> {
        let retry = self.retry_within(None);
        let mut response = self.problem(body, retry);
        self.finish_rejection(response.headers_mut(), retry);
        response
    }

    /// `Retry-After` of this refusal beneath an outer limit needing `outer`:
    /// the longer wait.
    pub(crate) fn retry_within(&self, outer: Option<OuterWait>) -> u64 {
        self.retry_after_secs().max(outer.map_or(0, |o| o.0))
    }

    /// The default 429: a problem+json body saying `retry` (its headers
    /// are [`finish_rejection`](Self::finish_rejection)'s).
    pub(crate) fn problem(&self, body: &ResponseConfig, retry: u64) -> Response<Bytes> {
        self.problem_of(body, retry, vec![self.violated_policy()])
    }

    /// The policy this limit's refusal names: the rate's, or the
    /// concurrency's when only that refused.
    pub(crate) fn violated_policy(&self) -> String {
        if self.refused_in_flight() && !self.decision.is_denied() {
            self.in_flight_policy_name()
        } else {
            self.policy_name()
        }
    }

    /// [`problem`](Self::problem) naming `violated` (every limit of a
    /// stacked decision that refused).
    pub(crate) fn problem_of(&self, body: &ResponseConfig, retry: u64, violated: Vec<String>) -> Response<Bytes> {
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
            None if self.refused_in_flight() => format!(
                "Too many requests in flight for this client (at most {}); retry when one of them has finished.",
                self.in_flight.map_or(0, |c| c.limit)
            ),
            _ => format!("Rate limit exceeded; retry in {retry} s."),
        };
        let json = serde_json::json!({
            "type": body.problem_type,
            "title": body.problem_title,
            "status": 429,
            "detail": detail,
            "retry_after": retry,
            "violated-policies": violated,
        });
        problem(StatusCode::TOO_MANY_REQUESTS, &json)
    }

    /// What every rejection carries, whoever built its body: `Retry-After`
    /// of at least `retry` seconds (a hook's own is kept when it is a
    /// number of seconds no shorter: a client told to come back sooner
    /// would only be refused again) and the rate-limit headers.
    pub(crate) fn finish_rejection(&self, headers: &mut HeaderMap, retry: u64) {
        let own = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
        if own.is_none_or(|secs| secs < retry) {
            headers.insert(RETRY_AFTER, number(retry));
        }
        self.write_headers_over(headers);
    }
}

/// Which of several limits on one request the `RateLimit-Limit`,
/// `-Remaining` and `-Reset` triple reports: on a refusal, the refusing
/// limit with the longest wait; otherwise the tightest, the one with the
/// fewest units left (of two with as many, the one that takes longer to
/// refill). `None` for no limits.
pub(crate) fn reported(outcomes: &[Outcome]) -> Option<usize> {
    let refusing = outcomes.iter().enumerate().filter(|(_, o)| o.rejects());
    if let Some((i, _)) = refusing.max_by_key(|(_, o)| (o.retry_after_secs(), o.decision.retry_after())) {
        return Some(i);
    }
    outcomes
        .iter()
        .enumerate()
        .min_by_key(|(_, o)| (o.decision.remaining(), std::cmp::Reverse(o.decision.reset_after())))
        .map(|(i, _)| i)
}

/// The policy names of the limits that refuse (the body's
/// `violated-policies`).
pub(crate) fn violated(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| o.rejects())
        .map(Outcome::violated_policy)
        .collect()
}

/// The headers of several limits on one request: the triple of the
/// [`reported`] one (unless `merge` and the response already reports a
/// tighter limit), one member per limit in the structured Lists, in
/// declaration order, and `Retry-After` raised to the longest wait any of
/// them needs before the client's next request. `merge`: another limit
/// (beneath, in an inner service) may have written its own already.
pub(crate) fn write_stack(outcomes: &[Outcome], headers: &mut HeaderMap, merge: bool) {
    let Some(main) = reported(outcomes) else { return };
    let first = &outcomes[main];
    if first.style.draft06() {
        let remaining = u64::from(first.decision.remaining());
        if !merge || existing_remaining(headers).is_none_or(|r| r > remaining) {
            first.write_draft06(headers);
        }
    }
    if first.style.structured() {
        if !merge {
            headers.remove(&RATELIMIT_POLICY);
            headers.remove(&RATELIMIT);
        }
        for o in outcomes {
            let name = o.policy_name();
            append_member(headers, &RATELIMIT_POLICY, &name, &o.policy_member(&name));
            append_member(headers, &RATELIMIT, &name, &o.limit_member(&name));
            o.write_in_flight(headers);
        }
    }
    if merge {
        raise_retry_after(
            headers,
            outcomes.iter().map(Outcome::outer_wait_secs).max().unwrap_or(0),
        );
    }
}

/// `RateLimit-Limit`, `-Remaining` and `-Reset` (draft -06).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Triple {
    limit: u32,
    remaining: u32,
    reset: u64,
}

pub(crate) fn write_triple(headers: &mut HeaderMap, t: Triple) {
    headers.insert(RATELIMIT_LIMIT.clone(), number(u64::from(t.limit)));
    headers.insert(RATELIMIT_REMAINING.clone(), number(u64::from(t.remaining)));
    headers.insert(RATELIMIT_RESET.clone(), number(t.reset));
}

/// What an outer limit (a `[[rules]]` entry of the layer) needs before it
/// admits the client's next request, in whole seconds: put in the request's
/// extensions for the limit beneath, so its 429 tells the whole wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OuterWait(pub(crate) u64);

/// A wiring mistake's answer: 500 with a problem+json body saying what to
/// fix (a limited route is never served unlimited).
pub(crate) fn wiring_problem(title: &str, detail: &str) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": 500,
        "detail": detail,
    });
    problem(StatusCode::INTERNAL_SERVER_ERROR, &body)
}

/// Raises a `Retry-After` below `wait` seconds (an outer limit's, which
/// the client must also wait out) to it; none set, none added.
fn raise_retry_after(headers: &mut HeaderMap, wait: u64) {
    if wait == 0 {
        return;
    }
    let earlier = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .is_some_and(|secs| secs < wait);
    if earlier {
        headers.insert(RETRY_AFTER, number(wait));
    }
}

/// An RFC 9457 problem+json response of `status` with `body`.
fn problem(status: StatusCode, body: &serde_json::Value) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    response
}

/// Whole seconds, rounded up (`Duration::MAX`, a wait that never ends,
/// saturates rather than wrapping to zero).
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The `RateLimit-Remaining` another limit already put on the response.
fn existing_remaining(headers: &HeaderMap) -> Option<u64> {
    // Only a complete set counts: a lone `RateLimit-Remaining` (from an
    // upstream, say) must not leave the client without Limit and Reset.
    let v = headers.get(&RATELIMIT_REMAINING)?;
    if !headers.contains_key(&RATELIMIT_LIMIT) || !headers.contains_key(&RATELIMIT_RESET) {
        return None;
    }
    v.to_str().ok()?.trim().parse().ok()
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

/// A limit's requests in flight, as the response reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InFlight {
    /// The key's concurrency.
    pub(crate) limit: u32,
    /// Permits left after this request's (0 when refused).
    pub(crate) remaining: u32,
    /// The key already held its limit: refused (unless shadow).
    pub(crate) refused: bool,
}

#[cfg(test)]
mod tests;
