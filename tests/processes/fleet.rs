//! The fleet-wide limit measured from outside: real `quickstart` processes
//! sharing a real `redis-server`, real TCP clients, and the busiest TRUE
//! sliding window over the times the clients received their 200s.
//!
//! `tests/fleet/gate.rs` drives gates in one process with a manual clock. This
//! test takes nothing from inside the crate on trust. It starts its own
//! `redis-server` on a free loopback port and N = 4 OS processes of the
//! quickstart demo with one `[global]` section (600/min, burst 10, a 10 s
//! window, a 100 ms sync interval: a fleet budget of 100 per window), then
//! offers twice the budget over HTTP, round robin over the instances. Real
//! processes are the point: each instance has its own memory, wall clock
//! reading and sync loop with its real timing, and requests go through the
//! real HTTP stack and key extraction, as in a deployment. Nothing is
//! shared but Redis, so nothing in the measurement can lean on a shortcut
//! an in-process harness has.
//!
//! The demo keys `/public` by peer address, so each client binds its own
//! source address (127.0.0.x) and is an independent key. Several epoch
//! alignments run at once against the same fleet: steady 2x load starting
//! 0.5 s, 5 s, 8 s and 9.9 s into a wall-clock 10 s epoch, and an adversary
//! that idles until 8.5 s into an epoch, spends as fast as the instances
//! admit until the epoch ends, then keeps up 2x. For each client, every
//! admitted response counts: the busiest window is the most 200s received
//! in any `[t, t + 10 s)` (fixed epochs would hide an overshoot straddling
//! a boundary). It must stay within [`fleet_bound`]. A lone instance (a fleet
//! of one, its own key prefix) checks the other side: the gate must still
//! let a single instance admit its budget.
//!
//! The demo binary is an example, which `cargo test --test processes fleet::`
//! does not build: run `cargo build --example quickstart` first (a plain
//! `cargo test` builds it too). A missing or stale binary fails the test.
//!
//! The sweep for docs/global.md (N = 1, 2, 4, 8, writing
//! `target/fleet-sweep.csv`) is the ignored test:
//! `cargo test --test processes fleet:: -- --ignored`.

use crate::support::quickstart;
use crate::support::redis as redis_support;
use quickstart::quickstart_binary;

use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// The instances of the main test's fleet.
pub(super) const N: usize = 4;
/// `[global] window`, which is also the length of an epoch.
pub(super) const WINDOW: Duration = Duration::from_secs(10);
/// `[global] sync_interval`.
const SYNC: Duration = Duration::from_millis(100);
/// The profile's rate (600/min) per second.
const RATE_PER_SEC: f64 = 10.0;
/// The fleet budget: 600/min over the 10 s window.
pub(super) const BUDGET: u64 = 100;
/// What each client offers: twice the budget, spread over the instances.
const OFFERED_PER_SEC: u64 = 20;
/// The adversary's spending rate, well above what the instances admit
/// (each admits 10/s, plus its burst of 10).
const HARD_PER_SEC: u64 = 60;
/// Traffic per client.
const TRAFFIC: Duration = Duration::from_secs(35);
/// The least the lone instance must admit in its busiest window.
const LONE_MIN: u64 = 95;
/// The least the lone instance must admit in every full window after the
/// first: issue 26 item 9 asks for 95. Measured from outside it got 89-90
/// before dating its own units in the oldest slice, 93-94 while they were
/// taken off the sum only by the next round, and 97 since the sum releases
/// them at the quarter boundary and rounds run just before one.
const LONE_LEAN_MIN: u64 = 95;
/// Held by the tests whose bounds are tight against the machine's load (the
/// lone instance's 95, the relayed instance's round timeout) and by the one
/// that loads it most (a flood of new keys), so they never run side by side.
pub(super) static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// The fleet secret's variable and its value (32 bytes).
const SECRET_ENV: &str = "FLEET_TEST_SECRET";
const SECRET: &str = "fleet secret for the tests, 32 B";
const _: () = assert!(SECRET.len() == 32);
/// How long an instance may take to accept connections.
const STARTUP_DEADLINE: Duration = Duration::from_secs(30);
/// How long one request may take before it counts as an error.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The issue's bound on what a fleet of `n` admits in any 10 s window: the
/// budget, plus what each of the other `n - 1` instances can admit at the
/// profile's rate `r` while its view of the fleet total is stale (one sync
/// interval `S` plus a Redis round trip), plus 5 of slack for the
/// measurement itself:
///
/// `budget + (n - 1) * r * (S + rtt) + 5`, floored; 108 for n = 4 on
/// loopback.
///
/// It is tighter than docs/global.md's worst case, which also lets each
/// other instance spend a whole burst (`(n - 1) * b` more): this one says
/// the fleet holds its budget up to the sync lag.
pub(super) fn fleet_bound(n: usize, rtt: Duration) -> u64 {
    let stale = (SYNC + rtt).as_secs_f64();
    let lag = (n.saturating_sub(1)) as f64 * RATE_PER_SEC * stale;
    BUDGET + lag.floor() as u64 + 5
}

