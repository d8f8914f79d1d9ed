// A generic handler whose type parameter only the caller names: the
// expansion passes it on to the handler body explicitly.
use axum::routing::get;
use axum::Router;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], layer)]
async fn answer<T: Default + ToString + Send + 'static, const N: usize>() -> String {
    format!("{} {}", T::default().to_string(), N)
}

fn router(rate_limit: &ratelimit::axum::RateLimit) -> Router {
    Router::new()
        .route("/u32", get(answer::<u32, 3>))
        .layer(rate_limit.layer())
}

fn main() {
    let _ = router;
}
