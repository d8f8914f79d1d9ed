//! The request-path face of a limit service: a bounded, sharded cache that
//! answers at once and fetches in the background (see the module docs of
//! `ratelimit::service`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{LimitService, ServiceAnswer, ServiceError, ServiceErrorKind};

/// Cache settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheSettings {
    /// How long an answer is fresh.
    pub ttl: Duration,
    /// How long "no answer" is remembered.
    pub negative_ttl: Duration,
    /// How long a stale answer may still be served while refreshes fail.
    pub max_stale: Duration,
    /// Per-lookup timeout.
    pub timeout: Duration,
    /// Most keys cached.
    pub max_entries: usize,
    /// Most lookups in flight at once.
    pub max_in_flight: usize,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            ttl: crate::shared::defaults::SERVICE_TTL,
            negative_ttl: crate::shared::defaults::SERVICE_NEGATIVE_TTL,
            max_stale: Duration::from_secs(600),
            timeout: crate::shared::defaults::SERVICE_TIMEOUT,
            max_entries: crate::shared::defaults::SERVICE_MAX_ENTRIES,
            max_in_flight: 256,
        }
    }
}

crate::shared::setters::with!(CacheSettings {
    with_ttl => ttl: Duration,
    with_negative_ttl => negative_ttl: Duration,
    with_max_stale => max_stale: Duration,
    with_timeout => timeout: Duration,
    with_max_entries => max_entries: usize,
    with_max_in_flight => max_in_flight: usize,
});

struct Entry {
    answer: Option<ServiceAnswer>,
    fresh_until: Instant,
    usable_until: Instant,
}

/// Shards of the cache, each behind its own mutex: a lookup locks one
/// shard for a hash-map probe, never the whole cache.
const SHARDS: usize = 16;

/// One shard. Answers and misses are kept apart so that a flood of clients
/// the service does not know (misses: anyone can make those, with new
/// keys) can only evict other misses, never a partner's answer (which only
/// the service can create).
#[derive(Default)]
struct State {
    answers: HashMap<u64, Entry>,
    misses: HashMap<u64, Entry>,
    in_flight: HashSet<u64>,
    /// Reads of this shard: fresh, stale, nothing usable.
    reads: [u64; 3],
}

impl State {
    fn get(&self, key: u64) -> Option<&Entry> {
        self.answers.get(&key).or_else(|| self.misses.get(&key))
    }

    /// Stores `entry` within `cap` entries: a miss evicts only a miss (and
    /// is dropped when the shard holds only answers); an answer evicts a
    /// miss first, else another answer. Eviction picks an arbitrary entry,
    /// in constant time: the bound matters, not the choice.
    fn store(&mut self, key: u64, entry: Entry, cap: usize) {
        if entry.answer.is_some() {
            self.misses.remove(&key);
            if !self.answers.contains_key(&key) && self.answers.len() + self.misses.len() >= cap {
                if let Some(victim) = self.misses.keys().next().copied() {
                    self.misses.remove(&victim);
                } else if let Some(victim) = self.answers.keys().next().copied() {
                    self.answers.remove(&victim);
                }
            }
            self.answers.insert(key, entry);
        } else {
            self.answers.remove(&key);
            if !self.misses.contains_key(&key) && self.answers.len() + self.misses.len() >= cap {
                match self.misses.keys().next().copied() {
                    Some(victim) => {
                        self.misses.remove(&victim);
                    }
                    // Full of answers: keep them; the miss is not cached.
                    None => return,
                }
            }
            self.misses.insert(key, entry);
        }
    }
}

/// The request-path face of a [`LimitService`]: see the module docs.
pub struct ServiceCache<S> {
    service: Arc<S>,
    settings: CacheSettings,
    shards: Arc<[Mutex<State>]>,
    /// Lookups in flight over all shards (bounded by `max_in_flight`).
    pub(super) in_flight: Arc<AtomicUsize>,
    errors: Arc<LookupErrors>,
    counters: Arc<Counters>,
    runtime: tokio::runtime::Handle,
}

/// What the cache counts ([`ServiceCache::stats`]).
#[derive(Default)]
/// (Reads are counted in the shards, under the lock a read takes anyway:
/// no cache line shared by every request.)
struct Counters {
    answers: AtomicU64,
    no_answers: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
}

/// A snapshot of a [`ServiceCache`]'s counters (what the HTTP runtime
/// exports as `ratelimit_service_cache_total` and
/// `ratelimit_service_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CacheStats {
    /// Reads that found a fresh entry.
    pub hits: u64,
    /// Reads that found an entry past its TTL but within `max_stale`,
    /// served while a refresh runs.
    pub stale: u64,
    /// Reads that found nothing usable.
    pub misses: u64,
    /// Lookups the service answered with a limit.
    pub answers: u64,
    /// Lookups the service answered with "not known" (no limit).
    pub no_answers: u64,
    /// Lookups that failed (a refused connection or certificate, a bad
    /// answer...).
    pub errors: u64,
    /// Lookups with no answer within the timeout.
    pub timeouts: u64,
    /// Entries held now (answers and remembered misses).
    pub entries: usize,
}

