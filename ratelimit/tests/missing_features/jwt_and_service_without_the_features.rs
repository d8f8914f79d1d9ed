// A `jwt_claim` key, a `jwt` step and a `service` step, with ratelimit built
// with `axum` only: one error each, naming the feature.
use ratelimit::rate_limit;

#[rate_limit(key = jwt_claim("sub"), resolve = [jwt, service, default])]
async fn me() -> &'static str {
    "me"
}

fn main() {
    let _ = me::<ratelimit::axum::RateLimit>;
}
