// A dotted claim path with an empty segment.
use ratelimit::rate_limit;

#[rate_limit(key = jwt_claim("a..b"), resolve = [jwt, default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
