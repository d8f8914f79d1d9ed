// A route charged by its response's size, alone and stacked with a
// per-request limit, on a router.
use axum::{routing::get, Router};
use ratelimit::axum::RateLimit;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = response_bytes(per = 1024))]
async fn download() -> Vec<u8> {
    vec![0; 4096]
}

#[rate_limit(key = ip, resolve = [default], name = "export.bytes", cost = response_bytes(per = 65536))]
#[rate_limit(key = ip, resolve = [default], name = "export.requests", cost = 2)]
async fn export() -> &'static str {
    "export"
}

fn main() {
    let _app: Router<RateLimit> = Router::new()
        .route("/download", get(download))
        .route("/export", get(export));
}
