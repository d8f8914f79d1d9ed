// A handler with no return type (it returns `()`).
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn ping() {}

fn router() -> axum::Router<ratelimit::axum::RateLimit> {
    axum::Router::new().route("/ping", axum::routing::get(ping))
}

fn main() {
    let _ = router;
}
