//! Every metric the library exports, in one catalogue: names, types,
//! units, labels and help text, so an exporter shows `# HELP` and `# TYPE`
//! lines and a dashboard can be checked against what really exists.
//!
//! The library records through the [`metrics`](https://docs.rs/metrics)
//! facade; the application installs a recorder (an exporter) and calls
//! [`describe`] once. With `metrics-exporter-prometheus`:
//!
//! ```ignore
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
//!     .set_buckets_for_metric(
//!         metrics_exporter_prometheus::Matcher::Full(ratelimit::metrics::RETRY_AFTER.to_owned()),
//!         ratelimit::metrics::RETRY_AFTER_BUCKETS,
//!     )?
//!     .install_recorder()?;
//! ratelimit::metrics::describe();
//! // GET /metrics answers handle.render()
//! ```
//!
//! (`examples/quickstart.rs` does exactly this, buckets for every
//! histogram included: see [`buckets`].) Install the recorder before
//! building the [`RateLimit`](crate::axum::RateLimit): handles are
//! registered with the recorder in place when they are first used.
//!
//! # Conventions
//!
//! Names follow Prometheus': a `ratelimit_` prefix, `_total` on counters,
//! base units in the name (`_seconds`, `_bytes`). Labels are bounded
//! whatever clients send: a route name and a tier come from the code and
//! the configuration (and past 1,024 pairs share the series `other`),
//! every other label has a fixed set of values listed here. No metric
//! carries a client's key, address or token.
//!
//! Decisions are one counter with a `decision` label rather than one
//! counter per outcome: every decision is counted exactly once, so
//! `sum(rate(ratelimit_decisions_total[5m]))` is the traffic the limits saw
//! and a rejection ratio is one division, with no risk of counting a
//! shadow-mode request twice.
//!
//! The [`CATALOGUE`] lists every metric with its help text; the table in
//! `docs/operations.md` is the same list for operators, with what to watch.

#[cfg(feature = "axum")]
use std::sync::atomic::{AtomicU64, Ordering};

use ::metrics::Unit;

/// Decisions of the HTTP runtime (`#[rate_limit]` routes and `[[rules]]`).
pub const DECISIONS: &str = "ratelimit_decisions_total";
/// `Retry-After` of each rejection.
pub const RETRY_AFTER: &str = "ratelimit_retry_after_seconds";
/// `#[rate_limit]` requests that found no limiter installed (answered 500).
pub const MISSING_LIMITER: &str = "ratelimit_missing_limiter_total";
/// Requests holding a concurrency permit now (`[profiles.NAME] concurrency`).
pub const IN_FLIGHT: &str = "ratelimit_in_flight_requests";
/// Rejections because the client had its limit of requests in flight.
pub const CONCURRENCY_REJECTED: &str = "ratelimit_concurrency_rejected_total";

/// Cells the in-process store holds now.
pub const STORE_KEYS: &str = "ratelimit_store_keys";
/// The store's key bound (`[store] max_keys`).
pub const STORE_MAX_KEYS: &str = "ratelimit_store_max_keys";
/// Bytes the store's table takes (allocated once, at startup).
pub const STORE_MEMORY: &str = "ratelimit_store_memory_bytes";
/// Requests a full store charged to a shared overflow cell, or refused.
pub const STORE_OVERFLOW: &str = "ratelimit_store_overflow_total";
/// New keys charged to their network's shared cell (its new-key budget
/// was spent).
pub const STORE_GROUPED: &str = "ratelimit_store_grouped_total";
/// Sweeps of the whole store.
pub const STORE_SWEEPS: &str = "ratelimit_store_sweeps_total";
/// Recovered cells dropped by sweeps.
pub const STORE_SWEPT: &str = "ratelimit_store_swept_keys_total";

/// Keys the token verifier holds now (a JWKS's keys, or 1).
pub const JWT_KEYS: &str = "ratelimit_jwt_keys";
/// Tokens checked by the verifier (past its caches), by `result`.
pub const JWT_VERIFICATIONS: &str = "ratelimit_jwt_verifications_total";
/// Fetches of a `[jwt] jwks_url`, startup and refreshes, by `result`.
pub const JWKS_FETCHES: &str = "ratelimit_jwks_fetches_total";

/// Lookups the limit service was asked, by `result`.
pub const SERVICE_REQUESTS: &str = "ratelimit_service_requests_total";
/// Request-path reads of the limit-service cache, by `result`.
pub const SERVICE_CACHE: &str = "ratelimit_service_cache_total";
/// Entries the limit-service cache holds now.
pub const SERVICE_CACHE_ENTRIES: &str = "ratelimit_service_cache_entries";

