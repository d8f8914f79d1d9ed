//! The failed-check budget: how many signature checks that fail a client
//! network and a client address may cause.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{lock, nanos, CACHE_SHARDS};

/// Failed signature checks per client network, then per client address:
/// GCRA at each level (`per_network` and `per_ip` at once, as many more per
/// window), in a bounded, sharded table. A unit is taken at both levels
/// before a check and given back when the token verifies, so only failures
/// count. The network is taken first: a network out of budget (one /48
/// rotating its 65,536 /64s) is refused without adding an address to the
/// table, so one network cannot fill it. When a shard is full of entries
/// still in debt, new ones share that shard's overflow cell (bounded work,
/// never unbounded checks).
pub(super) struct FailureBudget {
    shards: Vec<Mutex<BudgetShard>>,
    hasher: ahash::RandomState,
    address: Rate,
    /// `None`: no network level.
    pub(super) network: Option<NetworkRate>,
    per_shard: usize,
    base: Instant,
}

/// One level's GCRA: nanoseconds per unit (`window / n`) and tolerance
/// (`interval * (n - 1)`).
#[derive(Clone, Copy)]
struct Rate {
    interval: u64,
    tau: u64,
}

impl Rate {
    fn new(n: u32, window: Duration) -> Rate {
        let n = u64::from(n.max(1));
        let interval = (nanos(window) / n).max(1);
        Rate {
            interval,
            tau: interval.saturating_mul(n - 1),
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct NetworkRate {
    rate: Rate,
    ipv6_prefix: u8,
    ipv4_prefix: u8,
}

#[derive(Default)]
struct BudgetShard {
    tats: HashMap<u64, u64>,
    overflow: u64,
}

/// The cell a unit was taken from, to give it back.
#[derive(Clone, Copy)]
struct Taken {
    key: u64,
    overflow: bool,
    interval: u64,
}

/// The units taken for one check: the address's, and the network's.
#[derive(Clone, Copy)]
pub(super) struct TakenUnits {
    address: Taken,
    network: Option<Taken>,
}

impl FailureBudget {
    pub(super) fn new(per_ip: u32, window: Duration, max_tracked: usize) -> Self {
        FailureBudget {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::new(BudgetShard::default())).collect(),
            hasher: ahash::RandomState::new(),
            address: Rate::new(per_ip, window),
            network: Some(NetworkRate {
                rate: Rate::new(crate::defaults::JWT_MAX_FAILED_PER_NETWORK, window),
                ipv6_prefix: 48,
                ipv4_prefix: 24,
            }),
            per_shard: max_tracked.div_ceil(CACHE_SHARDS).max(1),
            base: Instant::now(),
        }
    }

    /// The network level: `per_network` failed checks per window for the
    /// addresses within one IPv6 /`ipv6_prefix` or IPv4 /`ipv4_prefix`.
    pub(super) fn with_network(mut self, per_network: u32, window: Duration, ipv6_prefix: u8, ipv4_prefix: u8) -> Self {
        self.network = Some(NetworkRate {
            rate: Rate::new(per_network, window),
            ipv6_prefix: ipv6_prefix.clamp(1, 128),
            ipv4_prefix: ipv4_prefix.clamp(1, 32),
        });
        self
    }

    /// Takes one unit of `client`'s network's budget and one of its own
    /// (`None`: the requests without a peer address, together); `None`
    /// when either has none left (and nothing is kept).
    pub(super) fn take(&self, client: Option<IpAddr>) -> Option<TakenUnits> {
        let network = match (client, self.network) {
            (Some(ip), Some(level)) => {
                let net = crate::net::prefix_of(ip, level.ipv6_prefix, level.ipv4_prefix);
                Some(self.take_cell(self.hasher.hash_one((1u8, net)), level.rate)?)
            }
            _ => None,
        };
        match self.take_cell(self.hasher.hash_one((0u8, client)), self.address) {
            Some(address) => Some(TakenUnits { address, network }),
            None => {
                if let Some(n) = network {
                    self.give_back_cell(n);
                }
                None
            }
        }
    }

    fn take_cell(&self, key: u64, rate: Rate) -> Option<Taken> {
        let mut guard = lock(&self.shards[(key as usize) % CACHE_SHARDS]);
        let shard = &mut *guard;
        // Offset so a fresh cell (0) is fully recovered. One offset for both
        // levels: their TATs share this table (and its clean-up below, run
        // with whichever level's `now`) and the shard's overflow cell, so
        // they must be on one time axis (with each level's own interval as
        // its offset, an address-level clean-up evicted networks still in
        // debt, and gave them their whole budget back).
        let offset = self
            .network
            .map_or(self.address.interval, |n| n.rate.interval.max(self.address.interval));
        let now = nanos(self.base.elapsed()).saturating_add(offset);
        if !shard.tats.contains_key(&key) && shard.tats.len() >= self.per_shard {
            shard.tats.retain(|_, tat| *tat > now);
        }
        let overflow = !shard.tats.contains_key(&key) && shard.tats.len() >= self.per_shard;
        let cell = if overflow {
            &mut shard.overflow
        } else {
            shard.tats.entry(key).or_insert(0)
        };
        let tat = (*cell).max(now);
        if tat - now > rate.tau {
            return None;
        }
        *cell = tat.saturating_add(rate.interval);
        Some(Taken {
            key,
            overflow,
            interval: rate.interval,
        })
    }

    /// Gives back the units taken for a token that verified.
    pub(super) fn give_back(&self, taken: TakenUnits) {
        self.give_back_cell(taken.address);
        if let Some(n) = taken.network {
            self.give_back_cell(n);
        }
    }

    fn give_back_cell(&self, taken: Taken) {
        let mut guard = lock(&self.shards[(taken.key as usize) % CACHE_SHARDS]);
        let shard = &mut *guard;
        let cell = if taken.overflow {
            Some(&mut shard.overflow)
        } else {
            shard.tats.get_mut(&taken.key)
        };
        if let Some(cell) = cell {
            *cell = cell.saturating_sub(taken.interval);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_address_level_eviction_does_not_forgive_a_networks_debt() {
        // Both levels keep their TATs in one table, each offset by its own
        // interval ("now" = elapsed + interval), and a full shard is
        // cleaned with the `now` of whichever level is inserting. With
        // per_ip = 1 per window (interval = the window) and per_network = 4
        // (interval = a quarter), an address-level insertion evicts a
        // network entry that is still 3 units in debt: the network gets
        // its whole budget back after recovering one unit.
        let window = Duration::from_secs(4);
        // Two entries per shard.
        let b = FailureBudget::new(1, window, 2 * CACHE_SHARDS).with_network(4, window, 48, 24);
        let level = b.network.unwrap();
        let net: IpAddr = "2001:db8:aaaa::".parse().unwrap();
        let net_key = b.hasher.hash_one((1u8, crate::net::prefix_of(net, 48, 24)));
        let shard = (net_key as usize) % CACHE_SHARDS;
        // Another network in the same shard, one failure (recovered in 1 s):
        // the shard is full, and this entry is rightly evicted later.
        let filler = (1u16..)
            .map(|i| IpAddr::from([0x2001, 0xdb8, i, 0, 0, 0, 0, 0]))
            .map(|a| b.hasher.hash_one((1u8, crate::net::prefix_of(a, 48, 24))))
            .find(|k| (*k as usize) % CACHE_SHARDS == shard && *k != net_key)
            .unwrap();
        assert!(b.take_cell(filler, level.rate).is_some());
        for i in 0..4 {
            assert!(b.take_cell(net_key, level.rate).is_some(), "unit {i}");
        }
        assert!(
            b.take_cell(net_key, level.rate).is_none(),
            "the network's budget is spent"
        );
        let spent = std::time::Instant::now();
        // One unit (1 s) recovers.
        std::thread::sleep(Duration::from_millis(1_100));
        // An address of another network lands in the network entry's shard
        // (full: one entry per shard) and takes an address-level unit.
        let other = (0u32..)
            .map(|i| IpAddr::from([198, 51, (i >> 8) as u8, i as u8]))
            .map(|a| b.hasher.hash_one((0u8, Some(a))))
            .find(|k| (*k as usize) % CACHE_SHARDS == shard)
            .unwrap();
        assert!(b.take_cell(other, b.address).is_some());
        let mut got = 0;
        while got < 10 && b.take_cell(net_key, level.rate).is_some() {
            got += 1;
        }
        // A slow machine may have slept longer: what it recovered, at most.
        let recovered = (spent.elapsed().as_millis() / 1_000) as usize;
        assert!(
            got <= recovered,
            "the network recovered {recovered} unit(s) but got {got} checks"
        );
    }
}
