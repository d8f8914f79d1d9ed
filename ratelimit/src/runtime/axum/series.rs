//! Metric series, bounded: labels are the route and the tier (a profile
//! name from the configuration), never the client, and past a bound a pair
//! is counted under tier `"other"`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use metrics::{Counter, Gauge, Histogram};

use crate::shared::metrics::{CONCURRENCY_REJECTED, DECISIONS, IN_FLIGHT, RETRY_AFTER};

/// Distinct (route, tier) pairs with their own series; past this, a pair is
/// counted under tier `"other"`. Tiers are profile names (operator-defined),
/// so this only guards against a pathological configuration.
const MAX_SERIES: usize = 1024;

/// Metric handles of one (route, tier).
#[derive(Debug)]
pub(crate) struct Series {
    pub(crate) allowed: Counter,
    pub(crate) rejected: Counter,
    pub(crate) shadow_rejected: Counter,
    pub(crate) retry_after: Histogram,
    /// Of `rejected`, those its requests in flight refused.
    pub(crate) concurrency_rejected: Counter,
    /// Requests holding a permit now.
    pub(crate) in_flight: Gauge,
}

impl Series {
    fn register(route: &str, tier: String) -> Series {
        let labels = [("route", route.to_owned()), ("tier", tier)];
        let decision = |d: &'static str| {
            let [route, tier] = labels.clone();
            metrics::counter!(DECISIONS, &[route, tier, ("decision", d.to_owned())])
        };
        Series {
            allowed: decision("allowed"),
            rejected: decision("rejected"),
            shadow_rejected: decision("shadow_rejected"),
            retry_after: metrics::histogram!(RETRY_AFTER, &labels),
            concurrency_rejected: metrics::counter!(CONCURRENCY_REJECTED, &labels),
            in_flight: metrics::gauge!(IN_FLIGHT, &labels),
        }
    }
}

/// The metric handles of one `#[rate_limit]` route, in a `static` the
/// attribute generates: a few (tier, handles) slots, each filled once, so
/// the request path finds its handles with an atomic load or two instead of
/// a map lookup. Metrics are process-wide (one recorder), so sharing them
/// between runtimes is right. Tiers beyond the slots use the runtime's map.
#[derive(Debug)]
pub struct RouteSeries {
    slots: [OnceLock<(Option<&'static str>, Series)>; 4],
}

impl RouteSeries {
    /// An empty cache.
    #[allow(clippy::new_without_default)] // only ever built in a `static`
    pub const fn new() -> RouteSeries {
        RouteSeries {
            slots: [const { OnceLock::new() }; 4],
        }
    }

    pub(crate) fn with(
        &self,
        fallback: &Metrics,
        route_id: u32,
        route: &str,
        tier: Option<&'static str>,
        f: impl FnOnce(&Series),
    ) {
        for slot in &self.slots {
            let (t, s) = match slot.get() {
                Some(entry) => entry,
                None => slot.get_or_init(|| {
                    let label = tier.unwrap_or("custom").to_owned();
                    (tier, Series::register(route, label))
                }),
            };
            if same_tier(*t, tier) {
                f(s);
                return;
            }
        }
        fallback.with(route_id, route, tier, f);
    }
}

type Tiers = Vec<(Option<&'static str>, Arc<Series>)>;

/// Registered handles by route id, then tier, so the request path looks a
/// handle up instead of building labels (which allocates). Handles are
/// registered with the recorder installed at the time: install yours before
/// the first request.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    series: ArcSwap<HashMap<u32, Tiers, RouteIdHasher>>,
    /// The series every further (route, tier) shares once the map is full.
    full: OnceLock<Series>,
}

/// Route ids are already hashes of the names: use them as they are.
#[derive(Debug, Default, Clone, Copy)]
struct RouteIdHasher;

impl std::hash::BuildHasher for RouteIdHasher {
    type Hasher = RouteIdHash;
    fn build_hasher(&self) -> RouteIdHash {
        RouteIdHash(0)
    }
}

#[derive(Debug)]
struct RouteIdHash(u64);

impl std::hash::Hasher for RouteIdHash {
    fn finish(&self) -> u64 {
        // Spread the 32-bit id over the high bits hashbrown uses for tags.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

/// Interned names (`limits::intern`) are equal when their addresses are;
/// the text is compared only when they differ.
fn same_tier(a: Option<&'static str>, b: Option<&'static str>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => std::ptr::eq(a, b) || a == b,
        _ => false,
    }
}

impl Metrics {
    /// Runs `f` with the series of (route, tier), registering it on first use.
    pub(crate) fn with(&self, route_id: u32, route: &str, tier: Option<&'static str>, f: impl FnOnce(&Series)) {
        {
            let map = self.series.load();
            if let Some(tiers) = map.get(&route_id) {
                if let Some((_, s)) = tiers.iter().find(|(t, _)| same_tier(*t, tier)) {
                    f(s);
                    return;
                }
            }
        }
        if self.full.get().is_some() {
            // Past the bound: every new (route, tier) shares one series.
            if let Some(other) = self.full.get() {
                f(other);
            }
            return;
        }
        let mut created = None;
        self.series.rcu(|map| {
            let mut map = HashMap::clone(map);
            let total: usize = map.values().map(Vec::len).sum();
            let full = total >= MAX_SERIES;
            let tier_label = if full {
                "other".to_owned()
            } else {
                tier.unwrap_or("custom").to_owned()
            };
            let s = Arc::new(Series::register(route, tier_label));
            if full {
                let _ = self.full.set(Series::register("other", "other".to_owned()));
            } else {
                let tiers = map.entry(route_id).or_default();
                if !tiers.iter().any(|(t, _)| same_tier(*t, tier)) {
                    tiers.push((tier, Arc::clone(&s)));
                }
            }
            created = Some(s);
            map
        });
        if let Some(s) = created {
            f(&s);
        }
    }
}
