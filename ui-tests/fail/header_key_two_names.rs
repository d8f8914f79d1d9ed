// `header(...)` takes exactly one string literal.
use ratelimit::rate_limit;

#[rate_limit(key = header("x-api-key", "x-client-id"), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
