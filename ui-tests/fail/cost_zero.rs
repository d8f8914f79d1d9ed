// A cost of zero.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = 0)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
