//! Wiring mistakes fail loudly, over a real socket: a router served without
//! connect info (`axum::serve(listener, app)` rather than
//! `app.into_make_service_with_connect_info::<SocketAddr>()`) gives the
//! limiter no client address. A route keyed by address then answers 500
//! naming the fix, and logs it once, as axum's `ConnectInfo` extractor
//! does; one bucket for every client only when the configuration asks.

use axum::routing::get;
use axum::Router;
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::rate_limit;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::log::Captured;

#[rate_limit(key = ip, resolve = [default], name = "wiring.ip")]
async fn by_address() -> &'static str {
    "by address"
}

/// Keyed by a header: without it, the key falls back to the address.
#[rate_limit(key = header("x-api-key"), resolve = [default], name = "wiring.header")]
async fn by_header() -> &'static str {
    "by header"
}

/// One bucket for the route: needs no address.
#[rate_limit(key = route, resolve = [default], name = "wiring.route")]
async fn whole_route() -> &'static str {
    "whole route"
}

#[rate_limit(key = ip, resolve = [default], name = "wiring.shadow", shadow)]
async fn watched() -> &'static str {
    "watched"
}

const CONFIG: &str = "[profiles.standard]\nrate = \"60/min\"\nburst = 2\n";

/// The router served as an application that forgot connect info: the
/// address it listens on.
async fn serve_without_connect_info(config: &str) -> std::net::SocketAddr {
    let rl = RateLimit::builder(Config::from_toml_str(config).unwrap())
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/ip", get(by_address))
        .route("/header", get(by_header))
        .route("/route", get(whole_route))
        .route("/shadow", get(watched))
        .with_state(rl);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// `GET path` over a new connection: the status and the body.
async fn fetch(addr: std::net::SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: wiring\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text)
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_without_connect_info_answers_500_naming_the_fix() {
    let (log, _log) = Captured::on_this_thread("ratelimit=warn");
    let addr = serve_without_connect_info(CONFIG).await;
    for _ in 0..3 {
        let (status, text) = fetch(addr, "/ip", "").await;
        assert_eq!(status, 500, "{text}");
        assert!(text.contains("application/problem+json"), "{text}");
        assert!(text.contains("into_make_service_with_connect_info"), "{text}");
        assert!(text.contains("without_peer = \\\"shared\\\""), "{text}");
        assert!(
            !text.to_ascii_lowercase().contains("ratelimit-limit"),
            "nothing decided: {text}"
        );
    }
    // A header key without its header falls back to the address: the same.
    assert_eq!(fetch(addr, "/header", "").await.0, 500);
    // With its header, the key needs no address.
    assert_eq!(fetch(addr, "/header", "x-api-key: k1\r\n").await.0, 200);
    // A key that needs no address is decided as usual.
    assert_eq!(fetch(addr, "/route", "").await.0, 200);
    // A shadow route never refuses: served (on the one shared bucket).
    assert_eq!(fetch(addr, "/shadow", "").await.0, 200);
    // Logged at the first 500, with the fix, and only then; the shadow
    // route's bucket once on its own (a shadow route first must not
    // silence the 500s).
    let lines = log.lines_with("needs the client's address");
    let (shadow, refused): (Vec<&String>, Vec<&String>) = lines.iter().partition(|l| l.contains("shadow"));
    assert_eq!((refused.len(), shadow.len()), (1, 1), "{lines:?}");
    assert!(refused[0].contains("ERROR"), "{}", refused[0]);
    assert!(refused[0].contains("answer=\"500\""), "{}", refused[0]);
    assert!(
        refused[0].contains("into_make_service_with_connect_info"),
        "{}",
        refused[0]
    );
}

/// A setup that wants one bucket for every client says so.
#[tokio::test(flavor = "current_thread")]
async fn without_peer_shared_limits_every_such_request_as_one_client() {
    let (log, _log) = Captured::on_this_thread("ratelimit=warn");
    let addr = serve_without_connect_info(&format!("{CONFIG}[ip]\nwithout_peer = \"shared\"\n")).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(fetch(addr, "/ip", "").await.0);
    }
    assert_eq!(statuses, [200, 200, 429], "one bucket of 2");
    assert!(
        log.lines_with("needs the client's address").is_empty(),
        "asked for: no error"
    );
}

#[test]
fn without_peer_takes_error_or_shared() {
    let err = Config::from_toml_str(&format!("{CONFIG}[ip]\nwithout_peer = \"ignore\"\n")).unwrap_err();
    assert_eq!(err.field(), Some("ip.without_peer"), "{err}");
    assert!(err.to_string().contains("expected \"error\""), "{err}");
}

const RULES: &str = "[profiles.standard]\nrate = \"60/min\"\nburst = 2\n\
                     [[rules]]\nname = \"admin\"\npath = \"/admin/{*rest}\"\nkey = \"ip\"\nresolve = [\"default\"]\n";

/// The router with `[[rules]]` in force, its layer outermost or forgotten:
/// the address it listens on.
async fn serve_with_rules(wrapped: bool) -> std::net::SocketAddr {
    let rl = RateLimit::builder(Config::from_toml_str(RULES).unwrap())
        .routes_in(module_path!())
        .build()
        .await
        .unwrap();
    let mut app = Router::new()
        .route("/route", get(whole_route))
        .route("/admin/users", get(|| async { "admin" }))
        .with_state(rl.clone());
    if wrapped {
        app = app.layer(rl.layer());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// `[[rules]]` in force, and a request to an attribute route that did not
/// pass through the runtime's layer: the layer was forgotten (or placed
/// below the routes), and the rules limit nothing. Said once, with the fix;
/// with the layer outermost, nothing is said and the rule limits.
#[tokio::test(flavor = "current_thread")]
async fn rules_without_their_layer_are_said_once() {
    let (log, _log) = Captured::on_this_thread("ratelimit=warn");
    let forgot = serve_with_rules(false).await;
    for _ in 0..3 {
        assert_eq!(fetch(forgot, "/admin/users", "").await.0, 200, "unlimited: no layer");
    }
    assert_eq!(fetch(forgot, "/route", "").await.0, 200);
    assert_eq!(fetch(forgot, "/route", "").await.0, 200);
    let lines = log.lines_with("did not pass through");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("wiring.route"), "{}", lines[0]);
    assert!(lines[0].contains(".layer(rate_limit.layer())"), "{}", lines[0]);

    let wired = serve_with_rules(true).await;
    assert_eq!(fetch(wired, "/route", "").await.0, 200);
    let mut admin = Vec::new();
    for _ in 0..3 {
        admin.push(fetch(wired, "/admin/users", "").await.0);
    }
    assert_eq!(admin, [200, 200, 429], "the rule limits");
    assert_eq!(log.lines_with("did not pass through").len(), 1, "nothing more said");
}
