//! Where fleet totals live: the [`FleetStore`] trait, and an in-process
//! implementation for tests and single-host setups.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One key's counters in one epoch: a Redis hash, one field per slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Counter {
    /// The route's cell namespace.
    pub route: u32,
    /// The key's fleet id: a keyed hash, the same on every instance, never
    /// the raw client value.
    pub key: u64,
    /// The epoch (a window-long group of slices).
    pub epoch: u64,
}

/// One operation of a sync round.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyncOp {
    /// Add `delta` units to slice `slice` of `counter`; with `expire`, make
    /// the counter expire `ttl` after now (once per counter is enough: the
    /// TTL covers the epoch and the window after it).
    Add {
        /// The counter.
        counter: Counter,
        /// The slice within the epoch.
        slice: u32,
        /// Units this instance admitted and has not pushed.
        delta: u64,
        /// Set the counter's TTL.
        expire: bool,
    },
    /// Read slices `slices` of `counter` (a missing counter or slice reads 0).
    Read {
        /// The counter.
        counter: Counter,
        /// The slices within the epoch, in order.
        slices: Range<u32>,
    },
    /// Append fleet ids to the list `counter` (the fleet's hot keys of an
    /// epoch); with `expire`, make the list expire `ttl` after now. Answers
    /// [`OpResult::Added`] with the list's length.
    Append {
        /// The list.
        counter: Counter,
        /// The ids, in order.
        ids: Vec<u64>,
        /// Set the list's TTL.
        expire: bool,
    },
    /// Read the list `counter` from position `from` on (a missing list
    /// reads empty). Answers [`OpResult::Read`] with the ids.
    ReadList {
        /// The list.
        counter: Counter,
        /// The first position to read (0 is the first id appended).
        from: u64,
    },
}

impl SyncOp {
    /// The counter the operation is on.
    pub fn counter(&self) -> &Counter {
        match self {
            SyncOp::Add { counter, .. }
            | SyncOp::Read { counter, .. }
            | SyncOp::Append { counter, .. }
            | SyncOp::ReadList { counter, .. } => counter,
        }
    }
}

/// What one operation came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// The delta was added; the slice's total after it, when the store
    /// says (Redis's `HINCRBY` does), saves a read.
    Added(Option<u64>),
    /// The slices read, in order.
    Read(Vec<u64>),
    /// The operation failed for this key (an error reply such as OOM,
    /// READONLY, MISCONF, NOPERM or WRONGTYPE; an unusable reply; its node
    /// unreachable). For an `Add`, `error.is_unsent()` says the delta was
    /// certainly not applied.
    Failed(FleetError),
}

/// Why a sync round or one of its operations failed.
#[derive(Clone)]
pub struct FleetError {
    message: Arc<str>,
    unsent: bool,
    timed_out: bool,
}

crate::engine::errors::debug_as_display!(FleetError);

impl FleetError {
    /// A failure after which the work may have been applied (a timeout, an
    /// error mid-way): deltas are never sent again.
    pub fn new(message: impl Into<String>) -> FleetError {
        FleetError {
            message: message.into().into(),
            unsent: false,
            timed_out: false,
        }
    }

    /// A failure that certainly applied nothing (no connection, a refused
    /// command): deltas may be sent again without being counted twice.
    pub fn unsent(message: impl Into<String>) -> FleetError {
        FleetError {
            message: message.into().into(),
            unsent: true,
            timed_out: false,
        }
    }

    /// Whether nothing was applied.
    pub fn is_unsent(&self) -> bool {
        self.unsent
    }

    /// The same error, marked as the store being too slow (no reply, or no
    /// connection, in time) rather than refusing: the gate reports it as
    /// `sync_timeout`, not `sync_error`.
    ///
    /// ```
    /// use ratelimit::fleet::FleetError;
    ///
    /// let e = FleetError::new("redis: no reply within 250ms").timed_out();
    /// assert!(e.is_timeout() && !FleetError::new("redis: OOM").is_timeout());
    /// ```
    #[must_use]
    pub fn timed_out(self) -> FleetError {
        FleetError {
            timed_out: true,
            ..self
        }
    }

    /// Whether the store was too slow rather than refusing.
    pub fn is_timeout(&self) -> bool {
        self.timed_out
    }

    /// The same error, marked as a timeout when redis-rs says the server
    /// was too slow (including a connect timeout, an I/O error of kind
    /// `TimedOut`).
    pub(crate) fn timed_out_if(self, cause: &::redis::RedisError) -> FleetError {
        if cause.is_timeout() {
            self.timed_out()
        } else {
            self
        }
    }