/// 1 while the fleet gate limits locally only; 0 while fleet-wide limits
/// apply.
pub const GLOBAL_DEGRADED: &str = "ratelimit_global_degraded";
/// 1 for the reason the fleet gate is local-only now, 0 for the others.
pub const GLOBAL_DEGRADED_REASON: &str = "ratelimit_global_degraded_reason";
/// Keys limited locally only because their part of the last round failed.
pub const GLOBAL_DEGRADED_KEYS: &str = "ratelimit_global_degraded_keys";
/// Key failures in sync rounds, summed over rounds.
pub const GLOBAL_FAILED_KEYS: &str = "ratelimit_global_failed_keys_total";
/// Sync rounds, by `result`.
pub const GLOBAL_SYNC_ROUNDS: &str = "ratelimit_global_sync_rounds_total";
/// Duration of successful sync rounds.
pub const GLOBAL_SYNC_DURATION: &str = "ratelimit_global_sync_duration_seconds";
/// Keys the last successful round synced.
pub const GLOBAL_SYNCED_KEYS: &str = "ratelimit_global_synced_keys";
/// Keys the last sync round did not read (reads rationed): held to their
/// fair share of the fleet budget until a round reads them.
pub const GLOBAL_UNREAD_KEYS: &str = "ratelimit_global_unread_keys";
/// Active keys the last sync round pushed and read (hot keys: they reached
/// their share of the budget on some instance).
pub const GLOBAL_HOT_KEYS: &str = "ratelimit_global_hot_keys";
/// Live instances in the fleet's roster, as the last round read it (a cold
/// key's share of the budget is `budget / live`).
pub const GLOBAL_LIVE_INSTANCES: &str = "ratelimit_global_live_instances";
/// Keys the gate could not track (its table full): limited locally only.
pub const GLOBAL_UNTRACKED: &str = "ratelimit_global_untracked_total";

/// Buckets for [`RETRY_AFTER`]: from a second to a day.
pub const RETRY_AFTER_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 86400.0];
/// Buckets for [`GLOBAL_SYNC_DURATION`]: from a millisecond to 5 s.
pub const SYNC_DURATION_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// Only grows (`_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution (buckets from [`buckets`]).
    Histogram,
}

/// One metric of the [`CATALOGUE`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Metric {
    /// The full name, as exported.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its unit (the `metrics` crate's; `Count` for plain numbers).
    pub unit: Unit,
    /// Its labels, each with the values it can take (`&[]`: names from the
    /// configuration or the code, such as routes and tiers).
    pub labels: &'static [(&'static str, &'static [&'static str])],
    /// The cargo feature whose code records it.
    pub feature: &'static str,
    /// The help text (`# HELP`).
    pub help: &'static str,
}

/// Route and tier: names from the code and the configuration.
const ROUTE_TIER: &[(&str, &[&str])] = &[("route", &[]), ("tier", &[])];

/// Every `decision` value.
pub const DECISION_VALUES: &[&str] = &["allowed", "rejected", "shadow_rejected"];
/// Every `result` value of [`JWKS_FETCHES`] and [`GLOBAL_SYNC_ROUNDS`].
pub const OK_ERROR: &[&str] = &["ok", "error"];
/// Every `result` value of [`SERVICE_REQUESTS`].
pub const SERVICE_RESULTS: &[&str] = &["answer", "no_answer", "error", "timeout"];
/// What a token check found (`ratelimit_jwt_verifications_total`).
pub const JWT_RESULTS: &[&str] = &[
    "verified",
    "expired",
    "not_yet_valid",
    "wrong_issuer",
    "wrong_audience",
    "unknown_key",
    "bad_signature",
    "malformed",
    "not_checked",
];
/// Every `result` value of [`SERVICE_CACHE`].
pub const CACHE_RESULTS: &[&str] = &["hit", "stale", "miss"];
/// Every `reason` value of [`GLOBAL_DEGRADED_REASON`].
pub const DEGRADED_REASONS: &[&str] = &["sync_error", "sync_timeout", "stalled", "task_stopped"];

macro_rules! metric {
    ($name:expr, $kind:ident, $unit:ident, $labels:expr, $feature:literal, $help:literal) => {
        Metric {
            name: $name,
            kind: Kind::$kind,
            unit: Unit::$unit,
            labels: $labels,
            feature: $feature,
            help: $help,
        }
    };
}

