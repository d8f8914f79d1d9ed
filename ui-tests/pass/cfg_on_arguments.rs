// `#[cfg]` on an argument, and a handler compiled out by a `#[cfg]` below
// the attribute (its rule type goes with it, no dead-code warning).
#![deny(warnings)]
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use ratelimit::axum::RateLimit;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn handler(
    #[cfg(any())] _never: State<RateLimit>,
    #[cfg(all())] State(rate_limit): State<RateLimit>,
) -> String {
    format!("{}", rate_limit.limiter().store().len())
}

#[rate_limit(key = ip, resolve = [default])]
#[cfg(any())]
async fn compiled_out() -> &'static str {
    "never"
}

fn router(rate_limit: RateLimit) -> Router {
    Router::new().route("/x", get(handler)).with_state(rate_limit)
}

fn main() {
    let _ = router;
}
