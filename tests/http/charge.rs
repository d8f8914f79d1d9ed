//! Reserve, then settle, through a real axum router: a handler takes a
//! `ratelimit::axum::Charge` and settles the real cost after its work. The
//! effect is read back from what the next requests are told
//! (`RateLimit-Remaining` is computed when a request is decided, before its
//! handler settles).

use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Query;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use ratelimit::axum::{Charge, RateLimit};
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::{rate_limit, ManualClock};
use serde::Deserialize;
use tower::ServiceExt;

/// 10 at once, then 10 a minute (one unit every 6 s).
const CONFIG: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "10/min"
burst = 10

[profiles.daily]
rate = "100/d"
burst = 100
"#;

#[derive(Deserialize)]
struct Cost {
    /// The real cost, or `refund`, or `hold` (keep the charge for the test).
    actual: String,
}

/// Charges were taken out of a handler, to settle later.
static HELD: Mutex<Vec<Charge>> = Mutex::new(Vec::new());

/// Reserves 5, settles what the query says.
#[rate_limit(key = ip, resolve = [default], name = "search", cost = 5)]
async fn search(charge: Charge, Query(cost): Query<Cost>) -> String {
    let reserved = charge.charged();
    match cost.actual.as_str() {
        "refund" => charge.refund(),
        "hold" => HELD.lock().unwrap().push(charge),
        n => charge.settle(n.parse().unwrap()),
    }
    format!("reserved {reserved}")
}

/// Stacked: the settlement applies to both limits.
#[rate_limit(key = ip, resolve = [default], name = "export.ip", cost = 5)]
#[rate_limit(key = header("x-account"), resolve = [profile("daily"), default], name = "export.account", cost = 5)]
async fn export(charge: Charge, Query(cost): Query<Cost>) -> &'static str {
    charge.settle(cost.actual.parse().unwrap());
    "exported"
}

fn router() -> Router<RateLimit> {
    Router::new()
        .route("/search", get(search))
        .route("/export", get(export))
}

async fn app(clock: &ManualClock) -> axum::routing::RouterIntoService<Body> {
    app_with(CONFIG, clock).await
}

async fn app_with(config: &str, clock: &ManualClock) -> axum::routing::RouterIntoService<Body> {
    let rl = RateLimit::builder(Config::from_toml_str(config).unwrap())
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    router().with_state(rl).into_service()
}

async fn get_at(app: &axum::routing::RouterIntoService<Body>, uri: &str, peer: &str) -> Response<Body> {
    let mut r = Request::builder()
        .uri(uri)
        .header("x-account", "acct")
        .body(Body::empty())
        .unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    app.clone().oneshot(r).await.unwrap()
}

