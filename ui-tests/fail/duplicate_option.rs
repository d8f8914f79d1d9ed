// The same option twice: `cost` is given two times.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = 2, cost = 3)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