    /// The same error, as one after which work may have been applied.
    pub(crate) fn maybe_applied(self) -> FleetError {
        FleetError { unsent: false, ..self }
    }
}

impl PartialEq for FleetError {
    fn eq(&self, other: &Self) -> bool {
        self.unsent == other.unsent && self.message == other.message
    }
}

impl Eq for FleetError {}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FleetError {}

/// A shared store of per-key, per-epoch, per-slice counters: Redis in
/// production ([`RedisStore`](super::RedisStore)), [`MemoryFleetStore`] in
/// tests.
///
/// # Contract
///
/// `sync` applies `ops` (per counter, in order) and returns one result per
/// operation, in order. A counter that gets an `Add` with `expire` expires
/// `ttl` after the round. It is called by one sync loop per instance, never concurrently
/// with itself, and never on the request path. A round that could do nothing
/// at all (no connection) returns `Err`; an operation that fails on its own
/// (an error reply, a key of the wrong type, a cluster node down) returns
/// [`OpResult::Failed`] and must not fail the others.
///
/// A round polls `sync` once, does work of its own that waits on nothing
/// the store answers, and only then awaits the rest: a store whose first
/// poll sends its requests (to tasks of its own, or to the socket) has
/// them answered meanwhile. What must make progress before anything is
/// sent (a connection) goes in [`ready`](Self::ready), awaited first.
pub trait FleetStore: Send + Sync + 'static {
    /// Pushes and pulls one round.
    fn sync(&self, ops: &[SyncOp], ttl: Duration) -> impl Future<Output = Result<Vec<OpResult>, FleetError>> + Send;

    /// Gets the store ready for a round (connects, if it is not
    /// connected), before the round's `sync`. An error fails the round, as
    /// an error of `sync` would. By default, ready at once.
    ///
    /// ```
    /// use ratelimit::fleet::{FleetStore, MemoryFleetStore};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// assert!(MemoryFleetStore::new().ready().await.is_ok());
    /// # });
    /// ```
    fn ready(&self) -> impl Future<Output = Result<(), FleetError>> + Send {
        std::future::ready(Ok(()))
    }
}

/// A [`FleetStore`] in this process's memory, shared by clones: for tests,
/// and for several gates in one process. Counters do not expire (the test
/// decides how long it lives). [`fail_writes`](Self::fail_writes) makes it
/// refuse every `Add`, as a Redis out of memory does.
#[derive(Debug, Clone, Default)]
pub struct MemoryFleetStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    counters: HashMap<(Counter, u32), u64>,
    lists: HashMap<Counter, Vec<u64>>,
    refuse_writes: Option<String>,
}

impl MemoryFleetStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counter of one slice.
    pub fn total(&self, counter: Counter, slice: u32) -> u64 {
        self.inner
            .lock()
            .map(|c| c.counters.get(&(counter, slice)).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// From now on, every `Add` fails with this error reply (`None`: they
    /// succeed again).
    pub fn fail_writes(&self, error: Option<&str>) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.refuse_writes = error.map(str::to_owned);
        }
    }
}

impl FleetStore for MemoryFleetStore {
    async fn sync(&self, ops: &[SyncOp], _ttl: Duration) -> Result<Vec<OpResult>, FleetError> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| FleetError::unsent("memory store poisoned"))?;
        let inner = &mut *inner;
        Ok(ops
            .iter()
            .map(|op| match op {
                SyncOp::Add {
                    counter, slice, delta, ..
                } => match &inner.refuse_writes {
                    Some(e) => OpResult::Failed(FleetError::unsent(e.clone())),
                    None => {
                        let c = inner.counters.entry((*counter, *slice)).or_insert(0);
                        *c = c.saturating_add(*delta);
                        OpResult::Added(Some(*c))
                    }
                },
                SyncOp::Read { counter, slices } => OpResult::Read(
                    slices
                        .clone()
                        .map(|s| inner.counters.get(&(*counter, s)).copied().unwrap_or(0))
                        .collect(),
                ),
                SyncOp::Append { counter, ids, .. } => match &inner.refuse_writes {
                    Some(e) => OpResult::Failed(FleetError::unsent(e.clone())),
                    None => {
                        let list = inner.lists.entry(*counter).or_default();
                        list.extend_from_slice(ids);
                        OpResult::Added(Some(list.len() as u64))
                    }
                },
                SyncOp::ReadList { counter, from } => OpResult::Read(
                    inner
                        .lists
                        .get(counter)
                        .map(|l| {
                            l.iter()
                                .skip(usize::try_from(*from).unwrap_or(usize::MAX))
                                .copied()
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
            })
            .collect())
    }
}
