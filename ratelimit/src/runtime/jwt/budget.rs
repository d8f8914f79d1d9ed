//! The failed-check budget: how many signature checks that fail the process,
//! a client network, a subnet of it and an address may cause. It runs on
//! the crate's own engine ([`Limiter`] over a bounded [`MemoryStore`]), as
//! the header-key tracker does.
//!
//! Only public-key tokens are budgeted: an HMAC check costs about a
//! microsecond, less than this bookkeeping, so HMAC tokens are always
//! checked (the caller decides that).
//!
//! # The rule
//!
//! * **Shares.** Each client has a share of failures: its address, its
//!   subnet (an IPv6 /56 of a /48: the network prefix plus 8 bits; an IPv4
//!   address) and its network (`[ip]` network prefixes) each have a GCRA
//!   budget, taken together or not at all ([`Limiter::check_all`]), innermost
//!   first. So a network is charged only by checks its subnets admitted, and
//!   a subnet spends at most a quarter of its network's budget: a flood from
//!   one /56 of a cloud provider's /48 leaves the other tenants of that /48
//!   three quarters of it.
//! * **The process.** Every check also takes a unit of a process-wide budget
//!   (`max_failed_per_second`, at once and per second), so a flood from any
//!   number of networks costs at most that many checks a second. A client
//!   within its share may use the whole of it; a client past its share (it
//!   sent forgeries: a valid token from behind a NAT that also sent a few)
//!   is still checked while at least half of it is left, so the shares only
//!   bite under a flood that costs real CPU.
//! * A check that verifies gives every unit back: only failures count.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::{CellKey, Check, Clock, Decision, Limiter, MemoryStore, Quota, SystemClock};

/// Routes of the budget's limiter: one per level.
const ADDRESS: u32 = 1;
const SUBNET: u32 = 2;
const NETWORK: u32 = 3;
const PROCESS: u32 = 4;

/// The failed-check budget (see the module docs).
pub(super) struct FailureBudget {
    limiter: Limiter<MemoryStore, Arc<dyn Clock>>,
    address: Quota,
    /// `None`: no network or subnet level.
    network: Option<NetworkLevels>,
    /// The whole process budget, for clients within their share.
    process: Quota,
    /// The same rate with half the burst, on the same cell: admits only
    /// while at least half the process budget is left (clients past their
    /// share).
    spare: Quota,
    process_cell: CellKey,
}

#[derive(Clone, Copy)]
struct NetworkLevels {
    network: Quota,
    subnet: Quota,
    /// Network prefix lengths, IPv6 then IPv4.
    prefixes: (u8, u8),
}

/// The units taken for one check, to give back when the token verifies.
pub(super) struct Taken {
    /// The share's checks and where each was charged; empty when the client
    /// was past its share.
    shares: [(Check, Decision); 3],
    share_count: usize,
    process: Decision,
    pool: Quota,
    /// When the units were taken (a refund hands back at most what is
    /// still owed on them).
    at: u64,
}

/// A per-window budget of `n` (at least 1) at once and per `window`.
fn per_window(n: u32, window: Duration) -> Quota {
    let window = if window.is_zero() {
        Duration::from_secs(1)
    } else {
        window
    };
    Quota::new(n.max(1), window).unwrap_or_else(|_| Quota::per_second(n.max(1)))
}

