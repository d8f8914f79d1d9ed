// A router with no state and the runtime installed as a layer, but the
// attribute without `layer`: a compile error naming both fixes.
use axum::routing::get;
use axum::Router;
use ratelimit::axum::RateLimit;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

pub fn router(rate_limit: RateLimit) -> Router {
    Router::new().route("/s", get(handler)).layer(rate_limit.layer())
}

fn main() {}
