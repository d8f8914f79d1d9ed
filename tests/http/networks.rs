//! One network's flood must not lock other clients out (issue 11, item 8).
//!
//! Behind a trusted proxy, a client writes its own address: one IPv6 /48
//! holds 65,536 /64s, each a fresh key. Without a bound per network, such a
//! flood fills the store and every new client, from anywhere, lands in the
//! overflow the flood has spent. These tests flood through a real axum
//! router with the config layer, then check what other clients get.

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::ManualClock;
use tower::ServiceExt;

/// The issue's setup: 2,000 keys, 6/min with a burst of 5, every client
/// behind the trusted proxy 10.0.0.1.
const CONFIG: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "6/min"
burst = 5

[store]
max_keys = 2000

[ip]
trusted_proxies = ["10.0.0.0/8"]

[[rules]]
name = "keyed"
path = "/keyed"
key = "header:x-api-key"
resolve = ["default"]

[[rules]]
name = "api"
path = "/{*rest}"
key = "ip"
resolve = ["default"]
"#;

async fn app(toml: &str, clock: &ManualClock) -> Router {
    app_and_runtime(toml, clock).await.0
}

/// The router, and the runtime behind its layer.
async fn app_and_runtime(toml: &str, clock: &ManualClock) -> (Router, RateLimit) {
    let rl = RateLimit::builder(Config::from_toml_str(toml).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/keyed", get(|| async { "ok" }))
        .route("/{*rest}", get(|| async { "ok" }))
        .layer(rl.layer());
    (app, rl)
}

fn via_proxy(path: &str, client: &str) -> Request<Body> {
    let mut r = Request::builder().uri(path).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr("10.0.0.1:4000".parse().unwrap()));
    r.headers_mut().insert("x-forwarded-for", client.parse().unwrap());
    r
}

async fn send(app: &Router, r: Request<Body>) -> Response<Body> {
    app.clone().oneshot(r).await.unwrap()
}

async fn status(app: &Router, r: Request<Body>) -> StatusCode {
    send(app, r).await.status()
}

/// Sends `n` requests from `client`; returns how many were admitted.
async fn admitted(app: &Router, client: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(status(app, via_proxy("/api", client)).await == StatusCode::OK);
    }
    ok
}

/// 20,000 requests, each from a new /64 inside one /48.
async fn flood_one_network(app: &Router, network: u16, requests: u32) -> usize {
    let mut ok = 0;
    for i in 0..requests {
        let client = format!("2001:db8:{network:x}:{:x}::1", i % 65_536);
        ok += usize::from(status(app, via_proxy("/api", &client)).await == StatusCode::OK);
    }
    ok
}

#[tokio::test]
async fn a_flood_from_one_network_leaves_every_other_client_its_whole_burst() {
    let clock = ManualClock::new();
    let app = app(CONFIG, &clock).await;
    clock.advance(Duration::from_secs(1));
    let flood = flood_one_network(&app, 0xaaaa, 20_000).await;
    // The network brought its budget of new clients in (256 a minute by
    // default, one request each) and then shares one bucket of 5.
    assert!(flood <= 256 + 5, "the flooding /48 was admitted {flood} times");
    assert!(flood >= 256, "its first clients are ordinary clients: {flood}");

    // Ten clients elsewhere, each sending its first requests: every one
    // gets its whole burst, and is limited after it.
    let others = [
        "2001:db8:bbbb:1::1",
        "2001:db8:cccc:2::1",
        "2001:db8:aaab:3::1",
        "2001:db9::1",
        "2a00:1450::1",
        "203.0.113.7",
        "198.51.100.1",
        "192.0.2.200",
        "100.64.0.1",
        "8.8.4.4",
    ];
    for client in others {
        assert_eq!(admitted(&app, client, 6).await, 5, "{client}");
    }
    // And the flooding network is still limited as one client.
    assert_eq!(status(&app, via_proxy("/api", "2001:db8:aaaa:ffff::1")).await, 429);
}

#[tokio::test]
async fn a_flood_from_many_networks_spills_onto_a_fraction_of_new_clients() {
    let clock = ManualClock::new();
    let app = app(CONFIG, &clock).await;
    clock.advance(Duration::from_secs(1));
    // 40 networks, 300 new clients each: 12,000 new keys for 2,000 cells,
    // so the store is full and the rest overflows.
    for network in 0..40u16 {
        flood_one_network(&app, 0x1000 + network, 300).await;
    }
    // A hundred clients of other networks, first request each: the
    // overflow is spread by network, so only those landing on a cell the
    // flood's 40 networks spent are refused (expected: about one).
    let mut refused = Vec::new();
    for k in 0..100u16 {
        let client = format!("2001:db8:{:x}:1::1", 0x8000 + k);
        if status(&app, via_proxy("/api", &client)).await != StatusCode::OK {
            refused.push(client);
        }
    }
    eprintln!("{} of 100 new clients refused after a 40-network flood", refused.len());
    assert!(
        refused.len() <= 10,
        "{} of 100 new clients refused: {refused:?}",
        refused.len()
    );
}

