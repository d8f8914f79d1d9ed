//! A network's shared cell through the fleet gate, from outside (issue 26,
//! item 5: fleet ids follow the cell). Four real `quickstart` processes on
//! one real `redis-server`, `[store] new_keys_per_network = "2/hour"`: once
//! a /24 has brought its two new keys into an instance's store, its other
//! addresses share the /24's one cell there. The fleet must limit that
//! cell as one client too. Before, each address kept its own fleet id, so
//! the fleet held each address to the budget and the /24's shared cell got
//! a budget on every instance: four times the budget fleet-wide.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::fleet::{
    at, busiest, client_runtime, fleet_bound, next_epoch, per_epoch, redis_rtt, request, Fleet, Reply, BUDGET, N,
    REQUEST_TIMEOUT,
};
use crate::support::quickstart::quickstart_binary;
use crate::support::redis::RedisServer;

/// The /24's addresses that share its cell, each offering one request a
/// second: together twice the budget (100 per 10 s).
const SHARING: u8 = 20;
/// When the traffic starts, into an epoch (not at its boundary), and how
/// long it lasts.
const START: Duration = Duration::from_millis(3_300);
const LENGTH: Duration = Duration::from_secs(30);

#[test]
fn a_networks_shared_cell_has_one_fleet_budget() {
    let bin = quickstart_binary();
    let redis = RedisServer::start();
    let rtt = redis_rtt(redis.port);
    let bound = fleet_bound(N, rtt);
    let mut fleet = Fleet::start_urls(
        &bin,
        &vec![redis.url(); N],
        "shared",
        "\n[store]\nnew_keys_per_network = \"2/hour\"\n",
    );
    let targets = fleet.addrs();
    let runtime = client_runtime();
    let epoch0 = next_epoch(Duration::from_millis(300));
    let (admitted, fleet_refused, errors) = runtime.block_on(async {
        // Four addresses of 127.0.7.0/24 spend the /24's new keys on every
        // instance (each address, a subnet of it, brings in at most a
        // quarter of them); they are not measured.
        for last in 2..6 {
            for &target in &targets {
                request(Ipv4Addr::new(127, 0, 7, last), target)
                    .await
                    .unwrap_or_else(|e| panic!("warm-up request: {e}"));
            }
        }
        // Then twenty other addresses of it, evenly interleaved, round robin
        // over the instances, each request on its own connection.
        let start = tokio::time::Instant::from_std(epoch0) + START;
        let every = Duration::from_secs(1) / u32::from(SHARING);
        let mut tasks = tokio::task::JoinSet::new();
        let mut k = 0u32;
        while every * k < LENGTH {
            let ip = Ipv4Addr::new(127, 0, 7, 10 + (k % u32::from(SHARING)) as u8);
            let target: SocketAddr = targets[k as usize % targets.len()];
            tokio::time::sleep_until(start + every * k).await;
            tasks.spawn(async move {
                tokio::time::timeout(REQUEST_TIMEOUT, request(ip, target))
                    .await
                    .unwrap_or_else(|_| Err(format!("{target}: no response within {REQUEST_TIMEOUT:?}")))
            });
            k += 1;
        }
        let (mut admitted, mut fleet_refused, mut errors) = (Vec::new(), 0u64, Vec::new());
        while let Some(result) = tasks.join_next().await {
            match result.expect("a request task") {
                Ok(Reply::Admitted(t)) => admitted.push(t.saturating_duration_since(epoch0)),
                Ok(Reply::FleetRejected) => fleet_refused += 1,
                Ok(Reply::LocalRejected) => {}
                Err(e) => errors.push(e),
            }
        }
        admitted.sort();
        (admitted, fleet_refused, errors)
    });
    let (most, from) = busiest(&admitted);
    println!(
        "a /24 past its new keys on {N} instances: {} admitted, {fleet_refused} refused fleet-wide, {} errors; \
         busiest window {most} at {} (bound {bound}, budget {BUDGET}, rtt {rtt:?}); per epoch {:?}",
        admitted.len(),
        errors.len(),
        at(from),
        per_epoch(&admitted)
    );
    let mut failures = fleet.problems();
    if !errors.is_empty() {
        failures.push(format!("{} requests failed, e.g. {}", errors.len(), errors[0]));
    }
    if most > bound {
        failures.push(format!(
            "the /24's shared cell: busiest window {most} at {} > bound {bound} (budget {BUDGET})",
            at(from)
        ));
    }
    // The traffic was twice the budget: the fleet refused, and the cell
    // still got most of its budget.
    if most < BUDGET * 9 / 10 {
        failures.push(format!("the /24's shared cell got only {most} in its busiest window"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
