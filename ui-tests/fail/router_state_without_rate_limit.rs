// The runtime is looked for in the router's state: a router whose state
// holds no `RateLimit` is a compile error naming the fix, not a 500 at run
// time. Here the state is an application's own, without `FromRef`.
use axum::routing::get;
use axum::Router;
use ratelimit::rate_limit;

#[derive(Clone)]
struct AppState {
    _db: String,
}

#[rate_limit(key = ip, resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

pub fn router(state: AppState) -> Router {
    Router::new().route("/s", get(handler)).with_state(state)
}

fn main() {}
