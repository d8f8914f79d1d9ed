//! `[global] on_outage` measured from outside: two fleets of four real
//! `quickstart` processes against one real `redis-server`, one fleet per
//! policy, one client key each offered twice the budget, while Redis goes
//! away twice for 20 s: stopped (SIGSTOP), then killed; or, in the second
//! test, answering with error replies: out of memory (`maxmemory` 1 under
//! `noeviction`), then read-only (a replica of a master that is not
//! there). The busiest true 10 s window inside each fault, and after Redis
//! is back; the stop-and-kill run's admitted times go to
//! `target/outage.csv` for `scripts/plot-outage`.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::fleet::{at, count_in, next_epoch, per_epoch, run_from, Client, Fleet, Pattern, BUDGET, N, WINDOW};
use crate::support::quickstart::quickstart_binary;
use crate::support::redis::RedisServer;

/// The faults, from the start of the run's first epoch.
const FIRST: (Duration, Duration) = (Duration::from_secs(12), Duration::from_secs(32));
const SECOND: (Duration, Duration) = (Duration::from_secs(46), Duration::from_secs(66));
/// The traffic: twice the budget from 1 s to 80 s.
const TRAFFIC: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(79));

/// A fault: its name, and what starts and ends it.
struct Fault {
    name: &'static str,
    begin: fn(&mut RedisServer),
    end: fn(&mut RedisServer),
}

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

/// Both policies through `faults` (the first from 12 to 32 s, the second
/// from 46 to 66 s): the busiest true window of each during each fault
/// and after it, checked against what each policy promises. `csv`: where
/// to write the admitted times, under the target directory.
fn outage(name: &str, faults: [Fault; 2], csv: Option<&str>) {
    let bin = quickstart_binary();
    let mut redis = RedisServer::start();
    let urls = vec![redis.url(); N];
    let local = Fleet::start_urls(&bin, &urls, &format!("{name}-local"), "on_outage = \"local\"\n");
    let share = Fleet::start_urls(&bin, &urls, &format!("{name}-share"), "on_outage = \"share\"\n");
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
    let names = [faults[0].name, faults[1].name];
    let faulty = std::thread::spawn(move || {
        let sleep_until = |t: Duration| {
            if let Some(d) = (epoch0 + t).checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        };
        for (fault, (from, to)) in faults.iter().zip([FIRST, SECOND]) {
            sleep_until(from);
            (fault.begin)(&mut redis);
            sleep_until(to);
            (fault.end)(&mut redis);
        }
        redis
    });
    let outcomes = run_from(clients, epoch0);
    let _redis = faulty.join().expect("the fault thread");

    // Windows inside each fault, from a second after it began (the gate
    // notices within two sync intervals plus a round timeout); windows
    // after Redis is back, from two seconds after (a round reconnects).
    let second = Duration::from_secs(1);
    let phases = [
        (names[0].to_owned(), FIRST.0 + second, FIRST.1),
        (format!("back after {}", names[0]), FIRST.1 + 2 * second, SECOND.0),
        (names[1].to_owned(), SECOND.0 + second, SECOND.1),
        (format!("back after {}", names[1]), SECOND.1 + 2 * second, TRAFFIC.1),
    ];
    let mut table = format!("{:<8}", "policy");
    for (phase, _, _) in &phases {
        table += &format!("{phase:>28}");
    }
    table += "\n";
    let mut busiest = Vec::new();
    for (policy, outcome) in ["local", "share"].iter().zip(&outcomes) {
        assert!(
            outcome.errors.is_empty(),
            "{policy}: {:?}",
            &outcome.errors[..outcome.errors.len().min(3)]
        );
        table += &format!("{policy:<8}");
        let row: Vec<(u64, Duration)> = phases
            .iter()
            .map(|&(_, from, to)| busiest_inside(&outcome.admitted, from, to))
            .collect();
        for (count, t) in &row {
            table += &format!("{:>28}", format!("{count} ({})", at(*t)));
        }
        table += &format!("\n  per epoch {:?}\n", per_epoch(&outcome.admitted));
        busiest.push(row);
    }
    println!("{name}: busiest true window (budget {BUDGET}, 2x offered, {N} instances each):\n{table}");
    if let Some(file) = csv {
        // The admitted times, for scripts/plot-outage (docs/global-outage.svg).
        let mut csv = String::from("policy,seconds\n");
        for (policy, outcome) in ["local", "share"].iter().zip(&outcomes) {
            for t in &outcome.admitted {
                csv += &format!("{policy},{:.3}\n", t.as_secs_f64());
            }
        }
        let exe = std::env::current_exe().expect("the path of the test binary");
        if let Some(target) = exe.ancestors().nth(3) {
            let path = target.join(file);
            std::fs::write(&path, csv).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        }
    }
    let (local, share) = (&busiest[0], &busiest[1]);
    // "local": each instance its local limit, so the fleet admits what is
    // offered (2x) while Redis is away.
    for phase in [0, 2] {
        assert!(
            local[phase].0 >= 150,
            "{name}: local during {}: {}",
            phases[phase].0,
            local[phase].0
        );
    }
    // "share": each instance a quarter of the rate and of the burst, so the
    // fleet holds about its budget (plus the bursts, and the edges).
    for phase in [0, 2] {
        assert!(
            share[phase].0 <= 125,
            "{name}: share during {}: {}",
            phases[phase].0,
            share[phase].0
        );
        assert!(
            share[phase].0 >= 80,
            "{name}: share during {} starved: {}",
            phases[phase].0,
            share[phase].0
        );
    }
    // Back: the fleet limit again, for both.
    for phase in [1, 3] {
        for (policy, row) in [("local", local), ("share", share)] {
            assert!(
                row[phase].0 <= BUDGET + 8,
                "{name}: {policy} {}: {}",
                phases[phase].0,
                row[phase].0
            );
        }
    }
}

#[test]
fn on_outage_share_holds_the_fleet_near_its_budget_while_redis_is_away() {
    outage(
        "away",
        [
            Fault {
                name: "stopped",
                begin: |r| r.pause(),
                end: |r| r.resume(),
            },
            Fault {
                name: "killed",
                begin: |r| r.kill(),
                end: |r| r.restart(),
            },
        ],
        Some("outage.csv"),
    );
}

/// Redis up but refusing every write: pushes fail, reads answer. The hot
/// key's part of each round fails, so it is decided locally (held to its
/// share with `"share"`), and its refused units are pushed once writes
/// succeed again.
#[test]
fn on_outage_share_holds_the_fleet_near_its_budget_while_redis_refuses_writes() {
    fn answered(r: &RedisServer, args: &[&str]) {
        let reply = r.cli(args);
        assert!(reply.trim() == "OK", "redis-cli {}: {reply:?}", args.join(" "));
    }
    outage(
        "errors",
        [
            Fault {
                name: "out of memory",
                begin: |r| {
                    answered(r, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
                    answered(r, &["CONFIG", "SET", "maxmemory", "1"]);
                },
                end: |r| answered(r, &["CONFIG", "SET", "maxmemory", "0"]),
            },
            Fault {
                name: "read-only",
                // A master on a port nothing listens on: the replica keeps
                // its data and serves reads (stale), and refuses writes.
                begin: |r| answered(r, &["REPLICAOF", "127.0.0.1", "1"]),
                end: |r| answered(r, &["REPLICAOF", "NO", "ONE"]),
            },
        ],
        None,
    );
}
