// Several limited handlers on one router, behind the rate-limit layer: checks
// that every rewritten handler implements axum's `Handler`.
use axum::routing::{get, post};
use axum::Router;
use ratelimit::axum::RateLimit;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], layer)]
async fn handler() -> &'static str {
    "x"
}

#[rate_limit(key = jwt_claim("sub"), resolve = [jwt, profile("standard"), default], name = "me.get", layer)]
async fn me() -> String {
    "me".to_owned()
}

#[rate_limit(key = header("x-api-key"), resolve = [service, default], cost = 5, shadow, layer)]
async fn upload(body: String) -> String {
    format!("{} bytes", body.len())
}

// Not called: it only has to type-check.
fn router(rate_limit: &RateLimit) -> Router {
    Router::new()
        .route("/x", get(handler))
        .route("/me", get(me))
        .route("/upload", post(upload))
        .layer(rate_limit.layer())
}

fn main() {
    let _ = router;
}
