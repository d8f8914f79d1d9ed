// The cost written as a string literal.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = "2")]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
