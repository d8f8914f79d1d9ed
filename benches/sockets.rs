//! What a real server pays for the limiter: one server process (axum 0.8,
//! `axum::serve` with the peer address), four routes answering a 2-byte
//! body, and Debian's `wrk` on each route in interleaved rounds, printing
//! each route's requests per second as a ratio to the bare route (median,
//! with the min-max of the rounds beside it) for both tokio runtimes and
//! with one client key and with 10,000.
//!
//! Beside the ratio of requests per second, each route's server CPU time
//! per request (every thread of the server process, from
//! `/proc/PID/task/*/schedstat`, in nanoseconds) and its ratio to the bare
//! route's: on a machine where `wrk` and the server share the cores, the
//! throughput of one round moves with the scheduler (a ratio spans 0.6 to
//! 1.2 over rounds), while the CPU time the server spends on a request
//! does not, and it is what a server that is the bottleneck loses.
//!
//! `cargo bench --bench sockets` (needs `wrk`: `apt-get install wrk`).
//! `SOCKETS_BENCH_ROUNDS` (default 5) and `SOCKETS_BENCH_SECONDS` (default
//! 3) set the rounds and the length of one `wrk` run; `SOCKETS_BENCH_ONLY`
//! (`multi` or `current`) runs one runtime. Every request should be
//! admitted: the `refused` column counts those that were not (and socket
//! errors), which a preempted worker can cause (see `CONFIG`).
//!
//! The routes:
//!
//! * `/bare`: the handler alone.
//! * `/headers`: the handler's response with the three draft-06 headers
//!   the limiter writes (`RateLimit-Limit`, `-Remaining`, `-Reset`,
//!   prebuilt values) and no decision: what the headers alone cost a real
//!   server (their insertion and hyper's encoding of them), the floor under
//!   the limited routes.
//! * `/attr`: `#[rate_limit(key = ip, resolve = [default])]`, the runtime as
//!   the router's state.
//! * `/layer`: the same rule through `RateLimitLayer`.
//! * `/governor`: tower_governor's `GovernorLayer` with `use_headers()`,
//!   keyed by `SmartIpKeyExtractor` (the forwarded address, else the peer).
//!
//! With one key every request comes from 127.0.0.1 (one cell, shared by
//! every connection and both worker threads, as in tower_governor). With
//! 10,000 keys a `wrk` script sends `X-Forwarded-For` from 10,000 addresses
//! (each in its own /24), and the server trusts loopback as a proxy, so the
//! limiter and tower_governor key by the same addresses.
//!
//! Run under `cargo test --benches` (no `--bench` argument), it is a smoke
//! test: one server per runtime, each route asked once over a socket, its
//! status and headers checked, without `wrk`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::rate_limit;

/// Never limits within a run, with the numbers of a real profile: the
/// bucket refills every microsecond (ten times one key's request rate
/// here) and holds 1,000, so a worker preempted for under a millisecond
/// between reading the clock and charging the cell (its reading then lags
/// the cell) is still admitted. The headers' numbers stay below 1,024, as
/// most profiles' do (the limiter writes those without allocating).
/// tower_governor gets the same numbers.
const CONFIG: &str = r#"
default_profile = "bench"

[profiles.bench]
rate = "1000000/s"
burst = 1000

[ip]
trusted_proxies = ["127.0.0.1/32"]
"#;

const ROUTES: [&str; 5] = ["/bare", "/headers", "/attr", "/layer", "/governor"];
const KEYS: [u32; 2] = [1, 10_000];

async fn bare() -> &'static str {
    "ok"
}

/// `bare` with the three headers a limited route writes, and no decision.
async fn headers_only() -> impl axum::response::IntoResponse {
    use ratelimit::axum::{RATELIMIT_LIMIT, RATELIMIT_REMAINING, RATELIMIT_RESET};
    let value = http::HeaderValue::from_static;
    (
        [
            (RATELIMIT_LIMIT.clone(), value("1000")),
            (RATELIMIT_REMAINING.clone(), value("999")),
            (RATELIMIT_RESET.clone(), value("1")),
        ],
        "ok",
    )
}

#[rate_limit(key = ip, resolve = [default], name = "attr")]
async fn attr() -> &'static str {
    "ok"
}

#[rate_limit(key = ip, resolve = [default], name = "layer", layer)]
async fn via_layer() -> &'static str {
    "ok"
}