/// Every metric the library can export.
pub const CATALOGUE: &[Metric] = &[
    metric!(
        DECISIONS,
        Counter,
        Count,
        &[("route", &[]), ("tier", &[]), ("decision", DECISION_VALUES)],
        "axum",
        "Rate-limit decisions, by route, tier (the profile; `custom` for a route's own limit) and decision: \
         allowed, rejected (answered 429, or RESOURCE_EXHAUSTED for gRPC), shadow_rejected (served, but a \
         shadow-mode route would have refused it)."
    ),
    metric!(
        RETRY_AFTER,
        Histogram,
        Seconds,
        ROUTE_TIER,
        "axum",
        "Retry-After of each rejection: how long a refused client is told to wait, by route and tier."
    ),
    metric!(
        IN_FLIGHT,
        Gauge,
        Count,
        ROUTE_TIER,
        "axum",
        "Requests holding a concurrency permit now (profiles with `concurrency`), by route and tier: from the \
         decision until the response body has been sent, failed or been dropped."
    ),
    metric!(
        CONCURRENCY_REJECTED,
        Counter,
        Count,
        ROUTE_TIER,
        "axum",
        "Rejections because the client already had its limit of requests in flight (`concurrency`), by route \
         and tier; also counted in ratelimit_decisions_total as rejected (the rest of those are the rate's)."
    ),
    metric!(
        MISSING_LIMITER,
        Counter,
        Count,
        &[("route", &[])],
        "axum",
        "Requests to a #[rate_limit] route with no limiter installed (answered 500): a wiring mistake."
    ),
    metric!(
        STORE_KEYS,
        Gauge,
        Count,
        &[],
        "axum",
        "Cells the in-process store holds now: live clients plus recovered ones not yet swept."
    ),
    metric!(
        STORE_MAX_KEYS,
        Gauge,
        Count,
        &[],
        "axum",
        "The store's key bound ([store] max_keys); at it, new keys take over recovered cells or overflow."
    ),
    metric!(
        STORE_MEMORY,
        Gauge,
        Bytes,
        &[],
        "axum",
        "Bytes the store's table takes, allocated once at startup."
    ),
    metric!(
        STORE_OVERFLOW,
        Counter,
        Count,
        &[],
        "axum",
        "Requests a full store could not give a cell of their own: charged to a shared overflow cell, or \
         refused under [store] overflow = \"refuse\"."
    ),
    metric!(
        STORE_GROUPED,
        Counter,
        Count,
        &[],
        "axum",
        "Requests from new keys charged to their network's shared cell: the network spent its new-key budget \
         ([store] new_keys_per_network)."
    ),
    metric!(
        STORE_SWEEPS,
        Counter,
        Count,
        &[],
        "axum",
        "Sweeps of the whole store (every [store] sweep_interval)."
    ),
    metric!(
        STORE_SWEPT,
        Counter,
        Count,
        &[],
        "axum",
        "Recovered cells dropped by sweeps (the periodic one, and the bounded sweep a new key runs in a full store)."
    ),
    metric!(
        JWT_KEYS,
        Gauge,
        Count,
        &[],
        "axum",
        "Keys the token verifier holds now: a JWKS's usable keys, or 1 for a PEM key or an HMAC secret."
    ),
    metric!(
        JWT_VERIFICATIONS,
        Counter,
        Count,
        &[("result", JWT_RESULTS)],
        "jwt",
        "Tokens the verifier checked (a cached verified token or a repeated forgery is not checked again), by \
         result: verified, expired, not_yet_valid, wrong_issuer, wrong_audience, unknown_key, bad_signature, \
         malformed, not_checked (the failed-check budget had no room)."
    ),
    metric!(
        JWKS_FETCHES,
        Counter,
        Count,
        &[("result", OK_ERROR)],
        "jwt",
        "Fetches of the [jwt] jwks_url (at startup and in the background), by result; a failed refresh keeps \
         the keys in force."
    ),
    metric!(
        SERVICE_REQUESTS,
        Counter,
        Count,
        &[("result", SERVICE_RESULTS)],
        "service",
        "Lookups sent to the limit service, by result: answer, no_answer (it does not know the client), error, \
         timeout."
    ),
    metric!(
        SERVICE_CACHE,
        Counter,
        Count,
        &[("result", CACHE_RESULTS)],
        "service",
        "Request-path reads of the limit-service cache, by result: hit (a fresh entry: an answer, or a remembered \
         \"not known\" that falls through), stale (an answer past its TTL, served while a refresh runs), miss \
         (nothing usable: the route falls through to its next step, and a lookup starts)."
    ),
    metric!(
        SERVICE_CACHE_ENTRIES,
        Gauge,
        Count,
        &[],
        "service",
        "Entries the limit-service cache holds now (answers and remembered misses), at most [service] \
         max_entries."
    ),
    metric!(
        GLOBAL_DEGRADED,
        Gauge,
        Count,
        &[],
        "redis",
        "1 while the fleet gate limits locally only (its store is failing, slow or its sync task stopped), 0 \
         while fleet-wide limits apply."
    ),
    metric!(
        GLOBAL_DEGRADED_REASON,
        Gauge,
        Count,
        &[("reason", DEGRADED_REASONS)],
        "redis",
        "1 for the reason the fleet gate is local-only now (sync_error, sync_timeout, stalled, task_stopped), \
         0 for the others."
    ),
    metric!(
        GLOBAL_DEGRADED_KEYS,
        Gauge,
        Count,
        &[],
        "redis",
        "Keys limited locally only because their part of the last sync round failed (a cluster node down, an \
         error reply for their slot)."
    ),
    metric!(
        GLOBAL_FAILED_KEYS,
        Counter,
        Count,
        &[],
        "redis",
        "Key failures in sync rounds (an error reply, a value of the wrong type, a node down), summed over rounds."
    ),
    metric!(
        GLOBAL_SYNC_ROUNDS,
        Counter,
        Count,
        &[("result", OK_ERROR)],
        "redis",
        "Fleet sync rounds, by result (error: the round failed or timed out)."
    ),
    metric!(
        GLOBAL_SYNC_DURATION,
        Histogram,
        Seconds,
        &[],
        "redis",
        "Duration of successful fleet sync rounds."
    ),
    metric!(
        GLOBAL_SYNCED_KEYS,
        Gauge,
        Count,
        &[],
        "redis",
        "Keys the last successful fleet sync round exchanged with the store."
    ),
    metric!(
        GLOBAL_UNREAD_KEYS,
        Gauge,
        Count,
        &[],
        "redis",
        "Keys the last fleet sync round did not read because rounds ran long (reads rationed): each is held to its \
         fair share of the fleet budget (budget / live instances) until a round reads it."
    ),
    metric!(
        GLOBAL_HOT_KEYS,
        Gauge,
        Count,
        &[],
        "redis",
        "Active keys the last fleet sync round pushed and read: keys that reached their share of the fleet budget on \
         some instance. The others are decided locally and cost Redis nothing."
    ),
    metric!(
        GLOBAL_LIVE_INSTANCES,
        Gauge,
        Count,
        &[],
        "redis",
        "Instances in the fleet's roster as the last sync round read it; a cold key is held to budget / this."
    ),
    metric!(
        GLOBAL_UNTRACKED,
        Counter,
        Count,
        &[],
        "redis",
        "Requests whose key the fleet gate could not track (its table full): limited locally only."
    ),
];

