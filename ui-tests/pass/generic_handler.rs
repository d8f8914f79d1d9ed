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

// Its output is a response only for the types it is routed with (checked
// where it is routed, as with axum): `Json<T>` needs `T: Serialize`, which
// the handler's own bounds do not say.
#[rate_limit(key = ip, resolve = [default], layer)]
async fn echo<T: Default + Send + 'static>() -> axum::Json<T> {
    axum::Json(T::default())
}

fn echo_router(rate_limit: &ratelimit::axum::RateLimit) -> Router {
    Router::new()
        .route("/echo", get(echo::<u32>))
        .layer(rate_limit.layer())
}

fn main() {
    let _ = (router, echo_router);
}
