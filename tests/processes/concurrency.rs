//! Requests in flight per client, from outside: the quickstart's slow
//! `GET /export` (`[profiles.exports] concurrency = 3`) as a real process
//! over real sockets, its headers read by an RFC 9651 parser and its
//! in-flight gauge by a Prometheus text parser.

use super::operations::{get, Quickstart};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const IN_FLIGHT: &str = "ratelimit_in_flight_requests";

/// The quickstart's config with both header styles on.
fn config(dir: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ratelimit-inflight-{dir}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.toml")).unwrap();
    assert!(
        base.contains("concurrency = 3"),
        "examples/quickstart.toml's exports profile moved"
    );
    let text = base.replacen("style = \"draft-06\"", "style = \"both\"", 1);
    assert_ne!(text, base, "examples/quickstart.toml's header style moved");
    let path = dir.join("quickstart.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// An export under way: the response head, and the connection its body
/// still streams on.
struct Export {
    status: u16,
    head: Vec<(String, String)>,
    stream: TcpStream,
    body: Vec<u8>,
}

impl Export {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Reads the rest of the response (the server closes the connection).
    fn finish(mut self) -> Vec<u8> {
        self.stream.read_to_end(&mut self.body).unwrap();
        self.body
    }
}

/// Sends `GET /export?ms=N` on `stream` and reads its head.
fn start_on(mut stream: TcpStream, ms: u64) -> Export {
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!("GET /export?ms={ms} HTTP/1.1\r\nHost: quickstart\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "the connection closed before the head"
        );
        raw.push(byte[0]);
    }
    let text = String::from_utf8(raw).unwrap();
    let mut lines = text.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let head = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    Export {
        status,
        head,
        stream,
        body: Vec::new(),
    }
}

fn start(addr: SocketAddr, ms: u64) -> Export {
    start_on(TcpStream::connect(addr).unwrap(), ms)
}

/// A connection from another loopback address (another client, to `key =
/// ip`): 127.0.0.2.
fn start_from_elsewhere(addr: SocketAddr, ms: u64) -> Export {
    start_from([127, 0, 0, 2], addr, ms)
}

/// An export from the loopback address `from` (Linux routes all of
/// 127.0.0.0/8 to loopback: each address is another client).
fn start_from(from: [u8; 4], addr: SocketAddr, ms: u64) -> Export {
    let socket = std::net::SocketAddr::from((from, 0));
    let stream = {
        let s = socket2_connect(socket, addr);
        s.set_nonblocking(false).unwrap();
        s
    };
    start_on(stream, ms)
}

/// A TCP connection bound to `from` (std cannot bind before connecting).
fn socket2_connect(from: SocketAddr, to: SocketAddr) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(from).unwrap();
        socket.connect(to).await.unwrap().into_std().unwrap()
    })
}

/// The member of the structured List `field` whose name ends with
/// `suffix`, with its parameters, parsed by `sfv` (not the library's
/// serializer).
fn member(export: &Export, field: &str, suffix: &str) -> Option<(String, Vec<(String, sfv::BareItem)>)> {
    let raw = export.header(field)?;
    let list: sfv::List = sfv::Parser::new(raw).parse().expect("an RFC 9651 List");
    list.into_iter().find_map(|entry| match entry {
        sfv::ListEntry::Item(item) => {
            let name = item.bare_item.as_string()?.as_str().to_owned();
            name.ends_with(suffix).then(|| {
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                    .collect();
                (name, params)
            })
        }
        sfv::ListEntry::InnerList(_) => None,
    })
}