/// The fleet's configuration: only what the demo needs to start quietly (its
/// other routes are never called, but startup checks the profiles they
/// name, and warns of a `jwt` step without a `[jwt]` section).
fn config_toml(redis_url: &str, key_prefix: &str, extra: &str) -> String {
    format!(
        r#"default_profile = "fleet"

[jwt]
tier_claim = "ratelimit_tier"

[profiles.fleet]
rate = "600/min"
burst = 10

[profiles.standard]
rate = "120/min"

[profiles.exports]
rate = "60/min"

[global]
redis_url = "{redis_url}"
window = "10s"
sync_interval = "100ms"
key_prefix = "{key_prefix}"
key_secret_env = "{SECRET_ENV}"
{extra}"#
    )
}

// ---------------------------------------------------------------------------
// The demo binary
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// The fleet: processes, killed when dropped
// ---------------------------------------------------------------------------

struct Instance {
    addr: SocketAddr,
    child: Child,
    log: PathBuf,
}

/// Quickstart processes sharing one `[global]` section and key prefix. They
/// are killed when this is dropped, a panic included; the logs are kept on
/// a panic (their directory is printed) and removed otherwise.
pub(super) struct Fleet {
    name: String,
    instances: Vec<Instance>,
    dir: PathBuf,
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos();
    format!("{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}

impl Fleet {
    /// Starts `n` instances with the key prefix `fleet-<name>-<unique>` and
    /// waits until each accepts connections.
    fn start(bin: &Path, redis_url: &str, n: usize, name: &str) -> Fleet {
        Fleet::start_urls(bin, &vec![redis_url.to_owned(); n], name, "")
    }

    /// [`Fleet::start`], one instance per Redis URL (the same server, some
    /// through a relay), `extra` appended to the `[global]` section.
    pub(super) fn start_urls(bin: &Path, redis_urls: &[String], name: &str, extra: &str) -> Fleet {
        let n = redis_urls.len();
        let prefix = format!("fleet-{name}-{}", unique_suffix());
        let dir = std::env::temp_dir().join(format!("ratelimit-{prefix}"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut fleet = Fleet {
            name: name.to_owned(),
            instances: Vec::new(),
            dir,
        };
        for (i, redis_url) in redis_urls.iter().enumerate() {
            let config = fleet.dir.join(format!("fleet-{i}.toml"));
            std::fs::write(&config, config_toml(redis_url, &prefix, extra))
                .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
            // Port 0: the address is read from its startup line
            // (`wait_ready`).
            let addr = SocketAddr::from(([127, 0, 0, 1], 0));
            let log = fleet.dir.join(format!("instance-{i}.log"));
            let out = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
            let err = out.try_clone().expect("a second handle on the log file");
            let mut cmd = Command::new(bin);
            cmd.arg("--addr")
                .arg("127.0.0.1:0")
                .arg("--config")
                .arg(&config)
                .env(SECRET_ENV, SECRET)
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err);
            // Overrides from the caller's environment would change the limits.
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("RATELIMIT__") {
                    cmd.env_remove(key);
                }
            }
            let child = cmd.spawn().unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
            fleet.instances.push(Instance { addr, child, log });
        }
        for i in 0..n {
            fleet.wait_ready(i);
        }
        fleet
    }

    fn wait_ready(&mut self, i: usize) {
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            let instance = &mut self.instances[i];
            if instance.addr.port() == 0 {
                let log = read_log(&instance.log);
                if let Some(addr) = log.lines().find_map(quickstart::serving_addr) {
                    instance.addr = addr;
                }
            }
            if instance.addr.port() != 0
                && TcpStream::connect_timeout(&instance.addr, Duration::from_millis(200)).is_ok()
            {
                return;
            }
            let exited = instance.child.try_wait().expect("poll an instance");
            if let Some(status) = exited {
                panic!(
                    "fleet {} instance {i} ({}) exited before accepting connections ({status}); its output:\n{}",
                    self.name,
                    instance.addr,
                    read_log(&instance.log)
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "fleet {} instance {i} ({}) did not accept connections within {STARTUP_DEADLINE:?}; its output:\n{}",
                    self.name,
                    instance.addr,
                    read_log(&instance.log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn addrs(&self) -> Vec<SocketAddr> {
        self.instances.iter().map(|i| i.addr).collect()
    }

    /// What went wrong in the instances after a run: an instance that
    /// exited, and every WARN or ERROR line they logged (a degraded gate
    /// limits locally only, and the run would not measure the gate).
    pub(super) fn problems(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, instance) in self.instances.iter_mut().enumerate() {
            if let Ok(Some(status)) = instance.child.try_wait() {
                problems.push(format!(
                    "fleet {} instance {i} exited during the run ({status})",
                    self.name
                ));
            }
            for line in read_log(&instance.log).lines() {
                // Rationing (a slow round on a loaded machine: the busiest
                // keys are still read, and with this test's few keys, all of
                // them) leaves the gate in force; the limit check below
                // still judges the run. Everything else fails it.
                if line.contains("sync rounds run longer than half the interval") {
                    continue;
                }
                if line.contains(" WARN ") || line.contains(" ERROR ") {
                    problems.push(format!("fleet {} instance {i} logged: {line}", self.name));
                }
            }
        }
        problems
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for instance in &mut self.instances {
            let _ = instance.child.kill();
            let _ = instance.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("fleet {}: instance logs kept in {}", self.name, self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------
// Clients and their traffic
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
pub(super) enum Pattern {
    /// 2x the budget from `start` into the run's first epoch on.
    Steady { start: Duration },
    /// 2x the budget from `start` for `length`.
    SteadyFor { start: Duration, length: Duration },
    /// Idle until 8.5 s into the first epoch, `HARD_PER_SEC` until it ends,
    /// then 2x the budget.
    Adversarial,
    /// One request a second from `quiet_from` (a cold key), then 2x the
    /// budget from `hot_from` for `length`.
    TurnsHot {
        quiet_from: Duration,
        hot_from: Duration,
        length: Duration,
    },
}

const ADVERSARY_START: Duration = Duration::from_millis(8_500);

impl Pattern {
    fn steady_from_ms(ms: u64) -> Pattern {
        Pattern::Steady {
            start: Duration::from_millis(ms),
        }
    }

    pub(super) fn label(self) -> String {
        match self {
            Pattern::Steady { start } => format!("steady 2x from {:.1} s", start.as_secs_f64()),
            Pattern::SteadyFor { start, length } => format!(
                "steady 2x from {:.1} s for {:.0} s",
                start.as_secs_f64(),
                length.as_secs_f64()
            ),
            Pattern::Adversarial => format!(
                "idle to {:.1} s, {HARD_PER_SEC}/s to the epoch end, then 2x",
                ADVERSARY_START.as_secs_f64()
            ),
            Pattern::TurnsHot {
                quiet_from, hot_from, ..
            } => format!(
                "1/s from {:.1} s, 2x from {:.1} s",
                quiet_from.as_secs_f64(),
                hot_from.as_secs_f64()
            ),
        }
    }

    /// The send times, from the start of the run's first epoch: `TRAFFIC`
    /// long from the pattern's start.
    fn schedule(self) -> Vec<Duration> {
        let every = |per_sec: u64| Duration::from_nanos(1_000_000_000 / per_sec);
        let mut times = Vec::new();
        let mut length = TRAFFIC;
        let (start, mut t) = match self {
            Pattern::Steady { start } => (start, start),
            Pattern::SteadyFor { start, length: l } => {
                length = l;
                (start, start)
            }
            Pattern::TurnsHot {
                quiet_from,
                hot_from,
                length: l,
            } => {
                let mut t = quiet_from;
                while t < hot_from {
                    times.push(t);
                    t += Duration::from_secs(1);
                }
                length = l;
                (hot_from, hot_from)
            }
            Pattern::Adversarial => {
                let mut t = ADVERSARY_START;
                while t < WINDOW {
                    times.push(t);
                    t += every(HARD_PER_SEC);
                }
                (ADVERSARY_START, WINDOW)
            }
        };
        while t < start + length {
            times.push(t);
            t += every(OFFERED_PER_SEC);
        }
        times
    }
}

#[derive(Clone, Debug)]
pub(super) struct Client {
    pub(super) name: String,
    pub(super) ip: Ipv4Addr,
    pub(super) pattern: Pattern,
    pub(super) targets: Vec<SocketAddr>,
}

/// The main test's patterns, one source address each from 127.0.0.`first_ip`.
fn fleet_clients(fleet: &Fleet, first_ip: u8) -> Vec<Client> {
    let patterns = [
        ("steady-0.5", Pattern::steady_from_ms(500)),
        ("steady-5", Pattern::steady_from_ms(5_000)),
        ("steady-8", Pattern::steady_from_ms(8_000)),
        ("steady-9.9", Pattern::steady_from_ms(9_900)),
        ("adversary", Pattern::Adversarial),
    ];
    patterns
        .into_iter()
        .enumerate()
        .map(|(i, (name, pattern))| Client {
            name: name.to_owned(),
            ip: Ipv4Addr::new(127, 0, 0, first_ip + i as u8),
            pattern,
            targets: fleet.addrs(),
        })
        .collect()
}

#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// Receive times of the 200s, from the start of the first epoch, sorted.
    pub(super) admitted: Vec<Duration>,
    /// 429s whose detail says the fleet-wide limit is exhausted.
    fleet_rejected: u64,
    /// Other 429s (the instance's own limit).
    local_rejected: u64,
    pub(super) errors: Vec<String>,
    first_send: Duration,
    last_send: Duration,
}

pub(super) enum Reply {
    Admitted(Instant),
    FleetRejected,
    LocalRejected,
}

/// One `GET /public` from `ip` on its own connection. The receive time is
/// when the first bytes of the response arrived.
pub(super) async fn request(ip: Ipv4Addr, target: SocketAddr) -> Result<Reply, String> {
    let socket = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
    socket.set_reuseaddr(true).map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    socket
        .bind(SocketAddr::from((ip, 0)))
        .map_err(|e| format!("bind {ip}: {e}"))?;
    let mut stream = socket
        .connect(target)
        .await
        .map_err(|e| format!("connect {target}: {e}"))?;
    let head = format!("GET /public HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("write to {target}: {e}"))?;
    let mut response = Vec::with_capacity(1024);
    let mut received = None;
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read from {target}: {e}"))?;
        if n == 0 {
            break;
        }
        received.get_or_insert_with(Instant::now);
        response.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&response);
    let status = text.lines().next().unwrap_or_default();
    match (status.split(' ').nth(1), received) {
        (Some("200"), Some(at)) => Ok(Reply::Admitted(at)),
        (Some("429"), _) if text.contains("fleet-wide") => Ok(Reply::FleetRejected),
        (Some("429"), _) => Ok(Reply::LocalRejected),
        _ => Err(format!("{target}: unexpected response {status:?}")),
    }
}

/// Sends `client`'s schedule from `epoch0` (std and tokio views of the same
/// instant), each request on its own task, round robin over its targets.
pub(super) async fn drive(client: Client, epoch0: Instant) -> Outcome {
    let schedule = client.pattern.schedule();
    let start = tokio::time::Instant::from_std(epoch0);
    let mut tasks = tokio::task::JoinSet::new();
    for (k, at) in schedule.iter().enumerate() {
        tokio::time::sleep_until(start + *at).await;
        let target = client.targets[k % client.targets.len()];
        let ip = client.ip;
        tasks.spawn(async move {
            tokio::time::timeout(REQUEST_TIMEOUT, request(ip, target))
                .await
                .unwrap_or_else(|_| Err(format!("{target}: no response within {REQUEST_TIMEOUT:?}")))
        });
    }
    let mut outcome = Outcome {
        first_send: schedule.first().copied().unwrap_or_default(),
        last_send: schedule.last().copied().unwrap_or_default(),
        ..Outcome::default()
    };
    while let Some(result) = tasks.join_next().await {
        match result.expect("a request task panicked") {
            Ok(Reply::Admitted(at)) => outcome.admitted.push(at.saturating_duration_since(epoch0)),
            Ok(Reply::FleetRejected) => outcome.fleet_rejected += 1,
            Ok(Reply::LocalRejected) => outcome.local_rejected += 1,
            Err(e) => outcome.errors.push(e),
        }
    }
    outcome.admitted.sort();
    outcome
}

/// The start of the next wall-clock epoch (UNIX time / 10 s) at least
/// `margin` away, as an `Instant`.
pub(super) fn next_epoch(margin: Duration) -> Instant {
    let now = Instant::now();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos();
    let w = WINDOW.as_nanos();
    let mut until = Duration::from_nanos(u64::try_from((wall / w + 1) * w - wall).expect("under one window"));
    if until < margin {
        until += WINDOW;
    }
    now + until
}

/// Runs every client at once from the next epoch; the outcomes in order.
fn run(clients: Vec<Client>) -> Vec<Outcome> {
    run_from(clients, next_epoch(Duration::from_millis(300)))
}

/// The clients' runtime: two worker threads.
pub(super) fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the clients")
}

/// [`run`] from `epoch0`.
pub(super) fn run_from(clients: Vec<Client>, epoch0: Instant) -> Vec<Outcome> {
    let runtime = client_runtime();
    runtime.block_on(async move {
        let handles: Vec<_> = clients.into_iter().map(|c| tokio::spawn(drive(c, epoch0))).collect();
        let mut outcomes = Vec::new();
        for handle in handles {
            outcomes.push(handle.await.expect("a client task panicked"));
        }
        outcomes
    })
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

/// Admitted in `[from, from + WINDOW)`, over sorted times.
pub(super) fn count_in(times: &[Duration], from: Duration) -> u64 {
    let lo = times.partition_point(|t| *t < from);
    let hi = times.partition_point(|t| *t < from + WINDOW);
    (hi - lo) as u64
}

/// The busiest true sliding window: the most admitted in any
/// `[t, t + WINDOW)`, and its start. A window's count only rises when its
/// start reaches an admitted time, so the starts at admitted times are
/// enough.
pub(super) fn busiest(times: &[Duration]) -> (u64, Duration) {
    let mut best = (0, Duration::ZERO);
    let mut hi = 0;
    for (lo, &t) in times.iter().enumerate() {
        while hi < times.len() && times[hi] < t + WINDOW {
            hi += 1;
        }
        if (hi - lo) as u64 > best.0 {
            best = ((hi - lo) as u64, t);
        }
    }
    best
}

/// The leanest full window: the fewest admitted in any `[t, t + WINDOW)`
/// inside the client's traffic (`from` to `to`), and its start; `None` when
/// the traffic is shorter than a window. The count only falls just after a
/// window's start passes an admitted time or just after its end passes one,
/// so those starts (and `from`) are enough.
fn leanest(times: &[Duration], from: Duration, to: Duration) -> Option<(u64, Duration)> {
    let last = to.checked_sub(WINDOW).filter(|l| *l >= from)?;
    let just_after = Duration::from_nanos(1);
    std::iter::once(from)
        .chain(times.iter().map(|t| *t + just_after))
        .chain(
            times
                .iter()
                .filter_map(|t| t.checked_sub(WINDOW))
                .map(|t| t + just_after),
        )
        .filter(|t| (from..=last).contains(t))
        .map(|t| (count_in(times, t), t))
        .min_by_key(|(count, _)| *count)
}

/// Admitted per fixed epoch (the first epoch of the run is 0).
pub(super) fn per_epoch(times: &[Duration]) -> Vec<u64> {
    let epochs = times
        .last()
        .map_or(0, |t| (t.as_nanos() / WINDOW.as_nanos()) as usize + 1);
    let mut counts = vec![0; epochs];
    for t in times {
        counts[(t.as_nanos() / WINDOW.as_nanos()) as usize] += 1;
    }
    counts
}

/// `e<epoch>+<seconds into it>`.
pub(super) fn at(t: Duration) -> String {
    let w = WINDOW.as_nanos();
    let epoch = t.as_nanos() / w;
    let into = Duration::from_nanos((t.as_nanos() % w) as u64);
    format!("e{epoch}+{:.2}s", into.as_secs_f64())
}

struct Row {
    fleet: String,
    n: usize,
    client: Client,
    outcome: Outcome,
    busiest: (u64, Duration),
    leanest: Option<(u64, Duration)>,
}

fn measure(fleet: &Fleet, clients: &[Client], outcomes: Vec<Outcome>) -> Vec<Row> {
    clients
        .iter()
        .cloned()
        .zip(outcomes)
        .map(|(client, outcome)| {
            let busiest = busiest(&outcome.admitted);
            let leanest = leanest(&outcome.admitted, outcome.first_send, outcome.last_send);
            Row {
                fleet: fleet.name.clone(),
                n: fleet.instances.len(),
                client,
                outcome,
                busiest,
                leanest,
            }
        })
        .collect()
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6} {:>2} {:<11} {:<11} {:<52} {:>8} {:>9} {:>9} {:>6} {:>16} {:>16}",
        "fleet",
        "N",
        "client",
        "source",
        "pattern",
        "admitted",
        "fleet-429",
        "local-429",
        "errors",
        "busiest (at)",
        "leanest (at)"
    );
    for r in rows {
        let lean = r.leanest.map_or("-".to_owned(), |(c, t)| format!("{c} ({})", at(t)));
        let _ = writeln!(
            out,
            "{:<6} {:>2} {:<11} {:<11} {:<52} {:>8} {:>9} {:>9} {:>6} {:>16} {:>16}",
            r.fleet,
            r.n,
            r.client.name,
            r.client.ip.to_string(),
            r.client.pattern.label(),
            r.outcome.admitted.len(),
            r.outcome.fleet_rejected,
            r.outcome.local_rejected,
            r.outcome.errors.len(),
            format!("{} ({})", r.busiest.0, at(r.busiest.1)),
            lean
        );
    }
    let _ = writeln!(out, "admitted per fixed epoch:");
    for r in rows {
        let _ = writeln!(
            out,
            "  {:<6} {:<11} {:?}",
            r.fleet,
            r.client.name,
            per_epoch(&r.outcome.admitted)
        );
    }
    for r in rows.iter().filter(|r| !r.outcome.errors.is_empty()) {
        let _ = writeln!(
            out,
            "  {} errors, e.g.: {}",
            r.client.name,
            r.outcome.errors.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        );
    }
    out
}

/// The median round trip of a `PING` to the Redis server, for the bound.
pub(super) fn redis_rtt(port: u16) -> Duration {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis-server for PING");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let mut rtts: Vec<Duration> = (0..21)
        .map(|_| {
            let sent = Instant::now();
            stream.write_all(b"PING\r\n").expect("send PING");
            let mut reply = [0u8; 7];
            stream.read_exact(&mut reply).expect("read +PONG");
            assert_eq!(&reply, b"+PONG\r\n", "redis-server's reply to PING");
            sent.elapsed()
        })
        .collect();
    rtts.sort();
    rtts[rtts.len() / 2]
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// N = 4 instances, five client keys with different epoch alignments, and a
/// lone instance, all at once against one Redis.
#[test]
fn fleet_limit_holds_in_a_true_sliding_window() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let began = Instant::now();
    let bin = quickstart_binary();
    let redis = RedisServer::start();
    let rtt = redis_rtt(redis.port);
    let bound = fleet_bound(N, rtt);

    let spawned = Instant::now();
    let mut fleet = Fleet::start(&bin, &redis.url(), N, "four");
    let mut lone = Fleet::start(&bin, &redis.url(), 1, "lone");
    let startup = spawned.elapsed();

    let fleet_clients = fleet_clients(&fleet, 11);
    let lone_clients = vec![
        Client {
            name: "lone".to_owned(),
            ip: Ipv4Addr::new(127, 0, 0, 20),
            pattern: Pattern::steady_from_ms(3_000),
            targets: lone.addrs(),
        },
        // Issue 26, item 9: from 8 s into an epoch its leanest window after
        // the first was 90.
        Client {
            name: "lone-8".to_owned(),
            ip: Ipv4Addr::new(127, 0, 0, 21),
            pattern: Pattern::steady_from_ms(8_000),
            targets: lone.addrs(),
        },
    ];
    let mut outcomes = run(fleet_clients.iter().chain(&lone_clients).cloned().collect());
    let lone_outcomes = outcomes.split_off(fleet_clients.len());
    let mut rows = measure(&fleet, &fleet_clients, outcomes);
    rows.extend(measure(&lone, &lone_clients, lone_outcomes));

    let mut failures = fleet.problems();
    failures.extend(lone.problems());
    for r in &rows {
        if !r.outcome.errors.is_empty() {
            failures.push(format!("{}: {} requests failed", r.client.name, r.outcome.errors.len()));
        }
        if r.fleet == "lone" {
            if r.busiest.0 < LONE_MIN {
                failures.push(format!(
                    "lone instance: busiest window {} < {LONE_MIN} (budget {BUDGET})",
                    r.busiest.0
                ));
            }
            // Every full window after the first (the first holds the burst).
            let after_first = leanest(&r.outcome.admitted, r.outcome.first_send + WINDOW, r.outcome.last_send);
            println!("{}: leanest window after the first {after_first:?}", r.client.name);
            if let Some((lean, t)) = after_first.filter(|(lean, _)| *lean < LONE_LEAN_MIN) {
                failures.push(format!(
                    "{} (lone instance): leanest window after the first {lean} at {} < {LONE_LEAN_MIN}",
                    r.client.name,
                    at(t)
                ));
            }
            if r.busiest.0 > BUDGET {
                failures.push(format!(
                    "{} (lone instance): busiest window {} > {BUDGET}",
                    r.client.name, r.busiest.0
                ));
            }
        } else if r.busiest.0 > bound {
            failures.push(format!(
                "{} ({}): busiest window {} at {} > bound {bound}",
                r.client.name,
                r.client.pattern.label(),
                r.busiest.0,
                at(r.busiest.1)
            ));
        }
    }
    println!(
        "fleet of {N} + a lone instance: start-up {:.2} s, Redis PING rtt {rtt:?}, bound {bound} \
         (fleet_bound), lone minimum {LONE_MIN}, run {:.1} s in all",
        startup.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    println!("{}", table(&rows));
    assert!(
        failures.is_empty(),
        "the fleet limit does not hold:\n  {}",
        failures.join("\n  ")
    );
}

/// The measurement for docs/global.md: the same client patterns against
/// fleets of 1, 2, 4 and 8 instances, one after the other, into
/// `target/fleet-sweep.csv` (N, pattern, busiest), the pattern named as in
/// the tables (`steady-0.5` ... `adversary`).
#[test]
#[ignore = "measurement for docs/global.md: cargo test --test processes fleet:: -- --ignored"]
fn sweep_fleet_sizes() {
    let bin = quickstart_binary();
    let redis = RedisServer::start();
    let rtt = redis_rtt(redis.port);
    let mut csv = String::from("n,pattern,busiest\n");
    let mut problems = Vec::new();
    for n in [1, 2, 4, 8] {
        let mut fleet = Fleet::start(&bin, &redis.url(), n, &format!("n{n}"));
        let clients = fleet_clients(&fleet, 11);
        let outcomes = run(clients.clone());
        let rows = measure(&fleet, &clients, outcomes);
        problems.extend(fleet.problems());
        println!(
            "N = {n}, bound {} (fleet_bound):\n{}",
            fleet_bound(n, rtt),
            table(&rows)
        );
        for r in &rows {
            let _ = writeln!(csv, "{n},{},{}", r.client.name, r.busiest.0);
            if !r.outcome.errors.is_empty() {
                problems.push(format!(
                    "N = {n} {}: {} requests failed",
                    r.client.name,
                    r.outcome.errors.len()
                ));
            }
        }
    }
    let exe = std::env::current_exe().expect("the path of the test binary");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test binary lives in target/<profile>/deps/");
    let path = target.join("fleet-sweep.csv");
    std::fs::write(&path, &csv).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    println!("wrote {}", path.display());
    assert!(
        problems.is_empty(),
        "the sweep is not a clean measurement:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------
// Issue 26, item 5: rationed reads
// ---------------------------------------------------------------------------

/// Each way, between the relayed instance and Redis.
const RELAY_DELAY: Duration = Duration::from_millis(60);
/// Flood keys on the relayed instance: more than the 256 keys a rationed
/// round still reads.
const FLOOD_KEYS: usize = 300;
/// Each flood key's rate: under its budget (never refused), and more than a
/// unit per round of the relayed instance (100 ms plus a 120 ms round).
const FLOOD_PER_SEC: u64 = 6;
/// The hot key's traffic.
const HOT_TRAFFIC: Duration = Duration::from_secs(24);

/// One flood key: `GET /public` from `ip` to `target` on one kept-alive
/// connection, `FLOOD_PER_SEC` a second from `start` for `length` (a
/// request after the last reply, late ticks skipped). Returns the replies.
async fn flood(ip: Ipv4Addr, target: SocketAddr, start: tokio::time::Instant, length: Duration) -> u64 {
    let mut ticks = tokio::time::interval_at(start, Duration::from_nanos(1_000_000_000 / FLOOD_PER_SEC));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut replies = 0;
    let mut conn: Option<tokio::net::TcpStream> = None;
    let mut buf = Vec::with_capacity(4096);
    while start.elapsed() < length {
        ticks.tick().await;
        if conn.is_none() {
            let Ok(socket) = TcpSocket::new_v4() else { continue };
            if socket.bind(SocketAddr::from((ip, 0))).is_err() {
                continue;
            }
            conn = socket.connect(target).await.ok();
        }
        let Some(stream) = conn.as_mut() else { continue };
        let head = format!("GET /public HTTP/1.1\r\nHost: {target}\r\n\r\n");
        let ok = tokio::time::timeout(REQUEST_TIMEOUT, async {
            stream.write_all(head.as_bytes()).await.ok()?;
            buf.clear();
            let mut chunk = [0u8; 2048];
            loop {
                let n = stream.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                let Some(end) = text.find("\r\n\r\n") else { continue };
                let length: usize = text[..end].lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })?;
                if buf.len() >= end + 4 + length {
                    return Some(());
                }
            }
        })
        .await;
        match ok {
            Ok(Some(())) => replies += 1,
            _ => conn = None,
        }
    }
    replies
}

/// Issue 26, item 5, from outside: two instances on one `redis-server`, the
/// second behind a relay adding 60 ms each way (its rounds take more than
/// half the 100 ms interval, so its reads are rationed), and 300 keys on it
/// pushing more units per round than the hot key, which is offered twice
/// its budget round robin over both instances, so it is refused half the
/// time (and, refused, pushes nothing). Its busiest true window must stay
/// within its budget plus the staleness term of the relayed instance:
/// `budget + r * (S + 2 * rtt) + 5` (its rounds run every `S` plus a round
/// trip, and its pushes land a round trip later). Before, the refused key
/// fell out of the ration, the relayed instance stopped seeing the other's
/// units, and admitted what it thought was left.
#[test]
fn a_rationed_instance_still_holds_a_refused_key_to_its_budget() {
    // A measurement of timing: never beside the busy fleet's flood, which
    // takes both cores (a CI run had this round's replies miss the 250 ms
    // timeout then).
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let bin = quickstart_binary();
    let redis = RedisServer::start();
    let relay = crate::support::relay::Relay::start(redis.port, RELAY_DELAY);
    let rtt = redis_rtt(relay.port);
    let stale = (SYNC + rtt * 2).as_secs_f64();
    let bound = BUDGET + (RATE_PER_SEC * stale).floor() as u64 + 5;
    // A 120 ms link: the timeout an operator would give it, several round
    // trips (the default 250 ms is two). Rounds still run longer than half
    // the interval, so reads are still rationed.
    let mut fleet = Fleet::start_urls(&bin, &[redis.url(), relay.url()], "relayed", "timeout = \"1s\"\n");
    let relayed = fleet.instances[1].addr;
    let hot = Client {
        name: "hot".to_owned(),
        ip: Ipv4Addr::new(127, 0, 0, 40),
        pattern: Pattern::SteadyFor {
            start: Duration::from_secs(3),
            length: HOT_TRAFFIC,
        },
        targets: fleet.addrs(),
    };
    let runtime = client_runtime();
    let epoch0 = next_epoch(Duration::from_millis(300));
    let flood_for = HOT_TRAFFIC + Duration::from_secs(4);
    let (outcome, replies) = runtime.block_on(async {
        let start = tokio::time::Instant::from_std(epoch0);
        let floods: Vec<_> = (0..FLOOD_KEYS)
            .map(|i| {
                // Each in a /24 of its own: independent keys, no network budget shared.
                let ip = Ipv4Addr::new(127, 10 + (i / 250) as u8, (i % 250) as u8, 1);
                tokio::spawn(flood(ip, relayed, start, flood_for))
            })
            .collect();
        let outcome = tokio::spawn(drive(hot.clone(), epoch0))
            .await
            .expect("the hot key's task");
        let mut replies = 0;
        for f in floods {
            replies += f.await.expect("a flood task");
        }
        (outcome, replies)
    });
    let rows = measure(&fleet, std::slice::from_ref(&hot), vec![outcome]);
    let mut failures = fleet.problems();
    let r = &rows[0];
    println!(
        "relayed fleet: Redis PING rtt through the relay {rtt:?}, bound {bound}, {FLOOD_KEYS} flood keys, {replies} flood replies ({:.0}/s)",
        replies as f64 / flood_for.as_secs_f64()
    );
    println!("{}", table(&rows));
    if !r.outcome.errors.is_empty() {
        failures.push(format!("hot: {} requests failed", r.outcome.errors.len()));
    }
    if r.busiest.0 > bound {
        failures.push(format!(
            "hot key: busiest window {} at {} > bound {bound}",
            r.busiest.0,
            at(r.busiest.1)
        ));
    }
    // The flood really was more than a round's ration of keys, each busier
    // than the hot key: at least one reply a second per key.
    assert!(
        replies >= FLOOD_KEYS as u64 * flood_for.as_secs(),
        "the flood did not run: {replies} replies"
    );
    assert!(
        failures.is_empty(),
        "the fleet limit does not hold while reads are rationed:\n  {}",
        failures.join("\n  ")
    );
}
