// A handler with extractors, a pattern in an argument, and the body (`String`)
// last; the router checks that the rewritten handler is still an axum `Handler`.
use std::collections::HashMap;

use axum::extract::{Path, Query};
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn update_item(
    Path(id): Path<u64>,
    Query(params): Query<HashMap<String, String>>,
    body: String,
) -> String {
    format!("item {id}: {} params, {} bytes", params.len(), body.len())
}

fn router() -> axum::Router<ratelimit::axum::RateLimit> {
    axum::Router::new().route("/items/{id}", axum::routing::post(update_item))
}

fn main() {
    // Not called: building the router only has to type-check.
    let _ = router;
}
