//! The GCRA decision: pure integer arithmetic on nanoseconds.
//!
//! One stored value per key, its theoretical arrival time (TAT). With
//! emission interval `T` and burst `b`, the tolerance is `tau = T * (b - 1)`.
//! For cost `n` at time `t`:
//!
//! ```text
//! tat = max(stored, t);  new = tat + n*T
//! admit iff new - t <= tau + T   (= b*T, the bucket's capacity in time)
//! ```
//!
//! All intermediate values are `u128`, so nothing overflows, whatever the
//! inputs. A TAT that would not fit below [`MAX_TAT`] is never stored: such a
//! request is denied, so time near the end of `u64` cannot admit everything.
//!
//! A denial never writes. In particular there is no "clamp" of a TAT that is
//! further ahead than the quota's capacity (after a clock step backwards, a
//! move to a smaller quota, or a decision made with a slightly older `now`
//! than the last writer's): writing one would hand capacity back. Such a
//! client repays its debt at the quota's rate, and the decision says exactly
//! when it will conform.

use crate::engine::decision::{Decision, Denial};
use crate::engine::quota::Quota;

/// The largest TAT a decision ever asks a store to keep. `u64::MAX` is left
/// free so stores can use it as a marker.
pub(crate) const MAX_TAT: u64 = u64::MAX - 1;

/// What the store should do with the cell after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// Leave the cell as it is (denied, or a zero-cost probe).
    Keep,
    /// Store this TAT: always `> now` and `<= MAX_TAT`, so a cell that is
    /// written is live.
    Store(u64),
}

/// Decides a request of `cost` at `now` against a cell whose stored TAT is
/// `stored` (0 for a cell that does not exist yet: fully recovered).
#[inline(always)]
pub(crate) fn decide(stored: u64, now: u64, quota: &Quota, cost: u32) -> (Decision, Write) {
    let (seen, write) = judge(stored, now, quota, cost);
    let write = match write {
        Some(tat) => Write::Store(tat),
        None => Write::Keep,
    };
    (decision(seen, now, quota, cost), write)
}

/// What a decision needs to know of the cell it was made on: the debt the
/// cell carried, or (for the rare inputs near the end of `u64`) the stored
/// TAT itself. Two words: it leaves a store's update in registers, where
/// a whole [`Decision`] was copied through the stack several times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// `max(stored, now) - now`, and every value of the decision fits in
    /// `u64` ([`judge`] checked).
    Debt(u64),
    /// The stored TAT, for [`decide_wide`].
    Wide(u64),
}

/// The half of [`decide`] that runs inside the store's update: what to
/// write (`None`: nothing), and what [`decision`] needs to describe it
/// afterwards.
///
/// In 64-bit arithmetic when nothing can overflow (every real quota, clock
/// and cost: a bucket's capacity under 584 years), else in 128-bit
/// ([`decide_wide`]); the two agree exactly (tested below).
#[inline(always)]
pub(crate) fn judge(stored: u64, now: u64, quota: &Quota, cost: u32) -> (Seen, Option<u64>) {
    match judge_narrow(stored, now, quota, cost) {
        Some((debt, write)) => (Seen::Debt(debt), write),
        None => {
            let write = match decide_wide(stored, now, quota, cost).1 {
                Write::Store(tat) => Some(tat),
                Write::Keep => None,
            };
            (Seen::Wide(stored), write)
        }
    }
}

/// [`judge`] in `u64`: the debt and the write, or `None` where a value
/// would not fit (or the cost can never conform: the rare answers stay in
/// one place, [`decide_wide`]).
#[inline(always)]
fn judge_narrow(stored: u64, now: u64, quota: &Quota, cost: u32) -> Option<(u64, Option<u64>)> {
    let t = quota.interval_ns();
    let burst = quota.burst();
    if cost > burst {
        return None;
    }
    let capacity = t.checked_mul(u64::from(burst))?;
    let debt = stored.max(now) - now;
    // `cost * t <= burst * t = capacity`: fits.
    let new_debt = debt.checked_add(u64::from(cost) * t)?;
    if new_debt > capacity {
        return Some((debt, None));
    }
    let new = now.checked_add(new_debt).filter(|&new| new <= MAX_TAT)?;
    Some((debt, (cost != 0).then_some(new)))
}

/// The [`Decision`] a [`judge`] of the same `now`, quota and cost made.
#[inline(always)]
pub(crate) fn decision(seen: Seen, now: u64, quota: &Quota, cost: u32) -> Decision {
    let debt = match seen {
        Seen::Debt(debt) => debt,
        Seen::Wide(stored) => return decide_wide(stored, now, quota, cost).0,
    };
    let t = quota.interval_ns();
    let burst = quota.burst();
    // `judge_narrow` checked that these fit (for this quota and cost: every
    // caller passes the ones its `judge` had).
    debug_assert!(
        cost <= burst && t.checked_mul(u64::from(burst)).is_some(),
        "decision() without the judge_narrow that vouched for {quota:?}, cost {cost}"
    );
    let capacity = t * u64::from(burst);
    let new_debt = debt + u64::from(cost) * t;
    if new_debt > capacity {
        Decision::refused(
            Denial::RateLimited,
            burst,
            capacity.saturating_sub(debt),
            t,
            debt,
            new_debt - capacity,
        )
    } else {
        Decision::admitted(burst, capacity - new_debt, t, new_debt)
    }
}

