//! A group's budget of new keys (the client's network): the cells that
//! count what a group and its subgroups brought into the table, and the
//! cell a group's keys share once it is spent (see the module docs,
//! "Groups").

use super::super::{CellKey, Placement, Store};
use super::{mix, MemoryStore};
use crate::engine::gcra::{self, Write};
use crate::Quota;

/// Tags that turn a group's hash into its two cells' keys.
const GROUP_BUDGET_TAG: u64 = 0x6275_6467_6574_2d31; // "budget-1"
const GROUP_SHARED_TAG: u64 = 0x7368_6172_6564_2d31; // "shared-1"
const SUBGROUP_BUDGET_TAG: u64 = 0x7375_6267_7270_2d31; // "subgrp-1"

/// The cell a group's keys share on `route` once its budget is spent.
///
/// The route is part of the hash: the table finds cells by hash alone, so
/// without it one network's shared cell would be the same cell on every
/// route, charged with each route's quota (a spent strict route would deny
/// the network's new clients on all routes).
pub(super) fn group_cell(group: u64, route: u32) -> CellKey {
    CellKey::new(mix(mix(group ^ GROUP_SHARED_TAG) ^ u64::from(route)), route)
}

/// The cell counting the new keys a subgroup of `group` brought in.
fn subgroup_budget_cell(group: u64, subgroup: u32) -> CellKey {
    CellKey::new(mix(mix(group ^ SUBGROUP_BUDGET_TAG) ^ u64::from(subgroup)), 0)
}

/// A subgroup's share of its group's budget of new keys: a quarter of its
/// rate and burst (rounded up), so one subgroup leaves the others of its
/// group at least three quarters.
pub(super) fn subgroup_share(budget: &Quota) -> Quota {
    let count = budget.count().div_ceil(4).max(1);
    Quota::new(count, budget.period())
        .map(|q| q.with_burst(budget.burst().div_ceil(4).max(1)))
        .unwrap_or(*budget)
}

/// The cell counting the new keys a group brought in. (A group given to
/// the store is counted whatever the routes of its keys; the groups that
/// [`Limiter::grouped_cell_key`](crate::Limiter::grouped_cell_key) makes
/// hash the route in, so through it the budget is per network and route.)
fn group_budget_cell(group: u64) -> CellKey {
    CellKey::new(mix(group ^ GROUP_BUDGET_TAG), 0)
}

impl MemoryStore {
    /// Whether `key`'s group may bring one more new key into the store
    /// (spending a unit of its budget). A budget cell that finds no room is
    /// no reason to refuse: the key's own insert meets the same full store.
    ///
    /// A key in a subgroup spends its subgroup's share first, and its group
    /// only when the share admitted it (the share is handed back when the
    /// group refuses): a subgroup is charged to its group only for keys
    /// its own budget let in, so it spends at most its share of the group.
    pub(super) fn admits_new_key(&self, key: CellKey, now: u64, budget: &Quota) -> bool {
        let spend = |cell: CellKey, budget: &Quota| {
            let spent = self.place(cell, now, None, |stored| {
                let (decision, write) = gcra::decide(stored, now, budget, 1);
                let write = match write {
                    Write::Keep => None,
                    Write::Store(tat) => Some(tat),
                };
                (decision.is_denied(), write)
            });
            !matches!(spent, Some((true, Placement::Own)))
        };
        let share = match (key.subgroup(), &self.subgroup_budget) {
            (0, _) | (_, None) => None,
            (subgroup, Some(share)) => {
                let cell = subgroup_budget_cell(key.group(), subgroup);
                if !spend(cell, share) {
                    return false;
                }
                Some((cell, share))
            }
        };
        if spend(group_budget_cell(key.group()), budget) {
            return true;
        }
        if let Some((cell, share)) = share {
            let _ = self.update(cell, now, |stored| ((), gcra::refund(stored, now, share, 1, now)));
        }
        false
    }
}
