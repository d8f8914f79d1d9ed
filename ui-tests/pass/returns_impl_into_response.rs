// A handler returning `impl IntoResponse`.
use axum::response::IntoResponse;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn health() -> impl IntoResponse {
    (http::StatusCode::OK, [(http::header::CONTENT_TYPE, "text/plain")], "ok")
}

fn router() -> axum::Router<ratelimit::axum::RateLimit> {
    axum::Router::new().route("/health", axum::routing::get(health))
}

fn main() {
    let _ = router;
}
