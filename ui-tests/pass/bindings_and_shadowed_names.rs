// `mut` bindings keep their names, and user items named like prelude types
// or primitives cannot break the expansion (it uses absolute paths).
#![allow(non_camel_case_types, dead_code)]
use axum::routing::post;
use axum::Router;
use ratelimit::rate_limit;

type str = ();
type u32 = ();
type bool = ();
struct Debug;
struct Clone;
mod core {}

#[rate_limit(key = ip, resolve = [default], cost = 2, layer)]
async fn shout(mut body: String) -> String {
    body.push('!');
    body
}

fn router(rate_limit: &ratelimit::axum::RateLimit) -> Router {
    Router::new().route("/shout", post(shout)).layer(rate_limit.layer())
}

fn main() {
    let _ = router;
}
