//! What one sync round did, as the round reports it ([`SyncReport`]).

use std::time::Duration;

/// What one sync round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Keys in the round.
    pub keys: usize,
    /// Units pushed and confirmed.
    pub pushed: u64,
    /// Keys whose totals were refreshed.
    pub pulled: usize,
    /// Keys with a failed operation (an error reply such as OOM, READONLY,
    /// MISCONF, NOPERM or WRONGTYPE; an unusable reply; a cluster node
    /// down): limited locally only until a round succeeds for them.
    pub failed_keys: usize,
    /// Redis operations in the round.
    pub operations: usize,
    /// Active keys not read this round: rounds ran long (a flood of keys),
    /// so reads are rationed, keys refused by the fleet and then the
    /// busiest first. Their closed sums come from the totals their pushes
    /// answered and those last read, and until a round reads them they are
    /// held to their fair share of the budget (budget / live instances).
    pub unread_keys: usize,
    /// Active keys pushed and read this round (see the module docs).
    pub hot_keys: usize,
    /// Active keys decided locally, held to their share of the budget:
    /// neither pushed nor read.
    pub cold_keys: usize,
    /// How long the store took to answer, leaving out the round's own work
    /// done while the reply was on the wire: what rations the next round's
    /// reads when it passes half the sync interval.
    pub store_time: Duration,
}
