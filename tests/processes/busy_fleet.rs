//! The fleet limit on a busy fleet, from outside (issue 29, item 3): four
//! real `quickstart` processes on one real `redis-server`, each serving
//! 10,000 cold keys in the background and a flood of new keys, while two
//! measured keys go where the fleet gate is weakest:
//!
//! * a key that turns hot mid-window: one request a second (cold: under
//!   its share on every instance) from 0.5 s into an epoch, then twice its
//!   budget, round robin over the instances, from 5.3 s;
//! * a key that moves: twice its budget on one instance from 2 s, then,
//!   from 12.7 s, on another that has never seen it.
//!
//! Each must stay within [`fleet_bound`] in every true 10 s window (the
//! budget plus what the other instances admit while their view is a round
//! stale), and each must still get most of its budget. The cold keys are
//! requested once a window each, far below their share: none may be
//! refused. The background and the flood come through a trusted proxy
//! (127.0.0.1, `X-Forwarded-For`, each key in a /24 of its own, so no
//! network budget is shared), on kept-alive connections; the measured keys
//! are peer addresses, each request on its own connection.
//!
//! The flood is paced at [`FLOOD_PER_SEC`] (the rate at which an earlier
//! flood loosened a key to 113-119 of 100, before cold keys stayed off
//! Redis); the test prints the rate it reached on this machine.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fleet::{
    at, busiest, client_runtime, drive, fleet_bound, next_epoch, per_epoch, redis_rtt, Client, Fleet, Pattern, BUDGET,
    MEASURING, N, REQUEST_TIMEOUT,
};
use crate::support::quickstart::quickstart_binary;
use crate::support::redis::RedisServer;

/// Cold keys per instance, each requested once a window.
const COLD_KEYS: u32 = 10_000;
/// New keys a second, over the fleet.
const FLOOD_PER_SEC: u32 = 14_000;
/// Kept-alive connections carrying the flood, per instance.
const FLOOD_CONNECTIONS: u32 = 2;
/// How long the background and the flood run, from the first epoch's start.
const LENGTH: Duration = Duration::from_secs(30);
/// The measured keys' traffic at twice the budget.
const HOT_FROM: Duration = Duration::from_millis(5_300);
const MOVE_AT: Duration = Duration::from_millis(12_700);
/// The least each measured key must get in its busiest window: a fleet
/// that refused it (or failed) would pass the bound trivially.
const SERVED_MIN: u64 = 90;

/// The instances' configuration beyond the fleet's: `[global] max_keys`
/// (past it, a key is counted in the gate's sketch), a store large enough
/// for the flood (past `[store] max_keys` a key would share an overflow
/// cell, which is not what these tests measure), and the proxy.
fn extra(global_max_keys: u32) -> String {
    format!(
        r#"max_keys = {global_max_keys}

[store]
max_keys = 2000000

[ip]
trusted_proxies = ["127.0.0.1/32"]
"#
    )
}

/// What a proxied stream of requests got.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    admitted: u64,
    refused: u64,
    errors: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.admitted += o.admitted;
        self.refused += o.refused;
        self.errors += o.errors;
    }
}

/// One response on a kept-alive connection: its status, once its head and
/// its `Content-Length` body are in.
async fn response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<u16> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]);
        let length: usize = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })?;
        if buf.len() >= end + 4 + length {
            return head.split(' ').nth(1)?.parse().ok();
        }
    }
}

