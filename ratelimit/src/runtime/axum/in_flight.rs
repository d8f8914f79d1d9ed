//! Requests in flight per client (`[profiles.NAME] concurrency = N`): a
//! request admitted by its rate also takes one of its key's permits, held
//! until its response body has been sent, fails, or is dropped (a client
//! hang-up, a handler panic, a cancelled future all drop it). A request
//! over its key's concurrency is refused before the handler runs.
//!
//! The rate is decided first, so that the permit is taken on the cell the
//! store placed the charge in: the client's own, or the cell a network
//! shares once it has brought its budget of new keys into the store (or an
//! overflow cell), so a network limited as one client for its rate is one
//! for its requests in flight too. A request its rate refuses takes no
//! permit; one whose permits are all held hands its charge back, so the
//! refusal costs its rate nothing once it is over (while it is being
//! decided, a concurrent request of the same client may see the charge).

use std::sync::Arc;

use http::HeaderMap;

use super::outcome::{append_member, InFlight, Outcome, RATELIMIT, RATELIMIT_POLICY};
use super::permits::{HeldPermit, Permits};
use super::runtime::Pending;
use super::runtime::Runtime;
use crate::engine::concurrency::ConcurrencyLimiter;

impl Runtime {
    /// The table, made on first use: a runtime without concurrency
    /// limits reserves nothing for them.
    fn in_flight_table(&self) -> &Arc<ConcurrencyLimiter> {
        self.in_flight
            .get_or_init(|| Arc::new(ConcurrencyLimiter::new(self.max_keys_in_flight)))
    }

    /// After the rates of `pending` were decided (`admitted`: every
    /// enforcing one admitted and was charged, at `charged_at`): takes a
    /// permit for each limit with a concurrency limit, on the cell its
    /// charge was placed in, and returns them. A request its rate refused
    /// takes none (what each limit has left is reported). When an enforcing
    /// limit's permits are all held, every charge of the request is handed
    /// back and its rates report the room they have: `None`.
    #[inline]
    pub(crate) fn hold_in_flight(
        &self,
        pending: &mut [Pending<'_>],
        admitted: bool,
        charged_at: u64,
    ) -> Option<Permits> {
        if !admitted {
            self.peek_permits(pending);
            return None;
        }
        let taken = self.take_permits(pending);
        if taken.is_none() {
            for c in pending.iter_mut().filter_map(|p| p.outcome.in_flight.as_mut()) {
                // The permits taken before the refusing one go back with it.
                if !c.refused {
                    c.remaining = c.remaining.saturating_add(1).min(c.limit);
                }
            }
            for p in pending.iter_mut() {
                let (quota, cost) = (p.outcome.quota, p.outcome.cost);
                if p.outcome.decision.is_allowed() {
                    self.fleet.refund(
                        &self.limiter,
                        &p.outcome.held,
                        &quota,
                        cost,
                        &p.outcome.decision,
                        charged_at,
                    );
                }
                p.outcome.decision = self.rate_now(&p.outcome, cost);
            }
        }
        taken
    }

    /// Takes a permit for every limit of `pending` with a concurrency
    /// limit, recording what each reports. `None` when an enforcing limit
    /// is full (it is marked refused; nothing is held). A full shadow limit
    /// is reported, holds nothing and refuses nothing.
    fn take_permits(&self, pending: &mut [Pending<'_>]) -> Option<Permits> {
        let mut permits = Permits::default();
        for p in pending.iter_mut() {
            let Some(limit) = p.concurrency else { continue };
            match self.in_flight_table().try_acquire(in_flight_key(p), limit) {
                Ok(permit) => {
                    let remaining = permit.remaining();
                    let gauge = self.observer.in_flight_gauge(&p.route, p.outcome.profile);
                    gauge.increment(1.0);
                    permits.push(HeldPermit { _permit: permit, gauge });
                    p.outcome.in_flight = Some(InFlight {
                        limit,
                        remaining,
                        refused: false,
                    });
                }
                Err(_) => {
                    p.outcome.in_flight = Some(InFlight {
                        limit,
                        remaining: 0,
                        refused: true,
                    });
                    if !p.outcome.shadow {
                        return None;
                    }
                }
            }
        }
        Some(permits)
    }

    /// What a probe (or a request its rate refused) reports of each
    /// concurrency limit, holding nothing.
    pub(crate) fn peek_permits(&self, pending: &mut [Pending<'_>]) {
        for p in pending.iter_mut() {
            let Some(limit) = p.concurrency else { continue };
            let held = self.in_flight_table().in_flight(in_flight_key(p));
            p.outcome.in_flight = Some(InFlight {
                limit,
                remaining: limit.saturating_sub(held),
                refused: held >= limit,
            });
        }
    }
}

/// The key a limit's permits are counted on: the cell its rate's charge
/// was placed in (the client's own, or a cell it shares).
fn in_flight_key(p: &Pending<'_>) -> crate::CellKey {
    crate::engine::concurrency::placed_key(p.cell, &p.outcome.decision)
}

/// `qu` of a concurrency policy (draft-ietf-httpapi-ratelimit-headers-10,
/// the quota unit registry).
const QUOTA_UNIT: &str = "concurrent-requests";

impl Outcome {
    /// Whether this limit's concurrency refused the request.
    pub(crate) fn refused_in_flight(&self) -> bool {
        self.in_flight.is_some_and(|c| c.refused)
    }

    /// The concurrency policy's name: the rate policy's, with
    /// `#concurrency` (a `#` in a profile name is percent-encoded, so the
    /// two never meet another policy's name).
    pub(crate) fn in_flight_policy_name(&self) -> String {
        let mut name = self.policy_name();
        name.push_str("#concurrency");
        name
    }

    /// Adds the concurrency policy's members, when the limit has one:
    /// `"<name>";q=<N>;qu="concurrent-requests"` and `"<name>";r=<left>`.
    pub(crate) fn write_in_flight(&self, headers: &mut HeaderMap) {
        let Some(c) = self.in_flight else { return };
        if !self.style.structured() {
            return;
        }
        let name = self.in_flight_policy_name();
        append_member(
            headers,
            &RATELIMIT_POLICY,
            &name,
            &format!("\"{name}\";q={};qu=\"{QUOTA_UNIT}\"", c.limit),
        );
        append_member(headers, &RATELIMIT, &name, &format!("\"{name}\";r={}", c.remaining));
    }
}
