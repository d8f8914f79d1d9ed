// Extra tokens after the cost.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = 2 3)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