async fn app() -> Router {
    let config = Config::from_toml_str(CONFIG).expect("bench config");
    let limiter = RateLimit::from_config(config).await.expect("bench runtime");
    let governor = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(1_000)
        .burst_size(1_000)
        .key_extractor(tower_governor::key_extractor::SmartIpKeyExtractor)
        .use_headers()
        .finish()
        .expect("governor config");
    Router::new()
        .route("/bare", get(bare))
        .route("/headers", get(headers_only))
        .merge(Router::new().route("/attr", get(attr)).with_state(limiter.clone()))
        .merge(Router::new().route("/layer", get(via_layer)).layer(limiter.layer()))
        .merge(
            Router::new()
                .route("/governor", get(bare))
                .layer(tower_governor::GovernorLayer::new(governor)),
        )
}

/// The server process: serves `app()` on a free loopback port with the
/// runtime `flavor`, printing the port on its first line of stdout.
fn serve(flavor: &str) {
    let rt = match flavor {
        "current" => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
    .expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        std::io::stdout().flush().expect("stdout");
        axum::serve(
            listener,
            app().await.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
}

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(flavor: &str) -> Server {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .env("SOCKETS_BENCH_SERVE", flavor)
            .stdout(Stdio::piped())
            .spawn()
            .expect("server process");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("server's port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("server printed {line:?}"));
        Server { child, port }
    }
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request over a fresh connection: the status line and the headers.
fn get_once(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n").expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out.to_ascii_lowercase()
}

fn smoke() {
    for flavor in ["multi", "current"] {
        let server = Server::start(flavor);
        for route in ROUTES {
            let response = get_once(server.port, route);
            assert!(response.starts_with("http/1.1 200"), "{flavor} {route}: {response}");
            if route != "/bare" {
                // tower_governor's use_headers() writes x-ratelimit-*; the
                // limiter the draft's ratelimit-*: both say the limit.
                assert!(response.contains("ratelimit-limit"), "{flavor} {route}: {response}");
            }
        }
    }
    println!("sockets bench (smoke): every route answers 200 with its headers, both runtimes");
}

/// The `wrk` script of the 10,000-key runs: each request from the next of
/// 10,000 addresses, one per /24.
fn keys_script() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("sockets-bench-{}.lua", std::process::id()));
    std::fs::write(
        &path,
        r#"
-- Every request made once, up front: formatting one per request made
-- wrk slower than the server.
local requests = {}
init = function(args)
  for i = 0, 9999 do
    wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.1", math.floor(i / 256), i % 256)
    requests[i] = wrk.format(nil)
  end
end
local n = 0
request = function()
  n = (n + 1) % 10000
  return requests[n]
end
"#,
    )
    .expect("wrk script");
    path
}

/// One `wrk` run: requests per second, the server's CPU time per request,
/// and how many were refused (or failed at the socket).
struct Run {
    rps: f64,
    cpu_ns: f64,
    refused: u64,
}

/// CPU time the process `pid` has run, every thread's, in nanoseconds
/// (`/proc/PID/task/TID/schedstat`: its first field; a thread that exited
/// between the listing and the read is left out).
fn cpu_ns(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task (Linux)");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Runs `wrk` on `route` for `seconds`, against the server `pid`.
fn wrk(pid: u32, port: u16, route: &str, seconds: u32, script: Option<&std::path::Path>) -> Run {
    let mut cmd = Command::new("wrk");
    cmd.args(["-t1", "-c32", &format!("-d{seconds}s")]);
    if let Some(script) = script {
        cmd.arg("-s").arg(script);
    }
    let cpu_before = cpu_ns(pid);
    let out = cmd
        .arg(format!("http://127.0.0.1:{port}{route}"))
        .output()
        .expect("wrk (apt-get install wrk)");
    // (A thread that exited during the run takes its time with it.)
    let cpu = cpu_ns(pid).saturating_sub(cpu_before);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let number = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(|v| v.split_whitespace().next().unwrap_or("").parse::<f64>())
    };
    let rps = match number("Requests/sec:") {
        Some(Ok(v)) => v,
        _ => panic!("no Requests/sec in wrk's output:\n{text}"),
    };
    // "Socket errors: connect 0, read 0, write 0, timeout 0": any of them.
    let socket_errors: u64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Socket errors:"))
        .map_or(0, |l| {
            l.split(',')
                .filter_map(|f| f.split_whitespace().last()?.parse::<u64>().ok())
                .sum()
        });
    let refused = number("Non-2xx or 3xx responses:").and_then(Result::ok).unwrap_or(0.0) as u64 + socket_errors;
    // "  123456 requests in 3.00s, 9.8MB read"
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in ")?.0.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no request count in wrk's output:\n{text}"));
    Run {
        rps,
        cpu_ns: cpu as f64 / requests.max(1.0),
        refused,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median of `v`, its least and its greatest.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    (median(&mut v), lo, hi)
}

