//! The runtime's gauges and counters that are not per request: the store's
//! occupancy, the limit service's cache, the verifier's keys. Read from the
//! parts' own statistics (atomics they keep anyway) once a second, and on
//! demand ([`RateLimit::publish_metrics`](super::RateLimit::publish_metrics)),
//! so the request path never touches a metric for them.

use std::sync::{Arc, Weak};
use std::time::Duration;

#[cfg(feature = "jwt")]
use crate::shared::metrics::{JWT_KEYS, JWT_VERIFICATIONS};
#[cfg(feature = "service")]
use crate::shared::metrics::{SERVICE_CACHE, SERVICE_CACHE_ENTRIES, SERVICE_REQUESTS};
use crate::shared::metrics::{
    STORE_GROUPED, STORE_KEYS, STORE_MAX_KEYS, STORE_MEMORY, STORE_OVERFLOW, STORE_SWEEPS, STORE_SWEPT,
};

use super::runtime::Runtime;

/// How often the background task publishes.
const EVERY: Duration = Duration::from_secs(1);

/// Sets every series from the parts' statistics now. Gauges are set (the
/// last runtime to publish wins: run one runtime per process, as the
/// docs say); counters are added to.
pub(crate) fn publish(rt: &Runtime) {
    let p = &rt.published;
    let store = rt.limiter.store().stats();
    metrics::gauge!(STORE_KEYS).set(store.keys as f64);
    metrics::gauge!(STORE_MAX_KEYS).set(store.max_keys as f64);
    metrics::gauge!(STORE_MEMORY).set(store.memory_bytes as f64);
    p.add(0, store.overflowed, metrics::counter!(STORE_OVERFLOW));
    p.add(1, store.grouped, metrics::counter!(STORE_GROUPED));
    p.add(2, store.sweeps, metrics::counter!(STORE_SWEEPS));
    p.add(3, store.swept, metrics::counter!(STORE_SWEPT));
    #[cfg(feature = "jwt")]
    if let Some(jwt) = rt.tokens.verifier() {
        metrics::gauge!(JWT_KEYS).set(jwt.key_count() as f64);
        for (i, (result, n)) in jwt.verifications().into_iter().enumerate() {
            p.add(11 + i, n, metrics::counter!(JWT_VERIFICATIONS, "result" => result));
        }
    }
    #[cfg(feature = "service")]
    if let Some(cache) = rt.service.cache() {
        let s = cache.stats();
        for (i, (result, n)) in [("hit", s.hits), ("stale", s.stale), ("miss", s.misses)]
            .into_iter()
            .enumerate()
        {
            p.add(4 + i, n, metrics::counter!(SERVICE_CACHE, "result" => result));
        }
        for (i, (result, n)) in [
            ("answer", s.answers),
            ("no_answer", s.no_answers),
            ("error", s.errors),
            ("timeout", s.timeouts),
        ]
        .into_iter()
        .enumerate()
        {
            p.add(7 + i, n, metrics::counter!(SERVICE_REQUESTS, "result" => result));
        }
        metrics::gauge!(SERVICE_CACHE_ENTRIES).set(s.entries as f64);
    }
}

/// Publishes now, then every second until the runtime is dropped (on the
/// current tokio runtime; without one, only now).
pub(crate) fn spawn(rt: &Arc<Runtime>) {
    publish(rt);
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let weak: Weak<Runtime> = Arc::downgrade(rt);
    handle.spawn(async move {
        let mut ticker = tokio::time::interval(EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            match weak.upgrade() {
                Some(rt) => publish(&rt),
                None => return,
            }
        }
    });
}
