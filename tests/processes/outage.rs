//! `[global] on_outage` measured from outside: two fleets of four real
//! `quickstart` processes against one real `redis-server`, one fleet per
//! policy, one client key each offered twice the budget, while Redis is
//! stopped (SIGSTOP) for 20 s and, later, killed for 20 s. The busiest true
//! 10 s window inside each outage, and after Redis is back; the admitted
//! times go to `target/outage.csv` for `scripts/plot-outage`.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::fleet::{at, count_in, next_epoch, per_epoch, run_from, Client, Fleet, Pattern, BUDGET, N, WINDOW};
use crate::support::quickstart::quickstart_binary;
use crate::support::redis::RedisServer;

/// The faults, from the start of the run's first epoch.
const STOP: (Duration, Duration) = (Duration::from_secs(12), Duration::from_secs(32));
const KILL: (Duration, Duration) = (Duration::from_secs(46), Duration::from_secs(66));
/// The traffic: twice the budget from 1 s to 80 s.
const TRAFFIC: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(79));

/// The busiest window `[t, t + WINDOW)` over `times` among starts in
/// `[from, to - WINDOW]` (windows inside `from..to`).
fn busiest_inside(times: &[Duration], from: Duration, to: Duration) -> (u64, Duration) {
    let last = to - WINDOW;
    std::iter::once(from)
        .chain(times.iter().copied())
        .filter(|t| (from..=last).contains(t))
        .map(|t| (count_in(times, t), t))
        .max_by_key(|(c, _)| *c)
        .unwrap_or((0, from))
}

#[test]
fn on_outage_share_holds_the_fleet_near_its_budget_while_redis_is_away() {
    let bin = quickstart_binary();
    let mut redis = RedisServer::start();
    let urls = vec![redis.url(); N];
    let local = Fleet::start_urls(&bin, &urls, "local", "on_outage = \"local\"\n");
    let share = Fleet::start_urls(&bin, &urls, "share", "on_outage = \"share\"\n");
    let pattern = Pattern::SteadyFor {
        start: TRAFFIC.0,
        length: TRAFFIC.1 - TRAFFIC.0,
    };
    let clients = vec![
        Client {
            name: "local".to_owned(),
            ip: Ipv4Addr::new(127, 0, 0, 60),
            pattern,
            targets: local.addrs(),
        },
        Client {
            name: "share".to_owned(),
            ip: Ipv4Addr::new(127, 0, 0, 61),
            pattern,
            targets: share.addrs(),
        },
    ];
    let epoch0 = next_epoch(Duration::from_millis(300));
    let faults = std::thread::spawn(move || {
        let sleep_until = |t: Duration| {
            if let Some(d) = (epoch0 + t).checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        };
        sleep_until(STOP.0);
        redis.pause();
        sleep_until(STOP.1);
        redis.resume();
        sleep_until(KILL.0);
        redis.kill();
        sleep_until(KILL.1);
        redis.restart();
        redis
    });
    let outcomes = run_from(clients, epoch0);
    let _redis = faults.join().expect("the fault thread");

    // Windows inside each outage, from a second after it began (the gate
    // notices within two sync intervals plus a round timeout); windows
    // after Redis is back, from two seconds after (a round reconnects).
    let second = Duration::from_secs(1);
    let phases = [
        ("stopped", STOP.0 + second, STOP.1),
        ("back after stop", STOP.1 + 2 * second, KILL.0),
        ("killed", KILL.0 + second, KILL.1),
        ("back after kill", KILL.1 + 2 * second, TRAFFIC.1),
    ];
    let mut table = format!("{:<8}", "policy");
    for (name, _, _) in &phases {
        table += &format!("{name:>24}");
    }
    table += "\n";
    let mut busiest = Vec::new();
    for (name, outcome) in ["local", "share"].iter().zip(&outcomes) {
        assert!(
            outcome.errors.is_empty(),
            "{name}: {:?}",
            &outcome.errors[..outcome.errors.len().min(3)]
        );
        table += &format!("{name:<8}");
        let row: Vec<(u64, Duration)> = phases
            .iter()
            .map(|&(_, from, to)| busiest_inside(&outcome.admitted, from, to))
            .collect();
        for (count, t) in &row {
            table += &format!("{:>24}", format!("{count} ({})", at(*t)));
        }
        table += &format!("\n  per epoch {:?}\n", per_epoch(&outcome.admitted));
        busiest.push(row);
    }
    println!("busiest true window (budget {BUDGET}, 2x offered, {N} instances each):\n{table}");
    // The admitted times, for scripts/plot-outage (docs/global-outage.svg).
    let mut csv = String::from("policy,seconds\n");
    for (name, outcome) in ["local", "share"].iter().zip(&outcomes) {
        for t in &outcome.admitted {
            csv += &format!("{name},{:.3}\n", t.as_secs_f64());
        }
    }
    let exe = std::env::current_exe().expect("the path of the test binary");
    if let Some(target) = exe.ancestors().nth(3) {
        let path = target.join("outage.csv");
        std::fs::write(&path, csv).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
    let (local, share) = (&busiest[0], &busiest[1]);
    // "local": each instance its local limit, so the fleet admits what is
    // offered (2x) while Redis is away.
    for phase in [0, 2] {
        assert!(
            local[phase].0 >= 150,
            "local during {}: {}",
            phases[phase].0,
            local[phase].0
        );
    }
    // "share": each instance a quarter of the rate and of the burst, so the
    // fleet holds about its budget (plus the bursts, and the edges).
    for phase in [0, 2] {
        assert!(
            share[phase].0 <= 125,
            "share during {}: {}",
            phases[phase].0,
            share[phase].0
        );
        assert!(
            share[phase].0 >= 80,
            "share during {} starved: {}",
            phases[phase].0,
            share[phase].0
        );
    }
    // Back: the fleet limit again, for both.
    for phase in [1, 3] {
        for (name, row) in [("local", local), ("share", share)] {
            assert!(
                row[phase].0 <= BUDGET + 8,
                "{name} {}: {}",
                phases[phase].0,
                row[phase].0
            );
        }
    }
}