fn bench() {
    let rounds: usize = std::env::var("SOCKETS_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let seconds: u32 = std::env::var("SOCKETS_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("SOCKETS_BENCH_ONLY").ok();
    let script = keys_script();
    println!("wrk -t1 -c32 -d{seconds}s per route, {rounds} interleaved rounds; ratio = req/s / bare's req/s in the same round;");
    println!(
        "cpu/req = the server's CPU time per request (all its threads), cost = cpu/req / bare's in the same round"
    );
    for flavor in ["multi", "current"] {
        if only.as_deref().is_some_and(|o| o != flavor) {
            continue;
        }
        let server = Server::start(flavor);
        for keys in KEYS {
            let script = (keys > 1).then_some(script.as_path());
            // Warm up: connections, the keys' cells, the allocator.
            for route in ROUTES {
                wrk(server.pid(), server.port, route, 1, script);
            }
            let mut rps = vec![Vec::new(); ROUTES.len()];
            let mut cpu = vec![Vec::new(); ROUTES.len()];
            let mut refused = [0u64; ROUTES.len()];
            for round in 0..rounds {
                // Each round starts at another route: none always runs
                // first (or last) after the machine's pauses.
                for i in 0..ROUTES.len() {
                    let r = (i + round) % ROUTES.len();
                    let run = wrk(server.pid(), server.port, ROUTES[r], seconds, script);
                    rps[r].push(run.rps);
                    cpu[r].push(run.cpu_ns);
                    refused[r] += run.refused;
                }
            }
            println!(
                "\n{flavor}-thread runtime, {keys} client key{}:",
                if keys > 1 { "s" } else { "" }
            );
            println!(
                "  {:<10} {:>10} {:>7} {:>13} {:>8} {:>6} {:>13} {:>8}",
                "route", "req/s", "ratio", "min-max", "cpu/req", "cost", "min-max", "refused"
            );
            let mut ratios = [0f64; ROUTES.len()];
            for (r, route) in ROUTES.iter().enumerate() {
                let (ratio, lo, hi) = spread(rps[r].iter().zip(&rps[0]).map(|(x, b)| x / b).collect());
                ratios[r] = ratio;
                let (cost, cost_lo, cost_hi) = spread(cpu[r].iter().zip(&cpu[0]).map(|(x, b)| x / b).collect());
                let req = median(&mut rps[r].clone());
                let ns = median(&mut cpu[r].clone());
                println!(
                    "  {route:<10} {req:>10.0} {ratio:>7.3} {lo:>6.3}-{hi:.3} {ns:>6.0}ns {cost:>6.3} {cost_lo:>6.3}-{cost_hi:.3} {:>8}",
                    refused[r]
                );
            }
            verdicts(&ratios);
        }
    }
    let _ = std::fs::remove_file(script);
}

/// The targets (issue 28) against one table's median ratios, in
/// `ROUTES` order, and the floor the headers alone set.
fn verdicts(ratios: &[f64; ROUTES.len()]) {
    let [_, headers, attr, layer, governor] = *ratios;
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!(
        "  target: /attr >= 0.97x and >= /governor: {} ({attr:.3}, /governor {governor:.3}); /layer >= 0.95x: {} \
         ({layer:.3})",
        verdict(attr >= 0.97 && attr >= governor),
        verdict(layer >= 0.95)
    );
    println!("  the three headers alone, no decision: {headers:.3}x bare (the floor under both)");
}

fn main() {
    if let Ok(flavor) = std::env::var("SOCKETS_BENCH_SERVE") {
        return serve(&flavor);
    }
    if std::env::args().any(|a| a == "--bench") {
        bench();
    } else {
        smoke();
    }
}