fn param(params: &[(String, sfv::BareItem)], key: &str) -> Option<sfv::BareItem> {
    params.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// The export route's in-flight gauge, summed over tiers.
fn in_flight(q: &Quickstart) -> f64 {
    q.scrape()
        .iter()
        .filter(|(n, l, _)| n == IN_FLIGHT && l.get("route").is_some_and(|r| r.contains("export")))
        .map(|(_, _, v)| v)
        .sum()
}

/// Scrapes until the export route's in-flight gauge is `want`: the gauge
/// is exact, but a hang-up reaches the server when its next write fails.
fn wait_in_flight(q: &Quickstart, want: f64, within: Duration) -> f64 {
    let deadline = Instant::now() + within;
    loop {
        let now = in_flight(q);
        if now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ten_parallel_exports_from_one_client_run_three_at_once_and_refuse_seven() {
    let q = Quickstart::start(&config("ten"));
    let addr = q.addr;
    let barrier = Arc::new(Barrier::new(10));
    let exports: Vec<Export> = (0..10)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                // Long enough that all ten are in flight together.
                start(addr, 5_000)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let (running, refused): (Vec<Export>, Vec<Export>) = exports.into_iter().partition(|e| e.status == 200);
    assert_eq!(
        running.len(),
        3,
        "statuses: {:?}",
        refused.iter().map(|e| e.status).collect::<Vec<_>>()
    );
    assert_eq!(refused.len(), 7);
    assert!(refused.iter().all(|e| e.status == 429));
    assert_eq!(in_flight(&q), 3.0, "three exports hold permits");

    // The refusals describe the concurrency policy, in both styles.
    for e in refused {
        assert_eq!(e.header("retry-after"), Some("1"));
        assert_eq!(e.header("ratelimit-limit"), Some("3"));
        assert_eq!(e.header("ratelimit-remaining"), Some("0"));
        let (name, policy) = member(&e, "ratelimit-policy", "#concurrency").expect("a concurrency policy");
        assert_eq!(param(&policy, "q").and_then(|v| v.as_integer().map(i64::from)), Some(3));
        assert_eq!(
            param(&policy, "qu").and_then(|v| v.as_string().map(|s| s.as_str().to_owned())),
            Some("concurrent-requests".to_owned())
        );
        let (_, limit) = member(&e, "ratelimit", "#concurrency").expect("its RateLimit member");
        assert_eq!(param(&limit, "r").and_then(|v| v.as_integer().map(i64::from)), Some(0));
        // The rate's own policy is there too. A refusal's charge is handed
        // back (the rate is decided first, so that the permit is taken
        // where the charge was placed): of 20, the three running exports'
        // are spent, and at most the other refusals' while they are being
        // decided. That the refusals cost nothing is checked below.
        let (_, rate) = member(&e, "ratelimit", "/exports").expect("the rate's member");
        let r = param(&rate, "r").and_then(|v| v.as_integer().map(i64::from)).unwrap();
        assert!((11..=20).contains(&r), "r = {r}");
        // The problem body names the policy that refused.
        let body: serde_json::Value = serde_json::from_slice(&e.finish()).expect("a problem+json body");
        assert_eq!(body["violated-policies"], serde_json::json!([name]));
        assert_eq!(body["status"], 429);
    }
    // Each running export was told how many permits were left after its own.
    let mut left: Vec<i64> = running
        .iter()
        .map(|e| {
            let (_, limit) = member(e, "ratelimit", "#concurrency").expect("a concurrency member");
            param(&limit, "r").and_then(|v| v.as_integer().map(i64::from)).unwrap()
        })
        .collect();
    left.sort_unstable();
    assert_eq!(left, [0, 1, 2]);

    // Another client is not affected.
    let other = start_from_elsewhere(addr, 100);
    assert_eq!(other.status, 200, "another client's export");
    assert!(!other.finish().is_empty());

    // The refusals are counted as such.
    let all = q.scrape();
    let rejected: f64 = all
        .iter()
        .filter(|(n, _, _)| n == "ratelimit_concurrency_rejected_total")
        .map(|(_, _, v)| v)
        .sum();
    assert_eq!(rejected, 7.0);

    // Once the exports are done, every permit is back.
    for e in running {
        let body = e.finish();
        assert!(
            body.windows(4).filter(|w| w == b"row\n").count() >= 40,
            "a whole export"
        );
    }
    assert_eq!(wait_in_flight(&q, 0.0, Duration::from_secs(5)), 0.0);
    let again: Vec<Export> = (0..3).map(|_| start(addr, 100)).collect();
    assert!(again.iter().all(|e| e.status == 200), "three more, one after another");
    // The seven refusals cost the rate nothing: of 20, the three exports'
    // and this one's are spent (less what the seconds since gave back).
    let (_, rate) = member(&again[0], "ratelimit", "/exports").expect("the rate's member");
    let r = param(&rate, "r").and_then(|v| v.as_integer().map(i64::from)).unwrap();
    assert!(r >= 16, "r = {r}: a refusal's charge was kept");
    drop(again);
    assert_eq!(wait_in_flight(&q, 0.0, Duration::from_secs(5)), 0.0);
}

#[test]
fn a_client_that_hangs_up_mid_stream_gives_its_permit_back() {
    let q = Quickstart::start(&config("hangup"));
    let addr = q.addr;
    // Three 30 s exports take the client's three permits.
    let mut running: Vec<Export> = (0..3).map(|_| start(addr, 30_000)).collect();
    assert!(running.iter().all(|e| e.status == 200));
    assert_eq!(start(addr, 100).status, 429, "a fourth is refused");
    assert_eq!(in_flight(&q), 3.0);
    // One client hangs up part way through its download.
    let mut gone = running.pop().unwrap();
    let mut some = [0u8; 8];
    gone.stream.read_exact(&mut some).unwrap();
    drop(gone);
    // Long before its 30 s were up, its permit is back.
    assert_eq!(wait_in_flight(&q, 2.0, Duration::from_secs(10)), 2.0);
    let next = start(addr, 100);
    assert_eq!(next.status, 200, "the permit the hang-up gave back");
    drop(next.finish());
    drop(running);
    assert_eq!(wait_in_flight(&q, 0.0, Duration::from_secs(10)), 0.0);
    // The metrics page itself is served (not limited).
    assert_eq!(get(addr, "/metrics").status, 200);
}

/// The quickstart's config (both header styles) with one more `[store]`
/// setting.
fn config_with_store(name: &str, setting: &str) -> std::path::PathBuf {
    let path = config(name);
    let base = std::fs::read_to_string(&path).unwrap();
    let text = base.replacen("[store]\n", &format!("[store]\n{setting}\n"), 1);
    assert_ne!(text, base, "examples/quickstart.toml's [store] moved");
    std::fs::write(&path, text).unwrap();
    path
}

/// An export from each of `clients` (loopback addresses), all started at
/// once.
fn parallel(addr: SocketAddr, clients: Vec<[u8; 4]>, ms: u64) -> Vec<Export> {
    let barrier = Arc::new(Barrier::new(clients.len()));
    clients
        .into_iter()
        .map(|from| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                start_from(from, addr, ms)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect()
}

/// One network's addresses are one client for requests in flight once the
/// network has brought its budget of new keys into the store: 196
/// addresses of one /24, each opening one slow export at once, with
/// `new_keys_per_network = "4/min"` and `concurrency = 3`. The network's
/// own cells (at most 4) and its shared cell (3 permits) bound them: at
/// most 7 run (all 196 did before permits followed the store's placement).
/// A client of another network is not affected.
#[test]
fn one_networks_addresses_share_its_permits_past_its_new_key_budget() {
    let q = Quickstart::start(&config_with_store("network", "new_keys_per_network = \"4/min\""));
    let addr = q.addr;
    let exports = parallel(addr, (1..=196u8).map(|host| [127, 0, 9, host]).collect(), 10_000);
    let running = exports.iter().filter(|e| e.status == 200).count();
    let refused = exports.iter().filter(|e| e.status == 429).count();
    eprintln!("{running} of 196 exports of one /24 run at once");
    assert_eq!(running + refused, 196, "every export answered 200 or 429");
    assert!(
        (3..=7).contains(&running),
        "{running} of 196 exports of one /24 run at once (at most 4 own cells + 3 shared)"
    );
    // Another network's client gets its own permits.
    let other = start_from([127, 0, 10, 1], addr, 100);
    assert_eq!(other.status, 200, "another network's export");
    drop(exports);
    drop(other.finish());
}

/// The lockout of a full table, from outside, with a small configured table
/// (`[store] max_keys_in_flight = 128`): 160 clients of as many networks
/// fill it with slow exports (32 past it, in overflow), 64 more networks
/// each hold their limit of 3 in overflow, then the first 160 finish. The
/// table has room for 100 newcomers of other networks, and they run
/// (before: the overflow counters latched, and new keys were refused with
/// the table empty). (With more newcomers than free entries, those past
/// the table would share overflow counters, 1 in 64 of them one a flooding
/// network holds: that is the full table's documented bound, not this.)
#[test]
fn once_a_full_in_flight_table_has_room_newcomers_run() {
    let q = Quickstart::start(&config_with_store("table", "max_keys_in_flight = 128"));
    let addr = q.addr;
    // The table: one export from each of 160 networks (127.1.N.1).
    let table = parallel(addr, (0..160u8).map(|n| [127, 1, n, 1]).collect(), 30_000);
    assert!(table.iter().all(|e| e.status == 200), "one export per client runs");
    // The flood: 64 more networks, 4 exports each (3 run, in overflow).
    let flood = parallel(
        addr,
        (0..64u8).flat_map(|n| (1..=4u8).map(move |h| [127, 2, n, h])).collect(),
        30_000,
    );
    let flooding = flood.iter().filter(|e| e.status == 200).count();
    assert!(flooding >= 64, "{flooding} flood exports run");
    // The table's clients hang up: their permits come back.
    let held_by_flood = in_flight(&q) - table.len() as f64;
    drop(table);
    assert_eq!(
        wait_in_flight(&q, held_by_flood, Duration::from_secs(10)),
        held_by_flood,
        "the table's permits are back"
    );
    // Newcomers of 100 other networks, the flood's overflow still held.
    let newcomers = parallel(addr, (0..100u8).map(|n| [127, 3, n, 1]).collect(), 100);
    let running = newcomers.iter().filter(|e| e.status == 200).count();
    eprintln!("{running} of 100 newcomers ran");
    assert!(running >= 99, "{running} of 100 newcomers ran");
    drop((flood, newcomers));
}