/// The metric named `name`, if the library exports it.
///
/// ```
/// let m = ratelimit::metrics::find("ratelimit_decisions_total").unwrap();
/// assert_eq!(m.kind, ratelimit::metrics::Kind::Counter);
/// assert!(ratelimit::metrics::find("ratelimit_nope").is_none());
/// ```
pub fn find(name: &str) -> Option<&'static Metric> {
    CATALOGUE.iter().find(|m| m.name == name)
}

/// The buckets a histogram of the catalogue should use (an exporter's
/// defaults suit request latencies, not waits of seconds to a day).
///
/// ```
/// use ratelimit::metrics::{buckets, RETRY_AFTER, RETRY_AFTER_BUCKETS};
///
/// assert_eq!(buckets(RETRY_AFTER), Some(RETRY_AFTER_BUCKETS));
/// assert_eq!(buckets("ratelimit_decisions_total"), None);
/// ```
pub fn buckets(name: &str) -> Option<&'static [f64]> {
    match name {
        RETRY_AFTER => Some(RETRY_AFTER_BUCKETS),
        GLOBAL_SYNC_DURATION => Some(SYNC_DURATION_BUCKETS),
        _ => None,
    }
}

/// Describes every metric of the [`CATALOGUE`] to the installed recorder
/// (its help text and unit: the `# HELP` and `# TYPE` lines of a
/// Prometheus scrape). Call it once, after installing the recorder; calling
/// it again is harmless.
///
/// ```
/// // With no recorder installed, describing does nothing (and never fails).
/// ratelimit::metrics::describe();
/// ```
pub fn describe() {
    for m in CATALOGUE {
        match m.kind {
            Kind::Counter => ::metrics::describe_counter!(m.name, m.unit, m.help),
            Kind::Gauge => ::metrics::describe_gauge!(m.name, m.unit, m.help),
            Kind::Histogram => ::metrics::describe_histogram!(m.name, m.unit, m.help),
        }
    }
}

/// What this runtime last published of each counter: counters are
/// process-wide series, so each runtime adds what it counted since (two
/// runtimes in one process add up, and a runtime that replaces another
/// keeps the series growing), never sets a total.
#[cfg(feature = "axum")]
#[derive(Debug, Default)]
pub(crate) struct Published {
    counters: [AtomicU64; 20],
}

#[cfg(feature = "axum")]
impl Published {
    /// Adds to `counter` what `total` (this runtime's own count) grew by
    /// since the last call for `slot`. `fetch_max`: of two publishers that
    /// race, the later total wins and nothing is added twice.
    pub(crate) fn add(&self, slot: usize, total: u64, counter: ::metrics::Counter) {
        let before = self.counters[slot].fetch_max(total, Ordering::Relaxed);
        if total > before {
            counter.increment(total - before);
        }
    }
}
