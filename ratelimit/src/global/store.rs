//! Where fleet totals live: the [`GlobalStore`] trait, and an in-process
//! implementation for tests and single-host setups.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One key's part of a sync round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncItem {
    /// The route's cell namespace.
    pub route: u32,
    /// The key's fleet id: a keyed hash, the same on every instance, never
    /// the raw client value.
    pub key: u64,
    /// The epoch the delta belongs to (and whose totals are pulled).
    pub epoch: u64,
    /// Requests (cost units) this instance admitted and has not pushed.
    pub delta: u64,
    /// Whether to pull the totals of `epoch` and `epoch - 1`.
    pub pull: bool,
}

/// The fleet's totals of one key, as pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Totals {
    /// The totals of the item's epoch and the one before.
    Known {
        /// The previous epoch's total.
        previous: u64,
        /// This epoch's total (including this round's push).
        current: u64,
    },
    /// Not pulled, or the store answered something unusable for this key
    /// (the gate keeps what it had).
    Unknown,
}

/// What one item's push and pull came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemResult {
    /// The delta reached the store (if the push failed for this key alone,
    /// it is not retried: see `docs/global.md`).
    pub pushed: bool,
    /// The pulled totals.
    pub totals: Totals,
}

/// Why a whole sync round failed (the store unreachable, slow, or talking
/// nonsense). The gate goes local-only until a round succeeds.
#[derive(Debug, Clone)]
pub struct GlobalError {
    message: String,
    unsent: bool,
}

impl GlobalError {
    /// A failure after which some of the round may have been applied (a
    /// timeout, an error mid-way): the round's deltas are never sent again.
    pub fn new(message: impl Into<String>) -> GlobalError {
        GlobalError {
            message: message.into(),
            unsent: false,
        }
    }

    /// A failure before anything was sent (no connection): the round's
    /// deltas are kept for the next round, which cannot count them twice.
    pub fn unsent(message: impl Into<String>) -> GlobalError {
        GlobalError {
            message: message.into(),
            unsent: true,
        }
    }

    /// Whether nothing of the round reached the store.
    pub fn is_unsent(&self) -> bool {
        self.unsent
    }
}

impl fmt::Display for GlobalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GlobalError {}

/// A shared store of per-key, per-epoch counters: Redis in production
/// ([`RedisStore`](super::RedisStore)), [`MemoryGlobalStore`] in tests.
///
/// # Contract
///
/// `sync` adds each item's `delta` to the counter of (`route`, `key`,
/// `epoch`), makes that counter expire after `ttl`, and for items with
/// `pull` returns the counters of `epoch` and `epoch - 1`, in item order.
/// It is called by one sync loop per instance, never concurrently with
/// itself, and never on the request path. A round that fails as a whole
/// returns `Err`; a key whose counter holds garbage gets
/// `pushed: false` / `Totals::Unknown` and must not fail the round.
pub trait GlobalStore: Send + Sync + 'static {
    /// Pushes and pulls one round.
    fn sync(
        &self,
        items: &[SyncItem],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<ItemResult>, GlobalError>> + Send;
}

/// A [`GlobalStore`] in this process's memory, shared by clones: for tests,
/// and for several gates in one process. Counters do not expire (the test
/// decides how long it lives).
#[derive(Debug, Clone, Default)]
pub struct MemoryGlobalStore {
    counters: Arc<Mutex<Counters>>,
}

/// Counters by (route, key, epoch).
type Counters = HashMap<(u32, u64, u64), u64>;

impl MemoryGlobalStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counter of (route, key, epoch).
    pub fn total(&self, route: u32, key: u64, epoch: u64) -> u64 {
        self.counters
            .lock()
            .map(|c| c.get(&(route, key, epoch)).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

impl GlobalStore for MemoryGlobalStore {
    async fn sync(&self, items: &[SyncItem], _ttl: Duration) -> Result<Vec<ItemResult>, GlobalError> {
        let mut counters = self
            .counters
            .lock()
            .map_err(|_| GlobalError::unsent("memory store poisoned"))?;
        Ok(items
            .iter()
            .map(|i| {
                let current = counters.entry((i.route, i.key, i.epoch)).or_insert(0);
                *current = current.saturating_add(i.delta);
                let current = *current;
                let totals = if i.pull {
                    let previous = i
                        .epoch
                        .checked_sub(1)
                        .and_then(|e| counters.get(&(i.route, i.key, e)).copied())
                        .unwrap_or(0);
                    Totals::Known { previous, current }
                } else {
                    Totals::Unknown
                };
                ItemResult { pushed: true, totals }
            })
            .collect())
    }
}
