//! A reload swaps the whole plan: under load on real sockets (a
//! multi-threaded server, clients on keep-alive connections), with reloads
//! alternating two configurations that differ in the header style, the
//! profiles, a token tier's profile and a `[routes]` profile override,
//! every response is entirely one generation's. A request that read its
//! style from one configuration and its profile from the other, or a
//! route's override from one and the profiles from the other, would show
//! a number or a header that neither generation sends.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::rate_limit;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const SECRET_VAR: &str = "RL_GENERATIONS_SECRET";
const SECRET: &str = "generations: a test secret of 32 bytes";

#[rate_limit(key = ip, resolve = [default], name = "gen.route")]
async fn route() -> &'static str {
    "route"
}

#[rate_limit(key = ip, resolve = [jwt, default], name = "gen.tier")]
async fn tier() -> &'static str {
    "tier"
}

/// One generation: its header style and its numbers (all distinct across
/// the two). Every burst holds minutes of the load (a thread preempted
/// between its clock reading and the cell's update sees the cell as far in
/// debt as it was preempted: at a microsecond per unit, a loaded machine
/// refused requests that way).
fn generation(style: &str, default: u32, gold: u32, route: u32) -> String {
    format!(
        "default_profile = \"base\"\n[headers]\nstyle = \"{style}\"\n\
         [profiles.base]\nrate = \"1000/s\"\nburst = {default}\n\
         [profiles.gold]\nrate = \"1000/s\"\nburst = {gold}\n\
         [profiles.routed]\nrate = \"1000/s\"\nburst = {route}\n\
         [routes.\"gen.route\"]\nprofile = \"routed\"\n\
         [jwt]\ntier_claim = \"tier\"\nhmac_secret_env = \"{SECRET_VAR}\"\nalgorithm = \"HS256\"\n"
    )
}

/// What one response says: `(draft-06 limit, structured policy name and q)`.
type Seen = (Option<u64>, Option<(String, i64)>);

/// One request on a keep-alive connection: the status and the rate-limit
/// headers.
async fn get_on(conn: &mut BufReader<TcpStream>, path: &str, bearer: &str) -> (u16, Seen) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: gen\r\nauthorization: {bearer}\r\n\r\n");
    conn.get_mut().write_all(request.as_bytes()).await.unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).await.unwrap();
    let code: u16 = status.split(' ').nth(1).unwrap().parse().unwrap();
    let (mut limit, mut policy, mut length) = (None, None, 0usize);
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().unwrap(),
            "ratelimit-limit" => limit = Some(value.parse().unwrap()),
            "ratelimit-policy" => {
                let list = sfv::Parser::new(value).parse::<sfv::List>().unwrap();
                let sfv::ListEntry::Item(item) = &list[0] else {
                    panic!("{value}")
                };
                let q = item
                    .params
                    .get("q")
                    .and_then(|q| q.as_integer())
                    .map(i64::from)
                    .unwrap();
                policy = Some((item.bare_item.as_string().unwrap().as_str().to_owned(), q));
            }
            _ => {}
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).await.unwrap();
    (code, (limit, policy))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_never_serves_a_request_with_two_generations() {
    std::env::set_var(SECRET_VAR, SECRET);
    // Generation A: draft-06 headers; B: structured ones, other numbers.
    let a = generation("draft-06", 100000, 110000, 120000);
    let b = generation("structured", 300000, 410000, 420000);
    let rl = RateLimit::builder(Config::from_toml_str(&a).unwrap())
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/route", get(route))
        .route("/tier", get(tier))
        .with_state(rl.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .await
            .unwrap();
    });
    let token = encode(
        &Header::new(Algorithm::HS256),
        &serde_json::json!({"sub": "u", "tier": "gold", "exp": get_current_timestamp() + 600}),
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap();
    let bearer = Arc::new(format!("Bearer {token}"));

    let done = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..6 {
        let (done, bearer) = (done.clone(), bearer.clone());
        clients.push(tokio::spawn(async move {
            let mut conn = BufReader::new(TcpStream::connect(addr).await.unwrap());
            let mut seen: Vec<(&'static str, Seen)> = Vec::new();
            let mut i = 0usize;
            while !done.load(Ordering::Relaxed) {
                let path = if (i + c).is_multiple_of(2) { "/route" } else { "/tier" };
                let (status, s) = get_on(&mut conn, path, &bearer).await;
                assert_eq!(status, 200, "{path}: {s:?}");
                seen.push((path, s));
                i += 1;
            }
            seen
        }));
    }
    // Reloads alternate the two generations while the clients run.
    let started = Instant::now();
    let mut reloads = 0u32;
    while started.elapsed() < Duration::from_millis(1500) {
        let next = if reloads.is_multiple_of(2) { &b } else { &a };
        rl.reload(Config::from_toml_str(next).unwrap()).unwrap();
        reloads += 1;
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
    done.store(true, Ordering::Relaxed);

    let (mut of_a, mut of_b) = (0, 0);
    for client in clients {
        for (path, seen) in client.await.unwrap() {
            // Each generation's whole answer, and nothing else.
            let want_a: Seen = (Some(if path == "/route" { 120_000 } else { 110_000 }), None);
            let want_b: Seen = match path {
                "/route" => (None, Some(("gen.route/routed".to_owned(), 420_000))),
                _ => (None, Some(("gen.tier/gold".to_owned(), 410_000))),
            };
            if seen == want_a {
                of_a += 1;
            } else if seen == want_b {
                of_b += 1;
            } else {
                panic!("{path}: {seen:?} is neither generation's ({want_a:?} or {want_b:?})");
            }
        }
    }
    eprintln!("{reloads} reloads; responses of A: {of_a}, of B: {of_b}");
    assert!(reloads > 100, "{reloads} reloads");
    assert!(of_a > 50 && of_b > 50, "both generations served: A {of_a}, B {of_b}");
}
