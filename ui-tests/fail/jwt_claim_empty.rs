// An empty claim name.
use ratelimit::rate_limit;

#[rate_limit(key = jwt_claim(""), resolve = [jwt, default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