/// `GET /public` through the trusted proxy on one kept-alive connection to
/// `target`: the `n`th request from `client(n)`, due `n / per_sec` after
/// `start` (sent at once when late), until `length` has passed.
async fn proxied(
    target: SocketAddr,
    start: tokio::time::Instant,
    length: Duration,
    per_sec: u32,
    client: impl Fn(u32) -> Ipv4Addr,
) -> Tally {
    let mut tally = Tally::default();
    let mut conn: Option<TcpStream> = None;
    let mut buf = Vec::with_capacity(4096);
    let every = Duration::from_secs(1) / per_sec;
    for n in 0.. {
        let due = start + every * n;
        if due.duration_since(start) >= length {
            break;
        }
        tokio::time::sleep_until(due).await;
        if conn.is_none() {
            conn = TcpStream::connect(target).await.ok();
        }
        let Some(stream) = conn.as_mut() else {
            tally.errors += 1;
            continue;
        };
        let head = format!(
            "GET /public HTTP/1.1\r\nHost: {target}\r\nX-Forwarded-For: {}\r\n\r\n",
            client(n)
        );
        let status = tokio::time::timeout(REQUEST_TIMEOUT, async {
            stream.write_all(head.as_bytes()).await.ok()?;
            response(stream, &mut buf).await
        })
        .await;
        match status {
            Ok(Some(200)) => tally.admitted += 1,
            Ok(Some(429)) => tally.refused += 1,
            _ => {
                tally.errors += 1;
                conn = None;
            }
        }
    }
    tally
}

/// Instance `i`'s `k`th cold key: a /24 of its own (10+i.x.y.0/24).
fn cold_key(i: u8, k: u32) -> Ipv4Addr {
    Ipv4Addr::new(10 + i, (k >> 8) as u8, k as u8, 1)
}

/// Flood connection `c`'s `n`th new key: a /24 of its own (100+c.x.y.0/24,
/// 65,536 per connection).
fn flood_key(c: u8, n: u32) -> Ipv4Addr {
    Ipv4Addr::new(100 + c, (n >> 8) as u8, n as u8, 1)
}

#[test]
fn the_fleet_limit_holds_beside_cold_keys_and_a_flood_of_new_ones() {
    // Tables large enough for the flood.
    busy_fleet("busy", &extra(400_000));
}

/// The same fleet, cold keys and flood, with tables that the flood fills
/// every epoch: the measured keys hold the same bound and get their budget,
/// and the cold keys (most of them past the tables too) are never refused.
#[test]
fn the_fleet_limit_holds_when_a_flood_of_new_keys_fills_the_tables() {
    // Each epoch's table holds 2,000 cold keys, the rest are counted in its
    // sketch. Before, a key past a full table was limited locally only,
    // and a key that turned hot after a flood got up to N times its budget
    // (201 of 100 measured from outside).
    busy_fleet("full", &extra(2_000));
}

