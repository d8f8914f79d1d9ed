//! Where per-key state lives: the `Store` trait and the embedded `MemoryStore`.

mod memory;
mod shard;

pub(crate) use memory::{mix, placed_cell};
pub use memory::{MemoryStore, MemoryStoreBuilder, OverflowPolicy, StoreConfigError, StoreStats};

/// The identity of one rate-limit cell: a keyed 64-bit hash of (route, key),
/// the route it belongs to, and optionally the group of keys it belongs to
/// (the client's network), which bounds how many new keys one group brings
/// into a store and spreads overflow by group.
///
/// Stores only ever see this hash, never the client's raw value, so raw
/// values are never stored; [`Limiter`](crate::Limiter) seeds the hash
/// randomly per limiter, so clients cannot aim collisions at a store.
///
/// ```
/// use ratelimit::CellKey;
///
/// let k = CellKey::new(0xfeed, 3);
/// assert_eq!((k.hash(), k.route()), (0xfeed, 3));
/// assert_eq!(CellKey::new(0, 3).hash(), 1, "0 is reserved for empty slots");
/// assert_eq!(k.group(), 0, "no group");
/// assert_eq!(k.in_group(0xbeef).group(), 0xbeef);
/// assert_eq!(k.in_group(0xbeef).in_subgroup(7).subgroup(), 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CellKey {
    hash: u64,
    route: u32,
    /// The subgroup within `group` (a subnet of the network); 0: none.
    /// 32 bits keep the key at 24 bytes; it is only ever used with `group`.
    subgroup: u32,
    group: u64,
}

impl CellKey {
    /// A cell key from a hash and a route. A hash of 0 (which stores may use
    /// to mark an empty slot) is folded onto 1.
    #[inline]
    pub const fn new(hash: u64, route: u32) -> Self {
        let hash = if hash == 0 { 1 } else { hash };
        CellKey {
            hash,
            route,
            subgroup: 0,
            group: 0,
        }
    }

    /// This cell, as a member of `group`: a keyed hash of what the keys of
    /// one group share (the client's network, say), seeded like the key's
    /// own hash so clients cannot aim at it. `0` means no group. See
    /// [`MemoryStoreBuilder::new_keys_per_group`] for what a store does
    /// with it.
    #[inline]
    #[must_use]
    pub const fn in_group(mut self, group: u64) -> Self {
        self.group = group;
        self
    }

    /// This cell, as a member of `subgroup` within its group (a subnet of
    /// the client's network, say): a keyed hash, `0` for none. With a
    /// group budget, a subgroup may bring in at most a quarter of its
    /// group's new keys (see
    /// [`MemoryStoreBuilder::new_keys_per_group`]).
    #[inline]
    #[must_use]
    pub const fn in_subgroup(mut self, subgroup: u32) -> Self {
        self.subgroup = subgroup;
        self
    }

    /// The subgroup this key belongs to within its group (`0`: none).
    #[inline]
    pub const fn subgroup(&self) -> u32 {
        self.subgroup
    }

    /// The group this key belongs to (`0`: none).
    #[inline]
    pub const fn group(&self) -> u64 {
        self.group
    }

    /// The keyed hash of (route, key). Never 0.
    #[inline]
    pub const fn hash(&self) -> u64 {
        self.hash
    }

    /// The route the key belongs to; selects the overflow cell.
    #[inline]
    pub const fn route(&self) -> u32 {
        self.route
    }
}

/// Where a request was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// The key's own cell.
    Own,
    /// A shared overflow cell (one of many, picked by the key's group, or
    /// by the key when it has none): the store was full of live keys.
    Overflow,
    /// The shared cell of the key's group on its route: the group had
    /// already brought its budget of new keys into the store.
    Group,
}

/// Storage for GCRA cells, one theoretical arrival time (TAT) per key.
///
/// # Contract
///
/// * [`update`](Store::update) calls `f` with the key's stored TAT (0 for a key
///   that has no cell: fully recovered) and stores what `f` returns (never
///   more than `u64::MAX - 1`), as one atomic step per key: two concurrent updates of a key never both act on
///   the same old TAT. `f` may be called more than once (compare-and-swap
///   retries); only its last result counts.
/// * A store may drop a cell only when its TAT is `<= now` (fully recovered,
///   so dropping it gives the client nothing it did not already have).
/// * A store that cannot hold a new key must not admit it unlimited: it
///   charges it to a shared overflow cell (returning
///   [`Placement::Overflow`]) or refuses it (returning `None`).
/// * A store may bound the new keys of one [group](CellKey::group) and
///   charge a group's further new keys to a cell the group shares
///   (returning [`Placement::Group`]); a store may also ignore groups.
/// * Updates are called on the request path: they must not block on I/O.
pub trait Store: Send + Sync {
    /// Atomically applies `f` to the cell for `key`. `f` returns a value and,
    /// if the cell must change, the new TAT.
    ///
    /// Returns `None` when the key has no cell and the store refuses new keys.
    fn update<T, F>(&self, key: CellKey, now: u64, f: F) -> Option<(T, Placement)>
    where
        F: FnMut(u64) -> (T, Option<u64>);

    /// Applies `f` to the shared cell a charge of `key` was placed in
    /// ([`Placement::Overflow`] or [`Placement::Group`], as
    /// [`update`](Store::update) reported it), never making a cell: how a
    /// refund finds a charge that did not go to the key's own cell. `None`
    /// when the store has no such cell (the default: a store without
    /// shared cells), and for [`Placement::Own`].
    fn update_shared<T, F>(&self, key: CellKey, placement: Placement, now: u64, f: F) -> Option<T>
    where
        F: FnMut(u64) -> (T, Option<u64>),
    {
        let _ = (key, placement, now, f);
        None
    }

    /// A hint that `key`'s cell is about to be updated: a store may start
    /// loading it, so that the misses of several cells a request is about
    /// to update ([`Limiter::check_all`](crate::Limiter::check_all), the
    /// fleet gate's two tables) overlap. A single check does not call it:
    /// its cell's address does not depend on the clock read before the
    /// update, so the CPU starts that load early anyway, and an extra load
    /// measured slower there. The default does nothing.
    #[inline]
    fn prefetch(&self, key: CellKey) {
        let _ = key;
    }

    /// Drops cells that are fully recovered (TAT `<= now`); returns how many.
    fn sweep(&self, now: u64) -> usize;

    /// How many independent parts [`sweep_part`](Store::sweep_part) can sweep
    /// one at a time, so a background sweeper can yield between them.
    fn sweep_parts(&self) -> usize {
        1
    }

    /// Sweeps part `part` (`< sweep_parts()`) only; returns how many cells
    /// were dropped.
    fn sweep_part(&self, part: usize, now: u64) -> usize {
        if part == 0 {
            self.sweep(now)
        } else {
            0
        }
    }

    /// The number of cells held: live ones and recovered ones not yet swept
    /// (a snapshot under concurrency).
    fn len(&self) -> usize;

    /// Whether the store holds no cells.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