impl FailureBudget {
    /// `per_ip` failed checks per address at once and per `window`, for up
    /// to `max_tracked` budgets at once (beyond, new ones share overflow
    /// cells, spread by network); the default network level and process
    /// budget.
    pub(super) fn new(per_ip: u32, window: Duration, max_tracked: usize) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
        let limiter = Limiter::new(Self::store(max_tracked), clock);
        let process_cell = limiter.cell_key(PROCESS, &());
        let mut budget = FailureBudget {
            limiter,
            address: per_window(per_ip, window),
            network: None,
            process: Quota::per_second(1),
            spare: Quota::per_second(1),
            process_cell,
        };
        budget.set_network(crate::shared::defaults::JWT_MAX_FAILED_PER_NETWORK, window, 48, 24);
        budget.set_process(crate::shared::defaults::JWT_MAX_FAILED_PER_SECOND);
        budget
    }

    /// Each address's share: `per_ip` per `window`, with budgets for up to
    /// `max_tracked` clients at once (a new table: what was spent is
    /// forgotten, so call it while building).
    pub(super) fn with_address(mut self, per_ip: u32, window: Duration, max_tracked: usize) -> Self {
        let clock = self.limiter.clock().clone();
        self.limiter = Limiter::new(Self::store(max_tracked), clock);
        self.process_cell = self.limiter.cell_key(PROCESS, &());
        self.address = per_window(per_ip, window);
        self
    }

    fn store(max_tracked: usize) -> MemoryStore {
        MemoryStore::builder()
            .max_keys(max_tracked.max(64))
            .try_build()
            .unwrap_or_else(|_| MemoryStore::default())
    }

    /// The network level: `per_network` failed checks per `window` for the
    /// addresses of one IPv6 /`ipv6_prefix` or IPv4 /`ipv4_prefix`, and its
    /// subnets' share of it (a quarter, rounded up).
    pub(super) fn set_network(&mut self, per_network: u32, window: Duration, ipv6_prefix: u8, ipv4_prefix: u8) {
        self.network = Some(NetworkLevels {
            network: per_window(per_network, window),
            subnet: per_window(per_network.div_ceil(4), window),
            prefixes: (ipv6_prefix.clamp(1, 128), ipv4_prefix.clamp(1, 32)),
        });
    }

    /// The process level: `per_second` failed checks at once and per second.
    pub(super) fn set_process(&mut self, per_second: u32) {
        let per_second = per_second.max(2);
        self.process = Quota::per_second(per_second);
        self.spare = self.process.with_burst(per_second / 2);
    }

    /// Reads time from `clock` (tests).
    #[cfg(test)]
    pub(super) fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.limiter = Limiter::new(Self::store(self.limiter.store().max_keys()), clock);
        self.process_cell = self.limiter.cell_key(PROCESS, &());
        self
    }

    /// The share checks of `client` (`None`: the requests without a peer
    /// address, together), innermost first; how many there are.
    fn share(&self, client: Option<IpAddr>) -> ([Check; 3], usize) {
        let placeholder = Check::new(self.process_cell, self.address, 1);
        let mut checks = [placeholder; 3];
        let (Some(ip), Some(levels)) = (client, self.network) else {
            checks[0] = Check::new(self.limiter.cell_key(ADDRESS, &client), self.address, 1);
            return (checks, 1);
        };
        let (v6, v4) = levels.prefixes;
        let network = crate::shared::net::prefix_of(ip, v6, v4);
        let subnet = crate::shared::net::prefix_of(ip, v6.saturating_add(8).min(128), 32);
        // Cells grouped by network: overflow, when the table is full, is
        // spread by network, so one network cannot spend everyone's.
        let cell = |route, key: &IpAddr| self.limiter.grouped_cell_key(route, key, &network);
        checks[0] = Check::new(cell(ADDRESS, &ip), self.address, 1);
        let mut n = 1;
        // An IPv4 subnet is the address itself: no level of its own.
        if subnet != crate::shared::net::normalize(ip) || ip.is_ipv6() {
            checks[n] = Check::new(cell(SUBNET, &subnet), levels.subnet, 1);
            n += 1;
        }
        checks[n] = Check::new(cell(NETWORK, &network), levels.network, 1);
        (checks, n + 1)
    }

    /// Takes the units of one signature check for a token from `client`;
    /// `None` when the budget refuses it (nothing is kept).
    pub(super) fn take(&self, client: Option<IpAddr>) -> Option<Taken> {
        let now = self.limiter.clock().now();
        let (checks, n) = self.share(client);
        let mut out = [Decision::placeholder(); 3];
        let within = self.limiter.check_all_at(&checks[..n], &mut out[..n], now);
        let pool = if within { self.process } else { self.spare };
        let process = self.limiter.check_cell_at(self.process_cell, &pool, 1, now);
        let share_count = if within { n } else { 0 };
        let shares = std::array::from_fn(|i| (checks[i], out[i]));
        let taken = Taken {
            shares,
            share_count,
            process,
            pool,
            at: now,
        };
        if process.is_denied() {
            self.give_back_shares(&taken, now);
            return None;
        }
        Some(taken)
    }

    /// Gives back the units taken for a token that verified.
    pub(super) fn give_back(&self, taken: Taken) {
        let now = self.limiter.clock().now();
        self.give_back_shares(&taken, now);
        self.limiter
            .refund_placed_at(self.process_cell, &taken.pool, 1, &taken.process, taken.at, now);
    }

    fn give_back_shares(&self, taken: &Taken, now: u64) {
        for (check, decision) in &taken.shares[..taken.share_count] {
            self.limiter
                .refund_placed_at(check.cell, &check.quota, check.cost, decision, taken.at, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use super::FailureBudget;
    use crate::ManualClock;

    fn budget(clock: &Arc<ManualClock>) -> FailureBudget {
        // 2 per address, 8 per network (so 2 per subnet), 40 per second
        // for the process; a minute's window.
        let mut b = FailureBudget::new(2, Duration::from_secs(60), 10_000).with_clock(clock.clone());
        b.set_network(8, Duration::from_secs(60), 48, 24);
        b.set_process(40);
        b
    }

    fn v6(subnet: u16, host: u16) -> Option<IpAddr> {
        Some(IpAddr::from([0x2001, 0xdb8, 0xaaaa, subnet << 8 | host, 0, 0, 0, 0]))
    }

    /// Takes as many units as `client` can get, failing each.
    fn spend(b: &FailureBudget, client: Option<IpAddr>) -> usize {
        (0..1_000).take_while(|_| b.take(client).is_some()).count()
    }

    #[test]
    fn a_client_past_its_share_is_checked_while_half_the_process_budget_is_left() {
        let clock = Arc::new(ManualClock::new());
        let b = budget(&clock);
        // Its share (2), then the process's spare above half (20 of 40, less
        // the 2 its share took): 20 checks in all, then none.
        assert_eq!(spend(&b, v6(1, 1)), 20);
        // Another client within its share still gets the lower half.
        assert_eq!(spend(&b, v6(2, 1)), 2);
    }

    #[test]
    fn a_verified_token_gives_every_unit_back() {
        let clock = Arc::new(ManualClock::new());
        let b = budget(&clock);
        for _ in 0..100 {
            let taken = b.take(v6(1, 1)).expect("verified tokens cost nothing");
            b.give_back(taken);
        }
        assert_eq!(spend(&b, v6(1, 1)), 20, "the whole budget is still there");
    }

    #[test]
    fn a_subnet_spends_at_most_its_share_of_the_network() {
        let clock = Arc::new(ManualClock::new());
        let b = budget(&clock);
        // Process budget large enough not to matter here.
        let mut b = b;
        b.set_process(1_000_000);
        // Subnet 1's addresses: 2 within the subnet's share, then past it.
        let within: usize = (0..50)
            .map(|host| {
                let (checks, n) = b.share(v6(1, host));
                let mut out = [crate::Decision::placeholder(); 3];
                usize::from(
                    b.limiter
                        .check_all_at(&checks[..n], &mut out[..n], b.limiter.clock().now()),
                )
            })
            .sum();
        assert_eq!(within, 2, "the subnet's share: a quarter of 8");
        // Subnets 2, 3 and 4 of the same /48 each still have their share.
        for subnet in 2..=4 {
            let (checks, n) = b.share(v6(subnet, 1));
            let mut out = [crate::Decision::placeholder(); 3];
            let now = b.limiter.clock().now();
            assert!(
                b.limiter.check_all_at(&checks[..n], &mut out[..n], now),
                "subnet {subnet}"
            );
        }
    }

    #[test]
    fn the_process_budget_bounds_a_flood_from_any_number_of_networks() {
        let clock = Arc::new(ManualClock::new());
        let b = budget(&clock);
        let mut checks = 0;
        for second in 0..10u64 {
            if second > 0 {
                clock.advance(Duration::from_secs(1));
            }
            for net in 0..2_000u32 {
                let ip = IpAddr::from([10 + (net >> 16) as u8, (net >> 8) as u8, net as u8, 1]);
                checks += usize::from(b.take(Some(ip)).is_some());
            }
        }
        // 40 at once, then 40 a second.
        assert!(checks <= 40 + 9 * 40, "{checks} checks in 10 s");
        assert!(checks >= 9 * 40, "{checks} checks in 10 s: the budget was used");
    }

    #[test]
    fn ipv4_addresses_share_their_network_without_a_subnet_level() {
        let clock = Arc::new(ManualClock::new());
        let mut b = budget(&clock);
        b.set_process(1_000_000);
        let (_, n) = b.share(Some("192.0.2.7".parse().unwrap()));
        assert_eq!(n, 2, "address and /24");
        let (_, n) = b.share(None);
        assert_eq!(n, 1, "no address: one shared budget");
        // 4 addresses of one /24 spend its 8.
        let got: usize = (1..=10u8)
            .map(|i| spend_share(&b, Some(IpAddr::from([192, 0, 2, i]))))
            .sum();
        assert_eq!(got, 8);
    }

    fn spend_share(b: &FailureBudget, client: Option<IpAddr>) -> usize {
        (0..100)
            .take_while(|_| {
                let (checks, n) = b.share(client);
                let mut out = [crate::Decision::placeholder(); 3];
                b.limiter
                    .check_all_at(&checks[..n], &mut out[..n], b.limiter.clock().now())
            })
            .count()
    }
}
