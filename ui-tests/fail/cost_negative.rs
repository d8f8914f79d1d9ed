// A negative cost.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = -1)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
