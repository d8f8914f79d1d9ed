// A claim path containing whitespace.
use ratelimit::rate_limit;

#[rate_limit(key = jwt_claim("org. id"), resolve = [jwt, default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