/// [`decide`] in `u128`: every input, including the ones near the end of
/// `u64` that [`judge_narrow`] hands over.
#[cold]
#[inline(never)]
fn decide_wide(stored: u64, now: u64, quota: &Quota, cost: u32) -> (Decision, Write) {
    let t = u128::from(quota.interval_ns());
    let burst = quota.burst();
    let now128 = u128::from(now);
    let capacity = t * u128::from(burst); // tau + T
    let tat = u128::from(stored).max(now128);
    // Unused capacity once the TAT is `tat` (0 when the client is in debt).
    let slack_at = |tat: u128| -> u64 { saturate(capacity.saturating_sub(tat - now128)) };
    let interval_ns = quota.interval_ns();
    let denied = |retry_after_ns: u64, denial: Denial| {
        Decision::refused(
            denial,
            burst,
            slack_at(tat),
            interval_ns,
            saturate(tat - now128),
            retry_after_ns,
        )
    };

    if cost > burst {
        return (denied(u64::MAX, Denial::CostExceedsBurst), Write::Keep);
    }
    let new = tat + u128::from(cost) * t;
    if new - now128 > capacity {
        let retry = saturate(new - now128 - capacity);
        return (denied(retry, Denial::RateLimited), Write::Keep);
    }
    if new > u128::from(MAX_TAT) {
        // Only reachable with a clock within one capacity of u64::MAX ns
        // (584 years of uptime): refuse rather than store a wrapped value.
        return (denied(u64::MAX, Denial::RateLimited), Write::Keep);
    }
    let decision = Decision::admitted(burst, slack_at(new), interval_ns, saturate(new - now128));
    let write = if cost == 0 {
        Write::Keep
    } else {
        Write::Store(saturate(new))
    };
    (decision, write)
}

/// What handing back `cost` units of a charge made at `charged_at` does to a
/// cell whose TAT is `stored`: the TAT moves back by what that charge still
/// holds, `min(cost * T, charged_at + cost * T - now)` (nothing when that is
/// negative), and never to before `now`. `None`: nothing to write (the cell
/// is fully recovered, the refund is empty, or time has repaid the charge).
///
/// # Why this bound
///
/// A charge of `n` units at `t0` that found the bucket full is repaid by
/// time one unit per `T`: at `now` it still holds exactly
/// `t0 + n*T - now`. A charge that found the bucket in debt sat behind
/// that debt and may still hold more, but the cell keeps no history that
/// would say how much: the charges ahead of it may have been refunded
/// since, moving it down. So the bound is the one that holds whatever the
/// history: a cell after such a refund is never below the cell of the same
/// history in which the charge had been that much smaller (the property
/// test below checks it over random histories of charges, forced charges
/// and refunds). Handing back more (flooring at `now` alone, as this did
/// before) let a client hold a charge open until time refilled the bucket,
/// spend the bucket again, then drop the charge and have the bucket refilled
/// a second time. The price: a refund that comes after its charge has sat
/// behind debt for a while gives back less than a perfect ledger would.
///
/// The last `r` units of a charge of `n` units made at `t0` are, for this
/// bound, a charge of `r` units made at `t0 + (n - r) * T` (they are the
/// last to be repaid): a partial refund passes that time.
///
/// The floor is `now` itself, not `now + 1`: a cell at `now` is exactly
/// full, where `now + 1` would leave it a nanosecond in debt (a request of
/// the whole burst right after a charge and its refund would be refused).
/// A written TAT of `now` is a recovered cell, which the store may evict;
/// the store's hand-over protocol does not rely on TATs only growing any
/// more (see `store/memory.rs`).
#[inline]
pub(crate) fn refund(stored: u64, now: u64, quota: &Quota, cost: u32, charged_at: u64) -> Option<u64> {
    if cost == 0 || stored <= now {
        return None;
    }
    let back = u128::from(cost) * u128::from(quota.interval_ns());
    let owed = (u128::from(charged_at) + back).saturating_sub(u128::from(now));
    let tat = u128::from(stored).saturating_sub(back.min(owed)).max(u128::from(now));
    // `tat <= stored <= MAX_TAT`: fits.
    Some(saturate(tat)).filter(|&t| t < stored)
}

/// When the last `part` units of a charge of `whole` units made at
/// `charged_at` count as charged, for [`refund`]: `charged_at + (whole -
/// part) * T` (saturating; `part >= whole` is the whole charge).
#[inline]
#[cfg_attr(not(feature = "axum"), allow(dead_code))] // `axum::Charge` settles partly
pub(crate) fn last_units_charged_at(charged_at: u64, quota: &Quota, whole: u32, part: u32) -> u64 {
    let ahead = u64::from(whole.saturating_sub(part)).saturating_mul(quota.interval_ns());
    charged_at.saturating_add(ahead)
}

/// What charging `cost` more units without a check does (work already
/// done, settled after the fact): the TAT moves forward by `cost * T` from
/// `max(stored, now)`, into debt if need be, but never past two bucket
/// capacities from now (a spent bucket and as much again of debt). `None`:
/// nothing to write.
#[inline]
pub(crate) fn force(stored: u64, now: u64, quota: &Quota, cost: u32) -> Option<u64> {
    if cost == 0 {
        return None;
    }
    let t = u128::from(quota.interval_ns());
    let tat = u128::from(stored).max(u128::from(now)) + u128::from(cost) * t;
    // At most one bucket of debt beyond a spent bucket (the key waits at
    // most two capacities): a settlement the client can inflate (tokens it
    // had generated, say) cannot lock it out for years.
    let most = u128::from(now) + 2 * t * u128::from(quota.burst());
    let tat = tat.min(most.max(u128::from(stored)));
    (tat > u128::from(stored)).then(|| saturate(tat.min(u128::from(MAX_TAT))))
}

fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