impl CacheStats {
    /// Lookups that failed or timed out (what
    /// [`ServiceCache::lookup_errors`] counts).
    pub fn lookups_failed(&self) -> u64 {
        self.errors + self.timeouts
    }
}

/// Failed lookups: counted, and logged at most once per
/// [`LookupErrors::LOG_EVERY`] (a failing service fails for every key).
#[derive(Default)]
struct LookupErrors {
    count: std::sync::atomic::AtomicU64,
    /// When the last line was logged, and the failures since.
    logged: Mutex<(Option<Instant>, u64)>,
}

impl LookupErrors {
    const LOG_EVERY: Duration = Duration::from_secs(60);

    /// Counts a failed lookup (`why`: the error, which names the service's
    /// URL and never a client key) and logs it when due.
    fn record(&self, why: &dyn std::fmt::Display) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let Ok(mut logged) = self.logged.lock() else {
            return;
        };
        logged.1 += 1;
        let due = match logged.0 {
            None => true,
            Some(at) => at.elapsed() >= Self::LOG_EVERY,
        };
        if due {
            let failed = std::mem::take(&mut logged.1);
            logged.0 = Some(Instant::now());
            drop(logged);
            tracing::warn!(
                target: "ratelimit",
                failed,
                "limit service lookup failed: {why}; no answer for the client (the route falls through to its \
                 next step; retried after the negative TTL; at most one such line a minute, `failed` counts \
                 the lookups since the last)"
            );
        }
    }
}

