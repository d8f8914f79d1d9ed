// A cost literal too large even for a u64.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = 99999999999999999999999)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
