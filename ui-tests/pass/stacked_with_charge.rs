// Stacked attributes (one through the full path), a Charge argument, state
// on the first, a shadow limit, and default names for the later ones.
use axum::extract::{FromRef, Path};
use axum::routing::get;
use axum::Router;
use ratelimit::axum::{Charge, RateLimit};
use ratelimit::rate_limit;

#[derive(Clone, FromRef)]
struct App {
    rl: RateLimit,
}

#[rate_limit(key = ip, resolve = [profile("burst"), default])]
#[ratelimit::rate_limit(key = header("x-api-key"), resolve = [profile("daily"), default])]
#[rate_limit(key = route, resolve = [default], shadow, cost = 2)]
async fn handler(charge: Charge, Path(id): Path<u64>) -> String {
    charge.settle(1);
    id.to_string()
}

#[rate_limit(key = ip, resolve = [default], name = "a")]
#[rate_limit(key = ip, resolve = [default], name = "b")]
async fn pair() {}

fn main() {
    let _router: Router<App> = Router::new()
        .route("/{id}", get(handler))
        .route("/pair", get(pair));
}
