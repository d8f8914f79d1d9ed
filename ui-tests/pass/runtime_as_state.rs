// The runtime as the router's state: no layer, no extra allocation per
// request. The handler's other extractors see the same state.
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use ratelimit::axum::RateLimit;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn handler(State(rate_limit): State<RateLimit>) -> String {
    format!("{} keys tracked", rate_limit.limiter().store().len())
}

fn router(rate_limit: RateLimit) -> Router {
    Router::new().route("/x", get(handler)).with_state(rate_limit)
}

fn main() {
    let _ = router;
}