fn remaining(r: &Response<Body>) -> u32 {
    r.headers()["ratelimit-remaining"].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn settle_charges_the_difference_or_hands_back_the_surplus() {
    let clock = ManualClock::new();
    let app = app(&clock).await;
    let peer = "192.0.2.1:1";
    // Reserved 5 of 10: 5 left as it is decided; it settles at 1.
    let r = get_at(&app, "/search?actual=1", peer).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(remaining(&r), 5);
    // So the next is decided with 9 before it: 4 after its reservation.
    let r = get_at(&app, "/search?actual=refund", peer).await;
    assert_eq!(remaining(&r), 4, "the first request settled at 1");
    // That one was refunded: 9 before the next, 4 after it.
    let r = get_at(&app, "/search?actual=8", peer).await;
    assert_eq!(remaining(&r), 4, "a refund hands back the whole reservation");
    // It settled at 8: 3 more than reserved, so 9 - 8 = 1 left: the next
    // reservation of 5 does not fit.
    let r = get_at(&app, "/search?actual=1", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(remaining(&r), 1, "the extra units were charged");
}

#[tokio::test]
async fn a_refund_never_hands_back_what_time_already_refilled() {
    let clock = ManualClock::new();
    let app = app(&clock).await;
    let peer = "192.0.2.2:1";
    let r = get_at(&app, "/search?actual=hold", peer).await;
    assert_eq!(remaining(&r), 5);
    // A minute later the bucket is full again by itself.
    clock.advance(Duration::from_secs(60));
    let held = HELD.lock().unwrap().pop().unwrap();
    held.refund();
    // Refunding the old reservation gives nothing beyond the burst: the
    // next request of cost 5 sees 10 before it, 5 after.
    let r = get_at(&app, "/search?actual=5", peer).await;
    assert_eq!(remaining(&r), 5);
    // Half-way: a reservation of 5 taken on a full bucket, 15 s pass (2.5
    // units refill, the first of its units), then it is refunded: the 2.5
    // still owed come back, the bucket is full, not "full plus 2.5".
    clock.advance(Duration::from_secs(60));
    let r = get_at(&app, "/search?actual=hold", peer).await;
    assert_eq!(remaining(&r), 5);
    clock.advance(Duration::from_secs(15));
    HELD.lock().unwrap().pop().unwrap().refund();
    let r = get_at(&app, "/search?actual=5", peer).await;
    assert_eq!(remaining(&r), 5, "10 before it: never more than the burst");
    // A reservation behind 5 units of debt, refunded 30 s later: time
    // repays a charge from the moment it was made (the cell keeps no
    // history of what was ahead of it), so its 5 units count as repaid and
    // nothing comes back: 5 before the next request, not 10. (The price of
    // never handing back what time refilled: see `Limiter::refund`.)
    let r = get_at(&app, "/search?actual=hold", peer).await;
    assert_eq!(remaining(&r), 0);
    clock.advance(Duration::from_secs(30));
    HELD.lock().unwrap().pop().unwrap().refund();
    let r = get_at(&app, "/search?actual=5", peer).await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 0));
}

#[tokio::test]
async fn a_stacked_charge_settles_every_limit() {
    let clock = ManualClock::new();
    let app = app(&clock).await;
    let peer = "192.0.2.3:1";
    let r = get_at(&app, "/export?actual=2", peer).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = get_at(&app, "/export?actual=5", peer).await;
    // Each limit saw the first request settle at 2: 10 - 2 - 5 and
    // 100 - 2 - 5.
    assert_eq!(remaining(&r), 3, "the address is the tighter");
    let r = get_at(&app, "/export?actual=0", peer).await;
    // 10 - 2 - 5 = 3 left, a reservation of 5 does not fit: refused, and
    // the account was charged nothing for it.
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_secs(60));
    let r = get_at(&app, "/export?actual=0", peer).await;
    assert_eq!(r.status(), StatusCode::OK);
    // The account: 100 - 2 - 5 (the refused one cost nothing) - 5 reserved.
    assert_eq!(remaining(&r), 5, "the address is the tighter: 10 - 5");
}

/// Issue 26, item 2: a settlement above the reservation is charged to the
/// cell the reservation went to, shared or not. Here a /48 has spent its
/// budget of new keys, so its fresh /64s share one cell: a request that
/// reserved 5 and settled at 10 leaves that cell with 0, not 5.
#[tokio::test]
async fn settling_above_the_reservation_on_a_shared_cell_charges_it_there() {
    let clock = ManualClock::new();
    let text = format!("{CONFIG}\n[store]\nnew_keys_per_network = \"2/min\"\n");
    let app = app_with(&text, &clock).await;
    // Two /64s of two /56s: a /56 may bring in only a quarter of its
    // network's new keys.
    for i in 0..2 {
        let r = get_at(&app, "/search?actual=5", &format!("[2001:db8:9:{i}000::1]:1")).await;
        assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 5));
    }
    // The network's shared cell: reserved 5 of 10, settled at 10.
    let r = get_at(&app, "/search?actual=10", "[2001:db8:9:100::1]:1").await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 5));
    let r = get_at(&app, "/search?actual=5", "[2001:db8:9:101::1]:1").await;
    assert_eq!(
        (r.status(), remaining(&r)),
        (StatusCode::TOO_MANY_REQUESTS, 0),
        "the settlement's extra 5 were charged to the shared cell"
    );
    // Another /48 is not charged for it.
    let r = get_at(&app, "/search?actual=5", "[2001:db8:a::1]:1").await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 5));
}