fn busy_fleet(name: &str, extra: &str) {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let bin = quickstart_binary();
    let redis = RedisServer::start();
    let rtt = redis_rtt(redis.port);
    let bound = fleet_bound(N, rtt);
    let mut fleet = Fleet::start_urls(&bin, &vec![redis.url(); N], name, extra);
    let targets = fleet.addrs();
    let turns_hot = Client {
        name: "turns-hot".to_owned(),
        ip: Ipv4Addr::new(127, 0, 0, 50),
        pattern: Pattern::TurnsHot {
            quiet_from: Duration::from_millis(500),
            hot_from: HOT_FROM,
            length: LENGTH - HOT_FROM,
        },
        targets: targets.clone(),
    };
    // One key, on instance 0, then on instance 1.
    let moving = |pattern, target: SocketAddr| Client {
        name: "moving".to_owned(),
        ip: Ipv4Addr::new(127, 0, 0, 51),
        pattern,
        targets: vec![target],
    };
    let before_move = moving(
        Pattern::SteadyFor {
            start: Duration::from_secs(2),
            length: MOVE_AT - Duration::from_secs(2),
        },
        targets[0],
    );
    let after_move = moving(
        Pattern::SteadyFor {
            start: MOVE_AT,
            length: LENGTH - MOVE_AT,
        },
        targets[1],
    );
    let runtime = client_runtime();
    let epoch0 = next_epoch(Duration::from_millis(300));
    let (outcomes, cold, flood) = runtime.block_on(async {
        let start = tokio::time::Instant::from_std(epoch0);
        let mut cold = Vec::new();
        let mut flood = Vec::new();
        for (i, &target) in targets.iter().enumerate() {
            let i = i as u8;
            let per_sec = COLD_KEYS / super::fleet::WINDOW.as_secs() as u32;
            cold.push(tokio::spawn(proxied(target, start, LENGTH, per_sec, move |n| {
                cold_key(i, n % COLD_KEYS)
            })));
            for c in 0..FLOOD_CONNECTIONS as u8 {
                let c = i * FLOOD_CONNECTIONS as u8 + c;
                let per_sec = FLOOD_PER_SEC / (N as u32 * FLOOD_CONNECTIONS);
                flood.push(tokio::spawn(proxied(target, start, LENGTH, per_sec, move |n| {
                    flood_key(c, n)
                })));
            }
        }
        let measured: Vec<_> = [turns_hot.clone(), before_move, after_move]
            .into_iter()
            .map(|c| tokio::spawn(drive(c, epoch0)))
            .collect();
        let mut outcomes = Vec::new();
        for m in measured {
            outcomes.push(m.await.expect("a measured key's task"));
        }
        let (mut cold_tally, mut flood_tally) = (Tally::default(), Tally::default());
        for t in cold {
            cold_tally += t.await.expect("a cold keys' task");
        }
        for t in flood {
            flood_tally += t.await.expect("a flood task");
        }
        (outcomes, cold_tally, flood_tally)
    });
    let mut failures = fleet.problems();
    let mut moved = outcomes[1].admitted.clone();
    moved.extend(&outcomes[2].admitted);
    moved.sort();
    let measured = [
        (
            turns_hot.pattern.label(),
            &outcomes[0].admitted,
            outcomes[0].errors.len(),
        ),
        (
            format!(
                "2x on one instance from 2 s, on another from {:.1} s",
                MOVE_AT.as_secs_f64()
            ),
            &moved,
            outcomes[1].errors.len() + outcomes[2].errors.len(),
        ),
    ];
    println!(
        "{name} fleet of {N}: Redis PING rtt {rtt:?}, bound {bound} (budget {BUDGET}); cold keys {} admitted, {} refused, \
         {} errors; flood {} new keys ({:.0}/s, target {FLOOD_PER_SEC}/s), {} refused, {} errors",
        cold.admitted,
        cold.refused,
        cold.errors,
        flood.admitted + flood.refused,
        (flood.admitted + flood.refused) as f64 / LENGTH.as_secs_f64(),
        flood.refused,
        flood.errors,
    );
    for (name, (label, admitted, errors)) in ["turns-hot", "moving"].iter().zip(&measured) {
        let (most, when) = busiest(admitted);
        println!(
            "{name} ({label}): {} admitted, busiest window {most} at {}, per epoch {:?}, {errors} errors",
            admitted.len(),
            at(when),
            per_epoch(admitted)
        );
        if most > bound {
            failures.push(format!("{name}: busiest window {most} at {} > bound {bound}", at(when)));
        }
        if most < SERVED_MIN {
            failures.push(format!(
                "{name}: busiest window {most} < {SERVED_MIN}: not served its budget"
            ));
        }
        if *errors > 0 {
            failures.push(format!("{name}: {errors} requests failed"));
        }
    }
    // Once a window each, a tenth of their share: a good client never
    // notices the flood.
    if cold.refused > 0 || cold.errors > 0 {
        failures.push(format!(
            "cold keys: {} refused, {} errors (each asks once a window)",
            cold.refused, cold.errors
        ));
    }
    // The flood ran: at least a third of its pace on this machine.
    let flooded = flood.admitted + flood.refused;
    if flooded < u64::from(FLOOD_PER_SEC) * LENGTH.as_secs() / 3 {
        failures.push(format!("the flood did not run: {flooded} replies"));
    }
    assert!(
        failures.is_empty(),
        "the fleet limit does not hold on a busy fleet:\n  {}",
        failures.join("\n  ")
    );
}