#[tokio::test]
async fn a_network_of_rotating_header_values_keeps_the_tracker_open_to_others() {
    // A small tracker, so the flood would fill it.
    let toml = format!("{CONFIG}\n[header_keys]\nmax_tracked = 500\n");
    let clock = ManualClock::new();
    let app = app(&toml, &clock).await;
    clock.advance(Duration::from_secs(1));
    let keyed = |client: &str, key: &str| {
        let mut r = via_proxy("/keyed", client);
        r.headers_mut().insert("x-api-key", key.parse().unwrap());
        r
    };
    for i in 0..5_000u32 {
        let client = format!("2001:db8:aaaa:{:x}::1", i % 65_536);
        send(&app, keyed(&client, &format!("flood-{i}"))).await;
    }
    // A client elsewhere with two API keys: each key has its own bucket
    // (the tracker had room for its values), not the address's.
    let mut ok = 0;
    for key in ["tenant-a", "tenant-b"] {
        for _ in 0..5 {
            ok += usize::from(status(&app, keyed("203.0.113.9", key)).await == StatusCode::OK);
        }
    }
    assert_eq!(ok, 10, "both keys had their whole burst");
}

#[tokio::test]
async fn networks_are_configurable_and_the_bound_can_be_switched_off() {
    // /56 networks and 16 new clients a minute: two /56s of one /48 are
    // two networks.
    let toml = CONFIG.replace("[ip]\n", "[ip]\nipv6_network_prefix = 56\nipv4_network_prefix = 16\n") + "\n";
    let toml = toml.replace(
        "max_keys = 2000\n",
        "max_keys = 2000\nnew_keys_per_network = \"16/min\"\n",
    );
    let clock = ManualClock::new();
    let app = app(&toml, &clock).await;
    let mut ok = 0;
    for i in 0..100u32 {
        ok += usize::from(status(&app, via_proxy("/api", &format!("2001:db8:aaaa:{i:x}::1"))).await == 200);
    }
    assert_eq!(ok, 16 + 5, "16 new clients, then the /56 shares one bucket");
    assert_eq!(
        admitted(&app, "2001:db8:aaaa:100::1", 6).await,
        5,
        "another /56 of the /48"
    );
    // IPv4 /16: 198.51.0.0/16 rotates 100 addresses.
    let mut ok = 0;
    for i in 0..100u32 {
        ok += usize::from(status(&app, via_proxy("/api", &format!("198.51.{}.{}", i / 200, i % 200 + 1))).await == 200);
    }
    assert_eq!(ok, 16 + 5);

    let off = CONFIG.replace("max_keys = 2000\n", "max_keys = 2000\nnew_keys_per_network = \"off\"\n");
    let app = self::app(&off, &clock).await;
    let mut ok = 0;
    for i in 0..100u32 {
        ok += usize::from(status(&app, via_proxy("/api", &format!("2001:db8:aaaa:{i:x}::1"))).await == 200);
    }
    assert_eq!(ok, 100, "unbounded: every /64 is its own client");
}

/// `ratelimit_store_keys` as `docs/operations.md` predicts it: per route, a
/// client's own cell, its network's budget of new keys and its subnet's
/// share of it (an IPv4 address is its own subnet).
#[tokio::test]
async fn the_store_holds_the_cells_the_operations_guide_counts() {
    let (app, rl) = app_and_runtime(CONFIG, &ManualClock::new()).await;
    let cells = || rl.limiter().store().len();
    assert_eq!(cells(), 0);
    // One client on two routes (an address-keyed one and a header-keyed one).
    // Each client its own API key (a header key is keyed by its value).
    let keyed = |client: &str| {
        let mut r = via_proxy("/keyed", client);
        r.headers_mut()
            .insert("x-api-key", format!("key-of-{client}").parse().unwrap());
        r
    };
    assert_eq!(status(&app, via_proxy("/api", "198.51.100.7")).await, StatusCode::OK);
    assert_eq!(status(&app, keyed("198.51.100.7")).await, StatusCode::OK);
    assert_eq!(cells(), 6, "3 per route");
    // Its next requests make none.
    assert_eq!(status(&app, via_proxy("/api", "198.51.100.7")).await, StatusCode::OK);
    assert_eq!(cells(), 6);
    // Another address of its /24: its own cell and share per route.
    assert_eq!(status(&app, via_proxy("/api", "198.51.100.8")).await, StatusCode::OK);
    assert_eq!(status(&app, keyed("198.51.100.8")).await, StatusCode::OK);
    assert_eq!(cells(), 10);
    // A client of another network: 3 per route again.
    assert_eq!(status(&app, via_proxy("/api", "203.0.113.1")).await, StatusCode::OK);
    assert_eq!(status(&app, keyed("203.0.113.1")).await, StatusCode::OK);
    assert_eq!(cells(), 16);
}