impl<S> std::fmt::Debug for ServiceCache<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceCache")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<S: LimitService> ServiceCache<S> {
    /// A cache over `service`; fetches run on the current tokio runtime.
    /// Fails outside a runtime.
    pub fn new(service: S, settings: CacheSettings) -> Result<Self, ServiceError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            let mut err = ServiceError::of(ServiceErrorKind::Setup, "the limit service cache needs a tokio runtime");
            err.source = Some(Arc::new(e));
            err
        })?;
        Ok(ServiceCache {
            service: Arc::new(service),
            settings,
            shards: (0..SHARDS).map(|_| Mutex::new(State::default())).collect(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            errors: Arc::default(),
            counters: Arc::default(),
            runtime,
        })
    }

    /// How many lookups failed or timed out so far (a refused certificate,
    /// a refused connection, a bad answer...). Each is also logged (a
    /// `WARN` line naming the service and the reason, at most one a
    /// minute), and each leaves the client without an answer from the
    /// service for the negative TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::service::{CacheSettings, HttpLimitService, ServiceCache};
    ///
    /// // Nothing listens on port 9: the lookup fails, in the background.
    /// let service = HttpLimitService::new("http://127.0.0.1:9/v1/limits").unwrap();
    /// let cache = ServiceCache::new(service, CacheSettings::default()).unwrap();
    /// assert_eq!(cache.get(0x42), None);
    /// while cache.lookup_errors() == 0 {
    ///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    /// }
    /// assert_eq!(cache.lookup_errors(), 1);
    /// # }
    /// ```
    pub fn lookup_errors(&self) -> u64 {
        self.errors.count.load(Ordering::Relaxed)
    }

    /// Reads and lookups so far, and the entries held now (which locks
    /// each shard in turn, briefly: call it from a timer, not per request).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::service::{CacheSettings, HttpLimitService, ServiceCache};
    ///
    /// let service = HttpLimitService::new("http://127.0.0.1:9/v1/limits").unwrap();
    /// let cache = ServiceCache::new(service, CacheSettings::default()).unwrap();
    /// assert_eq!(cache.get(0x42), None);
    /// let stats = cache.stats();
    /// assert_eq!((stats.hits, stats.misses), (0, 1));
    /// # }
    /// ```
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut stats = CacheStats {
            answers: load(&c.answers),
            no_answers: load(&c.no_answers),
            errors: load(&c.errors),
            timeouts: load(&c.timeouts),
            ..CacheStats::default()
        };
        for shard in self.shards.iter() {
            if let Ok(s) = shard.lock() {
                stats.hits += s.reads[0];
                stats.stale += s.reads[1];
                stats.misses += s.reads[2];
                stats.entries += s.answers.len() + s.misses.len();
            }
        }
        stats
    }

    /// The shard of `key`, and the most entries it holds.
    fn shard(&self, key: u64) -> &Mutex<State> {
        // Keys are hashes already; fold the high bits in anyway, so a
        // service's own key scheme cannot pile keys on one shard.
        &self.shards[((key ^ (key >> 32)) as usize) % SHARDS]
    }

    fn shard_cap(&self) -> usize {
        self.settings.max_entries.div_ceil(SHARDS).max(1)
    }

    /// The cached answer for `key`, never waiting: starts a background fetch
    /// on a miss or a stale entry (at most one per key at a time).
    pub fn get(&self, key: u64) -> Option<ServiceAnswer> {
        let now = Instant::now();
        let Ok(mut state) = self.shard(key).lock() else {
            return None;
        };
        let (answer, needs_fetch) = match state.get(key) {
            Some(e) if now < e.fresh_until => {
                let answer = e.answer.clone();
                state.reads[0] += 1;
                return answer;
            }
            Some(e) if now < e.usable_until => {
                let answer = e.answer.clone();
                state.reads[1] += 1;
                (answer, true)
            }
            _ => {
                state.reads[2] += 1;
                (None, true)
            }
        };
        // Refreshing an answer may use every slot; a lookup for a key with
        // no answer (anyone can invent those) only three quarters of them,
        // so a flood of invented keys cannot starve partners' refreshes.
        let max = self.settings.max_in_flight;
        // (At least one slot reserved from two up; a single slot is shared.)
        let slots = if answer.is_some() {
            max
        } else {
            max.saturating_sub(max.div_ceil(4)).max(1)
        };
        if needs_fetch && !state.in_flight.contains(&key) && self.take_fetch_slot(slots) {
            state.in_flight.insert(key);
            // Unlocked before spawning: a runtime that has stopped drops the
            // fetch at once, on this thread, and its guard locks this shard.
            drop(state);
            self.spawn_fetch(key);
        }
        answer
    }

    /// One of the first `max` of the `max_in_flight` lookups, if one is free.
    fn take_fetch_slot(&self, max: usize) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_ok()
    }

    fn spawn_fetch(&self, key: u64) {
        /// Removes the key from `in_flight` however the fetch ends: done,
        /// panicked in the service, or dropped unrun by a stopped runtime.
        struct InFlight(Arc<[Mutex<State>]>, usize, u64, Arc<AtomicUsize>);
        impl Drop for InFlight {
            fn drop(&mut self) {
                if let Ok(mut state) = self.0[self.1].lock() {
                    state.in_flight.remove(&self.2);
                }
                self.3.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let index = ((key ^ (key >> 32)) as usize) % SHARDS;
        let guard = InFlight(Arc::clone(&self.shards), index, key, Arc::clone(&self.in_flight));
        let service = Arc::clone(&self.service);
        let shards = Arc::clone(&self.shards);
        let cap = self.shard_cap();
        let settings = self.settings;
        let errors = Arc::clone(&self.errors);
        let counters = Arc::clone(&self.counters);
        self.runtime.spawn(async move {
            let result = tokio::time::timeout(settings.timeout, service.lookup(key)).await;
            let counter = match &result {
                Ok(Err(e)) => {
                    errors.record(e);
                    &counters.errors
                }
                Err(_) => {
                    errors.record(&format_args!("no answer within {:?}", settings.timeout));
                    &counters.timeouts
                }
                Ok(Ok(Some(_))) => &counters.answers,
                Ok(Ok(None)) => &counters.no_answers,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let now = Instant::now();
            // `guard` (moved in) clears `in_flight` when this future is
            // dropped, after the answer below is stored and the lock released.
            let _guard = &guard;
            let Ok(mut state) = shards[index].lock() else {
                return;
            };
            let entry = match result {
                Ok(Ok(Some(answer))) => Entry {
                    answer: Some(answer),
                    fresh_until: now + settings.ttl,
                    usable_until: now + settings.ttl + settings.max_stale,
                },
                Ok(Ok(None)) => Entry {
                    answer: None,
                    fresh_until: now + settings.negative_ttl,
                    usable_until: now + settings.negative_ttl,
                },
                // An error or a timeout: keep a stale answer (it stays usable
                // until its own limit) but retry only after the negative TTL.
                Ok(Err(_)) | Err(_) => match state.get(key) {
                    Some(old) if old.answer.is_some() && now < old.usable_until => Entry {
                        answer: old.answer.clone(),
                        fresh_until: now + settings.negative_ttl,
                        usable_until: old.usable_until,
                    },
                    _ => Entry {
                        answer: None,
                        fresh_until: now + settings.negative_ttl,
                        usable_until: now + settings.negative_ttl,
                    },
                },
            };
            state.store(key, entry, cap);
        });
    }
}
