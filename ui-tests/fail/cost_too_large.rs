// A cost that does not fit in a u32.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = 5000000000)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
