// `state` on a router whose state gives no RateLimit: a compile error, not a
// 500 at run time.
use axum::routing::get;
use axum::Router;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], state)]
async fn handler() -> &'static str {
    "ok"
}

pub fn router() -> Router {
    Router::new().route("/s", get(handler))
}

fn main() {}
